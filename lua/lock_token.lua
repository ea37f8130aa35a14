-- lock_token: renew or release a lock only while it still holds our token (it may have
-- expired and been taken by another worker meanwhile).
-- KEYS: 1 lock
-- ARGV: 1 "renew" | "release", 2 token, 3 ttl ms (renew only)
-- Returns: 1 if renewed or released, 0 if the lock was no longer ours
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
if ARGV[1] == 'release' then return redis.call('DEL', KEYS[1]) end
return redis.call('PEXPIRE', KEYS[1], ARGV[3])
