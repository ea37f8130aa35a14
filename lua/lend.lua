#!lua flags=allow-oom
-- uses:
-- lend: moves byte limit between shards (mooncake_redis/admission.py, borrowing.py), one
-- shard per call. Limit is only ever taken from a shard's spare (limit - used_bytes) before
-- it is given to another shard, so the limits never add up to more than capacity_bytes.
-- A keeper run stamps every shard with its generation before it reads them; a give names
-- the generation its take saw on the donor and is refused when the receiving shard's
-- differs: a keeper that read the donor after the take may have counted the taken bytes
-- as lost and shared them out again, and they must not be given twice.
-- KEYS: 1 the shard's stats
-- ARGV: 1 'stamp' | 'take' | 'give', 2 the shard's default limit (0 = none; a limit in the
--       stats wins), 3 a generation, 4 bytes (take: at most; give: exactly)
-- Returns: stamp (the keeper's read; ARGV 3 becomes the shard's generation):
--          {used_bytes, limit}; take: {bytes taken, the shard's generation ('' = none)},
--          refusing (0) if ARGV 3 is not '' and differs from it; give: the bytes given
--          (0 if ARGV 3 differs from the shard's generation)
local op, default_limit, generation, bytes =
  ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]) or 0
local v = redis.call('HMGET', KEYS[1], 'used_bytes', 'limit', 'gen')
local used, limit, current = tonumber(v[1]) or 0, tonumber(v[2]) or default_limit, v[3] or ''
if op == 'stamp' then
  redis.call('HSET', KEYS[1], 'gen', generation)
  return {used, limit}
end
if op == 'take' then
  if generation ~= '' and generation ~= current then return {0, current} end
  local taken = math.min(bytes, limit - used)
  if taken <= 0 then return {0, current} end
  redis.call('HSET', KEYS[1], 'limit', limit - taken)
  return {taken, current}
end
if generation ~= current or bytes <= 0 then return 0 end
redis.call('HSET', KEYS[1], 'limit', limit + bytes)
return bytes
