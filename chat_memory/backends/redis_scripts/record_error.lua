-- ARGV: "1" and a message to record, or "0" to forget; ttl.
if redis.call('EXISTS', meta) == 0 then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', meta, 'error', ARGV[2])
else
  redis.call('HDEL', meta, 'error')
end
refresh_ttl(tonumber(ARGV[3]))
return 1
