-- Literal matching over the folded texts stored at append time (folded by Python, so the
-- case rules are Python's casefold, not Lua's lower).
-- ARGV: mode ("any" or "all"), offset, limit, include recall tools ("1" or "0"), folded terms...
local mode, offset, limit, recall = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local terms = {}
for i = 5, #ARGV do
  terms[#terms + 1] = ARGV[i]
end

local function matches(text)
  -- texts of the recall tools' own calls and results start with byte 0x1f (search.RECALL_MARK)
  if not recall and string.byte(text, 1) == 31 then
    return false
  end
  for _, term in ipairs(terms) do
    local found = string.find(text, term, 1, true) ~= nil
    if found == (mode == 'any') then
      return found
    end
  end
  return mode ~= 'any'
end

local total, hits = 0, {}
local function scan(elements, archived)
  -- texts are fetched in chunks: one HGET per element would cost a call each
  for first = 1, #elements, 500 do
    local last = math.min(first + 499, #elements)
    local seqs = {}
    for i = first, last do
      seqs[#seqs + 1] = seq_of(elements[i])
    end
    local found = redis.call('HMGET', texts, unpack(seqs))
    for i = first, last do
      local text = found[i - first + 1]
      if text and matches(text) then
        total = total + 1
        if total > offset and #hits < 2 * limit then
          hits[#hits + 1] = archived
          hits[#hits + 1] = elements[i]
        end
      end
    end
  end
end

-- archived real events all precede the active ones (compaction archives a prefix of active)
scan(redis.call('ZRANGE', archive, 0, -1), '1')
scan(redis.call('LRANGE', active, 0, -1), '0')
return {total, hits}
