#!lua flags=allow-oom
-- segment: the namespace's segment registry (one hash, one key, like the eviction lock):
-- name -> '<state>,<capacity>,<mounted ms>,<heartbeat ms>,<sweep cursors>' where state is
-- 'mounted' or 'unmounting' and the cursors ('' before a sweep; one per primary, ';'
-- separated, 'x' = done) let an unmount resume where the last call stopped.
-- uses:
-- KEYS: 1 registry
-- ARGV: 1 operation, 2 segment name, then per operation:
--   mount <capacity>      add a mounted segment; 'EXISTS <state>' if it is registered
--   remount <capacity>    mount, or change a mounted segment's capacity; 'UNMOUNTING'
--   unmount               mark it unmounting; returns {its mounted ms (the generation
--                         segment_flag.lua guards), its cursors}; 'ABSENT'
--   progress <cursors>    record a sweep's cursors while it is unmounting
--   done                  drop it once its sweep finished (only while unmounting)
--   heartbeat             its owner is alive: 'OK', or 'ABSENT' / 'UNMOUNTING'
-- Returns: as listed per operation
local registry, op, name = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local entry = redis.call('HGET', registry, name)
local state, capacity, mounted_ms, heartbeat_ms, cursors
if entry then
  state, capacity, mounted_ms, heartbeat_ms, cursors =
    string.match(entry, '^(%a+),(%d+),(%d+),(%d+),(.*)$')
end

local function store(s, c, m, h, k)
  redis.call('HSET', registry, name, s .. ',' .. c .. ',' .. m .. ',' .. h .. ',' .. k)
end

if op == 'mount' or op == 'remount' then
  if not entry then
    store('mounted', ARGV[3], now, now, '')
    return 'OK'
  end
  if op == 'mount' then return 'EXISTS ' .. (state or 'unreadable') end
  if state ~= 'mounted' then return 'UNMOUNTING' end
  store('mounted', ARGV[3], mounted_ms, now, '')
  return 'OK'
end
if not entry or not state then return 'ABSENT' end
if op == 'unmount' then
  if state ~= 'unmounting' then store('unmounting', capacity, mounted_ms, heartbeat_ms, '') end
  return {mounted_ms, state == 'unmounting' and cursors or ''}
elseif op == 'progress' then
  if state ~= 'unmounting' then return 'ABSENT' end
  store(state, capacity, mounted_ms, heartbeat_ms, ARGV[3])
  return 'OK'
elseif op == 'done' then
  if state == 'unmounting' then redis.call('HDEL', registry, name) end
  return 'OK'
elseif op == 'heartbeat' then
  if state ~= 'mounted' then return 'UNMOUNTING' end
  store(state, capacity, mounted_ms, now, cursors)
  return 'OK'
end
return redis.error_reply('unknown operation ' .. tostring(op))
