-- evict_leaves: evict whole leaves of one shard, each atomically: all its keys or none.
-- Each leaf is re-checked here, since it was chosen a round trip ago: still a leaf, its
-- key set exactly the keys the caller saw (a key registered since saves the leaf), every
-- key evictable now (score <= now: complete, lease over, not hard-pinned), and no
-- soft-pinned key unless soft pins are allowed.
-- KEYS: 1 leaves, 2 soft_leaves, 3 objects, 4 stats, 5 nodes, then per leaf: node, children,
--       keys, and one obj key per registered key (all in one shard)
-- ARGV: 1 soft pins allowed (0|1), then per leaf: hash, key count n, the n keys
-- Returns: {leaves evicted, objects evicted, freed bytes,
--           {evicted leaf, its parent ("" unknown), ...}, {skipped leaf, ...}}
local leaves_key, soft_leaves_key, objects_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local nodes_key = KEYS[5]
local soft_allowed = ARGV[1] == '1'
local now = now_ms()
local evicted_leaves, evicted_objects, freed, evicted, skipped = 0, 0, 0, {}, {}

local function evictable(node_key, children_key, keys_key, a, n)
  if redis.call('EXISTS', node_key) == 0 or redis.call('SCARD', children_key) > 0 then
    return false
  end
  if redis.call('ZCARD', keys_key) ~= n or n == 0 then return false end
  for j = 1, n do
    if not redis.call('ZSCORE', keys_key, ARGV[a + j]) then return false end
  end
  local top = redis.call('ZRANGE', keys_key, -1, -1, 'WITHSCORES')
  if parse_score(top[2]) > now then return false end
  return soft_allowed or tonumber(redis.call('HGET', node_key, 'soft_pins') or '0') == 0
end

local k, a = 6, 2
while a <= #ARGV do
  local hash, n = ARGV[a], tonumber(ARGV[a + 1])
  local node_key, children_key, keys_key = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  if evictable(node_key, children_key, keys_key, a + 1, n) then
    for j = 1, n do
      local obj_key = KEYS[k + 2 + j]
      freed = freed + delete_object(obj_key, node_key, keys_key, objects_key, stats_key,
        ARGV[a + 1 + j], read_object(obj_key))
    end
    local parent = settle_node(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
      nodes_key, hash)
    evicted[#evicted + 1] = hash
    evicted[#evicted + 1] = parent or ''
    evicted_leaves = evicted_leaves + 1
    evicted_objects = evicted_objects + n
  else
    skipped[#skipped + 1] = hash
  end
  k = k + 3 + n
  a = a + 2 + n
end
return {evicted_leaves, evicted_objects, freed, evicted, skipped}
