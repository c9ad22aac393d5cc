#!lua
-- The nshash method's placement of one document, atomic (nshash/redis_store.py).
-- ARGV: base, n, theta:merge_theta:merge_guard, min_overlap, sketch_cap, votes, exact, hashes,
-- anchor count, sketch limit, doc ('-' | '+id'), title ('-' | '+title'), activity ('-' |
-- 'added hour'), the doc's JSON metadata (kept with a doc id), the time (see ARGV[15]), the
-- anchor candidates packed (8 bytes each, little-endian: what the record keeps) and the sketch
-- values' places in the page (a JSON list, or '': see hashes). Returns
-- one string, cheap to parse: "root duplicate sequence anchor,positions merged,ids", or
-- "R root record" when the doc id was seen before.
-- include: nshash_common
-- nshash.methods.nshash.retention.FORGET_PER_WRITE
local FORGET_PER_WRITE = 16
local n = tonumber(ARGV[2])
local theta, merge_theta, merge_guard = thresholds(3)
local min_overlap, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local need = tonumber(ARGV[6])
local exact = ARGV[7]
local doc_limit  -- ARGV[10], read with the hashes (see hashes)
local doc_id, title = nil, nil
if string.sub(ARGV[11], 1, 1) == '+' then doc_id = string.sub(ARGV[11], 2) end
if string.sub(ARGV[12], 1, 1) == '+' then title = string.sub(ARGV[12], 2) end

check_layout(true)
check_width(8)

-- ARGV[15]: "now" (the caller's clock, epoch seconds), or "now window" to set the window.
local now, want = string.match(ARGV[15], '^(%d+) ?(%d*)$')
now = tonumber(now)
local window = redis.call('GET', K_WINDOW)
if want ~= '' and want ~= window then
  if not window and tonumber(redis.call('GET', K_COUNTER) or '0') > 0 then
    return redis.error_reply('RETENTION this store was made without a retention window,'
      .. ' so its groups were never dated; a window can only be set on a new store')
  end
  redis.call('SET', K_WINDOW, want)
end
if date_groups(now) then
  WINDOWED = true
  purge(FORGET_PER_WRITE)
end

if doc_id then
  local rec = redis.call('HGET', K_DOCS, doc_id)
  if rec then
    local root = parse_record(rec)
    save_split()
    return 'R ' .. gs(resolve(root)) .. ' ' .. rec
  end
end

local ex = tget(K_EXACT, exact)
if ex and expired(ex) then ex = false end
local all, ns, flags
all, ns, flags, doc_limit = hashes(8, not ex, 17)
local anchors, aidx = select_anchors(all, ns, flags, n)
local known = fp_get(anchors)
if WINDOWED then
  for i = 1, #anchors do
    if known[i] and expired(known[i]) then known[i] = false end
  end
end
local merged = {}
local root, dup
-- The evidence kept with the record (assign.py's evidence()): the score against the group
-- joined, else the best refused one, and the verdict's code (records.py's VERDICTS).
local ev_score, ev_verdict = 0, 1
if ex then
  root = resolve(ex)
  dup = 1
  ev_score, ev_verdict = 1, 3
else
  local live = live_sketch(all, ns, flags)
  local order, hits = candidates(anchors, known)
  local scores, shared_of = {}, {}
  for _, g in ipairs(order) do
    local score, shared = verify(g, live, doc_limit, min_overlap, theta)
    scores[g] = score
    shared_of[g] = shared
  end
  local accepted = choose(order, scores, theta, merge_theta, merge_guard)
  if #accepted > 0 then
    ev_score = scores[accepted[1]]
    ev_verdict = #accepted > 1 and 5 or 4
  elseif #order > 0 then
    ev_verdict = 2
    for _, g in ipairs(order) do
      if scores[g] > ev_score then ev_score = scores[g] end
    end
  end
  if #accepted > 0 then
    root = accepted[1]
    local rsk = BASE .. 's:' .. gs(root)
    for i = 2, #accepted do
      merged[#merged + 1] = accepted[i]
      merge_group(root, accepted[i], cap)
    end
    local lr = limit_of(root)
    if extends(rsk, lr, #all - ns, doc_limit) then
      local bound = math.min(lr, doc_limit)
      local first, last = story_span(rsk, accepted, shared_of)
      local add = {}
      for i = ns + 1, #all do
        local v = all[i]
        if tonumber(v) < bound and (not first or (PLACES[v] >= first and PLACES[v] <= last)) then
          add[#add + 1] = v
        end
      end
      if #add > 0 then push('SADD', rsk, add) end
      settle(root, lr, bound, cap)
    end
    dup = 1
  else
    root = redis.call('INCR', K_COUNTER)
    if #all > ns then push('SADD', BASE .. 's:' .. gs(root), all, ns + 1) end
    settle(root, NO_LIMIT, doc_limit, cap)
    dup = 0
  end
  for _, g in ipairs(order) do
    if scores[g] < theta then
      local hs, seen = {}, {}
      for _, h in ipairs(hits[g]) do
        if not seen[h] then seen[h] = true; hs[#hs + 1] = h end
      end
      for _, h in ipairs(shared_of[g]) do
        if not seen[h] then seen[h] = true; hs[#hs + 1] = h end
      end
      vote(hs, g, root, need)
    end
  end
  vote(tail_of(live, doc_limit), root, root, need)
  tset(K_EXACT, exact, gs(root))
  if WINDOWED then own(root, 'x', exact) end
end

local rs = gs(root)
local fresh = {}
for i = 1, #anchors do
  if not known[i] then
    fresh[#fresh + 1] = anchors[i]
    fresh[#fresh + 1] = rs
    if WINDOWED then own(root, 'f', anchors[i]) end
  end
end
fp_set(fresh)
if WINDOWED then redis.call('ZADD', K_LAST, now, rs) end
if dup == 0 then
  redis.call('ZADD', K_SIZES, -1, zm(root))
else
  redis.call('ZINCRBY', K_SIZES, -1, zm(root))
end
local seq = redis.call('INCR', K_DOCUMENTS)
if doc_id then
  if dup == 0 then
    tset(K_FIRST, rs, doc_id)
  else
    redis.call('RPUSH', BASE .. 'm:' .. rs, doc_id)
  end
  local ms, packed = {}, {}
  for i, m in ipairs(merged) do ms[i] = gs(m) end
  for i, at in ipairs(aidx) do packed[i] = string.sub(ARGV[16], 8 * at - 7, 8 * at) end
  local rec = table.concat({rs, tostring(dup), gs(seq), title and '1' or '0',
    table.concat(ms, ','), '#' .. #aidx, string.format('%.17g', ev_score), tostring(ev_verdict)},
    ' ') .. '\n' .. table.concat(packed) .. (title or '')
  redis.call('HSET', K_DOCS, doc_id, rec)
end
if ARGV[13] ~= '-' then
  local added, hour = string.match(ARGV[13], '^(%d+) (%d+)$')
  widen(root, tonumber(added), tonumber(added))
  redis.call('HINCRBY', BASE .. 'ha:' .. rs, hour, 1)
  redis.call('ZINCRBY', BASE .. 'hh:' .. hour, 1, zm(root))
  redis.call('ZADD', BASE .. 'hours', hour, hour)
  if doc_id then redis.call('HSET', BASE .. 'meta', doc_id, ARGV[14]) end
end
for i = 1, #merged do merged[i] = gs(merged[i]) end
save_split()
return table.concat({rs, tostring(dup), gs(seq), table.concat(aidx, ','),
  table.concat(merged, ',')}, ' ')
