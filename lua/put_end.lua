#!lua flags=allow-oom
-- put_end: complete processing objects of one shard. Each one's lease starts now, so objects
-- nobody reads are evicted oldest first; a 'stored' event announces it.
-- uses: events leaves
-- KEYS: 1-7 the shard's keys, then the nodes
-- ARGV: 1-3 header (_lib.lua), 4 writer token, then per node: node key index, node hash,
--       count k, and k key suffixes (each once)
-- Returns: one per suffix, in order: 'OK' (also when it was complete already: a re-send),
--          or NOT_FOUND, INVALID_STATE (another writer's object)
--
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): per node one HMGET of the counters and
-- its objects, one HSET (and an HDEL of the processing counters once none is left), the
-- leaf index only when the score moves; per object a string match and a concatenation. A
-- completion moves no bytes and no object count: only np, ps/psn and lm change.
local token = ARGV[4]
local owned = #token + 2  -- a value's tail starts '<pins>,<token>'
local NOW = now()
local now_s = num(NOW)
local results = {}
local wrote = false

local function missing(hash, suffix)
  return fail('NOT_FOUND', 'no object ' .. hash .. suffix .. ' (never started, revoked, '
    .. 'or evicted after put_start_release_timeout)')
end

local function foreign(hash, suffix, tail)
  return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' was started by another '
    .. 'writer (token ' .. tostring(tail and string.match(tail, '^%d,([^|]*)')) .. ')')
end

-- The latest start among the node's processing objects and how many share it (a rescan,
-- only when the latest starter completed and others remain), `changed` overriding the
-- values as stored (field, value, ... as written by this call).
local function latest_start(key, changed)
  local values, all = {}, redis.call('HGETALL', key)
  for i = 1, #all, 2 do values[all[i]] = all[i + 1] end
  for i = 1, #changed, 2 do values[changed[i]] = changed[i + 1] end
  local ps, psn = nil, 0
  for f, v in pairs(values) do
    if string.sub(f, 1, 2) == 'o:' then
      local t = tonumber(string.match(v, '^1p,%d+,(%d+),'))
      if t and (not ps or t > ps) then ps, psn = t, 1 elseif t and t == ps then psn = psn + 1 end
    end
  end
  return ps, psn
end

local a = 5
while a <= #ARGV do
  local key, hash, k = KEYS[tonumber(ARGV[a])], ARGV[a + 1], tonumber(ARGV[a + 2])
  local first = a + 3
  a = first + k
  local v
  if k == 2 then
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'lm',
      'o:' .. ARGV[first], 'o:' .. ARGV[first + 1])
  else
    local names = {}
    for i = 1, k do names[i] = 'o:' .. ARGV[first + i - 1] end
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'lm',
      unpack(names))
  end
  local parent = v[1]
  if parent and string.byte(parent, 1) == 63 then parent = nil end  -- '?': a shell's marker
  local nc, no, np, ps, psn = tonumber(v[2]), tonumber(v[3]), tonumber(v[4]) or 0,
    tonumber(v[5]), tonumber(v[6]) or 0
  local nh, ns, lm = tonumber(v[7]), tonumber(v[8]), tonumber(v[9]) or 0
  local set0, score0 = leaf_score(no, nc, nh, ns, lm, np, ps)
  local put, rescan = nil, false
  for i = 0, k - 1 do
    local suffix, value = ARGV[first + i], v[10 + i]
    local result = 'OK'
    if not value then
      result = missing(hash, suffix)
    else
      local state, size, t, tail = string.match(value, '^1(%a),(%d+),(%d+),(.*)$')
      local after = tail and string.byte(tail, owned + 1)
      if not tail or string.byte(tail, 2) ~= 44 or string.sub(tail, 3, owned) ~= token
          or (after and after ~= 124) then
        result = foreign(hash, suffix, tail)
      elseif state == 'p' then
        put = put or {}
        put[#put + 1] = 'o:' .. suffix
        put[#put + 1] = '1c,' .. size .. ',' .. now_s .. ',' .. tail
        np = np - 1
        t = tonumber(t)
        if np == 0 then
          ps, psn = nil, 0
        elseif t == ps then
          psn = psn - 1
          rescan = psn <= 0
        end
        if NOW > lm then lm = NOW end
        emit_event('stored', hash, parent, suffix, size, string.sub(tail, owned + 1))
      end
    end
    results[#results + 1] = result
  end
  if put then
    if rescan then ps, psn = latest_start(key, put) end
    put[#put + 1] = 'lm'
    put[#put + 1] = lm == NOW and now_s or num(lm)
    if np > 0 then
      put[#put + 1] = 'np'; put[#put + 1] = num(np)
      put[#put + 1] = 'ps'; put[#put + 1] = num(ps)
      put[#put + 1] = 'psn'; put[#put + 1] = num(psn)
      redis.call('HSET', key, unpack(put))
    else
      redis.call('HSET', key, unpack(put))
      redis.call('HDEL', key, 'np', 'ps', 'psn')
    end
    move_leaf(hash, set0, score0, leaf_score(no, nc, nh, ns, lm, np, ps))
    wrote = true
  end
end
if wrote then redis.call('HINCRBY', STATS, 'writes', 1) end
return results
