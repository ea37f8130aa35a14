-- put_end: mark a processing object complete; its lease starts at completion time, so
-- objects nobody has read yet are evicted oldest first.
-- KEYS: 1 obj, 2 node, 3 children, 4 keys, 5 leaves, 6 soft_leaves, 7 objects, 8 stats,
--       9 nodes
-- ARGV: 1 key, 2 prefix hash
-- Returns: the completion time in ms
-- Errors: MCERR_NOT_FOUND, MCERR_INVALID_STATE
local obj_key, node_key, children_key, keys_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leaves_key, soft_leaves_key, objects_key = KEYS[5], KEYS[6], KEYS[7]
local key, hash = ARGV[1], ARGV[2]

local f = read_object(obj_key)
if not f[2] then return fail('NOT_FOUND', 'no object ' .. key) end
if f[2] ~= 'processing' then
  return fail('INVALID_STATE', 'object ' .. key .. ' is ' .. f[2] .. ', not processing')
end

local now = now_ms()
redis.call('HSET', obj_key, 'state', 'complete', 'lease_ms', now)
local score = score_arg(object_score('complete', f[5], now))
redis.call('ZADD', objects_key, score, key)
if redis.call('ZSCORE', keys_key, key) then
  redis.call('ZADD', keys_key, score, key)
  redis.call('HINCRBY', node_key, 'processing', -1)
  refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
end
return now
