-- unlink: drop children from their parents, the parents all in one shard. A child field
-- goes only if it still holds the epoch the caller names, so a link that a writer renewed
-- meanwhile (a newer epoch) stays. A parent left with no objects and no children is
-- deleted, and its own unlink recorded and returned (the cascade goes on upward); one left
-- with objects and no children becomes a leaf at once, with its own score.
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), then 5 per item: parent key index, parent hash, child hash,
--       epoch ('' = drop no field), pending entry to drop ('' = none)
-- Returns: {one per item: 1 if the child field was removed else 0;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft-pinned (0|1), ...}
local results = {}
for a = 4, #ARGV, 5 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local child, epoch, member = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
  if member ~= '' then redis.call('ZREM', PENDING, member) end
  local removed = 0
  if epoch ~= '' then
    local field = child_field(child)
    local current = redis.call('HGET', n.key, field)
    if current and tonumber(current) == tonumber(epoch) then
      redis.call('HDEL', n.key, field)
      add(n, 'nc', -1)
      removed = 1
    end
  end
  results[#results + 1] = removed
end
finish()
return {results, flat(intents), flat(new_leaves)}
