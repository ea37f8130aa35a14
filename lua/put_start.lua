#!lua
-- put_start: step 2 of path A (and every put without a parent), for objects of one shard:
-- each object is created (processing) in its prefix node with its replicas, counted
-- against the shard's byte limit and its replicas' segments, and the node is linked to its
-- parent when one is given. Mode 'upsert' may also replace a complete object (or this
-- writer's own processing one): the old replicas are announced in a 'replaced' event with
-- the time after which they may be freed (the end of the old object's read lease).
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, 5 put_start_discard_timeout (ms), 6 the shard's
--       default byte limit (0 = none: capacity unlimited; a limit in stats, kept by
--       admission.py, wins, and may be 0: all of it lent to other shards),
--       7 mode ('put'|'upsert'), then 10 per item: node key index, node hash, key suffix,
--       size, pins (0-3), writer token, parent hash ('' = none), link epoch, cycle-checked
--       (0|1), replicas ('' or '|<segment>,<location>,<medium>' ..., escaped)
-- Returns: one per item: 'OK' .. link flag ('' no parent, 'L' linked, 'C' linked but left
--          for the resolver's cycle walk), or a refusal: ALREADY_EXISTS, NO_SPACE,
--          SEGMENT_NOT_MOUNTED, PARENT_CONFLICT, CYCLE (a cycle within the shard), and
--          the link refusals the client handles itself: STALE_EPOCH, FENCED <fence>,
--          CYCLE_CHECK
local batch, discard_ms, default_limit, upsert =
  ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == 'upsert'
read_stats()
local used, limit = s_used, s_limit or default_limit

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

local function busy(n, suffix, state, by_us)
  return fail('ALREADY_EXISTS', 'object ' .. n.hash .. suffix .. ' already exists (' ..
    (state == 'p' and 'processing' or 'complete') .. (by_us and ', put_start by this writer'
    or '') .. ')')
end

local function put(n, suffix, size, pins, token, parent, epoch, checked, reps)
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
    elseif t + discard_ms > now() then
      return busy(n, suffix, state, false)
    end
    -- unfinished past the discard timeout, or replaced by an upsert: take over
    old = {state, old_size, t, old_pins, old_reps}
  end
  local grow = charged(size, reps) - (old and charged(old[2], old[5]) or 0)
  if default_limit > 0 and grow > 0 and used + grow > limit then  -- 0: lent away
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
  put_field(n, name, pack_object('p', size, now(), pins, token, reps))
  count_object(n, 1, 'p', size, now(), pins, reps)
  if old then
    count_object(n, -1, old[1], old[2], old[3], old[4], old[5])
    if old[5] ~= '' then
      local free_after = old[1] == 'c' and old[3] > now() and old[3] or now()
      emit('replaced', n, suffix, old[2], old[5], 'free_after', num(free_after))
    end
  end
  used = used + grow
  return 'OK' .. flag
end

for a = 8, #ARGV, 10 do want(KEYS[tonumber(ARGV[a])], 'o:' .. ARGV[a + 2]) end
local results = {}
for a = 8, #ARGV, 10 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = put(n, ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
    ARGV[a + 5], ARGV[a + 6], tonumber(ARGV[a + 7]), ARGV[a + 8], ARGV[a + 9])
end
finish()
return results
