#!lua flags=allow-oom,allow-cross-slot-keys
-- link: step 1 of a link whose child lives on another Redis node, for parents of the
-- shards this node serves: each parent lists its child at the link's epoch (created as a
-- shell if absent), and a pending entry records the link until the child's step 2
-- confirms it (or the resolver settles it). A link within one node needs none of this:
-- put.lua writes both sides in one call. It runs even at maxmemory (allow-oom): a step 2
-- sent behind it must never find it refused, and a step 2 refused for memory only leaves
-- a pending link to settle.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 batch id, then 6 per item: the parent's shard
--       tag, parent hash, child hash, the child's field name ('' = the child hash itself,
--       as for every 64-hex child; else c:<hash>), epoch, whether this batch also writes
--       the parent (0|1: then an existing parent without parent or children gets the
--       batch marker too, sparing its step 2 a cycle walk)
-- Returns: one per item: 1 if the child field was written or raised (pending entry added),
--          0 if the parent already listed the child at this epoch or a newer one
local batch = A[8]
local now_s = num(now())
local results = {}
for a = 9, #A, 6 do
  local s, parent, child, epoch = shard(A[a]), A[a + 1], A[a + 2], A[a + 4]
  local f = A[a + 3] ~= '' and A[a + 3] or child
  local q = node(s, parent, {f})
  if not q.exists then
    create(q)
    q.lb, q.d.p = batch, true  -- every child of this shell comes from this batch, for now
  elseif A[a + 5] == 1 and not q.p and not q.lb and (q.nc or 0) == 0 then
    q.lb, q.d.p = batch, true  -- no parent, no child yet: its children are this batch's
  elseif q.lb and q.lb ~= batch then
    q.lb, q.d.p = nil, true
  end
  local current = tonumber(field(q, f))
  if not current or epoch > current then
    if not current then add(q, 'nc', 1) end
    local e = num(epoch)
    put_field(q, f, e)
    -- scored by Redis time, not by the epoch: a writer's epochs may run ahead of the
    -- clock (one per batch, at least past a fence), and the resolver's grace is time
    local pending = s.pending
    if not pending then
      pending = {}
      s.pending = pending
    end
    pending[#pending + 1] = now_s
    pending[#pending + 1] = parent .. '|' .. child .. '|' .. e
    results[#results + 1] = 1
  else
    results[#results + 1] = 0
  end
end
finish()
return results
