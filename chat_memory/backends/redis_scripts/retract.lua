-- Retract events, atomically: the events with one of the ids and every tool call and result
-- sharing a tool_call_id with one of them leave the window (active list) or the archive, their
-- texts (search), the ids index and the calls index, and move, element unchanged, to the
-- `retracted` sorted set (score: seq), where clear() and the ttl reach them too.
-- ARGV: ttl, then the id prefixes ('{"id":"…"') of the events to retract.
-- Returns {1, retracted elements oldest first, their archived flags ('1' or '0')}, or
-- {0, id prefix, type, seq} when an id names a pinned system event or a summary (nothing is
-- written then).
-- Cost: through the ids and calls indexes, a binary search in the window per event and one
-- ZRANGEBYSCORE per archived partner; the archive is read only when an id is not in the
-- window, and the window only when an index is behind or many events leave it at once.
local ttl = tonumber(ARGV[1])
if not ttl then
  return redis.error_reply('chat-memory: malformed retract arguments')
end
local refused = wrong_key_type()
if refused then
  return refused
end
local state = redis.call('HMGET', meta, 'cid', 'last_seq', 'calls_indexed', 'indexed')
if not state[1] then
  return {1, {}, {}}
end
local last = tonumber(state[2] or '0')
-- Indexes behind the data (an older chat-memory wrote since): read the lists instead.
local calls_ok = tonumber(state[3] or '-1') == last
local ids_ok = tonumber(state[4] or '-1') == last

local wanted, wanted_list = {}, {}
for i = 2, #ARGV do
  if not wanted[ARGV[i]] then
    wanted[ARGV[i]] = true
    wanted_list[#wanted_list + 1] = ARGV[i]
  end
end
local found_ids, missing = {}, #wanted_list

local function refuse(element)
  return {0, id_of(element), type_of(element) or '', seq_of(element)}
end

for _, element in ipairs(redis.call('LRANGE', pinned, 0, -1)) do
  if wanted[id_of(element)] then
    return refuse(element)
  end
end
local summary = redis.call('HGET', meta, 'summary')
if summary and wanted[id_of(summary)] then
  return refuse(summary)
end

-- The active list, read whole only when an index cannot say where to look.
local active_elements = nil
local function all_active()
  active_elements = active_elements or redis.call('LRANGE', active, 0, -1)
  return active_elements
end

-- chosen[seq] = {element, '1' archived or '0' active}
local chosen = {}
local function choose_active(element)
  chosen[seq_of(element)] = {element, '0'}
  local id = id_of(element)
  if wanted[id] and not found_ids[id] then
    found_ids[id] = true
    missing = missing - 1
  end
end
if ids_ok then
  -- the ids index points at each window event: a binary search each, no read of the window
  for k, seq in ipairs(chunked('HMGET', ids, wanted_list)) do
    local element = seq and active_at(tonumber(seq))
    if element and id_of(element) == wanted_list[k] then
      choose_active(element)
    end
  end
else
  for _, element in ipairs(all_active()) do
    if wanted[id_of(element)] then
      choose_active(element)
    end
  end
end
local archive_elements = nil
if missing > 0 then
  -- an id not in the window: archived, retracted already, or unknown (read the archive once)
  archive_elements = redis.call('ZRANGE', archive, 0, -1)
  for _, element in ipairs(archive_elements) do
    if wanted[id_of(element)] then
      local kind = type_of(element)
      if kind == 'system' or kind == 'summary' then
        return refuse(element)
      end
      chosen[seq_of(element)] = {element, '1'}
    end
  end
end

-- Partners: every tool event sharing a call id with a chosen one.
local fields, field_list = {}, {}
for _, entry in pairs(chosen) do
  local field = call_of(entry[1])
  if field and not fields[field] then
    fields[field] = true
    field_list[#field_list + 1] = field
  end
end
if #field_list > 0 then
  if calls_ok then
    for _, listed in ipairs(chunked('HMGET', calls, field_list)) do
      for seq in string.gmatch(listed or '', '%d+') do
        local s = tonumber(seq)
        if not chosen[s] then
          local element, flag = active_at(s), '0'
          if not element then
            element, flag = redis.call('ZRANGEBYSCORE', archive, s, s, 'LIMIT', 0, 1)[1], '1'
          end
          if element and fields[call_of(element)] then
            chosen[s] = {element, flag}
          end
        end
      end
    end
  else
    for _, element in ipairs(all_active()) do
      local field = call_of(element)
      if field and fields[field] then
        chosen[seq_of(element)] = {element, '0'}
      end
    end
    archive_elements = archive_elements or redis.call('ZRANGE', archive, 0, -1)
    for _, element in ipairs(archive_elements) do
      local field = call_of(element)
      if field and fields[field] then
        chosen[seq_of(element)] = {element, '1'}
      end
    end
  end
end

local seqs = {}
for seq in pairs(chosen) do
  seqs[#seqs + 1] = seq
end
if #seqs == 0 then
  return {1, {}, {}}
end
table.sort(seqs)

-- The writes: nothing below can fail on data checked above.
timeline_begins()
local elements, flags, scored, gone_archive, gone_ids, gone_calls = {}, {}, {}, {}, {}, {}
for _, seq in ipairs(seqs) do
  local element, flag = chosen[seq][1], chosen[seq][2]
  elements[#elements + 1] = element
  flags[#flags + 1] = flag
  scored[#scored + 1] = seq
  scored[#scored + 1] = element
  if flag == '1' then
    gone_archive[#gone_archive + 1] = element
  else
    gone_ids[#gone_ids + 1] = id_of(element)
  end
  local field = call_of(element)
  if field then
    gone_calls[field] = gone_calls[field] or {}
    table.insert(gone_calls[field], seq)
  end
end
-- a few elements leave the window by LREM (a scan in the server, no copy); many, by one rewrite
if #gone_ids > 0 and #gone_ids <= 16 then
  for _, seq in ipairs(seqs) do
    if chosen[seq][2] == '0' then
      redis.call('LREM', active, 1, chosen[seq][1])
    end
  end
elseif #gone_ids > 0 then
  local kept = {}
  for _, element in ipairs(all_active()) do
    local entry = chosen[seq_of(element)]
    if not entry or entry[2] ~= '0' then
      kept[#kept + 1] = element
    end
  end
  redis.call('DEL', active)
  chunked('RPUSH', active, kept)
end
chunked('ZREM', archive, gone_archive)
chunked('ZADD', retracted, scored)
chunked('HDEL', texts, seqs)
-- an ids entry is dropped only while it still points at the element retracted
local pointed = #gone_ids > 0 and chunked('HMGET', ids, gone_ids) or {}
local unindexed = {}
for k, id in ipairs(gone_ids) do
  if pointed[k] and chosen[tonumber(pointed[k])] then
    unindexed[#unindexed + 1] = id
  end
end
chunked('HDEL', ids, unindexed)
calls_update(gone_calls, true)
redis.call('HINCRBY', meta, 'version', 1)
redis.call('RPUSH', timeline, string.format('{"kind":"retraction","head":%d,"seqs":[%s]}', last, table.concat(seqs, ',')))
refresh_ttl(ttl)
return {1, elements, flags}
