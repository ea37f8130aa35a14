#!lua flags=allow-oom,allow-cross-slot-keys
-- invalidate: an unmount's sweep over nodes of the shards one Redis node serves. Every replica on the segment is
-- dropped from its object; an object left without replicas is deleted; each object
-- touched is announced ('invalidated', with the replicas it still has, `left` of them). A
-- node left empty is deleted and its unlink recorded and returned, as delete does. The
-- event names the replicas dropped (`dropped`) and those left (`replicas`).
-- Objects stored without replicas are not touched.
-- uses: nodes
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 segment (escaped), then 2 per item: shard tag,
--       node hash
-- Returns: {one per item: '<objects touched>:<objects deleted>:<bytes freed>';
--           intents: parent, child, epoch, ...}
local segment = A[8]
local on_segment = '|' .. segment .. ','

-- The replicas of reps that are not on the segment, and those that are.
local function split_replicas(reps)
  local kept, dropped = {}, {}
  for part in string.gmatch(reps, '|[^|]*') do
    if string.sub(part, 1, #on_segment) ~= on_segment then
      kept[#kept + 1] = part
    else
      dropped[#dropped + 1] = part
    end
  end
  return table.concat(kept), table.concat(dropped)
end

local function sweep(n)
  if not n.exists then return '0:0:0' end
  local touched, deleted, freed = 0, 0, 0
  for _, o in ipairs(scan_objects(n)) do
    local suffix, state, size, t, pins, token, reps = o[1], o[2], o[3], o[4], o[5], o[6], o[7]
    if reps and string.find(reps, on_segment, 1, true) then
      local left, dropped = split_replicas(reps)
      touched = touched + 1
      freed = freed + charged(size, reps) - (left == '' and 0 or charged(size, left))
      if left == '' then
        deleted = deleted + 1
        put_field(n, 'o:' .. suffix, false)
        count_object(n, -1, state, size, t, pins, reps)
      else
        -- only the bytes and the segments change: state, time and pins stay
        put_field(n, 'o:' .. suffix, pack_object(state, size, t, pins, token, left))
        local delta = charged(size, left) - charged(size, reps)
        add(n, 'b', delta)
        n.s.du = n.s.du + delta
        count_segments(n.s, reps, -1, size)
        count_segments(n.s, left, 1, size)
      end
      local _, count = string.gsub(left, '|', '')
      emit('invalidated', n, suffix, size, left, 'segment', segment, 'left', num(count),
        'dropped', dropped)
    end
  end
  return num(touched) .. ':' .. num(deleted) .. ':' .. num(freed)
end

local results = {}
for a = 9, #A, 2 do
  results[#results + 1] = sweep(node(shard(A[a]), A[a + 1]))
end
finish()
return {results, flat(intents, 3)}
