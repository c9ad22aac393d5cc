"""RedisStore: one shared state for many crawler processes and service replicas.

Every process that opens the same ``redis://host:port/db?prefix=NAME`` shares one set of groups,
and the answers are the ones a single serial process would give: the assignment of a document
(:func:`nshash.assign.assign`: anchor selection, candidate groups, the boilerplate guard, merges,
the exact-text table, members, ``doc_id`` replay) runs as **one Lua script call**, so Redis
applies documents one at a time, atomically, in some order, and replaying the documents serially
in that order through any other store gives identical ids. Batches are pipelined: many script
calls in one round trip (hand-packed ``EVALSHA`` commands on a pooled connection; the script
is loaded on first use and again on ``NOSCRIPT``). Lookups run a read-only script
(``#!lua flags=no-writes``), so a query can never write, and can be served by a replica.

Key layout (``P`` is the prefix, ``nshash`` by default). Every key carries the hash tag ``{P}``,
so one namespace lives in one slot, and so on one node of a Redis Cluster: point the URL at any
node and the store follows ``MOVED`` to the one that owns the slot (while a resharding migrates
that slot, calls fail with :class:`~nshash.StoreError` until it is done). Several prefixes keep
independent namespaces in one Redis, and spread over the nodes of a cluster.

A fingerprint (an unsigned 64-bit integer) is written as a *signed* 64-bit decimal (minus 2**64
when it is 2**63 or more): Redis then keeps a set of them as a compact ``intset``, and the
scripts never do arithmetic on one (Lua numbers are doubles): to them a fingerprint is a
string. Sketch values have 53 bits, so the scripts compare them as numbers exactly. Group ids
are small decimal integers.

=================  =======  ==================================================================
key                type     holds
=================  =======  ==================================================================
``{P}:fp``         hash     anchor fingerprint -> group id (first group that used it; never moved)
``{P}:exact``      hash     whole-text fingerprint -> group id
``{P}:common``     set      hashes learned to be boilerplate (kept ``votes`` groups apart)
``{P}:votes``      hash     hash -> the groups kept apart on it so far, comma-separated
``{P}:parent``     hash     merged group id -> the id it merged into (follow to the canonical id)
``{P}:sizes``      zset     canonical group id, zero-padded to 15 digits -> minus its size, so
                            ``ZRANGE BYSCORE`` lists the largest groups first, ties by id
``{P}:docs``       hash     doc id -> ``"root dup seq has_title merged,ids anchor,fps\ntitle"``:
                            the answer given and the document's applied sequence number
``{P}:counter``    string   the last group id handed out (INCR; never goes back)
``{P}:documents``  string   how many documents were added; each one's value is its sequence number
``{P}:s:<id>``     set      the sketch (sampled shingle hashes) of canonical group ``id``
``{P}:limits``     hash     group id -> its sketch's limit, for groups whose sketch was cut
``{P}:m:<id>``     list     doc ids of canonical group ``id``, in arrival order
``{P}:hh:<hour>``  zset     canonical group id (zero-padded) -> its documents added in that
                            hour (hours since the epoch); a window is one ``ZUNION``
``{P}:ha:<id>``    hash     hour -> documents of canonical group ``id`` (a merge moves them)
``{P}:hours``      zset     every hour that has a ``hh`` key (score and member: the hour)
``{P}:seen``       hash     canonical group id -> ``"first last"`` seen (epoch seconds)
``{P}:meta``       hash     doc id -> JSON ``[added, url, site]`` (documents given a DocMeta)
=================  =======  ==================================================================

Failures: a connection that cannot be made or answered within the timeouts (1 s each by
default, no retries) raises :class:`~nshash.StoreUnavailableError`; the next call reconnects by
itself. After such an error the outcome of a write is unknown (Redis may have applied it just
before the connection broke); send it again with the same ``doc_id`` to make it safe. Other
Redis errors raise :class:`~nshash.StoreError`. The password of a URL never appears in a repr or
a message. Needs Redis 7.0 or newer (``SMISMEMBER``, ``SINTERCARD``, script flags).
"""

from __future__ import annotations

import hashlib
import json
import ssl
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.exceptions import MovedError, NoScriptError
from redis.retry import Retry

from .assign import MatchPolicy, finish_explanation, judged
from .errors import (
    ConfigError,
    NSHashError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
)
from .fingerprint import DocPrint
from .results import (
    HOUR,
    Activity,
    Assignment,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    Member,
    StoreStats,
)
from .store import Store, mask_url

__all__ = ["RedisStore"]

#: Seconds to wait for a TCP connection and for each reply; no retries, so a dead or hung
#: server is reported within about this long.
DEFAULT_TIMEOUT = 1.0

#: How many Redis Cluster MOVED redirections one call follows.
_MAX_REDIRECTS = 3

#: Pipelined script calls sent in one round trip by :meth:`RedisStore.assign_many`.
PIPELINE_CHUNK = 500

#: Options :meth:`RedisStore.from_url` accepts (in the URL query or as keywords).
_OPTIONS = ("prefix", "db", "socket_timeout", "socket_connect_timeout", "max_connections")

#: More options for ``rediss://``: a private CA, a client certificate, verification.
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")

#: The table keys every script receives, in this order (KEYS[1..10]).
_TABLES = (
    "fp",
    "exact",
    "common",
    "parent",
    "sizes",
    "docs",
    "counter",
    "documents",
    "votes",
    "limits",
)

# Shared by both scripts: table keys, argument splitting, chunked multi-argument calls, resolve
# and the boilerplate guard's verification. Mirrors nshash/assign.py step by step.
_LUA_COMMON = r"""
local K_FP, K_EXACT, K_COMMON, K_PARENT = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_SIZES, K_DOCS, K_COUNTER, K_DOCUMENTS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local K_VOTES, K_LIMITS = KEYS[9], KEYS[10]
local BASE = ARGV[1]
local CHUNK = 4000
-- nshash.fingerprint.NO_LIMIT: 2^53, exact as a Lua number, above every sketch value.
local NO_LIMIT = 9007199254740992

local function gs(g) return string.format('%d', g) end
local function zm(g) return string.format('%015d', g) end

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

local function resolve(g)
  if type(g) == 'number' then g = gs(g) end
  local p = redis.call('HGET', K_PARENT, g)
  while p do
    g = p
    p = redis.call('HGET', K_PARENT, g)
  end
  return tonumber(g)
end

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
local function hashes(s, with_sketch)
  local all, ns = cjson.decode(ARGV[s]), tonumber(ARGV[s + 1])
  return all, ns, smis(K_COMMON, all, not with_sketch and ns or nil)
end

-- _select: the first n sentences that are not common, or the first n if all are.
local function select_anchors(all, ns, flags, n)
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

-- _verify: the document's live sketch (ascending) against the group's, both cut at the
-- smaller limit, common values left out of both. Returns the score (0 under min_overlap),
-- the shared values and the two sizes compared.
local function verify(g, live, doc_limit, min_overlap)
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
  local shared = {}
  if #mine > 0 and gsize > 0 then
    local flags = smis(sk, mine)
    for i = 1, #mine do
      if flags[i] == 1 then shared[#shared + 1] = mine[i] end
    end
  end
  local smaller = math.min(#mine, gsize)
  if smaller == 0 or #shared < math.min(min_overlap, smaller) then
    return 0, shared, #mine, gsize
  end
  return #shared / smaller, shared, #mine, gsize
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

-- _vote: the two groups were kept apart on each hash of hs; a hash seen to keep apart `need`
-- distinct groups (after merges) becomes common.
local function vote(hs, g1, g2, need)
  for _, h in ipairs(hs) do
    local seen, list = {}, {}
    local function note(g)
      if not seen[g] then seen[g] = true; list[#list + 1] = g end
    end
    local old = redis.call('HGET', K_VOTES, h)
    if old then
      for g in string.gmatch(old, '%d+') do note(tonumber(g)) end
    end
    note(g1)
    note(g2)
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
        redis.call('HDEL', K_VOTES, h)
        done = true
      end
    end
    if not done then
      table.sort(list)
      for i, g in ipairs(list) do list[i] = gs(g) end
      redis.call('HSET', K_VOTES, h, table.concat(list, ','))
    end
  end
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

local function parse_record(rec)
  local nl = string.find(rec, '\n', 1, true)
  local root, has_title = string.match(rec, '^(%d+) %d+ %d+ (%d) ')
  if not (nl and root) then
    error({err = 'CORRUPT a document record in ' .. K_DOCS .. ' is unreadable'})
  end
  return tonumber(root), has_title == '1', nl
end

local function title_of(rec)
  local _, has_title, nl = parse_record(rec)
  if not has_title then return '-' end
  return '+' .. string.sub(rec, nl + 1)
end
"""

# ARGV: base, n, theta:merge_theta:merge_guard, min_overlap, sketch_cap, votes, exact, hashes,
# anchor count, sketch limit, doc ('-' | '+id'), title ('-' | '+title'), activity ('-' |
# 'added hour') and the doc's JSON metadata (kept with a doc id). Returns one string,
# cheap to parse: "root duplicate sequence anchor,positions merged,ids", or "R root record"
# when the doc id was seen before.
_LUA_ASSIGN = (
    "#!lua\n"
    + _LUA_COMMON
    + r"""
local n = tonumber(ARGV[2])
local theta, merge_theta, merge_guard = thresholds(3)
local min_overlap, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local need = tonumber(ARGV[6])
local exact = ARGV[7]
local doc_limit = tonumber(ARGV[10])
local doc_id, title = nil, nil
if string.sub(ARGV[11], 1, 1) == '+' then doc_id = string.sub(ARGV[11], 2) end
if string.sub(ARGV[12], 1, 1) == '+' then title = string.sub(ARGV[12], 2) end

if doc_id then
  local rec = redis.call('HGET', K_DOCS, doc_id)
  if rec then
    local root = parse_record(rec)
    return 'R ' .. gs(resolve(root)) .. ' ' .. rec
  end
end

local ex = redis.call('HGET', K_EXACT, exact)
local all, ns, flags = hashes(8, not ex)
local anchors, aidx = select_anchors(all, ns, flags, n)
local known = {}
if #anchors > 0 then known = redis.call('HMGET', K_FP, unpack(anchors)) end
local merged = {}
local root, dup
if ex then
  root = resolve(ex)
  dup = 1
else
  local live = live_sketch(all, ns, flags)
  local order, hits = candidates(anchors, known)
  local scores, shared_of = {}, {}
  for _, g in ipairs(order) do
    local score, shared = verify(g, live, doc_limit, min_overlap)
    scores[g] = score
    shared_of[g] = shared
  end
  local accepted = choose(order, scores, theta, merge_theta, merge_guard)
  if #accepted > 0 then
    root = accepted[1]
    local rsk, rmem, rz = BASE .. 's:' .. gs(root), BASE .. 'm:' .. gs(root), zm(root)
    for i = 2, #accepted do
      local g = accepted[i]
      merged[#merged + 1] = g
      local gsk, gmem, gz = BASE .. 's:' .. gs(g), BASE .. 'm:' .. gs(g), zm(g)
      redis.call('HSET', K_PARENT, gs(g), gs(root))
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
      local moved = redis.call('LRANGE', gmem, 0, -1)
      if #moved > 0 then
        push('RPUSH', rmem, moved)
        redis.call('DEL', gmem)
      end
      move_activity(g, root)
    end
    local lr = limit_of(root)
    local bound = math.min(lr, doc_limit)
    local add = {}
    for i = ns + 1, #all do
      if tonumber(all[i]) < bound then add[#add + 1] = all[i] end
    end
    if #add > 0 then push('SADD', rsk, add) end
    settle(root, lr, bound, cap)
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
  redis.call('HSET', K_EXACT, exact, gs(root))
end

local fresh = {}
for i = 1, #anchors do
  if not known[i] then
    fresh[#fresh + 1] = anchors[i]
    fresh[#fresh + 1] = gs(root)
  end
end
if #fresh > 0 then redis.call('HSET', K_FP, unpack(fresh)) end
if dup == 0 then
  redis.call('ZADD', K_SIZES, -1, zm(root))
else
  redis.call('ZINCRBY', K_SIZES, -1, zm(root))
end
local seq = redis.call('INCR', K_DOCUMENTS)
if doc_id then
  redis.call('RPUSH', BASE .. 'm:' .. gs(root), doc_id)
  local ms = {}
  for i, m in ipairs(merged) do ms[i] = gs(m) end
  local rec = table.concat({gs(root), tostring(dup), gs(seq), title and '1' or '0',
    table.concat(ms, ','), table.concat(anchors, ',')}, ' ') .. '\n' .. (title or '')
  redis.call('HSET', K_DOCS, doc_id, rec)
end
if ARGV[13] ~= '-' then
  local added, hour = string.match(ARGV[13], '^(%d+) (%d+)$')
  widen(root, tonumber(added), tonumber(added))
  redis.call('HINCRBY', BASE .. 'ha:' .. gs(root), hour, 1)
  redis.call('ZINCRBY', BASE .. 'hh:' .. hour, 1, zm(root))
  redis.call('ZADD', BASE .. 'hours', hour, hour)
  if doc_id then redis.call('HSET', BASE .. 'meta', doc_id, ARGV[14]) end
end
for i = 1, #merged do merged[i] = gs(merged[i]) end
return table.concat({gs(root), tostring(dup), gs(seq), table.concat(aidx, ','),
  table.concat(merged, ',')}, ' ')
"""
)

# ARGV: base, op, op arguments. Read-only: the no-writes flag makes any write an error.
_LUA_READ = (
    "#!lua flags=no-writes\n"
    + _LUA_COMMON
    + r"""
local op = ARGV[2]

local function group_reply(g, most)
  local size = redis.call('ZSCORE', K_SIZES, zm(g))
  local out = {g, size and -tonumber(size) or 0}
  local members = redis.call('LRANGE', BASE .. 'm:' .. gs(g), 0, (most or 0) - 1)
  if #members > 0 then
    local recs = redis.call('HMGET', K_DOCS, unpack(members))
    for i = 1, #members do
      out[#out + 1] = members[i]
      out[#out + 1] = recs[i] and title_of(recs[i]) or '-'
    end
  end
  return out
end

if op == 'lookup' then
  -- ARGV: base, op, n, theta:merge_theta:merge_guard, min_overlap, exact, hashes, count, limit,
  -- and "1" to explain: then the reply lists every candidate.
  local n, min_overlap = tonumber(ARGV[3]), tonumber(ARGV[5])
  local theta, merge_theta, merge_guard = thresholds(4)
  local explain = ARGV[10] == '1'
  local ex = redis.call('HGET', K_EXACT, ARGV[6])
  if ex then
    if explain then return {'exact', resolve(ex)} end
    return resolve(ex)
  end
  local all, ns, flags = hashes(7, true)
  local anchors = select_anchors(all, ns, flags, n)
  local known = {}
  if #anchors > 0 then known = redis.call('HMGET', K_FP, unpack(anchors)) end
  local live = live_sketch(all, ns, flags)
  local order, hits = candidates(anchors, known)
  local scores, out = {}, {'candidates', 0, table.concat(anchors, ',')}
  local boiler = {}
  for i = 1, ns do
    if flags[i] == 1 then boiler[#boiler + 1] = all[i] end
  end
  out[#out + 1] = table.concat(boiler, ',')
  for _, g in ipairs(order) do
    local score, shared, mine, gsize = verify(g, live, tonumber(ARGV[9]), min_overlap)
    scores[g] = score
    out[#out + 1] = table.concat({gs(g), table.concat(hits[g], ','), tostring(#shared),
      tostring(mine), tostring(gsize)}, ' ')
  end
  local chosen = choose(order, scores, theta, merge_theta, merge_guard)
  if explain then
    local ids = {}
    for i, g in ipairs(chosen) do ids[i] = gs(g) end
    out[2] = table.concat(ids, ',')
    return out
  end
  return chosen[1] or 0
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
    tonumber(redis.call('GET', K_DOCUMENTS) or '0'),
    redis.call('ZCARD', K_SIZES),
    redis.call('HLEN', K_FP),
    redis.call('SCARD', K_COMMON),
    tonumber(redis.call('GET', K_COUNTER) or '0'),
  }
end
return redis.error_reply('unknown operation ' .. tostring(op))
"""
)

_MASK64 = (1 << 64) - 1

#: Refused credentials: a connection error in redis-py, but a configuration problem here.
_AUTH_ERRORS: tuple[type[Exception], ...] = tuple(
    getattr(redis.exceptions, name)
    for name in ("AuthenticationError", "AuthorizationError")
    if hasattr(redis.exceptions, name)
)


def _signed(values: Sequence[int]) -> list[str]:
    """Fingerprints as signed 64-bit decimals (see the module docstring)."""
    n = len(values)
    return list(map(str, struct.unpack(f">{n}q", struct.pack(f">{n}Q", *values))))


def _json_strings(words: list[str]) -> bytes:
    """A JSON array of strings that need no escaping (decimal numbers)."""
    return ('["' + '","'.join(words) + '"]').encode() if words else b"[]"


def _unsigned(word: bytes) -> int:
    return int(word) & _MASK64


def _bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%b\r\n" % (len(value), value)


def _positive_float(name: str, value: Any, url: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf"):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value!r} in {url!r}")
    return number


def _int_option(name: str, value: Any, url: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}"
        ) from None
    if number < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, not {value!r} in {url!r}")
    return number


def _check_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix must be a non-empty str, not {prefix!r}")
    if "{" in prefix or "}" in prefix or any(c.isspace() for c in prefix):
        raise ConfigError(f"prefix must not contain braces or white space, not {prefix!r}")
    if len(prefix) > 200:
        raise ConfigError(f"prefix must be at most 200 characters, not {len(prefix)}")
    return prefix


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether *exc* or an exception it was raised from or during is a *kind*."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _meta_args(meta: DocMeta | None) -> tuple[bytes, bytes]:
    """The assignment script's activity arguments: ``"added hour"`` and the JSON kept."""
    if meta is None:
        return _bulk(b"-"), _bulk(b"-")
    added = int(meta.added)
    if not 0 <= added < 1 << 53:
        raise ConfigError(f"A document's time must be in [0, 2**53) seconds, not {added!r}")
    kept = json.dumps([added, meta.url, meta.site], separators=(",", ":")).encode("utf-8")
    return _bulk(b"%d %d" % (added, added // HOUR)), _bulk(kept)


def _parse_record(doc_id: str, raw: bytes) -> DocumentRecord:
    """Decode a ``{P}:docs`` value (see the module docstring) into a record."""
    try:
        header, _, rest = raw.partition(b"\n")
        root, dup, _seq, has_title, merged, anchors = header.split(b" ")
        record = DocumentRecord(
            doc_id,
            int(root),
            dup == b"1",
            tuple(int(g) for g in merged.split(b",")) if merged else (),
            rest.decode("utf-8") if has_title == b"1" else None,
            tuple(_unsigned(h) for h in anchors.split(b",")) if anchors else (),
        )
        if record.similar_id < 1 or any(g < 1 for g in record.merged_from):
            raise ValueError("a group id is not positive")
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"The record of doc {doc_id!r:.80} is unreadable: {exc}") from exc
    return record


def _decode_group(reply: list[Any]) -> Group:
    try:
        gid, size = int(reply[0]), int(reply[1])
        if gid < 1 or size < 0:
            raise ValueError(f"group {gid} of size {size}")
        members = []
        for i in range(2, len(reply), 2):
            title = reply[i + 1]
            text = title[1:].decode("utf-8") if title[:1] == b"+" else None
            members.append(Member(reply[i].decode("utf-8"), text))
    except (ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise StoreCorruptError(f"A group read from Redis is unreadable: {exc}") from exc
    return Group(gid, size, tuple(members))


class RedisStore(Store):
    """A store in Redis, shared by every process that opens the same URL and prefix.

    Use it when several crawler processes or service replicas must agree on one set of groups.
    Each document is placed by one atomic Lua script call; :meth:`assign_many` pipelines many
    of them in one round trip. Open it with :meth:`from_url` (what ``open_store`` does) or wrap
    a ``redis.Redis`` client you configured yourself.

    Args:
        client: a ``redis.Redis`` client (``decode_responses`` must be off); the store
            closes it when it is closed.
        prefix: the namespace; every key is ``{prefix}:...``.
        url: the URL shown in reprs and messages (a password in it is masked).

    Raises:
        ConfigError: the prefix is empty or contains braces or white space.

    Example:
        >>> store = RedisStore.from_url("redis://localhost:6379/0?prefix=news")  # doctest: +SKIP
        >>> store.stats().documents  # doctest: +SKIP
        0
    """

    def __init__(self, client: redis.Redis, prefix: str = "nshash", *, url: str = "") -> None:
        self.prefix = _check_prefix(prefix)
        if client.get_encoder().decode_responses:
            raise ConfigError("RedisStore needs a client with decode_responses=False")
        self.url = mask_url(url) if url else f"redis://?prefix={prefix}"
        self._client = client
        tag = "{" + prefix + "}:"
        self._base = tag.encode("utf-8")
        self._keys = [(tag + name).encode("utf-8") for name in _TABLES]
        # The assignment is sent as hand-packed EVALSHA commands (see _run_assign): the hot
        # path, where redis-py's generic packing would cost more than the script itself.
        self._assign_sha = hashlib.sha1(_LUA_ASSIGN.encode("utf-8")).hexdigest().encode()
        self._assign_loaded = False
        self._read_script = client.register_script(_LUA_READ)
        #: Pools made to follow Redis Cluster redirections; closed with the store.
        self._pools: list[redis.ConnectionPool] = []
        self._policy_cache: tuple[MatchPolicy, list[bytes], bytes] | None = None
        self._closed = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """Open a Redis store from a URL; nothing is sent until the first call.

        URL forms: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://...`` (TLS) and
        ``unix://[[user]:password@]/path/to/redis.sock``, each with query options; keyword
        *options* override the query.

        Args:
            url: the store URL.
            **options: ``prefix`` (default ``"nshash"``), ``db``, ``socket_timeout`` and
                ``socket_connect_timeout`` (seconds, default 1), ``max_connections``; with
                ``rediss://`` also ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` (paths)
                and ``ssl_cert_reqs`` (``required``, the default, ``optional`` or ``none``).

        Raises:
            ConfigError: the URL or an option is invalid, or an option is unknown.
        """
        shown = mask_url(url) if isinstance(url, str) else repr(url)
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"Invalid Redis URL {shown!r}: {exc}") from None
        if parts.scheme.lower() not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"A Redis URL starts with redis://, rediss:// or unix://, not {shown!r}"
            )
        merged: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=True))
        merged.update(options)
        prefix = _check_prefix(merged.pop("prefix", "nshash"))
        kwargs: dict[str, Any] = {
            "socket_timeout": _positive_float(
                "socket_timeout", merged.pop("socket_timeout", DEFAULT_TIMEOUT), shown
            ),
            "socket_connect_timeout": _positive_float(
                "socket_connect_timeout",
                merged.pop("socket_connect_timeout", DEFAULT_TIMEOUT),
                shown,
            ),
        }
        if "db" in merged:
            if parts.scheme.lower() != "unix" and parts.path.strip("/"):
                raise ConfigError(f"Give the database once, in the path or as db=, in {shown!r}")
            kwargs["db"] = _int_option("db", merged.pop("db"), shown, 0)
        if "max_connections" in merged:
            kwargs["max_connections"] = _int_option(
                "max_connections", merged.pop("max_connections"), shown, 1
            )
        tls = {k: merged.pop(k) for k in _TLS_OPTIONS if k in merged}
        if merged:
            raise ConfigError(
                f"Unknown option(s) {sorted(merged)} for a Redis store in {shown!r}; use "
                f"{', '.join(_OPTIONS)}, and with rediss:// {', '.join(_TLS_OPTIONS)}"
            )
        if tls and parts.scheme.lower() != "rediss":
            raise ConfigError(f"TLS options {sorted(tls)} need a rediss:// URL, not {shown!r}")
        if tls.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
            raise ConfigError(
                f"ssl_cert_reqs must be none, optional or required, not {tls['ssl_cert_reqs']!r}"
            )
        kwargs.update(tls)
        # Not urlunsplit: it drops the "//" of "unix:///path" when the netloc is empty.
        bare = f"{parts.scheme}://{parts.netloc}{parts.path}"
        try:
            client = redis.Redis.from_url(
                bare,
                protocol=2,
                retry=Retry(NoBackoff(), 0),
                decode_responses=False,
                **kwargs,
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"Invalid Redis URL {shown!r}: {exc}") from None
        return cls(client, prefix, url=url)

    # -- plumbing ----------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)

    def _translate(self, exc: Exception) -> StoreError:
        if isinstance(exc, StoreError):
            return exc
        if isinstance(exc, _AUTH_ERRORS):
            err: StoreError = StoreError(
                f"Redis at {self.url!r} refused the credentials: {exc}", url=self.url
            )
        elif _caused_by(exc, ssl.SSLError):
            err = StoreError(f"TLS with Redis at {self.url!r} failed: {exc}", url=self.url)
        elif isinstance(exc, redis.ResponseError) and "CORRUPT" in str(exc):
            err = StoreCorruptError(f"Redis at {self.url!r}: {exc}", url=self.url)
        elif isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
            err = StoreUnavailableError(
                f"Redis at {self.url!r} is unavailable: {exc}", url=self.url
            )
        else:
            err = StoreError(f"Redis at {self.url!r} failed: {exc}", url=self.url)
        err.__cause__ = exc
        return err

    @contextmanager
    def _errors(self) -> Iterator[None]:
        self._check()
        try:
            yield
        except redis.RedisError as exc:
            raise self._translate(exc) from exc

    def _read(self, *args: Any) -> Any:
        with self._errors():
            for _ in range(_MAX_REDIRECTS):
                try:
                    return self._read_script(keys=self._keys, args=[self._base, *args])
                except MovedError as exc:
                    self._redirect(exc)
            return self._read_script(keys=self._keys, args=[self._base, *args])

    def _redirect(self, moved: MovedError) -> None:
        """Follow a Redis Cluster MOVED: use the node that now owns the namespace's slot.

        Every key of a namespace shares one slot, so one node serves them all; the new client
        has the same options (timeouts, TLS, credentials) as the first.
        """
        pool = self._client.connection_pool
        kwargs = dict(pool.connection_kwargs)
        kwargs.update(host=moved.host or kwargs.get("host"), port=moved.port)
        client = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
        self._pools.append(client.connection_pool)
        self._read_script = client.register_script(_LUA_READ)
        self._assign_loaded = False
        self._client = client

    def _policy_args(self, policy: MatchPolicy) -> tuple[list[bytes], bytes]:
        """The policy's script arguments, and the EVALSHA command head packed with them."""
        cached = self._policy_cache
        if cached is not None and cached[0] is policy:
            return cached[1], cached[2]
        if not isinstance(policy, MatchPolicy):
            raise ConfigError(f"policy must be a MatchPolicy, not {policy!r}")
        args = [
            str(policy.n).encode(),
            f"{float(policy.theta)!r}:{float(policy.merge_theta)!r}:{float(policy.merge_guard)!r}".encode(),
            str(policy.min_overlap).encode(),
            str(policy.sketch_cap).encode(),
            str(policy.votes).encode(),
        ]
        # EVALSHA sha numkeys KEYS... base policy... then the document's eight arguments.
        fixed = [b"EVALSHA", self._assign_sha, str(len(self._keys)).encode(), *self._keys]
        fixed += [self._base, *args]
        head = b"*%d\r\n" % (len(fixed) + 8) + b"".join(_bulk(a) for a in fixed)
        self._policy_cache = (policy, args, head)
        return args, head

    @staticmethod
    def _doc_args(doc: DocPrint) -> tuple[bytes, bytes, bytes, bytes]:
        """The exact-text fingerprint, all hashes (anchor candidates, then the sketch in
        ascending order), the anchor candidate count and the sketch limit."""
        try:
            exact = _signed((doc.exact,))[0].encode()
            hashes = _json_strings(_signed(doc.sentences) + _signed(doc.sketch))
            return exact, hashes, b"%d" % len(doc.sentences), b"%d" % doc.limit
        except (struct.error, TypeError, AttributeError) as exc:
            raise ConfigError(f"Not a document fingerprint: {doc!r} ({exc})") from None

    def _pack_assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None,
        title: str | None,
        meta: DocMeta | None = None,
    ) -> bytes:
        """One EVALSHA of the assignment script, as RESP bytes ready to send."""
        if doc_id is not None and (not isinstance(doc_id, str) or not doc_id):
            raise ConfigError(f"doc_id must be a non-empty str, not {doc_id!r}")
        if title is not None and not isinstance(title, str):
            raise ConfigError(f"title must be a str, not {title!r}")
        exact, hashes, count, limit = self._doc_args(doc)
        return b"".join(
            (
                self._policy_args(policy)[1],
                _bulk(exact),
                _bulk(hashes),
                _bulk(count),
                _bulk(limit),
                _bulk(b"-" if doc_id is None else b"+" + doc_id.encode("utf-8")),
                _bulk(b"-" if title is None else b"+" + title.encode("utf-8")),
                *_meta_args(meta),
            )
        )

    def _run_assign(self, commands: list[bytes]) -> list[Any]:
        """Send packed assignment calls, in order; return each reply or its redis exception.

        Calls that got a Redis Cluster MOVED (not applied) go again to the node it names.
        """
        replies: list[Any] = [None] * len(commands)
        pending = list(range(len(commands)))
        for attempt in range(_MAX_REDIRECTS + 1):
            moved: list[int] = []
            got = self._run_on_node([commands[i] for i in pending])
            for i, reply in zip(pending, got, strict=True):
                replies[i] = reply
                if isinstance(reply, MovedError):
                    moved.append(i)
            if not moved or attempt == _MAX_REDIRECTS:
                break
            self._redirect(replies[moved[0]])
            pending = moved
        return replies

    def _run_on_node(self, commands: list[bytes]) -> list[Any]:
        """Send packed calls on one connection of the current client; read every reply.

        The script is loaded on first use, and on NOSCRIPT the calls that got it (they were not
        applied) are sent again. When the connection fails, the calls answered so far keep
        their replies and the rest get the connection error.
        """
        pool = self._client.connection_pool
        conn: Any = pool.get_connection()
        try:
            if not self._assign_loaded:
                self._load_assign(conn)
            replies = self._exchange(conn, commands)
            again = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if again:
                # The script cache was flushed (or Redis restarted): load it and send those
                # calls again; the SHA1 is of the script's text, so they stay valid.
                self._load_assign(conn)
                retried = self._exchange(conn, [commands[i] for i in again])
                for i, reply in zip(again, retried, strict=True):
                    replies[i] = reply
            return replies
        finally:
            pool.release(conn)

    def _load_assign(self, conn: Any) -> None:
        load = [b"SCRIPT", b"LOAD", _LUA_ASSIGN.encode("utf-8")]
        conn.send_packed_command([b"*3\r\n" + b"".join(_bulk(a) for a in load)])
        conn.read_response()
        self._assign_loaded = True

    @staticmethod
    def _exchange(conn: Any, commands: list[bytes]) -> list[Any]:
        replies: list[Any] = []
        try:
            # Send in slices so that Redis starts on the first while the rest is on its way.
            for i in range(0, len(commands), 32):
                conn.send_packed_command([b"".join(commands[i : i + 32])], check_health=False)
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            conn.disconnect()
            replies += [exc] * (len(commands) - len(replies))
        except BaseException:
            conn.disconnect()  # replies half read: the connection is of no more use
            raise
        return replies

    @staticmethod
    def _decode_assign(
        doc: DocPrint, doc_id: str | None, reply: bytes
    ) -> tuple[Assignment, tuple[int, ...]]:
        if reply[:2] == b"R ":
            _, root, raw = reply.split(b" ", 2)
            rec = _parse_record(doc_id or "", raw)
            now = int(root)
            canonical = now if now != rec.similar_id else None
            answer = Assignment(rec.similar_id, rec.duplicate, rec.merged_from, True, canonical)
            return answer, rec.fingerprints
        root, dup, _seq, positions, merged = reply.split(b" ")
        sentences = doc.sentences
        anchors = tuple(sentences[int(i) - 1] for i in positions.split(b",")) if positions else ()
        ids = tuple(int(g) for g in merged.split(b",")) if merged else ()
        return Assignment(int(root), dup == b"1", ids), anchors

    # -- the Store contract ------------------------------------------------------------
    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        self._check()
        command = self._pack_assign(doc, policy, doc_id, title, meta)
        with self._errors():
            reply = self._run_assign([command])[0]
        if isinstance(reply, Exception):
            raise self._translate(reply) from reply
        return self._decode_assign(doc, doc_id, reply)

    def assign_many(
        self,
        items: Sequence[tuple[DocPrint, str | None, str | None]],
        policy: MatchPolicy,
        metas: Sequence[DocMeta | None] | None = None,
    ) -> list[tuple[Assignment, tuple[int, ...]] | NSHashError]:
        """Place documents in order, pipelined: one round trip per :data:`PIPELINE_CHUNK`.

        A failing item yields its exception and the rest go on. When the connection fails,
        the items answered before keep their answers and every later one yields a
        :class:`~nshash.StoreUnavailableError`: some of those may have been applied, so send
        them again with their ``doc_id``.
        """
        self._check()
        out: list[tuple[Assignment, tuple[int, ...]] | NSHashError | None] = [None] * len(items)
        for start in range(0, len(items), PIPELINE_CHUNK):
            stop = min(start + PIPELINE_CHUNK, len(items))
            self._assign_chunk(items, policy, start, stop, out, metas)
        return [r for r in out if r is not None]

    def _assign_chunk(
        self,
        items: Sequence[tuple[DocPrint, str | None, str | None]],
        policy: MatchPolicy,
        start: int,
        stop: int,
        out: list[tuple[Assignment, tuple[int, ...]] | NSHashError | None],
        metas: Sequence[DocMeta | None] | None = None,
    ) -> None:
        sent: list[int] = []
        commands: list[bytes] = []
        for i in range(start, stop):
            doc, doc_id, title = items[i]
            meta = metas[i] if metas is not None else None
            try:
                commands.append(self._pack_assign(doc, policy, doc_id, title, meta))
            except NSHashError as exc:
                out[i] = exc
                continue
            sent.append(i)
        if not sent:
            return
        try:
            replies = self._run_assign(commands)
        except redis.RedisError as exc:
            replies = [exc] * len(sent)
        for i, reply in zip(sent, replies, strict=True):
            if isinstance(reply, Exception):
                out[i] = self._translate(reply)
            else:
                out[i] = self._decode_assign(items[i][0], items[i][1], reply)

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        self._check()
        args = self._policy_args(policy)[0]
        found = self._read(b"lookup", *args[:3], *self._doc_args(doc), b"0")
        return int(found) or None

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        args = self._policy_args(policy)[0]
        reply = self._read(b"lookup", *args[:3], *self._doc_args(doc), b"1")
        if reply[0] == b"exact":
            return Explanation(int(reply[1]), "exact", theta=policy.theta)
        chosen = [int(g) for g in reply[1].split(b",") if g]
        anchors, boilerplate, rows = reply[2], reply[3], reply[4:]
        candidates = []
        for row in rows:
            gid, hits, shared, mine, theirs = row.split(b" ")
            candidates.append(
                judged(
                    int(gid),
                    tuple(_unsigned(h) for h in hits.split(b",") if h),
                    int(shared),
                    int(mine),
                    int(theirs),
                    policy,
                )
            )
        return finish_explanation(
            chosen,
            tuple(_unsigned(h) for h in anchors.split(b",") if h),
            tuple(_unsigned(h) for h in boilerplate.split(b",") if h),
            candidates,
            policy,
        )

    def resolve(self, similar_id: int) -> int:
        return int(self._read(b"resolve", str(int(similar_id)).encode()))

    def document(self, doc_id: str) -> DocumentRecord | None:
        reply = self._read(b"document", doc_id.encode("utf-8"))
        if reply is None:
            return None
        rec = _parse_record(doc_id, reply[1])
        return DocumentRecord(
            rec.doc_id, int(reply[0]), rec.duplicate, rec.merged_from, rec.title, rec.fingerprints
        )

    def sequence(self, doc_id: str) -> int | None:
        """Return the position (from 1) at which Redis applied *doc_id*, or None if unknown.

        Replaying the documents of a namespace serially in this order, through any store,
        gives the same groups and ids: the record of what concurrent writers did.
        """
        reply = self._read(b"sequence", doc_id.encode("utf-8"))
        return None if reply is None else int(reply)

    def group(self, similar_id: int) -> Group | None:
        reply = self._read(b"group", str(int(similar_id)).encode())
        return None if reply is None else _decode_group(reply)

    def group_head(self, similar_id: int, members: int) -> Group | None:
        if members < 1:
            group = self.group(similar_id)
            return None if group is None else Group(group.similar_id, group.size)
        reply = self._read(b"group_head", str(int(similar_id)).encode(), b"%d" % members)
        return None if reply is None else _decode_group(reply)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        reply = self._read(b"groups", str(int(min_size)).encode(), str(int(limit)).encode())
        return [_decode_group(g) for g in reply]

    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        if last_hour < first_hour:
            return []
        reply = self._read(b"hot", b"%d" % first_hour, b"%d" % last_hour, b"%d" % limit)
        return [(int(reply[i]), int(float(reply[i + 1]))) for i in range(0, len(reply), 2)]

    def activity(self, similar_id: int) -> Activity | None:
        reply = self._read(b"activity", str(int(similar_id)).encode())
        if reply is None:
            return None
        gid, seen, flat = reply
        first, last = (int(v) for v in seen.split())
        hours = sorted(
            (int(flat[i]) * HOUR, int(flat[i + 1])) for i in range(0, len(flat), 2)
        )
        return Activity(int(gid), first, last, tuple(hours))

    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        if not doc_ids:
            return []
        reply = self._read(b"metas", *(d.encode("utf-8") for d in doc_ids))
        out: list[DocMeta | None] = []
        for raw in reply:
            if raw is None:
                out.append(None)
                continue
            added, url, site = json.loads(raw)
            out.append(DocMeta(int(added), url, site))
        return out

    def stats(self) -> StoreStats:
        documents, groups, fps, common, last = self._read(b"stats")
        return StoreStats(
            documents=int(documents),
            groups=int(groups),
            fingerprints=int(fps),
            common_fingerprints=int(common),
            last_id=int(last),
        )

    def ping(self) -> None:
        with self._errors():
            self._client.ping()

    def close(self) -> None:
        """Release the connections; closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        try:
            self._client.close()
            for pool in self._pools:
                pool.disconnect()
        except redis.RedisError:
            pass
