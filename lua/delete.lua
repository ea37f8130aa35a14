#!lua flags=allow-oom
-- delete: remove objects of one shard (remove, put_revoke, forced removal), each announced
-- on the events stream. A node left with no objects and no children is deleted in the same
-- script; its unlink from its parent is recorded (outbox) and returned for the caller to
-- run in the parent's shard.
-- uses: events leaves objects deaths
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 mode: 'remove' (complete and not leased), 'revoke'
--       (processing, by its own writer), 'reclaim' (processing, started at least the
--       release timeout ago, by any writer: the monitor's sweep), 'force' (anything), then
--       4 per item: node key index, node hash, key suffix, writer token
-- Returns: {one per item: 'OK' or NOT_FOUND, LEASED, INVALID_STATE;
--           intents: parent, child, epoch, ...}
--
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): the items of one node that come one
-- after another (a page's keys) are a run: one HMGET of the node's counters and the run's
-- objects, then one HSET/HDEL of what changed, or, for a node left empty, its DEL, index
-- entry, fence and outbox entry, collected and written once per call. A node met again
-- after other nodes' items is read again (its earlier run is written back); one deleted
-- in this call has no object left to find.
local mode = ARGV[4]
local kind = (mode == 'revoke' or mode == 'reclaim') and 'revoked' or 'removed'
-- HMGET arguments: the counters, then the fields of the run's objects (12 on)
local fields = {'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}
local results, rank = {}, {}  -- rank: node hash -> the run that first named it
local runs, interleaved, wrote = 0, false, false

-- Why the object of key hash .. suffix (its value unpacked) may not go in this mode, or
-- nil (the key is only spelled out for a refusal).
local function refusal(hash, suffix, state, t, owner, token)
  if mode == 'remove' then
    if state ~= 'c' then
      return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' is processing; use put_revoke')
    end
    if t > now() then
      return fail('LEASED', 'object ' .. hash .. suffix .. ' is leased by a reader until ' ..
        num(t) .. ' (Redis ms); retry after the lease or pass force=True')
    end
  elseif mode == 'reclaim' then
    if state ~= 'p' or t + RELEASE_MS > now() then
      return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' is not an unfinished put past '
        .. 'put_start_release_timeout_ms')
    end
  elseif mode == 'revoke' then
    if state ~= 'p' then
      return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' is complete; put_revoke only '
        .. 'abandons processing objects; use remove')
    end
    if owner ~= token then
      return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' was started by another writer')
    end
  end
  return nil
end

-- The node's remaining objects, the run's deleted ones (v[12 + i] == true) left out: the
-- latest start of the processing ones and how many share it, the latest time of the
-- complete ones.
local function rescan(key, k, v)
  local skip = {}
  for i = 1, k do
    if v[11 + i] == true then skip[fields[11 + i]] = true end
  end
  local all = redis.call('HGETALL', key)
  local ps, psn, lm = nil, nil, nil
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 2) == 'o:' and not skip[f] then
      local state, _, t = unpack_object(all[i + 1])
      if state == 'p' then
        if not ps or t > ps then ps, psn = t, 1 elseif t == ps then psn = psn + 1 end
      elseif state == 'c' and (not lm or t > lm) then
        lm = t
      end
    end
  end
  return ps, psn, lm
end

-- A counter the run changed (touched), as HSET (put) or HDEL (drop) arguments.
local function write(put, drop, f, x, touched)
  if not touched then return end
  if x == nil or x == 0 then
    drop[#drop + 1] = f
  else
    put[#put + 1] = f
    put[#put + 1] = num(x)
  end
end

-- The run of items at ARGV[first], ARGV[first + 4], ... ARGV[last] (one node).
local function delete_run(first, last)
  local key, hash = KEYS[tonumber(ARGV[first])], ARGV[first + 1]
  runs = runs + 1
  if rank[hash] then interleaved = true else rank[hash] = runs end
  if dead[key] then
    for a = first, last, 4 do
      results[#results + 1] = fail('NOT_FOUND', 'no object ' .. hash .. ARGV[a + 2])
    end
    return
  end
  local k = 0
  for a = first, last, 4 do
    k = k + 1
    fields[11 + k] = 'o:' .. ARGV[a + 2]
  end
  local v = redis.call('HMGET', key, unpack(fields, 1, 11 + k))
  local p = v[1]
  if p and string.byte(p, 1) == 63 then p = nil end  -- '?': a shell's batch marker
  local pe, nc, no0, np0 = tonumber(v[2]), tonumber(v[3]), tonumber(v[4]), tonumber(v[5])
  local ps0, psn0, nh0, ns0 = tonumber(v[6]), tonumber(v[7]), tonumber(v[8]), tonumber(v[9])
  local b0, lm0 = tonumber(v[10]), tonumber(v[11])
  local exists = no0 ~= nil or nc ~= nil
  local no, np, ps, psn, nh, ns, b, lm = no0, np0, ps0, psn0, nh0, ns0, b0, lm0
  local took, touch_ns, touch_nh, touch_np, touch_ps, touch_psn = false, false, false, false,
    false, false
  local rescan_ps, rescan_lm = false, false
  local i = 0
  for a = first, last, 4 do
    i = i + 1
    local suffix, value = ARGV[a + 2], v[11 + i]
    if not value then
      results[#results + 1] = fail('NOT_FOUND', 'no object ' .. hash .. suffix)
    else
      local state, size, t, pins, owner, reps = unpack_object(value)
      local why = refusal(hash, suffix, state, t, owner, ARGV[a + 3])
      if why then
        results[#results + 1] = why
      else
        v[11 + i] = true
        for j = i + 1, k do  -- the same object named again in the run: gone by then
          if fields[11 + j] == fields[11 + i] then v[11 + j] = false end
        end
        took = true
        local bytes = charged(size, reps)
        count_segments(reps, -1, size)
        no, b = (no or 0) - 1, (b or 0) - bytes
        if pins % 2 == 1 then ns, touch_ns = (ns or 0) - 1, true end
        if pins >= 2 then nh, touch_nh = (nh or 0) - 1, true end
        if state == 'p' then
          np, touch_np = (np or 0) - 1, true
          if np == 0 then
            ps, psn, touch_ps, touch_psn, rescan_ps = nil, nil, true, true, false
          elseif t == ps then
            psn, touch_psn = (psn or 0) - 1, true
            if psn <= 0 then rescan_ps = true end  -- the latest starter is gone
          end
        elseif t >= (lm or 0) then
          rescan_lm = true
        end
        d_used, d_objects = d_used - bytes, d_objects - 1
        emit_event(kind, hash, p, suffix, num(size), reps)
        results[#results + 1] = 'OK'
      end
    end
  end
  if not took then return end
  wrote = true
  local shell0 = (no0 or 0) == 0 and (nc or 0) > 0
  local set0, score0 = nil, nil
  if exists then set0, score0 = leaf_score(no0, nc, nh0, ns0, lm0, np0, ps0) end
  if exists and no == 0 and (nc or 0) == 0 then
    delete_node(key, hash, set0, shell0, p, pe or 0)
    return
  end
  if rescan_ps or rescan_lm then
    local next_ps, next_psn, next_lm = rescan(key, k, v)
    if rescan_ps then ps, psn, touch_ps, touch_psn = next_ps, next_psn, true, true end
    if rescan_lm then lm = next_lm end
  end
  local put, drop = {}, {}
  for j = 1, k do
    if v[11 + j] == true then drop[#drop + 1] = fields[11 + j] end
  end
  write(put, drop, 'no', no, true)
  write(put, drop, 'b', b, true)
  write(put, drop, 'ns', ns, touch_ns)
  write(put, drop, 'nh', nh, touch_nh)
  write(put, drop, 'np', np, touch_np)
  write(put, drop, 'ps', ps, touch_ps)
  write(put, drop, 'psn', psn, touch_psn)
  write(put, drop, 'lm', lm, rescan_lm)
  if #put > 0 then redis.call('HSET', key, unpack(put)) end
  if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
  local shell = exists and (no or 0) == 0 and (nc or 0) > 0
  if shell ~= shell0 then d_shells = d_shells + (shell and 1 or -1) end
  if exists then move_leaf(hash, set0, score0, leaf_score(no, nc, nh, ns, lm, np, ps)) end
end

each_run(5, 4, delete_run)
write_deaths()
write_stats(wrote)
if interleaved then in_first_order(intents, rank, 2) end
return {results, flat(intents)}
