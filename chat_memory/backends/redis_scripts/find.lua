-- Events by index, without reading the window: what the tool-pair check of an append needs.
-- ARGV: n, then n id prefixes ('{"id":"…"'), then call-id fields ('"c1"', see call_of).
-- Returns {1, the pinned and active elements with one of the ids, the tool elements (active
-- and archived) with one of the call ids, their archived flags ('1' or '0'), the version, the
-- epoch}, or {0, the version, the epoch} when an index is behind the data (an older
-- chat-memory wrote since): the caller then reads the history. (The version and epoch name
-- the state looked up: an append may be made conditional on it.)
local n = tonumber(ARGV[1])
local state = redis.call('HMGET', meta, 'cid', 'last_seq', 'indexed', 'calls_indexed', 'version', 'epoch')
local version, epoch = state[5] or '0', state[6] or ''
if not state[1] then
  return {1, {}, {}, {}, version, epoch}
end
local last = tonumber(state[2] or '0')
if tonumber(state[3] or '-1') ~= last or tonumber(state[4] or '-1') ~= last then
  return {0, version, epoch}
end

-- Many retried ids: one read of the active list beats a binary search each.
local by_seq = nil
local function element_at(seq, many)
  if many and not by_seq then
    by_seq = {}
    for _, element in ipairs(redis.call('LRANGE', active, 0, -1)) do
      by_seq[seq_of(element)] = element
    end
  end
  if by_seq then
    return by_seq[seq]
  end
  return active_at(seq)
end

local by_id = {}
if n > 0 then
  local prefixes = {}
  for i = 2, n + 1 do
    prefixes[#prefixes + 1] = ARGV[i]
  end
  local seqs = chunked('HMGET', ids, prefixes)
  local hits = 0
  for _, seq in ipairs(seqs) do
    if seq then
      hits = hits + 1
    end
  end
  local pins = nil
  for k, seq in ipairs(seqs) do
    if seq then
      seq = tonumber(seq)
      local element = element_at(seq, hits > 32)
      if not element then
        pins = pins or redis.call('LRANGE', pinned, 0, -1)
        for _, pin in ipairs(pins) do
          if seq_of(pin) == seq then
            element = pin
          end
        end
      end
      if element and id_of(element) == prefixes[k] then
        by_id[#by_id + 1] = element
      end
    end
  end
end

local fields = {}
for i = n + 2, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local entries = #fields > 0 and chunked('HMGET', calls, fields) or {}
local head = redis.call('LINDEX', active, 0)
local first_active = head and seq_of(head) or nil
local found, flags = {}, {}
for k, entry in ipairs(entries) do
  if entry then
    for seq in string.gmatch(entry, '%d+') do
      seq = tonumber(seq)
      local element, archived = nil, '0'
      if first_active and seq >= first_active then
        element = element_at(seq, false)
      end
      if not element then
        element = redis.call('ZRANGEBYSCORE', archive, seq, seq)[1]
        archived = '1'
      end
      if element and call_of(element) == fields[k] then
        found[#found + 1] = element
        flags[#flags + 1] = archived
      end
    end
  end
end
return {1, by_id, found, flags, version, epoch}
