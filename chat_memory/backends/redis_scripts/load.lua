-- ARGV: the epoch and version of the window the caller holds ('' and '' for none).
return window_unless(ARGV[1] or '', ARGV[2] or '')
