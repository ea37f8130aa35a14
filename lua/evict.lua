#!lua flags=allow-oom
-- evict: evict nodes of one shard, each atomically (all its objects or none), each object
-- announced on the events stream. Every node is re-checked, since it was chosen a round
-- trip ago: in mode 'leaf' it must still be a leaf, evictable now (no hard pin, every
-- object complete and unleased or processing past the release timeout), soft-pinned only
-- if allowed, and scored no later than the caller saw (a lease granted since then sends
-- it back to the queue with its new score). The leaf is deleted whole and unlinked from
-- its parent:
--  * a parent the caller found in this shard and declared with the item is unlinked in
--    this call (its child field goes if it still holds the leaf's epoch). A parent left
--    without children and objects is deleted and unlinked in turn; one left a leaf of the
--    index the call evicts from, evictable now and scored no later than the cutoff (the
--    latest score the caller chose this round), is evicted in this call too, while the
--    call's byte allowance lasts; else it joins its leaf index and is returned;
--  * any other parent: the unlink is recorded (outbox) and returned, as before.
-- Mode 'unlink' is such a recorded unlink, run by the caller in the parent's shard (the
-- outbox protocol's second step, as unlink.lua) with the same rules for the parent.
-- A chosen node that does not belong in the index it was read from (no node, not a
-- leaf, the other index: junk) is dropped from it; a leaf whose indexed score is not its
-- own is re-scored there. Every key is declared in KEYS.
-- Mode 'interior' (path-breaking eviction, only by option) takes the objects of a node
-- that has children, which stays as a shell.
-- uses: nodes
-- KEYS: 1-7 the shard's keys, then the chosen nodes and declared parents
-- ARGV: 1-3 header (_lib.lua), 4 soft pins allowed (0|1), 5 soft_pin_ttl_ms (0 = soft pins
--       never lapse; else a soft pin lapses that long after the object's lease ended),
--       6 the index evicted from ('leaves'|'soft_leaves'|'' in mode interior), 7 cutoff
--       score (an integer), 8 byte allowance for parents evicted inside the call, then 6
--       per item: node key index, node hash, the score the caller saw (mode 'unlink':
--       the epoch), mode ('leaf'|'interior'|'unlink'), the parent the caller found
--       (mode 'unlink': the child to unlink; '' = none), that parent's key index ('' =
--       not declared)
-- Returns: {one per item: 'E<objects>:<bytes>' evicted, 'S<score>' skipped (score now),
--           'X' not evictable as asked, 1|0 the unlink removed the child field or not;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft (0|1), ...; {leaves, objects, bytes} evicted inside the call as parents}
local soft_allowed, soft_ttl = ARGV[4] == '1', tonumber(ARGV[5])
local SOURCE = (ARGV[6] == 'leaves' and LEAVES) or (ARGV[6] == 'soft_leaves' and SOFT_LEAVES)
  or nil
local CUTOFF, allowance = tonumber(ARGV[7]), tonumber(ARGV[8])

-- Whether a soft pin whose holder's time (lease end, or start) is t has lapsed.
local function lapsed(t)
  return soft_ttl > 0 and t + soft_ttl <= now()
end

-- -- Mode 'interior' (path-breaking eviction): node records of _lib.lua, written by finish().

local function evictable(o)
  local state, t, pins = o[2], o[4], o[5]
  if pins >= 2 or (pins % 2 == 1 and not soft_allowed and not lapsed(t)) then return false end
  if state == 'p' then return t + RELEASE_MS <= now() end
  return t <= now()
end

local function evict_interior(n)
  if not n.exists or (n.nc or 0) == 0 or (n.no or 0) == 0 then return 'X' end
  local objects = scan_objects(n)
  for _, o in ipairs(objects) do
    if not evictable(o) then return 'X' end
  end
  for _, o in ipairs(objects) do
    put_field(n, 'o:' .. o[1], false)
    if o[2] then  -- a value no script wrote goes unannounced (fsck's object_value)
      count_segments(o[7], -1, o[3])
      emit('evicted', n, o[1], o[3], o[7])
    end
  end
  local count, bytes = n.no or 0, n.b or 0
  d_used = d_used - bytes
  d_objects = d_objects - count
  for _, f in ipairs({'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}) do set(n, f, nil) end
  return 'E' .. num(count) .. ':' .. num(bytes)
end

-- -- Mode 'leaf': lean, evict-only helpers. A node is read with ONE HGETALL and written
-- -- with plain commands (DEL; a parent's HDEL/HSET); index changes, fences and outbox
-- -- entries are collected (_lib's deaths part) and written once per call by finish(),
-- -- with the stats.

local COUNTERS = {p = true, pe = true, nc = true, no = true, np = true, ps = true,
  psn = true, nh = true, ns = true, b = true, lm = true}
local inside = {0, 0, 0}       -- parents evicted inside the call: leaves, objects, bytes

-- The node at key as a record: counters (numbers; p the parent or nil), its 'o:' fields
-- and values (flat), and the value of the field `child` (a child's field, or nil).
local function load(key, hash, child)
  local all = redis.call('HGETALL', key)
  local n, objects, child_value = {key = key, hash = hash}, {}, nil
  for i = 1, #all, 2 do
    local f = all[i]
    if COUNTERS[f] then
      n[f] = all[i + 1]
    elseif f == child then
      child_value = all[i + 1]
    elseif string.sub(f, 1, 2) == 'o:' then
      objects[#objects + 1] = f
      objects[#objects + 1] = all[i + 1]
    end
  end
  n.nc, n.no, n.np, n.ps = tonumber(n.nc), tonumber(n.no), tonumber(n.np), tonumber(n.ps)
  n.nh, n.ns, n.b, n.lm = tonumber(n.nh), tonumber(n.ns), tonumber(n.b), tonumber(n.lm)
  n.pe = tonumber(n.pe)
  if n.p and string.byte(n.p, 1) == 63 then n.p = nil end  -- '?': a shell's batch marker
  n.exists = n.no ~= nil or n.nc ~= nil
  n.objects = objects
  return n, child_value
end

-- Whether a leaf of set_ scored score may go in this call's pass.
local function may_go(set_, score)
  return set_ == SOURCE and score <= now() and
    (set_ == LEAVES or soft_allowed or lapsed(score))
end

-- Parents of chosen leaves that the caller found in this shard, declared in KEYS: hash ->
-- key (filled from the items).
local declared = {}

local function child_field(hash)
  if #hash == 64 and not string.find(hash, '[^0-9a-f]') then return hash end
  return 'c:' .. hash
end

local unlink

-- Deletes the record n (a leaf, checked), announcing each object, and unlinks it.
local function drop_node(n)
  local objects = n.objects
  for i = 1, #objects, 2 do
    local state, size, _, _, _, reps = unpack_object(objects[i + 1])
    if state then  -- a value no script wrote goes with the node, unannounced
      count_segments(reps, -1, size)
      emit('evicted', n, string.sub(objects[i], 3), size, reps)
    end
  end
  redis.call('DEL', n.key)
  d_used, d_objects, d_nodes = d_used - (n.b or 0), d_objects - (n.no or 0), d_nodes - 1
  if n.p then unlink(n) end
end

local unlink_at

-- The deleted node n's unlink from its parent: in this call when the parent is here,
-- else recorded in the outbox (and returned: the caller runs it in the parent's shard).
-- A fence at the child's epoch refuses a late step 2 either way (it would name a parent
-- that no longer lists it).
unlink = function(n)
  local pe = n.pe or 0
  raise_fence(n.hash, pe)
  local key = declared[n.p]
  if key then
    unlink_at(key, n.p, n.hash, pe)
    return
  end
  unlink_later(n.hash, n.p, pe)
end

-- The parent's side of an unlink (as unlink.lua): its child field goes if it still holds
-- the epoch. Left with no children and no objects it goes too; left a leaf, it is evicted
-- here when it may go in this pass (see the top), else indexed and returned. Returns 1 if
-- the field was removed, else 0.
unlink_at = function(key, hash, child, epoch)
  local field_name = child_field(child)
  -- One HMGET: the child field and the counters (a parent may have many children, which
  -- an HGETALL would all read); its objects only if it is evicted here.
  local v = redis.call('HMGET', key, field_name, 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'b', 'lm',
    'p', 'pe')
  if not v[1] or tonumber(v[1]) ~= epoch then return 0 end  -- relinked since, or gone
  local nc = (tonumber(v[2]) or 1) - 1
  if nc > 0 then
    redis.call('HDEL', key, field_name)
    redis.call('HSET', key, 'nc', num(nc))
    return 1
  end
  local parent = {key = key, hash = hash, exists = true, no = tonumber(v[3]),
    np = tonumber(v[4]), ps = tonumber(v[5]), nh = tonumber(v[6]), ns = tonumber(v[7]),
    b = tonumber(v[8]), lm = tonumber(v[9]), p = v[10], pe = tonumber(v[11])}
  if parent.p and string.byte(parent.p, 1) == 63 then parent.p = nil end  -- a batch marker
  if not parent.no then  -- an empty shell: it goes, and its own unlink
    d_shells = d_shells - 1
    parent.objects = {}
    drop_node(parent)
    return 1
  end
  local set_, score = leaf_of(parent)
  if may_go(set_, score) and score <= CUTOFF and (parent.b or 0) <= allowance then
    local full = load(key, hash)
    allowance = allowance - (full.b or 0)
    inside[1], inside[2], inside[3] = inside[1] + 1, inside[2] + (full.no or 0),
      inside[3] + (full.b or 0)
    drop_node(full)
    return 1
  end
  redis.call('HDEL', key, field_name, 'nc')
  redis.call('ZADD', set_, num(score), hash)
  new_leaves[#new_leaves + 1] = {hash, num(score), num(parent.b or 0),
    set_ == SOFT_LEAVES and '1' or '0'}
  return 1
end

local function evict_leaf(key, hash, seen)
  local n = load(key, hash)
  local set_, score = leaf_of(n)
  if set_ ~= SOURCE then  -- junk in the index, or the node moved: not from here
    drop_leaf(SOURCE, hash)
    return 'X'
  end
  if set_ == SOFT_LEAVES and not soft_allowed and not lapsed(score) then return 'X' end
  if score > now() or score > seen then
    if score ~= seen then redis.call('ZADD', set_, 'XX', num(score), hash) end
    return 'S' .. num(score)
  end
  drop_leaf(set_, hash)
  drop_node(n)
  return 'E' .. num(n.no or 0) .. ':' .. num(n.b or 0)
end

local results = {}
for a = 9, #ARGV, 6 do
  if ARGV[a + 5] ~= '' then declared[ARGV[a + 4]] = KEYS[tonumber(ARGV[a + 5])] end
end
for a = 9, #ARGV, 6 do
  local key, hash, mode = KEYS[tonumber(ARGV[a])], ARGV[a + 1], ARGV[a + 3]
  if mode == 'leaf' then
    results[#results + 1] = evict_leaf(key, hash, tonumber(ARGV[a + 2]))
  elseif mode == 'unlink' then
    results[#results + 1] = unlink_at(key, hash, ARGV[a + 4], tonumber(ARGV[a + 2]))
  else
    results[#results + 1] = evict_interior(node(key, hash))
  end
end
finish()
return {results, flat(intents), flat(new_leaves), inside}
