#!lua flags=allow-oom,allow-cross-slot-keys
-- put_end: complete processing objects of the shards one Redis node serves. Each one's
-- lease starts now, so objects nobody reads are evicted oldest first; a 'stored' event
-- announces it (one entry per shard for the call).
-- uses: events leaves
-- KEYS: none, or one key of a shard of the call (on Redis Cluster, for routing)
-- ARGV: 1 JSON: 1-7 header (_lib.lua), 8 writer token, then per node: shard tag, node
--       hash, count k, and k key suffixes (each once)
-- Returns: one per suffix, in order: 'OK' (also when it was complete already: a re-send),
--          or NOT_FOUND, INVALID_STATE (another writer's object)
--
-- Lean by design (docs/ARCHITECTURE.md, "Scripts"): per node one HMGET of the counters and
-- its objects, one HSET (and an HDEL of the processing counters once none is left), the
-- leaf index only when the score moves; per object a string match and a concatenation. A
-- completion moves no bytes and no object count: only np, ps/psn and lm change, so it
-- leaves the stats alone (nothing fsck's recount counts moves).
local token = A[8]
local owned = #token + 2  -- a value's tail starts '<pins>,<token>'
local NOW = now()
local now_s = num(NOW)
local results = {}

local function missing(hash, suffix)
  return fail('NOT_FOUND', 'no object ' .. hash .. suffix .. ' (never started, revoked, '
    .. 'or evicted after put_start_release_timeout)')
end

local function foreign(hash, suffix, value)
  return fail('INVALID_STATE', 'object ' .. hash .. suffix .. ' was started by another '
    .. 'writer (token ' .. tostring(string.match(value, '^1%a,%d+,%d+,%d,([^|]*)')) .. ')')
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

-- Reads every node first (on a cluster nothing is written before every key was touched),
-- then writes.
local writes = {}
local a = 9
while a <= #A do
  local s, hash, k = shard(A[a]), A[a + 1], A[a + 2]
  local first = a + 3
  a = first + k
  local key = s.nbase .. hash
  local names, v = {}, nil
  for i = 1, k do names[i] = 'o:' .. A[first + i - 1] end
  if k == 2 then
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'lm',
      names[1], names[2])
  else
    v = redis.call('HMGET', key, 'p', 'nc', 'no', 'np', 'ps', 'psn', 'nh', 'ns', 'lm',
      unpack(names))
  end
  local parent = v[1]
  if parent and string.byte(parent, 1) == 63 then parent = nil end  -- '?': a shell's marker
  local np, ps = tonumber(v[4]) or 0, v[5]  -- ps as text: compared to the values' times
  -- a node with children (nc is only stored above 0) is no leaf, before or after
  local leaf = not v[2]
  local no, nh, ns, lm = tonumber(v[3]), tonumber(v[7]), tonumber(v[8]), tonumber(v[9]) or 0
  local put, at, latest = nil, 0, 0
  for i = 1, k do
    local value = v[9 + i]
    local result = 'OK'
    if not value then
      result = missing(hash, A[first + i - 1])
    else
      -- '1<state>,<size>,<time>,<pins>,<token><replicas>': cut at its commas, no pattern
      local c2 = string.find(value, ',', 4, true)
      local c3 = c2 and string.find(value, ',', c2 + 1, true)
      local last = c3 and c3 + owned  -- the token's last byte
      local after = last and string.byte(value, last + 1)
      if not last or string.byte(value, c3 + 2) ~= 44 or string.sub(value, c3 + 3, last) ~= token
          or (after and after ~= 124) then
        result = foreign(hash, A[first + i - 1], value)
      elseif string.byte(value, 2) == 112 then  -- 'p': processing
        put = put or {}
        put[at + 1] = names[i]
        put[at + 2] = '1c' .. string.sub(value, 3, c2) .. now_s .. string.sub(value, c3)
        at = at + 2
        np = np - 1
        if np == 0 then
          ps = nil
        elseif string.sub(value, c2 + 1, c3 - 1) == ps then
          latest = latest + 1  -- one fewer object started at ps
        end
        if EVENTS_CAP > 0 then
          event(s, 'stored', hash, parent, A[first + i - 1], string.sub(value, 4, c2 - 1),
            after and string.sub(value, last + 1) or '')
        end
      end
    end
    results[#results + 1] = result
  end
  if put then
    local start = tonumber(ps)
    if np > 0 then
      put[at + 1] = 'np'; put[at + 2] = num(np)
      at = at + 2
      if latest > 0 then
        local psn = (tonumber(v[6]) or 0) - latest
        if psn <= 0 then  -- the latest starters all completed: find the next latest
          start, psn = latest_start(key, put)
          put[at + 1] = 'ps'; put[at + 2] = num(start)
          at = at + 2
        end
        put[at + 1] = 'psn'; put[at + 2] = num(psn)
        at = at + 2
      end
    end
    if NOW > lm then
      put[at + 1] = 'lm'; put[at + 2] = now_s
    end
    writes[#writes + 1] = {key, put, np == 0}
    if leaf then
      local set0, score0 = leaf_score(no, nil, nh, ns, lm, tonumber(v[4]), tonumber(v[5]))
      move_leaf(s, hash, set0, score0,
        leaf_score(no, nil, nh, ns, NOW > lm and NOW or lm, np, start))
    end
  end
end
for _, w in ipairs(writes) do
  redis.call('HSET', w[1], unpack(w[2]))
  if w[3] then redis.call('HDEL', w[1], 'np', 'ps', 'psn') end
end
for _, s in ipairs(SHARDS) do
  write_leaves(s)
  write_events(s)
end
return results
