-- recompute_node: fsck repair of one node from the objects registered under it: drops
-- registrations of objects that no longer exist, recomputes bytes, processing,
-- soft_pins, key_count and each key's score, refreshes the leaf indexes, and deletes the node if it
-- is left with no keys and no children (the caller then unlinks it from its parent).
-- KEYS: 1 node, 2 children, 3 keys, 4 leaves, 5 soft_leaves, 6 nodes, then 1 per
--       registered key: obj (all in the node's shard)
-- ARGV: 1 prefix hash, then 1 per registered key: key (exactly the members of keys)
-- Returns: {"deleted", parent ("" unknown)} | {"kept", ""} | {"changed", ""} (the key set
--          changed since the caller read it: read again and retry)
local node_key, children_key, keys_key, leaves_key, soft_leaves_key, nodes_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local hash = ARGV[1]
local FIRST_OBJECT = 7

if not holds_exactly(keys_key, 2, #KEYS - FIRST_OBJECT + 1) then return {'changed', ''} end

if redis.call('EXISTS', node_key) == 0 then
  if redis.call('SCARD', children_key) == 0 and redis.call('ZCARD', keys_key) == 0 then
    redis.call('SREM', nodes_key, hash)
    redis.call('ZREM', leaves_key, hash)
    redis.call('ZREM', soft_leaves_key, hash)
    return {'deleted', ''}
  end
  ensure_node(node_key, nodes_key, hash, now_ms())
end
redis.call('SADD', nodes_key, hash)
local bytes, processing, soft_pins = 0, 0, 0
for _, f in ipairs(rescore_objects(keys_key, FIRST_OBJECT, 2)) do
  bytes = bytes + tonumber(f[1])
  if f[2] ~= 'complete' then processing = processing + 1 end
  if f[4] == '1' then soft_pins = soft_pins + 1 end
end
redis.call('HSET', node_key, 'key_count', redis.call('ZCARD', keys_key), 'bytes', bytes,
  'processing', processing, 'soft_pins', soft_pins)
local parent = settle_node(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
  nodes_key, hash)
if parent then return {'deleted', parent} end
return {'kept', ''}
