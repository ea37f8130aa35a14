#!lua flags=allow-oom
-- delete: remove objects of one shard (remove, put_revoke, forced removal), each announced
-- on the events stream. A node left with no objects and no children is deleted in the same
-- script; its unlink from its parent is recorded (outbox) and returned for the caller to
-- run in the parent's shard.
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 mode: 'remove' (complete and not leased), 'revoke'
--       (processing, by its own writer), 'reclaim' (processing, started at least the
--       release timeout ago, by any writer: the monitor's sweep), 'force' (anything), then
--       4 per item: node key index, node hash, key suffix, writer token
-- Returns: {one per item: 'OK' or NOT_FOUND, LEASED, INVALID_STATE;
--           intents: parent, child, epoch, ...}
local mode = ARGV[4]

local function delete(n, suffix, token)
  local name = 'o:' .. suffix
  local value = field(n, name)
  local key = n.hash .. suffix
  if not value then return fail('NOT_FOUND', 'no object ' .. key) end
  local state, size, t, pins, owner, reps = unpack_object(value)
  if mode == 'remove' then
    if state ~= 'c' then
      return fail('INVALID_STATE', 'object ' .. key .. ' is processing; use put_revoke')
    end
    if t > now() then
      return fail('LEASED', 'object ' .. key .. ' is leased by a reader until ' .. num(t) ..
        ' (Redis ms); retry after the lease or pass force=True')
    end
  elseif mode == 'reclaim' then
    if state ~= 'p' or t + RELEASE_MS > now() then
      return fail('INVALID_STATE', 'object ' .. key .. ' is not an unfinished put past '
        .. 'put_start_release_timeout_ms')
    end
  elseif mode == 'revoke' then
    if state ~= 'p' then
      return fail('INVALID_STATE', 'object ' .. key .. ' is complete; put_revoke only '
        .. 'abandons processing objects; use remove')
    end
    if owner ~= token then
      return fail('INVALID_STATE', 'object ' .. key .. ' was started by another writer')
    end
  end
  put_field(n, name, false)
  count_object(n, -1, state, size, t, pins, reps)
  emit((mode == 'revoke' or mode == 'reclaim') and 'revoked' or 'removed', n, suffix, size,
    reps)
  return 'OK'
end

for a = 5, #ARGV, 4 do want(KEYS[tonumber(ARGV[a])], 'o:' .. ARGV[a + 2]) end
local results = {}
for a = 5, #ARGV, 4 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = delete(n, ARGV[a + 2], ARGV[a + 3])
end
finish()
return {results, flat(intents)}
