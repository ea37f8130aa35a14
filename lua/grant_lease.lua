#!lua flags=allow-oom
-- grant_lease: get for objects of one shard: each complete object gets a read lease until
-- Redis now + ttl (leases only grow), which holds it against eviction and removal.
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 lease ttl (ms), 5 probe (0|1: is_exist with
--       probe_extends_lease: a processing object answers '' like an absent one),
--       then 3 per item: node key index, node hash, key suffix
-- Returns: one per item: the packed value after the lease, '' if absent, or NOT_READY
local ttl, probe = tonumber(ARGV[4]), ARGV[5] == '1'

local function lease(n, suffix)
  local name = 'o:' .. suffix
  local value = field(n, name)
  if not value then return '' end
  local state, size, t, pins, token, reps = unpack_object(value)
  if state ~= 'c' then
    if probe then return '' end
    return fail('NOT_READY', 'object ' .. n.hash .. suffix .. ' is still processing')
  end
  local until_ms = now() + ttl
  if until_ms > t then
    value = pack_object('c', size, until_ms, pins, token, reps)
    put_field(n, name, value)
    if until_ms > (n.lm or 0) then set(n, 'lm', until_ms) end
  end
  return value
end

for a = 6, #ARGV, 3 do want(KEYS[tonumber(ARGV[a])], 'o:' .. ARGV[a + 2]) end
local results = {}
for a = 6, #ARGV, 3 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  results[#results + 1] = lease(n, ARGV[a + 2])
end
finish()
return results
