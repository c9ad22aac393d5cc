-- The simhash method's placement of one document, atomic (nshash/simhash_dedup.py).
-- KEYS: idx (1), parent (2), docs (3), counter (4), documents (5), groups (6).
-- ARGV: doc_id ('' for none), the fingerprint's high and low 32 bits, k, max_bucket, the
-- record's JSON tail ([title, fingerprint]), then the document's table keys.
-- A bucket (a field of idx) is packed entries of 16 bytes: fingerprint high, low, group id
-- high, low, each a big-endian unsigned 32-bit integer.
-- Reply: {'R', record} for a known doc_id; else {'A', similar_id, duplicate (0/1), merged
-- ids...}. The record is "sid dup seq merged,ids" then "\n" and the JSON tail.
local doc_id, hi, lo = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local k, maxb, tail = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
if doc_id ~= '' then
  local rec = redis.call('HGET', KEYS[3], doc_id)
  if rec then return {'R', rec} end
end

local function popcount(x)
  local c = 0
  while x ~= 0 do
    x = bit.band(x, x - 1)
    c = c + 1
  end
  return c
end

local function resolve(gid)
  while true do
    local p = redis.call('HGET', KEYS[2], string.format('%d', gid))
    if not p then return gid end
    gid = tonumber(p)
  end
end

-- Every filed fingerprint within k: its group, resolved after merges.
local near, entries, same = {}, {}, false
for i = 7, #ARGV do
  local entry = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  entries[i] = entry
  for off = 1, #entry, 16 do
    local ohi, olo, ghi, glo = struct.unpack('>I4>I4>I4>I4', entry, off)
    local d = popcount(bit.bxor(hi, ohi))
    if d <= k then
      d = d + popcount(bit.bxor(lo, olo))
      if d <= k then
        near[resolve(ghi * 4294967296 + glo)] = true
        if d == 0 then same = true end
      end
    end
  end
end

-- The smallest group within k is the answer; the others merge into it.
local groups = {}
for g in pairs(near) do groups[#groups + 1] = g end
table.sort(groups)
local sid, dup, merged = groups[1], 1, {}
if sid == nil then
  sid = redis.call('INCR', KEYS[4])
  redis.call('INCR', KEYS[6])
  dup = 0
end
local sids = string.format('%d', sid)
for i = 2, #groups do
  redis.call('HSET', KEYS[2], string.format('%d', groups[i]), sids)
  redis.call('DECR', KEYS[6])
  merged[#merged + 1] = string.format('%d', groups[i])
end

-- File the fingerprint under each of its keys, unless the same one is filed already.
local filed = struct.pack('>I4>I4>I4>I4', hi, lo, math.floor(sid / 4294967296), sid % 4294967296)
for i = 7, #ARGV do
  if not same and #entries[i] < maxb * 16 then
    redis.call('HSET', KEYS[1], ARGV[i], entries[i] .. filed)
  end
end
local seq = redis.call('INCR', KEYS[5])
if doc_id ~= '' then
  local head = sids .. ' ' .. dup .. ' ' .. string.format('%d', seq) .. ' ' .. table.concat(merged, ',')
  redis.call('HSET', KEYS[3], doc_id, head .. '\n' .. tail)
end
local reply = {'A', sids, dup}
for i = 1, #merged do reply[#reply + 1] = merged[i] end
return reply
