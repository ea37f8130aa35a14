#!lua flags=allow-oom,allow-cross-slot-keys
-- unlink: drop children from their parents, the parents all of shards one Redis node
-- serves. A child field goes only if it still holds the epoch the caller names, so a link
-- that a writer renewed meanwhile (a newer epoch) stays. A parent left with no objects and
-- no children is deleted, and unlinked in turn: here when its own parent is served here
-- too, else recorded and returned (the cascade goes on where that parent lives); one left
-- with objects and no children becomes a leaf at once, with its own score.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), then 5 per item: the parent's shard tag, parent
--       hash, child hash, epoch ('' = drop no field), pending entry to drop ('' = none)
-- Returns: {one per item: 1 if the child field was removed else 0;
--           intents: parent, child, epoch, ...; new leaves: hash, score, bytes,
--           soft-pinned (0|1), ...}
list_new_leaves = true
local results = {}
for a = 8, #A, 5 do
  local s, hash, child, epoch, entry = shard(A[a]), A[a + 1], A[a + 2], A[a + 3], A[a + 4]
  if entry ~= '' then
    local unpend = s.unpend
    if unpend then unpend[#unpend + 1] = entry else s.unpend = {entry} end
  end
  if epoch == '' then
    results[#results + 1] = 0
  else
    results[#results + 1] = unlink_from(node(s, hash, child_fields(child)), child,
      tonumber(epoch))
  end
end
finish()
return {results, flat(intents, 3), flat(new_leaves, 4)}
