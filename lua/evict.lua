#!lua flags=allow-oom,allow-cross-slot-keys
-- evict: evict nodes of the shards one Redis node serves, each atomically (all its objects
-- or none), each object announced on the events stream. Every node is re-checked, since it
-- was chosen a round trip ago: in mode 'leaf' it must still be a leaf, evictable now (no
-- hard pin, every object complete and unleased or processing past the release timeout),
-- soft-pinned only if allowed, and scored no later than the caller saw (a lease granted
-- since then sends it back to the queue with its new score). The leaf is deleted whole and
-- unlinked from its parent:
--  * a parent served by this node is unlinked in this call (its child field goes if it
--    still holds the leaf's epoch). A parent left without children and objects is deleted
--    and unlinked in turn; one left a leaf of the index the call evicts from, evictable
--    now and scored no later than the cutoff (the latest score the caller chose this
--    round), is evicted in this call too, while the call's byte allowance lasts; else it
--    joins its leaf index and is returned;
--  * a parent served elsewhere: the unlink is recorded (outbox) and returned.
-- Mode 'unlink' is such a recorded unlink, run by the caller where the parent lives (the
-- outbox protocol's second step, as unlink.lua) with the same rules for the parent.
-- A chosen node that does not belong in the index it was read from (no node, not a
-- leaf, the other index: junk) is dropped from it; a leaf whose indexed score is not its
-- own is re-scored there.
-- Mode 'interior' (path-breaking eviction, only by option) takes the objects of a node
-- that has children, which stays as a shell.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 soft pins allowed (0|1), 9 soft_pin_ttl_ms (0 =
--       soft pins never lapse; else a soft pin lapses that long after the object's lease
--       ended), 10 the index evicted from ('leaves'|'soft_leaves'|'' in mode interior),
--       11 cutoff score (an integer), 12 byte allowance for parents evicted inside the
--       call, then 5 per item: shard tag, node hash, the score the caller saw (mode
--       'unlink': the epoch), mode ('leaf'|'interior'|'unlink'), the child to unlink
--       (mode 'unlink'; else '')
-- Returns: {one per item: 'E<objects>:<bytes>' evicted, 'S<score>' skipped (score now),
--           'X' not evictable as asked, 1|0 the unlink removed the child field or not;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft (0|1), ...; {leaves, objects, bytes} evicted inside the call as parents}
local soft_allowed, soft_ttl = A[8] == 1, A[9]
local SOURCE = (A[10] == 'leaves' and 1) or (A[10] == 'soft_leaves' and 2) or nil
local CUTOFF, allowance = A[11], A[12]
list_new_leaves = true
local inside = {0, 0, 0}  -- parents evicted inside the call: leaves, objects, bytes

-- Whether a soft pin whose holder's time (lease end, or start) is t has lapsed.
local function lapsed(t)
  return soft_ttl > 0 and t + soft_ttl <= now()
end

-- Whether a leaf of index set_ scored score may go in this call's pass.
local function may_go(set_, score)
  return set_ == SOURCE and score <= now() and (set_ == 1 or soft_allowed or lapsed(score))
end

-- Takes every object of n (a record loaded whole, no children), announcing each: the node
-- is left empty, to be deleted whole.
local function take_objects(n)
  local s = n.s
  for _, f in ipairs(n.objects) do
    local state, size, _, _, _, reps = unpack_object(n[f])
    if state then  -- a value no script wrote goes with the node, unannounced
      count_segments(s, reps, -1, size)
      emit('evicted', n, string.sub(f, 3), size, reps)
    end
  end
  s.du, s.dobj = s.du - (n.b or 0), s.dobj - (n.no or 0)
  n.no, n.np, n.ps, n.psn, n.nh, n.ns, n.b, n.lm = nil, nil, nil, nil, nil, nil, nil, nil
end

-- A parent the cascade left with objects: evicted here too when it is now a leaf that may
-- go in this pass, scored no later than the cutoff, within the byte allowance.
local function also_evict(q)
  local set_, score = leaf_score(q.no, q.nc, q.nh, q.ns, q.lm, q.np, q.ps)
  if not (may_go(set_, score) and score <= CUTOFF and (q.b or 0) <= allowance) then
    return false
  end
  local full = whole(q.s, q.hash)
  allowance = allowance - (full.b or 0)
  inside[1], inside[2], inside[3] = inside[1] + 1, inside[2] + (full.no or 0),
    inside[3] + (full.b or 0)
  take_objects(full)
  return true
end

local function evict_leaf(s, hash, seen)
  local n = whole(s, hash)
  local set_, score = leaf_score(n.no, n.nc, n.nh, n.ns, n.lm, n.np, n.ps)
  if n.dead or set_ ~= SOURCE then  -- junk in the index, or the node moved: not from here
    move_leaf(s, hash, SOURCE, nil, nil, nil)
    return 'X'
  end
  if set_ == 2 and not soft_allowed and not lapsed(score) then return 'X' end
  if score > now() or score > seen then
    if score ~= seen then move_leaf(s, hash, nil, nil, set_, score) end
    return 'S' .. num(score)
  end
  local count, bytes = n.no or 0, n.b or 0
  take_objects(n)
  die(n, also_evict)
  return 'E' .. num(count) .. ':' .. num(bytes)
end

local function evictable(state, t, pins)
  if pins >= 2 or (pins % 2 == 1 and not soft_allowed and not lapsed(t)) then return false end
  if state == 'p' then return t + RELEASE_MS <= now() end
  return t <= now()
end

-- Path-breaking eviction: a node with children loses its objects and stays as a shell.
local function evict_interior(s, hash)
  local n = whole(s, hash)
  if not n.exists or n.dead or (n.nc or 0) == 0 or (n.no or 0) == 0 then return 'X' end
  for _, f in ipairs(n.objects) do
    local state, _, t, pins = unpack_object(n[f])
    if state and not evictable(state, t, pins) then return 'X' end
  end
  for _, f in ipairs(n.objects) do
    local state, size, _, _, _, reps = unpack_object(n[f])
    put_field(n, f, false)
    if state then
      count_segments(s, reps, -1, size)
      emit('evicted', n, string.sub(f, 3), size, reps)
    end
  end
  local count, bytes = n.no or 0, n.b or 0
  s.du, s.dobj = s.du - bytes, s.dobj - count
  for _, f in ipairs({'no', 'np', 'ps', 'psn', 'nh', 'ns', 'b', 'lm'}) do set(n, f, nil) end
  return 'E' .. num(count) .. ':' .. num(bytes)
end

local function unlink_here(s, hash, child, epoch)
  local q = node(s, hash, child_fields(child))
  local removed = unlink_from(q, child, epoch)
  if removed == 1 and (is_empty(q) or also_evict(q)) then die(q, also_evict) end
  return removed
end

local results = {}
for a = 13, #A, 5 do
  local s, hash, mode = shard(A[a]), A[a + 1], A[a + 3]
  if mode == 'leaf' then
    results[#results + 1] = evict_leaf(s, hash, A[a + 2])
  elseif mode == 'unlink' then
    results[#results + 1] = unlink_here(s, hash, A[a + 4], A[a + 2])
  else
    results[#results + 1] = evict_interior(s, hash)
  end
end
finish()
return {results, flat(intents, 3), flat(new_leaves, 4), inside}
