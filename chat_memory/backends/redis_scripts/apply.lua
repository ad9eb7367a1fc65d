-- Compare-and-swap compaction.
-- ARGV: expected version, archive-through seq, summary envelope ('' for none), archive cap ('' for none), ttl,
-- compaction record JSON ('' for none), how many records to keep.
local expected, through, summary, cap, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local record, records_kept = ARGV[6], tonumber(ARGV[7])
local version = redis.call('HGET', meta, 'version')
if not version or tonumber(version) ~= expected then
  return 0
end
while true do
  local head = redis.call('LINDEX', active, 0)
  if not head or seq_of(head) > through then
    break
  end
  redis.call('LPOP', active)
  redis.call('ZADD', archive, seq_of(head), head)
end
if summary ~= '' then
  local previous = redis.call('HGET', meta, 'summary')
  if previous then
    redis.call('ZADD', archive, seq_of(previous), previous)
  end
  local seq = redis.call('HINCRBY', meta, 'last_seq', 1)
  redis.call('HSET', meta, 'summary', string.format('%d:%s', seq, summary))
end
if cap ~= '' then
  local excess = redis.call('ZCARD', archive) - tonumber(cap)
  if excess > 0 then
    local dropped = redis.call('ZRANGE', archive, 0, excess - 1)
    for first = 1, #dropped, 500 do
      local seqs = {}
      for i = first, math.min(first + 499, #dropped) do
        seqs[#seqs + 1] = seq_of(dropped[i])
      end
      redis.call('HDEL', texts, unpack(seqs))
    end
    redis.call('ZREMRANGEBYRANK', archive, 0, excess - 1)
  end
end
if record ~= '' then
  redis.call('RPUSH', compactions, record)
  redis.call('LTRIM', compactions, -records_kept, -1)
end
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HDEL', meta, 'error')
refresh_ttl(ttl)
return 1
