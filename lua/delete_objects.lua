-- delete_objects: every path that deletes single objects (remove, put_revoke, force
-- removal, lease-ordered fallback eviction) runs here, so an object never leaves the
-- store without leaving its node too.
-- KEYS: 1 leaves, 2 soft_leaves, 3 objects, 4 stats, 5 nodes, then 4 per object: obj,
--       node, children, keys (all in one shard)
-- ARGV: 1 mode: "remove" (refuses processing and leased objects), "revoke" (only
--       processing objects), "force" (anything), "evict" (complete, unleased, not
--       hard-pinned, and not in the tree unless path breaking is allowed);
--       2 soft pins allowed (0|1, evict only), 3 path breaking allowed (0|1: evict may
--       take keys of nodes that have children; never of leaves, which go whole);
--       then 2 per object: key, prefix hash
-- Returns: {freed_bytes, {status per object}, {emptied node, its parent ("" unknown), ...}}
--          status: "deleted" | "missing" | "processing" | "complete" | "leased" |
--          "hard_pinned" | "soft_pinned" | "in_tree" (all but the first two are
--          refusals: the object is left as it was)
local leaves_key, soft_leaves_key, objects_key, stats_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local nodes_key = KEYS[5]
local FIRST_OBJECT = 6
local mode, soft_allowed, path_breaking = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'
local now = now_ms()
local freed, statuses, emptied = 0, {}, {}

local function refusal(f, keys_key, children_key, key)
  local state, lease_ms = f[2], tonumber(f[3])
  if not state then return 'missing' end
  if mode == 'force' then return nil end
  if mode == 'revoke' then return state ~= 'processing' and state or nil end
  if state ~= 'complete' then return state end
  if lease_ms > now then return 'leased' end
  if mode == 'remove' then return nil end
  if f[5] == '1' then return 'hard_pinned' end
  if f[4] == '1' and not soft_allowed then return 'soft_pinned' end
  if redis.call('ZSCORE', keys_key, key) and
     (not path_breaking or redis.call('SCARD', children_key) == 0) then
    return 'in_tree'
  end
  return nil
end

for i = 0, (#KEYS - FIRST_OBJECT + 1) / 4 - 1 do
  local k = FIRST_OBJECT + 4 * i
  local obj_key, node_key, children_key, keys_key = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local key, hash = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  local f = read_object(obj_key)
  local status = refusal(f, keys_key, children_key, key) or 'deleted'
  statuses[#statuses + 1] = status
  if status == 'deleted' then
    freed = freed + delete_object(obj_key, node_key, keys_key, objects_key, stats_key, key, f)
    local parent = settle_node(node_key, children_key, keys_key, leaves_key, soft_leaves_key,
      nodes_key, hash)
    if parent then
      emptied[#emptied + 1] = hash
      emptied[#emptied + 1] = parent
    end
  end
end
return {freed, statuses, emptied}
