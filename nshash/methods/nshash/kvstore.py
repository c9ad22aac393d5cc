"""KVStore: the nshash tables (:mod:`~nshash.methods.nshash.assign`) on an ordered key-value store.

The tables are written once, against :class:`nshash.stores.kv.OrderedKV`; every backend that
implements it holds them unchanged: LevelDB (:class:`nshash.stores.leveldb.LevelKV`,
``leveldb:///path/to/dir``) and SQLite (:class:`nshash.stores.sqlite.SQLiteKV`,
``sqlite:///path/to/news.db``). The backend keeps the files: one writing process at a time
(a second opener gets :class:`~nshash.StoreLockedError`), read-only opens that work while a
writer holds the store, repair, the ``fsync`` policies (``always``, ``everysec`` by default,
``no``), and, where a failed write may leave a torn record (LevelDB), the refusal of writes
until a reopen has verified the counters. Threads of one process share a store safely: a
lock serializes every call.

**Atomicity.** :meth:`KVStore.assign` runs :func:`nshash.methods.nshash.assign.assign`
over an in-memory overlay, so the algorithm reads its own writes, then commits the overlay in
one batch (a LevelDB ``write_batch(transaction=True)``, a SQLite transaction): a document's
changes land together or not at all. Every committed batch is in the backend's log before it
returns, so a killed process loses nothing it acknowledged.

**Key layout.** Every key starts with a one-byte table prefix. Integers (ids, counts, sequence
numbers and the unsigned 64-bit fingerprints) are 8 bytes big-endian, converted only by
:func:`_enc` and :func:`_dec`, so a table's keys sort by number:

===========================  ============================================================
key                          value
===========================  ============================================================
``\\x00`` + name              a meta value (``format``, ``counter``, ``documents``,
                             ``groups``, ``fingerprints``, ``common``, ``mseq``; and
                             ``letter_units`` once a writer recorded it)
``f`` + fingerprint          anchor fingerprint -> group id (never moved)
``x`` + fingerprint          whole-text fingerprint -> group id
``c`` + hash                 empty: the hash is common (boilerplate)
``v`` + hash                 the groups kept apart on it so far, 8 bytes each (a few hashes)
``p`` + group id             the id this merged group resolves to
``s`` + group id             the group's sketch: its limit (8 bytes), then its sorted values,
                             4 bytes each (format 4: narrow sketches, see
                             :func:`~nshash.text.fingerprint.narrow`; 8 before), capped by
                             the policy's ``sketch_cap``, so it stays small
``z`` + group id             the group's document count (canonical groups only)
``m`` + group id + seq       a member's ``doc_id`` (UTF-8); ``seq`` is a store-wide arrival
                             number, so a group's members list in arrival order
``d`` + doc_id (UTF-8)       the document's record (similar_id, duplicate, merged_from,
                             title, fingerprints) packed by :func:`~.records.pack_record`
                             (format 3; format 2 wrote it as a JSON list)
``h`` + hour + group id      documents of the (canonical) group added in that hour (hours
                             since the epoch): a window is one range scan
``a`` + group id + hour      the same count, keyed by group, so a merge finds its hours
``t`` + group id             the group's first and last seen (epoch seconds)
``u`` + doc_id (UTF-8)       JSON ``[added, url, site]`` of a document added with a DocMeta
``l`` + group id             with a retention window: the group's last new document (epoch
                             seconds, the store's clock)
``o`` + time + group id      empty: the same, ordered by time (what forgetting scans)
``k`` + group id             the hashes the group wrote (anchors, exact texts, votes)
``b`` + group id             the ids merged into the group
``r`` + correction id        an editor's correction, JSON (see
                             :mod:`~nshash.methods.nshash.corrections`)
===========================  ============================================================

The ``h``/``a``/``t``/``u`` tables (activity) and the ``l``/``o``/``k``/``b`` tables
(retention, with the meta values ``retention`` and ``forgotten``) are additions to format 2:
a directory written before them opens with no activity and no window.

Members get one key each: adding a document writes one small key, never a growing list. A
merge moves the merged group's member keys and sketch to the canonical id. :meth:`stats`
reads the meta counters; :meth:`~KVStore.groups` scans the ``z`` table (one key per
canonical group). The ``c`` table is also held in memory, read once on open: the guard asks
about every sketch value of every document, and the table stays small (only hashes that
several groups were kept apart on). A writer also keeps a Bloom filter of its keys in the
``f``, ``x``, ``v`` and ``d`` tables (:class:`_KeyFilter`, ~3.4 bytes a key, ~50 a document,
filled a step before each of its first writes): most reads of those tables miss (most of a
document's anchors are new), and the filter says so without a read.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

from ...errors import (
    ConfigError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from ...inputs import checked_doc_id
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
from ...stores.kv import OrderedKV, prefix_end
from ...text.fingerprint import NO_LIMIT, DocPrint, narrow
from . import corrections
from .assign import MatchPolicy, assign, combine_sketch, explain, lookup, resolve, vote
from .base import Store, begun_with, letters_to_record
from .records import pack_record, unpack_full
from .retention import retained_assign, settle_window
from .tables import anchor_table, key_filter

__all__ = ["KVStore"]

_T = TypeVar("_T")

logger = logging.getLogger("nshash")

#: The layout version written to ``\x00format`` of a new store. 3 packs the ``d`` records
#: (:func:`~nshash.methods.nshash.records.pack_record`), where 2 wrote them as JSON text; 4
#: keeps narrow sketches (4 bytes a value, see :func:`~nshash.text.fingerprint.narrow`),
#: where 2 and 3 keep 53-bit ones in 8. A store of any of them is read and written in its own
#: format, any other is refused on open.
_FORMAT = 4
_FORMATS = (2, 3, 4)
#: The first format of narrow sketches.
_NARROW_FORMAT = 4

_META = b"\x00"
_FP = b"f"
_EXACT = b"x"
_COMMON = b"c"
_VOTES = b"v"
_PARENT = b"p"
_SKETCH = b"s"
_SIZE = b"z"
_MEMBER = b"m"
_DOC = b"d"
_HOUR = b"h"
_GROUP_HOUR = b"a"
_SEEN = b"t"
_DOC_META = b"u"
_LAST = b"l"
_ORDER = b"o"
_OWNED = b"k"
_ABSORBED = b"b"
_CORRECTION = b"r"

_COUNTERS = ("counter", "documents", "groups", "fingerprints", "common", "mseq")
#: With a retention window, the backend reclaims the space of forgotten groups once at least
#: this many, and as many as the groups left, were forgotten since it last did.
RECLAIM_AFTER = 4096
#: Settings and counts of a retention window (0 when the store has none); not recounted.
_RETENTION = ("retention", "forgotten")
#: The ``letter_units`` the store's fingerprints are made with, as its first writer recorded
#: it (0 when none did: a store begun before the setting, or with no writer yet; see
#: :func:`~nshash.methods.nshash.base.begun_with`); not recounted.
_SETTINGS = ("letter_units",)


_ONE = struct.Struct(">Q").pack
_TWO = struct.Struct(">QQ").pack


def _enc(*values: int) -> bytes:
    """Pack unsigned 64-bit integers as 8 bytes each, big-endian (the one place that does)."""
    try:
        n = len(values)
        if n == 1:  # a key or a value: most calls
            return _ONE(values[0])
        if n == 2:
            return _TWO(*values)
        return struct.pack(f">{n}Q", *values)
    except struct.error as exc:
        raise ConfigError(f"Not an unsigned 64-bit integer in {values!r}") from exc


def _dec(data: bytes) -> tuple[int, ...]:
    """Unpack what :func:`_enc` packed."""
    if len(data) % 8:
        raise StoreCorruptError(f"A stored integer field has {len(data)} bytes, not 8 per value")
    return struct.unpack(f">{len(data) // 8}Q", data)


def _enc_sketch(limit: int, values: Iterable[int], narrow: bool) -> bytes:
    """A group's ``s`` value: its limit, then its sorted values (8 bytes each, 4 narrow)."""
    hs = sorted(values)
    if not narrow:
        return _enc(limit, *hs)
    try:
        return _ONE(limit) + struct.pack(f">{len(hs)}I", *hs)
    except struct.error as exc:
        raise ConfigError(f"Not a narrow sketch value in {hs!r:.80}") from exc


def _dec_sketch(data: bytes, narrow: bool) -> tuple[tuple[int, ...], int]:
    """(values, limit) of what :func:`_enc_sketch` packed."""
    if not narrow:
        limit, *values = _dec(data)
        return tuple(values), limit
    if len(data) < 8 or len(data) % 4:
        raise StoreCorruptError(f"A stored sketch has {len(data)} bytes, not 8 and 4 per value")
    return struct.unpack_from(f">{(len(data) - 8) // 4}I", data, 8), _one(data[:8])


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a value this store writes")


def _one(data: bytes) -> int:
    (value,) = _dec(data)
    return value


class _Overlay:
    """The :class:`~nshash.methods.nshash.assign.Tables` of one call: the store's reads under
    this call's writes.

    Writes go to ``pending`` (``None`` marks a deletion) and ``meta``; nothing reaches the
    store until :meth:`KVStore.assign` commits them in one batch.
    """

    def __init__(
        self,
        db: OrderedKV,
        meta: dict[str, int],
        common: MutableMapping[int, int],
        order_from: bytes = _ORDER,
        parents: dict[int, int] | None = None,
        held: Collection[int] | None = None,
    ) -> None:
        self.db = db
        self.meta = dict(meta)
        self.pending: dict[bytes, bytes | None] = {}
        #: What this call read from the store (a key is read once: the assignment asks about
        #: an anchor, a sketch or a size more than once).
        self.read: dict[bytes, bytes | None] = {}
        #: The committed common fingerprints, each mapped to 1 (the store's cache, read only
        #: here; see :func:`~nshash.methods.nshash.tables.anchor_table`).
        self.common = common
        #: Fingerprints this call made common.
        self.new_common: set[int] = set()
        #: With a retention window: groups last seen before this match nothing.
        self.cutoff: int | None = None
        #: Where purge starts scanning the ``o`` table (see :meth:`KVStore._commit`).
        self.order_from = order_from
        #: The committed ``p`` table (the store's cache, read only here), or None to read it
        #: from the store; and the ids this call merged (an id -> its root) or freed (None).
        self.parents = parents
        self.new_parents: dict[int, int | None] = {}
        #: The store's filter of its keys in the tables most reads miss (see
        #: :class:`_KeyFilter`): a key of those tables not in it is not in the store. None to
        #: read every key from the store.
        self.held = held

    # -- raw access ----------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        if key in self.pending:
            return self.pending[key]
        read = self.read
        if key in read:
            return read[key]
        if self.held is not None and key[:1] in _FILTERED and _key_hash(key) not in self.held:
            return None  # known absent: not in the store, and not written by this call
        value: bytes | None = self.db.get(key)
        read[key] = value
        return value

    def put(self, key: bytes, value: bytes) -> None:
        self.pending[key] = value

    def delete(self, key: bytes) -> None:
        self.pending[key] = None

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Yield the live ``(key, value)`` pairs under *prefix*, database and overlay merged."""
        seen: set[bytes] = set()
        for key, value in self.db.items(prefix):
            seen.add(key)
            if key in self.pending:
                mine = self.pending[key]
                if mine is not None:
                    yield key, mine
            else:
                yield key, value
        for key, mine in sorted(
            (k, v) for k, v in self.pending.items() if k.startswith(prefix) and k not in seen
        ):
            if mine is not None:
                yield key, mine

    def get_int(self, key: bytes) -> int | None:
        value = self.get(key)
        return None if value is None else _one(value)

    # -- reads of the Tables protocol ------------------------------------------------------
    def get_fp(self, h: int) -> int | None:
        gid = self.get_int(_FP + _enc(h))
        if gid is not None and self.cutoff is not None and self._expired(gid):
            return None
        return gid

    def get_exact(self, h: int) -> int | None:
        gid = self.get_int(_EXACT + _enc(h))
        if gid is not None and self.cutoff is not None and self._expired(gid):
            return None
        return gid

    def _expired(self, gid: int) -> bool:
        """Whether *gid*'s group was last seen before the cutoff (so it matches nothing)."""
        seen = self.get_int(_LAST + _enc(resolve(self, gid)))
        return seen is not None and self.cutoff is not None and seen < self.cutoff

    def is_common(self, h: int) -> bool:
        return h in self.common or h in self.new_common

    def not_common(self, hs: Iterable[int]) -> list[int]:
        common, new = self.common, self.new_common
        return [h for h in dict.fromkeys(hs) if h not in common and h not in new]

    def live_set(self, hs: Iterable[int]) -> set[int]:
        common, new = self.common, self.new_common
        return {h for h in hs if h not in common and h not in new}

    def common_sets(self) -> tuple[Collection[int], set[int]]:
        return self.common, self.new_common

    def get_parent(self, gid: int) -> int | None:
        if self.parents is None:
            return self.get_int(_PARENT + _enc(gid))
        if gid in self.new_parents:
            return self.new_parents[gid]
        return self.parents.get(gid)

    def group_sketch(self, gid: int) -> tuple[tuple[int, ...], int]:
        value = self.get(_SKETCH + _enc(gid))
        if not value:
            return (), NO_LIMIT
        return _dec_sketch(value, self.meta["format"] >= _NARROW_FORMAT)

    def get_votes(self, h: int) -> tuple[int, ...]:
        value = self.get(_VOTES + _enc(h))
        return _dec(value) if value else ()

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        value = self.get(_DOC + doc_id.encode("utf-8"))
        if value is None:
            return None
        score: float | None = None
        verdict: str | None = None
        try:
            if self.meta["format"] >= 3:
                sid, duplicate, merged, title, fps, score, verdict = unpack_full(value)
            else:
                sid, duplicate, merged, title, fps = json.loads(
                    value, parse_constant=_refuse_constant
                )
            ids = [sid, *merged]
            if (
                any(type(i) is not int or not 0 < i < 1 << 63 for i in ids)
                or type(duplicate) is not bool
                or not (title is None or type(title) is str)
                or any(type(h) is not int or not 0 <= h < 1 << 64 for h in fps)
            ):
                raise ValueError("a field has the wrong type or is out of range")
            return DocumentRecord(
                doc_id, sid, duplicate, tuple(merged), title, tuple(fps), score, verdict
            )
        except (ValueError, TypeError, RecursionError) as exc:
            raise StoreCorruptError(
                f"The record of doc_id {doc_id!r:.80} is unreadable: {exc}"
            ) from exc

    def get_size(self, gid: int) -> int:
        return self.get_int(_SIZE + _enc(gid)) or 0

    # -- writes of the Tables protocol -----------------------------------------------------
    def set_fp(self, h: int, gid: int) -> None:
        key = _FP + _enc(h)
        if self.get(key) is None:
            self.meta["fingerprints"] += 1
        self.put(key, _enc(gid))
        if self.meta["retention"]:
            self._own(gid, _FP, h)

    def set_exact(self, h: int, gid: int) -> None:
        self.put(_EXACT + _enc(h), _enc(gid))
        if self.meta["retention"]:
            self._own(gid, _EXACT, h)

    def _own(self, gid: int, table: bytes, h: int) -> None:
        """Note that group *gid* wrote hash *h* in *table* (fp, exact or votes), so forgetting
        the group finds it: 9 bytes, the table's prefix and the hash."""
        key = _OWNED + _enc(gid)
        self.put(key, (self.get(key) or b"") + table + _enc(h))

    def add_common(self, hs: Iterable[int]) -> None:
        for h in hs:
            if not self.is_common(h):
                self.new_common.add(h)
                self.meta["common"] += 1
                self.put(_COMMON + _enc(h), b"")

    def set_votes(self, h: int, gids: tuple[int, ...]) -> None:
        if self.meta["retention"]:
            before = self.get_votes(h)
            for g in gids:
                if g not in before:
                    self._own(g, _VOTES, h)
        if gids:
            self.put(_VOTES + _enc(h), _enc(*gids))
        else:
            self.delete(_VOTES + _enc(h))

    def _put_sketch(self, gid: int, hs: set[int], limit: int) -> None:
        self.put(_SKETCH + _enc(gid), _enc_sketch(limit, hs, self.meta["format"] >= _NARROW_FORMAT))

    def new_group(self, sketch: Iterable[int], limit: int) -> int:
        gid = self.meta["counter"] + 1
        self.meta["counter"] = gid
        self.meta["groups"] += 1
        self._put_sketch(gid, set(sketch), limit)
        self.put(_SIZE + _enc(gid), _enc(0))
        return gid

    def extend_sketch(self, gid: int, hs: Iterable[int], limit: int, cap: int) -> None:
        self._put_sketch(gid, *combine_sketch(*self.group_sketch(gid), hs, limit, cap))

    def merge_into(self, root: int, gid: int, cap: int) -> None:
        self.put(_PARENT + _enc(gid), _enc(root))
        self.new_parents[gid] = root
        self._put_sketch(
            root, *combine_sketch(*self.group_sketch(root), *self.group_sketch(gid), cap)
        )
        self.delete(_SKETCH + _enc(gid))
        self.put(_SIZE + _enc(root), _enc(self.get_size(root) + self.get_size(gid)))
        self.delete(_SIZE + _enc(gid))
        self.meta["groups"] -= 1
        old = _MEMBER + _enc(gid)
        new = _MEMBER + _enc(root)
        for key, doc_id in list(self.scan(old)):
            # The arrival number stays, so the merged members interleave in arrival order.
            self.put(new + key[len(old) :], doc_id)
            self.delete(key)
        seen = self.get_seen(gid)
        if seen is not None:
            self.delete(_SEEN + _enc(gid))
            self._widen(root, *seen)
        old = _GROUP_HOUR + _enc(gid)
        for key, value in list(self.scan(old)):
            (hour,) = _dec(key[len(old) :])
            self.delete(key)
            self.delete(_HOUR + _enc(hour, gid))
            self._count_hour(root, hour, _one(value))
        if self.meta["retention"]:
            self._merge_retention(root, gid)

    def _merge_retention(self, root: int, gid: int) -> None:
        """Move what *gid* wrote and the ids merged into it to *root* (the document that
        merged them touches *root* next)."""
        last = self.get_int(_LAST + _enc(gid))
        if last is not None:
            self.delete(_LAST + _enc(gid))
            self.delete(_ORDER + _enc(last, gid))
        for table, more in ((_OWNED, b""), (_ABSORBED, _enc(gid))):
            moved = self.get(table + _enc(gid)) or b""
            if moved or more:
                self.delete(table + _enc(gid))
                self.put(table + _enc(root), (self.get(table + _enc(root)) or b"") + more + moved)

    # -- retention (see nshash.methods.nshash.retention) ----------------------------------
    def touch(self, gid: int, now: int) -> None:
        key = _LAST + _enc(gid)
        last = self.get_int(key)
        if last is not None:
            self.delete(_ORDER + _enc(last, gid))
        self.put(key, _enc(now))
        self.put(_ORDER + _enc(now, gid), b"")
        self.order_from = min(self.order_from, _ORDER + _enc(now, gid))  # a clock set back

    def purge(self, cutoff: int, most: int) -> int:
        self.cutoff = cutoff
        # Scan from where the last purge stopped: the keys before it are deleted, and an
        # ordered store's scan would step over every one of them again (LevelDB keeps
        # them as tombstones until a compaction).
        due: list[bytes] = []
        for key, _value in self.db.items(start=self.order_from, stop=_ORDER + _enc(cutoff)):
            if len(due) >= most:
                break
            due.append(key)
        for key in due:
            when, gid = _dec(key[1:])
            self.delete(key)
            if self.get_int(_LAST + _enc(gid)) == when:
                self.forget(gid)
        if due:
            self.order_from = due[-1]
        return len(due)

    def forget(self, gid: int) -> None:
        """Delete everything of canonical group *gid*; its id is never handed out again."""
        g8 = _enc(gid)
        # The ids that resolve to gid: a hash it wrote may have been taken by a newer group
        # while gid was expired but not yet forgotten (an expired group matches nothing).
        ours = {gid, *_dec(self.get(_ABSORBED + g8) or b"")}
        owned = self.get(_OWNED + g8) or b""
        for at in range(0, len(owned), 9):
            key = owned[at : at + 9]
            if key[:1] == _VOTES:
                voters = self.get_votes(_one(key[1:]))
                kept = tuple(g for g in voters if g not in ours)
                if len(kept) != len(voters):
                    self.set_votes(_one(key[1:]), kept)
            elif self.get_int(key) in ours:
                self.delete(key)
                if key[:1] == _FP:
                    self.meta["fingerprints"] -= 1
        self.delete(_SEEN + g8)
        for key, _value in list(self.scan(_GROUP_HOUR + g8)):
            (hour,) = _dec(key[9:])
            self.delete(key)
            self.delete(_HOUR + _enc(hour, gid))
        for key, raw in list(self.scan(_MEMBER + g8)):
            self.delete(key)
            self.delete(_DOC + raw)
            self.delete(_DOC_META + raw)
        for merged in _dec(self.get(_ABSORBED + g8) or b""):
            self.delete(_PARENT + _enc(merged))
            self.new_parents[merged] = None
        last = self.get_int(_LAST + g8)
        if last is not None:
            self.delete(_ORDER + _enc(last, gid))
        size = self.get_int(_SIZE + g8) or 0
        for table in (_SKETCH, _SIZE, _LAST, _OWNED, _ABSORBED):
            self.delete(table + g8)
        self.meta["groups"] -= 1
        self.meta["documents"] -= size  # the documents go with their group
        self.meta["forgotten"] += 1

    def get_seen(self, gid: int) -> tuple[int, int] | None:
        value = self.get(_SEEN + _enc(gid))
        if value is None:
            return None
        first, last = _dec(value)
        return first, last

    def _widen(self, gid: int, first: int, last: int) -> None:
        seen = self.get_seen(gid)
        if seen is not None:
            first, last = min(first, seen[0]), max(last, seen[1])
        self.put(_SEEN + _enc(gid), _enc(first, last))

    def _count_hour(self, gid: int, hour: int, n: int) -> None:
        key = _GROUP_HOUR + _enc(gid, hour)
        total = (self.get_int(key) or 0) + n
        self.put(key, _enc(total))
        self.put(_HOUR + _enc(hour, gid), _enc(total))

    def note(self, gid: int, doc_id: str | None, meta: DocMeta) -> None:
        self._widen(gid, meta.added, meta.added)
        self._count_hour(gid, meta.added // HOUR, 1)
        if doc_id is not None:
            value = json.dumps([meta.added, meta.url, meta.site], separators=(",", ":"))
            self.put(_DOC_META + doc_id.encode("utf-8"), value.encode("utf-8"))

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
        self.put(_SIZE + _enc(gid), _enc(self.get_size(gid) + 1))
        self.meta["documents"] += 1
        if record is None:
            return
        seq = self.meta["mseq"] + 1
        self.meta["mseq"] = seq
        doc_id = record.doc_id.encode("utf-8")
        self.put(_MEMBER + _enc(gid, seq), doc_id)
        fields = (record.similar_id, record.duplicate, record.merged_from, record.title)
        if self.meta["format"] >= 3:
            value = pack_record(*fields, record.fingerprints, record.score, record.verdict)
        else:
            text = [*fields[:2], list(fields[2]), fields[3], list(record.fingerprints)]
            value = json.dumps(text, separators=(",", ":")).encode("utf-8")
        self.put(_DOC + doc_id, value)


    # -- corrections (CorrectionTables) ---------------------------------------------------
    def group_size(self, gid: int) -> int | None:
        return self.get_int(_SIZE + _enc(gid))

    def group_members(self, gid: int, most: int | None = None) -> list[str]:
        out: list[str] = []
        for _key, doc_id in self.scan(_MEMBER + _enc(gid)):
            if most is not None and len(out) >= most:
                break
            out.append(doc_id.decode("utf-8"))
        return out

    def corrections(self) -> list[str]:
        return [value.decode("utf-8") for _key, value in self.scan(_CORRECTION)]

    def put_correction(self, cid: int, entry: str) -> None:
        self.put(_CORRECTION + _enc(cid), entry.encode("utf-8"))

    def vote(self, hs: Sequence[int], groups: tuple[int, int], need: int) -> None:
        vote(self, hs, groups, need)

    def move_member(self, doc_id: str, src: int, dst: int, verdict: str | None) -> None:
        raw = doc_id.encode("utf-8")
        old = _MEMBER + _enc(src)
        key = next((k for k, v in self.scan(old) if v == raw), None)
        rec = self.get_doc(doc_id)
        if key is None or rec is None or self.group_size(dst) is None:
            raise ValueError(f"{doc_id!r:.60} cannot move from group {src} to {dst}")
        self.delete(key)
        seq = self.meta["mseq"] + 1  # listed last in its new story, as every store lists it
        self.meta["mseq"] = seq
        self.put(_MEMBER + _enc(dst, seq), raw)
        self.put(_SIZE + _enc(src), _enc(self.get_size(src) - 1))
        self.put(_SIZE + _enc(dst), _enc(self.get_size(dst) + 1))
        moved = replace(rec, similar_id=dst, verdict=verdict or rec.verdict)
        fields = (moved.similar_id, moved.duplicate, moved.merged_from, moved.title)
        if self.meta["format"] >= 3:
            value = pack_record(*fields, moved.fingerprints, moved.score, moved.verdict)
        else:
            text = [*fields[:2], list(fields[2]), fields[3], list(moved.fingerprints)]
            value = json.dumps(text, separators=(",", ":")).encode("utf-8")
        self.put(_DOC + raw, value)
        meta = self.get(_DOC_META + raw)
        if meta is not None:
            added = int(json.loads(meta)[0])
            hour = added // HOUR
            self._count_hour(src, hour, -1)
            if (self.get_int(_GROUP_HOUR + _enc(src, hour)) or 0) <= 0:
                self.delete(_GROUP_HOUR + _enc(src, hour))
                self.delete(_HOUR + _enc(hour, src))
            self._count_hour(dst, hour, 1)
            self._widen(dst, added, added)

    def split_off(
        self,
        root: int,
        gid: int,
        sketch: tuple[tuple[int, ...], int],
        root_sketch: tuple[tuple[int, ...], int],
        without_id: int,
    ) -> None:
        if self.get_parent(gid) != root or self.group_size(gid) is not None:
            raise ValueError(f"group {gid} is not merged into {root}")
        self.delete(_PARENT + _enc(gid))
        self.new_parents[gid] = None
        self._put_sketch(gid, set(sketch[0]), sketch[1])
        self._put_sketch(root, set(root_sketch[0]), root_sketch[1])
        self.put(_SIZE + _enc(gid), _enc(without_id))
        self.put(_SIZE + _enc(root), _enc(self.get_size(root) - without_id))
        self.meta["groups"] += 1


#: The tables whose reads mostly miss, which a writer's :class:`_KeyFilter` answers: anchors
#: (most of a document's are new), exact texts, votes (most hashes have none) and doc ids.
_FILTERED = (_FP, _EXACT, _VOTES, _DOC)
_U64_MASK = (1 << 64) - 1


def _key_hash(key: bytes) -> int:
    """What a :class:`_KeyFilter` holds of *key* (a hash of this process's: the filter lives
    and dies with it)."""
    return hash(key) & _U64_MASK


class _KeyFilter:
    """The keys a writer's store holds in the :data:`_FILTERED` tables, in a
    :func:`~nshash.methods.nshash.tables.key_filter` (a Bloom filter, compiled only): a key it
    has never been given is known absent without a read. Of the ~25 reads a document made,
    ~20 missed (most of its anchors are new, most hashes have no votes), each of which asked
    every LevelDB level's own filter.

    It is filled from those tables :data:`STEP` keys at a time, one step before each write
    after the open (so opening reads nothing more, and a large store fills it over its first
    writes), and it is given every key a write puts there, before the write (so every key the
    store holds is in it). It is asked only once the scan is done. A key deleted from the
    store (a forgotten group's) stays in it, at worst a read that finds nothing, until a
    retention window's store reclaims its space: the filter is then made again from what is
    left, so it holds about one window's keys.
    """

    #: Keys read a step.
    STEP = 4096

    def __init__(self, keys: Any) -> None:
        self.keys = keys
        #: The tables not scanned to their end yet, and the first key of the first one that
        #: may not be in the filter; no tables once all are.
        self.tables = list(_FILTERED)
        self.scan_from: bytes = _FILTERED[0]

    def ready(self) -> Collection[int] | None:
        """The filter to ask, or None while the scan is under way."""
        return None if self.tables else self.keys

    def advance(self, kv: OrderedKV) -> None:
        """Put the next :data:`STEP` keys of the tables into the filter."""
        n = 0
        while self.tables:
            for key, _value in kv.items(start=self.scan_from, stop=prefix_end(self.tables[0])):
                self.keys.add(_key_hash(key))
                n += 1
                if n == self.STEP:
                    self.scan_from = key + b"\x00"
                    return
            self.tables.pop(0)
            if self.tables:
                self.scan_from = self.tables[0]

    def wrote(self, puts: dict[bytes, bytes | None]) -> None:
        """Note the keys that *puts* (a write's) sets in the filtered tables."""
        add = self.keys.add
        for key, value in puts.items():
            if value is not None and key[:1] in _FILTERED:
                add(_key_hash(key))


class KVStore(Store):
    """The tables on an ordered key-value store: one process, large corpora on disk.

    Use it when the state outgrows memory or must survive restarts without a snapshot, and
    one process does the writing. Share state between processes through Redis instead.
    :func:`~nshash.open_store` makes one for a ``leveldb://`` or ``sqlite://`` URL.

    Args:
        kv: the open store (see :func:`nshash.stores.registry.open_kv`), closed with this one
            (and here, if opening fails); read-only when ``kv.readonly``.
        repair: recount every counter and write those that disagree (what ``nshash repair``
            does, after the backend's own repair); :attr:`repaired` then says what was fixed.

    Raises:
        StoreCorruptError: *kv* holds data that is not an nshash store, or tables in another
            format, or counters behind what it holds.
        StoreError: the store cannot be read.

    Example:
        >>> import tempfile
        >>> from nshash.stores.sqlite import SQLiteKV
        >>> store = KVStore(SQLiteKV(tempfile.mkdtemp() + "/news.db"))
        >>> store.stats().documents
        0
        >>> store.close()
    """

    def __init__(
        self,
        kv: OrderedKV,
        *,
        repair: bool = False,
        retention: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._kv = kv
        self._clock = clock
        #: The first key of the ``o`` table that may still be there (see _Overlay.purge).
        self._order_from = _ORDER
        #: The ``forgotten`` count when the backend last reclaimed space (see _commit).
        self._reclaimed_at = 0
        self.url = kv.url
        self.readonly = kv.readonly
        self._lock = threading.Lock()
        self._closed = False
        #: What opening with ``repair=True`` found and fixed (None: nothing to fix).
        self.repaired: str | None = None
        #: The ``p`` table, held in memory by a writer as ``c`` is (see _load_parents); None
        #: when read-only (a reader reads it from the store, so it sees later merges).
        self._parents: dict[int, int] | None = None
        #: A writer's filter of the keys it holds where most reads miss (None when read-only,
        #: where another process writes, or on the pure path).
        keys = None if self.readonly else key_filter()
        self._held = _KeyFilter(keys) if keys is not None else None
        #: The ``letter_units`` to record with the first group (see record_letter_units).
        self._letters = 0
        #: The detaches that hold (None: not read yet); see settle.
        self._detaches: list[dict[str, Any]] | None = None
        try:
            if self.readonly:
                self._meta = self._load_meta()
                self._common = self._load_common()
            else:
                self._meta, self._common = self._verified(recount=repair)
            self._settle_window(retention)
            self._reclaimed_at = self._meta["forgotten"]
        except BaseException:
            kv.close()
            raise

    def _settle_window(self, requested: int | None) -> None:
        """Open with the retention window asked for, or the one the store has (see
        :func:`~nshash.methods.nshash.retention.settle_window`)."""
        stored = self._meta["retention"] or None
        window = settle_window(stored, requested, self._meta["counter"] == 0, self.url)
        if window == stored or window is None:
            return
        if not self.readonly:
            with self._kv.errors("Cannot write"):
                self._kv.write({_META + b"retention": _enc(window)}, sync=True)
        self._meta["retention"] = window

    # -- opening -------------------------------------------------------------------------
    def _verified(self, recount: bool = False) -> tuple[dict[str, int], MutableMapping[int, int]]:
        """Read the counters of the open store and check them against its tables."""
        with self._kv.errors("Cannot read"):
            meta = self._load_meta()
            if recount:
                meta = self._recount(meta)
            self._meta = meta
            common = self._load_common()
            self._parents = self._load_parents()
            self._verify(meta)
        return meta, common

    def _last_id(self, prefix: bytes) -> int:
        """The largest group id keyed under *prefix* (0 for none): one seek, not a scan."""
        first = next(self._kv.items(prefix, reverse=True), None)
        return 0 if first is None else _one(first[0][1:9])

    def _verify(self, meta: dict[str, int]) -> None:
        """Refuse a store whose id counter is behind an id it holds (ids would repeat)."""
        last = max(self._last_id(prefix) for prefix in (_SIZE, _SKETCH, _PARENT, _MEMBER))
        if last > meta["counter"]:
            raise StoreCorruptError(
                f"{self.url!r} holds group {last} but its id counter is"
                f" {meta['counter']}; reopen it with repair (nshash repair --store URL)",
                url=self.url,
            )

    def _recount(self, meta: dict[str, int]) -> dict[str, int]:
        """Count every table again and write the counters that disagree (for repair)."""
        kv = self._kv
        counts = dict.fromkeys(_COUNTERS, 0)
        last = 0
        for key, value in kv.items(_SIZE):
            counts["groups"] += 1
            counts["documents"] += _one(value)
            last = max(last, _one(key[1:]))
        for key, value in kv.items(_PARENT):
            last = max(last, _one(key[1:]), _one(value))
        for prefix in (_FP, _EXACT):
            for _key, value in kv.items(prefix):
                if prefix == _FP:
                    counts["fingerprints"] += 1
                last = max(last, _one(value))
        for key, _value in kv.items(_MEMBER):
            gid, seq = _dec(key[1:])
            last = max(last, gid)
            counts["mseq"] = max(counts["mseq"], seq)
        counts["common"] = sum(1 for _ in kv.items(_COMMON))
        # Ids are never reused: the counter only moves forward.
        counts["counter"] = max(last, meta["counter"])
        counts["mseq"] = max(counts["mseq"], meta["mseq"])
        for name in (*_RETENTION, *_SETTINGS, "format"):
            counts[name] = meta[name]
        fixed = {k: v for k, v in counts.items() if v != meta[k]}
        if fixed:
            puts = {_META + name.encode("ascii"): _enc(n) for name, n in fixed.items()}
            kv.write(puts, sync=True)
            self.repaired = ", ".join(f"{k} {meta[k]} -> {v}" for k, v in sorted(fixed.items()))
        rebuilt: str | None = getattr(kv, "repaired", None)  # the backend's own repair
        if rebuilt:
            self.repaired = f"{rebuilt}; {self.repaired}" if self.repaired else rebuilt
        return counts

    def _recover(self) -> None:
        """After a failed write: reopen the store and verify it, or stay failed.

        LevelDB may have half a record in its log after a full disk; a reopen reads the log up
        to the last whole record, and the counters are checked against the tables before a
        write is accepted again. Tried at most once a second; the caller holds the lock.
        """
        kv = self._kv
        if not kv.recovery_due():
            return
        try:
            kv.reopen()
            self._meta, self._common = self._verified()
        except StoreError as exc:
            kv.failed = f"{kv.failed}; reopening failed too: {exc}"
            return
        kv.recovered()

    def _load_meta(self) -> dict[str, int]:
        kv = self._kv
        with kv.errors("Cannot read"):
            stored = kv.get(_META + b"format")
            if stored is None:
                if next(kv.items(), None) is not None:
                    raise StoreCorruptError(
                        f"{self.url!r} holds data that is not an nshash store", url=self.url
                    )
                if not self.readonly:
                    kv.write({_META + b"format": _enc(_FORMAT)}, sync=True)
            elif _one(stored) not in _FORMATS:
                raise StoreCorruptError(
                    f"{self.url!r} has store format {_one(stored)!r}; "
                    f"this version reads formats {', '.join(map(str, _FORMATS[:-1]))}"
                    f" and {_FORMATS[-1]}",
                    url=self.url,
                )
            meta: dict[str, int] = {"format": _FORMAT if stored is None else _one(stored)}
            for name in (*_COUNTERS, *_RETENTION, *_SETTINGS):
                value = kv.get(_META + name.encode("ascii"))
                meta[name] = 0 if value is None else _one(value)
            return meta

    def _load_common(self) -> MutableMapping[int, int]:
        """The ``c`` table, held in memory (every assignment asks about each anchor): each
        hash mapped to 1 in an :func:`~nshash.methods.nshash.tables.anchor_table`, 12 bytes a
        hash where a set of ints takes ~110."""
        common = anchor_table(filtered=True)
        with self._kv.errors("Cannot read"):
            for key, _value in self._kv.items(_COMMON):
                common[_one(key[1:])] = 1
        if len(common) != self._meta["common"]:
            raise StoreCorruptError(
                f"{self.url!r} counts {self._meta['common']} common "
                f"fingerprints but holds {len(common)}",
                url=self.url,
            )
        return common

    def _load_parents(self) -> dict[int, int]:
        """The ``p`` table: every candidate group of every document is resolved through it,
        and it holds only merged ids (few), so nearly every read of it would be a miss."""
        with self._kv.errors("Cannot read"):
            return {_one(key[1:]): _one(value) for key, value in self._kv.items(_PARENT)}

    # -- durability ----------------------------------------------------------------------
    def _commit(self, overlay: _Overlay) -> None:
        """Write one call's changes in one transactional batch; the caller holds the lock."""
        if self._letters and not overlay.meta["letter_units"] and overlay.meta["counter"]:
            # The first group's batch records the letter_units asked for (see
            # record_letter_units), so a store never holds a group without it.
            overlay.meta["letter_units"] = self._letters
        changed = {k: v for k, v in overlay.meta.items() if v != self._meta[k]}
        if not overlay.pending and not changed:
            return
        puts: dict[bytes, bytes | None] = dict(overlay.pending)
        for name, value in changed.items():
            puts[_META + name.encode("ascii")] = _enc(value)
        if self._held is not None:
            self._held.wrote(puts)
        self._kv.write(puts)
        self._meta = overlay.meta
        for h in overlay.new_common:
            self._common[h] = 1
        if self._parents is not None:
            for gid, root in overlay.new_parents.items():
                if root is None:
                    self._parents.pop(gid, None)
                else:
                    self._parents[gid] = root
        self._order_from = overlay.order_from
        forgotten = self._meta["forgotten"] - self._reclaimed_at
        if forgotten >= max(RECLAIM_AFTER, self._meta["groups"]):
            # As many groups deleted as there are left: have the backend free their space
            # (LevelDB compacts in the background), so the files stay about one window; and
            # fill the key filter again from what is left, so it stays about one window too.
            self._reclaimed_at = self._meta["forgotten"]
            self._kv.reclaim()
            if self._held is not None:
                self._held = _KeyFilter(key_filter())

    def _check_writable(self) -> None:
        if self._kv.failed is not None:
            self._recover()
        if self._kv.failed is not None:
            raise StoreError(
                f"The store refuses writes until it is reopened and verified: {self._kv.failed}",
                url=self.url,
            )

    # -- the Store contract ----------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)

    @contextmanager
    def _open_db(self) -> Iterator[None]:
        """Hold the lock on an open store; the backend's failures become :class:`StoreError`."""
        with self._lock:
            self._check()
            with self._kv.errors():
                yield

    def _reader(self) -> _Overlay:
        held = self._held.ready() if self._held is not None else None
        return _Overlay(self._kv, self._meta, self._common, self._order_from, self._parents, held)

    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        with self._open_db():
            if self.readonly:
                raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
            self._check_writable()
            if self._held is not None:
                self._held.advance(self._kv)
            overlay = self._reader()
            window = self._meta["retention"]
            doc = self._compared(doc)
            if window:
                now = int(self._clock())
                result = retained_assign(overlay, doc, policy, doc_id, title, meta, window, now)
            else:
                result = assign(overlay, doc, policy, doc_id, title, meta)
            self._commit(overlay)
            return result

    # -- corrections ----------------------------------------------------------------------
    def _change(self, step: Callable[[_Overlay], _T]) -> _T:
        """Run *step* on an overlay and commit its writes in one batch."""
        with self._open_db():
            if self.readonly:
                raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
            self._check_writable()
            if self._held is not None:
                self._held.advance(self._kv)
            overlay = self._reader()
            done = step(overlay)
            self._commit(overlay)
            self._detaches = None
            return done

    def detach(self, doc_id: str, by: str, at: int, votes: int) -> Correction:
        return self._change(lambda t: corrections.detach(t, doc_id, by, at, votes))

    def join(self, a: int, b: int, by: str, at: int, cap: int) -> Correction:
        return self._change(lambda t: corrections.join(t, a, b, by, at, cap))

    def undo(self, cid: int, by: str, at: int, cap: int) -> Correction:
        return self._change(lambda t: corrections.undo(t, cid, by, at, cap))

    def corrections(self) -> list[Correction]:
        with self._open_db():
            return corrections.listing(self._reader())

    def settle(self, doc_id: str, anchors: Sequence[int]) -> int | None:
        # The detaches that hold, read once per correction this process commits (one
        # process writes a store at a time).
        if self._detaches is None:
            with self._open_db():
                self._detaches = corrections.active_detaches(self._reader())
        if not self._detaches:
            return None
        detaches = self._detaches
        return self._change(lambda t: corrections.settle(t, doc_id, anchors, detaches))

    def _compared(self, doc: DocPrint) -> DocPrint:
        """*doc* as this store compares it: with narrow sketches from format 4 on."""
        return narrow(doc) if self._meta["format"] >= _NARROW_FORMAT else doc

    def _dated_reader(self) -> _Overlay:
        """A reader with the groups expired by now hidden (when there is a window)."""
        reader = self._reader()
        if self._meta["retention"]:
            reader.cutoff = int(self._clock()) - self._meta["retention"]
        return reader

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        with self._open_db():
            return lookup(self._dated_reader(), self._compared(doc), policy)

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        with self._open_db():
            return explain(self._dated_reader(), self._compared(doc), policy)

    def resolve(self, similar_id: int) -> int:
        with self._open_db():
            return resolve(self._reader(), similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        with self._open_db():
            reader = self._reader()
            rec = reader.get_doc(doc_id)
            if rec is None:
                return None
            return dataclasses.replace(rec, similar_id=resolve(reader, rec.similar_id))

    def _canonical(self, reader: _Overlay, similar_id: int) -> int | None:
        """The group *similar_id* resolves to, or None (never handed out, or forgotten)."""
        if not 0 < similar_id <= self._meta["counter"]:
            return None
        gid = resolve(reader, similar_id)
        return None if reader.get(_SIZE + _enc(gid)) is None else gid

    def group_head(self, similar_id: int, members: int) -> Group | None:
        with self._open_db():
            reader = self._reader()
            gid = self._canonical(reader, similar_id)
            return None if gid is None else self._group(reader, gid, members)

    def _group(self, reader: _Overlay, gid: int, most: int | None = None) -> Group:
        members: list[Member] = []
        for _key, raw in reader.scan(_MEMBER + _enc(gid)):
            if most is not None and len(members) >= most:
                break
            try:
                doc_id = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise StoreCorruptError(
                    f"A member of group {gid} is not UTF-8", url=self.url
                ) from exc
            rec = reader.get_doc(doc_id)
            if rec is None:
                members.append(Member(doc_id))
            else:
                members.append(Member(doc_id, rec.title, rec.score, rec.verdict))
        return Group(gid, reader.get_size(gid), tuple(members))

    def group(self, similar_id: int) -> Group | None:
        with self._open_db():
            reader = self._reader()
            gid = self._canonical(reader, similar_id)
            return None if gid is None else self._group(reader, gid)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        with self._open_db():
            sizes = ((_one(key[1:]), _one(value)) for key, value in self._kv.items(_SIZE))
            top = heapq.nlargest(
                limit,
                ((size, -gid) for gid, size in sizes if size >= min_size),
            )
            reader = self._reader()
            return [self._group(reader, -neg) for _size, neg in top]

    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        with self._open_db():
            if last_hour < first_hour or last_hour < 0:
                return []
            start = _HOUR + _enc(max(first_hour, 0), 0)
            stop = _HOUR + _enc(last_hour + 1, 0)
            counts: dict[int, int] = {}
            get = counts.get
            for key, value in self._kv.items(start=start, stop=stop):
                gid = _one(key[9:])
                counts[gid] = get(gid, 0) + _one(value)
            top = heapq.nlargest(limit, counts.items(), key=lambda kv: (kv[1], -kv[0]))
            return [(g, n) for g, n in top]

    def activity(self, similar_id: int) -> Activity | None:
        with self._open_db():
            if not 0 < similar_id <= self._meta["counter"]:
                return None
            reader = self._reader()
            gid = resolve(reader, similar_id)
            seen = reader.get_seen(gid)
            if seen is None:
                return None
            prefix = _GROUP_HOUR + _enc(gid)
            hours = tuple((_one(key[9:]) * HOUR, _one(value)) for key, value in reader.scan(prefix))
            return Activity(gid, seen[0], seen[1], hours)

    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        with self._open_db():
            out: list[DocMeta | None] = []
            for doc_id in doc_ids:
                raw = self._kv.get(_DOC_META + checked_doc_id(doc_id).encode("utf-8"))
                if raw is None:
                    out.append(None)
                    continue
                try:
                    added, url, site = json.loads(raw, parse_constant=_refuse_constant)
                    if type(added) is not int or not all(
                        v is None or type(v) is str for v in (url, site)
                    ):
                        raise ValueError("a field has the wrong type")
                except (ValueError, TypeError, RecursionError) as exc:
                    raise StoreCorruptError(
                        f"The metadata of doc_id {doc_id!r:.80} is unreadable: {exc}",
                        url=self.url,
                    ) from exc
                out.append(DocMeta(added, url, site))
            return out

    def sketch(self, similar_id: int) -> tuple[tuple[int, ...], int] | None:
        with self._open_db():
            reader = self._reader()
            gid = self._canonical(reader, similar_id)
            if gid is None:
                return None
            values, limit = reader.group_sketch(gid)
            return tuple(sorted(values)), limit

    def narrow_sketches(self) -> bool:
        with self._open_db():
            return bool(self._meta["format"] >= _NARROW_FORMAT)

    def letter_units(self) -> int | None:
        with self._open_db():
            m = self._meta
            return begun_with(m["letter_units"] or None, m["counter"] > 0)

    def record_letter_units(self, units: int) -> int:
        with self._open_db():
            if self.readonly:
                raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
            m = self._meta
            recorded = int(m["letter_units"]) or None
            answer = letters_to_record(
                self.url, recorded, m["counter"] > 0, self._letters or None, units
            )
            if recorded is None:  # written with the first group (see _commit), not now
                self._letters = answer
            return answer

    def common(self) -> set[int]:
        with self._open_db():
            return set(self._common)

    def stats(self) -> StoreStats:
        with self._open_db():
            m = self._meta
            return StoreStats(
                documents=m["documents"],
                groups=m["groups"],
                fingerprints=m["fingerprints"],
                common_fingerprints=m["common"],
                last_id=m["counter"],
                extra={"retention": m["retention"], "forgotten": m["forgotten"]}
                if m["retention"]
                else {},
            )

    def ping(self) -> None:
        """Raise StoreError while the store cannot write (see :meth:`_check_writable`)."""
        with self._open_db():
            self._check_writable()
            self._kv.check_writes()
            self._kv.get(_META + b"format")

    def close(self) -> None:
        """Sync pending writes and release the directory; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._kv.close()

    def __del__(self) -> None:
        # A store dropped without close() still releases the LOCK for a later opener.
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
