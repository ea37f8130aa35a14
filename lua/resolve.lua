#!lua flags=allow-oom
-- resolve: the resolver's step in the child's shard, for links older than the grace period.
-- Mode 'check' (a pending link parent -> child at epoch e): if the child is alive and names
-- the parent, the link stays and the child's epoch rises to e (so that deleting it later
-- unlinks exactly this epoch); otherwise the child is fenced at e (a writer still holding
-- e is refused) and the caller drops the parent's field if it still holds e.
-- Mode 'break' (the caller found a cycle through this link): if the child still names the
-- parent at epoch e, it becomes a root (parent cleared, fenced at its epoch) and the
-- caller drops the parent's field.
-- uses: nodes
-- KEYS: 1-7 the shard's keys, then the child nodes
-- ARGV: 1-3 header (_lib.lua), then 5 per item: node key index, child hash, parent hash,
--       epoch, mode ('check'|'break')
-- Returns: one per item: 'keep' | 'keep+children' | 'drop' (check);
--          'broken' <epoch> | 'gone' (break)
local results = {}
for a = 4, #ARGV, 5 do
  local n = node(KEYS[tonumber(ARGV[a])], ARGV[a + 1])
  local parent, epoch, mode = ARGV[a + 2], tonumber(ARGV[a + 3]), ARGV[a + 4]
  local names_parent = n.exists and n.p == parent
  if mode == 'check' then
    if names_parent then
      if epoch > (n.pe or 0) then set(n, 'pe', epoch) end
      results[#results + 1] = (n.nc or 0) > 0 and 'keep+children' or 'keep'
    else
      raise_fence(n.hash, epoch)
      results[#results + 1] = 'drop'
    end
  elseif names_parent and (n.pe or 0) <= epoch then
    local pe = n.pe or 0
    set(n, 'p', nil)
    set(n, 'pe', nil)
    raise_fence(n.hash, pe)
    results[#results + 1] = 'broken ' .. num(pe)
  else
    results[#results + 1] = 'gone'
  end
end
finish()
return results
