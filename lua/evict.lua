#!lua flags=allow-oom
-- evict: evict nodes of one shard, each atomically (all its objects or none), each object
-- announced on the events stream. Every node is re-checked, since it was chosen a round
-- trip ago: in mode 'leaf' it must still be a leaf, evictable now (no hard pin, every
-- object complete and unleased or processing past the release timeout), soft-pinned only
-- if allowed, and scored no later than the caller saw (a lease granted since then sends
-- it back to the queue with its new score). The leaf is deleted, and its unlink from its
-- parent recorded (outbox) and returned. Mode 'interior' (path-breaking eviction, only by
-- option) takes the objects of a node that has children, which stays as a shell.
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 soft pins allowed (0|1), 5 soft_pin_ttl_ms (0 = soft pins
--       never lapse; else a soft pin lapses that long after the object's lease ended),
--       then 4 per item: node key index, node hash, the score the caller saw, mode
--       ('leaf'|'interior')
-- Returns: {one per item: 'E<objects>:<bytes>' evicted, 'S<score>' skipped (score now),
--           'X' not evictable as asked; intents: parent, child, epoch, ...}
local soft_allowed, soft_ttl = ARGV[4] == '1', tonumber(ARGV[5])

-- Whether a soft pin whose holder's time (lease end, or start) is t has lapsed.
local function lapsed(t)
  return soft_ttl > 0 and t + soft_ttl <= now()
end

local function evictable(o)
  local state, t, pins = o[2], o[4], o[5]
  if pins >= 2 or (pins % 2 == 1 and not soft_allowed and not lapsed(t)) then return false end
  if state == 'p' then return t + RELEASE_MS <= now() end
  return t <= now()
end

local function evict(n, seen, mode)
  local objects
  if mode == 'leaf' then
    local set_, score = leaf_of(n)
    if not set_ or (set_ == SOFT_LEAVES and not soft_allowed and not lapsed(score)) then
      return 'X'
    end
    if score > now() or score > seen then return 'S' .. num(score) end
    objects = scan_objects(n)  -- the node goes whole (DEL), each object announced
  else
    if not n.exists or (n.nc or 0) == 0 or (n.no or 0) == 0 then return 'X' end
    objects = scan_objects(n)
    for _, o in ipairs(objects) do
      if not evictable(o) then return 'X' end
    end
  end
  for _, o in ipairs(objects) do
    if mode == 'interior' then put_field(n, 'o:' .. o[1], false) end
    if o[2] then  -- a value no script wrote goes with the node, unannounced (fsck's object_value)
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

local results = {}
for a = 6, #ARGV, 4 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = evict(n, tonumber(ARGV[a + 2]), ARGV[a + 3])
end
finish()
return {results, flat(intents)}
