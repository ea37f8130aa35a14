#!lua flags=allow-oom,allow-cross-slot-keys
-- repair_node: fsck --repair for one node: recompute its counters from its own fields and
-- put it in exactly the leaf index it belongs to. An empty node is deleted as any other
-- (unlinked from its parent, here or by an intent returned). The shard's stats are
-- recount_shard's job.
-- uses: nodes
-- KEYS: none, or one key of the node's shard (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 the node's shard tag, 9 node hash
-- Returns: {'repaired' | 'absent', intents: parent, child, epoch, ...}
local s = shard(A[8])
local n = node(s, A[9])
local all = redis.call('HGETALL', n.key)
if #all == 0 then return {'absent', {}} end
n.exists = true
for _, f in ipairs({'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}) do set(n, f, nil) end
local used, objects = s.du, s.dobj
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'o:' then
    local state, size, t, pins, _, reps = unpack_object(all[i + 1])
    if state then count_object(n, 1, state, size, t, pins, reps) end
  elseif is_child_field(f) then
    add(n, 'nc', 1)
  end
end
s.du, s.dobj, s.seg = used, objects, nil  -- counters only: the stats are recounted apart
n.shell0 = (n.no or 0) == 0 and (n.nc or 0) > 0  -- the shells count is recount_shard's too
n.existed = true
move_leaf(s, n.hash, 1, nil, nil, nil)
move_leaf(s, n.hash, 2, nil, nil, nil)
n.leaf_set, n.leaf_score = nil, nil
finish()
return {'repaired', flat(intents, 3)}
