#!lua flags=allow-oom,allow-cross-slot-keys
-- scrub: fsck --repair for one node's fields that no script writes (an epoch that is no
-- epoch, an object value no version wrote): each goes only if it still holds the value
-- fsck read, so a field a script rewrote meanwhile stays. The node's counters and leaf
-- index are repair_node's job, run after this.
-- uses: core
-- KEYS: none, or one key of the node's shard (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 the node's shard tag, 9 node hash, then 2 per
--       item: field, value
-- Returns: the number of fields dropped
local key = shard(A[8]).nbase .. A[9]
local dropped = 0
for a = 10, #A, 2 do
  if redis.call('HGET', key, A[a]) == A[a + 1] then
    dropped = dropped + redis.call('HDEL', key, A[a])
  end
end
return dropped
