#!lua
-- put_start: step 2 of path A (and every put without a parent), for objects of one shard:
-- each object is created (processing) in its prefix node with its replicas, counted
-- against the shard's byte limit and its replicas' segments, and the node is linked to its
-- parent when one is given. Mode 'upsert' may also replace a complete object (or this
-- writer's own processing one): the old replicas are announced in a 'replaced' event with
-- the time after which they may be freed (the end of the old object's read lease).
-- uses: leaves objects stats
-- lazy: links
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, 5 put_start_discard_timeout (ms), 6 the shard's
--       default byte limit (0 = none: capacity unlimited; a limit in stats, kept by
--       admission.py, wins, and may be 0: all of it lent to other shards),
--       7 mode ('put'|'upsert'), 8 writer token, 9 link epoch, then per group of one
--       node's objects with one parent: node key index, node hash, parent hash ('' =
--       none), cycle-checked (0|1|1:<links>), count k, and 4 per object: key suffix,
--       size, pins (0-3), replicas ('' or '|<segment>,<location>,<medium>' ..., escaped)
-- Returns: one per object, in order: 'OK' .. link flag ('' no parent, 'L' linked, 'C' linked but left
--          for the resolver's cycle walk), or a refusal: ALREADY_EXISTS, NO_SPACE,
--          SEGMENT_NOT_MOUNTED, PARENT_CONFLICT, and the link refusals the client
--          handles itself: STALE_EPOCH, FENCED <fence>, CYCLE_CHECK
local batch, discard_ms, default_limit, upsert =
  ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == 'upsert'
local token, epoch = ARGV[8], tonumber(ARGV[9])
read_stats()
local used, limit = s_used, s_limit or default_limit
local NOW = now()
local now_s = num(NOW)

-- Whether a segment is mounted: its m:<segment> flag in the shard's stats (segments.py
-- sets it in every shard before the segment counts, and clears it before unmounting).
local mounted = {}
local function unmounted_segment(reps)
  for segment in string.gmatch(reps, '|([^,|]*)') do
    if mounted[segment] == nil then
      mounted[segment] = redis.call('HEXISTS', STATS, 'm:' .. segment) == 1
    end
    if not mounted[segment] then return segment end
  end
  return nil
end

-- Whether `grow` more bytes would pass the shard's byte limit (0 = none).
-- Only an unlimited capacity (default limit 0) admits everything: a stored limit of 0
-- means all of the shard's room is lent to other shards.
local function over_limit(grow)
  return default_limit > 0 and grow > 0 and used + grow > limit
end

local function busy(n, suffix, state, by_us)
  return fail('ALREADY_EXISTS', 'object ' .. n.hash .. suffix .. ' already exists (' ..
    (state == 'p' and 'processing' or 'complete') .. (by_us and ', put_start by this writer'
    or '') .. ')')
end

-- The general path (every case), through node records: defined on first need, with the
-- library parts it takes (the '-- lazy:' line: node records, links, events, deaths), so a
-- call that never needs it does not pay for defining them.
local general_put, general_node, general_nodes, general_finish
local function load_general()
  -- @lazy
  list_new_leaves = false  -- finish() need not list them: none is returned

  -- One object through the node record (the general path: every case).
  local function put(n, suffix, size, pins, parent, checked, reps)
    local name = 'o:' .. suffix
    local current = field(n, name)
    local old
    if current then
      local state, old_size, t, old_pins, old_token, old_reps = unpack_object(current)
      if old_token == token and state == 'p' then
        if old_size == size and old_reps == reps and (parent == '' or n.p == parent) then
          -- our own put_start, sent again after a lost reply: answer as the first time
          if parent ~= '' then return 'OK' .. apply_parent(n, parent, epoch, 'same', batch) end
          return 'OK'
        end
        if not upsert then return busy(n, suffix, state, true) end
      elseif state == 'c' then
        if not upsert then return busy(n, suffix, state, old_token == token) end
      elseif t + discard_ms > NOW then
        return busy(n, suffix, state, false)
      end
      -- unfinished past the discard timeout, or replaced by an upsert: take over
      old = {state, old_size, t, old_pins, old_reps}
    end
    local grow = charged(size, reps) - (old and charged(old[2], old[5]) or 0)
    if over_limit(grow) then
      return fail('NO_SPACE', 'shard ' .. string.match(STATS, '{(..)}') .. ' holds ' .. num(used) ..
        ' bytes and ' .. num(grow) .. ' more would pass its limit of ' .. num(limit))
    end
    local segment = reps ~= '' and unmounted_segment(reps)
    if segment then
      return fail('SEGMENT_NOT_MOUNTED', 'segment ' .. segment .. ' is not mounted')
    end
    local how, refusal = check_parent(n, parent, epoch, checked, batch)
    if not how then return refusal end
    create(n)
    local flag = apply_parent(n, parent, epoch, how, batch)
    put_field(n, name, pack_object('p', size, NOW, pins, token, reps))
    count_object(n, 1, 'p', size, NOW, pins, reps)
    if old then
      count_object(n, -1, old[1], old[2], old[3], old[4], old[5])
      if old[5] ~= '' then
        local free_after = old[1] == 'c' and old[3] > NOW and old[3] or NOW
        emit('replaced', n, suffix, old[2], old[5], 'free_after', num(free_after))
      end
    end
    used = used + grow
    return 'OK' .. flag
  end

  general_put, general_node, general_nodes, general_finish = put, node, nodes, finish
end

-- The common case without a node record: every object of the group is new and fits, its
-- segments are mounted, and the link needs no refusal. Reads the node with one HMGET
-- (counters and the group's objects) and, when the case holds, writes it with one HSET
-- (an HDEL only for a shell's batch marker that goes) and moves it in the leaf index;
-- returns false (nothing written) when it does not, for the general path.
local results = {}
local function put_new(key, hash, parent, checked, first, k)
  local names = {}
  for i = 1, k do names[i] = 'o:' .. ARGV[first + 4 * i - 4] end
  local v
  if k == 2 then
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm', names[1], names[2])
  else
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm', unpack(names))
  end
  local grow = 0
  for i = 1, k do
    local at = first + 4 * i - 4
    local reps = ARGV[at + 3]
    if v[11 + i] then return false end
    if reps == '' then
      grow = grow + tonumber(ARGV[at + 1])
    elseif unmounted_segment(reps) then
      return false
    else
      grow = grow + charged(tonumber(ARGV[at + 1]), reps)
    end
  end
  if over_limit(grow) then return false end
  local p, lb = v[1], nil
  if p and string.byte(p, 1) == 63 then lb, p = string.sub(p, 2), nil end
  local fresh = not v[3] and not v[4]  -- a new node: no counter to read
  local nc, no = 0, 0
  if not fresh then nc, no = tonumber(v[3]) or 0, tonumber(v[4]) or 0 end
  local children = nc > 0
  local flag, put, at = '', {}, 0
  if parent ~= '' then
    if p then
      if p ~= parent then return false end
      flag = 'L'
      if epoch > (tonumber(v[2]) or 0) then put[1] = 'pe'; put[2] = ARGV[9]; at = 2 end
    else
      if epoch < NOW - EPOCH_HORIZON_MS then return false end
      local fence = fence_of(hash)
      if fence and fence >= epoch then return false end
      if children and lb ~= batch and not walk_holds(checked) then return false end
      flag = (children and lb ~= batch) and 'C' or 'L'
      if children then d_links = d_links + 1 end
      put[1] = 'p'; put[2] = parent; put[3] = 'pe'; put[4] = ARGV[9]
      at = 4
    end
  end
  -- the group is written from here on
  local np, ps, psn, nh, ns, b, lm = 0, nil, 0, 0, 0, 0, nil
  local set0, score0
  if fresh then
    d_nodes = d_nodes + 1
  else
    np, ps, psn = tonumber(v[5]) or 0, tonumber(v[6]), tonumber(v[7]) or 0
    nh, ns, b, lm = tonumber(v[8]) or 0, tonumber(v[9]) or 0, tonumber(v[10]) or 0,
      tonumber(v[11])
    set0, score0 = leaf_score(no, nc, nh, ns, lm, np, ps)
    if no == 0 and children then d_shells = d_shells - 1 end
  end
  local nh0, ns0, b0 = nh, ns, b
  if not ps or NOW > ps then ps, psn = NOW, 0 end
  local ok = 'OK' .. flag
  for i = 1, k do
    local arg = first + 4 * i - 4
    local size, pins_s, reps = ARGV[arg + 1], ARGV[arg + 2], ARGV[arg + 3]
    local pins, bytes = tonumber(pins_s), tonumber(size)
    if reps ~= '' then
      count_segments(reps, 1, bytes)
      bytes = charged(bytes, reps)
    end
    put[at + 1] = names[i]
    put[at + 2] = '1p,' .. size .. ',' .. now_s .. ',' .. pins_s .. ',' .. token .. reps
    at = at + 2
    b = b + bytes
    if pins % 2 == 1 then ns = ns + 1 end
    if pins >= 2 then nh = nh + 1 end
    if ps == NOW then psn = psn + 1 end
    d_used, d_objects, used = d_used + bytes, d_objects + 1, used + bytes
    results[#results + 1] = ok
  end
  no, np = no + k, np + k
  put[at + 1] = 'no'; put[at + 2] = num(no)
  put[at + 3] = 'np'; put[at + 4] = num(np)
  put[at + 5] = 'ps'; put[at + 6] = ps == NOW and now_s or num(ps)
  put[at + 7] = 'psn'; put[at + 8] = num(psn)
  at = at + 8
  if b ~= b0 then put[at + 1] = 'b'; put[at + 2] = num(b); at = at + 2 end
  if ns ~= ns0 then put[at + 1] = 'ns'; put[at + 2] = num(ns); at = at + 2 end
  if nh ~= nh0 then put[at + 1] = 'nh'; put[at + 2] = num(nh); at = at + 2 end
  redis.call('HSET', key, unpack(put))
  if lb and parent == '' then redis.call('HDEL', key, 'p') end
  move_leaf(hash, set0, score0, leaf_score(no, nc, nh, ns, lm, np, ps))
  return true
end

local a = 10
while a <= #ARGV do
  local key, hash, parent, checked = KEYS[tonumber(ARGV[a])], ARGV[a + 1], ARGV[a + 2],
    ARGV[a + 3]
  local first, k = a + 5, tonumber(ARGV[a + 4])
  a = first + 4 * k
  if (general_nodes and general_nodes[key]) or
      not put_new(key, hash, parent, checked, first, k) then
    if not general_put then load_general() end
    local n = general_node(key, hash)
    for at = first, a - 1, 4 do
      results[#results + 1] = general_put(n, ARGV[at], tonumber(ARGV[at + 1]),
        tonumber(ARGV[at + 2]), parent, checked, ARGV[at + 3])
    end
  end
end
if general_finish then
  general_finish()
else
  write_stats(false)  -- what finish() does without node records
end
return results
