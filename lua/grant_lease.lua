#!lua flags=allow-oom,allow-cross-slot-keys
-- grant_lease: get for objects of the shards one Redis node serves: each complete object
-- gets a read lease until Redis now + ttl (leases only grow), which holds it against
-- eviction and removal.
-- uses: leaves
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 lease ttl (ms), 9 probe (0|1: is_exist with
--       probe_extends_lease: a processing object answers '' like an absent one),
--       then per node: shard tag, node hash, count k, and k key suffixes (each once)
-- Returns: one per suffix, in order: the packed value after the lease, '' if absent, or
--          NOT_READY
--
-- Lean by design, as put_end: per node one HMGET of the leaf counters and its objects and,
-- if a lease grew, one HSET of the values and `lm`; the leaf index only when the node is a
-- leaf whose score moves; per object a position match and a concatenation. A lease moves
-- nothing fsck's recount counts, so the stats are left alone.
local probe = A[9] == 1
local UNTIL = now() + A[8]
local until_s = num(UNTIL)
local results = {}
local writes = {}

local a = 10
while a <= #A do
  local s, hash, k = shard(A[a]), A[a + 1], A[a + 2]
  local first = a + 3
  a = first + k
  local key = s.nbase .. hash
  local names = {}
  for i = 1, k do names[i] = 'o:' .. A[first + i - 1] end
  local v = redis.call('HMGET', key, 'nc', 'no', 'np', 'ps', 'nh', 'ns', 'lm', unpack(names))
  local put, at = nil, 0
  for i = 1, k do
    local value = v[7 + i]
    if value then
      -- '1c,<size>,<time>,<pins>,<token><replicas>': the time's place, or nil (processing,
      -- or a value of no format this version writes: neither is leased)
      local from, to = string.match(value, '^1c,%d+,()%d+(),%d,')
      if not from then
        value = probe and '' or fail('NOT_READY', 'object ' .. hash .. A[first + i - 1] ..
          ' is still processing')
      elseif UNTIL > tonumber(string.sub(value, from, to - 1)) then
        value = string.sub(value, 1, from - 1) .. until_s .. string.sub(value, to)
        put = put or {}
        put[at + 1] = names[i]
        put[at + 2] = value
        at = at + 2
      end
    end
    results[#results + 1] = value or ''
  end
  if put then
    local lm = tonumber(v[7]) or 0
    if UNTIL > lm then
      put[at + 1] = 'lm'
      put[at + 2] = until_s
    end
    writes[#writes + 1] = key
    writes[#writes + 1] = put
    if not v[1] and UNTIL > lm then  -- a leaf (no children) whose latest lease moved
      local no, np, ps, nh, ns = tonumber(v[2]), tonumber(v[3]), tonumber(v[4]),
        tonumber(v[5]), tonumber(v[6])
      local set0, score0 = leaf_score(no, nil, nh, ns, lm, np, ps)
      move_leaf(s, hash, set0, score0, leaf_score(no, nil, nh, ns, UNTIL, np, ps))
    end
  end
end
for i = 1, #writes, 2 do redis.call('HSET', writes[i], unpack(writes[i + 1])) end
for _, s in ipairs(SHARDS) do write_leaves(s) end
return results
