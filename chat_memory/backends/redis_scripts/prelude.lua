-- Shared head of every per-conversation script (the Python side prepends it).
-- KEYS: meta, pinned, active, archive, texts, recent, compactions, ids [, registry]; all but the registry
-- share one hash slot. Elements of pinned/active/archive and meta.summary are "<seq>:<envelope>".
-- ids maps the id prefix ('{"id":"…"') of each pinned and active event to its seq: derived data,
-- checked against meta.indexed (the last_seq it covers) and rebuilt when behind.
local meta, pinned, active, archive, texts, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local compactions, ids = KEYS[7], KEYS[8]
local CONVERSATION_KEYS = 8
local KEY_TYPES = {'hash', 'list', 'list', 'zset', 'hash', 'zset', 'list', 'hash'}
-- Arguments per command: Lua's unpack fails past about 8,000 values, so no command gets an
-- unbounded list (a 100,000-event append is 100 RPUSH of 1,000, not one).
local CHUNK = 1000

local function seq_of(element)
  return tonumber(string.match(element, '^(%d+):'))
end

-- The window and bookkeeping, read without touching the archive beyond its size.
local function window()
  local m = redis.call('HMGET', meta, 'version', 'last_seq', 'error', 'summary')
  return {
    m[1] or '0',
    m[2] or '0',
    m[3] and ('!' .. m[3]) or '',
    m[4] or '',
    redis.call('LRANGE', pinned, 0, -1),
    redis.call('LRANGE', active, 0, -1),
    redis.call('ZCARD', archive),
  }
end

-- Every write keeps the whole conversation alive for another ttl seconds (0: no expiry).
local function refresh_ttl(ttl)
  if ttl > 0 then
    for i = 1, CONVERSATION_KEYS do
      redis.call('EXPIRE', KEYS[i], ttl)
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

-- The id prefix ('{"id":"…"') of a stored element, or nil.
local function id_of(element)
  local colon = string.find(element, ':', 1, true)
  local stop = colon and string.find(element, ',"type":', colon, true)
  return stop and string.sub(element, colon + 1, stop - 1) or nil
end
