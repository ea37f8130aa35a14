-- Shared helpers. mooncake_redis/scripts.py prepends this file to every script, so each
-- script stays one self-contained EVALSHA body.
--
-- Shard scripts receive the shard's keys as KEYS[1..7] (keys.SHARD_KEY_NAMES) and node
-- keys after them, and a common ARGV header:
--   ARGV[1] put_start release timeout (ms): a processing object older than this is evictable
--   ARGV[2] events cap per shard stream (0 = no events; negative: Redis is at maxmemory,
--           so the first event of the call frees the stream's whole macro nodes first)
--   ARGV[3] link epoch horizon (ms): link epochs older than this are refused, and fences
--           older than this are dropped (no epoch they could refuse is accepted anyway)
-- Items follow the header. A script checks each item completely before writing anything
-- for it, so a refused item leaves nothing behind; results come back one per item, a
-- refusal as the string 'MCERR_<CODE> message'.
--
-- What costs here is counted in instructions of redis-server (docs/BENCHMARKS.md): a
-- redis.call() is 8-15k, a table 1-2k, a closure about 0.5k, so this file defines few
-- functions and tables per call, a node is read with ONE HMGET (its counters and the
-- object or child fields the script announced with want()), changed in memory, and
-- written back by finish() with one HSET (plus an HDEL only for fields that go), with the
-- leaf index, the emptied nodes and the shard's stats (read once, written once).
--
-- The file is in parts ('-- @part <name>: needs <part> ...'); a script names the parts it
-- uses on a '-- uses: <part> ...' line of its header and gets only those and what they
-- need, in this file's order (mooncake_redis/scripts.py); a script without one gets all,
-- one whose line names none gets nothing. A '-- lazy: <part> ...' line names parts (and
-- what they need, less what the prelude has) that go where the script's '-- @lazy' line
-- is, inside a function it calls only on its rare path: a part defined but not used
-- still costs each call (put_start: its general path's node records).
-- Every part defined costs each call of the script (its locals and closures).

-- @part core

local LEAVES, SOFT_LEAVES, STATS, PENDING, FENCES, OUTBOX, EVENTS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local RELEASE_MS, EVENTS_CAP, EPOCH_HORIZON_MS =
  tonumber(ARGV[1]) or 0, tonumber(ARGV[2]) or 0, tonumber(ARGV[3]) or 0
local EVENTS_TRIM = EVENTS_CAP < 0  -- at maxmemory: see emit
if EVENTS_TRIM then EVENTS_CAP = -EVENTS_CAP end
local INF = math.huge

-- Milliseconds of the Redis clock (never the client's), read on first use.
local NOW_MS
local function now()
  if not NOW_MS then
    local t = redis.call('TIME')
    NOW_MS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW_MS
end

-- The decimal text of an integer (Redis's own form; never Lua's %.14g, which rounds past
-- 14 digits), made once per call for each value: times, epochs, sizes and counters
-- repeat across the items of a call.
local texts = {[INF] = '+inf'}
local function num(x)
  local text = texts[x]
  if not text then
    text = string.format('%d', x)
    if x == x then texts[x] = text end  -- NaN is no table key
  end
  return text
end

local function fail(code, message)
  return 'MCERR_' .. code .. ' ' .. message
end

-- @part events: needs core

-- One event per object (docs/EVENTS.md): type, hash (the node), suffix (key = hash ..
-- suffix), size (decimal text), the node's parent and the object's replicas when it has
-- them, and more fields for some types (after size). Entries are kept short: a stream
-- holds events_max_len of them per shard.
-- At maxmemory (EVENTS_TRIM) the call first drops the stream's older entries (whole
-- macro nodes: only that frees memory), so freeing frees: a removal would otherwise grow
-- a stream below its cap by more than the node it deletes. Consumers that had not read
-- them see events lost, as past the cap, and resync (docs/EVENTS.md).
local function emit_event(kind, hash, parent, suffix, size, reps, ...)
  if EVENTS_CAP <= 0 then return end
  if EVENTS_TRIM then
    redis.call('XTRIM', EVENTS, 'MAXLEN', '~', 0)
    EVENTS_TRIM = false
  end
  local plain = not reps or reps == ''
  if plain and select('#', ...) == 0 then  -- the common entries, without a table
    if parent then
      redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'type', kind, 'hash', hash,
        'suffix', suffix, 'size', size, 'parent', parent)
    else
      redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'type', kind, 'hash', hash,
        'suffix', suffix, 'size', size)
    end
    return
  end
  local extra = {...}
  if parent then extra[#extra + 1] = 'parent'; extra[#extra + 1] = parent end
  if not plain then extra[#extra + 1] = 'replicas'; extra[#extra + 1] = reps end
  redis.call('XADD', EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'type', kind, 'hash', hash,
    'suffix', suffix, 'size', size, unpack(extra))
end

-- @part leaves: needs core

-- A node is a leaf when it holds objects and has no children. Its score is the time after
-- which all its objects are evictable: +inf with a hard pin, else the latest lease end of
-- its complete objects and the latest start + release timeout of its processing ones.
-- Returns the leaf index it belongs in (nil: none) and its score, from its counters.
local function leaf_score(no, nc, nh, ns, lm, np, ps)
  if (no or 0) == 0 or (nc or 0) > 0 then return nil, nil end
  local score
  if (nh or 0) > 0 then
    score = INF
  else
    score = lm or 0
    if (np or 0) > 0 and ps + RELEASE_MS > score then score = ps + RELEASE_MS end
  end
  if (ns or 0) > 0 then return SOFT_LEAVES, score end
  return LEAVES, score
end

-- Moves a node in the leaf indexes from (set0, score0) to (set1, score1), nil = none.
local function move_leaf(hash, set0, score0, set1, score1)
  if set0 and set1 ~= set0 then redis.call('ZREM', set0, hash) end
  if set1 and (set1 ~= set0 or score1 ~= score0) then
    redis.call('ZADD', set1, num(score1), hash)
  end
end

-- @part objects: needs core

-- Packed object values: '1<state>,<size>,<time>,<pins>,<token>' followed by one
-- '|<segment>,<location>,<medium>' per replica (mooncake_redis/values.py); reps is that
-- tail ('' for an object without replicas). Segment names and locations arrive escaped
-- (no ',' or '|'), so scripts compare them as they are and never decode them.
local function unpack_object(v)
  local state, size, t, pins, token, reps =
    string.match(v, '^1(%a),(%d+),(%d+),(%d),([^|]*)(.*)$')
  return state, tonumber(size), tonumber(t), tonumber(pins), token, reps
end

local function pack_object(state, size, t, pins, token, reps)
  return '1' .. state .. ',' .. num(size) .. ',' .. num(t) .. ',' .. pins .. ',' .. token ..
    (reps or '')
end

-- The bytes an object occupies: its size once per replica (a replica holds the whole
-- object, as in Mooncake), or once for an object without replicas.
local function charged(size, reps)
  if not reps or reps == '' then return size end
  local _, count = string.gsub(reps, '|', '')
  return size * count
end

-- Bytes per segment changed by this script, written to the stats' su:<segment> by finish().
local seg_delta = {}
local function count_segments(reps, sign, size)
  if reps and reps ~= '' then
    for segment in string.gmatch(reps, '|([^,|]*)') do
      seg_delta[segment] = (seg_delta[segment] or 0) + sign * size
    end
  end
end

-- A 64-hex child is stored under its bare hash (64 bytes: the listpack limit), others as
-- c:<hash>; the client names the field (values.child_field_argument), this tells them apart.
local function is_child_field(f)
  return string.sub(f, 1, 2) == 'c:' or (#f == 64 and not string.find(f, '[^0-9a-f]'))
end

-- @part stats: needs core objects

-- The shard's stats: read when first needed, written once by write_stats() (finish()).
local stats_read = false
local s_used, s_objects, s_nodes, s_writes, s_fences, s_limit, s_shells = 0, 0, 0, 0, 0, nil, 0
local d_used, d_objects, d_nodes, d_fences, d_shells = 0, 0, 0, 0, 0
-- Parents given to nodes that had children (the only links that can close a cycle): the
-- stats' `links` counts them, so a client's cycle walk within one shard can be checked to
-- still hold when its link is written (check_parent).
local d_links = 0

local function read_stats()
  if not stats_read then
    local v = redis.call('HMGET', STATS, 'used_bytes', 'objects', 'nodes', 'writes', 'fences',
      'limit', 'shells')
    s_used, s_objects, s_nodes = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
    s_writes, s_fences, s_limit = tonumber(v[4]) or 0, tonumber(v[5]) or 0, tonumber(v[6])
    s_shells = tonumber(v[7]) or 0
    stats_read = true
  end
end

-- The highest fence of a child, or nil (no read at all while the shard has no fence).
local function fence_of(hash)
  read_stats()
  if s_fences + d_fences <= 0 then return nil end
  return tonumber(redis.call('ZSCORE', FENCES, hash))
end

-- The stats' changes of this call, written once: whole when read (read_stats), else as
-- increments; `wrote` says a node was written (the call counts as a write).
local function write_stats(wrote)
  for segment, delta in pairs(seg_delta) do
    if delta ~= 0 then redis.call('HINCRBY', STATS, 'su:' .. segment, delta) end
  end
  if d_links ~= 0 then redis.call('HINCRBY', STATS, 'links', d_links) end
  if not wrote and d_used == 0 and d_objects == 0 and d_nodes == 0 and d_fences == 0 and
      d_shells == 0 then
    return
  end
  if stats_read then
    redis.call('HSET', STATS, 'used_bytes', num(s_used + d_used),
      'objects', num(s_objects + d_objects), 'nodes', num(s_nodes + d_nodes),
      'fences', num(s_fences + d_fences), 'shells', num(s_shells + d_shells),
      'writes', num(s_writes + 1))
    return
  end
  if d_used ~= 0 then redis.call('HINCRBY', STATS, 'used_bytes', d_used) end
  if d_objects ~= 0 then redis.call('HINCRBY', STATS, 'objects', d_objects) end
  if d_nodes ~= 0 then redis.call('HINCRBY', STATS, 'nodes', d_nodes) end
  if d_fences ~= 0 then redis.call('HINCRBY', STATS, 'fences', d_fences) end
  if d_shells ~= 0 then redis.call('HINCRBY', STATS, 'shells', d_shells) end
  redis.call('HINCRBY', STATS, 'writes', 1)
end

-- Whether the client's cycle walk for this link still holds: '1' (a walk that left the
-- shard: the resolver's walk confirms the link later), or '1:<links>' (a walk that stayed
-- in this shard, begun when the stats' `links` was <links>: no parent was given to a node
-- with children here since, so what the walk saw is still so; this batch's own links the
-- walk followed as intended).
local function walk_holds(checked)
  if checked == '1' then return true end
  local stamp = string.match(checked, '^1:(%d+)$')
  if not stamp then return false end
  return tonumber(redis.call('HGET', STATS, 'links') or '0') == tonumber(stamp)
end

-- @part deaths: needs stats

-- What the deletion of nodes and breaking of links leave to write, collected and written
-- once per call by write_deaths() (finish()): the nodes' keys (one DEL), leaf-index
-- entries that go, fences, and the unlinks recorded in the outbox and returned to the
-- caller (intents: {parent, child, epoch}), which runs them in the parent's shard.
local intents = {}
local gone, dead = {}, {}  -- keys of the nodes deleted: a list and a set
local zrem = {}  -- leaf index -> its members that go
local fenced, outbox = {}, {}  -- ZADD arguments: score, member, ...

local function drop_leaf(set_, hash)
  if set_ then
    local list = zrem[set_]
    if list then list[#list + 1] = hash else zrem[set_] = {hash} end
  end
end

-- A fence makes step 2 of any link of this child with an epoch <= it refuse; it is only
-- needed while such an epoch could still be accepted (within the horizon), and fences
-- past the horizon are dropped when the call writes its own.
local function raise_fence(hash, epoch)
  if epoch < now() - EPOCH_HORIZON_MS then return end
  fenced[#fenced + 1] = num(epoch)
  fenced[#fenced + 1] = hash
end

-- The unlink of a deleted child from its parent in another call (the outbox protocol).
local function unlink_later(hash, parent, epoch)
  outbox[#outbox + 1] = now()
  outbox[#outbox + 1] = hash .. '|' .. parent .. '|' .. num(epoch)
  intents[#intents + 1] = {parent, hash, num(epoch)}
end

-- A node this call deletes, from its counters: set_ is its leaf index (nil: none), shell
-- whether the stats count it as a shell, parent and epoch its link (nil: none).
local function delete_node(key, hash, set_, shell, parent, epoch)
  d_nodes = d_nodes - 1
  if shell then d_shells = d_shells - 1 end
  gone[#gone + 1] = key
  dead[key] = true
  drop_leaf(set_, hash)
  if parent then
    raise_fence(hash, epoch)
    unlink_later(hash, parent, epoch)
  end
end

-- A command with many arguments, sent in slices (Lua's unpack has a stack limit); nil key:
-- the arguments are the keys (DEL). Returns the replies' sum.
local function in_slices(command, key, args, extra)
  local step, total = 2000, 0
  for first = 1, #args, step do
    local last = math.min(first + step - 1, #args)
    if extra then
      total = total + redis.call(command, key, extra, unpack(args, first, last))
    elseif key then
      total = total + redis.call(command, key, unpack(args, first, last))
    else
      total = total + redis.call(command, unpack(args, first, last))
    end
  end
  return total
end

-- Calls run(first, last) for each run of items that name one node (the node's key index is
-- an item's first argument; items are `width` arguments each, from ARGV[first]): lean
-- scripts read and write a node once a run.
local function each_run(first, width, run)
  local start = first
  for a = first, #ARGV, width do
    if ARGV[a + width] ~= ARGV[a] then  -- the run ends here
      run(start, a)
      start = a + width
    end
  end
end

local function write_deaths()
  if #gone > 0 then in_slices('DEL', nil, gone) end
  for set_, members in pairs(zrem) do in_slices('ZREM', set_, members) end
  if #outbox > 0 then in_slices('ZADD', OUTBOX, outbox) end
  if #fenced > 0 then
    read_stats()
    if s_fences + d_fences > 0 then
      d_fences = d_fences -
        redis.call('ZREMRANGEBYSCORE', FENCES, '-inf', '(' .. num(now() - EPOCH_HORIZON_MS))
    end
    d_fences = d_fences + in_slices('ZADD', FENCES, fenced, 'GT')
  end
end

-- Lean scripts work through the items of one node that come one after another (a run)
-- and meet a node again after others' items only rarely; they keep records (intents, new
-- leaves) in the order their nodes were first named, as finish() does: rank is hash ->
-- the run that first named it, at the position of a record's hash.
local function in_first_order(list, rank, at)
  table.sort(list, function(x, y) return rank[x[at]] < rank[y[at]] end)
end

-- Flattens intents ({parent, child, epoch} ...) or new leaves for the reply.
local function flat(list)
  local out = {}
  for _, t in ipairs(list) do
    for _, x in ipairs(t) do out[#out + 1] = x end
  end
  return out
end

-- @part nodes: needs core events leaves objects stats deaths

-- Node records, by key and in load order (one table), and the fields scripts announced.
-- A record holds the node's counters, p (its parent; a shell made by link.lua whose
-- children all came from one batch holds '?<batch id>' in the hash instead: lb here),
-- the object and child fields read or written (false = absent), and d: what changed.
-- finish() lists the emptied nodes' unlinks in intents, and the nodes that became leaves
-- in new_leaves unless the script sets list_new_leaves false (put_start: it returns none).
local nodes, wanted = {}, {}
local new_leaves, list_new_leaves = {}, true

-- Announce a field of a node that the script will read, so node() fetches it at once.
local function want(key, field)
  local list = wanted[key]
  if list then list[#list + 1] = field else wanted[key] = {field} end
end

-- The leaf index and score of a node record (leaf_score).
local function leaf_of(n)
  if not n.exists then return nil, nil end
  return leaf_score(n.no, n.nc, n.nh, n.ns, n.lm, n.np, n.ps)
end

-- The record of a node key (read once per script, with one HMGET).
local function node(key, hash)
  local n = nodes[key]
  if n then return n end
  local extra = wanted[key]
  local v
  if extra then
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm', unpack(extra))
  else
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm')
  end
  local p, lb = v[1], nil
  if p and string.byte(p, 1) == 63 then  -- '?': a shell's batch marker, no parent
    lb, p = string.sub(p, 2), nil
  end
  n = {key = key, hash = hash, p = p or nil, lb = lb, lb0 = lb, pe = tonumber(v[2]),
    nc = tonumber(v[3]), no = tonumber(v[4]), np = tonumber(v[5]), ps = tonumber(v[6]),
    psn = tonumber(v[7]), nh = tonumber(v[8]), ns = tonumber(v[9]), b = tonumber(v[10]),
    lm = tonumber(v[11]), d = {}, exists = false}
  n.exists = n.no ~= nil or n.nc ~= nil
  n.shell0 = (n.no or 0) == 0 and (n.nc or 0) > 0  -- children, no objects: counted in stats
  if extra then
    for i = 1, #extra do n[extra[i]] = v[i + 11] or false end
  end
  n.leaf_set, n.leaf_score = leaf_of(n)
  nodes[key] = n
  nodes[#nodes + 1] = n
  return n
end

-- Counters: changed in the record, written back by finish().
local function set(n, f, x)
  n[f] = x
  n.d[f] = true
end

local function add(n, f, x)
  n[f] = (n[f] or 0) + x
  n.d[f] = true
end

-- Object and child fields: read through the record (prefetched, or one HGET), written
-- back by finish(); false = absent.
local function field(n, f)
  local v = n[f]
  if v == nil then
    v = redis.call('HGET', n.key, f) or false
    n[f] = v
  end
  return v or nil
end

local function put_field(n, f, v)
  n[f] = v or false
  n.d[f] = true
end

local function create(n)
  if not n.exists then
    n.exists = true
    d_nodes = d_nodes + 1
  end
end

-- Every 'o:' field of the node as {suffix, state, size, time, pins, token, reps}, as it is now
-- (fields this script changed but did not write back yet included).
local function scan_objects(n)
  local all = redis.call('HGETALL', n.key)
  local values = {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'o:' then values[all[i]] = all[i + 1] end
  end
  for f in pairs(n.d) do
    if string.sub(f, 1, 2) == 'o:' then values[f] = n[f] or nil end
  end
  local found = {}
  for f, value in pairs(values) do
    local state, size, t, pins, token, reps = unpack_object(value)
    found[#found + 1] = {string.sub(f, 3), state, size, t, pins, token, reps}
  end
  return found
end

-- Adds (sign 1) or removes (sign -1) one object's share of the node's counters and the
-- shard's stats (its bytes: charged()). A removal must come after the object's field
-- changed (put_field), so a rescan sees the node as it now is.
local function count_object(n, sign, state, size, t, pins, reps)
  local bytes = charged(size, reps)
  count_segments(reps, sign, size)
  add(n, 'no', sign)
  add(n, 'b', sign * bytes)
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
      if n.psn <= 0 then  -- the latest starter is gone: find the next latest
        local ps, psn = nil, nil
        for _, o in ipairs(scan_objects(n)) do
          if o[2] == 'p' then
            if not ps or o[4] > ps then ps, psn = o[4], 1 elseif o[4] == ps then psn = psn + 1 end
          end
        end
        set(n, 'ps', ps)
        set(n, 'psn', psn)
      end
    end
  elseif sign > 0 then
    if t > (n.lm or 0) then set(n, 'lm', t) end
  elseif t >= (n.lm or 0) then
    n.recompute_lm = true
  end
  d_used = d_used + sign * bytes
  d_objects = d_objects + sign
end

-- An object's event (emit_event) from its node record.
local function emit(kind, n, suffix, size, reps, ...)
  emit_event(kind, n.hash, n.p, suffix, num(size), reps, ...)
end

-- Writes back every node touched: an emptied one is deleted (and, if it had a parent, its
-- unlink recorded in the outbox and returned to the client, which runs it in the parent's
-- shard); the leaf index is kept exact; the shard's stats are written once.
local function finish()
  local wrote = false
  for i = 1, #nodes do
    local n = nodes[i]
    if n.exists and (n.no or 0) == 0 and (n.nc or 0) == 0 then
      n.exists = false
      delete_node(n.key, n.hash, nil, false, n.p, n.pe or 0)  -- index and shells: below
      wrote = true
    elseif next(n.d) then
      if n.recompute_lm then
        local lm = nil
        for _, o in ipairs(scan_objects(n)) do
          if o[2] == 'c' and (not lm or o[4] > lm) then lm = o[4] end
        end
        n.lm = lm
        n.d.lm = true
      end
      local put, drop = {}, {}
      for f in pairs(n.d) do
        local x = n[f]
        if f == 'p' then x = n.p or (n.lb and ('?' .. n.lb)) end
        if x == nil or x == false or x == 0 then
          drop[#drop + 1] = f
        else
          put[#put + 1] = f
          put[#put + 1] = type(x) == 'number' and num(x) or x
        end
      end
      if #put > 0 then redis.call('HSET', n.key, unpack(put)) end
      if #drop > 0 then redis.call('HDEL', n.key, unpack(drop)) end
      wrote = true
    end
    local shell = n.exists and (n.no or 0) == 0 and (n.nc or 0) > 0
    if shell ~= n.shell0 then d_shells = d_shells + (shell and 1 or -1) end
    local set_, score = leaf_of(n)
    move_leaf(n.hash, n.leaf_set, n.leaf_score, set_, score)
    if list_new_leaves and set_ and not n.leaf_set then
      new_leaves[#new_leaves + 1] = {n.hash, num(score), num(n.b or 0),
        set_ == SOFT_LEAVES and '1' or '0'}
    end
  end
  write_deaths()
  write_stats(wrote)
end

-- @part links: needs nodes

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
  if epoch < now() - EPOCH_HORIZON_MS then
    return nil, fail('STALE_EPOCH', num(epoch))
  end
  local fence = fence_of(n.hash)
  if fence and fence >= epoch then return nil, fail('FENCED', num(fence)) end
  if n.exists and (n.nc or 0) > 0 and n.lb0 ~= batch and not walk_holds(checked) then
    return nil, fail('CYCLE_CHECK', 'node ' .. n.hash .. ' has children')
  end
  return 'new'
end

-- Applies a checked link and says how safe it is: 'L' (the client may confirm it: the
-- link existed already, or the node had no children but this batch's, so no cycle can
-- close through it), 'C' (a new link into a node with children from elsewhere: left
-- pending for the resolver to confirm after its walk up for a cycle), '' (no parent).
-- Any write of a node ends its shell's batch marker.
local function apply_parent(n, parent, epoch, how, batch)
  if n.lb then
    n.lb = nil
    n.d.p = true
  end
  if how == '' then return '' end
  local flag = 'L'
  if how == 'new' then
    if (n.nc or 0) > 0 then d_links = d_links + 1 end
    if (n.nc or 0) > 0 and n.lb0 ~= batch then flag = 'C' end
    set(n, 'p', parent)
    set(n, 'pe', epoch)
  elseif epoch > (n.pe or 0) then
    set(n, 'pe', epoch)
  end
  return flag
end
