-- put_start: create an object in state "processing" and register it under its node.
-- KEYS: 1 obj, 2 node, 3 children, 4 keys, 5 leaves, 6 soft_leaves, 7 objects, 8 stats,
--       9 nodes
--       (all in the object's shard; the node is the object's prefix node)
-- ARGV: 1 key, 2 prefix hash, 3 size, 4 parent hash ("" = not given),
--       5 soft_pin (0|1), 6 hard_pin (0|1), 7 register in the tree (0|1),
--       8 dry_run (0|1: check only, write nothing)
-- Returns: {node_created (0|1), node_has_children (0|1)}
-- Errors: MCERR_ALREADY_EXISTS, MCERR_PARENT_CONFLICT
local obj_key, node_key, children_key, keys_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leaves_key, soft_leaves_key, objects_key, stats_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local nodes_key = KEYS[9]
local key, hash, size, parent = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local soft_pin, hard_pin, register, dry_run = ARGV[5], ARGV[6], ARGV[7] == '1', ARGV[8] == '1'

if redis.call('EXISTS', obj_key) == 1 then
  local state = redis.call('HGET', obj_key, 'state')
  return fail('ALREADY_EXISTS', 'object ' .. key .. ' already exists (state ' .. tostring(state) .. ')')
end
local recorded_parent = redis.call('HGET', node_key, 'parent')
if register and parent ~= '' and recorded_parent and recorded_parent ~= parent then
  return fail('PARENT_CONFLICT', 'node ' .. hash .. ' already has parent ' .. recorded_parent
    .. ', refusing parent ' .. parent)
end
local has_children = redis.call('SCARD', children_key) > 0 and 1 or 0
if dry_run then return {0, has_children} end

local now = now_ms()
redis.call('HSET', obj_key, 'size', size, 'state', 'processing', 'lease_ms', 0,
  'soft_pin', soft_pin, 'hard_pin', hard_pin, 'created_ms', now, 'prefix', hash)
redis.call('ZADD', objects_key, '+inf', key)
redis.call('HINCRBY', stats_key, 'used_bytes', size)
redis.call('HINCRBY', stats_key, 'objects', 1)

local created = 0
if register then
  created = ensure_node(node_key, nodes_key, hash, now)
  if parent ~= '' and not recorded_parent then redis.call('HSET', node_key, 'parent', parent) end
  register_key(node_key, keys_key, key, size, 'processing', soft_pin, hard_pin, 0)
  refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
end
return {created, has_children}
