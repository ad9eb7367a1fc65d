-- Shared head of every per-conversation script (the Python side prepends it).
-- KEYS: meta, pinned, active, archive, texts, recent, compactions, ids, calls, retracted,
-- timeline [, registry]; all but
-- the registry share one hash slot. Elements of pinned/active/archive and meta.summary are
-- "<seq>:<envelope>".
-- ids maps the id prefix ('{"id":"…"') of each pinned and active event to its seq: derived data,
-- checked against meta.indexed (the last_seq it covers) and rebuilt when behind.
-- calls maps the JSON spelling of each tool_call_id ('"c1"') to the seqs ("12,13") of the tool
-- calls and results with it, active and archived: derived data too, checked against
-- meta.calls_indexed. Entries are checked against the element they point at, so an entry left
-- behind by an older chat-memory (which does not keep the index) is ignored.
local meta, pinned, active, archive, texts, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local compactions, ids, calls, retracted = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
-- timeline: the JSON entries a fork rebuilds a past window from (chat_memory.backends.timeline),
-- RPUSHed by every compaction, retraction and archive-cap deletion of a pin; never trimmed
local timeline = KEYS[11]
local CONVERSATION_KEYS = 11
local KEY_TYPES = {'hash', 'list', 'list', 'zset', 'hash', 'zset', 'list', 'hash', 'hash', 'zset', 'list'}
-- Arguments per command: Lua's unpack fails past about 8,000 values, so no command gets an
-- unbounded list (a 100,000-event append is 100 RPUSH of 1,000, not one).
local CHUNK = 1000

local function seq_of(element)
  return tonumber(string.match(element, '^(%d+):'))
end

-- The window and bookkeeping, read without touching the archive beyond its size. meta.failures
-- (the failed compactions since the last apply) is missing before the first failure and in
-- data an older chat-memory wrote: 0.
local function window()
  local m = redis.call('HMGET', meta, 'version', 'last_seq', 'error', 'summary', 'failures')
  return {
    m[1] or '0',
    m[2] or '0',
    m[3] and ('!' .. m[3]) or '',
    m[4] or '',
    redis.call('LRANGE', pinned, 0, -1),
    redis.call('LRANGE', active, 0, -1),
    redis.call('ZCARD', archive),
    m[5] or '0',
  }
end

-- The window for a caller that holds a copy of it, known by (epoch, version): meta.epoch is set
-- when a conversation is created (a clear or an expiry deletes it, so a conversation re-created
-- at the same version has another) and every write of the pinned events, summary or active
-- events bumps the version. When the copy is current the pinned, summary and active items are
-- left empty; either way two items follow the window's eight: 'same' or 'full', and the epoch.
local function window_unless(epoch, version)
  local m = redis.call('HMGET', meta, 'version', 'epoch')
  if epoch ~= '' and m[2] == epoch and m[1] == version then
    local f = redis.call('HMGET', meta, 'last_seq', 'error', 'failures')
    return {m[1], f[1] or '0', f[2] and ('!' .. f[2]) or '', '', {}, {}, redis.call('ZCARD', archive), f[3] or '0', 'same', m[2]}
  end
  local result = window()
  result[9] = 'full'
  result[10] = m[2] or ''
  return result
end

-- The lifecycle keys a store passes after the conversation's own (chat_memory.backends.
-- redis_lifecycle), found by the role their name ends with, so their number and order may vary:
-- the registry (a single server only), the erasure guards of the conversation and of its scope,
-- the scope's index (sorted set: the conversation's key base -> last active, microseconds) and
-- the set of scope indexes (a single server only). An absent one is another slot's: the
-- Python side does that part.
local registry, guard, scope_guard, scope_index, scopes
for i = CONVERSATION_KEYS + 1, #KEYS do
  local role = string.match(KEYS[i], ':([%a]+)$')
  if role == 'conversations' then registry = KEYS[i]
  elseif role == 'erasing' then guard = KEYS[i]
  elseif role == 'erasingscope' then scope_guard = KEYS[i]
  elseif role == 'index' then scope_index = KEYS[i]
  elseif role == 'scopes' then scopes = KEYS[i]
  end
end

-- Whether an erasure of this conversation or of its scope is under way (a live guard): a write
-- that would create the conversation is then refused.
local function guarded()
  return (guard and redis.call('EXISTS', guard) == 1) or (scope_guard and redis.call('EXISTS', scope_guard) == 1)
end

-- Every write stamps the conversation's last activity (and its creation, once) in
-- microseconds of the server's clock, moves it to the front of its scope's index, and keeps the
-- whole conversation (its index and tag sets with it) alive for another ttl milliseconds (0:
-- no expiry), all in the writing script. ``at`` (a restore: the activity the dump carries, in
-- meta.active already) keeps that time instead of now and indexes the meta's tags too.
local function refresh_ttl(ttl, at)
  local now = tonumber(at or '')
  if not now then
    local clock = redis.call('TIME')
    now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
    redis.call('HSET', meta, 'active', now)
  end
  redis.call('HSETNX', meta, 'created', now)
  if ttl > 0 then
    for i = 1, CONVERSATION_KEYS do
      redis.call('PEXPIRE', KEYS[i], ttl)
    end
  end
  if scope_index then
    local base = string.sub(meta, 1, -6)
    redis.call('ZADD', scope_index, now, base)
    if scopes then
      redis.call('SADD', scopes, scope_index)
    end
    if at then
      for _, tag in ipairs(cjson.decode(redis.call('HGET', meta, 'tags') or '[]')) do
        redis.call('SADD', string.sub(scope_index, 1, -6) .. 'tag:' .. redis.sha1hex(tag), base)
      end
    end
    if ttl > 0 then
      redis.call('PEXPIRE', scope_index, ttl)
      local ok, tags = pcall(cjson.decode, redis.call('HGET', meta, 'tags') or '[]')
      if ok and type(tags) == 'table' then
        for _, tag in ipairs(tags) do
          redis.call('PEXPIRE', string.sub(scope_index, 1, -6) .. 'tag:' .. redis.sha1hex(tag), ttl)
        end
      end
    end
  end
end

-- ``command key values…`` over ``values`` (an even CHUNK keeps field/value pairs together),
-- CHUNK at a time; the replies of the chunks, concatenated.
local function chunked(command, key, values)
  local replies = {}
  for first = 1, #values, CHUNK do
    local reply = redis.call(command, key, unpack(values, first, math.min(first + CHUNK - 1, #values)))
    if type(reply) == 'table' then
      for _, item in ipairs(reply) do
        replies[#replies + 1] = item
      end
    end
  end
  return replies
end

-- An error reply naming the first conversation key that holds another type than ours, or nil.
-- Checked before a script's first write: a command failing midway would leave the earlier
-- writes in place (Redis does not roll a script back).
local function wrong_key_type()
  for i = 1, CONVERSATION_KEYS do
    local found = redis.call('TYPE', KEYS[i])
    found = type(found) == 'table' and found.ok or found
    if found ~= 'none' and found ~= KEY_TYPES[i] then
      return redis.error_reply(string.format('chat-memory: key %s holds a %s, not a %s', KEYS[i], found, KEY_TYPES[i]))
    end
  end
  return nil
end

-- Before a write to conversation `cid`: an error reply when a key holds another type or the
-- meta key belongs to another conversation id (a digest collision), {-2} when the write would
-- create the conversation while an erasure guard is live, else nil; and the id the meta key
-- names (nil: the conversation is new).
local function refused_write(cid)
  local refused = wrong_key_type()
  if refused then
    return refused
  end
  local owner = redis.call('HGET', meta, 'cid')
  if owner and owner ~= cid then
    return redis.error_reply('chat-memory: two conversation ids share one key digest')
  end
  if not owner and guarded() then
    return {-2}
  end
  return nil, owner
end

-- The id prefix ('{"id":"…"') of a stored element, or nil.
local function id_of(element)
  local colon = string.find(element, ':', 1, true)
  local stop = colon and string.find(element, ',"type":', colon, true)
  return stop and string.sub(element, colon + 1, stop - 1) or nil
end

-- The call-id field ('"c1"', the JSON spelling of its tool_call_id) of a tool call's or result's
-- envelope or element, or nil for any other event. The id, type and content before it are JSON
-- strings, in which ',"' cannot occur, so the first ',"type":' and ',"tool_call_id":' are the
-- envelope's own fields (as in chat_memory.backends.bookkeeping.tool_call_fragment).
local function call_of(text)
  local at = string.find(text, ',"type":"tool_', 1, true)
  if not at then
    return nil
  end
  if string.sub(text, at + 14, at + 18) ~= 'call"' and string.sub(text, at + 14, at + 20) ~= 'result"' then
    return nil
  end
  local start = string.find(text, ',"tool_call_id":', at, true)
  local stop = start and string.find(text, ',"tool_name":', start, true)
  local field = stop and string.sub(text, start + 16, stop - 1)
  if not field or field == 'null' then
    return nil
  end
  return field
end

-- The active element with this seq, by binary search in the seq-ordered active list, or nil.
local function active_at(seq)
  local low, high = 0, redis.call('LLEN', active) - 1
  while low <= high do
    local middle = math.floor((low + high) / 2)
    local probe = redis.call('LINDEX', active, middle)
    local at = seq_of(probe)
    if at == seq then
      return probe
    elseif at < seq then
      low = middle + 1
    else
      high = middle - 1
    end
  end
  return nil
end

-- Add (or with remove, take out) seq in the calls entries: updates maps field -> list of seqs.
local function calls_update(updates, remove)
  local fields = {}
  for field in pairs(updates) do
    fields[#fields + 1] = field
  end
  if #fields == 0 then
    return
  end
  local current = chunked('HMGET', calls, fields)
  local set, gone = {}, {}
  for k, field in ipairs(fields) do
    local seqs = {}
    local drop = {}
    if remove then
      for _, seq in ipairs(updates[field]) do
        drop[tostring(seq)] = true
      end
    end
    for seq in string.gmatch(current[k] or '', '%d+') do
      if not drop[seq] then
        seqs[#seqs + 1] = seq
      end
    end
    if not remove then
      for _, seq in ipairs(updates[field]) do
        seqs[#seqs + 1] = tostring(seq)
      end
    end
    if #seqs > 0 then
      set[#set + 1] = field
      set[#set + 1] = table.concat(seqs, ',')
    else
      gone[#gone + 1] = field
    end
  end
  chunked('HSET', calls, set)
  chunked('HDEL', calls, gone)
end

-- Rebuild the calls index from the active list and the archive (data written before it
-- existed, or by an older chat-memory): once, the cost of reading the history.
local function rebuild_calls(last)
  redis.call('DEL', calls)
  local found = {}
  for _, list in ipairs({redis.call('ZRANGE', archive, 0, -1), redis.call('LRANGE', active, 0, -1)}) do
    for _, element in ipairs(list) do
      local field = call_of(element)
      if field then
        found[field] = found[field] or {}
        table.insert(found[field], seq_of(element))
      end
    end
  end
  calls_update(found, false)
  redis.call('HSET', meta, 'calls_indexed', last)
end

-- The type field of an element or envelope ('user', 'system', …): the first ',"type":"' is the
-- envelope's own (the id before it is a JSON string, in which ',"' cannot occur).
local function type_of(element)
  local at = string.find(element, ',"type":"', 1, true)
  return at and string.match(element, '^([^"]*)"', at + 9) or nil
end

-- The pin key of a system event's element (chat_memory.pins.pin_key: metadata.key when a
-- non-empty string, else 'system').
local function pin_key_of(element)
  local ok, event = pcall(cjson.decode, string.sub(element, #tostring(seq_of(element)) + 2))
  local key = ok and type(event) == 'table' and type(event.metadata) == 'table' and event.metadata.key
  if type(key) ~= 'string' or key == '' then
    return 'system'
  end
  return key
end

-- Whether nothing of the conversation was ever compacted, retracted or dropped by the archive
-- cap: no summary, record or retracted event, every event stored still, and only superseded
-- pins in the archive. Such a past needs no timeline entry to be rebuilt.
local function untouched()
  if redis.call('HEXISTS', meta, 'summary') == 1 or redis.call('LLEN', compactions) > 0 then
    return false
  end
  if redis.call('ZCARD', retracted) > 0 then
    return false
  end
  local stored = redis.call('LLEN', pinned) + redis.call('LLEN', active) + redis.call('ZCARD', archive)
  if stored ~= tonumber(redis.call('HGET', meta, 'last_seq') or '0') then
    return false
  end
  for _, element in ipairs(redis.call('ZRANGE', archive, 0, -1)) do
    if type_of(element) ~= 'system' then
      return false
    end
  end
  return true
end

-- Where the timeline starts, and the entries it lacks, for a conversation whose timeline has
-- not begun (meta.timeline_from unset): stored before timelines were kept, or never compacted
-- nor retracted yet. Untouched: 0 and none (its whole past rebuilds from its events). Else its
-- last seq and the entries that make the state then exact (state_at): a compaction archiving
-- every real event before the first active one, with the summary in force, and a retraction
-- of the events retracted so far; an earlier seq cannot be rebuilt (a fork there is refused).
local function timeline_start()
  if untouched() then
    return 0, {}
  end
  local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
  local first_active = redis.call('LINDEX', active, 0)
  local through = first_active and seq_of(first_active) - 1 or last
  local summary = redis.call('HGET', meta, 'summary')
  local entries = {string.format('{"kind":"compaction","head":%d,"through":%d,"summary":%s}', last, through, summary and tostring(seq_of(summary)) or 'null')}
  local seqs = {}
  for _, element in ipairs(redis.call('ZRANGE', retracted, 0, -1)) do
    seqs[#seqs + 1] = seq_of(element)
  end
  if #seqs > 0 then
    entries[2] = string.format('{"kind":"retraction","head":%d,"seqs":[%s]}', last, table.concat(seqs, ','))
  end
  return last, entries
end

-- The last seq the timeline is complete from, and the entries it lacks (see timeline_start).
local function timeline_from()
  local known = redis.call('HGET', meta, 'timeline_from')
  if known then
    return tonumber(known), {}
  end
  return timeline_start()
end

-- Before the first timeline entry of a conversation is written (and before the change it
-- records): fix where its timeline starts, with the entries it lacks.
local function timeline_begins()
  if redis.call('HEXISTS', meta, 'timeline_from') == 0 then
    local from, entries = timeline_start()
    chunked('RPUSH', timeline, entries)
    redis.call('HSET', meta, 'timeline_from', from)
  end
end

-- Apply a compaction plan whose version the caller has checked (apply.lua, or an append that
-- compacts in the same script): active events through seq ``through`` move to the archive, the
-- summary envelope ('' for none) replaces the current one, the archive is trimmed to ``cap``
-- ('' for none), the record JSON ('' for none) joins the newest ``records_kept``; the version
-- is bumped and the recorded error cleared. Returns the new summary's seq, or 0.
local function apply_plan(through, summary, cap, record, records_kept)
  timeline_begins()
  -- archived events leave the id index (it covers the window only), in bounded HDELs
  local gone = {}
  while true do
    local head = redis.call('LINDEX', active, 0)
    if not head or seq_of(head) > through then
      break
    end
    redis.call('LPOP', active)
    redis.call('ZADD', archive, seq_of(head), head)
    gone[#gone + 1] = id_of(head)
  end
  chunked('HDEL', ids, gone)
  local summary_seq = 0
  if summary ~= '' then
    local previous = redis.call('HGET', meta, 'summary')
    if previous then
      redis.call('ZADD', archive, seq_of(previous), previous)
    end
    local seq = redis.call('HINCRBY', meta, 'last_seq', 1)
    summary_seq = seq
    -- a summary is in neither index: an index that was complete stays so
    for _, field in ipairs({'indexed', 'calls_indexed'}) do
      if tonumber(redis.call('HGET', meta, field) or '-1') == seq - 1 then
        redis.call('HSET', meta, field, seq)
      end
    end
    redis.call('HSET', meta, 'summary', string.format('%d:%s', seq, summary))
  end
  if cap ~= '' then
    local excess = redis.call('ZCARD', archive) - tonumber(cap)
    if excess > 0 then
      local dropped = redis.call('ZRANGE', archive, 0, excess - 1)
      local seqs = {}
      local gone_calls = {}
      for i = 1, #dropped do
        seqs[i] = seq_of(dropped[i])
        local field = call_of(dropped[i])
        if field then
          gone_calls[field] = gone_calls[field] or {}
          table.insert(gone_calls[field], seqs[i])
        end
        if type_of(dropped[i]) == 'system' then
          -- a superseded pin deleted: a fork of a window that showed it must be refused
          redis.call('RPUSH', timeline, string.format('{"kind":"dropped_pin","seq":%d,"key":%s}', seqs[i], cjson.encode(pin_key_of(dropped[i]))))
        end
      end
      chunked('HDEL', texts, seqs)
      calls_update(gone_calls, true)
      redis.call('ZREMRANGEBYRANK', archive, 0, excess - 1)
    end
  end
  if record ~= '' then
    redis.call('RPUSH', compactions, record)
    redis.call('LTRIM', compactions, -records_kept, -1)
  end
  redis.call('HINCRBY', meta, 'version', 1)
  redis.call('HDEL', meta, 'error', 'failures')
  local head = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
  redis.call('RPUSH', timeline, string.format('{"kind":"compaction","head":%d,"through":%d,"summary":%s}', head, through, summary_seq ~= 0 and tostring(summary_seq) or 'null'))
  return summary_seq
end
