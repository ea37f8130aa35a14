-- recount_shard: fsck repair of one shard's object index and counters from the objects
-- themselves: drops index entries of objects that no longer exist, restores each
-- object's eviction score, and recomputes used_bytes and objects.
-- KEYS: 1 objects, 2 stats, then 1 per indexed object: obj (all in one shard)
-- ARGV: then 1 per indexed object: key (exactly the members of objects)
-- Returns: {"recounted", used_bytes, objects} | {"changed"} (the index changed since the
--          caller read it: read again and retry)
local objects_key, stats_key = KEYS[1], KEYS[2]
local FIRST_OBJECT = 3
if redis.call('ZCARD', objects_key) ~= #KEYS - FIRST_OBJECT + 1 then return {'changed'} end
local used, count = 0, 0
for i = FIRST_OBJECT, #KEYS do
  local key = ARGV[i - FIRST_OBJECT + 1]
  if not redis.call('ZSCORE', objects_key, key) then return {'changed'} end
end
for i = FIRST_OBJECT, #KEYS do
  local key = ARGV[i - FIRST_OBJECT + 1]
  local f = read_object(KEYS[i])
  if not f[2] then
    redis.call('ZREM', objects_key, key)
  else
    used = used + tonumber(f[1])
    count = count + 1
    redis.call('ZADD', objects_key, score_arg(object_score(f[2], f[5], f[3])), key)
  end
end
redis.call('HSET', stats_key, 'used_bytes', used, 'objects', count)
return {'recounted', used, count}
