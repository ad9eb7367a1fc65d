-- Everything stored of one conversation, read in one script (one consistent state): the
-- Dumps ability and the read half of a fork (chat_memory.backends.redis_transfer).
-- Reply: {0} when the conversation is not stored; else {1, meta (HGETALL, field/value pairs),
-- pinned elements, active elements, archived elements, retracted elements (each in seq
-- order), compaction records, timeline entries (with those a conversation stored before
-- timelines lacks: see timeline_start), the last seq the timeline is complete from}.
if redis.call('HEXISTS', meta, 'cid') == 0 then
  return {0}
end
local entries = redis.call('LRANGE', timeline, 0, -1)
local from, lacking = timeline_from()
for _, entry in ipairs(lacking) do
  entries[#entries + 1] = entry
end
return {
  1,
  redis.call('HGETALL', meta),
  redis.call('LRANGE', pinned, 0, -1),
  redis.call('LRANGE', active, 0, -1),
  redis.call('ZRANGE', archive, 0, -1),
  redis.call('ZRANGE', retracted, 0, -1),
  redis.call('LRANGE', compactions, 0, -1),
  entries,
  from,
}
