#!lua flags=allow-oom
-- trim_fences: drop the fences of one shard that are past the link epoch horizon (step 2
-- refuses every epoch they could refuse anyway), keeping the shard's fence count exact.
-- Run by the resolver for shards that hold fences.
-- uses: core
-- KEYS: 1-7 the shard's keys
-- ARGV: 1-3 header (_lib.lua)
-- Returns: the number of fences dropped
local dropped = redis.call('ZREMRANGEBYSCORE', FENCES, '-inf',
  '(' .. num(now() - EPOCH_HORIZON_MS))
if dropped > 0 then redis.call('HINCRBY', STATS, 'fences', -dropped) end
return dropped
