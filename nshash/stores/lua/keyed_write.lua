-- The keyed method's write (nshash/keyed.py, _RedisBackend.write).
-- KEYS: as above, then counter (11), documents (12).
-- ARGV: doc_id, record tail ("dup keys" then "\n" and "+title" or "-"), similar_id ('0' for
-- a new one), packed vector, k, max_candidates, then per kind: the key hash, the entry size
-- seen by the read, and k bit positions.
-- Reply: {'R', record} for a known doc_id, {'C'} when an entry changed since the read,
-- else {'A', similar_id}.
local doc_id, tail, sid, vec = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local k, maxc = tonumber(ARGV[5]), tonumber(ARGV[6])
if doc_id ~= '' then
  local rec = redis.call('HGET', KEYS[10], doc_id)
  if rec then return {'R', rec} end
end
local a = 7
for kind = 1, 4 do
  local h = ARGV[a]
  if h ~= '' and redis.call('HSTRLEN', KEYS[4 + kind], h) ~= tonumber(ARGV[a + 1]) then
    return {'C'}
  end
  a = a + 2 + k
end
if sid == '0' then sid = string.format('%d', redis.call('INCR', KEYS[11])) end
local num = string.format('%d', redis.call('INCR', KEYS[12]))
a = 7
for kind = 1, 4 do
  local h = ARGV[a]
  if h ~= '' then
    for i = 1, k do redis.call('SETBIT', KEYS[kind], ARGV[a + 1 + i], 1) end
    local entry = redis.call('HGET', KEYS[4 + kind], h)
    if not entry then
      redis.call('HSET', KEYS[4 + kind], h, num .. ':' .. sid)
    else
      local _, commas = string.gsub(entry, ',', ',')
      if commas + 1 < maxc then
        redis.call('HSET', KEYS[4 + kind], h, entry .. ',' .. num .. ':' .. sid)
      end
    end
  end
  a = a + 2 + k
end
redis.call('HSET', KEYS[9], num, sid .. ' ' .. vec)
if doc_id ~= '' then redis.call('HSET', KEYS[10], doc_id, sid .. ' ' .. tail) end
return {'A', sid}
