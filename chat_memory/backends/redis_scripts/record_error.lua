-- ARGV: "1" and a message to record (and count, in meta.failures), or "0" to forget both; ttl.
if redis.call('EXISTS', meta) == 0 then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', meta, 'error', ARGV[2])
  redis.call('HINCRBY', meta, 'failures', 1)
else
  redis.call('HDEL', meta, 'error', 'failures')
end
refresh_ttl(tonumber(ARGV[3]))
return 1
