-- One slice of a search: literal matching over the folded texts stored at append time (folded
-- by Python, so the case rules are Python's casefold, not Lua's lower).
--
-- Redis runs one script at a time and nothing else meanwhile, so a search is many calls of
-- this script, each stopping once it has run for about `budget` microseconds (by the server's
-- clock), and resumed by the next call where it stopped: a cursor of (seq, byte position in
-- that seq's text, terms found so far in it). Work between two clock checks is bounded too:
-- a text is matched SLICE bytes at a time, so even a 5 MB tool result is many short steps.
-- Seqs are scanned in order from the oldest stored one up to `through` (the last seq when the
-- search started): events appended meanwhile are not seen, events compacted meanwhile are
-- found in the archive instead of the window (each seq is in exactly one of them whenever a
-- script runs), and an archived event dropped by the cap before its turn is not counted.
--
-- ARGV: mode ("any" or "all"), include recall tools ("1" or "0"), cursor seq (0: start),
-- cursor byte position (1: start of the text), terms found so far ("" or one "0"/"1" per term),
-- through (0: the last seq now), matches to skip before the page, hits still wanted,
-- budget in microseconds, bytes matched between two reads of the clock, folded terms...
-- Returns: version, last seq, through, next seq (0: done), next position, terms found,
-- matches in this call, hits (archived flag "1"/"0", element, ...).
local any, recall = ARGV[1] == 'any', ARGV[2] == '1'
local seq, pos, found_so_far = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local through, skip, room, budget = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local check_every = tonumber(ARGV[10])
local terms, longest = {}, 0
for i = 11, #ARGV do
  terms[#terms + 1] = ARGV[i]
  longest = math.max(longest, #ARGV[i])
end
-- A text is matched this many bytes at a time: at the worst measured rate (about 9 ns a byte,
-- a 500-byte term over a text of one repeated character) 16 terms over a slice take ~1 ms.
local SLICE = 8192

local m = redis.call('HMGET', meta, 'version', 'last_seq')
local version, last_seq = tonumber(m[1] or '0'), tonumber(m[2] or '0')
if through == 0 then
  through = last_seq
end

local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- The clock starts once the call's first text is fetched: a call resuming inside a long text
-- copies it again (about 1 ms a megabyte) and must still get `budget` of matching done.
local started, work = nil, 0
local function out_of_time(now_anyway)
  if work < check_every and not now_anyway then
    return false
  end
  work = 0
  return now() - started >= budget
end

-- The stored element of a searchable seq and whether it is archived (a seq is in the archive
-- or in the window, whose elements are in seq order: a binary search over it).
local function element_of(s)
  local archived = redis.call('ZRANGEBYSCORE', archive, s, s, 'LIMIT', 0, 1)
  if archived[1] then
    return '1', archived[1]
  end
  local element = active_at(s)
  if element then
    return '0', element
  end
  return nil, nil
end

-- The oldest stored seq (the cap drops the oldest archived events; pinned events are never
-- searched): a cursor below it jumps there.
local oldest = through + 1
local head = redis.call('ZRANGE', archive, 0, 0, 'WITHSCORES')
if head[2] then
  oldest = math.min(oldest, tonumber(head[2]))
end
head = redis.call('LINDEX', active, 0)
if head then
  oldest = math.min(oldest, seq_of(head))
end
if seq < oldest then
  seq, pos, found_so_far = oldest, 1, ''
end

local matched, hits = 0, {}
local found, pending = {}, #terms
local function reset_found(saved)
  pending = #terms
  for i = 1, #terms do
    found[i] = string.sub(saved, i, i) == '1'
    if found[i] then
      pending = pending - 1
    end
  end
end
local function saved_found()
  local flags = {}
  for i = 1, #terms do
    flags[i] = found[i] and '1' or '0'
  end
  return table.concat(flags)
end
local function paused()
  return {version, last_seq, through, seq, pos, saved_found(), matched, hits}
end

reset_found(found_so_far)
while seq <= through do
  local text = redis.call('HGET', texts, seq)
  started = started or now()
  work = work + 64
  -- texts of the recall tools' own calls and results start with byte 0x1f (search.RECALL_MARK)
  if text and (recall or string.byte(text, 1) ~= 31) then
    local verdict = nil
    while verdict == nil do
      -- the slice holds every match that starts before pos + SLICE; the next one starts there
      local stop = pos + SLICE + longest - 2
      local slice = text
      if pos > 1 or #text > stop then
        slice = string.sub(text, pos, stop)
      end
      local final = stop >= #text
      for i, term in ipairs(terms) do
        if not found[i] then
          work = work + #slice
          if string.find(slice, term, 1, true) then
            found[i] = true
            pending = pending - 1
            if any or pending == 0 then
              verdict = true
              break
            end
          elseif final and not any then
            verdict = false  -- a term found nowhere in the text: "all" fails
            break
          end
        end
      end
      if verdict == nil then
        if final then
          verdict = false
        else
          pos = pos + SLICE
          if out_of_time(true) then  -- a slice is long enough to be worth a look at the clock
            return paused()
          end
        end
      end
    end
    if verdict then
      matched = matched + 1
      if skip > 0 then
        skip = skip - 1
      elseif room > 0 then
        local flag, element = element_of(seq)
        work = work + 4096
        if element then
          room = room - 1
          hits[#hits + 1] = flag
          hits[#hits + 1] = element
        end
      end
    end
  end
  seq, pos = seq + 1, 1
  reset_found('')
  if out_of_time() then
    return paused()
  end
end
return {version, last_seq, through, 0, 1, '', matched, hits}
