-- Shared head of every per-conversation script (the Python side prepends it).
-- KEYS: meta, pinned, active, archive, texts, recent, compactions [, registry]; all but the registry share
-- one hash slot. Elements of pinned/active/archive and meta.summary are "<seq>:<envelope>".
local meta, pinned, active, archive, texts, recent = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local compactions = KEYS[7]
local CONVERSATION_KEYS = 7

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
