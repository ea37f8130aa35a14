#!lua flags=allow-oom,allow-cross-slot-keys
-- resolve: the resolver's step where the child lives, for links older than the grace
-- period. Mode 'check' (a pending link parent -> child at epoch e): if the child is alive
-- and names the parent, the link stays and the child's epoch rises to e (so that deleting
-- it later unlinks exactly this epoch); otherwise the child is fenced at e (a writer still
-- holding e is refused) and the caller drops the parent's field if it still holds e.
-- Mode 'break' (the caller found a cycle through this link): if the child still names the
-- parent at epoch e, it becomes a root (parent cleared, fenced at its epoch) and the
-- caller drops the parent's field.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), then 5 per item: the child's shard tag, child
--       hash, parent hash, epoch, mode ('check'|'break')
-- Returns: one per item: 'keep' | 'keep+children' | 'drop' (check);
--          'broken' <epoch> | 'gone' (break)
local results = {}
for a = 8, #A, 5 do
  local s = shard(A[a])
  local n = node(s, A[a + 1])
  local parent, epoch, mode = A[a + 2], tonumber(A[a + 3]), A[a + 4]
  local names_parent = n.exists and n.p == parent
  if mode == 'check' then
    if names_parent then
      if epoch > (n.pe or 0) then set(n, 'pe', epoch) end
      results[#results + 1] = (n.nc or 0) > 0 and 'keep+children' or 'keep'
    else
      raise_fence(s, n.hash, epoch)
      results[#results + 1] = 'drop'
    end
  elseif names_parent and (n.pe or 0) <= epoch then
    local pe = n.pe or 0
    set(n, 'p', nil)
    set(n, 'pe', nil)
    raise_fence(s, n.hash, pe)
    results[#results + 1] = 'broken ' .. num(pe)
  else
    results[#results + 1] = 'gone'
  end
end
finish()
return results
