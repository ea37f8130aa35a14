-- put_start: step 2 of path A (and every put without a parent), for objects of one shard:
-- each object is created (processing) in its prefix node, counted against the shard's
-- byte limit, and the node is linked to its parent when one is given.
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, 5 put_start_discard_timeout (ms), 6 the shard's
--       default byte limit (0 = none; a limit in stats, kept by admission.py, wins),
--       then 9 per item: node key index, node hash, key suffix, size, pins (0-3),
--       writer token, parent hash ('' = none), link epoch, cycle-checked (0|1)
-- Returns: one per item: 'OK' .. link flag ('' no parent, 'L' linked, 'C' linked but left
--          for the resolver's cycle walk), or a refusal: ALREADY_EXISTS, NO_SPACE,
--          PARENT_CONFLICT, and the link refusals the client handles itself: STALE_EPOCH,
--          FENCED <fence>, CYCLE_CHECK
local batch, discard_ms, default_limit = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local stats = redis.call('HMGET', STATS, 'used_bytes', 'limit')
local used, limit = tonumber(stats[1]) or 0, tonumber(stats[2]) or default_limit

local function put(n, suffix, size, pins, token, parent, epoch, checked)
  local field = 'o:' .. suffix
  local current = redis.call('HGET', n.key, field)
  local old
  if current then
    local state, old_size, t, old_pins, old_token = unpack_object(current)
    if old_token == token then  -- our own put_start, sent again after a lost reply
      if parent ~= '' and n.p == parent then
        return 'OK' .. apply_parent(n, parent, epoch, 'same', batch)
      end
      return 'OK'
    end
    if state ~= 'p' or t + discard_ms > NOW then
      return fail('ALREADY_EXISTS', 'object ' .. n.hash .. suffix .. ' already exists (' ..
        (state == 'p' and 'processing' or 'complete') .. ')')
    end
    old = {state, old_size, t, old_pins}  -- unfinished past the discard timeout: take over
  end
  local grow = size - (old and old[2] or 0)
  if limit > 0 and grow > 0 and used + grow > limit then
    return fail('NO_SPACE', 'shard ' .. string.match(STATS, '{(..)}') .. ' holds ' .. num(used) ..
      ' bytes and ' .. num(grow) .. ' more would pass its limit of ' .. num(limit))
  end
  local how, refusal = check_parent(n, parent, epoch, checked, batch)
  if not how then return refusal end
  create(n)
  local flag = apply_parent(n, parent, epoch, how, batch)
  redis.call('HSET', n.key, field, pack_object('p', size, NOW, pins, token))
  count_object(n, 1, 'p', size, NOW, pins)
  if old then count_object(n, -1, old[1], old[2], old[3], old[4]) end
  used = used + grow
  return 'OK' .. flag
end

local results = {}
for a = 7, #ARGV, 9 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = put(n, ARGV[a + 2], tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
    ARGV[a + 5], ARGV[a + 6], tonumber(ARGV[a + 7]), ARGV[a + 8])
end
finish()
return results
