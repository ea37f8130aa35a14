#!lua flags=allow-oom
-- link: step 1 of a link, for parents of one shard: each parent lists its child at the
-- link's epoch (created as a shell if absent), and a pending entry records the link until
-- the child's step 2 confirms it (or the resolver settles it). It runs even at maxmemory
-- (allow-oom): a step 2 sent behind it must never find it refused, and a step 2 refused
-- for memory only leaves a pending link to settle.
-- uses: leaves
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, then 6 per item: parent key index, parent hash,
--       child hash, the child's field name in the parent ('' = the child hash itself, as for
--       every 64-hex child; else c:<hash>), epoch, whether this batch also writes the
--       parent (0|1: then an existing parent without parent or children gets the batch
--       marker too, sparing its step 2 a cycle walk)
-- Returns: one per item: 1 if the child field was written or raised (pending entry added),
--          0 if the parent already listed the child at this epoch or a newer one
--
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): a run of items naming the same parent
-- (the client sends each parent's items together) is one HMGET (its counters and the run's
-- child fields) and one HSET, with locals for its state; a parent named again in a later
-- run is read again, after the first run's write.
local batch = ARGV[4]
local now_s = num(now())
local results = {}
local created, shells, wrote = 0, 0, false

local function field_name(a)
  return ARGV[a + 3] ~= '' and ARGV[a + 3] or ARGV[a + 2]
end

local a, last = 5, #ARGV
while a <= last do
  local index, hash = ARGV[a], ARGV[a + 1]
  local stop = a + 6
  while stop <= last and ARGV[stop] == index do stop = stop + 6 end
  local key = KEYS[tonumber(index)]
  local v, seen
  if stop == a + 6 then
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'lm', field_name(a))
  else
    local list = {}
    for b = a, stop - 1, 6 do list[#list + 1] = field_name(b) end
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'lm', unpack(list))
    seen = {}  -- the child fields as this run leaves them (a child named twice)
  end
  local p, lb = v[1], nil
  if p and string.byte(p, 1) == 63 then lb, p = string.sub(p, 2), nil end
  local exists = v[2] or v[3]
  local nc0 = tonumber(v[2]) or 0
  local nc, no = nc0, tonumber(v[3])
  local set0, score0
  if no and nc == 0 then  -- only a node with objects and no children is a leaf
    set0, score0 = leaf_score(no, nc, tonumber(v[6]), tonumber(v[7]), tonumber(v[8]),
      tonumber(v[4]), tonumber(v[5]))
  end
  local shell0 = (no or 0) == 0 and nc > 0
  local mark, put, at = false, {}, 0
  local j = 8
  for b = a, stop - 1, 6 do
    j = j + 1
    local child, epoch, name = ARGV[b + 2], tonumber(ARGV[b + 4]), field_name(b)
    if not exists then
      exists, created = true, created + 1
      lb, mark = batch, true  -- every child of this shell comes from this batch, for now
    elseif ARGV[b + 5] == '1' and not p and not lb and nc == 0 then
      lb, mark = batch, true  -- no parent, no child yet: its children are this batch's
    elseif lb and lb ~= batch then
      lb, mark = nil, true
    end
    local stored = v[j]
    if seen and seen[name] ~= nil then stored = seen[name] end
    local current = tonumber(stored)
    local written = 0
    if not current or epoch > current then
      if not current then nc = nc + 1 end
      local e = num(epoch)
      if seen then seen[name] = e end
      put[at + 1] = name
      put[at + 2] = e
      at = at + 2
      -- scored by Redis time, not by the epoch: a writer's epochs may run ahead of the
      -- clock (one per batch, at least past a fence), and the resolver's grace is time
      redis.call('ZADD', PENDING, now_s, hash .. '|' .. child .. '|' .. e)
      written = 1
    end
    results[#results + 1] = written
  end
  -- the parent written back: one HSET (an HDEL only for a batch marker that goes), its
  -- place in the leaf index, and the shells and nodes made, for the shard's stats
  if nc ~= nc0 then put[at + 1] = 'nc'; put[at + 2] = num(nc); at = at + 2 end
  if mark then
    if p or lb then
      put[at + 1] = 'p'; put[at + 2] = p or ('?' .. lb); at = at + 2
    else
      redis.call('HDEL', key, 'p')
      wrote = true
    end
  end
  if at > 0 then
    redis.call('HSET', key, unpack(put))
    wrote = true
  end
  local shell = (no or 0) == 0 and nc > 0
  if shell ~= shell0 then shells = shells + (shell and 1 or -1) end
  if set0 and nc > 0 then redis.call('ZREM', set0, hash) end
  a = stop
end
if created ~= 0 then redis.call('HINCRBY', STATS, 'nodes', created) end
if shells ~= 0 then redis.call('HINCRBY', STATS, 'shells', shells) end
if wrote then redis.call('HINCRBY', STATS, 'writes', 1) end
return results
