-- Shared helpers. mooncake_redis/scripts.py prepends this file to every script, so each
-- script stays one self-contained EVALSHA body.
--
-- Shard scripts receive the shard's keys as KEYS[1..7] (keys.SHARD_KEY_NAMES) and node
-- keys after them, and a common ARGV header:
--   ARGV[1] put_start release timeout (ms): a processing object older than this is evictable
--   ARGV[2] events cap per shard stream (0 = no events)
--   ARGV[3] link epoch horizon (ms): link epochs older than this are refused, and fences
--           older than this are dropped (no epoch they could refuse is accepted anyway)
-- Items follow the header. A script checks each item completely before writing anything
-- for it, so a refused item leaves nothing behind; results come back one per item, a
-- refusal as the string 'MCERR_<CODE> message'.
--
-- Node counters are read once per script (node()), changed in memory, and written back by
-- finish() together with the leaf index, the shard's stats and deletions of emptied nodes.
-- Object and child fields are written at once, so a rescan (HGETALL) sees them.

local LEAVES, SOFT_LEAVES, STATS, PENDING, FENCES, OUTBOX, EVENTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local RELEASE_MS, EVENTS_CAP, EPOCH_HORIZON_MS =
  tonumber(ARGV[1]) or 0, tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0
local INF = math.huge

-- Milliseconds of the Redis clock, never the client's.
local NOW = (function()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end)()

local function num(x)
  if x == INF then return '+inf' end
  return string.format('%d', x)
end

local function fail(code, message)
  return 'MCERR_' .. code .. ' ' .. message
end

-- Packed object values: '1<state>,<size>,<time>,<pins>,<token>' (mooncake_redis/values.py).
local function unpack_object(v)
  local state, size, t, pins, token = string.match(v, '^1(%a),(%d+),(%d+),(%d),(.*)$')
  return state, tonumber(size), tonumber(t), tonumber(pins), token
end

local function pack_object(state, size, t, pins, token)
  return '1' .. state .. ',' .. num(size) .. ',' .. num(t) .. ',' .. pins .. ',' .. token
end

-- A 64-hex child is stored under its bare hash (64 bytes: the listpack limit), others as
-- c:<hash>.
local function child_field(h)
  if #h == 64 and not string.find(h, '[^0-9a-f]') then return h end
  return 'c:' .. h
end

local function is_child_field(f)
  return string.sub(f, 1, 2) == 'c:' or (#f == 64 and not string.find(f, '[^0-9a-f]'))
end

local NODE_FIELDS = {'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm', 'lb'}
local TEXT_FIELDS = {p = true, lb = true}

local nodes, node_order = {}, {}
local stat_used, stat_objects, stat_nodes = 0, 0, 0
local intents, new_leaves = {}, {}

-- A node is a leaf when it holds objects and has no children. Its score is the time after
-- which all its objects are evictable: +inf with a hard pin, else the latest lease end of
-- its complete objects and the latest start + release timeout of its processing ones.
local function leaf_of(n)
  if not n.exists or (n.no or 0) == 0 or (n.nc or 0) > 0 then return nil, nil end
  local score
  if (n.nh or 0) > 0 then
    score = INF
  else
    score = n.lm or 0
    if (n.np or 0) > 0 then score = math.max(score, (n.ps or 0) + RELEASE_MS) end
  end
  if (n.ns or 0) > 0 then return SOFT_LEAVES, score end
  return LEAVES, score
end

-- The node record of KEYS[key_index] (read once per script).
local function node(key, hash)
  local n = nodes[key]
  if n then return n end
  local v = redis.call('HMGET', key, unpack(NODE_FIELDS))
  n = {key = key, hash = hash, dirty = {}}
  for i = 1, #NODE_FIELDS do
    local f = NODE_FIELDS[i]
    if v[i] then
      if TEXT_FIELDS[f] then n[f] = v[i] else n[f] = tonumber(v[i]) end
    end
  end
  n.exists = n.no ~= nil or n.nc ~= nil
  n.leaf_set, n.leaf_score = leaf_of(n)
  nodes[key] = n
  node_order[#node_order + 1] = n
  return n
end

local function set(n, f, x)
  n[f] = x
  n.dirty[f] = true
end

local function add(n, f, d)
  set(n, f, (n[f] or 0) + d)
end

local function create(n)
  if not n.exists then
    n.exists = true
    stat_nodes = stat_nodes + 1
  end
end

-- Every 'o:' field of the node as {suffix, state, size, time, pins, token}.
local function scan_objects(n)
  local all = redis.call('HGETALL', n.key)
  local found = {}
  for i = 1, #all, 2 do
    local f = all[i]
    if string.sub(f, 1, 2) == 'o:' then
      local state, size, t, pins, token = unpack_object(all[i + 1])
      found[#found + 1] = {string.sub(f, 3), state, size, t, pins, token}
    end
  end
  return found
end

local function recompute_processing(n)
  local ps, psn = nil, nil
  for _, o in ipairs(scan_objects(n)) do
    if o[2] == 'p' then
      if not ps or o[4] > ps then ps, psn = o[4], 1 elseif o[4] == ps then psn = psn + 1 end
    end
  end
  set(n, 'ps', ps)
  set(n, 'psn', psn)
end

-- Adds (sign 1) or removes (sign -1) one object's share of the node's counters and the
-- shard's stats. A removal must run after the object's field changed, so that a rescan
-- sees the node as it now is.
local function count_object(n, sign, state, size, t, pins)
  add(n, 'no', sign)
  add(n, 'b', sign * size)
  if pins % 2 == 1 then add(n, 'ns', sign) end
  if pins >= 2 then add(n, 'nh', sign) end
  if state == 'p' then
    add(n, 'np', sign)
    if sign > 0 then
      if not n.ps or t > n.ps then
        set(n, 'ps', t)
        set(n, 'psn', 1)
      elseif t == n.ps then
        add(n, 'psn', 1)
      end
    elseif n.np == 0 then
      set(n, 'ps', nil)
      set(n, 'psn', nil)
    elseif t == n.ps then
      add(n, 'psn', -1)
      if n.psn <= 0 then recompute_processing(n) end
    end
  elseif sign > 0 then
    if t > (n.lm or 0) then set(n, 'lm', t) end
  elseif t >= (n.lm or 0) then
    n.recompute_lm = true
  end
  stat_used = stat_used + sign * size
  stat_objects = stat_objects + sign
end

local function emit(kind, hash, ...)
  if EVENTS_CAP > 0 then
    redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'type', kind, 'hash', hash, ...)
  end
end

-- A fence makes step 2 of any link of this child with an epoch <= it refuse; it is only
-- needed while such an epoch could still be accepted (within the horizon).
local function raise_fence(hash, epoch)
  if epoch >= NOW - EPOCH_HORIZON_MS then
    redis.call('ZADD', FENCES, 'GT', num(epoch), hash)
  end
end

-- An emptied node goes at once; if it had a parent, the unlink from it is recorded here
-- (the outbox) and returned to the client, which runs it in the parent's shard.
local function delete_node(n)
  n.deleted = true
  n.exists = false
  stat_nodes = stat_nodes - 1
  if n.p then
    local pe = n.pe or 0
    raise_fence(n.hash, pe)
    redis.call('ZADD', OUTBOX, NOW, n.hash .. '|' .. n.p .. '|' .. num(pe))
    intents[#intents + 1] = {n.p, n.hash, num(pe)}
  end
end

local function update_leaf(n)
  local set_, score = leaf_of(n)
  if n.leaf_set and set_ ~= n.leaf_set then redis.call('ZREM', n.leaf_set, n.hash) end
  if set_ and (set_ ~= n.leaf_set or score ~= n.leaf_score) then
    redis.call('ZADD', set_, num(score), n.hash)
    if not n.leaf_set then
      new_leaves[#new_leaves + 1] = {n.hash, num(score), num(n.b or 0),
        set_ == SOFT_LEAVES and '1' or '0'}
    end
  end
end

local function write_back(n)
  local put, drop = {}, {}
  for f in pairs(n.dirty) do
    local x = n[f]
    if x == nil or x == 0 then
      drop[#drop + 1] = f
    else
      put[#put + 1] = f
      put[#put + 1] = TEXT_FIELDS[f] and x or num(x)
    end
  end
  if #put > 0 then redis.call('HSET', n.key, unpack(put)) end
  if #drop > 0 then redis.call('HDEL', n.key, unpack(drop)) end
end

-- Writes back every node touched, deletes the emptied ones, keeps the leaf index exact
-- and adds the script's changes to the shard's stats.
local function finish()
  for _, n in ipairs(node_order) do
    if n.exists and (n.no or 0) == 0 and (n.nc or 0) == 0 then delete_node(n) end
    if n.deleted then
      redis.call('DEL', n.key)
    else
      if n.recompute_lm then
        local lm = nil
        if (n.no or 0) > 0 then
          for _, o in ipairs(scan_objects(n)) do
            if o[2] == 'c' and (not lm or o[4] > lm) then lm = o[4] end
          end
        end
        set(n, 'lm', lm)
      end
      if n.clear_lb then set(n, 'lb', nil) end
      write_back(n)
    end
    update_leaf(n)
  end
  if stat_used ~= 0 then redis.call('HINCRBY', STATS, 'used_bytes', stat_used) end
  if stat_objects ~= 0 then redis.call('HINCRBY', STATS, 'objects', stat_objects) end
  if stat_nodes ~= 0 then redis.call('HINCRBY', STATS, 'nodes', stat_nodes) end
  redis.call('HINCRBY', STATS, 'writes', 1)
end

-- Flattens intents ({parent, child, epoch} ...) or new leaves for the reply.
local function flat(list)
  local out = {}
  for _, t in ipairs(list) do
    for _, x in ipairs(t) do out[#out + 1] = x end
  end
  return out
end

-- Step 2 of a link, for the node n that is to name `parent` (see docs/ARCHITECTURE.md):
-- returns 'same' | 'new' | '' (no parent given), or nil and a refusal.
local function check_parent(n, parent, epoch, checked, batch)
  if parent == '' then return '' end
  if n.p then
    if n.p ~= parent then
      return nil, fail('PARENT_CONFLICT', 'node ' .. n.hash .. ' already has parent ' .. n.p
        .. ', refusing parent ' .. parent)
    end
    return 'same'
  end
  if epoch < NOW - EPOCH_HORIZON_MS then
    return nil, fail('STALE_EPOCH', num(epoch))
  end
  local fence = tonumber(redis.call('ZSCORE', FENCES, n.hash))
  if fence and fence >= epoch then return nil, fail('FENCED', num(fence)) end
  if n.exists and (n.nc or 0) > 0 and n.lb ~= batch and checked ~= '1' then
    return nil, fail('CYCLE_CHECK', 'node ' .. n.hash .. ' has children')
  end
  return 'new'
end

-- Applies a checked link and says how safe it is: 'L' (the client may confirm it: the
-- link existed already, or the node had no children but this batch's, so no cycle can
-- close through it), 'C' (a new link into a node with children from elsewhere: left
-- pending for the resolver to confirm after its walk up for a cycle), '' (no parent).
local function apply_parent(n, parent, epoch, how, batch)
  n.clear_lb = n.lb ~= nil  -- at finish: later items of this node still read it
  if how == '' then return '' end
  local flag = 'L'
  if how == 'new' then
    if (n.nc or 0) > 0 and n.lb ~= batch then flag = 'C' end
    set(n, 'p', parent)
    set(n, 'pe', epoch)
  elseif epoch > (n.pe or 0) then
    set(n, 'pe', epoch)
  end
  return flag
end
