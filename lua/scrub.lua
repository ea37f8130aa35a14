#!lua flags=allow-oom
-- scrub: fsck --repair for one node's fields that no script writes (an epoch that is no
-- epoch, an object value no version wrote): each goes only if it still holds the value
-- fsck read, so a field a script rewrote meanwhile stays. The node's counters and leaf
-- index are repair_node's job, run after this.
-- uses:
-- KEYS: 1-7 the shard's keys, 8 the node
-- ARGV: 1-3 header (_lib.lua), 4 node hash, then field, value pairs
-- Returns: the number of fields dropped
local dropped = 0
for a = 5, #ARGV, 2 do
  if redis.call('HGET', KEYS[8], ARGV[a]) == ARGV[a + 1] then
    dropped = dropped + redis.call('HDEL', KEYS[8], ARGV[a])
  end
end
return dropped
