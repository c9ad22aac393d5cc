-- The nshash method's shared Lua (nshash/redis_store.py): included by nshash_assign.lua
-- and nshash_read.lua.
-- Shared by both scripts: table keys, argument splitting, chunked multi-argument calls, resolve
-- and the boilerplate guard's verification. Mirrors nshash/assign.py step by step.
local K_FP, K_EXACT, K_COMMON, K_PARENT = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_SIZES, K_DOCS, K_COUNTER, K_DOCUMENTS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_VOTES, K_LIMITS = KEYS[9], KEYS[10]
local BASE = ARGV[1]
-- Set by the assignment script when the store has a retention window (see below).
local WINDOWED = false
local CHUNK = 4000
-- nshash.text.fingerprint.NO_LIMIT: 2^53, exact as a Lua number, above every sketch value.
local NO_LIMIT = 9007199254740992
-- 2^(53 - 31): a narrow sketch value is a 53-bit one divided by this, rounded down.
local NARROW_DIV = 4194304

local function gs(g) return string.format('%d', g) end
local function zm(g) return string.format('%015d', g) end

-- The layouts these scripts read and write: 3, records with packed anchors and first members
-- in the split table o; 4, the same with narrow sketches (NARROW: each value's top 31 bits,
-- nshash.text.fingerprint.narrow, which a set of them keeps as 32-bit integers). A write marks
-- the prefix with its layout ({P}:layout): a new prefix gets 4; one that holds groups from
-- before the mark, 3 (its sketches are 53-bit), and keeps it. A prefix marked with a later
-- layout was written by a newer nshash, whose tables these scripts would misread, so every
-- call refuses it. (Clients from before the mark cannot check it: upgrade every client of a
-- prefix together.)
local LAYOUT, WIDE_LAYOUT = 4, 3
local NARROW = true
local function check_layout(write)
  local key = BASE .. 'layout'
  local found = tonumber(redis.call('GET', key) or '0') or LAYOUT + 1
  if found > LAYOUT then
    error({err = string.format('LAYOUT %s is %s: this prefix was written by a newer nshash '
      .. '(this one reads layout %d); upgrade this client', key, tostring(found), LAYOUT)})
  end
  if found == 0 then
    found = redis.call('EXISTS', K_COUNTER) == 1 and WIDE_LAYOUT or LAYOUT
    if write then redis.call('SET', key, found) end
  elseif write and found < WIDE_LAYOUT then
    found = WIDE_LAYOUT
    redis.call('SET', key, found)
  end
  NARROW = found >= LAYOUT
end

-- SMISMEMBER key items[1..n] (n defaults to all), in chunks (unpack has a stack limit).
local function smis(key, items, n)
  n = n or #items
  if n == 0 then return {} end
  if n <= CHUNK then return redis.call('SMISMEMBER', key, unpack(items, 1, n)) end
  local out = {}
  for i = 1, n, CHUNK do
    local part = redis.call('SMISMEMBER', key, unpack(items, i, math.min(i + CHUNK - 1, n)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- cmd key items[first..last], in chunks (unpack has a stack limit)
local function push(cmd, key, items, first, last)
  first, last = first or 1, last or #items
  for i = first, last, CHUNK do
    redis.call(cmd, key, unpack(items, i, math.min(i + CHUNK - 1, last)))
  end
end

-- The anchor, exact-text and vote tables, and each group's first member, split. A store made
-- before the split keeps each of the first three in one hash (K_FP, K_EXACT, K_VOTES: ~90
-- bytes a field); since, each is split over small hashes {P}:<f|x|v|o>:<bucket>, which Redis
-- keeps as compact listpacks (~15 bytes a field) while each holds at most
-- hash-max-listpack-entries fields (128 by default). The split grows with the table by linear
-- hashing: a field's number x is its last 9 digits; at level L with split pointer p its
-- bucket is x mod 2^L, or x mod 2^(L + 1) where that is below p. Once the table holds more
-- than FILL fields a bucket on average, bucket p splits in two and p moves on; when p reaches
-- 2^L the level becomes L + 1. So a bucket holds about FILL to 2 FILL fields, whatever the
-- table's size. {P}:split keeps "fields level pointer" for each
-- table (f, x, v, o). The layout is read once a call: K_FP exists only in the old one (every
-- document writes an anchor), which keeps first members in the one hash K_FIRST.
local SPLIT_KEY = BASE .. 'split'
local FILL = 16
local K_FIRST = BASE .. 'first'
local CODE = {[K_FP] = 'f', [K_EXACT] = 'x', [K_VOTES] = 'v', [K_FIRST] = 'o'}
local FLAT = nil
local STATE = {}

local function flat()
  if FLAT == nil then FLAT = redis.call('EXISTS', K_FP) == 1 end
  return FLAT
end

local CHANGED = false

-- Table t's {fields, level, pointer}: the four tables' read at the first need of a call; a
-- split writes its table's at once, a count that only changed is written back by save_split
-- once the call has made its writes.
local function state(t)
  if not STATE[t] then
    local vs = redis.call('HMGET', SPLIT_KEY, 'f', 'x', 'v', 'o')
    for i, table_key in ipairs({K_FP, K_EXACT, K_VOTES, K_FIRST}) do
      local s = {0, 4, 0}
      if vs[i] then
        local n, d, p = string.match(vs[i], '^(%d+) (%d+) (%d+)$')
        s = {tonumber(n), tonumber(d), tonumber(p)}
      end
      STATE[table_key] = s
    end
  end
  return STATE[t]
end

local function state_text(s) return string.format('%d %d %d', s[1], s[2], s[3]) end

local function save_split()
  if not CHANGED then return end
  local out = {}
  for t, s in pairs(STATE) do
    out[#out + 1] = CODE[t]
    out[#out + 1] = state_text(s)
  end
  redis.call('HSET', SPLIT_KEY, unpack(out))
  CHANGED = false
end

-- The bucket of field h (a decimal) at level d with split pointer p.
local function bucket(h, d, p)
  local x = tonumber(string.sub(h, -9)) or 0
  local b = x % 2 ^ d
  if b < p then b = x % 2 ^ (d + 1) end
  return b
end

-- BASE .. code .. ':' of each table, made once a call.
local PREFIX = {}
for t, c in pairs(CODE) do PREFIX[t] = BASE .. c .. ':' end

local function bucket_key(t, b) return PREFIX[t] .. string.format('%d', b) end

-- The key that holds field h of table t (K_FP, K_EXACT, K_VOTES or K_FIRST).
-- Remembered within a call (an anchor is looked up, then set; a vote read, then written)
-- until the table's next split.
local AT = {}

local function at(t, h)
  if flat() then return t end
  local memo = AT[t]
  if not memo then
    memo = {}
    AT[t] = memo
  end
  local key = memo[h]
  if not key then
    local s = state(t)
    key = bucket_key(t, bucket(h, s[2], s[3]))
    memo[h] = key
  end
  return key
end

-- Split bucket p of table t in two: its fields of x mod 2^(L + 1) = p + 2^L move there.
local function split_one(t, s)
  local d, p = s[2], s[3]
  local old, new = bucket_key(t, p), bucket_key(t, p + 2 ^ d)
  local items = redis.call('HGETALL', old)
  local moved, fields, m, f = {}, {}, 0, 0
  for i = 1, #items, 2 do
    local h = items[i]
    if bucket(h, d, p + 1) ~= p then
      m = m + 1
      moved[m] = h
      fields[f + 1], fields[f + 2] = h, items[i + 1]
      f = f + 2
    end
  end
  if #moved > 0 then
    push('HSET', new, fields)
    push('HDEL', old, moved)
  end
  p = p + 1
  if p == 2 ^ d then d, p = d + 1, 0 end
  s[2], s[3] = d, p
  AT[t] = nil
  -- Kept at once: the moved fields are found only through the new pointer.
  redis.call('HSET', SPLIT_KEY, CODE[t], state_text(s))
end

-- Table t gained (or, negative, lost) `by` fields: split while it is past FILL a bucket.
local function grew(t, by)
  if by == 0 or flat() then return end
  local s = state(t)
  s[1] = s[1] + by
  while s[1] > FILL * (2 ^ s[2] + s[3]) do split_one(t, s) end
  CHANGED = true
end

local function tget(t, h) return redis.call('HGET', at(t, h), h) end

local function tset(t, h, v) grew(t, redis.call('HSET', at(t, h), h, v)) end

local function tdel(t, h) grew(t, -redis.call('HDEL', at(t, h), h)) end

-- The doc ids of group g in arrival order, at most `most` (nil or 0: all): the first, kept in
-- K_FIRST when the group was made (one small field where a list key took ~140 bytes), then
-- the list {P}:m:<id> of the rest (a group made before K_FIRST keeps them all there).
local function members_of(g, most)
  local first = tget(K_FIRST, gs(g))
  local out = first and {first} or {}
  local wanted = most and most > 0
  if wanted and #out >= most then return out end
  local stop = wanted and most - #out - 1 or -1
  for _, m in ipairs(redis.call('LRANGE', BASE .. 'm:' .. gs(g), 0, stop)) do
    out[#out + 1] = m
  end
  return out
end

-- The group ids of anchors[1..n] (false where none), as HMGET answers.
local function fp_get(anchors)
  if #anchors == 0 then return {} end
  if flat() then return redis.call('HMGET', K_FP, unpack(anchors)) end
  local out = {}
  for i = 1, #anchors do out[i] = tget(K_FP, anchors[i]) end
  return out
end

-- Set each anchor of fields (anchor, id, anchor, id, ...).
local function fp_set(fields)
  if #fields == 0 then return end
  if flat() then
    redis.call('HSET', K_FP, unpack(fields))
    return
  end
  for i = 1, #fields, 2 do tset(K_FP, fields[i], fields[i + 1]) end
end

local function fp_count()
  if flat() then return redis.call('HLEN', K_FP) end
  return state(K_FP)[1]
end

-- Canonical ids found so far in this call (a document's anchors mostly hit one group, each
-- hit was an HGET of K_PARENT); a write to K_PARENT empties it (unresolve).
local RESOLVED = {}

local function resolve(g)
  if type(g) == 'number' then g = gs(g) end
  local known = RESOLVED[g]
  if known then return known end
  local first = g
  local p = redis.call('HGET', K_PARENT, g)
  while p do
    g = p
    p = redis.call('HGET', K_PARENT, g)
  end
  RESOLVED[first] = tonumber(g)
  return RESOLVED[first]
end

local function unresolve() RESOLVED = {} end

-- Activity: widen a group's first/last seen, and move a merged group's hours to its root.
local K_SEEN = BASE .. 'seen'
local function widen(g, f, l)
  local s = redis.call('HGET', K_SEEN, gs(g))
  if s then
    local a, b = string.match(s, '^(%d+) (%d+)$')
    f, l = math.min(f, tonumber(a)), math.max(l, tonumber(b))
  end
  redis.call('HSET', K_SEEN, gs(g), string.format('%d %d', f, l))
end

local function move_activity(g, root)
  local ga = BASE .. 'ha:' .. gs(g)
  local hs = redis.call('HGETALL', ga)
  if #hs > 0 then
    local ra = BASE .. 'ha:' .. gs(root)
    for i = 1, #hs, 2 do
      local hk = BASE .. 'hh:' .. hs[i]
      redis.call('ZREM', hk, zm(g))
      redis.call('ZINCRBY', hk, hs[i + 1], zm(root))
      redis.call('HINCRBY', ra, hs[i], hs[i + 1])
    end
    redis.call('DEL', ga)
  end
  local sg = redis.call('HGET', K_SEEN, gs(g))
  if sg then
    redis.call('HDEL', K_SEEN, gs(g))
    local f, l = string.match(sg, '^(%d+) (%d+)$')
    widen(root, tonumber(f), tonumber(l))
  end
end

-- The document's hashes: ARGV[s] is a JSON array of its sentences then its sketch, ARGV[s + 1]
-- the number of sentences (cjson splits in C, several times faster than string.gmatch). One
-- SMISMEMBER tells which are common: of the sentences only, or of all.
-- ARGV[s + 2] is the sketch's limit, after an 'n' when the client narrowed the sketch
-- (nshash.text.fingerprint.narrow) for a prefix it read as layout 4. A client that sent it
-- whole to a prefix of narrow sketches gets it narrowed here, the same way; one that narrowed
-- it for a prefix of 53-bit sketches is refused (check_width). Returns all, ns, the flags and
-- the limit.
local function check_width(s)
  if string.sub(ARGV[s + 2], 1, 1) == 'n' and not NARROW then
    error({err = 'WIDTH this prefix keeps 53-bit sketches (layout 3), but the client narrowed'
      .. ' the document\'s for layout 4; nothing was written: send it again'})
  end
end

-- Each sketch value's place in the page (DocPrint.places), for the frame rule: ARGV[p], a JSON
-- list in the order of the sketch values sent ('' or no p: none). Filled by hashes().
local PLACES = nil

-- fingerprint.LONG_PAGE: a page whose values reach this far into its stream is long.
local LONG_PAGE = 8000

-- How far the document's sketch values reach into its stream (0 without places).
local REACH = nil
local function reach()
  if not REACH then
    REACH = 0
    for _, p in pairs(PLACES or {}) do
      if p > REACH then REACH = p end
    end
  end
  return REACH
end

local function hashes(s, with_sketch, p)
  local all, ns = cjson.decode(ARGV[s]), tonumber(ARGV[s + 1])
  local sent = ARGV[s + 2]
  local narrowed = string.sub(sent, 1, 1) == 'n'
  local limit = tonumber(narrowed and string.sub(sent, 2) or sent)
  local placed = p and ARGV[p] and ARGV[p] ~= ''
  if placed and not (NARROW and not narrowed) then  -- (narrowed here: the places do not align)
    local at = cjson.decode(ARGV[p])
    if #at == #all - ns then
      PLACES = {}
      for i = ns + 1, #all do PLACES[all[i]] = at[i - ns] end
    end
  end
  if NARROW and not narrowed then
    if limit < NO_LIMIT then limit = math.floor(limit / NARROW_DIV) end
    local values, last, kept, total = {}, nil, 0, #all
    for i = ns + 1, total do
      local v = math.floor(tonumber(all[i]) / NARROW_DIV)
      if v ~= last then
        values[#values + 1] = v
        if v < limit then kept = kept + 1 end
      end
      last = v
      all[i] = nil
    end
    -- Every value at the limit (never seen on real text): the limit moves past them.
    if kept == 0 and #values > 0 then limit = values[#values] + 1 end
    local w = ns
    for i = 1, #values do
      if values[i] < limit then
        w = w + 1
        all[w] = string.format('%d', values[i])
      end
    end
  end
  return all, ns, smis(K_COMMON, all, not with_sketch and ns or nil), limit
end

-- _select: the first n sentences that are not common, or the first n if all are; twice n
-- for a long page (fingerprint.anchors_wanted).
local function select_anchors(all, ns, flags, n)
  if reach() >= LONG_PAGE then n = 2 * n end
  local anchors, idx = {}, {}
  for i = 1, ns do
    if flags[i] == 0 then
      anchors[#anchors + 1] = all[i]
      idx[#idx + 1] = i
      if #anchors == n then break end
    end
  end
  if #anchors == 0 then
    for i = 1, math.min(n, ns) do
      anchors[i] = all[i]
      idx[i] = i
    end
  end
  return anchors, idx
end

-- The sketch (all[ns + 1..]) without its common hashes.
local function live_sketch(all, ns, flags)
  local live = {}
  for i = ns + 1, #all do
    if flags[i] == 0 then live[#live + 1] = all[i] end
  end
  return live
end

-- _candidates: canonical group -> the anchors that hit it, in order of first hit.
local function candidates(anchors, gids)
  local order, hits = {}, {}
  for i = 1, #anchors do
    local g = gids[i]
    if g then
      local r = resolve(g)
      local list = hits[r]
      if not list then
        list = {}
        hits[r] = list
        order[#order + 1] = r
      end
      list[#list + 1] = anchors[i]
    end
  end
  return order, hits
end

-- A group's sketch limit (group_sketch's second value).
local function limit_of(g)
  local v = redis.call('HGET', K_LIMITS, gs(g))
  if v then return tonumber(v) end
  return NO_LIMIT
end

-- The members of set key below bound (sketch values are exact Lua numbers).
local function below(key, bound)
  local out = {}
  for _, v in ipairs(redis.call('SMEMBERS', key)) do
    if tonumber(v) < bound then out[#out + 1] = v end
  end
  return out
end

-- nshash.methods.nshash.assign.frame_of: how many of a page's shared values are its frame,
-- given f[i] (1: shared) for its n compared values in page order and the group's count.
local END_LEAST, FRAME_LEAST, FRAME_GAP, FRAME_SHARE, END_SHARE = 6, 12, 3, 4, 4
local END_PART, END_RUN = 4, 2  -- assign.END_PART, END_RUN
local TAIL_VOTES = 4  -- assign.TAIL_VOTES
local LONGER, LONGER_FROM = 4, 128  -- assign.LONGER, assign.LONGER_FROM
-- assign.EDIT_LOW, EDIT_LEAST, EDIT_COVER, EDIT_DENSITY, EDIT_GAP (edits_of)
local EDIT_LOW, EDIT_LEAST, EDIT_COVER, EDIT_DENSITY, EDIT_GAP = 0.3, 24, 0.6, 0.25, 9
local EDIT_TRIMS, EDIT_RUN = 2, 6  -- assign.EDIT_TRIMS, EDIT_RUN
-- assign.TOP_SHARE, TOP_FEW, GROUP_OWN, TOP_LOW, TOP_LEAST (and LONG_PAGE, above)
local TOP_SHARE, TOP_FEW, GROUP_OWN, TOP_LOW, TOP_LEAST = 8, 8, 8, 0.2, 6
local function frame_of(f, n, theirs)
  if n < END_LEAST or f[n] ~= 1 then return 0 end
  local lead, trail, gap, run = 0, 0, 0, 0
  while lead < n and f[lead + 1] == 1 do lead = lead + 1 end
  if lead == n then return 0 end
  if lead == 0 then -- the page's end matter: every shared value below its own head
    local head, held = 0, 0
    while f[head + 1] ~= 1 do head = head + 1 end
    for i = head + 1, n do held = held + f[i] end
    if head >= FRAME_GAP and head * END_SHARE >= n
        and (held * 2 <= theirs or held * END_PART <= n
             or (held * END_RUN < n and held == n - head)) then
      return held
    end
    return 0
  end
  if n < FRAME_LEAST then return 0 end
  while f[n - trail] == 1 do trail = trail + 1 end
  for i = lead + 1, n - trail do
    if f[i] == 1 then run = 0 else run = run + 1 end
    if run > gap then gap = run end
  end
  if gap < FRAME_GAP or gap * FRAME_SHARE < n or gap < lead or gap * 2 < n - lead - trail then
    return 0
  end
  if (lead + trail) * 4 <= theirs * 3 then return lead + trail end
  return 0
end

-- nshash.methods.nshash.assign.edits_of: how many of a page's values not shared are scattered
-- edits, given f[i] (1: shared) for its n compared values in page order; the side of a too
-- long unshared run holding fewer shared values is cut off, EDIT_TRIMS times at most, and the
-- unshared runs left are EDIT_RUN long at most on average.
local function edits_of(f, n)
  local first, last = 1, n
  while first <= n and f[first] ~= 1 do first = first + 1 end
  if first > n then return 0 end
  while f[last] ~= 1 do last = last - 1 end
  local span, held, runs = 0, 0, 0
  local trim = 0
  while true do
    local run, gap, gap_end = 0, 0, first
    span, held, runs = last - first + 1, 0, 0
    for i = first, last do
      if f[i] == 1 then
        held, run = held + 1, 0
      else
        run = run + 1
        if run == 1 then runs = runs + 1 end
        if run > gap then gap, gap_end = run, i end
      end
    end
    if gap * EDIT_GAP <= span then break end
    if trim == EDIT_TRIMS then return 0 end
    trim = trim + 1
    local before = 0
    for i = first, gap_end - gap do before = before + f[i] end
    if before * 2 >= held then last = gap_end - gap else first = gap_end + 1 end
  end
  if span < EDIT_LEAST or span < EDIT_COVER * n or held < EDIT_DENSITY * span then return 0 end
  if span - held <= EDIT_RUN * runs then return span - held end
  return 0
end

-- assign.page_flags for the compared values mine[1..n] (ascending), flags[i] 1 when shared:
-- the flags in page order (PLACES; ties by value), or nil when a value has no place. With
-- `last_shared`, nil too when the last in page order is not shared (no frame then).
local function page_flags(mine, flags, last_shared)
  local n = #mine
  local last, pl
  for i = 1, n do
    local p = PLACES[mine[i]]
    if not p then return nil end
    if not last or p >= pl then last, pl = i, p end
  end
  if last_shared and flags[last] ~= 1 then return nil end
  local order = {}
  for i = 1, n do order[i] = i end
  table.sort(order, function(a, b)
    local x, y = PLACES[mine[a]], PLACES[mine[b]]
    if x ~= y then return x < y end
    return a < b
  end)
  local f = {}
  for i = 1, n do f[i] = flags[order[i]] end
  return f
end

-- assign.misses_top for the compared values mine[1..n] (ascending), flags[i] 1 when shared,
-- against a group of which `theirs` values were compared and `same` shared (after a frame or
-- edits): a page whose values reach LONG_PAGE into its stream, sharing at most 1/TOP_FEW of
-- its first 1/TOP_SHARE (page order) with a group of which 1/GROUP_OWN is its own.
-- The top of a long page (assign._top_flags): how many of its first 1/TOP_SHARE compared
-- values (page order) are shared, and how many there are; nil for a page that is not long.
local function top_flags(mine, flags)
  if not PLACES or reach() < LONG_PAGE then return nil end
  local f = page_flags(mine, flags, false)
  if not f or #f == 0 then return nil end
  local top = math.min(math.max(1, math.floor(#f / TOP_SHARE)), #f)
  local few = 0
  for i = 1, top do few = few + f[i] end
  return few, top
end

local function misses_top(mine, flags, same, theirs)
  if (theirs - same) * GROUP_OWN < theirs then return false end
  local few, top = top_flags(mine, flags)
  return few ~= nil and few * TOP_FEW <= top
end

-- assign.top_share: the shared count and size of a long page's top where it holds at least
-- TOP_LEAST values compared, else nil.
local function top_share(mine, flags)
  local few, top = top_flags(mine, flags)
  if few == nil or top < TOP_LEAST then return nil end
  return few, top
end

-- assign.set_aside for the compared values mine[1..n] (ascending), flags[i] 1 when shared:
-- read in page order when the last there is shared.
local function set_aside(mine, flags, theirs)
  if not PLACES or #mine < END_LEAST then return 0 end
  local f = page_flags(mine, flags, true)
  if not f then return 0 end
  return frame_of(f, #mine, theirs)
end

-- assign.edits_in for the compared values mine[1..n] (ascending), flags[i] 1 when shared.
local function edits_in(mine, flags)
  if not PLACES or #mine < EDIT_LEAST then return 0 end
  local f = page_flags(mine, flags, false)
  if not f then return 0 end
  return edits_of(f, #mine)
end

-- _verify: the document's live sketch (ascending) against the group's, both cut at the
-- smaller limit, common values left out of both. Returns the score (0 under min_overlap),
-- the shared values, the two sizes compared, the frame set aside, the edits left out and
-- whether a long page's top missed the group (assign.unframed: a frame looked for only where
-- the score reaches theta, edits only where it is a little short of it, either already left
-- out of the score and the two sizes; a long page that misses the group's text at its top
-- scores 0). With no value shared the score is 0 whatever the group's size, so that count (the
-- costly part: each of the group's values looked up in the common set) is made only when
-- `sizes` asks for it (explain shows it); 0 is returned.
local function verify(g, live, doc_limit, min_overlap, theta, sizes)
  local sk = BASE .. 's:' .. gs(g)
  local glimit = limit_of(g)
  local limit = math.min(doc_limit, glimit)
  local mine = live
  if limit < doc_limit then
    mine = {}
    for _, v in ipairs(live) do
      if tonumber(v) >= limit then break end
      mine[#mine + 1] = v
    end
  end
  -- A shared value is below the limit and not common, so the group's count includes it.
  local shared, flags = {}, nil
  if #mine > 0 then
    flags = smis(sk, mine)
    for i = 1, #mine do
      if flags[i] == 1 then shared[#shared + 1] = mine[i] end
    end
  end
  if #shared == 0 and not sizes then return 0, shared, #mine, 0, 0 end
  local gsize
  if limit >= glimit then
    gsize = redis.call('SCARD', sk)
    if gsize > 0 then gsize = gsize - redis.call('SINTERCARD', 2, sk, K_COMMON) end
  else
    local theirs = below(sk, limit)
    gsize = 0
    for _, f in ipairs(smis(K_COMMON, theirs)) do
      if f == 0 then gsize = gsize + 1 end
    end
  end
  local function score_of(same, m, t)
    local smaller = math.min(m, t)
    if smaller == 0 or same < math.min(min_overlap, smaller) then return 0 end
    return same / smaller
  end
  local same, m = #shared, #mine
  local score = score_of(same, m, gsize)
  local unshared = m - same
  -- the counts judged (after a frame or edits are left out), the frame and the edits
  local js, jm, jt, frame, edits = same, m, gsize, 0, 0
  if score >= theta and unshared >= FRAME_GAP and unshared * FRAME_SHARE >= m then
    frame = set_aside(mine, flags, gsize)
    if frame > 0 then
      js, jm, jt = same - frame, m - frame, gsize - frame
      score = score_of(js, jm, jt)
    end
  elseif score >= EDIT_LOW and score < theta and m >= EDIT_LEAST then
    edits = edits_in(mine, flags)
    if edits > 0 then
      jm, jt = m - edits, gsize - math.min(edits, gsize - same)
      score = score_of(same, jm, jt)
    end
  end
  -- top: 1 for a long page refused on its top, 'few/size' for one scored by its top
  local top = 0
  if score >= theta then
    if misses_top(mine, flags, js, jt) then score, top = 0, 1 end
  elseif score >= TOP_LOW and flags then
    local few, size = top_share(mine, flags)
    if few and few >= theta * size then score, top = few / size, few .. '/' .. size end
  end
  return score, shared, jm, jt, frame, edits, top
end

-- extends (assign.extends): whether a document of n sketch values, complete below limit, that
-- joins the group whose sketch set is sk (its limit lr) adds them to it: not when the group
-- holds LONGER_FROM values or more and the document more than LONGER times the group's
-- values below its limit (a page far longer than the group's text).
local function extends(sk, lr, n, limit)
  if limit >= lr then return true end
  local values = redis.call('SMEMBERS', sk)
  if #values < LONGER_FROM then return true end
  local below = 0
  for _, v in ipairs(values) do
    if tonumber(v) < limit then below = below + 1 end
  end
  return n <= LONGER * below
end

-- story_span (assign.story_span): the places of the first and the last of the document's
-- values shared with the groups it joins (accepted, their shared values in shared_of), when the
-- group it joins (sk, after merges) takes only what lies between them: it holds LONGER_FROM
-- values or more and the document has places; nil where it takes every value.
local function story_span(sk, accepted, shared_of)
  if not PLACES or redis.call('SCARD', sk) < LONGER_FROM then return nil end
  local first, last
  for _, g in ipairs(accepted) do
    for _, v in ipairs(shared_of[g]) do
      local p = PLACES[v]
      if p then
        if not first or p < first then first = p end
        if not last or p > last then last = p end
      end
    end
  end
  return first, last
end

-- combine_sketch for a group kept in Redis: drop values at or past bound (old is the limit the
-- set had), then keep the cap smallest; store the new limit.
local function settle(g, old, bound, cap)
  local sk = BASE .. 's:' .. gs(g)
  if bound < old then
    local drop = {}
    for _, v in ipairs(redis.call('SMEMBERS', sk)) do
      if tonumber(v) >= bound then drop[#drop + 1] = v end
    end
    if #drop > 0 then push('SREM', sk, drop) end
  end
  if redis.call('SCARD', sk) > cap then
    local values = redis.call('SMEMBERS', sk)
    local nums = {}
    for i, v in ipairs(values) do nums[i] = tonumber(v) end
    table.sort(nums)
    bound = nums[cap + 1]
    local drop = {}
    for i = cap + 1, #nums do drop[#drop + 1] = string.format('%d', nums[i]) end
    push('SREM', sk, drop)
  end
  if bound < NO_LIMIT then
    redis.call('HSET', K_LIMITS, gs(g), string.format('%d', bound))
  else
    redis.call('HDEL', K_LIMITS, gs(g))
  end
end

-- vote (assign.vote): the two groups were kept apart on each hash of hs; a hash seen to keep apart `need`
-- distinct groups (after merges) becomes common.
-- The hashes vote made common in this call (assign.tail_of reads the common ones as of now).
local MADE_COMMON = {}
local function vote(hs, g1, g2, need)
  for _, h in ipairs(hs) do
    local seen, list = {}, {}
    local function note(g)
      if not seen[g] then seen[g] = true; list[#list + 1] = g end
    end
    local old = tget(K_VOTES, h)
    if old then
      for g in string.gmatch(old, '%d+') do note(tonumber(g)) end
    end
    local before = #list
    note(g1)
    note(g2)
    if WINDOWED then
      for i = before + 1, #list do
        redis.call('APPEND', BASE .. 'k:' .. gs(list[i]), 'v' .. h .. ',')
      end
    end
    local done = false
    if #list >= need then
      local roots = {}
      seen = {}
      for _, g in ipairs(list) do
        local r = resolve(g)
        if not seen[r] then seen[r] = true; roots[#roots + 1] = r end
      end
      list = roots
      if #list >= need then
        redis.call('SADD', K_COMMON, h)
        tdel(K_VOTES, h)
        MADE_COMMON[h] = true
        done = true
      end
    end
    if not done then
      table.sort(list)
      for i, g in ipairs(list) do list[i] = gs(g) end
      tset(K_VOTES, h, table.concat(list, ','))
    end
  end
end

-- assign.tail_of: of the document's live values (not common when the call began) below its
-- limit, those not made common since, the last TAIL_VOTES in page order (ties by value),
-- ascending; none without places.
local function tail_of(live, limit)
  if not PLACES then return {} end
  local at = {}
  for _, v in ipairs(live) do
    if not MADE_COMMON[v] and PLACES[v] and tonumber(v) < limit then at[#at + 1] = v end
  end
  table.sort(at, function(a, b)
    local x, y = PLACES[a], PLACES[b]
    if x ~= y then return x < y end
    return tonumber(a) < tonumber(b)
  end)
  local out = {}
  for i = math.max(1, #at - TAIL_VOTES + 1), #at do out[#out + 1] = at[i] end
  table.sort(out, function(a, b) return tonumber(a) < tonumber(b) end)
  return out
end

-- kinship: how much of the smaller of two groups' live sketches (below both limits) the
-- other holds.
local function kinship(a, b)
  local limit = math.min(limit_of(a), limit_of(b))
  local sa = below(BASE .. 's:' .. gs(a), limit)
  local sb = below(BASE .. 's:' .. gs(b), limit)
  local fa, fb = smis(K_COMMON, sa), smis(K_COMMON, sb)
  local mine, na, nb, both = {}, 0, 0, 0
  for i, v in ipairs(sa) do
    if fa[i] == 0 then mine[v] = true; na = na + 1 end
  end
  for i, v in ipairs(sb) do
    if fb[i] == 0 then
      nb = nb + 1
      if mine[v] then both = both + 1 end
    end
  end
  local smaller = math.min(na, nb)
  if smaller == 0 then return 0 end
  return both / smaller
end

-- _choose: the best accepted group, plus any other accepted one scoring merge_theta or more
-- whose kinship with the best reaches merge_guard; sorted, so the first is the canonical id.
local function choose(order, scores, theta, merge_theta, merge_guard)
  local accepted = {}
  for _, g in ipairs(order) do
    if scores[g] >= theta then accepted[#accepted + 1] = g end
  end
  if #accepted <= 1 then return accepted end
  local best = accepted[1]
  for _, g in ipairs(accepted) do
    if scores[g] > scores[best] or (scores[g] == scores[best] and g < best) then best = g end
  end
  local chosen = {}
  for _, g in ipairs(accepted) do
    if g == best or (scores[g] >= merge_theta and kinship(best, g) >= merge_guard) then
      chosen[#chosen + 1] = g
    end
  end
  table.sort(chosen)
  return chosen
end

-- ARGV[i] is "theta:merge_theta:merge_guard".
local function thresholds(i)
  local theta, merge_theta, guard = string.match(ARGV[i], '^([^:]+):([^:]+):(.+)$')
  return tonumber(theta), tonumber(merge_theta), tonumber(guard)
end

local function unreadable_record()
  error({err = 'CORRUPT a document record in ' .. K_DOCS .. ' is unreadable'})
end

local function parse_record(rec)
  local nl = string.find(rec, '\n', 1, true)
  local root, has_title = string.match(rec, '^(%d+) %d+ %d+ (%d) ')
  if not (nl and root) then unreadable_record() end
  return tonumber(root), has_title == '1', nl
end

-- A record's title ('+title', or '-'): after its packed anchors ('#count' ends the header).
local function title_of(rec)
  local _, has_title, nl = parse_record(rec)
  if not has_title then return '-' end
  local count = tonumber(string.match(string.sub(rec, 1, nl - 1), ' #(%d+)')) or 0
  if #rec < nl + 8 * count then unreadable_record() end
  return '+' .. string.sub(rec, nl + 1 + 8 * count)
end

-- A record's evidence ('score code', or '-' in a record written before it was kept): the
-- header's fields after '#count'.
local function evidence_of(rec)
  local nl = string.find(rec, '\n', 1, true)
  if not nl then unreadable_record() end
  return string.match(string.sub(rec, 1, nl - 1), ' #%d+ (%S+ %d+)$') or '-'
end

-- Retention (nshash/methods/nshash/retention.py): {P}:last scores each canonical group by the
-- time of its last new document, {P}:k:<id> lists the hashes the group wrote (anchors, exact
-- texts, votes), {P}:b:<id> the ids merged into it, {P}:retention holds the window. CUTOFF
-- (nil without a window) hides the groups last seen before it.
local K_LAST, K_WINDOW = BASE .. 'last', BASE .. 'retention'
local CUTOFF = nil

-- Set CUTOFF from the store's window and the caller's clock; returns the window (or false).
local function date_groups(now)
  local w = redis.call('GET', K_WINDOW)
  if w and now then CUTOFF = now - tonumber(w) end
  return w
end

local function expired(g)
  if not CUTOFF then return false end
  local s = redis.call('ZSCORE', K_LAST, gs(resolve(g)))
  return s and tonumber(s) < CUTOFF
end

-- Group g wrote hash h in the table coded c: 'f' fp, 'x' exact, 'v' votes.
local function own(g, c, h)
  redis.call('APPEND', BASE .. 'k:' .. gs(g), c .. h .. ',')
end

-- Delete everything of canonical group g (its id is never handed out again).
local function forget(g)
  local gk = gs(g)
  -- The ids that resolve to g: a hash it wrote may have been taken by a newer group while g
  -- was expired but not yet forgotten (an expired group matches nothing).
  local ours = {[gk] = true}
  local ab = redis.call('GET', BASE .. 'b:' .. gk)
  if ab then
    for m in string.gmatch(ab, '%d+') do ours[m] = true end
  end
  local owned = redis.call('GET', BASE .. 'k:' .. gk)
  if owned then
    for c, h in string.gmatch(owned, '([fxv])([^,]+)') do
      if c == 'v' then
        local old = tget(K_VOTES, h)
        if old then
          local kept, dropped = {}, false
          for v in string.gmatch(old, '%d+') do
            if ours[v] then dropped = true else kept[#kept + 1] = v end
          end
          if dropped then
            if #kept == 0 then
              tdel(K_VOTES, h)
            else
              tset(K_VOTES, h, table.concat(kept, ','))
            end
          end
        end
      else
        local t = c == 'f' and K_FP or K_EXACT
        local v = tget(t, h)
        if v and ours[v] then tdel(t, h) end
      end
    end
  end
  local ga = BASE .. 'ha:' .. gk
  for _, hour in ipairs(redis.call('HKEYS', ga)) do
    local hk = BASE .. 'hh:' .. hour
    redis.call('ZREM', hk, zm(g))
    if redis.call('EXISTS', hk) == 0 then redis.call('ZREM', BASE .. 'hours', hour) end
  end
  redis.call('HDEL', K_SEEN, gk)
  local mk = BASE .. 'm:' .. gk
  local members = members_of(g)
  tdel(K_FIRST, gk)
  if #members > 0 then
    push('HDEL', K_DOCS, members)
    push('HDEL', BASE .. 'meta', members)
  end
  if ab then
    for m in string.gmatch(ab, '%d+') do redis.call('HDEL', K_PARENT, m) end
    unresolve()
  end
  redis.call('DEL', ga, mk, BASE .. 's:' .. gk, BASE .. 'k:' .. gk, BASE .. 'b:' .. gk)
  redis.call('HDEL', K_LIMITS, gk)
  -- its documents go with it ({P}:documents numbers the documents: it only grows)
  local size = redis.call('ZSCORE', K_SIZES, zm(g))
  if size then redis.call('INCRBY', BASE .. 'dropped', -tonumber(size)) end
  redis.call('ZREM', K_SIZES, zm(g))
  redis.call('ZREM', K_LAST, gk)
  redis.call('INCR', BASE .. 'forgotten')
end

-- Forget at most `most` groups last seen before CUTOFF, oldest first.
local function purge(most)
  local due = redis.call('ZRANGE', K_LAST, '-inf', string.format('(%d', CUTOFF), 'BYSCORE',
    'LIMIT', 0, most)
  for _, g in ipairs(due) do forget(tonumber(g)) end
end

-- A merge moves what g wrote and the ids merged into it to root.
local function merge_retention(g, root)
  redis.call('ZREM', K_LAST, gs(g))
  local gk, rk = BASE .. 'k:' .. gs(g), BASE .. 'k:' .. gs(root)
  local moved = redis.call('GET', gk)
  if moved then
    redis.call('APPEND', rk, moved)
    redis.call('DEL', gk)
  end
  local gb, rb = BASE .. 'b:' .. gs(g), BASE .. 'b:' .. gs(root)
  redis.call('APPEND', rb, gs(g) .. ',' .. (redis.call('GET', gb) or ''))
  redis.call('DEL', gb)
end

-- merge_into: group g resolves to root from now on; its sketch (combine_sketch, see settle),
-- size, members and activity move to root (and what it wrote, with a retention window).
local function merge_group(root, g, cap)
  local rsk, rmem, rz = BASE .. 's:' .. gs(root), BASE .. 'm:' .. gs(root), zm(root)
  local gsk, gmem, gz = BASE .. 's:' .. gs(g), BASE .. 'm:' .. gs(g), zm(g)
  redis.call('HSET', K_PARENT, gs(g), gs(root))
  unresolve()
  local lr, lg = limit_of(root), limit_of(g)
  if redis.call('EXISTS', gsk) == 1 then
    redis.call('SUNIONSTORE', rsk, rsk, gsk)
    redis.call('DEL', gsk)
  end
  redis.call('HDEL', K_LIMITS, gs(g))
  settle(root, math.max(lr, lg), math.min(lr, lg), cap)
  local size = redis.call('ZSCORE', K_SIZES, gz)
  if size then
    redis.call('ZREM', K_SIZES, gz)
    redis.call('ZINCRBY', K_SIZES, size, rz)
  end
  local moved = members_of(g)
  if #moved > 0 then
    push('RPUSH', rmem, moved)
    tdel(K_FIRST, gs(g))
    redis.call('DEL', gmem)
  end
  move_activity(g, root)
  if WINDOWED then merge_retention(g, root) end
end
