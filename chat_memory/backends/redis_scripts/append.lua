-- Append a batch, whole or not at all, at any size.
-- ARGV: conversation id, ttl, request token, reply ('w': the window after the append; 'b': only
-- the batch's seqs; either may be followed by ':<epoch>:<version>' of the window the caller
-- holds, and the letter by a condition: '!' append only if the conversation is still at that
-- epoch and version (the caller checked the batch's tool pairs on that window), '=' the same
-- for a state the caller looked up but holds no window of, '0' append only if no stored event
-- has the id of one of the batch's or the tool_call_id of one of its tool events: the caller
-- checked the batch on finding none), then the batch in one argument: per event, its kind
-- ('p' pinned or 'a' active), '<byte length>:' and its envelope, '<byte length>:' and its folded
-- text (one argument, not four per event: a client encodes each argument on its own). The id
-- prefix of an event is how its envelope starts ('{"id":"…"'). Optionally, last, a compaction
-- plan to apply in the same script ('<version>:<last seq>:<through seq>:<cap or empty>:<records
-- kept>', applied only when the caller's window was current and the append left the
-- conversation at that version and last seq: the plan was made on that window plus the batch)
-- and its record JSON ('' for none).
-- Reply: {-1} when a condition failed (nothing written); else {created, the window as
-- window_unless gives it, but 'tail' in place of 'same' and the batch's seqs in place of the
-- active elements} for 'w' (with a plan, then: 1 or 0 whether it was applied, the archive's
-- size after it); {created, version, last seq, the batch's seqs, the elements of those stored
-- before, 'tail' or 'full', epoch} for 'b'.
-- Everything that can fail is checked before the first write (Redis keeps the writes a script
-- made before a failing command), and every command takes at most CHUNK arguments.
local HEADER = 5
if #ARGV ~= HEADER and #ARGV ~= HEADER + 2 then
  return redis.error_reply('chat-memory: malformed append arguments')
end
local cid, ttl, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local reply, condition = string.match(ARGV[4], '^([wb])([!=0]?)$')
local known_epoch, known_version = '', ''
if not reply then
  reply, condition, known_epoch, known_version = string.match(ARGV[4], '^([wb])([!=0]?):(%x*):(%d+)$')
end
local plan = nil
if #ARGV > HEADER then
  local version, last_seq, through, cap, kept = string.match(ARGV[HEADER + 1], '^(%d+):(%d+):(%d+):(%d*):(%d+)$')
  plan = version and {version = version, last_seq = last_seq, through = tonumber(through), cap = cap, kept = tonumber(kept)}
  if not plan then
    return redis.error_reply('chat-memory: malformed append arguments (plan)')
  end
end
if not ttl or not reply then
  return redis.error_reply('chat-memory: malformed append arguments')
end
-- the batch, unpacked: kinds[k], envelopes[k], search texts[k] and batch_ids[k] (the id prefix)
local kinds, envelopes, search_texts, batch_ids = {}, {}, {}, {}
do
  local packed, at = ARGV[HEADER], 1
  while at <= #packed do
    local k = #kinds + 1
    local kind, size, start = string.match(packed, '^([pa])(%d+):()', at)
    local envelope = kind and string.sub(packed, start, start + size - 1)
    local text_size, text_start
    if envelope and #envelope == tonumber(size) then
      text_size, text_start = string.match(packed, '^(%d+):()', start + size)
    end
    local text = text_size and string.sub(packed, text_start, text_start + text_size - 1)
    local stop = text and #text == tonumber(text_size) and string.find(envelope, ',"type":', 1, true)
    if not stop or string.sub(envelope, 1, 7) ~= '{"id":"' then
      return redis.error_reply(string.format('chat-memory: malformed append arguments at event %d', k - 1))
    end
    kinds[k], envelopes[k], search_texts[k], batch_ids[k] = kind, envelope, text, string.sub(envelope, 1, stop - 1)
    at = text_start + text_size
  end
end
-- a wrong key type, a digest collision, or an erasure under way refuses the write ({-2})
local refused, owner = refused_write(cid)
if refused then
  return refused
end

local state = redis.call('HMGET', meta, 'last_seq', 'indexed', 'version', 'calls_indexed', 'epoch')
local last = tonumber(state[1] or '0')
local epoch = state[5]
-- the caller's copy of the window (or the state it looked up) is the one before this append
local basis_current = (epoch or '') == known_epoch and (state[3] or '0') == known_version
if (condition == '!' or condition == '=') and not basis_current then
  return {-1}
end
local copy_current = condition ~= '=' and known_epoch ~= '' and basis_current
-- The id index covers what was appended through meta.indexed. Behind (data written before the
-- index existed, or by an older chat-memory), it is rebuilt from the window once: derived data,
-- so building it first leaves nothing half-done if this append is refused below.
if not owner then
  redis.call('DEL', ids)
elseif tonumber(state[2] or '-1') ~= last then
  redis.call('DEL', ids)
  local pairs_ = {}
  for _, list in ipairs({pinned, active}) do
    for _, element in ipairs(redis.call('LRANGE', list, 0, -1)) do
      local id = id_of(element)
      if id then
        pairs_[#pairs_ + 1] = id
        pairs_[#pairs_ + 1] = seq_of(element)
      end
    end
  end
  chunked('HSET', ids, pairs_)
  redis.call('HSET', meta, 'indexed', last)
end
-- The same for the tool_call_id index (window and archive).
if not owner then
  redis.call('DEL', calls)
elseif tonumber(state[4] or '-1') ~= last then
  rebuild_calls(last)
end

local indexed = #batch_ids > 0 and chunked('HMGET', ids, batch_ids) or {}

-- The stored elements the index points at (a retry's path, never a plain turn's): by binary
-- search in the seq-ordered active list for a few, by one read of the window for many. An
-- entry counts only when the element there is the event of that id.
local found = {}
local wanted = {}
for k = 1, #batch_ids do
  if indexed[k] then
    wanted[#wanted + 1] = k
  end
end
if #wanted > 0 then
  local by_seq = {}
  for _, element in ipairs(redis.call('LRANGE', pinned, 0, -1)) do
    by_seq[seq_of(element)] = element
  end
  if #wanted > 32 then
    for _, element in ipairs(redis.call('LRANGE', active, 0, -1)) do
      by_seq[seq_of(element)] = element
    end
  end
  for _, k in ipairs(wanted) do
    local seq = tonumber(indexed[k])
    local element = by_seq[seq]
    if not element and #wanted <= 32 then
      element = active_at(seq)
    end
    if element and id_of(element) == batch_ids[k] then
      found[k] = element
    end
  end
end

-- '0': the batch was checked on finding no stored event of its ids and call ids (the indexes
-- are current here: rebuilt above when behind). Any entry at all refuses it: the caller then
-- looks the events up and checks again.
if condition == '0' then
  if next(found) then
    return {-1}
  end
  local fields = {}
  for k = 1, #envelopes do
    fields[#fields + 1] = call_of(envelopes[k])
  end
  if #fields > 0 then
    for _, entry in ipairs(chunked('HMGET', calls, fields)) do
      if entry then
        return {-1}
      end
    end
  end
end

-- Idempotent per event id: an event whose id is already in the window is not stored again.
-- seqs[k]: the seq the k-th event of the batch gets, or 0 when it is stored already (its
-- element is then in existing[k]).
local seqs, existing, seen = {}, {}, {}
local first = last
local new_pinned, new_active, new_texts, new_ids, new_calls = {}, {}, {}, {}, {}
local retried = redis.call('ZSCORE', recent, token)
for k = 1, #batch_ids do
  local id = batch_ids[k]
  local stored = seen[id] or found[k]
  if stored or retried then
    seqs[k] = 0
    existing[k] = stored or ''
  else
    last = last + 1
    seqs[k] = last
    local element = string.format('%d:%s', last, envelopes[k])
    seen[id] = element
    new_ids[#new_ids + 1] = id
    new_ids[#new_ids + 1] = last
    if kinds[k] == 'p' then
      new_pinned[#new_pinned + 1] = element
    else
      new_active[#new_active + 1] = element
      new_texts[#new_texts + 1] = last
      new_texts[#new_texts + 1] = search_texts[k]
      local field = call_of(envelopes[k])
      if field then
        new_calls[field] = new_calls[field] or {}
        table.insert(new_calls[field], last)
      end
    end
  end
end

-- With the caller's copy current and no pinned event added (a pin may supersede another), the
-- window after the append is that copy plus the batch's new active events: the reply then
-- says 'tail' and carries the batch's seqs in place of the active elements (the caller has
-- the envelopes), so an append sends back its batch, not the window.
local function answer(created)
  local tail = copy_current and #new_pinned == 0
  if reply == 'w' then
    if tail then
      local m = redis.call('HMGET', meta, 'version', 'last_seq', 'error', 'failures')
      return {created, {m[1] or '0', m[2] or '0', m[3] and ('!' .. m[3]) or '', '', {}, seqs,
        redis.call('ZCARD', archive), m[4] or '0', 'tail', epoch or ''}}
    end
    local result = window()
    result[9] = 'full'
    result[10] = epoch or ''
    return {created, result}
  end
  local counters = redis.call('HMGET', meta, 'version', 'last_seq')
  local flat = {}
  for k = 1, #batch_ids do
    flat[#flat + 1] = existing[k] or ''
  end
  return {created, counters[1] or '0', counters[2] or '0', seqs, flat, tail and 'tail' or 'full', epoch or ''}
end

-- The plan, if any, applied after the append in the same script when it was made on what is
-- stored now: the caller's window was current, no pinned event was added (a pin may supersede
-- another) and the version and last seq are the ones the plan expects. Returns the answer
-- with the two items a plan adds.
local function compacted(result)
  if not plan then
    return result
  end
  local applied = 0
  if copy_current and not retried and #new_pinned == 0 then
    local m = redis.call('HMGET', meta, 'version', 'last_seq')
    if m[1] == plan.version and m[2] == plan.last_seq then
      apply_plan(plan.through, '', plan.cap, ARGV[HEADER + 2], plan.kept)
      refresh_ttl(ttl)
      applied = 1
    end
  end
  result[#result + 1] = applied
  result[#result + 1] = redis.call('ZCARD', archive)
  return result
end

-- A 'tail' answer to 'w' (every plain turn's) as one bulk string, since a client parses each
-- element of a nested reply on its own: 'tail|<created>|<version>|<last seq>|<archive size>|
-- <failures>|<epoch>|<the batch's seqs, comma-separated>|<plan applied: 1, 0 or empty>|<archive
-- size after it, or empty>|<error>' (the error, '' or '!' and the message, last: it may hold
-- '|'). Any other answer is left as it is.
local function flat(result)
  local w = result[2]
  if reply ~= 'w' or type(w) ~= 'table' or w[9] ~= 'tail' then
    return result
  end
  return table.concat({'tail', result[1], w[1], w[2], w[7], w[8], w[10], table.concat(w[6], ','),
    result[3] or '', result[4] or '', w[3]}, '|')
end

-- A request retried after a lost reply (the first attempt went through) must not append twice.
-- It reports "created" again: on a cluster the first attempt's registration may be missing.
if retried then
  return flat(compacted(answer(1)))
end
if last == first then
  return flat(compacted(answer(owner and 0 or 1)))
end

-- The writes: nothing below can fail on data checked above.
chunked('RPUSH', pinned, new_pinned)
chunked('RPUSH', active, new_active)
chunked('HSET', texts, new_texts)
chunked('HSET', ids, new_ids)
calls_update(new_calls, false)
if #new_pinned > 0 then
  -- a newer pinned event with the same pin key supersedes an older one: archive the older
  -- (the rule of chat_memory.pins.pin_key: metadata.key when a non-empty string, else 'system')
  local elements = redis.call('LRANGE', pinned, 0, -1)
  local newest = {}
  local keys = {}
  for index, element in ipairs(elements) do
    local ok, event = pcall(cjson.decode, string.sub(element, #tostring(seq_of(element)) + 2))
    local key = ok and type(event) == 'table' and type(event.metadata) == 'table' and event.metadata.key
    if type(key) ~= 'string' or key == '' then
      key = 'system'
    end
    keys[index] = key
    newest[key] = index
  end
  for index, element in ipairs(elements) do
    if newest[keys[index]] ~= index then
      redis.call('LREM', pinned, 1, element)
      redis.call('ZADD', archive, seq_of(element), element)
      local id = id_of(element)
      if id then
        redis.call('HDEL', ids, id)
      end
    end
  end
end
redis.call('HSET', meta, 'cid', cid, 'last_seq', last, 'indexed', last, 'calls_indexed', last)
if not epoch then
  epoch = token
  redis.call('HSET', meta, 'epoch', epoch)
end
redis.call('HINCRBY', meta, 'version', 1)
redis.call('ZADD', recent, last, token)
redis.call('ZREMRANGEBYRANK', recent, 0, -17)
if registry then
  redis.call('SADD', registry, cid)
end
refresh_ttl(ttl)
return flat(compacted(answer(owner and 0 or 1)))
