-- recount_shard: fsck repair of one shard's object index and counters from the objects
-- themselves: drops index entries of objects that no longer exist, restores each
-- object's eviction score, and recomputes used_bytes and objects.
-- KEYS: 1 objects, 2 stats, then 1 per indexed object: obj (all in one shard)
-- ARGV: then 1 per indexed object: key (exactly the members of objects)
-- Returns: {"recounted", used_bytes, objects} | {"changed"} (the index changed since the
--          caller read it: read again and retry)
local objects_key, stats_key = KEYS[1], KEYS[2]
local FIRST_OBJECT = 3
if not holds_exactly(objects_key, 1, #KEYS - FIRST_OBJECT + 1) then return {'changed'} end
local used, count = 0, 0
for _, f in ipairs(rescore_objects(objects_key, FIRST_OBJECT, 1)) do
  used = used + tonumber(f[1])
  count = count + 1
end
redis.call('HSET', stats_key, 'used_bytes', used, 'objects', count)
return {'recounted', used, count}
