-- register_node: path B of the RFC. Records a node's parent (filling a shell) and
-- registers existing objects of this prefix under it.
-- KEYS: 1 node, 2 children, 3 keys, 4 leaves, 5 soft_leaves, 6 nodes, then 1 per key: obj
-- ARGV: 1 prefix hash, 2 parent hash ("" = not given), 3 dry_run (0|1), then 1 per key: key
-- Returns: {node_created (0|1), node_has_children (0|1)}
-- Errors: MCERR_NOT_FOUND (a key that is not an object), MCERR_PARENT_CONFLICT,
--         MCERR_INVALID_ARGUMENT (no keys for a node that does not exist)
local node_key, children_key, keys_key, leaves_key, soft_leaves_key, nodes_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local hash, parent, dry_run = ARGV[1], ARGV[2], ARGV[3] == '1'
local FIRST_OBJECT = 7

local objects = {}
for i = FIRST_OBJECT, #KEYS do
  local key = ARGV[i - FIRST_OBJECT + 4]
  local f = read_object(KEYS[i])
  if not f[2] then
    return fail('NOT_FOUND', 'no object ' .. key .. ' to register under node ' .. hash
      .. '; put_start it first')
  end
  objects[#objects + 1] = {key, f}
end
if #objects == 0 and redis.call('EXISTS', node_key) == 0 then
  return fail('INVALID_ARGUMENT', 'node ' .. hash .. ' does not exist and no keys were given;'
    .. ' register it with at least one key')
end
local recorded_parent = redis.call('HGET', node_key, 'parent')
if parent ~= '' and recorded_parent and recorded_parent ~= parent then
  return fail('PARENT_CONFLICT', 'node ' .. hash .. ' already has parent ' .. recorded_parent
    .. ', refusing parent ' .. parent)
end
local has_children = redis.call('SCARD', children_key) > 0 and 1 or 0
if dry_run then return {0, has_children} end

local created = ensure_node(node_key, nodes_key, hash, now_ms())
if parent ~= '' and not recorded_parent then redis.call('HSET', node_key, 'parent', parent) end
for _, o in ipairs(objects) do
  local key, f = o[1], o[2]
  if not redis.call('ZSCORE', keys_key, key) then
    register_key(node_key, keys_key, key, tonumber(f[1]), f[2], f[4], f[5], f[3])
  end
end
refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
return {created, has_children}
