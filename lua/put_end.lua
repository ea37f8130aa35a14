#!lua flags=allow-oom
-- put_end: complete processing objects of one shard. Each one's lease starts now, so objects
-- nobody reads are evicted oldest first; a 'stored' event announces it.
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), then 4 per item: node key index, node hash, key suffix,
--       writer token
-- Returns: one per item: 'OK' (also when it was complete already: a re-send), or NOT_FOUND,
--          INVALID_STATE (another writer's object)
local function complete(n, suffix, token)
  local name = 'o:' .. suffix
  local value = field(n, name)
  if not value then
    return fail('NOT_FOUND', 'no object ' .. n.hash .. suffix .. ' (never started, revoked, '
      .. 'or evicted after put_start_release_timeout)')
  end
  local state, size, t, pins, owner, reps = unpack_object(value)
  if owner ~= token then
    return fail('INVALID_STATE', 'object ' .. n.hash .. suffix .. ' was started by another '
      .. 'writer (token ' .. tostring(owner) .. ')')
  end
  if state == 'c' then return 'OK' end
  put_field(n, name, pack_object('c', size, now(), pins, token, reps))
  count_object(n, -1, 'p', size, t, pins, reps)
  count_object(n, 1, 'c', size, now(), pins, reps)
  emit('stored', n, suffix, size, reps)
  return 'OK'
end

for a = 4, #ARGV, 4 do want(KEYS[tonumber(ARGV[a])], 'o:' .. ARGV[a + 2]) end
local results = {}
for a = 4, #ARGV, 4 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = complete(n, ARGV[a + 2], ARGV[a + 3])
end
finish()
return results
