#!lua flags=no-writes
-- The keyed method's read: nothing written (nshash/keyed.py, _RedisBackend.read).
-- KEYS: bloom c h t n (1-4), idx c h t n (5-8), vec (9), docs (10).
-- ARGV: doc_id ('' for none), hashes per key k, max_candidates, then per kind: the key hash
-- ('' when the key does not exist) and its k bit positions.
-- Reply: {1, record} for a known doc_id; else {0, then per kind: bloom hit (0/1), entry
-- ('' when none), then number, value pairs of the candidates' vectors}.
local doc_id, k, maxc = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if doc_id ~= '' then
  local rec = redis.call('HGET', KEYS[10], doc_id)
  if rec then return {1, rec} end
end
local out, seen, nums, a = {0}, {}, {}, 4
for kind = 1, 4 do
  local h, hit, entry = ARGV[a], 0, ''
  if h ~= '' then
    hit = 1
    for i = 1, k do
      if redis.call('GETBIT', KEYS[kind], ARGV[a + i]) == 0 then
        hit = 0
        break
      end
    end
    if hit == 1 then
      entry = redis.call('HGET', KEYS[4 + kind], h) or ''
      local c = 0
      for n in string.gmatch(entry, '(%d+):%d+') do
        c = c + 1
        if c > maxc then break end
        if not seen[n] then
          seen[n] = true
          nums[#nums + 1] = n
        end
      end
    end
  end
  out[#out + 1] = hit
  out[#out + 1] = entry
  a = a + 1 + k
end
if #nums > 0 then
  local vecs = redis.call('HMGET', KEYS[9], unpack(nums))
  for i = 1, #nums do
    out[#out + 1] = nums[i]
    out[#out + 1] = vecs[i]
  end
end
return out
