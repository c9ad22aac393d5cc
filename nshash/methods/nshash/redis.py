"""RedisStore: one shared state for many crawler processes and service replicas.

Every process that opens the same ``redis://host:port/db?prefix=NAME`` shares one set of groups,
and the answers are the ones a single serial process would give: the assignment of a document
(:func:`nshash.methods.nshash.assign.assign`: anchor selection, candidate groups, the
boilerplate guard, merges, the exact-text table, members, ``doc_id`` replay) runs as **one Lua
script call**, so Redis applies documents one at a time, atomically, in some order, and
replaying the documents serially in that order through any other store gives identical ids.
Batches are pipelined: many script calls in one round trip (hand-packed ``EVALSHA`` commands on
a pooled connection; the script is loaded on first use and again on ``NOSCRIPT``). Lookups run a
read-only script (``#!lua flags=no-writes``), so a query can never write, and can be served by a
replica.

Key layout (``P`` is the prefix, ``nshash`` by default). Every key carries the hash tag ``{P}``,
so one namespace lives in one slot, and so on one node of a Redis Cluster: point the URL at any
node and the store follows ``MOVED`` to the one that owns the slot (while a resharding migrates
that slot, calls fail with :class:`~nshash.StoreError` until it is done). Several prefixes keep
independent namespaces in one Redis, and spread over the nodes of a cluster.

A fingerprint (an unsigned 64-bit integer) is written as a *signed* 64-bit decimal (minus 2**64
when it is 2**63 or more): Redis then keeps a set of them as a compact ``intset``, and the
scripts never do arithmetic on one (Lua numbers are doubles): to them a fingerprint is a
string. Sketch values have 53 bits, so the scripts compare them as numbers exactly; in a prefix
of layout 4 they are narrowed to their top 31 bits (:func:`~nshash.text.fingerprint.narrow`),
so a sketch set is an ``intset`` of 32-bit integers, half the size. Group ids are small
decimal integers.

=================  =======  ==================================================================
key                type     holds
=================  =======  ==================================================================
``{P}:f:<b>``      hash     anchor fingerprint -> group id (first group that used it; never
                            moved), for the anchors of bucket ``b`` (see below)
``{P}:x:<b>``      hash     whole-text fingerprint -> group id (split as ``f``)
``{P}:common``     set      hashes learned to be boilerplate (kept ``votes`` groups apart)
``{P}:v:<b>``      hash     hash -> the groups kept apart on it so far, comma-separated (split
                            as ``f``)
``{P}:o:<b>``      hash     canonical group id -> the doc id of its first member (split as
                            ``f``)
``{P}:split``      hash     ``f``, ``x``, ``v``, ``o`` -> ``"fields level pointer"`` of that
                            table
``{P}:parent``     hash     merged group id -> the id it merged into (follow to the canonical id)
``{P}:sizes``      zset     canonical group id, zero-padded to 15 digits -> minus its size, so
                            ``ZRANGE BYSCORE`` lists the largest groups first, ties by id
``{P}:docs``       hash     doc id -> ``"root dup seq has_title merged,ids #count score
                            verdict\n"``, then the anchors (8 bytes each, little-endian) and
                            the title: the answer given, the document's applied sequence
                            number and its evidence (the score as ``%.17g``, exact as a
                            double; the verdict's code in ``records.VERDICTS``; a record
                            from before evidence ends its header at ``#count``, and one
                            written before packing has ``anchor,fps`` in decimal where
                            ``#count`` is, and nothing between newline and title)
``{P}:counter``    string   the last group id handed out (INCR; never goes back)
``{P}:documents``  string   how many documents were added; each one's value is its sequence number
``{P}:s:<id>``     set      the sketch (sampled shingle hashes, narrowed in layout 4) of
                            canonical group ``id``
``{P}:limits``     hash     group id -> its sketch's limit, for groups whose sketch was cut
``{P}:m:<id>``     list     doc ids of canonical group ``id`` after its first, in arrival order
                            (only groups of two or more have one)
``{P}:hh:<hour>``  zset     canonical group id (zero-padded) -> its documents added in that
                            hour (hours since the epoch); a window is one ``ZUNION``
``{P}:ha:<id>``    hash     hour -> documents of canonical group ``id`` (a merge moves them)
``{P}:hours``      zset     every hour that has a ``hh`` key (score and member: the hour)
``{P}:seen``       hash     canonical group id -> ``"first last"`` seen (epoch seconds)
``{P}:meta``       hash     doc id -> JSON ``[added, url, site]`` (documents given a DocMeta)
``{P}:retention``  string   the retention window in seconds (only in a store that has one)
``{P}:last``       zset     with a window: canonical group id -> its last new document's time
                            (the writer's clock), so the oldest are one ``ZRANGE BYSCORE``
``{P}:k:<id>``     string   with a window: the hashes group ``id`` wrote (anchors, exact
                            texts, votes), comma-separated, so forgetting it finds them
``{P}:b:<id>``     string   with a window: the ids merged into group ``id``
``{P}:forgotten``  string   with a window: how many groups were forgotten
``{P}:dropped``    string   with a window: how many documents went with those groups
``{P}:layout``     string   the layout the scripts wrote (see below)
``{P}:letters``    string   the ``letter_units`` the prefix's fingerprints are made with, set
                            by its first writer (absent in a prefix begun before the setting:
                            see :func:`~nshash.methods.nshash.base.begun_with`)
=================  =======  ==================================================================

The anchor, exact-text and vote tables and the first members are split over small hashes by
the last digits of their fields, which Redis keeps as compact listpacks (~15 bytes a field
instead of ~90 in one big hash) while each holds at most ``hash-max-listpack-entries`` fields
(128 by default). The split grows with the table by linear hashing on the field's last 9
digits: past 16 fields a hash on average, the next hash splits in two, so a hash holds about
16 to 32 fields whatever the table's size (short listpacks: a lookup scans few), and a new
field moves about one other. The cost is server CPU: each anchor is a lookup of its own (an
``HGET`` each where one ``HMGET`` did), about a quarter more a document for a third less
memory (``bench/README.md``).
A store made before the split keeps one hash a table (``{P}:fp``, ``{P}:exact``,
``{P}:votes``, and ``{P}:first`` for the first members of its new groups) and goes on using
them; a group made before ``o`` keeps all its members in its list. A doc id longer than
``hash-max-listpack-value`` (64 bytes by default) turns its ``o`` hash into a hashtable, so
URL-sized ids save less (about 130 bytes a group where a list key took 230).

**Layout.** A write marks the prefix with the layout its scripts write (``{P}:layout``, 3:
records with packed anchors, first members in ``o``; 4: the same with narrow sketches). A new
prefix gets 4; a prefix marked 3, or holding groups from before the mark, keeps 3 and its
53-bit sketches. A client reads the layout once (the read script's ``width``) and narrows
each document's sketch for layout 4; the script narrows one sent whole, and refuses one
narrowed for layout 3 before writing anything (``WIDTH``: the client reads the layout again
and sends it again). A prefix marked with a later layout
was written by a newer nshash, and every call on it fails with :class:`~nshash.StoreError`
instead of misreading its tables. Clients from before the mark do not check it, so upgrade
every client of a prefix together.

**Retention** (``?retention=30d``, see :mod:`~nshash.methods.nshash.retention`): every
assignment sends the writer's clock; the script forgets up to 16 groups last seen before the
window, hides the expired ones from matching, and dates the group the document joined. The
window is set by the first write that names it and kept in ``{P}:retention``, so every writer
follows it whether or not its URL names one. Forgetting deletes keys and fields inside the
script, not through key expiry: a group's anchors are fields of hashes shared with others, which
Redis 7.0 cannot expire one by one, and deleting them with the rest keeps every table exact.

Failures: a connection that cannot be made or answered within the timeouts (1 s each by
default, no retries) raises :class:`~nshash.StoreUnavailableError`; the next call reconnects by
itself. After such an error the outcome of a write is unknown (Redis may have applied it just
before the connection broke); send it again with the same ``doc_id`` to make it safe. Other
Redis errors raise :class:`~nshash.StoreError`. The password of a URL never appears in a repr or
a message. Needs Redis 7.0 or newer (``SMISMEMBER``, ``SINTERCARD``, script flags).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.exceptions import MovedError, NoScriptError

from ...errors import ConfigError, NSHashError, StoreClosedError, StoreCorruptError, StoreError
from ...inputs import checked_doc_id as _checked_id
from ...results import (
    HOUR,
    Activity,
    Assignment,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    Member,
    StoreStats,
)
from ...stores.redis import check_prefix, connect, count_arg, ping_writable, translate
from ...stores.scripts import lua_script
from ...stores.url import mask_url, retention_option
from ...text.fingerprint import NO_LIMIT, DocPrint, narrow, places_of
from . import corrections
from .assign import MatchPolicy, finish_explanation, judged
from .base import Store, begun_with
from .records import VERDICTS
from .retention import clock_option

__all__ = ["RedisStore"]

#: How many Redis Cluster MOVED redirections one call follows.
_MAX_REDIRECTS = 3

#: Pipelined script calls sent in one round trip by :meth:`RedisStore.assign_many`.
PIPELINE_CHUNK = 500

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

#: The placement script (``nshash/lua/nshash_assign.lua``), sent as EVALSHA by its digest.
_ASSIGN = lua_script("nshash_assign")




_MASK64 = (1 << 64) - 1
#: How many times a correction is read and tried again while writers keep changing what it
#: read (see :class:`_Planned`).
_CORRECTION_TRIES = 100
#: How long a store trusts that its prefix holds no correction (seconds) before it asks
#: Redis again: a detach made by another process rules this one's placements after that.
_CORRECTED_TTL = 1.0
#: records.VERDICTS' code of each verdict a correction writes.
_VERDICT_CODES = {v: str(i) for i, v in enumerate(VERDICTS)}


class _Planned:
    """The :class:`~.corrections.CorrectionTables` of one try at a correction on Redis.

    Reads go to Redis, each noted as a check; writes are noted as the correction script's
    operations (``nshash_correct.lua``), which applies them only if every check still holds.
    The corrections module reads everything before it writes, so nothing here needs to read
    its own writes.
    """

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.client: Any = store._client  # bytes replies (decode_responses is off)
        self.tag = store._base.decode("utf-8")
        self.checks: list[bytes | str] = []
        self.ops: list[bytes | str] = []

    def _key(self, name: str) -> str:
        return self.tag + name

    @staticmethod
    def _present(value: bytes | None) -> bytes:
        return b"-" if value is None else b"+" + value

    def _hget(self, name: str, field: str) -> bytes | None:
        value: bytes | None = self.client.hget(self._key(name), field)
        self.checks += ["h", self._key(name), field, self._present(value)]
        return value

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        raw = self._hget("docs", doc_id)
        return None if raw is None else _parse_record(doc_id, raw)

    def get_parent(self, gid: int) -> int | None:
        raw = self._hget("parent", str(gid))
        return None if raw is None else int(raw)

    def group_size(self, gid: int) -> int | None:
        member = f"{gid:015d}"
        score = self.client.zscore(self._key("sizes"), member)
        self.checks += ["z", self._key("sizes"), member]
        self.checks.append("-" if score is None else f"+{int(score)}")
        return None if score is None else -int(score)

    def group_sketch(self, gid: int) -> tuple[tuple[int, ...], int]:
        values = tuple(sorted(int(v) for v in self.client.smembers(self._key(f"s:{gid}"))))
        raw = self.client.hget(self._key("limits"), str(gid))
        limit = NO_LIMIT if raw is None else int(raw)
        text = ",".join(map(str, values)) + f" {limit}"
        self.checks += ["s", str(gid), "", text]
        return values, limit

    def group_members(self, gid: int, most: int | None = None) -> list[str]:
        group = self.store.group_head(gid, most) if most else self.store.group(gid)
        ids = [] if group is None else group.doc_ids
        self.checks += ["m", str(gid), str(most or 0), "\n".join(ids)]
        return ids

    def corrections(self) -> list[str]:
        kept: dict[bytes, bytes] = self.client.hgetall(self._key("corrections"))
        entries = sorted((int(c), e) for c, e in kept.items())
        for cid, entry in entries:
            self.checks += ["h", self._key("corrections"), str(cid), b"+" + entry]
        self.checks += ["h", self._key("corrections"), str(len(entries) + 1), b"-"]
        return [e.decode("utf-8") for _c, e in entries]

    def new_group(self, sketch: Any, limit: int) -> int:
        raw: bytes | None = self.client.get(self._key("counter"))
        self.checks += ["g", self._key("counter"), "", self._present(raw)]
        gid = int(raw or 0) + 1
        self.ops += ["new", str(gid)]
        return gid

    def merge_into(self, root: int, gid: int, cap: int) -> None:
        self.ops += ["merge", str(root), str(gid), str(cap)]

    def move_member(self, doc_id: str, src: int, dst: int, verdict: str | None) -> None:
        code = "-" if verdict is None else _VERDICT_CODES[verdict]
        self.ops += ["move", doc_id, str(src), str(dst), code]

    def split_off(
        self,
        root: int,
        gid: int,
        sketch: tuple[tuple[int, ...], int],
        root_sketch: tuple[tuple[int, ...], int],
        without_id: int,
    ) -> None:
        self.ops += ["split", str(root), str(gid), ",".join(map(str, sketch[0])), str(sketch[1])]
        self.ops += [",".join(map(str, root_sketch[0])), str(root_sketch[1]), str(without_id)]

    def put_correction(self, cid: int, entry: str) -> None:
        self.ops += ["put", str(cid), entry]

    def vote(self, hs: Sequence[int], groups: tuple[int, int], need: int) -> None:
        self.ops += ["vote", str(need), str(groups[0]), str(groups[1]), str(len(hs))]
        self.ops += _signed(hs)


def _is_width(reply: Any) -> bool:
    """Whether *reply* is a script's refusal of a sketch narrowed for another layout."""
    return isinstance(reply, redis.ResponseError) and str(reply).startswith("WIDTH ")


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


def _meta_args(meta: DocMeta | None) -> tuple[bytes, bytes]:
    """The assignment script's activity arguments: ``"added hour"`` and the JSON kept."""
    if meta is None:
        return _bulk(b"-"), _bulk(b"-")
    added = int(meta.added)
    if not 0 <= added < 1 << 53:
        raise ConfigError(f"A document's time must be in [0, 2**53) seconds, not {added!r}")
    kept = json.dumps([added, meta.url, meta.site], separators=(",", ":")).encode("utf-8")
    return _bulk(b"%d %d" % (added, added // HOUR)), _bulk(kept)


def _evidence(fields: list[bytes]) -> tuple[float | None, str | None]:
    """The score and verdict of a record's header fields after ``#count`` (none in a record
    written before evidence was kept).

    Raises:
        ValueError: they are not a score and a verdict's code.
    """
    if not fields:
        return None, None
    score, code = fields
    value = float(score)
    if not 0.0 <= value <= 1.0 or not code.isdigit() or int(code) >= len(VERDICTS):
        raise ValueError(f"evidence {b' '.join(fields)!r:.40} is not a score and a verdict")
    return value, VERDICTS[int(code)]


def _parse_record(doc_id: str, raw: bytes) -> DocumentRecord:
    """Decode a ``{P}:docs`` value (see the module docstring) into a record: its anchors
    packed after the header (``#count``), or in decimal in it (records written before)."""
    try:
        header, _, rest = raw.partition(b"\n")
        root, dup, _seq, has_title, merged, anchors, *kept = header.split(b" ")
        score, verdict = _evidence(kept)
        if anchors[:1] == b"#":
            count = int(anchors[1:])
            fps = struct.unpack_from(f"<{count}Q", rest)
            rest = rest[8 * count :]
        else:
            fps = tuple(_unsigned(h) for h in anchors.split(b",")) if anchors else ()
        if has_title != b"1" and rest:
            raise ValueError("bytes past the anchors of an untitled record")
        record = DocumentRecord(
            doc_id,
            int(root),
            dup == b"1",
            tuple(int(g) for g in merged.split(b",")) if merged else (),
            rest.decode("utf-8") if has_title == b"1" else None,
            fps,
            score,
            verdict,
        )
        if record.similar_id < 1 or any(g < 1 for g in record.merged_from):
            raise ValueError("a group id is not positive")
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        raise StoreCorruptError(f"The record of doc {doc_id!r:.80} is unreadable: {exc}") from exc
    return record


def _decode_group(reply: list[Any]) -> Group:
    try:
        gid, size = int(reply[0]), int(reply[1])
        if gid < 1 or size < 0:
            raise ValueError(f"group {gid} of size {size}")
        members = []
        for i in range(2, len(reply), 3):
            title = reply[i + 1]
            text = title[1:].decode("utf-8") if title[:1] == b"+" else None
            kept = reply[i + 2]
            score, verdict = _evidence(kept.split(b" ") if kept != b"-" else [])
            members.append(Member(reply[i].decode("utf-8"), text, score, verdict))
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

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "nshash",
        *,
        url: str = "",
        retention: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.prefix = check_prefix(prefix)
        self.connects_lazily = True
        self._retention = b"" if retention is None else b" %d" % retention
        self._clock = clock
        if client.get_encoder().decode_responses:
            raise ConfigError("RedisStore needs a client with decode_responses=False")
        self.url = mask_url(url) if url else f"redis://?prefix={prefix}"
        self._client = client
        tag = "{" + prefix + "}:"
        self._base = tag.encode("utf-8")
        self._keys = [(tag + name).encode("utf-8") for name in _TABLES]
        # The assignment is sent as hand-packed EVALSHA commands (see _run_assign): the hot
        # path, where redis-py's generic packing would cost more than the script itself.
        self._assign_sha = hashlib.sha1(_ASSIGN.encode("utf-8")).hexdigest().encode()
        self._assign_loaded = False
        self._read_script = client.register_script(lua_script("nshash_read"))
        self._correct_script = client.register_script(lua_script("nshash_correct"))
        #: Whether the prefix holds a correction, and when that was read (see settle).
        self._corrected: tuple[bool, float] = (False, -_CORRECTED_TTL - 1.0)
        #: Pools made to follow Redis Cluster redirections; closed with the store.
        self._pools: list[redis.ConnectionPool] = []
        self._policy_cache: tuple[MatchPolicy, list[bytes], bytes] | None = None
        #: Whether the prefix keeps narrow sketches (layout 4, or a new prefix), read on the
        #: first call that sends a document; None until then, and again after a script found
        #: the prefix's layout other than this says (see check_width in the scripts).
        self._narrow: bool | None = None
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
        query = dict(parse_qsl(urlsplit(url).query)) if isinstance(url, str) else {}
        retention = retention_option({**query, **options}, url)
        options.pop("retention", None)
        clock = clock_option(options)
        client, prefix = connect(url, ("retention",), **options)
        return cls(client, prefix, url=url, retention=retention, clock=clock)

    # -- plumbing ----------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)

    def _translate(self, exc: Exception) -> StoreError:
        if _is_width(exc):
            self._narrow = None  # the prefix's layout is not what was read: read it again
        return translate(exc, self.url)

    def _compared(self, doc: DocPrint) -> tuple[DocPrint, bool]:
        """*doc* as this prefix compares it, and whether it was narrowed here (the client
        narrows it, so the script need not)."""
        if self._narrow is None:
            self._narrow = self._read(b"width") == 1
        return (narrow(doc), True) if self._narrow else (doc, False)

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

    def _command(self, call: Callable[[Any], Any]) -> Any:
        """*call* on the client, following Redis Cluster MOVED as :meth:`_read` does."""
        with self._errors():
            for _ in range(_MAX_REDIRECTS):
                try:
                    return call(self._client)
                except MovedError as exc:
                    self._redirect(exc)
            return call(self._client)

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
        self._read_script = client.register_script(lua_script("nshash_read"))
        self._correct_script = client.register_script(lua_script("nshash_correct"))
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
        # EVALSHA sha numkeys KEYS... base policy... then the document's eleven arguments.
        fixed = [b"EVALSHA", self._assign_sha, str(len(self._keys)).encode(), *self._keys]
        fixed += [self._base, *args]
        head = b"*%d\r\n" % (len(fixed) + 11) + b"".join(_bulk(a) for a in fixed)
        self._policy_cache = (policy, args, head)
        return args, head

    def _doc_args(self, doc: DocPrint) -> tuple[bytes, bytes, bytes, bytes, bytes]:
        """The exact-text fingerprint, all hashes (anchor candidates, then the sketch in
        ascending order, narrowed where the prefix keeps narrow sketches), the anchor candidate
        count, the sketch limit (after an ``n`` when narrowed) and the sketch values' places
        in the page (a JSON list; empty for none), which the guard reads for the frame."""
        try:
            doc, narrowed = self._compared(doc)
            exact = _signed((doc.exact,))[0].encode()
            hashes = _json_strings(_signed(doc.sentences) + _signed(doc.sketch))
            limit = (b"n%d" if narrowed else b"%d") % doc.limit
            at = places_of(doc)
            places = json.dumps(at, separators=(",", ":")).encode() if at else b""
            return exact, hashes, b"%d" % len(doc.sentences), limit, places
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
        exact, hashes, count, limit, places = self._doc_args(doc)
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
                _bulk(b"%d" % int(self._clock()) + self._retention),
                _bulk(struct.pack(f"<{len(doc.sentences)}Q", *doc.sentences)),
                _bulk(places),
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
        load = [b"SCRIPT", b"LOAD", _ASSIGN.encode("utf-8")]
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

        def send() -> Any:
            command = self._pack_assign(doc, policy, doc_id, title, meta)
            with self._errors():
                return self._run_assign([command])[0]

        reply = send()
        if _is_width(reply):  # refused before any write; the layout is read again
            self._narrow = None
            reply = send()
        if isinstance(reply, Exception):
            raise self._refusal(reply) from reply
        return self._decode_assign(doc, doc_id, reply)

    def _refusal(self, exc: Exception) -> NSHashError:
        """The error for a failed assignment: a refused retention window is the caller's."""
        if isinstance(exc, redis.ResponseError) and str(exc).startswith("RETENTION "):
            return ConfigError(f"{self.url}: {str(exc)[len('RETENTION '):]}")
        return self._translate(exc)

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
                out[i] = self._refusal(reply)
            else:
                out[i] = self._decode_assign(items[i][0], items[i][1], reply)

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        self._check()
        args = self._policy_args(policy)[0]
        now = b"%d" % int(self._clock())
        exact, hashes, count, limit, places = self._doc_args(doc)
        found = self._read(b"lookup", *args[:3], exact, hashes, count, limit, b"0", now, places)
        return int(found) or None

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        args = self._policy_args(policy)[0]
        now = b"%d" % int(self._clock())
        exact, hashes, count, limit, places = self._doc_args(doc)
        reply = self._read(b"lookup", *args[:3], exact, hashes, count, limit, b"1", now, places)
        if reply[0] == b"exact":
            return Explanation(int(reply[1]), "exact", theta=policy.theta)
        chosen = [int(g) for g in reply[1].split(b",") if g]
        anchors, boilerplate, rows = reply[2], reply[3], reply[4:]
        candidates = []
        for row in rows:
            gid, hits, shared, mine, theirs, frame, edits, top = row.split(b" ")
            found = judged(
                int(gid),
                tuple(_unsigned(h) for h in hits.split(b",") if h),
                int(shared),
                int(mine),
                int(theirs),
                policy,
                int(frame),
                int(edits),
            )
            if top == b"1":  # a long page whose top missed the group (assign.misses_top)
                found = dataclasses.replace(found, score=0.0, long_page=True)
            elif b"/" in top:  # a long page scored by its top (assign.top_share)
                few, size = top.split(b"/")
                found = dataclasses.replace(found, score=int(few) / int(size), long_page=True)
            candidates.append(found)
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
        return dataclasses.replace(rec, similar_id=int(reply[0]))

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
        reply = self._read(b"groups", str(int(min_size)).encode(), count_arg(limit))
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
        reply = self._read(b"metas", *(_checked_id(d).encode("utf-8") for d in doc_ids))
        out: list[DocMeta | None] = []
        for raw in reply:
            if raw is None:
                out.append(None)
                continue
            added, url, site = json.loads(raw)
            out.append(DocMeta(int(added), url, site))
        return out

    def sketch(self, similar_id: int) -> tuple[tuple[int, ...], int] | None:
        gid = self.resolve(similar_id)
        with self._errors():
            if self._client.zscore(self._base + b"sizes", f"{gid:015d}") is None:
                return None
            values = sorted(int(v) for v in self._client.smembers(self._base + b"s:%d" % gid))
            raw = self._client.hget(self._base + b"limits", str(gid))
        return tuple(values), NO_LIMIT if raw is None else int(raw)

    def narrow_sketches(self) -> bool:
        if self._narrow is None:
            self._narrow = self._read(b"width") == 1
        return self._narrow

    def letter_units(self) -> int | None:
        key = self._base + b"letters"
        units, counter = self._command(lambda c: c.mget(key, self._base + b"counter"))
        return begun_with(None if units is None else int(units), bool(counter and int(counter)))

    def record_letter_units(self, units: int) -> int:
        key = self._base + b"letters"
        self._command(lambda c: c.set(key, units, nx=True))
        return int(self._command(lambda c: c.get(key)) or 0)

    def common(self) -> set[int]:
        with self._errors():
            return {int(h) & _MASK64 for h in self._client.smembers(self._base + b"common")}

    def stats(self) -> StoreStats:
        documents, groups, fps, common, last, window, forgotten = self._read(b"stats")
        return StoreStats(
            documents=int(documents),
            groups=int(groups),
            fingerprints=int(fps),
            common_fingerprints=int(common),
            last_id=int(last),
            extra={"retention": int(window), "forgotten": int(forgotten)} if window else {},
        )

    # -- corrections ----------------------------------------------------------------------
    def _correct(self, step: Callable[[_Planned], Any]) -> Any:
        """Run a correction: read and decide (:mod:`.corrections`), then apply it with the
        check-and-apply script; read again while another writer changed what it read."""
        with self._errors():
            for _ in range(_CORRECTION_TRIES):
                plan = _Planned(self)
                done = step(plan)
                if not plan.ops:
                    return done
                args = [self._base, len(plan.checks) // 4, *plan.checks, *plan.ops]
                if self._correct_script(keys=self._keys, args=args) == b"OK":
                    self._corrected = (True, time.monotonic())
                    return done
        raise StoreError(
            f"{self.url}: a correction kept meeting concurrent writes; try it again", url=self.url
        )

    def detach(self, doc_id: str, by: str, at: int, votes: int) -> Correction:
        result: Correction = self._correct(
            lambda t: corrections.detach(t, doc_id, by, at, votes)
        )
        return result

    def join(self, a: int, b: int, by: str, at: int, cap: int) -> Correction:
        result: Correction = self._correct(lambda t: corrections.join(t, a, b, by, at, cap))
        return result

    def undo(self, cid: int, by: str, at: int, cap: int) -> Correction:
        result: Correction = self._correct(lambda t: corrections.undo(t, cid, by, at, cap))
        return result

    def corrections(self) -> list[Correction]:
        with self._errors():
            return corrections.listing(_Planned(self))

    def settle(self, doc_id: str, anchors: Sequence[int]) -> int | None:
        known, when = self._corrected
        if not known or time.monotonic() - when > _CORRECTED_TTL:
            with self._errors():
                known = bool(self._client.exists(self._base + b"corrections"))
            self._corrected = (known, time.monotonic())
        if not known:
            return None
        moved: int | None = self._correct(lambda t: corrections.settle(t, doc_id, anchors))
        return moved

    def ping(self) -> None:
        """Raise StoreError unless Redis answers and takes a write (see
        :func:`~nshash.stores.redis.ping_writable`): out of memory under ``noeviction`` it
        refuses every add, so it is not ready."""
        with self._errors():
            ping_writable(self._client, self.prefix, self.url)

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
