-- Shared helpers. mooncake_redis/scripts.py prepends the parts a script names to it, so each
-- script stays one self-contained EVALSHA body.
--
-- Calls per Redis node (DESIGN v4, docs/ARCHITECTURE.md "Scripts"): one call carries the
-- work of one step for every shard of the namespace that ONE Redis node serves. ARGV[1] is
-- one packed argument, a JSON array decoded once (cjson: Redis and fakeredis have it):
--   A[1] namespace, A[2] put_start release timeout (ms): a processing object older than
--   this is evictable, A[3] events cap per shard stream (0 = no events; negative: Redis is
--   at maxmemory, so the first event of a stream frees its old entries first), A[4] link
--   epoch horizon (ms), A[5] the layout's tag width (1 | 2) and A[6] its shard count,
--   A[7] the shards this node serves, joined by ',' ('' = all: a single Redis), then the
--   script's own arguments and its items (mooncake_redis/layouts.py declares each).
-- KEYS: none, or on Redis Cluster one key of a shard of the call, so Redis routes it
-- (MOVED, ASK) before it runs. Every other key is built here from the namespace and the
-- shard tags the items carry: '<ns>:{<tag>}:n:<hash>' and the shard's keys.
-- On a cluster (A[7] not '') every key a script writes is touched before its first write:
-- a shard's keys when the shard is first used here, a node key by its read; all writes
-- happen in finish(). A key Redis does not serve here ("non local key", a migrating slot)
-- so refuses the call before anything is written, and the client sends the items again
-- shard by shard. On the source of a migrating slot a key this call empties is gone for
-- its next command too, so no key is emptied before its last write in a call (additions
-- before removals: write_leaves, the fences in finish). Items are checked completely before anything is written for them, so a
-- refused item leaves nothing behind; results come back one per item, a refusal as the
-- string 'MCERR_<CODE> message'.
--
-- What costs here is counted in instructions of redis-server (docs/BENCHMARKS.md): a
-- redis.call() is 8-15k, a table 1-2k, a closure about 0.5k. So a node is read with ONE
-- HMGET and written with one HSET; a shard's leaf index, stats and events stream are
-- written once a call (one ZADD, one HSET, one XADD of every object a call stored).
--
-- The file is in parts ('-- @part <name>: needs <part> ...'); a script names the parts it
-- uses on a '-- uses: <part> ...' line and gets only those and what they need, in this
-- file's order (mooncake_redis/scripts.py); one whose line names none gets nothing.

-- @part core

local A = cjson.decode(ARGV[1])
local NS, RELEASE_MS, EVENTS_CAP, EPOCH_HORIZON_MS, WIDTH, COUNT =
  A[1], A[2], A[3], A[4], A[5], A[6]
local EVENTS_TRIM = EVENTS_CAP < 0  -- at maxmemory: see write_events
if EVENTS_TRIM then EVENTS_CAP = -EVENTS_CAP end
local SERVED = nil  -- tag -> true for the shards served here; nil: every shard (one Redis)
if A[7] ~= '' then
  SERVED = {}
  for tag in string.gmatch(A[7], '[^,]+') do SERVED[tag] = true end
end
local CLUSTER = SERVED ~= nil
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

-- HINCRBY a shard stats field. A junk value there (anyone who can write the namespace can
-- write one) fails HINCRBY, and a script is not rolled back: its writes before that would
-- stay and the call would fail. Stats are counts fsck recounts, so the field is set to the
-- increment instead: a wrong count, which fsck reports and --repair mends.
local function add_stat(stats, field, by)
  local reply = redis.pcall('HINCRBY', stats, field, by)
  if type(reply) == 'table' and reply.err then redis.call('HSET', stats, field, by) end
end

local function fail(code, message)
  return 'MCERR_' .. code .. ' ' .. message
end

-- The shards this call works in, by tag, each with its key names and what the call
-- changes there (stats deltas, leaf index moves, events, deaths), in first-use order.
local SHARD, SHARDS = {}, {}
local function shard(tag)
  local s = SHARD[tag]
  if s then return s end
  local base = NS .. ':{' .. tag .. '}:'
  s = {tag = tag, base = base, nbase = base .. 'n:', stats = base .. 'stats',
    du = 0, dobj = 0, dn = 0, dsh = 0, dfe = 0, dlk = 0, wrote = false}
  if CLUSTER then  -- touched before any write: a key not served here refuses the call now
    redis.call('EXISTS', s.stats, base .. 'leaves', base .. 'soft_leaves', base .. 'events',
      base .. 'fences', base .. 'outbox', base .. 'pending')
  end
  SHARD[tag] = s
  SHARDS[#SHARDS + 1] = s
  return s
end

-- The shard tag a node has if its hash is a 64-hex digest (its first digit with width 1,
-- else its first byte's top bits); nil where no tag can be read off the hash. Only a
-- guess for any other hash, whose shard is blake3's (the client computes it): a caller
-- finds the node at the guessed shard or counts it as not served here. A node key names
-- its hash whole, so no other node can be found under it. (No hex check here: a pattern
-- scan of 64 characters costs more than a redis.call.)
local tag_texts = {}
local function tag_of(hash)
  if #hash ~= 64 then return nil end
  if WIDTH == 1 then
    local first = string.sub(hash, 1, 1)
    if string.find('0123456789abcdef', first, 1, true) then return first end
    return nil
  end
  local first = string.sub(hash, 1, 2)
  local tag = tag_texts[first]
  if tag == nil then
    local byte = tonumber(first, 16)
    tag = byte and string.format('%02x', math.floor(byte * COUNT / 256)) or false
    tag_texts[first] = tag
  end
  return tag or nil
end

local function is_local(tag)
  return tag ~= nil and (SERVED == nil or SERVED[tag] == true)
end

-- A 64-hex child is stored under its bare hash (64 bytes: the listpack limit), others as
-- c:<hash>. The client names the field when it writes one (it knows which hashes are
-- digests); a script that meets a child looks for both (child_fields).
local function child_field(hash)
  if is_digest(hash) then return hash end
  return 'c:' .. hash
end

local function child_fields(hash)
  if #hash == 64 then return {hash, 'c:' .. hash} end
  return {'c:' .. hash}
end

-- Whether a text is 64 lower-case hex digits (a pattern scan: off the hot paths).
local function is_digest(text)
  return #text == 64 and not string.find(text, '[^0-9a-f]')
end

local function is_child_field(f)
  return string.sub(f, 1, 2) == 'c:' or is_digest(f)
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

-- @part events: needs core

-- Events per call (docs/EVENTS.md): a shard's stream gets ONE entry per call and type,
-- 'type' <type> 'objects' <JSON>, the JSON a flat array that names, for each node, 'h'
-- <hash> ('p' <parent> where it has one) and for each of its objects 's' <suffix> 'z'
-- <size> ('r' <replicas> where it has them) and that type's own fields (free_after;
-- segment, left, dropped). One field, so a reader that takes an entry's fields as a map
-- (redis-py's XRANGE, XREAD) loses nothing. An entry holds at most ENTRY_OBJECTS objects:
-- a call with more writes more entries, each starting with its node.
-- At maxmemory (EVENTS_TRIM) a stream's older entries go first (whole macro nodes: only
-- that frees memory), so freeing frees.
local ENTRY_OBJECTS = 1000

local function event(s, kind, hash, parent, suffix, size, reps, ...)
  if EVENTS_CAP <= 0 then return end
  local entries = s.ev
  if not entries then
    entries = {}
    s.ev = entries
  end
  local e = entries[kind]
  if not e or e.count >= ENTRY_OBJECTS then
    e = {kind = kind, v = {}, n = 0, h = false, count = 0}
    entries[kind] = e
    entries[#entries + 1] = e
  end
  local v, n = e.v, e.n
  if e.h ~= hash then
    v[n + 1], v[n + 2] = 'h', hash
    n = n + 2
    if parent then
      v[n + 1], v[n + 2] = 'p', parent
      n = n + 2
    end
    e.h = hash
  end
  v[n + 1], v[n + 2], v[n + 3], v[n + 4] = 's', suffix, 'z', size
  n = n + 4
  if reps and reps ~= '' then
    v[n + 1], v[n + 2] = 'r', reps
    n = n + 2
  end
  local extra = select('#', ...)
  if extra > 0 then
    local more = {...}
    for i = 1, extra do v[n + i] = more[i] end
    n = n + extra
  end
  e.n, e.count = n, e.count + 1
end

local function write_events(s)
  local entries = s.ev
  if not entries then return end
  local stream = s.base .. 'events'
  if EVENTS_TRIM then redis.call('XTRIM', stream, 'MAXLEN', '~', 0) end
  for i = 1, #entries do
    local e = entries[i]
    redis.call('XADD', stream, 'MAXLEN', '~', EVENTS_CAP, '*', 'type', e.kind, 'objects',
      cjson.encode(e.v))
  end
end

-- @part leaves: needs core

-- A node is a leaf when it holds objects and has no children. Its score is the time after
-- which all its objects are evictable: +inf with a hard pin, else the latest lease end of
-- its complete objects and the latest start + release timeout of its processing ones.
-- Returns its leaf index (1 leaves, 2 soft_leaves: some object soft-pinned; nil none) and
-- its score, from its counters.
local function leaf_score(no, nc, nh, ns, lm, np, ps)
  if (no or 0) == 0 or (nc or 0) > 0 then return nil, nil end
  local score
  if (nh or 0) > 0 then
    score = INF
  else
    score = lm or 0
    if (np or 0) > 0 and ps + RELEASE_MS > score then score = ps + RELEASE_MS end
  end
  if (ns or 0) > 0 then return 2, score end
  return 1, score
end

local INDEX_NAMES = {'leaves', 'soft_leaves'}

-- Moves a node of shard s in its leaf indexes from (set0, score0) to (set1, score1), nil =
-- none; written once a call per shard and index (write_leaves).
local function move_leaf(s, hash, set0, score0, set1, score1)
  if set0 and set1 ~= set0 then
    local list = s['zrem' .. set0]
    if list then list[#list + 1] = hash else s['zrem' .. set0] = {hash} end
  end
  if set1 and (set1 ~= set0 or score1 ~= score0) then
    local list = s['zadd' .. set1]
    if not list then
      list = {}
      s['zadd' .. set1] = list
    end
    list[#list + 1] = num(score1)
    list[#list + 1] = hash
  end
end

-- Additions first, then the removals of nodes not added back (the end state of removals
-- then additions): a set never empties before its last write, so no write meets a key
-- gone from a migrating slot's source (the opening comment).
local function write_leaves(s)
  for set_ = 1, 2 do
    local key, gone, added = s.base .. INDEX_NAMES[set_], s['zrem' .. set_], s['zadd' .. set_]
    if added then
      in_slices('ZADD', key, added)
      if gone then
        local back, rest = {}, {}
        for i = 2, #added, 2 do back[added[i]] = true end
        for _, hash in ipairs(gone) do
          if not back[hash] then rest[#rest + 1] = hash end
        end
        gone = rest
      end
    end
    if gone and #gone > 0 then in_slices('ZREM', key, gone) end
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

-- Bytes per segment changed in shard s by this call, written to its stats' su:<segment>.
local function count_segments(s, reps, sign, size)
  if reps and reps ~= '' then
    local delta = s.seg
    if not delta then
      delta = {}
      s.seg = delta
    end
    for segment in string.gmatch(reps, '|([^,|]*)') do
      delta[segment] = (delta[segment] or 0) + sign * size
    end
  end
end

-- @part stats: needs core objects

-- A shard's stats: read when first needed, written once (write_stats).
local function read_stats(s)
  if not s.read then
    local v = redis.call('HMGET', s.stats, 'used_bytes', 'objects', 'nodes', 'writes',
      'fences', 'limit', 'shells')
    s.used, s.objects, s.nodes = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
    s.writes, s.fences, s.limit = tonumber(v[4]) or 0, tonumber(v[5]) or 0, tonumber(v[6])
    s.shells = tonumber(v[7]) or 0
    s.read = true
  end
end

-- The highest fence of a child, or nil (no read at all while the shard has no fence).
local function fence_of(s, hash)
  read_stats(s)
  if s.fences + s.dfe <= 0 then return nil end
  return tonumber(redis.call('ZSCORE', s.base .. 'fences', hash))
end

-- The stats' changes of this call in shard s, written once: whole when read, else as
-- increments. `wrote` (a node was written) counts the call in `writes`, which lets fsck
-- recount a shard only if no script changed what it counts meanwhile.
local function write_stats(s)
  local delta = s.seg
  if delta then
    for segment, bytes in pairs(delta) do
      if bytes ~= 0 then add_stat(s.stats, 'su:' .. segment, bytes) end
    end
  end
  if s.dlk ~= 0 then add_stat(s.stats, 'links', s.dlk) end
  if not s.wrote and s.du == 0 and s.dobj == 0 and s.dn == 0 and s.dfe == 0 and
      s.dsh == 0 then
    return
  end
  if s.read then
    redis.call('HSET', s.stats, 'used_bytes', num(s.used + s.du),
      'objects', num(s.objects + s.dobj), 'nodes', num(s.nodes + s.dn),
      'fences', num(s.fences + s.dfe), 'shells', num(s.shells + s.dsh),
      'writes', num(s.writes + 1))
    return
  end
  if s.du ~= 0 then add_stat(s.stats, 'used_bytes', s.du) end
  if s.dobj ~= 0 then add_stat(s.stats, 'objects', s.dobj) end
  if s.dn ~= 0 then add_stat(s.stats, 'nodes', s.dn) end
  if s.dfe ~= 0 then add_stat(s.stats, 'fences', s.dfe) end
  if s.dsh ~= 0 then add_stat(s.stats, 'shells', s.dsh) end
  add_stat(s.stats, 'writes', 1)
end

-- Whether the client's cycle walk for a link into shard s still holds: '1' (a walk that
-- left the shard: the resolver's walk confirms the link later), or '1:<links>' (a walk
-- that stayed in this shard, begun when the stats' `links` was <links>: no parent was
-- given to a node with children here since, so what the walk saw is still so).
local function walk_holds(s, checked)
  if checked == '1' then return true end
  local stamp = string.match(checked, '^1:(%d+)$')
  if not stamp then return false end
  return tonumber(redis.call('HGET', s.stats, 'links') or '0') == tonumber(stamp)
end

-- @part nodes: needs core events leaves objects stats

-- Node records, by key and in load order. A record holds the node's counters, p (its
-- parent; a shell made by a link whose children all came from one batch holds
-- '?<batch id>' in the hash instead: lb here), the object and child fields read or
-- written (false = absent), and d: what changed. finish() settles and writes them.
local REC, RECS = {}, {}

-- The record of a node from an HMGET reply v of its counters (in COUNTER_FIELDS' order)
-- and then `fields`.
local function record(s, hash, key, v, fields)
  local p, lb = v[1], nil
  if p and string.byte(p, 1) == 63 then  -- '?': a shell's batch marker, no parent
    lb, p = string.sub(p, 2), nil
  end
  local n = {key = key, hash = hash, s = s, p = p or nil, lb = lb, lb0 = lb,
    pe = tonumber(v[2]), nc = tonumber(v[3]), no = tonumber(v[4]), np = tonumber(v[5]),
    ps = tonumber(v[6]), psn = tonumber(v[7]), nh = tonumber(v[8]), ns = tonumber(v[9]),
    b = tonumber(v[10]), lm = tonumber(v[11]), d = {}}
  n.exists = n.no ~= nil or n.nc ~= nil
  n.existed = n.exists
  n.nc0 = n.nc or 0
  n.shell0 = n.exists and (n.no or 0) == 0 and n.nc0 > 0
  n.leaf_set, n.leaf_score = leaf_score(n.no, n.nc, n.nh, n.ns, n.lm, n.np, n.ps)
  if fields then
    for i = 1, #fields do n[fields[i]] = v[11 + i] or false end
  end
  REC[key] = n
  RECS[#RECS + 1] = n
  return n
end

-- The record of a node (one HMGET of its counters and `fields`, the object or child
-- fields the caller will read; a record loaded before gets the fields it lacks, read
-- unless the node did not exist when loaded: then none of them does).
local function node(s, hash, fields)
  local key = s.nbase .. hash
  local n = REC[key]
  if n then
    if fields and (n.whole or not n.existed) then
      for i = 1, #fields do
        if n[fields[i]] == nil then n[fields[i]] = false end
      end
    elseif fields then
      local missing = {}
      for i = 1, #fields do
        if n[fields[i]] == nil then missing[#missing + 1] = fields[i] end
      end
      if #missing > 0 then
        local v = redis.call('HMGET', key, unpack(missing))
        for i = 1, #missing do n[missing[i]] = v[i] or false end
      end
    end
    return n
  end
  local v
  if fields then
    local names = {'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}
    for i = 1, #fields do names[11 + i] = fields[i] end
    v = redis.call('HMGET', key, unpack(names))
  else
    v = redis.call('HMGET', key, 'p', 'pe', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b',
      'lm')
  end
  return record(s, hash, key, v, fields)
end

local COUNTERS = {p = true, pe = true, nc = true, no = true, np = true, ps = true,
  psn = true, nh = true, ns = true, b = true, lm = true}

-- The record of a node with every field (one HGETALL; eviction takes a node whole):
-- n.objects lists its object fields. A record loaded before is completed.
local function whole(s, hash)
  local key = s.nbase .. hash
  local all = redis.call('HGETALL', key)
  local n = REC[key]
  local objects = {}
  if n then
    for i = 1, #all, 2 do
      local f = all[i]
      if n[f] == nil and not COUNTERS[f] then n[f] = all[i + 1] end
      if string.sub(f, 1, 2) == 'o:' and n[f] then objects[#objects + 1] = f end
    end
    n.objects, n.whole = objects, true
    return n
  end
  n = {key = key, hash = hash, s = s, d = {}, whole = true}
  for i = 1, #all, 2 do
    local f = all[i]
    if COUNTERS[f] then
      n[f] = all[i + 1]
    else
      n[f] = all[i + 1]
      if string.sub(f, 1, 2) == 'o:' then objects[#objects + 1] = f end
    end
  end
  local p = n.p
  if p and string.byte(p, 1) == 63 then n.lb, n.lb0, n.p = string.sub(p, 2), string.sub(p, 2), nil end
  n.pe, n.nc, n.no, n.np = tonumber(n.pe), tonumber(n.nc), tonumber(n.no), tonumber(n.np)
  n.ps, n.psn, n.nh, n.ns = tonumber(n.ps), tonumber(n.psn), tonumber(n.nh), tonumber(n.ns)
  n.b, n.lm = tonumber(n.b), tonumber(n.lm)
  n.exists = n.no ~= nil or n.nc ~= nil
  n.existed = n.exists
  n.nc0 = n.nc or 0
  n.shell0 = n.exists and (n.no or 0) == 0 and n.nc0 > 0
  n.leaf_set, n.leaf_score = leaf_score(n.no, n.nc, n.nh, n.ns, n.lm, n.np, n.ps)
  n.objects = objects
  REC[key] = n
  RECS[#RECS + 1] = n
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

-- Object and child fields: read through the record (loaded with it, or one HGET), written
-- back by finish(); false = absent.
local function field(n, f)
  local v = n[f]
  if v == nil then
    v = not n.whole and redis.call('HGET', n.key, f) or false
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
    n.s.dn = n.s.dn + 1
  end
end

-- Every 'o:' field of the node as {suffix, state, size, time, pins, token, reps}, as it is now
-- (fields this call changed but did not write yet included).
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
  local s = n.s
  local bytes = charged(size, reps)
  count_segments(s, reps, sign, size)
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
  s.du = s.du + sign * bytes
  s.dobj = s.dobj + sign
end

-- An object's event from its node record.
local function emit(kind, n, suffix, size, reps, ...)
  event(n.s, kind, n.hash, n.p, suffix, num(size), reps, ...)
end

-- What deletions leave to the client: unlinks of nodes whose parent is not served here
-- ({parent, child, epoch}), and nodes that became leaves ({hash, score, bytes, soft}),
-- each in the order its node was loaded.
local intents, new_leaves, list_new_leaves = {}, {}, false

-- A fence makes step 2 of any link of this child with an epoch <= it refuse; it is only
-- needed while such an epoch could still be accepted (within the horizon).
local function raise_fence(s, hash, epoch)
  if epoch < now() - EPOCH_HORIZON_MS then return end
  local fenced = s.fenced
  if not fenced then
    fenced = {}
    s.fenced = fenced
  end
  fenced[#fenced + 1] = num(epoch)
  fenced[#fenced + 1] = hash
end

-- The field of `child` in the record q (loaded with child_fields(child)), or nil.
local function child_field_in(q, child)
  if #child == 64 and q[child] then return child end
  local f = 'c:' .. child
  if field(q, f) then return f end
  return nil
end

-- The parent's side of the unlink of `child` at `epoch` (a node deleted in this call, or
-- an intent the client sends): the child field goes if it still holds the epoch (a writer
-- that re-linked the child meanwhile wrote a newer one). Returns 1 if it went, else 0.
local function unlink_from(q, child, epoch)
  local f = child_field_in(q, child)
  local current = f and q[f]
  if not q.exists or q.dead or not current or tonumber(current) ~= epoch then return 0 end
  put_field(q, f, false)
  add(q, 'nc', -1)
  return 1
end

-- The unlink of the deleted node n from its parent: in this call when the parent is
-- served here (returns the parent's record), else recorded in the outbox and returned to
-- the client, which runs it where the parent lives (returns nil). A fence at the child's
-- epoch refuses a late step 2 of the link (it would name a parent that no longer lists
-- it): needed on a cluster, and wherever the unlink waits for another call.
local function unlink_parent(n)
  local epoch = n.pe or 0
  local tag = tag_of(n.p)
  if is_local(tag) then
    local q = node(shard(tag), n.p, child_fields(n.hash))
    if q.exists then  -- found where its hash says: its shard was no guess
      if CLUSTER then raise_fence(n.s, n.hash, epoch) end
      unlink_from(q, n.hash, epoch)
      return q
    end
  end
  raise_fence(n.s, n.hash, epoch)
  local s = n.s
  local outbox = s.outbox
  if not outbox then
    outbox = {}
    s.outbox = outbox
  end
  local epoch_s = num(epoch)
  outbox[#outbox + 1] = now()
  outbox[#outbox + 1] = n.hash .. '|' .. n.p .. '|' .. epoch_s
  intents[#intents + 1] = {n.p, n.hash, epoch_s}
  return nil
end

local function is_empty(n)
  return n.exists and not n.dead and (n.no or 0) == 0 and (n.nc or 0) == 0
end

-- Deletes n, left with no objects and no children, in finish(), and unlinks it from its
-- parent; a parent served here and left empty by that goes the same way (the cascade,
-- upward, in this call). on_parent(q), if given, sees each parent served here that the
-- cascade did not empty; it returns true once it emptied it (evict: a parent left a leaf
-- that may go too), and the cascade goes on from there.
local function die(n, on_parent)
  while n do
    n.dead = true
    n.exists = false
    local s = n.s
    if n.existed then
      s.dn = s.dn - 1
      if n.shell0 then s.dsh = s.dsh - 1 end
    end
    local q = n.p and unlink_parent(n)
    if q and not is_empty(q) and not (on_parent and not q.dead and on_parent(q)) then
      q = nil
    end
    n = q
  end
end

-- Settles every record (a node left with no objects and no children dies, with its
-- cascade), then writes them: each node once (DEL, or one HSET and an HDEL for fields
-- that go), the leaf indexes, fences and outbox, stats and events once per shard.
-- Every read happens before the first write.
local function finish()
  local i = 1
  while i <= #RECS do
    local n = RECS[i]
    if is_empty(n) then die(n) end
    i = i + 1
  end
  for _, n in ipairs(RECS) do
    local s = n.s
    if n.dead then
      if n.existed then
        local gone = s.gone
        if gone then gone[#gone + 1] = n.key else s.gone = {n.key} end
        s.wrote = true
      end
      move_leaf(s, n.hash, n.leaf_set, n.leaf_score, nil, nil)
    else
      if next(n.d) then
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
        s.wrote = true
      end
      local shell = n.exists and (n.no or 0) == 0 and (n.nc or 0) > 0
      if shell ~= n.shell0 then s.dsh = s.dsh + (shell and 1 or -1) end
      local set_, score = leaf_score(n.no, n.nc, n.nh, n.ns, n.lm, n.np, n.ps)
      move_leaf(s, n.hash, n.leaf_set, n.leaf_score, set_, score)
      if list_new_leaves and set_ and not n.leaf_set then
        new_leaves[#new_leaves + 1] = {n.hash, num(score), num(n.b or 0),
          set_ == 2 and '1' or '0'}
      end
    end
  end
  for _, s in ipairs(SHARDS) do
    if s.gone then in_slices('DEL', nil, s.gone) end
    write_leaves(s)
    if s.outbox then in_slices('ZADD', s.base .. 'outbox', s.outbox) end
    if s.pending then in_slices('ZADD', s.base .. 'pending', s.pending) end
    if s.unpend then in_slices('ZREM', s.base .. 'pending', s.unpend) end
    if s.fenced then  -- added before the expired ones go (a new fence is never expired)
      read_stats(s)
      local had = s.fences + s.dfe > 0
      s.dfe = s.dfe + in_slices('ZADD', s.base .. 'fences', s.fenced, 'GT')
      if had then
        s.dfe = s.dfe - redis.call('ZREMRANGEBYSCORE', s.base .. 'fences', '-inf',
          '(' .. num(now() - EPOCH_HORIZON_MS))
      end
    end
    write_stats(s)
    write_events(s)
  end
end

-- Flattens intents ({parent, child, epoch} ...) or new leaves for the reply.
local function flat(list, width)
  local out = {}
  for _, t in ipairs(list) do
    for j = 1, width do out[#out + 1] = t[j] end
  end
  return out
end

-- @part links: needs nodes

-- A link within this node (child and parent both served here) is written in one step:
-- the parent lists the child (in its field f) and the child names the parent at one epoch
-- m, higher than any fence of the child (a deleter's late unlink at an older epoch is
-- then a no-op) and no lower than the epoch the parent lists the child at already.
local function local_epoch(n, q, f, epoch)
  local m = epoch
  local fence = fence_of(n.s, n.hash)
  if fence and fence + 1 > m then m = fence + 1 end
  local listed = q[f] and tonumber(q[f])
  if listed and listed > m then m = listed end
  return m
end

-- Whether linking n under the parent p_hash would make n its own ancestor, walking up
-- from the parent through this call's records and the nodes served here: true (a cycle),
-- false (a root reached: a node without parent, or a digest no node has), or nil (the walk
-- met a node not served here, or one whose shard only the client can compute: the client
-- walks instead, and the link is left for the resolver's own walk).
local function closes_cycle(n, p_hash, max_depth)
  local cursor, seen = p_hash, 0
  while cursor do
    if cursor == n.hash then return true end
    seen = seen + 1
    if seen > max_depth then return true end  -- deeper than configured: as the walks say
    local tag = tag_of(cursor)
    if not is_local(tag) then return nil end
    local s = shard(tag)
    local r = REC[s.nbase .. cursor]
    local parent
    local found
    if r then
      found, parent = r.exists, r.p
    else
      local v = redis.call('HMGET', s.nbase .. cursor, 'p', 'no', 'nc')
      found, parent = v[2] or v[3], v[1]
      if parent and string.byte(parent, 1) == 63 then parent = nil end
    end
    if not found then  -- no such node there: none at all, if its shard was no guess
      if is_digest(cursor) then return false end
      return nil
    end
    cursor = parent or nil
  end
  return false
end

-- Step 2 of a link, for the node n that is to name `parent` (docs/ARCHITECTURE.md):
-- returns 'same' | 'new' | 'walked' | '' (no parent given), or nil and a refusal. `here`:
-- the parent is served here, so the link is written in this call, both sides, and a node
-- with children is walked up from the parent here ('walked': no cycle); where that walk
-- meets a node it cannot follow, the client walks (CYCLE_CHECK, sent again checked).
-- Else its step 1 ran before at `epoch`, and a fence, a stale epoch or a node with
-- children the client has not walked for refuse.
local function check_parent(n, parent, epoch, checked, batch, here, max_depth)
  if parent == '' then return '' end
  if n.p then
    if n.p ~= parent then
      return nil, fail('PARENT_CONFLICT', 'node ' .. n.hash .. ' already has parent ' .. n.p
        .. ', refusing parent ' .. parent)
    end
    return 'same'
  end
  -- children now (this call's too: an item may have made an older node with descendants
  -- a child of n), unless n is a shell this batch made: only through them can a cycle close
  local children = n.exists and (n.nc or 0) > 0 and n.lb0 ~= batch
  if here then
    if children and checked == '0' then
      local cycle = closes_cycle(n, parent, max_depth)
      if cycle then
        return nil, fail('CYCLE', 'linking node ' .. n.hash .. ' under ' .. parent ..
          ' would make it its own ancestor')
      end
      if cycle == false then return 'walked' end
      return nil, fail('CYCLE_CHECK', 'node ' .. n.hash .. ' has children')
    end
  else
    if epoch < now() - EPOCH_HORIZON_MS then
      return nil, fail('STALE_EPOCH', num(epoch))
    end
    local fence = fence_of(n.s, n.hash)
    if fence and fence >= epoch then return nil, fail('FENCED', num(fence)) end
  end
  if children and not walk_holds(n.s, checked) then
    return nil, fail('CYCLE_CHECK', 'node ' .. n.hash .. ' has children')
  end
  return 'new'
end

-- Applies a checked link and says how safe it is: 'L' (the client may confirm it: the
-- link existed already, no cycle can close through it, or it was walked here), 'C' (a new
-- link into a node with children from before this batch that the client walked: left
-- pending for the resolver to confirm after its own walk), '' (no parent).
-- A link written here whole (`q`: the parent's record; f: the child's field there) lists
-- the child in the parent at the same epoch, with no pending entry unless it is left for
-- the resolver; any write of a node ends its shell's batch marker.
local function apply_parent(n, parent, epoch, how, batch, q, f)
  if n.lb then
    n.lb = nil
    n.d.p = true
  end
  if how == '' then return '' end
  local flag = 'L'
  if how == 'new' or how == 'walked' then
    if (n.nc or 0) > 0 then n.s.dlk = n.s.dlk + 1 end
    if how == 'new' and n.exists and (n.nc or 0) > 0 and n.lb0 ~= batch then flag = 'C' end
    if q then epoch = local_epoch(n, q, f, epoch) end
    set(n, 'p', parent)
    set(n, 'pe', epoch)
  elseif epoch > (n.pe or 0) and not q then
    set(n, 'pe', epoch)
  end
  if q then
    local listed = q[f] and tonumber(q[f])
    local pe = n.pe or epoch
    if not listed or listed < pe then
      if not listed then
        create(q)
        add(q, 'nc', 1)
      end
      put_field(q, f, num(pe))
    end
    if flag == 'C' then  -- the resolver's walk confirms it, as a link of two steps
      local ps = q.s
      local pending = ps.pending
      if not pending then
        pending = {}
        ps.pending = pending
      end
      pending[#pending + 1] = num(now())
      pending[#pending + 1] = parent .. '|' .. n.hash .. '|' .. num(pe)
    end
  end
  return flag
end
