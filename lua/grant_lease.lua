-- grant_lease: a read (get, or a probe when probes extend leases) holds a complete object
-- for lease_ttl from now; the object's and its leaf's eviction scores only ever rise.
-- KEYS: 1 obj, 2 node, 3 children, 4 keys, 5 leaves, 6 soft_leaves, 7 objects, 8 stats,
--       9 nodes
-- ARGV: 1 key, 2 prefix hash, 3 lease ttl ms
-- Returns: {size, state, lease_ms, soft_pin, hard_pin, created_ms, prefix}, or nil
--          when the object does not exist
-- Errors: MCERR_NOT_READY (the object is still processing)
local obj_key, node_key, children_key, keys_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local leaves_key, soft_leaves_key, objects_key = KEYS[5], KEYS[6], KEYS[7]
local key, hash, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local f = redis.call('HMGET', obj_key, 'size', 'state', 'lease_ms', 'soft_pin', 'hard_pin',
  'created_ms', 'prefix')
if not f[2] then return nil end
if f[2] ~= 'complete' then
  return fail('NOT_READY', 'object ' .. key .. ' is still ' .. f[2] .. '; call put_end first')
end

local lease = math.max(tonumber(f[3]), now_ms() + ttl)
f[3] = score_arg(lease)
redis.call('HSET', obj_key, 'lease_ms', f[3])
local score = score_arg(object_score('complete', f[5], lease))
redis.call('ZADD', objects_key, 'GT', score, key)
if redis.call('ZSCORE', keys_key, key) then
  redis.call('ZADD', keys_key, 'GT', score, key)
  refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
end
return f
