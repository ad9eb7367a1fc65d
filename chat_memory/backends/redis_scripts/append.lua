-- ARGV: conversation id, ttl, request token, then (kind "p"|"a", envelope, folded text,
-- id prefix) per event; the id prefix is how the envelope starts ('{"id":"…"').
local cid, ttl, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local owner = redis.call('HGET', meta, 'cid')
if owner and owner ~= cid then
  return redis.error_reply('chat-memory: two conversation ids share one key digest')
end
-- A request retried after a lost reply (the first attempt went through) must not append twice.
-- It reports "created" again: on a cluster the first attempt's registration may be missing.
if redis.call('ZSCORE', recent, token) then
  return {1, window()}
end
-- Idempotent per event id: an event whose id is already in the window is not stored again
-- (checked here, in the same atomic step as the append, so concurrent retries store it once).
local stored = {}
for _, list in ipairs({pinned, active}) do
  for _, element in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local colon = string.find(element, ':', 1, true)
    local stop = string.find(element, ',"type":', colon, true)
    if stop then
      stored[string.sub(element, colon + 1, stop - 1)] = true
    end
  end
end
local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
local first = last
local searchable = {}
local pins = false
for i = 4, #ARGV, 4 do
  if not stored[ARGV[i + 3]] then
    stored[ARGV[i + 3]] = true
    last = last + 1
    local element = string.format('%d:%s', last, ARGV[i + 1])
    if ARGV[i] == 'p' then
      redis.call('RPUSH', pinned, element)
      pins = true
    else
      redis.call('RPUSH', active, element)
      searchable[#searchable + 1] = last
      searchable[#searchable + 1] = ARGV[i + 2]
    end
  end
end
if last == first and #ARGV >= 4 then
  return {owner and 0 or 1, window()}
end
if #searchable > 0 then
  redis.call('HSET', texts, unpack(searchable))
end
if pins then
  -- a newer pinned event with the same pin key supersedes an older one: archive the older
  -- (the rule of chat_memory.pins.pin_key: metadata.key when a non-empty string, else 'system')
  local elements = redis.call('LRANGE', pinned, 0, -1)
  local newest = {}
  local keys = {}
  for index, element in ipairs(elements) do
    local ok, event = pcall(cjson.decode, string.sub(element, #tostring(seq_of(element)) + 2))
    local key = ok and type(event.metadata) == 'table' and event.metadata.key
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
    end
  end
end
redis.call('HSET', meta, 'cid', cid, 'last_seq', last)
redis.call('HINCRBY', meta, 'version', 1)
redis.call('ZADD', recent, last, token)
redis.call('ZREMRANGEBYRANK', recent, 0, -17)
if KEYS[8] then
  redis.call('SADD', KEYS[8], cid)
end
refresh_ttl(ttl)
return {owner and 0 or 1, window()}
