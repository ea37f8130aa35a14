#!lua flags=allow-oom
-- unlink: drop children from their parents, the parents all in one shard. A child field
-- goes only if it still holds the epoch the caller names, so a link that a writer renewed
-- meanwhile (a newer epoch) stays. A parent left with no objects and no children is
-- deleted, and its own unlink recorded and returned (the cascade goes on upward); one left
-- with objects and no children becomes a leaf at once, with its own score.
-- uses: leaves deaths
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), then 6 per item: parent key index, parent hash, child hash,
--       the child's field name ('' = the child hash, as link.lua), epoch ('' = drop no
--       field), pending entry to drop ('' = none)
-- Returns: {one per item: 1 if the child field was removed else 0;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft-pinned (0|1), ...}
--
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): the items of one parent that come one
-- after another are a run: one HMGET of its counters and the children's fields, then one
-- HSET/HDEL, or for a parent left empty its DEL, fence and outbox entry, collected and
-- written once per call, as the pending entries (one ZREM). A parent met again after
-- other parents' items is read again (its earlier run is written back); one deleted in
-- this call has no child left.
-- HMGET arguments: the counters, then the fields of the run's children (11 on)
local fields = {'p', 'pe', 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'b', 'lm'}
local results, rank, pending, new_leaves = {}, {}, {}, {}
local runs, interleaved, wrote = 0, false, false

-- The run of items at ARGV[first], ARGV[first + 6], ... ARGV[last] (one parent).
local function unlink_run(first, last)
  local key, hash = KEYS[tonumber(ARGV[first])], ARGV[first + 1]
  runs = runs + 1
  if rank[hash] then interleaved = true else rank[hash] = runs end
  local k = 0
  for a = first, last, 6 do
    if ARGV[a + 5] ~= '' then pending[#pending + 1] = ARGV[a + 5] end
    if ARGV[a + 4] ~= '' then
      k = k + 1
      fields[10 + k] = ARGV[a + 3] ~= '' and ARGV[a + 3] or ARGV[a + 2]
    end
  end
  if k == 0 or dead[key] then  -- no field to drop, or none left
    for _ = first, last, 6 do results[#results + 1] = 0 end
    return
  end
  local v = redis.call('HMGET', key, unpack(fields, 1, 10 + k))
  local p = v[1]
  if p and string.byte(p, 1) == 63 then p = nil end  -- '?': a shell's batch marker
  local pe, nc0, no, np = tonumber(v[2]), tonumber(v[3]), tonumber(v[4]), tonumber(v[5])
  local ps, nh, ns, b, lm = tonumber(v[6]), tonumber(v[7]), tonumber(v[8]), tonumber(v[9]),
    tonumber(v[10])
  local nc, i = nc0, 0
  for a = first, last, 6 do
    local removed = 0
    if ARGV[a + 4] ~= '' then
      i = i + 1
      local current = v[10 + i]
      if current and tonumber(current) == tonumber(ARGV[a + 4]) then
        v[10 + i] = true
        for j = i + 1, k do  -- the same child named again in the run: gone by then
          if fields[10 + j] == fields[10 + i] then v[10 + j] = false end
        end
        nc = (nc or 0) - 1
        removed = 1
      end
    end
    results[#results + 1] = removed
  end
  if nc == nc0 then return end
  wrote = true
  local exists = no ~= nil or nc0 ~= nil
  local shell0 = (no or 0) == 0 and (nc0 or 0) > 0
  local set0, score0 = nil, nil
  if exists then set0, score0 = leaf_score(no, nc0, nh, ns, lm, np, ps) end
  if exists and (no or 0) == 0 and nc == 0 then
    delete_node(key, hash, set0, shell0, p, pe or 0)
    return
  end
  local drop = {}
  for j = 1, k do
    if v[10 + j] == true then drop[#drop + 1] = fields[10 + j] end
  end
  if nc == 0 then drop[#drop + 1] = 'nc' else redis.call('HSET', key, 'nc', num(nc)) end
  redis.call('HDEL', key, unpack(drop))
  local shell = exists and (no or 0) == 0 and nc > 0
  if shell ~= shell0 then d_shells = d_shells + (shell and 1 or -1) end
  if exists then
    local set1, score1 = leaf_score(no, nc, nh, ns, lm, np, ps)
    move_leaf(hash, set0, score0, set1, score1)
    if set1 and not set0 then
      new_leaves[#new_leaves + 1] = {hash, num(score1), num(b or 0),
        set1 == SOFT_LEAVES and '1' or '0'}
    end
  end
end

each_run(4, 6, unlink_run)
if #pending > 0 then in_slices('ZREM', PENDING, pending) end
write_deaths()
write_stats(wrote)
if interleaved then
  in_first_order(intents, rank, 2)
  in_first_order(new_leaves, rank, 1)
end
return {results, flat(intents), flat(new_leaves)}
