#!lua flags=allow-oom,allow-cross-slot-keys
-- delete: remove objects of the shards one Redis node serves (remove, put_revoke, the
-- monitor's reclaim, forced removal), announced on the events streams. A node left with no
-- objects and no children is deleted in the same call and unlinked from its parent: here
-- when the parent is served by this node too (and so on upward, a parent left empty going
-- the same way), else recorded (outbox) and returned for the client to run where the
-- parent lives.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 mode: 'remove' (complete and not leased),
--       'revoke' (processing, by its own writer), 'reclaim' (processing, started at least
--       the release timeout ago, by any writer), 'force' (anything), then 4 per item:
--       shard tag, node hash, key suffix, writer token
-- Returns: {one per item: 'OK' or NOT_FOUND, LEASED, INVALID_STATE;
--           intents: parent, child, epoch, ...}
local mode = A[8]
local kind = (mode == 'revoke' or mode == 'reclaim') and 'revoked' or 'removed'
local results = {}

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

-- A run (the items of one node that come one after another: a page's keys) that takes
-- every object of a node without children is the common case, done lean: the node is
-- read with one HMGET and deleted whole, without a record (its parent's unlink goes
-- through the library as any). Any other run goes through the node records.
local gone_here = {}  -- node keys deleted lean: named again later, they hold nothing

local function lean_run(s, hash, key, a, stop, names)
  local k = (stop - a) / 4
  local v
  if k == 2 then
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm', names[1], names[2])
  else
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm', unpack(names))
  end
  if v[3] or tonumber(v[4]) ~= k then return v end  -- children, or objects not named: general
  local unpacked = {}
  for i = 1, k do
    local value = v[11 + i]
    if not value then return v end
    local state, size, t, pins, owner, reps = unpack_object(value)
    if not state or refusal(hash, A[a + 4 * i - 2], state, t, owner, A[a + 4 * i - 1]) then
      return v
    end
    unpacked[i] = {size, reps}
  end
  local p = v[1]
  if p and string.byte(p, 1) == 63 then p = nil end  -- '?': a shell's batch marker
  for i = 1, k do
    local size, reps = unpacked[i][1], unpacked[i][2]
    if reps ~= '' then count_segments(s, reps, -1, size) end
    event(s, kind, hash, p, A[a + 4 * i - 2], num(size), reps)
    results[#results + 1] = 'OK'
  end
  s.du, s.dobj = s.du - (tonumber(v[10]) or 0), s.dobj - k
  move_leaf(s, hash, leaf_score(k, nil, tonumber(v[8]), tonumber(v[9]), tonumber(v[11]),
    tonumber(v[5]), tonumber(v[6])))
  local gone = s.gone
  if gone then gone[#gone + 1] = key else s.gone = {key} end
  s.wrote = true
  gone_here[key] = true
  die({key = key, hash = hash, s = s, p = p, pe = tonumber(v[2]), existed = true,
    exists = true, shell0 = false})
  return nil
end

-- A run through the node record: each object removed on its own; finish() deletes the node
-- if that left it empty.
local function general_run(n, a, stop)
  local hash = n.hash
  for b = a, stop - 1, 4 do
    local suffix = A[b + 2]
    local value = n['o:' .. suffix]
    if not value then
      results[#results + 1] = fail('NOT_FOUND', 'no object ' .. hash .. suffix)
    else
      local state, size, t, pins, owner, reps = unpack_object(value)
      local why = refusal(hash, suffix, state, t, owner, A[b + 3])
      if why then
        results[#results + 1] = why
      else
        put_field(n, 'o:' .. suffix, false)
        if state then  -- a value no script wrote goes unannounced (fsck's object_value)
          count_object(n, -1, state, size, t, pins, reps)
          emit(kind, n, suffix, size, reps)
        end
        results[#results + 1] = 'OK'
      end
    end
  end
end

local a, last = 9, #A
while a <= last do
  local tag, hash = A[a], A[a + 1]
  local stop = a + 4
  while stop <= last and A[stop + 1] == hash and A[stop] == tag do stop = stop + 4 end
  local s = shard(tag)
  local key = s.nbase .. hash
  local names = {}
  for b = a, stop - 1, 4 do names[#names + 1] = 'o:' .. A[b + 2] end
  if gone_here[key] and not REC[key] then  -- deleted (lean) earlier in this call
    for b = a, stop - 1, 4 do
      results[#results + 1] = fail('NOT_FOUND', 'no object ' .. hash .. A[b + 2])
    end
  else
    local v, done = nil, false
    if not REC[key] then
      v = lean_run(s, hash, key, a, stop, names)
      done = v == nil
    end
    if not done then
      general_run(v and record(s, hash, key, v, names) or node(s, hash, names), a, stop)
    end
  end
  a = stop
end
finish()
return {results, flat(intents, 3)}
