#!lua flags=allow-cross-slot-keys
-- put: objects of the shards one Redis node serves, grouped by node, each node with one
-- parent (or none). Modes: 'start' (put_start: the object is processing), 'put' (the
-- one-phase put of a writer whose bytes are in place: complete at once, its lease starting
-- now, a 'stored' event), 'upsert_start' and 'upsert' (the same, and a complete object,
-- or this writer's own processing one, is replaced: its old replicas are announced in a
-- 'replaced' event with the time after which they may be freed, the end of the old
-- object's read lease).
-- A parent served by this node is linked in this call, both sides at one epoch: no
-- pending entry, no second step (a node with children is walked up here for a cycle). A
-- parent served elsewhere had its step 1 (link.lua) run before, at the call's epoch; this
-- is step 2 (docs/ARCHITECTURE.md, "Links").
-- uses: links
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 mode, 9 writer token, 10 link epoch (0: Redis
--       now), 11 put_start_discard_timeout (ms), 12 a shard's default byte limit (0 =
--       none: capacity unlimited; a limit in its stats, kept by admission.py, wins, and
--       may be 0: all of it lent to other shards), 13 batch id, 14 max_depth, then per
--       group of one node's objects with one parent: shard tag, node hash, parent hash
--       ('' = none), the parent's shard tag ('' = served elsewhere), the node's field name
--       in its parent ('' = the node hash itself, as for every 64-hex node; else
--       c:<hash>), cycle-checked (0|1|1:<links>), count k, and 4 per object: key suffix,
--       size, pins (0-3), replicas ('' or '|<segment>,<location>,<medium>' ..., escaped)
-- Returns: one per object, in order: 'OK' .. link flag ('' no parent, 'L' linked, 'C'
--          linked but left for the resolver's cycle walk), or a refusal: ALREADY_EXISTS,
--          NO_SPACE, SEGMENT_NOT_MOUNTED, PARENT_CONFLICT, CYCLE, and the link refusals the
--          client handles itself: STALE_EPOCH, FENCED <fence>, CYCLE_CHECK, NOT_HERE
local mode, token, discard_ms, default_limit, batch, max_depth =
  A[8], A[9], A[11], A[12], A[13], A[14]
local complete = mode == 'put' or mode == 'upsert'
local replace = mode == 'upsert_start' or mode == 'upsert'
local state = complete and 'c' or 'p'
local NOW = now()
local now_s = num(NOW)
local epoch = A[10] > 0 and A[10] or NOW
local epoch_s = num(epoch)

-- Whether `grow` more bytes would pass the shard's byte limit. Only an unlimited capacity
-- (default limit 0) admits everything: a stored limit of 0 means all of the shard's room
-- is lent to other shards.
local function over_limit(s, grow)
  if default_limit <= 0 or grow <= 0 then return false end
  read_stats(s)
  return s.used + s.du + grow > (s.limit or default_limit)
end

-- The first segment of reps that is not mounted in shard s: its m:<segment> flag in the
-- shard's stats (segments.py sets it in every shard before the segment counts).
local function unmounted_segment(s, reps)
  local mounted = s.mounted
  if not mounted then
    mounted = {}
    s.mounted = mounted
  end
  for segment in string.gmatch(reps, '|([^,|]*)') do
    if mounted[segment] == nil then
      mounted[segment] = redis.call('HEXISTS', s.stats, 'm:' .. segment) == 1
    end
    if not mounted[segment] then return segment end
  end
  return nil
end

local function busy(n, suffix, old_state, by_us)
  return fail('ALREADY_EXISTS', 'object ' .. n.hash .. suffix .. ' already exists (' ..
    (old_state == 'p' and 'processing' or 'complete') .. (by_us and ', put by this writer'
    or '') .. ')')
end

-- One object of a group: written (with the group's link, once: `link()`), or refused;
-- returns its result. Refusals in this order: the object (exists), its bytes (no space,
-- a segment not mounted), then the group's link (`refusal`).
local function put(n, suffix, size, pins, reps, parent, link, refusal)
  local name = 'o:' .. suffix
  local current = n[name]
  local old
  if current then
    local old_state, old_size, t, old_pins, old_token, old_reps = unpack_object(current)
    if old_token == token and old_state == state and old_size == size and old_reps == reps
        and (parent == '' or n.p == parent) then
      -- this writer's own put, sent again after a lost reply: answered as the first time
      return refusal or ('OK' .. link())
    end
    if old_state == 'c' or old_token == token then
      if not replace then return busy(n, suffix, old_state, old_token == token) end
    elseif t + discard_ms > NOW then
      return busy(n, suffix, old_state, false)
    end
    -- replaced by an upsert, or unfinished past the discard timeout: taken over
    old = {old_state, old_size, t, old_pins, old_reps}
  end
  local s = n.s
  local grow = charged(size, reps) - (old and charged(old[2], old[5]) or 0)
  if over_limit(s, grow) then
    return fail('NO_SPACE', 'shard ' .. s.tag .. ' holds ' .. num(s.used + s.du) ..
      ' bytes and ' .. num(grow) .. ' more would pass its limit of ' ..
      num(s.limit or default_limit))
  end
  local segment = reps ~= '' and unmounted_segment(s, reps)
  if segment then
    return fail('SEGMENT_NOT_MOUNTED', 'segment ' .. segment .. ' is not mounted')
  end
  if refusal then return refusal end
  create(n)
  local flag = link()
  put_field(n, name, '1' .. state .. ',' .. num(size) .. ',' .. now_s .. ',' .. num(pins) .. ','
    .. token .. reps)
  count_object(n, 1, state, size, NOW, pins, reps)
  if old then
    count_object(n, -1, old[1], old[2], old[3], old[4], old[5])
    if old[5] ~= '' then
      local free_after = old[1] == 'c' and old[3] > NOW and old[3] or NOW
      emit('replaced', n, suffix, old[2], old[5], 'free_after', num(free_after))
    end
  end
  if complete then emit('stored', n, suffix, size, reps) end
  return 'OK' .. flag
end

-- The general path: every case, through node records (lua/_lib.lua).
local function general()
  local results = {}
  local a, last = 15, #A
  while a <= last do
    local tag, hash, parent, parent_tag, checked, k = A[a], A[a + 1], A[a + 2], A[a + 3],
      A[a + 5], A[a + 6]
    local f = A[a + 4] ~= '' and A[a + 4] or hash  -- the node's field in its parent
    local first = a + 7
    a = first + 4 * k
    local s = shard(tag)
    local names = {}
    for i = 1, k do names[i] = 'o:' .. A[first + 4 * i - 4] end
    local n = node(s, hash, names)
    local here = parent ~= '' and parent_tag ~= ''
    local how, refusal
    if here and not is_local(parent_tag) then  -- the client's slot map is older than Redis's
      refusal = fail('NOT_HERE', 'parent ' .. parent .. ' is not served by this Redis node')
    else
      how, refusal = check_parent(n, parent, epoch, checked, batch, here, max_depth)
    end
    local q = how and here and node(shard(parent_tag), parent, {f}) or nil
    local flag
    local function link()  -- the group's link, applied with its first object written
      if not flag then flag = apply_parent(n, parent, epoch, how, batch, q, f) end
      return flag
    end
    for at = first, a - 1, 4 do
      results[#results + 1] = put(n, A[at], A[at + 1], A[at + 2], A[at + 3], parent, link,
        refusal)
    end
  end
  finish()
  return results
end

-- The common case, lean (no node records, each node read once and written once): every
-- object new, every link within this node and new (or the one the node has), every byte
-- fitting, no fence, no cycle to walk, parents named before their children. Reads
-- everything first; the first item that is not so sends the whole call down the general
-- path, which nothing was written for yet. Per node a few locals in arrays (K keys, V
-- HMGET replies, W HSET arguments, C children added), not a table of fields.
local function lean()
  local K, V, W, C, SH = {}, {}, {}, {}, {}
  local index = {}  -- node hash -> its position in those arrays
  local plan = {}   -- per group: node position, first object, k, parent position or false
  local a, last = 15, #A
  while a <= last do
    local tag, hash, parent, parent_tag, k = A[a], A[a + 1], A[a + 2], A[a + 3], A[a + 6]
    local first = a + 7
    a = first + 4 * k
    if index[hash] or A[a - 4 * k - 2] ~= '0' then return nil end  -- named twice; checked
    local s = shard(tag)
    local key = s.nbase .. hash
    local v
    if k == 2 then
      v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
        'lm', 'o:' .. A[first], 'o:' .. A[first + 4])
    else
      local names = {'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}
      for i = 1, k do names[11 + i] = 'o:' .. A[first + 4 * i - 4] end
      v = redis.call('HMGET', key, unpack(names))
    end
    for i = 1, k do
      if v[11 + i] then return nil end  -- an object stored already: a re-send, an upsert
    end
    local p = v[1]
    if p and string.byte(p, 1) == 63 then return nil end  -- a shell's batch marker
    local at = #K + 1
    K[at], V[at], W[at], C[at], SH[at] = key, v, {}, 0, s
    index[hash] = at
    local parent_at = false
    if parent ~= '' then
      -- a link across nodes: step 2 raises the child's epoch to its step 1's (general)
      if parent_tag == '' or not is_local(parent_tag) then return nil end
      if p then
        if p ~= parent then return nil end  -- another parent: refused, in order
      else
        if v[3] then return nil end  -- children: a cycle walk
        read_stats(s)
        if s.fences + s.dfe > 0 then return nil end  -- a fence may refuse the link's epoch
        local f = A[first - 3] ~= '' and A[first - 3] or hash
        parent_at = index[parent]
        if parent_at then  -- named before: a node of this call, or another child's parent
          local pv = V[parent_at]
          if (pv[3] or pv[4]) and redis.call('HEXISTS', K[parent_at], f) == 1 then
            return nil  -- it lists this child already (a late unlink)
          end
        else
          local ps = shard(parent_tag)
          local pv = redis.call('HMGET', ps.nbase .. parent, 'p', 'pe', 'nc', 'no', 'np',
            'ps', 'psn', 'nh', 'ns', 'b', 'lm', f)
          if pv[12] then return nil end  -- it lists this child already (a late unlink)
          parent_at = #K + 1
          K[parent_at], V[parent_at], W[parent_at], C[parent_at], SH[parent_at] =
            ps.nbase .. parent, pv, {}, 0, ps
          index[parent] = parent_at
        end
        W[parent_at][#W[parent_at] + 1] = f
        W[parent_at][#W[parent_at] + 1] = epoch_s
        C[parent_at] = C[parent_at] + 1
      end
    end
    plan[#plan + 1] = {at, first, k, parent_at}
  end
  -- the bytes of every object, against each shard's limit; the segments of replicas
  local grown = {}
  for _, g in ipairs(plan) do
    local s, grow = SH[g[1]], 0
    for i = g[2], g[2] + 4 * g[3] - 4, 4 do
      local reps = A[i + 3]
      if reps ~= '' and unmounted_segment(s, reps) then return nil end
      grow = grow + charged(A[i + 1], reps)
    end
    grown[s] = (grown[s] or 0) + grow
    if over_limit(s, grown[s]) then return nil end
  end
  for s, grow in pairs(grown) do s.du = s.du + grow end
  -- every item holds: write
  local results = {}
  for _, g in ipairs(plan) do
    local at, first, k = g[1], g[2], g[3]
    local s, v, w, hash = SH[at], V[at], W[at], A[first - 6]
    local no, np = tonumber(v[4]) or 0, tonumber(v[5]) or 0
    v.no0 = no  -- and its place in the leaf index before, for the end
    v.leaf_set, v.leaf_score = leaf_score(v[4] and no, tonumber(v[3]), tonumber(v[8]),
      tonumber(v[9]), tonumber(v[11]), np, tonumber(v[6]))
    local ps, psn = tonumber(v[6]), tonumber(v[7]) or 0
    local nh, ns, b, lm = tonumber(v[8]) or 0, tonumber(v[9]) or 0, tonumber(v[10]) or 0,
      tonumber(v[11])
    local nh0, ns0 = nh, ns
    if not v[3] and not v[4] then s.dn = s.dn + 1 end
    if complete then
      if not lm or NOW > lm then lm = NOW; w[#w + 1] = 'lm'; w[#w + 1] = now_s end
    elseif not ps or NOW > ps then
      ps, psn = NOW, 0
    end
    local parent = A[first - 5]
    local flag = parent ~= '' and 'L' or ''
    for i = first, first + 4 * k - 4, 4 do
      local suffix, size, pins, reps = A[i], A[i + 1], A[i + 2], A[i + 3]
      local size_s = num(size)
      w[#w + 1] = 'o:' .. suffix
      w[#w + 1] = '1' .. state .. ',' .. size_s .. ',' .. now_s .. ',' .. num(pins) .. ',' ..
        token .. reps
      b = b + charged(size, reps)
      if reps ~= '' then count_segments(s, reps, 1, size) end
      if pins % 2 == 1 then ns = ns + 1 end
      if pins >= 2 then nh = nh + 1 end
      if not complete and ps == NOW then psn = psn + 1 end
      if complete then event(s, 'stored', hash, parent ~= '' and parent or v[1], suffix, size_s, reps) end
      results[#results + 1] = 'OK' .. flag
    end
    no = no + k
    s.dobj = s.dobj + k
    w[#w + 1] = 'no'; w[#w + 1] = num(no)
    w[#w + 1] = 'b'; w[#w + 1] = num(b)
    if not complete then
      np = np + k
      w[#w + 1] = 'np'; w[#w + 1] = num(np)
      w[#w + 1] = 'ps'; w[#w + 1] = num(ps)
      w[#w + 1] = 'psn'; w[#w + 1] = num(psn)
    end
    if ns ~= ns0 then w[#w + 1] = 'ns'; w[#w + 1] = num(ns) end
    if nh ~= nh0 then w[#w + 1] = 'nh'; w[#w + 1] = num(nh) end
    if g[4] then
      w[#w + 1] = 'p'; w[#w + 1] = parent
      w[#w + 1] = 'pe'; w[#w + 1] = epoch_s
    end
    -- the counters as written, for the leaf index below
    v[4], v[5], v[6], v[8], v[9], v[11] = no, not complete and np or tonumber(v[5]), ps, nh,
      ns, lm
    v.written = true
  end
  -- each node once: its fields, its place in the leaf index; the shards' stats and events
  for at = 1, #K do
    local s, v, w = SH[at], V[at], W[at]
    local nc0 = tonumber(v[3]) or 0
    local nc = nc0 + C[at]
    if nc ~= nc0 then w[#w + 1] = 'nc'; w[#w + 1] = num(nc) end
    redis.call('HSET', K[at], unpack(w))
    local set0, score0
    if v.written then
      set0, score0 = v.leaf_set, v.leaf_score
      if v.no0 == 0 and nc0 > 0 then s.dsh = s.dsh - 1 end  -- a shell that got objects
    else
      set0, score0 = leaf_score(tonumber(v[4]), nc0, tonumber(v[8]), tonumber(v[9]),
        tonumber(v[11]), tonumber(v[5]), tonumber(v[6]))
      if not v[3] and not v[4] then s.dn, s.dsh = s.dn + 1, s.dsh + 1 end  -- a new shell
    end
    local hash = string.sub(K[at], #s.nbase + 1)
    move_leaf(s, hash, set0, score0, leaf_score(v[4], nc, v[8], v[9], v[11], v[5], v[6]))
  end
  for _, s in ipairs(SHARDS) do
    s.wrote = true
    write_leaves(s)
    write_stats(s)
    write_events(s)
  end
  return results
end

return lean() or general()
