-- The floor of registration (benchmarks/floor.py): the writes that batch_put_start with
-- parents + batch_put_end leave in the v2 schema (mooncake_redis/keys.py), done blind in
-- one call per batch on a single Redis: no check, no epoch counter, no pending link, no
-- refusal, no per-item table. What no registration of the same state can beat by much.
-- Per page: one HSET of the node (parent, epoch, both objects complete, no, b, lm), the
-- parent's child field (HSET) and nc (HINCRBY, only for a new child), ZREM of the parent
-- from its shard's leaves when that child is its first, ZADD of the node to its shard's
-- leaves; per shard touched, the stats' used_bytes, objects and nodes once per call
-- (HINCRBY) and with events one XADD 'stored' naming every object the call stored there
-- (the v4 entry: a JSON array of 'h' <hash> 'p' <parent> 's' <suffix> 'z' <size> ...).
-- Benchmark-only shortcuts: keys arrive in ARGV (a single Redis has no slots to declare),
-- every page hash is a 64-hex digest (stored bare as the parent's child field) and new.
-- ARGV: 1 writer token, 2 object size, 3 events cap (0 = no events), 4 objects per page k,
--       5..4+k key suffixes, then 2 per page: node key, parent node key ('' = a root)
-- Returns: the number of pages written
local token, size, cap, k = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local value = '1c,' .. size .. ',' .. now .. ',0,' .. token
local bytes = tonumber(size) * k

-- The node's HSET arguments: a root's, and a child's (its parent hash set per page).
local root = {'no', k, 'b', bytes, 'lm', now}
for i = 1, k do
  root[#root + 1] = 'o:' .. ARGV[4 + i]
  root[#root + 1] = value
end
local child = {'p', '', 'pe', now}
for i = 1, #root do child[4 + i] = root[i] end

-- Per shard tag ('<ns>:{xy}'): its leaves key, events key, the pages added there and
-- the objects its event names.
local leaves, events, added, stored = {}, {}, {}, {}
local function tag_of(key)
  local tag = string.sub(key, 1, #key - 67)  -- drops ':n:' and the 64-hex hash
  if not leaves[tag] then
    leaves[tag], events[tag], added[tag], stored[tag] = tag .. ':leaves', tag .. ':events',
      0, {}
  end
  return tag
end

local pages = 0
for a = 5 + k, #ARGV, 2 do
  local key, parent_key = ARGV[a], ARGV[a + 1]
  local hash, tag = string.sub(key, -64), tag_of(key)
  local parent = nil
  if parent_key == '' then
    redis.call('HSET', key, unpack(root))
  else
    parent = string.sub(parent_key, -64)
    child[2] = parent
    redis.call('HSET', key, unpack(child))
    if redis.call('HSET', parent_key, hash, now) == 1 and
        redis.call('HINCRBY', parent_key, 'nc', 1) == 1 then
      redis.call('ZREM', leaves[tag_of(parent_key)], parent)
    end
  end
  redis.call('ZADD', leaves[tag], now, hash)
  if cap > 0 then
    local v = stored[tag]
    v[#v + 1], v[#v + 2] = 'h', hash
    if parent then v[#v + 1], v[#v + 2] = 'p', parent end
    for i = 1, k do
      v[#v + 1], v[#v + 2], v[#v + 3], v[#v + 4] = 's', ARGV[4 + i], 'z', size
    end
  end
  added[tag] = added[tag] + 1
  pages = pages + 1
end
for tag, count in pairs(added) do
  if count > 0 then
    local stats = tag .. ':stats'
    redis.call('HINCRBY', stats, 'used_bytes', count * bytes)
    redis.call('HINCRBY', stats, 'objects', count * k)
    redis.call('HINCRBY', stats, 'nodes', count)
    if cap > 0 then
      redis.call('XADD', events[tag], 'MAXLEN', '~', cap, '*', 'type', 'stored', 'objects',
        cjson.encode(stored[tag]))
    end
  end
end
return pages
