#!lua flags=allow-oom
-- repair_node: fsck --repair for one node: recompute its counters from its own fields and
-- put it in exactly the leaf index it belongs to. An empty node is deleted as any other
-- (its unlink recorded and returned). The shard's stats are recount_shard's job.
-- uses: nodes
-- KEYS: 1-7 the shard's keys, 8 the node
-- ARGV: 1-3 header (_lib.lua), 4 node hash
-- Returns: {'repaired' | 'absent', intents: parent, child, epoch, ...}
local n = node(KEYS[8], ARGV[4])
local all = redis.call('HGETALL', n.key)
if #all == 0 then return {'absent', {}} end
n.exists = true
for _, f in ipairs({'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}) do set(n, f, nil) end
local used, objects = d_used, d_objects
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'o:' then
    local state, size, t, pins, _, reps = unpack_object(all[i + 1])
    if state then count_object(n, 1, state, size, t, pins, reps) end
  elseif is_child_field(f) then
    add(n, 'nc', 1)
  end
end
d_used, d_objects = used, objects  -- counters only: the stats are recounted apart
seg_delta = {}
n.shell0 = (n.no or 0) == 0 and (n.nc or 0) > 0  -- the shells count is recount_shard's too
redis.call('ZREM', LEAVES, n.hash)
redis.call('ZREM', SOFT_LEAVES, n.hash)
n.leaf_set, n.leaf_score = nil, nil
finish()
return {'repaired', flat(intents)}
