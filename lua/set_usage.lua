-- set_usage: fsck repair of the admission counter, only if it still holds the value the
-- caller read (compare and set), so a concurrent reservation is never overwritten.
-- KEYS: 1 usage counter
-- ARGV: 1 the value read ("" if absent), 2 the corrected value
-- Returns: 1 if set, 0 if the counter changed meanwhile
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
