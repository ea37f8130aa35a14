#!lua flags=allow-oom
-- lock_token: take, renew or release a lock that holds its owner's token. Taking it again
-- with the same token succeeds (a re-send after a lost reply finds its own lock); renew
-- and release act only while the lock still holds our token (it may have expired and
-- been taken by another worker meanwhile).
-- uses:
-- KEYS: 1 lock
-- ARGV: 1 "acquire" | "renew" | "release", 2 token, 3 ttl ms (acquire, renew)
-- Returns: 1 if taken, renewed or released, 0 if the lock is (or was) another owner's
local held = redis.call('GET', KEYS[1])
if ARGV[1] == 'acquire' then
  if held and held ~= ARGV[2] then return 0 end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if held ~= ARGV[2] then return 0 end
if ARGV[1] == 'release' then return redis.call('DEL', KEYS[1]) end
return redis.call('PEXPIRE', KEYS[1], ARGV[3])
