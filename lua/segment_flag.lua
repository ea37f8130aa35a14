#!lua flags=allow-oom
-- segment_flag: a segment's mounted flag in one shard's stats, guarded by the mount's
-- generation (the registry's mounted ms) so that a mount racing an unmount of the same
-- segment can never leave a flag set after the unmount cleared it: the unmount leaves a
-- tombstone x:<segment> = the generation it unmounted, and a flag of that generation or
-- an older one is refused from then on. A later mount has a newer generation.
-- uses:
-- KEYS: 1 a shard's stats
-- ARGV: 1 'mount' | 'unmount', 2 segment, 3 generation
-- Returns: 1 if the flag was set (mount) or cleared (unmount), 0 if a mount was refused
local stats, op, segment, generation = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if op == 'mount' then
  local unmounted = tonumber(redis.call('HGET', stats, 'x:' .. segment))
  if unmounted and unmounted >= generation then return 0 end
  redis.call('HSET', stats, 'm:' .. segment, 1)
  return 1
end
local unmounted = tonumber(redis.call('HGET', stats, 'x:' .. segment))
if not unmounted or generation > unmounted then
  redis.call('HSET', stats, 'x:' .. segment, generation)
end
redis.call('HDEL', stats, 'm:' .. segment)
return 1
