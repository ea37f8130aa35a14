-- Shared helpers. mooncake_redis/scripts.py prepends this file to every script,
-- so each script stays one self-contained EVALSHA body (no FUNCTION LOAD needed).
-- Helpers never raise: scripts check everything first and write afterwards, so a
-- refusal returns before the first write and leaves nothing half-done.

local INF = math.huge

-- Milliseconds from the Redis clock, never the client's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fail(code, message)
  return redis.error_reply('MCERR_' .. code .. ' ' .. message)
end

-- Redis prints infinite scores as "inf"; Lua 5.4 (fakeredis) refuses tonumber("inf").
local function parse_score(s)
  if s == 'inf' or s == '+inf' then return INF end
  return tonumber(s)
end

local function score_arg(x)
  if x == INF then return '+inf' end
  return string.format('%.0f', x)
end

-- An object's eviction score: +inf while it cannot go (processing or hard-pinned),
-- otherwise its lease end in ms.
local function object_score(state, hard_pin, lease_ms)
  if state ~= 'complete' or hard_pin == '1' then return INF end
  return tonumber(lease_ms)
end

-- Keeps the shard's leaf indexes exact: a node is a leaf when it has registered keys and
-- no children; its score is the highest score among its keys. Leaves holding a
-- soft-pinned key sit in soft_leaves, so eviction's first pass never has to skip them.
local function refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
  if redis.call('SCARD', children_key) == 0 then
    local top = redis.call('ZRANGE', keys_key, -1, -1, 'WITHSCORES')
    if top[1] then
      local soft = tonumber(redis.call('HGET', node_key, 'soft_pins') or '0') > 0
      redis.call('ZADD', soft and soft_leaves_key or leaves_key, top[2], hash)
      redis.call('ZREM', soft and leaves_key or soft_leaves_key, hash)
      return
    end
  end
  redis.call('ZREM', leaves_key, hash)
  redis.call('ZREM', soft_leaves_key, hash)
end

-- Creates an empty node (a shell until it gets a parent or keys) and lists it in its
-- shard's node index; returns 1 if created.
local function ensure_node(node_key, nodes_key, hash, now)
  if redis.call('EXISTS', node_key) == 1 then return 0 end
  redis.call('HSET', node_key, 'created_ms', now, 'key_count', 0, 'bytes', 0, 'processing', 0,
    'soft_pins', 0)
  redis.call('SADD', nodes_key, hash)
  return 1
end

-- Adds one object to its node's key set and the node's counters.
local function register_key(node_key, keys_key, key, size, state, soft_pin, hard_pin, lease_ms)
  redis.call('ZADD', keys_key, score_arg(object_score(state, hard_pin, lease_ms)), key)
  redis.call('HINCRBY', node_key, 'key_count', 1)
  redis.call('HINCRBY', node_key, 'bytes', size)
  if state ~= 'complete' then redis.call('HINCRBY', node_key, 'processing', 1) end
  if soft_pin == '1' then redis.call('HINCRBY', node_key, 'soft_pins', 1) end
end

-- A node with no keys and no children is deleted; returns its parent ("" if unknown)
-- when it was, false otherwise.
local function delete_if_empty(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
                               nodes_key, hash)
  if redis.call('EXISTS', node_key) == 0 then return false end
  if redis.call('ZCARD', keys_key) > 0 or redis.call('SCARD', children_key) > 0 then
    return false
  end
  local parent = redis.call('HGET', node_key, 'parent') or ''
  redis.call('DEL', node_key, children_key, keys_key)
  redis.call('ZREM', leaves_key, hash)
  redis.call('ZREM', soft_leaves_key, hash)
  redis.call('SREM', nodes_key, hash)
  return parent
end

-- Deletes one object and its registration in its node (the node itself is left for the
-- caller to clean up). f = {size, state, lease_ms, soft_pin, hard_pin} as stored.
local function delete_object(obj_key, node_key, keys_key, objects_key, stats_key, key, f)
  local size = tonumber(f[1])
  redis.call('DEL', obj_key)
  redis.call('ZREM', objects_key, key)
  redis.call('HINCRBY', stats_key, 'used_bytes', -size)
  redis.call('HINCRBY', stats_key, 'objects', -1)
  if redis.call('ZREM', keys_key, key) == 1 then
    redis.call('HINCRBY', node_key, 'key_count', -1)
    redis.call('HINCRBY', node_key, 'bytes', -size)
    if f[2] ~= 'complete' then redis.call('HINCRBY', node_key, 'processing', -1) end
    if f[4] == '1' then redis.call('HINCRBY', node_key, 'soft_pins', -1) end
  end
  return size
end

-- After keys left a node: delete it if empty (returning its parent), else refresh its
-- leafness (returning false).
local function settle_node(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
                           nodes_key, hash)
  local parent = delete_if_empty(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
    nodes_key, hash)
  if parent then return parent end
  refresh_leaf(node_key, children_key, keys_key, leaves_key, soft_leaves_key, hash)
  return false
end

-- {size, state, lease_ms, soft_pin, hard_pin}; state is false when there is no object.
local function read_object(obj_key)
  return redis.call('HMGET', obj_key, 'size', 'state', 'lease_ms', 'soft_pin', 'hard_pin')
end

-- Whether a sorted set holds exactly the members ARGV[first_arg .. first_arg + count - 1]
-- (repairs act only on what the caller saw; anything else means "read again").
local function holds_exactly(zset_key, first_arg, count)
  if redis.call('ZCARD', zset_key) ~= count then return false end
  for i = first_arg, first_arg + count - 1 do
    if not redis.call('ZSCORE', zset_key, ARGV[i]) then return false end
  end
  return true
end

-- Re-scores the objects KEYS[first_key ..] (keys ARGV[first_arg ..]) in a sorted set from
-- the objects themselves, dropping those that no longer exist; returns the present
-- objects' fields.
local function rescore_objects(zset_key, first_key, first_arg)
  local present = {}
  for i = first_key, #KEYS do
    local key = ARGV[first_arg + i - first_key]
    local f = read_object(KEYS[i])
    if f[2] then
      redis.call('ZADD', zset_key, score_arg(object_score(f[2], f[5], f[3])), key)
      present[#present + 1] = f
    else
      redis.call('ZREM', zset_key, key)
    end
  end
  return present
end
