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
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): per parent one small record, one HMGET
-- (its counters and the child fields of this call) and one HSET; no generic node record.
local batch = ARGV[4]
local now_s = num(now())

-- The parents in first-seen order, each with the child fields this call names.
local order, names = {}, {}
for a = 5, #ARGV, 6 do
  local key = KEYS[tonumber(ARGV[a])]
  local name = ARGV[a + 3] ~= '' and ARGV[a + 3] or ARGV[a + 2]
  local list = names[key]
  if list then list[#list + 1] = name else names[key] = {name}; order[#order + 1] = key end
end

-- A parent's record: its p field as read (a shell's '?<batch>' marker split off into lb),
-- the counters the leaf index needs, its child fields (false = absent) and what to write.
local parents = {}
local function parent_of(key, hash)
  local r = parents[key]
  if r then return r end
  local list = names[key]
  local v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'lm', unpack(list))
  local p, lb = v[1], nil
  if p and string.byte(p, 1) == 63 then lb, p = string.sub(p, 2), nil end
  r = {hash = hash, p = p, lb = lb, mark = false, nc = tonumber(v[2]), no = tonumber(v[3]),
    np = tonumber(v[4]), ps = tonumber(v[5]), nh = tonumber(v[6]), ns = tonumber(v[7]),
    lm = tonumber(v[8]), put = {}}
  r.exists = r.no ~= nil or r.nc ~= nil
  r.nc0, r.shell0 = r.nc, (r.no or 0) == 0 and (r.nc or 0) > 0
  r.set0, r.score0 = leaf_score(r.no, r.nc, r.nh, r.ns, r.lm, r.np, r.ps)
  for i = 1, #list do r[list[i]] = v[8 + i] or false end
  parents[key] = r
  return r
end

local results = {}
local created = 0
for a = 5, #ARGV, 6 do
  local r = parent_of(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local child, epoch = ARGV[a + 2], tonumber(ARGV[a + 4])
  local name = ARGV[a + 3] ~= '' and ARGV[a + 3] or child
  if not r.exists then
    r.exists, created = true, created + 1
    r.lb, r.mark = batch, true  -- every child of this shell comes from this batch, for now
  elseif ARGV[a + 5] == '1' and not r.p and not r.lb and (r.nc or 0) == 0 then
    r.lb, r.mark = batch, true  -- no parent, no child yet: its children are this batch's
  elseif r.lb and r.lb ~= batch then
    r.lb, r.mark = nil, true
  end
  local current = tonumber(r[name])
  local written = 0
  if not current or epoch > current then
    if not current then r.nc = (r.nc or 0) + 1 end
    local e = num(epoch)
    r[name] = e
    r.put[#r.put + 1] = name
    r.put[#r.put + 1] = e
    -- scored by Redis time, not by the epoch: a writer's epochs may run ahead of the
    -- clock (one per batch, at least past a fence), and the resolver's grace is time
    redis.call('ZADD', PENDING, now_s, r.hash .. '|' .. child .. '|' .. e)
    written = 1
  end
  results[#results + 1] = written
end

-- Writes back each parent (one HSET; an HDEL only for a batch marker that goes), moves it
-- in the leaf index, and counts the shells and nodes made in the shard's stats.
local wrote, shells = false, 0
for i = 1, #order do
  local key = order[i]
  local r = parents[key]
  local put = r.put
  if r.nc ~= r.nc0 then put[#put + 1] = 'nc'; put[#put + 1] = num(r.nc) end
  if r.mark then
    if r.p or r.lb then
      put[#put + 1] = 'p'; put[#put + 1] = r.p or ('?' .. r.lb)
    else
      redis.call('HDEL', key, 'p')
      wrote = true
    end
  end
  if #put > 0 then
    redis.call('HSET', key, unpack(put))
    wrote = true
  end
  local shell = (r.no or 0) == 0 and (r.nc or 0) > 0
  if shell ~= r.shell0 then shells = shells + (shell and 1 or -1) end
  move_leaf(r.hash, r.set0, r.score0, leaf_score(r.no, r.nc, r.nh, r.ns, r.lm, r.np, r.ps))
end
if created ~= 0 then redis.call('HINCRBY', STATS, 'nodes', created) end
if shells ~= 0 then redis.call('HINCRBY', STATS, 'shells', shells) end
if wrote then redis.call('HINCRBY', STATS, 'writes', 1) end
return results
