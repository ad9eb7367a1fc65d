-- KEYS: meta, pinned, active and archive only (all it reads).
-- ARGV: the epoch and version of the window the caller holds ('' and '' for none).
-- A 'same' reply (the caller's copy is current: every read of a turn) is one bulk string, since
-- a client parses each element of a nested reply on its own: 'same|<version>|<last seq>|
-- <archive size>|<failures>|<epoch>|<error>' (the error, '' or '!' and the message, last: it
-- may hold '|'); a 'full' one is window_unless's list.
local result = window_unless(ARGV[1] or '', ARGV[2] or '')
if result[9] == 'same' then
  return table.concat({'same', result[1], result[2], result[7], result[8], result[10], result[3]}, '|')
end
return result
