-- link: step 1 of a link, for parents of one shard: each parent lists its child at the
-- link's epoch (created as a shell if absent), and a pending entry records the link until
-- the child's step 2 confirms it (or the resolver settles it).
-- KEYS: 1-7 the shard's keys, then the parent nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, then 4 per item: parent key index, parent hash,
--       child hash, epoch
-- Returns: one per item: 1 if the child field was written or raised (pending entry added),
--          0 if the parent already listed the child at this epoch or a newer one
local batch = ARGV[4]
local results = {}
for a = 5, #ARGV, 4 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local child, epoch = ARGV[a + 2], tonumber(ARGV[a + 3])
  if not n.exists then
    create(n)
    set(n, 'lb', batch)  -- every child of this shell comes from this batch, for now
  elseif n.lb and n.lb ~= batch then
    set(n, 'lb', nil)
  end
  local field = child_field(child)
  local current = tonumber(redis.call('HGET', n.key, field))
  local written = 0
  if not current or epoch > current then
    if not current then add(n, 'nc', 1) end
    redis.call('HSET', n.key, field, num(epoch))
    redis.call('ZADD', PENDING, NOW, n.hash .. '|' .. child .. '|' .. num(epoch))
    written = 1
  end
  results[#results + 1] = written
end
finish()
return results
