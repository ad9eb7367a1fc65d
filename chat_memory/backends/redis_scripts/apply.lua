-- Compare-and-swap compaction.
-- ARGV: expected version, archive-through seq, summary envelope ('' for none), archive cap ('' for none), ttl,
-- compaction record JSON ('' for none), how many records to keep.
-- Reply: 0 when the version was not the expected one (nothing written), else {1, the
-- conversation's epoch, the new summary's seq or 0}.
local expected, through, summary, cap, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local record, records_kept = ARGV[6], tonumber(ARGV[7])
local version = redis.call('HGET', meta, 'version')
if not version or tonumber(version) ~= expected then
  return 0
end
local refused = wrong_key_type()
if refused then
  return refused
end
-- archived events leave the id index (it covers the window only), in bounded HDELs
local gone = {}
while true do
  local head = redis.call('LINDEX', active, 0)
  if not head or seq_of(head) > through then
    break
  end
  redis.call('LPOP', active)
  redis.call('ZADD', archive, seq_of(head), head)
  gone[#gone + 1] = id_of(head)
end
chunked('HDEL', ids, gone)
local summary_seq = 0
if summary ~= '' then
  local previous = redis.call('HGET', meta, 'summary')
  if previous then
    redis.call('ZADD', archive, seq_of(previous), previous)
  end
  local seq = redis.call('HINCRBY', meta, 'last_seq', 1)
  summary_seq = seq
  -- a summary is in neither index: an index that was complete stays so
  for _, field in ipairs({'indexed', 'calls_indexed'}) do
    if tonumber(redis.call('HGET', meta, field) or '-1') == seq - 1 then
      redis.call('HSET', meta, field, seq)
    end
  end
  redis.call('HSET', meta, 'summary', string.format('%d:%s', seq, summary))
end
if cap ~= '' then
  local excess = redis.call('ZCARD', archive) - tonumber(cap)
  if excess > 0 then
    local dropped = redis.call('ZRANGE', archive, 0, excess - 1)
    local seqs = {}
    local gone_calls = {}
    for i = 1, #dropped do
      seqs[i] = seq_of(dropped[i])
      local field = call_of(dropped[i])
      if field then
        gone_calls[field] = gone_calls[field] or {}
        table.insert(gone_calls[field], seqs[i])
      end
    end
    chunked('HDEL', texts, seqs)
    calls_update(gone_calls, true)
    redis.call('ZREMRANGEBYRANK', archive, 0, excess - 1)
  end
end
if record ~= '' then
  redis.call('RPUSH', compactions, record)
  redis.call('LTRIM', compactions, -records_kept, -1)
end
redis.call('HINCRBY', meta, 'version', 1)
redis.call('HDEL', meta, 'error', 'failures')
refresh_ttl(ttl)
return {1, redis.call('HGET', meta, 'epoch') or '', summary_seq}
