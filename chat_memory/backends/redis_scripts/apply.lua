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
local summary_seq = apply_plan(through, summary, cap, record, records_kept)
refresh_ttl(ttl)
return {1, redis.call('HGET', meta, 'epoch') or '', summary_seq}
