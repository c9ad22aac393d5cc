#!lua flags=no-writes
-- The nshash method's reads (nshash/redis_store.py).
-- ARGV: base, op, op arguments. Read-only: the no-writes flag makes any write an error.
-- include: nshash_common
local op = ARGV[2]
check_layout(false)

local function group_reply(g, most)
  local size = redis.call('ZSCORE', K_SIZES, zm(g))
  if not size and redis.call('EXISTS', K_WINDOW) == 1 then return false end  -- forgotten
  local out = {g, size and -tonumber(size) or 0}
  local members = members_of(g, most)
  if #members > 0 then
    local recs = redis.call('HMGET', K_DOCS, unpack(members))
    for i = 1, #members do
      out[#out + 1] = members[i]
      out[#out + 1] = recs[i] and title_of(recs[i]) or '-'
      out[#out + 1] = recs[i] and evidence_of(recs[i]) or '-'
    end
  end
  return out
end

if op == 'lookup' then
  -- ARGV: base, op, n, theta:merge_theta:merge_guard, min_overlap, exact, hashes, count, limit,
  -- "1" to explain (then the reply lists every candidate), the time: groups expired by then
  -- (with a retention window) match nothing, and the sketch values' places (see hashes).
  local n, min_overlap = tonumber(ARGV[3]), tonumber(ARGV[5])
  local theta, merge_theta, merge_guard = thresholds(4)
  local explain = ARGV[10] == '1'
  date_groups(tonumber(ARGV[11]))
  local ex = tget(K_EXACT, ARGV[6])
  if ex and expired(ex) then ex = false end
  if ex then
    if explain then return {'exact', resolve(ex)} end
    return resolve(ex)
  end
  check_width(7)
  local all, ns, flags, limit = hashes(7, true, 12)
  local anchors = select_anchors(all, ns, flags, n)
  local known = fp_get(anchors)
  for i = 1, #anchors do
    if known[i] and expired(known[i]) then known[i] = false end
  end
  local live = live_sketch(all, ns, flags)
  local order, hits = candidates(anchors, known)
  local scores, out = {}, {'candidates', 0, table.concat(anchors, ',')}
  local boiler = {}
  for i = 1, ns do
    if flags[i] == 1 then boiler[#boiler + 1] = all[i] end
  end
  out[#out + 1] = table.concat(boiler, ',')
  for _, g in ipairs(order) do
    local score, shared, mine, gsize, frame, edits, top = verify(g, live, limit, min_overlap,
      theta, explain)
    scores[g] = score
    out[#out + 1] = table.concat({gs(g), table.concat(hits[g], ','), tostring(#shared - frame),
      tostring(mine), tostring(gsize), tostring(frame), tostring(edits), tostring(top)}, ' ')
  end
  local chosen = choose(order, scores, theta, merge_theta, merge_guard)
  if explain then
    local ids = {}
    for i, g in ipairs(chosen) do ids[i] = gs(g) end
    out[2] = table.concat(ids, ',')
    return out
  end
  return chosen[1] or 0
elseif op == 'width' then
  -- Whether a document's sketch is compared narrow here (layout 4, or a new prefix).
  return NARROW and 1 or 0
elseif op == 'resolve' then
  -- An id never merged is its own canonical id: answer it as given (it may exceed 2^53).
  local p = redis.call('HGET', K_PARENT, ARGV[3])
  if not p then return ARGV[3] end
  return resolve(p)
elseif op == 'document' then
  local rec = redis.call('HGET', K_DOCS, ARGV[3])
  if not rec then return false end
  return {resolve(parse_record(rec)), rec}
elseif op == 'sequence' then
  local rec = redis.call('HGET', K_DOCS, ARGV[3])
  if not rec then return false end
  return tonumber(string.match(rec, '^%d+ %d+ (%d+) '))
elseif op == 'group' then
  local g = tonumber(ARGV[3])
  local last = tonumber(redis.call('GET', K_COUNTER) or '0')
  if g < 1 or g > last then return false end
  return group_reply(resolve(gs(g)))
elseif op == 'groups' then
  local top = redis.call('ZRANGE', K_SIZES, '-inf', '-' .. ARGV[3], 'BYSCORE',
    'LIMIT', 0, ARGV[4])
  local out = {}
  for i = 1, #top do out[i] = group_reply(tonumber(top[i])) end
  return out
elseif op == 'group_head' then
  local g = tonumber(ARGV[3])
  local last = tonumber(redis.call('GET', K_COUNTER) or '0')
  if g < 1 or g > last then return false end
  return group_reply(resolve(gs(g)), tonumber(ARGV[4]))
elseif op == 'activity' then
  local g = tonumber(ARGV[3])
  local last = tonumber(redis.call('GET', K_COUNTER) or '0')
  if g < 1 or g > last then return false end
  local r = resolve(gs(g))
  local seen = redis.call('HGET', K_SEEN, gs(r))
  if not seen then return false end
  return {r, seen, redis.call('HGETALL', BASE .. 'ha:' .. gs(r))}
elseif op == 'metas' then
  if #ARGV < 3 then return {} end
  return redis.call('HMGET', BASE .. 'meta', unpack(ARGV, 3))
elseif op == 'hot' then
  -- ARGV: base, op, first hour, last hour, limit. Returns id, count pairs, most first, ties
  -- by smaller id (members are zero-padded, so ZUNION orders ties by id).
  local limit = tonumber(ARGV[5])
  local hs = redis.call('ZRANGE', BASE .. 'hours', ARGV[3], ARGV[4], 'BYSCORE')
  if #hs == 0 then return {} end
  local keys = {}
  for i, h in ipairs(hs) do keys[i] = BASE .. 'hh:' .. h end
  local all
  if #keys <= CHUNK then
    keys[#keys + 1] = 'WITHSCORES'
    all = redis.call('ZUNION', #keys - 1, unpack(keys))
  else
    local acc, items = {}, {}
    for _, k in ipairs(keys) do
      local part = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
      for i = 1, #part, 2 do acc[part[i]] = (acc[part[i]] or 0) + tonumber(part[i + 1]) end
    end
    for m, c in pairs(acc) do items[#items + 1] = {m, c} end
    table.sort(items, function(a, b)
      if a[2] ~= b[2] then return a[2] < b[2] end
      return a[1] < b[1]
    end)
    all = {}
    for _, it in ipairs(items) do all[#all + 1] = it[1]; all[#all + 1] = it[2] end
  end
  local out, i = {}, #all / 2
  while i >= 1 and #out < 2 * limit do
    local score = tonumber(all[2 * i])
    local j = i
    while j > 1 and tonumber(all[2 * (j - 1)]) == score do j = j - 1 end
    for k = j, i do
      if #out >= 2 * limit then break end
      out[#out + 1] = all[2 * k - 1]
      out[#out + 1] = tostring(score)
    end
    i = j - 1
  end
  return out
elseif op == 'stats' then
  return {
    tonumber(redis.call('GET', K_DOCUMENTS) or '0')
      - tonumber(redis.call('GET', BASE .. 'dropped') or '0'),
    redis.call('ZCARD', K_SIZES),
    fp_count(),
    redis.call('SCARD', K_COMMON),
    tonumber(redis.call('GET', K_COUNTER) or '0'),
    tonumber(redis.call('GET', K_WINDOW) or '0'),
    tonumber(redis.call('GET', BASE .. 'forgotten') or '0'),
  }
end
return redis.error_reply('unknown operation ' .. tostring(op))
