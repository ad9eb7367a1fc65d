-- A conversation's lifecycle (chat_memory.backends.redis_lifecycle), on its keys and the
-- lifecycle keys the prelude finds (the guards and the scope index share its hash slot when
-- it is scoped). ARGV[1] is the operation:
-- 'record': its record_of, or 0 when not stored.
-- 'meta', cid, ttl ms, '1'|'0' whether a title follows, title, tags JSON ('' unchanged),
--   the values JSON read before ('{}' none), the new values JSON ('' unchanged): {-2} under an
--   erasure guard when it would create the conversation, {-1} when the values changed since
--   they were read (nothing written), else {created, record, the tags JSON before}.
-- 'delete', cutoff microseconds ('' none), guard ms ('' none): the guard set first; then {0}
--   when not stored (its index entry dropped), {2, last active} when active at or after the
--   cutoff (kept), else {1, cid, tags JSON, events, archived events, summaries, compaction
--   records, retracted events} counted before every key of it is deleted.
local op = ARGV[1]
local base = string.sub(meta, 1, -6)

if op == 'record' then
  return record_of(base) or 0
end

if op == 'meta' then
  local cid, ttl = ARGV[2], tonumber(ARGV[3])
  local refused, owner = refused_write(cid)
  if refused then
    return refused
  end
  if ARGV[8] ~= '' and (redis.call('HGET', meta, 'values') or '{}') ~= ARGV[7] then
    return {-1}
  end
  local before = redis.call('HGET', meta, 'tags') or '[]'
  redis.call('HSET', meta, 'cid', cid)
  if ARGV[4] == '1' then
    redis.call('HSET', meta, 'title', ARGV[5])
  end
  if ARGV[6] ~= '' then
    redis.call('HSET', meta, 'tags', ARGV[6])
    if scope_index then
      for _, tag in ipairs(cjson.decode(before)) do
        redis.call('SREM', tag_key(scope_index, tag), base)
      end
      for _, tag in ipairs(cjson.decode(ARGV[6])) do
        redis.call('SADD', tag_key(scope_index, tag), base)
      end
    end
  end
  if ARGV[8] ~= '' then
    redis.call('HSET', meta, 'values', ARGV[8])
  end
  if registry then
    redis.call('SADD', registry, cid)
  end
  refresh_ttl(ttl)
  return {owner and 0 or 1, record_of(base), before}
end

if op == 'delete' then
  if ARGV[3] ~= '' and guard then
    redis.call('SET', guard, '1', 'PX', ARGV[3])
  end
  local m = redis.call('HMGET', meta, 'cid', 'active', 'tags')
  if not m[1] then
    if scope_index then
      redis.call('ZREM', scope_index, base)
    end
    return {0}
  end
  if ARGV[2] ~= '' and tonumber(m[2] or '0') >= tonumber(ARGV[2]) then
    return {2, m[2]}
  end
  local archived, summaries = 0, redis.call('HEXISTS', meta, 'summary')
  for _, element in ipairs(redis.call('ZRANGE', archive, 0, -1)) do
    local at = string.find(element, ',"type":"', 1, true)
    if at and string.sub(element, at + 9, at + 16) == 'summary"' then
      summaries = summaries + 1
    else
      archived = archived + 1
    end
  end
  local counts = {1, m[1], m[3] or '[]', redis.call('LLEN', pinned) + redis.call('LLEN', active),
    archived, summaries, redis.call('LLEN', compactions), redis.call('ZCARD', retracted)}
  redis.call('DEL', unpack(KEYS, 1, CONVERSATION_KEYS))
  if scope_index then
    redis.call('ZREM', scope_index, base)
    for _, tag in ipairs(cjson.decode(m[3] or '[]')) do
      redis.call('SREM', tag_key(scope_index, tag), base)
    end
  end
  if registry then
    redis.call('SREM', registry, m[1])
  end
  return counts
end

return redis.error_reply('chat-memory: unknown lifecycle operation ' .. tostring(op))
