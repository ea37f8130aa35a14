#!lua flags=allow-oom
-- recount_shard: fsck --repair for a shard's stats: used_bytes, objects and nodes summed
-- from the nodes themselves, fences counted, and leaf index entries of nodes that no
-- longer exist dropped.
-- The caller lists every node of the shard it scanned and the shard's write counter it
-- saw before scanning; if any write script ran since, the list may be stale: nothing is
-- changed and the caller scans again.
-- uses: objects
-- KEYS: 1-7 the shard's keys, then every node of the shard
-- ARGV: 1-3 header (_lib.lua), 4 the write counter seen before the scan, then one node hash
--       per node key
-- Returns: {'recounted', used_bytes, objects, nodes, stale leaf entries dropped} or
--          {'changed'}
-- The bytes per segment (su:<segment>) and the shells (nodes with children and no
-- objects) are recounted too.
if (redis.call('HGET', STATS, 'writes') or '0') ~= ARGV[4] then return {'changed'} end
local used, objects, present, shells = 0, 0, {}, 0
for i = 8, #KEYS do
  local all = redis.call('HGETALL', KEYS[i])
  if #all > 0 then
    present[ARGV[i - 3]] = true
    local own, children = 0, 0
    for j = 1, #all, 2 do
      if is_child_field(all[j]) then children = children + 1 end
      if string.sub(all[j], 1, 2) == 'o:' then
        own = own + 1
        local state, size, _, _, _, reps = unpack_object(all[j + 1])
        if state then
          used = used + charged(size, reps)
          objects = objects + 1
          count_segments(reps, 1, size)
        end
      end
    end
    if own == 0 and children > 0 then shells = shells + 1 end
  end
end
local stats = redis.call('HKEYS', STATS)
for _, f in ipairs(stats) do
  if string.sub(f, 1, 3) == 'su:' and not seg_delta[string.sub(f, 4)] then
    redis.call('HDEL', STATS, f)
  end
end
for segment, bytes in pairs(seg_delta) do
  redis.call('HSET', STATS, 'su:' .. segment, num(bytes))
end
local nodes, dropped = 0, 0
for _ in pairs(present) do nodes = nodes + 1 end
for _, index in ipairs({LEAVES, SOFT_LEAVES}) do
  for _, member in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    if not present[member] then
      redis.call('ZREM', index, member)
      dropped = dropped + 1
    end
  end
end
local fences = redis.call('ZCARD', FENCES)
redis.call('HSET', STATS, 'used_bytes', num(used), 'objects', num(objects), 'nodes', num(nodes),
  'fences', fences, 'shells', num(shells))
return {'recounted', num(used), num(objects), num(nodes), dropped}
