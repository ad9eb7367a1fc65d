-- Lifecycle reads and writes in one hash slot other than a conversation's own
-- (chat_memory.backends.redis_lifecycle): KEYS[1] names the slot (a scope index, a tag set, a
-- conversation's key base, the registry); keys derived from it share its slot. ARGV[1] is the
-- operation:
-- 'page', offset, limit, exact: the index's members newest first, dropping those whose
--   conversation is gone (cleared, expired); records of the page when exact ('1': the records
--   share the slot), else their {base, score} pairs.
-- 'tagged', exact: the tag set's records (members gone dropped) or, not exact, its members.
-- 'idle', cutoff, limit, exact: up to limit {base, cid, score} of members scored before the cutoff,
--   oldest first (exact: those gone dropped), else {base, score} pairs.
-- 'record': record_of(KEYS[1]) or 0.
-- 'register', cid, base, unscoped index ('' none), scope index ('' none), set of scope
--   indexes: a cluster's
--   registration of a new conversation in the registry's slot (registry, unscoped index with
--   the server's time, set of scope indexes).
-- 'unregister', cid, base, unscoped index ('' none), tag set keys...: its undoing.
-- 'drop', base, score: remove the index entry if its score is still that (a conversation
--   written again since keeps it).
-- 'retag', base, then '+' or '-' and a tag set per change: add the base to or take it from
--   each (a cluster's unscoped conversation: its tag sets share the registry's slot).
-- 'touch', base, score: the index entry's score raised to that, if present.
-- 'hgetall' / 'hdel', field: the hash KEYS[1] (long-term retentions).
-- 'namespace': delete a long-term namespace's keys (KEYS), {files, versions} counted first.
local op = ARGV[1]
local key = KEYS[1]

if op == 'page' then
  local offset, limit, exact = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
  while true do
    local members = redis.call('ZREVRANGE', key, 0, offset + limit - 1, 'WITHSCORES')
    local gone, out = {}, {}
    for i = 1, #members, 2 do
      local base = members[i]
      if exact then
        if redis.call('EXISTS', base .. ':meta') == 0 then
          gone[#gone + 1] = base
        elseif (i + 1) / 2 > offset then
          out[#out + 1] = record_of(base)
        end
      elseif (i + 1) / 2 > offset then
        out[#out + 1] = {base, members[i + 1]}
      end
    end
    if #gone == 0 then
      return out
    end
    redis.call('ZREM', key, unpack(gone))
  end
end

if op == 'tagged' then
  local out, gone = {}, {}
  for _, base in ipairs(redis.call('SMEMBERS', key)) do
    if ARGV[2] ~= '1' then
      out[#out + 1] = base
    else
      local record = record_of(base)
      if record then
        out[#out + 1] = record
      else
        gone[#gone + 1] = base
      end
    end
  end
  if #gone > 0 then
    redis.call('SREM', key, unpack(gone))
  end
  return out
end

if op == 'idle' then
  local members = redis.call('ZRANGEBYSCORE', key, '-inf', '(' .. ARGV[2], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  local out = {}
  for i = 1, #members, 2 do
    local base = members[i]
    if ARGV[4] == '1' then
      local cid = redis.call('HGET', base .. ':meta', 'cid')
      if cid then
        out[#out + 1] = {base, cid, members[i + 1]}
      else
        redis.call('ZREM', key, base)
      end
    else
      out[#out + 1] = {base, members[i + 1]}
    end
  end
  return out
end

if op == 'record' then
  return record_of(key) or 0
end

if op == 'register' then
  redis.call('SADD', key, ARGV[2])
  if ARGV[4] ~= '' then
    local clock = redis.call('TIME')
    redis.call('ZADD', ARGV[4], 'GT', tonumber(clock[1]) * 1000000 + tonumber(clock[2]), ARGV[3])
  end
  if ARGV[5] ~= '' then
    redis.call('SADD', ARGV[6], ARGV[5])
  end
  return 1
end

if op == 'unregister' then
  redis.call('SREM', key, ARGV[2])
  if ARGV[4] ~= '' then
    redis.call('ZREM', ARGV[4], ARGV[3])
  end
  for i = 5, #ARGV do
    redis.call('SREM', ARGV[i], ARGV[3])
  end
  return 1
end

if op == 'drop' then
  if tonumber(redis.call('ZSCORE', key, ARGV[2]) or '-1') == tonumber(ARGV[3]) then
    redis.call('ZREM', key, ARGV[2])
    return 1
  end
  return 0
end

if op == 'retag' then
  for i = 3, #ARGV, 2 do
    redis.call(ARGV[i] == '+' and 'SADD' or 'SREM', ARGV[i + 1], ARGV[2])
  end
  return 1
end

if op == 'touch' then
  return redis.call('ZADD', key, 'XX', 'GT', ARGV[3], ARGV[2])
end

if op == 'hgetall' then
  return redis.call('HGETALL', key)
end

if op == 'hdel' then
  return redis.call('HDEL', key, ARGV[2])
end

if op == 'namespace' then
  local counts = {redis.call('HLEN', KEYS[1]), redis.call('LLEN', KEYS[3])}
  redis.call('DEL', unpack(KEYS))
  return counts
end

return redis.error_reply('chat-memory: unknown scope operation ' .. tostring(op))
