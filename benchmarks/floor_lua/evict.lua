-- The floor of eviction (benchmarks/floor.py): leaves evicted oldest first per shard, many
-- a call on a single Redis, with the cascade to the parent inside the call, in the v2
-- schema (mooncake_redis/keys.py) and done blind: no lease, pin or score check, no fence,
-- no outbox (the parent is unlinked in the same call, wherever its shard is).
-- Per leaf: its share of one ZPOPMIN of its shard's leaves, HMGET of the node (parent,
-- objects, bytes; with events HGETALL, for the suffixes), DEL, and with events an XADD
-- 'evicted' per object; per parent: HDEL of the child field, HMGET of nc, objects and lm,
-- HSET (or HDEL once 0) of nc, and ZADD to its shard's leaves once it is a leaf; per shard
-- touched, the stats' used_bytes, objects and nodes once per call (HINCRBY).
-- Benchmark-only shortcut: shard and key names are built here from the namespace and its
-- shard count (keys.py and prefix.shard_of for 64-hex hashes: shard = the first byte
-- scaled to the count), since a leaf's parent may live in any shard.
-- ARGV: 1 namespace, 2 shard count, 3 leaves per call, 4 first shard to visit (0-based),
--       5 events cap (0 = no events), 6 the shard tags' width in hex digits (1: the
--       layout of 16 one-digit tags, a digest's first digit; 2: a byte's top bits)
-- Returns: {leaves evicted, objects evicted, the shard the next call starts at}
local ns, count, budget, first, cap, width =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6])
local per_shard = math.max(1, math.ceil(budget / count))

local function tag(shard)
  return ns .. ':{' .. string.format(width == 1 and '%x' or '%02x', shard) .. '}'
end
local function shard_of(hash)
  if width == 1 then return tonumber(string.sub(hash, 1, 1), 16) end
  return math.floor(tonumber(string.sub(hash, 1, 2), 16) * count / 256)
end

-- Per shard touched: its stats deltas {used_bytes, objects, nodes}.
local deltas = {}
local function delta(shard, bytes, objects)
  local d = deltas[shard]
  if not d then
    d = {0, 0, 0}
    deltas[shard] = d
  end
  d[1], d[2], d[3] = d[1] - bytes, d[2] - objects, d[3] - 1
end

local leaves, objects, shard, visited = 0, 0, first, 0
while leaves < budget and visited < count do
  local prefix = tag(shard)
  local popped = redis.call('ZPOPMIN', prefix .. ':leaves', math.min(per_shard, budget - leaves))
  for i = 1, #popped, 2 do
    local hash = popped[i]
    local key = prefix .. ':n:' .. hash
    local parent, no, b
    if cap > 0 then
      local all = redis.call('HGETALL', key)
      for j = 1, #all, 2 do
        local f = all[j]
        if f == 'p' then parent = all[j + 1]
        elseif f == 'no' then no = all[j + 1]
        elseif f == 'b' then b = all[j + 1]
        elseif string.sub(f, 1, 2) == 'o:' then
          redis.call('XADD', prefix .. ':events', 'MAXLEN', '~', cap, '*', 'type', 'evicted',
            'hash', hash, 'suffix', string.sub(f, 3), 'size',
            string.match(all[j + 1], '^1%a,(%d+)'))
        end
      end
    else
      local v = redis.call('HMGET', key, 'p', 'no', 'b')
      parent, no, b = v[1], v[2], v[3]
    end
    redis.call('DEL', key)
    no, b = tonumber(no) or 0, tonumber(b) or 0
    delta(shard, b, no)
    leaves, objects = leaves + 1, objects + no
    if parent then
      local parent_shard = shard_of(parent)
      local parent_prefix = tag(parent_shard)
      local parent_key = parent_prefix .. ':n:' .. parent
      redis.call('HDEL', parent_key, hash)
      local v = redis.call('HMGET', parent_key, 'nc', 'no', 'lm')
      local nc = (tonumber(v[1]) or 1) - 1
      if nc > 0 then
        redis.call('HSET', parent_key, 'nc', nc)
      else
        redis.call('HDEL', parent_key, 'nc')
        if v[2] then redis.call('ZADD', parent_prefix .. ':leaves', v[3] or 0, parent) end
      end
    end
  end
  if #popped == 0 then visited = visited + 1 else visited = 0 end
  shard = (shard + 1) % count
end
for s, d in pairs(deltas) do
  local stats = tag(s) .. ':stats'
  redis.call('HINCRBY', stats, 'used_bytes', d[1])
  redis.call('HINCRBY', stats, 'objects', d[2])
  redis.call('HINCRBY', stats, 'nodes', d[3])
end
return {leaves, objects, shard}
