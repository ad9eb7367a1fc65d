-- Single-node only: drop registry ids whose conversation is gone (expired by TTL).
-- KEYS: registry, then the meta key of each id in ARGV (same order). Returns the live ids.
local live = {}
for i, cid in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then
    live[#live + 1] = cid
  else
    redis.call('SREM', KEYS[1], cid)
  end
end
return live
