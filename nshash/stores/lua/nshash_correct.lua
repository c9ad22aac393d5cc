#!lua
-- An editor's correction, applied atomically (nshash/methods/nshash/redis.py): a generic
-- check-and-apply. The client ran nshash/methods/nshash/corrections.py on what it read; this
-- script checks that every value it read is still what it read, and only then makes the
-- writes it decided, in order. Returns 'OK', or 'STALE' (nothing written: read again).
-- ARGV: base, the number of checks, each check as 4 arguments, then the writes.
-- Checks: 'h' key field value (HGET; value '-' absent, else '+' and the value), 'z' key member
-- value (ZSCORE, likewise), 'g' key value (GET, likewise), 's' group values (its sketch:
-- the values sorted, comma-separated, then ' ' and its limit), 'm' group most ids (the
-- first `most` members, newline-separated).
-- Writes: 'new' id (a group: the counter's next id, empty), 'merge' root g cap,
-- 'move' doc src dst verdict (verdict '-': keep it), 'split' root g values limit
-- root_values root_limit without_id, 'put' id text (a correction's JSON), 'vote' need g1 g2
-- count hashes... (nshash_common's vote, the one a refusal makes).
-- include: nshash_common

check_layout(true)

local function present(v)
  if v == false or v == nil then return '-' end
  return '+' .. v
end

local function sketch_text(g)
  local nums = {}
  for i, v in ipairs(redis.call('SMEMBERS', BASE .. 's:' .. gs(g))) do nums[i] = tonumber(v) end
  table.sort(nums)
  for i, v in ipairs(nums) do nums[i] = string.format('%d', v) end
  return table.concat(nums, ',') .. ' ' .. string.format('%d', limit_of(g))
end

local nchecks = tonumber(ARGV[2])
local i = 3
for _ = 1, nchecks do
  local kind, a, b, want = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local got
  if kind == 'h' then
    got = present(redis.call('HGET', a, b))
  elseif kind == 'z' then  -- compared as numbers (a score reads back as a float's text)
    local score = redis.call('ZSCORE', a, b)
    got = want
    if (want == '-') ~= (not score) or (score and tonumber(score) ~= tonumber(string.sub(want, 2))) then
      got = '?'
    end
  elseif kind == 'g' then
    got = present(redis.call('GET', a))
  elseif kind == 's' then
    got = sketch_text(tonumber(a))
  elseif kind == 'm' then
    local most = tonumber(b)
    got = table.concat(members_of(tonumber(a), most > 0 and most or nil), '\n')
  else
    return redis.error_reply('ERR unknown check ' .. tostring(kind))
  end
  if got ~= want then return 'STALE' end
  i = i + 4
end

local K_CORRECTIONS = BASE .. 'corrections'

-- A record ("root dup seq has_title merged #count [score verdict]\n" + anchors and title)
-- with its group, and its verdict when one is given (a record with evidence only).
local function moved_record(rec, dst, verdict)
  local nl = string.find(rec, '\n', 1, true)
  if not nl then unreadable_record() end
  local fields = {}
  for f in string.gmatch(string.sub(rec, 1, nl - 1) .. ' ', '([^ ]*) ') do fields[#fields + 1] = f end
  fields[1] = gs(dst)
  if verdict ~= '-' and #fields == 8 then fields[8] = verdict end
  return table.concat(fields, ' ') .. string.sub(rec, nl)
end

local function hour_step(g, hour, n)
  local ha, hk = BASE .. 'ha:' .. gs(g), BASE .. 'hh:' .. hour
  if redis.call('HINCRBY', ha, hour, n) <= 0 then redis.call('HDEL', ha, hour) end
  if tonumber(redis.call('ZINCRBY', hk, n, zm(g))) <= 0 then redis.call('ZREM', hk, zm(g)) end
end

local function move(doc, src, dst, verdict)
  if tget(K_FIRST, gs(src)) == doc then
    tdel(K_FIRST, gs(src))
  else
    redis.call('LREM', BASE .. 'm:' .. gs(src), 1, doc)
  end
  redis.call('RPUSH', BASE .. 'm:' .. gs(dst), doc)
  redis.call('ZINCRBY', K_SIZES, 1, zm(src))
  redis.call('ZINCRBY', K_SIZES, -1, zm(dst))
  redis.call('HSET', K_DOCS, doc, moved_record(redis.call('HGET', K_DOCS, doc), dst, verdict))
  local meta = redis.call('HGET', BASE .. 'meta', doc)
  if meta then
    local added = tonumber(cjson.decode(meta)[1])
    local hour = string.format('%d', math.floor(added / 3600))
    hour_step(src, hour, -1)
    hour_step(dst, hour, 1)
    widen(dst, added, added)
  end
end

local function set_sketch(g, values, limit)
  local sk = BASE .. 's:' .. gs(g)
  redis.call('DEL', sk)
  local vs = {}
  for v in string.gmatch(values, '[^,]+') do vs[#vs + 1] = v end
  if #vs > 0 then push('SADD', sk, vs) end
  if tonumber(limit) < NO_LIMIT then
    redis.call('HSET', K_LIMITS, gs(g), limit)
  else
    redis.call('HDEL', K_LIMITS, gs(g))
  end
end

while i <= #ARGV do
  local op = ARGV[i]
  if op == 'new' then
    redis.call('INCR', K_COUNTER)
    redis.call('ZADD', K_SIZES, 0, zm(tonumber(ARGV[i + 1])))
    i = i + 2
  elseif op == 'merge' then
    merge_group(tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
    i = i + 4
  elseif op == 'move' then
    move(ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), ARGV[i + 4])
    i = i + 5
  elseif op == 'split' then
    local root, g = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    redis.call('HDEL', K_PARENT, gs(g))
    unresolve()
    set_sketch(g, ARGV[i + 3], ARGV[i + 4])
    set_sketch(root, ARGV[i + 5], ARGV[i + 6])
    local n = tonumber(ARGV[i + 7])
    redis.call('ZADD', K_SIZES, -n, zm(g))
    redis.call('ZINCRBY', K_SIZES, n, zm(root))
    i = i + 8
  elseif op == 'vote' then  -- need g1 g2 count, then the hashes (signed decimals)
    local n, hs = tonumber(ARGV[i + 4]), {}
    for k = 1, n do hs[k] = ARGV[i + 4 + k] end
    vote(hs, tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 1]))
    i = i + 5 + n
  elseif op == 'put' then
    redis.call('HSET', K_CORRECTIONS, ARGV[i + 1], ARGV[i + 2])
    i = i + 3
  else
    return redis.error_reply('ERR unknown write ' .. tostring(op))
  end
end
save_split()
return 'OK'
