#!lua flags=allow-oom
-- link: step 1 of a link, for parents of one shard: each parent lists its child at the
-- link's epoch (created as a shell if absent), and a pending entry records the link until
-- the child's step 2 confirms it (or the resolver settles it). It runs even at maxmemory
-- (allow-oom): a step 2 sent behind it must never find it refused, and a step 2 refused
-- for memory only leaves a pending link to settle.
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, then 6 per item: parent key index, parent hash,
--       child hash, the child's field name in the parent ('' = the child hash itself, as for
--       every 64-hex child; else c:<hash>), epoch, whether this batch also writes the
--       parent (0|1: then an existing parent without parent or children gets the batch
--       marker too, sparing its step 2 a cycle walk)
-- Returns: one per item: 1 if the child field was written or raised (pending entry added),
--          0 if the parent already listed the child at this epoch or a newer one
local batch = ARGV[4]
local function field_name(a)
  return ARGV[a + 3] ~= '' and ARGV[a + 3] or ARGV[a + 2]
end
for a = 5, #ARGV, 6 do want(KEYS[tonumber(ARGV[a])], field_name(a)) end

local results = {}
for a = 5, #ARGV, 6 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local child, epoch, name = ARGV[a + 2], tonumber(ARGV[a + 4]), field_name(a)
  if not n.exists then
    create(n)
    n.lb = batch  -- every child of this shell comes from this batch, for now
    n.d.p = true
  elseif ARGV[a + 5] == '1' and not n.p and not n.lb and (n.nc or 0) == 0 then
    n.lb = batch  -- no parent, no child yet: its children are this batch's, for now
    n.d.p = true
  elseif n.lb and n.lb ~= batch then
    n.lb = nil
    n.d.p = true
  end
  local current = tonumber(field(n, name))
  local written = 0
  if not current or epoch > current then
    if not current then add(n, 'nc', 1) end
    put_field(n, name, num(epoch))
    -- scored by Redis time, not by the epoch: a writer's epochs may run ahead of the
    -- clock (one per batch, at least past a fence), and the resolver's grace is time
    redis.call('ZADD', PENDING, num(now()), n.hash .. '|' .. child .. '|' .. num(epoch))
    written = 1
  end
  results[#results + 1] = written
end
finish()
return results
