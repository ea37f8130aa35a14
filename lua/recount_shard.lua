#!lua flags=allow-oom,allow-cross-slot-keys
-- recount_shard: fsck --repair for a shard's stats: used_bytes, objects and nodes summed
-- from the nodes themselves, fences counted, and leaf index entries of nodes that no
-- longer exist dropped.
-- The caller lists every node of the shard it scanned and the shard's write counter it
-- saw before scanning; if any write script ran since, the list may be stale: nothing is
-- changed and the caller scans again.
-- uses: objects
-- KEYS: none, or one key of the shard (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 the shard's tag, 9 the write counter seen before
--       the scan, then 1 per item: node hash (every node of the shard)
-- Returns: {'recounted', used_bytes, objects, nodes, stale leaf entries dropped} or
--          {'changed'}
-- The bytes per segment (su:<segment>) and the shells (nodes with children and no
-- objects) are recounted too; the write and link counters and the limit are mended if
-- they are no integers.
local s = shard(A[8])
local STATS = s.stats
if (redis.call('HGET', STATS, 'writes') or '0') ~= A[9] then return {'changed'} end
local used, objects, present, shells = 0, 0, {}, 0
for a = 10, #A do
  local all = redis.call('HGETALL', s.nbase .. A[a])
  if #all > 0 then
    present[A[a]] = true
    local own, children = 0, 0
    for j = 1, #all, 2 do
      if is_child_field(all[j]) then children = children + 1 end
      if string.sub(all[j], 1, 2) == 'o:' then
        own = own + 1
        local state, size, _, _, _, reps = unpack_object(all[j + 1])
        if state then
          used = used + charged(size, reps)
          objects = objects + 1
          count_segments(s, reps, 1, size)
        end
      end
    end
    if own == 0 and children > 0 then shells = shells + 1 end
  end
end
local seg_bytes = s.seg or {}
local stats = redis.call('HKEYS', STATS)
for _, f in ipairs(stats) do
  if string.sub(f, 1, 3) == 'su:' and not seg_bytes[string.sub(f, 4)] then
    redis.call('HDEL', STATS, f)
  end
end
for segment, bytes in pairs(seg_bytes) do
  redis.call('HSET', STATS, 'su:' .. segment, num(bytes))
end
local nodes, dropped = 0, 0
for _ in pairs(present) do nodes = nodes + 1 end
for _, index in ipairs({s.base .. 'leaves', s.base .. 'soft_leaves'}) do
  for _, member in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    if not present[member] then
      redis.call('ZREM', index, member)
      dropped = dropped + 1
    end
  end
end
-- counters that are no integers (planted): writes and links start again from 0 (a change
-- either way for whoever read them), a limit goes (the default share holds)
for _, f in ipairs({'writes', 'links', 'limit'}) do
  local v = redis.call('HGET', STATS, f)
  local digits = v and string.match(v, '^%-?(%d+)$')
  if v and not (digits and #digits <= 18) then
    if f == 'limit' then redis.call('HDEL', STATS, f) else redis.call('HSET', STATS, f, '0') end
  end
end
local fences = redis.call('ZCARD', s.base .. 'fences')
redis.call('HSET', STATS, 'used_bytes', num(used), 'objects', num(objects), 'nodes', num(nodes),
  'fences', fences, 'shells', num(shells))
return {'recounted', num(used), num(objects), num(nodes), dropped}
