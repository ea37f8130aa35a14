#!lua flags=allow-cross-slot-keys
-- register: path B (RegisterRadixTreeNode), for nodes of the shards one Redis node serves:
-- each node is linked to its parent, after checking that the object keys named for it are
-- stored. A parent served by this node is linked in this call, both sides; one served
-- elsewhere had its step 1 (link.lua) run before, and this is step 2.
-- uses: links
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 batch id, 9 link epoch (0: Redis now),
--       10 max_depth, then per item: shard tag, node hash, parent hash ('' = none), the
--       parent's shard tag ('' = served elsewhere), the node's field name in its parent
--       ('' = the node hash itself), cycle-checked (0|1|1:<links>), key count k, k
--       suffixes
-- Returns: one per item: 'OK' .. link flag (as put), or a refusal: NOT_FOUND,
--          INVALID_ARGUMENT, PARENT_CONFLICT, CYCLE, STALE_EPOCH, FENCED <fence>,
--          CYCLE_CHECK, NOT_HERE
local batch, max_depth = A[8], A[10]
local epoch = A[9] > 0 and A[9] or now()

local results = {}
local a = 11
while a <= #A do
  local tag, hash, parent, parent_tag, checked, k = A[a], A[a + 1], A[a + 2], A[a + 3],
    A[a + 5], A[a + 6]
  local f = A[a + 4] ~= '' and A[a + 4] or hash  -- the node's field in its parent
  local first = a + 7
  a = first + k
  local names = {}
  for i = 1, k do names[i] = 'o:' .. A[first + i - 1] end
  local n = node(shard(tag), hash, names)
  local result
  for i = 1, k do
    if not n[names[i]] then
      result = fail('NOT_FOUND', 'no object ' .. hash .. A[first + i - 1] ..
        ' to register under node ' .. hash .. '; put_start it first')
      break
    end
  end
  if not result and not n.exists then
    result = fail('INVALID_ARGUMENT', 'node ' .. hash .. ' does not exist and no keys were '
      .. 'given; register it with at least one stored key')
  end
  if not result then
    local here = parent ~= '' and parent_tag ~= ''
    local how, refusal
    if here and not is_local(parent_tag) then  -- the client's slot map is older than Redis's
      refusal = fail('NOT_HERE', 'parent ' .. parent .. ' is not served by this Redis node')
    else
      how, refusal = check_parent(n, parent, epoch, checked, batch, here, max_depth)
    end
    if not how then
      result = refusal
    else
      local q = here and node(shard(parent_tag), parent, {f}) or nil
      result = 'OK' .. apply_parent(n, parent, epoch, how, batch, q, f)
    end
  end
  results[#results + 1] = result
end
finish()
return results
