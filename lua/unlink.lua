#!lua flags=allow-oom
-- unlink: drop children from their parents, the parents all in one shard. A child field
-- goes only if it still holds the epoch the caller names, so a link that a writer renewed
-- meanwhile (a newer epoch) stays. A parent left with no objects and no children is
-- deleted, and its own unlink recorded and returned (the cascade goes on upward); one left
-- with objects and no children becomes a leaf at once, with its own score.
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), then 6 per item: parent key index, parent hash, child hash,
--       the child's field name ('' = the child hash, as link.lua), epoch ('' = drop no
--       field), pending entry to drop ('' = none)
-- Returns: {one per item: 1 if the child field was removed else 0;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft-pinned (0|1), ...}
local function field_name(a)
  return ARGV[a + 3] ~= '' and ARGV[a + 3] or ARGV[a + 2]
end
for a = 4, #ARGV, 6 do
  if ARGV[a + 4] ~= '' then want(KEYS[tonumber(ARGV[a])], field_name(a)) end
end
local results = {}
for a = 4, #ARGV, 6 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local epoch, member, name = ARGV[a + 4], ARGV[a + 5], field_name(a)
  if member ~= '' then redis.call('ZREM', PENDING, member) end
  local removed = 0
  if epoch ~= '' then
    local current = field(n, name)
    if current and tonumber(current) == tonumber(epoch) then
      put_field(n, name, false)
      add(n, 'nc', -1)
      removed = 1
    end
  end
  results[#results + 1] = removed
end
finish()
return {results, flat(intents), flat(new_leaves)}
