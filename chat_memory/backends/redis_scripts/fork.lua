-- A fork at the source's last seq where the new conversation's keys share the source's hash
-- slot (a scoped conversation forked within its scope, or any fork on a single server): every
-- key COPYed by the server, nothing through the client, in one atomic step.
-- KEYS: the new conversation's keys, as every script gets them, then the source's conversation
-- keys (CONVERSATION_KEYS of them, last).
-- ARGV: the new conversation id, ttl (ms), its epoch, the seq to fork at ('': the last).
-- Reply: {1, tags JSON} when forked; {0} when the source is not stored; {-1} when the new id is
-- stored already; {-2} while an erasure of it (or of its scope) is under way; {-3} when the seq
-- is not the source's last, or the server has no COPY (the caller forks through dump and
-- restore). Only {1} writes.
local first = #KEYS - CONVERSATION_KEYS
local ttl = tonumber(ARGV[2])
if first < CONVERSATION_KEYS or not ttl then
  return redis.error_reply('chat-memory: malformed fork arguments')
end
local m = redis.call('HMGET', KEYS[first + 1], 'cid', 'last_seq')
if not m[1] then
  return {0}
end
if ARGV[4] ~= '' and ARGV[4] ~= (m[2] or '0') then
  return {-3}
end
if redis.call('EXISTS', meta) == 1 then
  return {-1}
end
if guarded() then
  return {-2}
end
-- the first write: a server without COPY (before Redis 6.2) refuses it, nothing is written,
-- and the caller forks through dump and restore
local copied = redis.pcall('COPY', KEYS[first + 1], meta)
if type(copied) == 'table' and copied.err then
  return {-3}
end
for i = 2, CONVERSATION_KEYS do
  redis.call('DEL', KEYS[i])
  -- recent holds the request tokens of the source's appends: not the fork's
  if i ~= 6 then
    redis.call('COPY', KEYS[first + i], KEYS[i])
  end
end
-- COPY keeps the source's expiry; the fork's is set below, or none
for i = 1, CONVERSATION_KEYS do
  redis.call('PERSIST', KEYS[i])
end
redis.call('HSET', meta, 'cid', ARGV[1], 'epoch', ARGV[3])
if registry then
  redis.call('SADD', registry, ARGV[1])
end
-- a new conversation: its clock starts now; it joins its scope's index and tag sets
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
redis.call('HSET', meta, 'active', now)
redis.call('HDEL', meta, 'created')
refresh_ttl(ttl, now)
return {1, redis.call('HGET', meta, 'tags') or '[]'}
