-- reserve_bytes: admission against the namespace's capacity. Bytes are reserved before
-- an object is written and released after it is deleted, so a crash can only
-- over-count (fsck recomputes the exact figure from the shards).
-- KEYS: 1 usage counter (the namespace's one global key)
-- ARGV: 1 size, 2 capacity in bytes (0 = unlimited)
-- Returns: used bytes after the reservation
-- Errors: MCERR_NO_SPACE
local size, capacity = tonumber(ARGV[1]), tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if capacity > 0 and used + size > capacity then
  return fail('NO_SPACE', 'need ' .. ARGV[1] .. ' bytes, ' .. string.format('%.0f', used)
    .. ' of ' .. ARGV[2] .. ' in use; evict or raise capacity_bytes')
end
return redis.call('INCRBY', KEYS[1], size)
