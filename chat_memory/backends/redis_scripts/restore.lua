-- Store a whole conversation at once (a restored dump, or a fork's rebuilt state), unless it
-- is stored already: the write half of Dumps.restore and of a fork
-- (chat_memory.backends.redis_transfer). Elements are "<seq>:<envelope>", as append writes them.
-- ARGV: ttl, then sections, each its item count followed by its items: meta field/value pairs
-- (cid, epoch, version, last_seq, summary, error, failures, timeline_from, ...), pinned
-- elements, active elements, archived (seq, element) pairs, retracted (seq, element) pairs,
-- texts (seq, folded search text) pairs, compaction records, timeline entries.
-- Reply: 1 when written, 0 when the conversation is stored already, -2 while an erasure of it
-- (or of its scope) is under way (nothing written either way).
local ttl = tonumber(ARGV[1])
local sections, at = {}, 2
for s = 1, 8 do
  local count = tonumber(ARGV[at])
  if not count or at + count > #ARGV then
    return redis.error_reply(string.format('chat-memory: malformed restore arguments (section %d)', s))
  end
  local items = {}
  for i = 1, count do
    items[i] = ARGV[at + i]
  end
  sections[s] = items
  at = at + count + 1
end
if at ~= #ARGV + 1 or not ttl then
  return redis.error_reply('chat-memory: malformed restore arguments')
end
if redis.call('EXISTS', meta) == 1 then
  return 0
end
-- an erasure under way refuses what would create the conversation again
if guarded() then
  return -2
end
-- keys left without their meta (nothing of ours leaves them; another writer's debris) go
for i = 2, CONVERSATION_KEYS do
  redis.call('DEL', KEYS[i])
end
local meta_pairs, new_pinned, new_active, archived, taken, new_texts, records, entries = unpack(sections)
chunked('HSET', meta, meta_pairs)
chunked('RPUSH', pinned, new_pinned)
chunked('RPUSH', active, new_active)
chunked('ZADD', archive, archived)
chunked('ZADD', retracted, taken)
chunked('HSET', texts, new_texts)
chunked('RPUSH', compactions, records)
chunked('RPUSH', timeline, entries)
-- the indexes: ids over the window's events, calls over the window and the archive
local new_ids = {}
for _, list in ipairs({new_pinned, new_active}) do
  for _, element in ipairs(list) do
    new_ids[#new_ids + 1] = id_of(element)
    new_ids[#new_ids + 1] = seq_of(element)
  end
end
chunked('HSET', ids, new_ids)
local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
redis.call('HSET', meta, 'indexed', last)
rebuild_calls(last)
if registry then
  redis.call('SADD', registry, redis.call('HGET', meta, 'cid'))
end
-- the dump's last activity (when it has one) stamps the conversation and orders the scope's
-- index, its tags join the tag sets
refresh_ttl(ttl, redis.call('HGET', meta, 'active'))
return 1
