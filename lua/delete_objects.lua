-- delete_objects: every path that deletes objects (remove, put_revoke, force removal)
-- runs here, so an object never leaves the store without leaving its node too.
-- KEYS: 1 leaves, 2 objects, 3 stats, then 4 per object: obj, node, children, keys
--       (all in one shard)
-- ARGV: 1 mode: "remove" (refuses processing and leased objects), "revoke" (only
--       processing objects), "force" (anything); then 2 per object: key, prefix hash
-- Returns: {freed_bytes, {status per object}, {emptied node, its parent ("" unknown), ...}}
--          status: "deleted" | "missing" | "processing" | "leased" | "complete"
--          (the last three are refusals: the object is left as it was)
local leaves_key, objects_key, stats_key = KEYS[1], KEYS[2], KEYS[3]
local mode = ARGV[1]
local now = now_ms()
local freed, statuses, emptied = 0, {}, {}

for i = 0, (#KEYS - 3) / 4 - 1 do
  local obj_key, node_key, children_key, keys_key =
    KEYS[4 + 4 * i], KEYS[5 + 4 * i], KEYS[6 + 4 * i], KEYS[7 + 4 * i]
  local key, hash = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local f = redis.call('HMGET', obj_key, 'size', 'state', 'lease_ms', 'soft_pin')
  local size, state, lease_ms, soft_pin = tonumber(f[1]), f[2], tonumber(f[3]), f[4]
  local status = 'deleted'
  if not state then
    status = 'missing'
  elseif mode == 'revoke' and state ~= 'processing' then
    status = state
  elseif mode == 'remove' and state ~= 'complete' then
    status = state
  elseif mode == 'remove' and lease_ms > now then
    status = 'leased'
  end
  statuses[#statuses + 1] = status

  if status == 'deleted' then
    redis.call('DEL', obj_key)
    redis.call('ZREM', objects_key, key)
    redis.call('HINCRBY', stats_key, 'used_bytes', -size)
    redis.call('HINCRBY', stats_key, 'objects', -1)
    freed = freed + size
    if redis.call('ZREM', keys_key, key) == 1 then
      redis.call('HINCRBY', node_key, 'bytes', -size)
      if state ~= 'complete' then redis.call('HINCRBY', node_key, 'processing', -1) end
      if soft_pin == '1' then redis.call('HINCRBY', node_key, 'soft_pins', -1) end
      local parent = delete_if_empty(node_key, children_key, keys_key, leaves_key, stats_key, hash)
      if parent then
        emptied[#emptied + 1] = hash
        emptied[#emptied + 1] = parent
      else
        refresh_leaf(children_key, keys_key, leaves_key, hash)
      end
    end
  end
end
return {freed, statuses, emptied}
