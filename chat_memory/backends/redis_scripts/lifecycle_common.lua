-- Shared head of lifecycle.lua and scope.lua (chat_memory.backends.redis_lifecycle): a
-- conversation's record read from the keys under its key base (what every key of the
-- conversation starts with), or false when it is not stored.
local function record_of(base)
  local m = redis.call('HMGET', base .. ':meta', 'cid', 'created', 'active', 'title', 'tags', 'values')
  if not m[1] then
    return false
  end
  local events = redis.call('LLEN', base .. ':pinned') + redis.call('LLEN', base .. ':active')
    + redis.call('ZCARD', base .. ':archive') + redis.call('HEXISTS', base .. ':meta', 'summary')
  return {base, m[1], m[2] or '0', m[3] or '0', events, m[4] and 1 or 0, m[4] or '', m[5] or '[]', m[6] or '{}'}
end

-- The tag set of ``tag`` beside a scope index ('<base>:index' -> '<base>:tag:<sha1>').
local function tag_key(index, tag)
  return string.sub(index, 1, -6) .. 'tag:' .. redis.sha1hex(tag)
end
