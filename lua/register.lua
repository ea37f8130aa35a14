#!lua
-- register: step 2 of path B (RegisterRadixTreeNode), for nodes of one shard: each node is
-- linked to its parent, after checking that the object keys named for it are stored.
-- uses: links
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 batch id, then per item: node key index, node hash,
--       parent hash ('' = none), link epoch, cycle-checked (0|1), key count k, k suffixes
-- Returns: one per item: 'OK' .. link flag (as put_start), or a refusal: NOT_FOUND,
--          INVALID_ARGUMENT, PARENT_CONFLICT, STALE_EPOCH, FENCED <fence>, CYCLE_CHECK
local batch = ARGV[4]

local function register(n, parent, epoch, checked, first, count)
  for i = first, first + count - 1 do
    if not field(n, 'o:' .. ARGV[i]) then
      return fail('NOT_FOUND', 'no object ' .. n.hash .. ARGV[i] .. ' to register under node '
        .. n.hash .. '; put_start it first')
    end
  end
  if not n.exists then
    return fail('INVALID_ARGUMENT', 'node ' .. n.hash .. ' does not exist and no keys were '
      .. 'given; register it with at least one stored key')
  end
  local how, refusal = check_parent(n, parent, epoch, checked, batch)
  if not how then return refusal end
  return 'OK' .. apply_parent(n, parent, epoch, how, batch)
end

local a = 5
while a <= #ARGV do
  for i = a + 6, a + 5 + tonumber(ARGV[a + 5]) do want(KEYS[tonumber(ARGV[a])], 'o:' .. ARGV[i]) end
  a = a + 6 + tonumber(ARGV[a + 5])
end
local results = {}
a = 5
while a <= #ARGV do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local count = tonumber(ARGV[a + 5])
  results[#results + 1] = register(n, ARGV[a + 2], tonumber(ARGV[a + 3]), ARGV[a + 4], a + 6,
    count)
  a = a + 6 + count
end
finish()
return results
