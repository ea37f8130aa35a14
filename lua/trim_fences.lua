#!lua flags=allow-oom,allow-cross-slot-keys
-- trim_fences: drop the fences of one shard that are past the link epoch horizon (step 2
-- refuses every epoch they could refuse anyway), keeping the shard's fence count exact.
-- Run by the resolver for shards that hold fences.
-- uses: core
-- KEYS: none, or one key of the shard (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 the shard's tag
-- Returns: the number of fences dropped
local s = shard(A[8])
local dropped = redis.call('ZREMRANGEBYSCORE', s.base .. 'fences', '-inf',
  '(' .. num(now() - EPOCH_HORIZON_MS))
if dropped > 0 then add_stat(s.stats, 'fences', -dropped) end
return dropped
