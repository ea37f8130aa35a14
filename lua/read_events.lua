#!lua flags=allow-oom
-- read_events: read one shard's events stream and tell, in the same atomic step, whether
-- entries the reader had not read yet were trimmed by the cap (MAXLEN ~ events_max_len)
-- before it got to them (docs/EVENTS.md).
--
-- A stream is trimmed from its head only, so the entries trimmed so far are the first
-- A - L ever added (A: entries-added, L: length), and a reader that has read its first E
-- entries in order lost entries iff A - L > E. E is the consumer group's entries-read
-- (set when the group is created here, counted by Redis per delivered entry) or, without
-- a group, the reader's own count. The test must run in the same step as the read: once a
-- read has jumped over a gap, Redis 7.0 keeps counting from the wrong base (it never
-- re-checks a valid counter) while fakeredis recomputes it, and max-deleted-entry-id only
-- moves on XDEL, never on a trim. After a loss the counter is set right (XGROUP SETID ...
-- ENTRIESREAD), so one loss is reported once.
--
-- uses:
-- KEYS: 1 the shard's events stream
-- ARGV: 1 group ('' = no group: a plain reader), 2 consumer, 3 from: '>' new entries,
--       an ID: this consumer's pending entries after it (group), or the reader's last ID
--       ('' = start now; plain), 4 count, 5 where a new group or reader starts: 'latest' |
--       'earliest', 6 the plain reader's entries read
-- Returns: {created (1: the group or reader starts here), position (the group's
--          last-delivered ID, or the reader's last ID), entries read (-1: unknown), lost
--          (entries trimmed unread, -1: an unknown number), trimmed pending IDs (each was
--          delivered and is gone now: ack them), {ID, {field, value, ...}, ...}}
local stream, group, consumer, from = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local count, start, plain_read = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]) or 0

local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end

local function after(a, b)  -- ID a > ID b
  local ams, aseq = id_parts(a)
  local bms, bseq = id_parts(b)
  return ams > bms or (ams == bms and aseq > bseq)
end

-- The entries of an XREAD(GROUP) reply on one stream: {{stream, entries}} from Redis,
-- {stream, entries} from fakeredis, false when there are none.
local function entries_of(reply)
  if not reply or not reply[1] then return {} end
  if type(reply[1]) == 'string' then return reply[2] or {} end
  return reply[1][2] or {}
end

local function as_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

-- The stream as one snapshot (nil if there is none).
local info = redis.pcall('XINFO', 'STREAM', stream)
if type(info) == 'table' and info.err then info = nil elseif info then info = as_table(info) end
local added = info and tonumber(info['entries-added']) or 0
local length = info and tonumber(info['length']) or 0
local first = info and info['recorded-first-entry-id'] or '0-0'
local last = info and info['last-generated-id'] or '0-0'
local trimmed = added - length

-- Where a new reader starts: after everything (latest), or before the first entry kept
-- (earliest), with the count of entries it is taken to have read.
local function start_point()
  if start == 'earliest' and length > 0 then return '0-0', trimmed end
  return last, added
end

local created, position, read = 0, nil, nil
if group ~= '' then
  local groups = info and redis.call('XINFO', 'GROUPS', stream) or {}
  for _, g in ipairs(groups) do
    local fields = as_table(g)
    if fields['name'] == group then
      position = fields['last-delivered-id']
      read = tonumber(fields['entries-read'])  -- false (unknown) -> nil
      break
    end
  end
  if not position then
    position, read = start_point()
    redis.call('XGROUP', 'CREATE', stream, group, position, 'MKSTREAM', 'ENTRIESREAD', read)
    created = 1
  end
elseif from == '' or plain_read > added then  -- a new reader, or the stream was re-made
  position, read = start_point()
  created = 1
else
  position, read = from, plain_read
end

local entries, gone, lost = {}, {}, 0
if group ~= '' and from ~= '>' then
  -- This consumer's pending entries (a restart): no new ones, so nothing to test.
  local reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
    'STREAMS', stream, from)
  for _, entry in ipairs(entries_of(reply)) do
    if entry[2] then
      entries[#entries + 1] = entry[1]
      entries[#entries + 1] = entry[2]
    else
      gone[#gone + 1] = entry[1]  -- delivered before, trimmed since: never processed
    end
  end
  return {created, position, read or -1, #gone, gone, entries}
end

if created == 0 and (length == 0 or after(first, position)) then
  -- Every entry after the position that is still kept is unread: a trimmed one is lost.
  if read == nil then
    if after(last, position) then lost = -1 end
  elseif trimmed > read then
    lost = trimmed - read
  end
end

local reply
if group ~= '' then
  reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS',
    stream, '>')
else
  reply = info and redis.call('XREAD', 'COUNT', count, 'STREAMS', stream, position)
end
local got = entries_of(reply)
for _, entry in ipairs(got) do
  entries[#entries + 1] = entry[1]
  entries[#entries + 1] = entry[2]
end
if #got > 0 then position = got[#got][1] end
if lost ~= 0 then
  -- Count from the kept entries again: the first k delivered follow the trimmed ones.
  read = #got > 0 and trimmed + #got or added
  if #got == 0 then position = last end
  if group ~= '' then
    redis.call('XGROUP', 'SETID', stream, group, position, 'ENTRIESREAD', read)
  end
elseif read ~= nil then
  read = read + #got
end
return {created, position, read or -1, lost, gone, entries}
