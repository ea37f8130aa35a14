-- link_child: record a child under its parent, creating the parent as an empty shell when
-- it is not there yet. Runs BEFORE the child node is written, so a crash in between
-- leaves only a dangling child reference (it keeps the parent from eviction; fsck removes it).
-- KEYS: 1 parent node, 2 parent children, 3 leaves, 4 soft_leaves, 5 nodes (parent's shard)
-- ARGV: 1 parent hash, 2 child hash
-- Returns: 1 if the parent node was created as a shell, else 0
local node_key, children_key, leaves_key, soft_leaves_key, nodes_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local parent, child = ARGV[1], ARGV[2]
local created = ensure_node(node_key, nodes_key, parent, now_ms())
redis.call('SADD', children_key, child)
redis.call('ZREM', leaves_key, parent)
redis.call('ZREM', soft_leaves_key, parent)
return created
