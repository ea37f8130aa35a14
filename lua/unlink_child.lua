-- unlink_child: drop a deleted child from its parent. Runs AFTER the child node is gone.
-- A parent left with no keys and no children is deleted too, and its own parent is
-- returned so the caller continues upward; one left with keys becomes a leaf.
-- KEYS: 1 parent node, 2 parent children, 3 parent keys, 4 leaves, 5 soft_leaves, 6 nodes
-- ARGV: 1 parent hash, 2 child hash
-- Returns: {1, grandparent hash ("" unknown)} if the parent was deleted, else {0, ""}
local node_key, children_key, keys_key, leaves_key, soft_leaves_key, nodes_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local parent, child = ARGV[1], ARGV[2]
redis.call('SREM', children_key, child)
if redis.call('EXISTS', node_key) == 0 then return {0, ''} end
local grandparent = settle_node(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
  nodes_key, parent)
if grandparent then return {1, grandparent} end
return {0, ''}
