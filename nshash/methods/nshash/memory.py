"""MemoryStore: the embedded default, compact tables in this process, optionally durable on disk.

The files are kept by :class:`nshash.stores.durable.JournaledFile`, the memory backend of every
method; this module holds nshash's tables and the :class:`~nshash.Store` contract.

Without a path the tables live only as long as the process. With a path, every change is
journaled before the call that made it returns, so a killed process loses nothing it had
acknowledged:

* ``PATH.journal`` gets one JSON line per document: a sequence number and the table changes
  it made. JSON cannot run code when read back. Runs of values are packed as the tables keep
  them and written as the str of their base64: a new group's sketch (``["n", gid, packed,
  limit]``; ``s`` likewise) and a document's new anchors, 8 bytes each (``["F", gid,
  packed]``). Journals written before that (lists of ints, an ``["f", h, gid]`` op an anchor)
  replay alike; versions before it cannot read the packed ops. The ``fsync`` policy decides
  when the line reaches the disk itself: ``always`` (before returning), ``everysec`` (a
  background flush about once a second, the default) or ``no`` (when the OS decides). Every
  policy survives a killed process, since each line is handed to the OS before the call
  returns.
* ``PATH`` is a snapshot of all tables, written on :meth:`MemoryStore.save`, when a write
  finds the journal grown past :data:`~nshash.stores.durable.JOURNAL_SHARE` times the
  snapshot (and :data:`~nshash.stores.durable.JOURNAL_MIN_BYTES`), and when a close that
  follows writes finds it past :data:`~nshash.stores.durable.CLOSE_SHARE` of it (and
  :data:`~nshash.stores.durable.CLOSE_MIN_BYTES`): pickled to ``PATH.tmp``, fsynced, then
  renamed over ``PATH``. A write that makes it due does not wait for it: a forked child
  writes it while the journal goes on in a new file (``PATH.journal.old`` holds the old one
  until the snapshot is in place; see :class:`~nshash.stores.durable.JournaledFile`).
  Opening and closing without a write never rewrite it; otherwise the journal is replayed
  on the next open.
  It is read back with an unpickler that admits only plain containers, numbers and
  strings, so a tampered snapshot cannot run code; still, load only snapshots you wrote.
  The snapshot records the last journal sequence number it includes, so a crash between
  the rename and the journal truncation replays nothing twice.
* ``PATH.lock`` is held with ``flock`` while the store is open: a second opener gets
  :class:`~nshash.StoreLockedError` instead of two writers corrupting one journal.

With a retention window (``retention=``, see :mod:`~nshash.methods.nshash.retention`) each
group's last new document, the hashes it wrote and the ids merged into it are kept too
(journaled as ``r``, ``l`` and ``p`` ops, in the snapshot as ``retention``, ``last``,
``owned``, ``absorbed``, ``forgotten``); the compiled assignment is not used then (its tables
know no dates), so a windowed store places documents at the pure-Python path's speed.

The ``letter_units`` the store's fingerprints are made with (see
:meth:`~nshash.Store.letter_units`) is journaled with the first group, in the same line (a
``u`` op), and kept in the snapshot as ``letter_units``; a store begun before it has neither.

**Read-only opens** (``readonly=True``) take no lock and create, write or truncate nothing:
they load the snapshot and every complete journal line, so they work while a writer holds
the store (a crawl can be watched) and see every write the writer acknowledged before the
open. A snapshot replaced while it is being read is detected and the read is retried.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import heapq
import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, MutableMapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

from ...errors import ConfigError, StoreClosedError, StoreCorruptError, StoreReadOnlyError
from ...inputs import checked_doc_id
from ...results import (
    ADD_RESULT_FIELDS,
    HOUR,
    Activity,
    AddResult,
    Assignment,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    Member,
    StoreStats,
)
from ...stores.durable import DAMAGE, PARTS, JournaledFile, LineEncoder, count, reason
from ...stores.url import FSYNC_POLICIES
from ...text.fingerprint import (
    NARROW_BITS,
    NO_LIMIT,
    SKETCH_BITS,
    DocPrint,
    Fingerprinter,
    anchors_wanted,
    narrow,
)
from . import corrections
from .assign import (
    NO_HASHES,
    MatchPolicy,
    assign,
    combine_sketch,
    explain,
    lookup,
    resolve,
    tail_of,
    vote,
)
from .base import Placer, Store, begun_with, letters_to_record
from .compiled import compiled
from .records import (
    EVIDENCE,
    HEAD,
    TITLED,
    VERDICTS,
    pack_record,
    unpack_full,
    unpack_record,
)
from .retention import retained_assign, settle_window
from .tables import (
    COMPILED,
    anchor_table,
    doc_table,
    group_table,
    packed,
    plain,
    vote_table,
)

__all__ = ["MemoryStore"]

#: The compiled assignment of every case but a merge (``fast_assign`` of
#: :mod:`nshash.methods.nshash.compiled`: an exact repeat, a new story, refused candidates and
#: their votes, one accepted group) on the tables, journaled or not (it logs the journal's ops
#: and the undo of each write as the Python methods do; activity is then noted in Python, as
#: assign notes it last); None on the pure path. It answers exactly as
#: :func:`assign` (tests/test_fast_assign.py runs both), and returns None, having written
#: nothing, for every other case, which assign then takes.
_FAST = compiled("fast_assign")
#: ``make_record``: the Assignment of the compiled path, without its frozen __init__'s cost.
_MAKE = compiled("make_record")
#: ``journal_line``: a whole journal line made in C (the bytes
#: :func:`~nshash.stores.durable.journal_line` makes with json.dumps), json's quoting of a str
#: bound: ``_encode_line(seq, ops)``, or None on the pure path (see JournaledFile).
_ENCODE = compiled("journal_line")
_encode_line: LineEncoder | None = (
    functools.partial(_ENCODE, encode_basestring_ascii) if _ENCODE is not None else None
)


_ASSIGNMENT_FIELDS = tuple(f.name for f in dataclasses.fields(Assignment))

logger = logging.getLogger("nshash")

#: 2: shingle anchors, sketch limits and votes (the first release's format 1 cannot be read:
#: its anchors were whole sentences, so its groups would never match again). The activity
#: tables (``seen``, ``hours``, ``meta``) are optional keys of format 2: a snapshot written
#: before them loads with no activity. 3: narrow sketches (``narrow``: True), 4 bytes a value
#: (see :func:`~nshash.text.fingerprint.narrow`); a store begun before them stays format 2,
#: its sketches 8 bytes a value, so an older version still reads it. 4: narrow, with the
#: common hashes packed (an AnchorMap's ``pack()``, or the pure path's dict), where 2 and 3
#: keep them as a set (so format 2, still written by a wide store, stays readable by older
#: versions); every format reads every form of them. 5: format 4 with the per-group tables and
#: the documents written a part at a time (:data:`~nshash.stores.durable.PARTS`: each part
#: the sketch, size and members of up to :data:`_PART_GROUPS` groups and the records of those
#: members), so a snapshot copies one part of them at a time, not all of them at once.
_SNAPSHOT_FORMATS = (2, 3, 4, 5)
_NARROW_FORMATS = (3, 4, 5)
#: The groups of one part of a format-5 snapshot (~30 MB of copies on the scale corpus).
_PART_GROUPS = 32768
_MISSING: Any = object()
_MISSING_EACH: Any = object()
_U64 = 1 << 64
#: One hash a group wrote: the table's code (``f``, ``x`` or ``v``), then the hash (9 bytes).
_OWNED = struct.Struct("<cQ")
#: A fingerprint packed as a journal op holds a run of them (``F``: 8 bytes, little-endian).
_PACKED_FP = struct.Struct("<Q")


def pack_sketch(values: Sequence[int], narrow: bool = False) -> bytes:
    """Sketch values packed as the memory store keeps every group's: 8 bytes each (4 in a
    store of narrow sketches), little-endian, in the order given (ascending; the compiled
    assignment reads and writes the same layout)."""
    return struct.pack(f"<{len(values)}{'I' if narrow else 'Q'}", *values)


def unpack_sketch(stored: bytes, narrow: bool = False) -> tuple[int, ...]:
    """The values of a group's sketch as :func:`pack_sketch` packed them."""
    if narrow:
        return struct.unpack(f"<{len(stored) // 4}I", stored)
    return struct.unpack(f"<{len(stored) // 8}Q", stored)


def _records_within(docs: dict[Any, Any], counter: int) -> bool:
    """Whether every document record of a snapshot is one :meth:`_Tables.add_member` writes,
    the headers checked a field at a time over all records (see :func:`_ints_within`), the
    few records with merges or a title one by one."""
    recs = list(docs.values())
    if not (set(map(type, docs)) <= {str} and set(map(type, recs)) <= {bytes}):
        return False
    try:
        heads = list(map(HEAD.unpack_from, recs))
    except struct.error:
        return False
    gids, flags, anchors, merged = zip(*heads, strict=True) if heads else ((),) * 4
    if not (_ints_within(gids, 1, counter + 1) and set(flags) <= set(range(8))):
        return False
    ends = [HEAD.size + 8 * (a + m) for a, m in zip(anchors, merged, strict=True)]
    rows = zip(recs, flags, merged, ends, map(len, recs), strict=True)
    return _each_record_within(
        [r for r, f, m, end, n in rows if m or f & (TITLED | EVIDENCE) or end != n], counter
    )


def _each_record_within(recs: Iterable[bytes], counter: int) -> bool:
    """Whether each record is whole and names only ids handed out (a record read in full)."""
    for rec in recs:
        try:
            gid, _, merged, _, _ = unpack_record(rec)
        except DAMAGE:
            return False
        if not (1 <= gid <= counter and _ints_within(merged, 1, counter + 1)):
            return False
    return True


def _check_records(docs: dict[Any, Any], group: Callable[[Any], int]) -> None:
    """The document records of a snapshot checked one by one, to name the first bad one; a
    record of five fields (as snapshots before packed records kept them) is packed."""
    for doc_id, rec in docs.items():
        _text(doc_id, "doc_id")
        if type(rec) is bytes:
            try:
                gid, _, merged, _, _ = unpack_record(rec)
            except DAMAGE as exc:
                raise ValueError(f"the record of {doc_id!r:.60} is damaged: {exc}") from exc
            group(gid)
            for m in merged:
                group(m)
            continue
        if type(rec) is not tuple or len(rec) != 5:
            raise ValueError(f"the record of {doc_id!r:.60} is not 5 fields")
        gid, duplicate, merged, title, fps = rec
        group(gid)
        if (
            type(duplicate) is not bool
            or type(merged) is not tuple
            or type(fps) not in (tuple, bytes)
        ):
            raise ValueError(f"the record of {doc_id!r:.60} has a field of the wrong type")
        for m in merged:
            group(m)
        _text(title, "title", optional=True)
        if type(fps) is bytes and len(fps) % 8:
            raise ValueError(f"the packed anchors of {doc_id!r:.60} are torn")
        anchors = unpack_sketch(fps) if type(fps) is bytes else _u64s(fps)
        docs[doc_id] = pack_record(gid, duplicate, merged, title, anchors)


def _member(doc_id: str, rec: bytes) -> Member:
    """A group's member from its record: its title and evidence."""
    _, _, _, title, _, score, verdict = unpack_full(rec)
    return Member(doc_id, title, score, verdict)


def _evidence(args: list[Any]) -> tuple[float | None, str | None]:
    """The score and verdict of a journaled member op (none in an op from before)."""
    if not args:
        return None, None
    text, verdict = args
    score = float(text) if type(text) is str and len(text) < 32 else -1.0
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"{text!r:.40} is not a score")
    if verdict not in VERDICTS:
        raise ValueError(f"{verdict!r:.40} is not a verdict")
    return score, verdict


def _ints_within(values: Collection[Any], low: int, high: int) -> bool:
    """Whether every value is an int (not a bool, not a subclass) in ``[low, high)``: three
    passes in C (the types, the least, the greatest) instead of a Python call a value."""
    if not values:
        return True
    return set(map(type, values)) == {int} and min(values) >= low and max(values) < high


def _ids(members: str | list[str] | None) -> list[str]:
    """A group's doc ids as :attr:`_Tables.members` keeps them (one id, a list, or None)."""
    if members is None:
        return []
    return [members] if type(members) is str else list(members)


def _gid(value: Any) -> int:
    """*value* if it is a group id (a positive int), else ValueError."""
    if type(value) is not int or value < 1:
        raise ValueError(f"{value!r:.40} is not a group id")
    return int(value)


def _u64(value: Any) -> int:
    if type(value) is not int or not 0 <= value < _U64:
        raise ValueError(f"{value!r:.40} is not a fingerprint")
    return int(value)


def _limit(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= NO_LIMIT:
        raise ValueError(f"{value!r:.40} is not a sketch limit")
    return int(value)


def _u64s(values: Any) -> list[int]:
    if not isinstance(values, (list, tuple, set, frozenset)):
        raise ValueError(f"{type(values).__name__} is not a list of fingerprints")
    return [_u64(v) for v in values]


def _unbase64(value: Any, width: int) -> bytes:
    """The packed values a journal op holds as the str of their base64 (*width* bytes each),
    else ValueError."""
    if type(value) is not str:
        raise ValueError(f"{value!r:.40} is not a list of packed values")
    try:
        packed = base64.b64decode(value, validate=True)
    except ValueError as exc:  # binascii.Error is one
        raise ValueError(f"{value!r:.40} is not base64 ({exc})") from None
    if len(packed) % width:
        raise ValueError(f"{len(packed)} bytes are not values of {width} bytes")
    return packed


def _text(value: Any, what: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if type(value) is not str:
        raise ValueError(f"{value!r:.40} is not a {what}")
    return str(value)


def _compared(t: _Tables, doc: DocPrint, letters: int | None) -> DocPrint:
    """*doc* as the tables *t* compare it, about to place it: with narrow sketches where *t*
    keeps them, which a store that has made no group yet begins to (journaled with the
    document, so a write that fails leaves the store as it was; *letters* likewise, see
    :func:`_narrowing`)."""
    return narrow(doc) if _narrowing(t, letters) else doc


#: How far the compiled assignment shifts a document's sketch values for narrow tables
#: (:func:`~nshash.text.fingerprint.narrow`'s shift, which it applies by the same C).
_SHIFT = SKETCH_BITS - NARROW_BITS


@functools.lru_cache(maxsize=16)
def _policy_args(policy: MatchPolicy) -> tuple[int, float, int, int, int, int]:
    """The compiled assignment's arguments after a document's limit that come from the
    policy (its ``n``: twice as many of a long page, counted by ``fast_assign`` itself),
    and the bound of an uncut sketch; made once a policy (a cached C call an add, where
    six attribute reads were)."""
    return (
        policy.n,
        policy.theta,
        policy.min_overlap,
        policy.sketch_cap,
        NO_LIMIT,
        policy.votes,
    )


def _compiled_place(
    t: _Tables,
    doc: DocPrint,
    args: tuple[int, float, int, int, int, int],
    doc_id: str | None,
    title: str | None,
    shift: int,
) -> tuple[int, bool, tuple[int, ...]] | None:
    """The one call of the compiled assignment (:data:`_FAST`, built): *doc* placed in the
    tables *t* with the policy's *args* (:func:`_policy_args`), its id and title, narrowed by
    *shift* bits (see ``_fast``); None where it leaves the document to Python, having
    written nothing."""
    # The text kernel's DocPrint keeps its anchors and sketch packed: the compiled
    # assignment reads those words, and no tuple of ints is made (see DocPrint).
    packed = getattr(doc, "_packed", None)
    placed: tuple[int, bool, tuple[int, ...]] | None = _FAST(
        t,
        doc.sentences if packed is None else packed,
        doc.sketch if packed is None else None,
        doc.exact,
        doc.limit,
        *args,
        doc_id,
        title,
        shift,
        doc.places,
    )
    return placed


def _narrowing(t: _Tables, letters: int | None) -> bool:
    """Whether the tables *t* compare narrow sketches, as :func:`_compared` begins them.
    Tables that have made no group also record *letters* (the ``letter_units`` the store
    was asked to record, None when it was not) with the first one's ops."""
    if t.counter == 0:
        if not t.narrow:
            t.set_narrow()
        if letters is not None and t.letter_units is None:
            t.set_letter_units(letters)
    return t.narrow


class _Tables:
    """The tables of :mod:`nshash.methods.nshash.assign`, as dicts (``fp``, ``exact`` and
    ``votes`` as compiled maps, ``sketch``, ``size`` and ``members`` as group tables, where
    built); every write is also logged as an op."""

    #: What an undo step holds for an entry that was absent (the compiled assignment reads it
    #: here to note its own undo steps as :meth:`rollback` reads them).
    MISSING: Any = _MISSING
    #: What an undo step holds for a tuple of keys that were each absent.
    MISSING_EACH: Any = _MISSING_EACH

    def __init__(self) -> None:
        self.fp = anchor_table()
        self.exact = anchor_table()
        #: The common hashes, each mapped to 1: an AnchorMap where compiled (12 bytes a hash,
        #: where a set of ints took ~110 and the compiled path's mirror of it ~40 more).
        self.common = anchor_table(filtered=True)
        self.votes = vote_table()
        self.parent: dict[int, int] = {}
        #: A group's sketch: its values packed, ascending, 8 bytes each, 4 when ``narrow``
        #: (:func:`pack_sketch`; a Python int in a set costs over 50 bytes), read through
        #: :func:`unpack_sketch`.
        self.sketch: MutableMapping[int, bytes] = group_table(blobs=True)
        #: Whether sketch values are narrow (:func:`~nshash.text.fingerprint.narrow`): set
        #: on a store that has made no group yet (see :meth:`set_narrow`), never unset.
        self.narrow = False
        #: A group's sketch limit, for the groups whose sketch was cut (see combine_sketch).
        self.limit: dict[int, int] = {}
        self.size: MutableMapping[int, int] = group_table()
        #: A group's doc ids in arrival order: the id itself while there is one (most groups:
        #: a str is no object the garbage collector walks, a list is), then a list.
        self.members: MutableMapping[int, str | list[str]] = group_table()
        #: doc id -> (group, duplicate, merged from, title, anchors) packed: pack_record.
        self.docs = doc_table()
        self.counter = 0
        self.documents = 0
        #: Activity (documents added with a DocMeta): canonical id -> (first, last) seen,
        #: canonical id -> {hour: documents}, and the same counts by hour: hour -> {id: n},
        #: so ranking a window reads only the hours in it.
        self.seen: dict[int, tuple[int, int]] = {}
        self.hours: dict[int, dict[int, int]] = {}
        self.buckets: dict[int, dict[int, int]] = {}
        #: doc id -> (added, url, site).
        self.meta: dict[str, tuple[int, str | None, str | None]] = {}
        #: Retention (see :mod:`~nshash.methods.nshash.retention`): the window in seconds,
        #: or None; each canonical group's last new document (epoch seconds); the hashes
        #: each group wrote, 9 bytes each (the table's code, then the hash: see _OWNED); the
        #: ids merged into each group; how many groups were forgotten.
        self.window: int | None = None
        self.last: dict[int, int] = {}
        self.owned: dict[int, bytes] = {}
        self.absorbed: dict[int, tuple[int, ...]] = {}
        self.forgotten = 0
        #: The ``letter_units`` the store's fingerprints are made with, as its first writer
        #: recorded it (journaled as ``u``, in the snapshot as ``letter_units``); None in a
        #: store begun before the setting existed, or that has no writer yet (see
        #: :func:`~nshash.methods.nshash.base.begun_with`).
        self.letter_units: int | None = None
        #: (time, group) for every touch, oldest first: what purge walks (rebuilt on load).
        self.order: deque[tuple[int, int]] = deque()
        #: Groups last seen before this are expired and match nothing (set by purge).
        self.cutoff: int | None = None
        #: Editors' corrections (:mod:`~nshash.methods.nshash.corrections`): id -> its JSON.
        self.corrections_kept: dict[int, str] = {}
        #: Counts the writes of corrections (a rolled back one too): what a cache of them
        #: is keyed by.
        self.corrections_version = 0
        #: Ops applied since the last journal write; None when nothing journals them. The
        #: compiled assignment's are tuples. Runs of values (a sketch's, a document's new
        #: anchors) are packed (bytes, a bytearray while set_fp gathers them), written as the
        #: str of their base64 (see apply).
        self.log: list[Any] | None = None
        #: While a change is in progress, how to take back each of its writes; see rollback.
        #: A step is a callable, or (table, key, old value) for a dict entry to put back
        #: (table ``self``: an attribute; old MISSING: none, MISSING_EACH: key is a tuple of
        #: keys, none there): a tuple, or its three items in a row (what the compiled
        #: assignment notes: no tuple made for a step that is almost never taken).
        self.undo: list[Any] | None = None

    def rollback(self) -> None:
        """Take back every write made since ``undo`` was set (newest first)."""
        undo, self.undo = self.undo, []
        steps: list[Any] = []
        i, end = 0, len(undo or ())
        while i < end:
            assert undo is not None
            step = undo[i]
            if isinstance(step, tuple) or callable(step):
                steps.append(step)
                i += 1
            else:  # a table (no table is a tuple or callable), then its key and old value
                steps.append((step, undo[i + 1], undo[i + 2]))
                i += 3
        for step in reversed(steps):
            if not isinstance(step, tuple):
                step()
                continue
            table, key, old = step
            if table is self:  # an attribute (a counter)
                setattr(self, key, old)
            elif old is _MISSING:
                table.pop(key, None)
            elif old is _MISSING_EACH:  # a tuple of keys (the compiled set_fp of a document's)
                for k in key:
                    table.pop(k, None)
            else:
                table[key] = old
        if self.log is not None:
            self.log = []

    # -- reads -------------------------------------------------------------------------
    def get_fp(self, h: int) -> int | None:
        gid = self.fp.get(h)
        if gid is not None and self.cutoff is not None and self._expired(gid):
            return None
        return gid

    def get_exact(self, h: int) -> int | None:
        gid = self.exact.get(h)
        if gid is not None and self.cutoff is not None and self._expired(gid):
            return None
        return gid

    def _expired(self, gid: int) -> bool:
        """Whether *gid*'s group was last seen before the cutoff (so it matches nothing)."""
        seen = self.last.get(resolve(self, gid))
        return seen is not None and self.cutoff is not None and seen < self.cutoff

    def not_common(self, hs: Iterable[int]) -> list[int]:
        common = self.common
        if not common:
            return list(hs)
        return [h for h in hs if h not in common]

    def live_set(self, hs: Iterable[int]) -> set[int]:
        common = self.common
        return {h for h in hs if h not in common}

    def common_sets(self) -> tuple[Collection[int], set[int]]:
        return self.common, NO_HASHES

    def get_parent(self, gid: int) -> int | None:
        return self.parent.get(gid)

    def group_sketch(self, gid: int) -> tuple[Collection[int], int]:
        packed = self.sketch.get(gid, b"")
        return unpack_sketch(packed, self.narrow), self.limit.get(gid, NO_LIMIT)

    def get_votes(self, h: int) -> tuple[int, ...]:
        return self.votes.get(h, ())

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        rec = self.docs.get(doc_id)
        if rec is None:
            return None
        return DocumentRecord(doc_id, *unpack_full(rec))

    # -- writes: each changes the dicts and, when journaling, logs itself as an op; replay
    # feeds the ops back through the same methods, so there is one code path for both.
    def _restore(self, table: MutableMapping[Any, Any], key: Any) -> None:
        """Record how to put ``table[key]`` back as it is now (the caller checked ``undo``)."""
        assert self.undo is not None
        # A tuple, not a closure: one is made for nearly every write of every document.
        self.undo.append((table, key, table.get(key, _MISSING)))

    def set_fp(self, h: int, gid: int) -> None:
        fp = self.fp
        if self.undo is not None:  # _restore, inlined: the most frequent write
            self.undo.append((fp, h, fp.get(h, _MISSING)))
        fp[h] = gid
        if self.window is not None:
            self._own(gid, b"f", h)
        log = self.log
        if log is not None:
            # One op for a run of them to one group (a document's new anchors), the hashes
            # packed: ["F", gid, packed], as the compiled assignment logs it (older journals
            # hold ["f", h, gid] for each; both replay).
            last = log[-1] if log else None
            if last is not None and last[0] == "F" and last[1] == gid:
                last[2] += _PACKED_FP.pack(h)
            else:
                log.append(["F", gid, bytearray(_PACKED_FP.pack(h))])

    def set_exact(self, h: int, gid: int) -> None:
        if self.undo is not None:
            self._restore(self.exact, h)
        self.exact[h] = gid
        if self.window is not None:
            self._own(gid, b"x", h)
        if self.log is not None:
            self.log.append(["x", h, gid])

    def _own(self, gid: int, table: bytes, h: int) -> None:
        """Note that group *gid* wrote hash *h* in *table* (``f`` fp, ``x`` exact, ``v``
        votes), so forgetting the group finds it."""
        if self.undo is not None:
            self._restore(self.owned, gid)
        self.owned[gid] = self.owned.get(gid, b"") + _OWNED.pack(table, h)

    def add_common(self, hs: Iterable[int]) -> None:
        hs = list(hs)
        common = self.common
        new = [h for h in dict.fromkeys(hs) if h not in common]
        if self.undo is not None:

            def undo() -> None:
                for h in new:
                    common.pop(h, None)

            self.undo.append(undo)
        for h in new:
            common[h] = 1
        if self.log is not None:
            self.log.append(["c", hs])

    def set_votes(self, h: int, gids: tuple[int, ...]) -> None:
        if self.undo is not None:
            self._restore(self.votes, h)
        if self.window is not None:
            before = self.votes.get(h, ())
            for g in gids:
                if g not in before:
                    self._own(g, b"v", h)
        if gids:
            self.votes[h] = tuple(gids)
        else:
            self.votes.pop(h, None)
        if self.log is not None:
            self.log.append(["v", h, list(gids)])

    def _set_sketch(self, gid: int, sketch: Collection[int], limit: int) -> bytes:
        """Replace a group's sketch (kept packed) and limit (old values restorable on
        rollback); returns the sketch packed."""
        if isinstance(sketch, bytes):
            packed = sketch
        else:  # a tuple comes ascending (from the text pipeline or unpack_sketch)
            values = sketch if type(sketch) is tuple else sorted(sketch)
            packed = pack_sketch(values, self.narrow)
        if self.undo is not None:
            self._restore(self.sketch, gid)
            self._restore(self.limit, gid)
        self.sketch[gid] = packed
        if limit < NO_LIMIT:
            self.limit[gid] = limit
        else:
            self.limit.pop(gid, None)
        return packed

    def new_group(self, sketch: Iterable[int], limit: int) -> int:
        gid = self.counter = self.counter + 1
        if self.undo is not None:
            self.undo.append((self, "counter", gid - 1))
            self.undo.append((self.size, gid, _MISSING))
        values = sketch if type(sketch) is tuple else tuple(sorted(set(sketch)))
        packed = self._set_sketch(gid, values, limit)
        self.size[gid] = 0
        if self.log is not None:  # the values packed (see apply)
            self.log.append(["n", gid, packed, limit])
        return gid

    def extend_sketch(self, gid: int, hs: Iterable[int], limit: int, cap: int) -> None:
        hs = list(hs)
        old, old_limit = self.group_sketch(gid)
        self._set_sketch(gid, *combine_sketch(old, old_limit, hs, limit, cap))
        if self.log is not None:  # the values packed (see apply)
            self.log.append(["s", gid, pack_sketch(hs, self.narrow), limit, cap])

    def merge_into(self, root: int, gid: int, cap: int) -> None:
        if self.undo is not None:
            self._restore(self.parent, gid)
            self._restore(self.sketch, gid)
            self._restore(self.limit, gid)
            self._restore(self.size, gid)
            self._restore(self.size, root)
            self._restore(self.members, gid)
            self._restore(self.members, root)  # replaced below, never changed in place
        self.parent[gid] = root
        old, old_limit = self.group_sketch(root)
        more = unpack_sketch(self.sketch.pop(gid, b""), self.narrow)
        more_limit = self.limit.pop(gid, NO_LIMIT)
        self._set_sketch(root, *combine_sketch(old, old_limit, more, more_limit, cap))
        self.size[root] += self.size.pop(gid, 0)
        moved = self.members.pop(gid, None)
        if moved:
            self.members[root] = _ids(self.members.get(root)) + _ids(moved)
        self._merge_activity(root, gid)
        if self.window is not None:
            self._merge_retention(root, gid)
        if self.log is not None:
            self.log.append(["g", root, gid, cap])

    def _merge_retention(self, root: int, gid: int) -> None:
        """Move what *gid* wrote and the ids merged into it to *root* (the document that
        merged them touches *root* next)."""
        if self.undo is not None:
            for table in (self.last, self.owned, self.absorbed):
                self._restore(table, gid)
                self._restore(table, root)
        self.last.pop(gid, None)
        moved = self.owned.pop(gid, b"")
        if moved:
            self.owned[root] = self.owned.get(root, b"") + moved
        self.absorbed[root] = self.absorbed.get(root, ()) + (gid,) + self.absorbed.pop(gid, ())

    def set_narrow(self) -> None:
        """Keep sketch values narrow from now on (only before the first group: a group's
        sketch and the common values are of one width)."""
        if self.counter:
            raise ValueError("a store that has groups cannot change its sketch width")
        if self.undo is not None:
            self.undo.append((self, "narrow", self.narrow))
        self.narrow = True
        if self.log is not None:
            self.log.append(["w", NARROW_BITS])

    def set_letter_units(self, units: int) -> None:
        """Record the ``letter_units`` the store's fingerprints are made with (once)."""
        if self.letter_units is not None:
            raise ValueError("the store records its letter_units already")
        if self.undo is not None:
            self.undo.append((self, "letter_units", self.letter_units))
        self.letter_units = units
        if self.log is not None:
            self.log.append(["u", units])

    # -- retention (see nshash.methods.nshash.retention) --------------------------------
    def set_window(self, window: int) -> None:
        """Keep a retention window of *window* seconds from now on."""
        if self.undo is not None:
            self.undo.append((self, "window", self.window))
        self.window = window
        if self.log is not None:
            self.log.append(["r", window])

    def touch(self, gid: int, now: int) -> None:
        if self.undo is not None:
            self._restore(self.last, gid)
            self.undo.append(self._untouch)
        self.last[gid] = now
        self.order.append((now, gid))
        if self.log is not None:
            self.log.append(["l", gid, now])

    def _untouch(self) -> None:
        self.order.pop()

    def purge(self, cutoff: int, most: int) -> int:
        self.cutoff = cutoff
        order, last = self.order, self.last
        forgotten = 0
        steps = 0
        while order and forgotten < most and steps < 4 * most:
            when, gid = order[0]
            if when >= cutoff:
                break
            order.popleft()
            steps += 1
            if self.undo is not None:
                self.undo.append(functools.partial(order.appendleft, (when, gid)))
            if last.get(gid) == when:  # its latest touch: nothing came since
                self.forget(gid)
                forgotten += 1
        return forgotten

    def forget(self, gid: int) -> None:
        """Delete everything of canonical group *gid*; its id is never handed out again."""
        undo = self.undo is not None
        # The ids that resolve to gid: a hash it wrote may have been taken by a newer group
        # while gid was expired but not yet forgotten (an expired group matches nothing).
        ours = {gid, *self.absorbed.get(gid, ())}
        for code, h in _OWNED.iter_unpack(self.owned.get(gid, b"")):
            if code == b"v":
                voters = self.votes.get(h)
                if voters is None:
                    continue
                kept = tuple(g for g in voters if g not in ours)
                if len(kept) != len(voters):
                    if undo:
                        self._restore(self.votes, h)
                    if kept:
                        self.votes[h] = kept
                    else:
                        del self.votes[h]
                continue
            table = self.fp if code == b"f" else self.exact
            if table.get(h) in ours:
                if undo:
                    self._restore(table, h)
                del table[h]
        if gid in self.hours or gid in self.seen:
            if undo:
                self._keep_activity((gid,), list(self.hours.get(gid, ())))
            self.seen.pop(gid, None)
            for hour in self.hours.pop(gid, {}):
                bucket = self.buckets[hour]
                del bucket[gid]
                if not bucket:
                    del self.buckets[hour]
        for doc_id in _ids(self.members.get(gid)):
            if undo:
                self._restore(self.docs, doc_id)
                self._restore(self.meta, doc_id)
            del self.docs[doc_id]
            self.meta.pop(doc_id, None)
        for merged in self.absorbed.get(gid, ()):
            if undo:
                self._restore(self.parent, merged)
            self.parent.pop(merged, None)
        size = self.size.get(gid, 0)
        tables: tuple[MutableMapping[int, Any], ...] = (
            self.sketch, self.limit, self.size, self.members, self.last, self.owned, self.absorbed
        )  # fmt: skip
        for table in tables:
            if undo:
                self._restore(table, gid)
            table.pop(gid, None)
        if self.undo is not None:
            self.undo.append((self, "forgotten", self.forgotten))
            self.undo.append((self, "documents", self.documents))
        self.forgotten += 1
        self.documents -= size  # the documents go with their group
        if self.log is not None:
            self.log.append(["p", gid])

    def _keep_activity(self, gids: tuple[int, ...], hours: Iterable[int]) -> None:
        """Record how to put back the activity of *gids* in *hours* (the caller checked undo)."""
        assert self.undo is not None
        seen = {g: self.seen.get(g) for g in gids}
        mine = {g: dict(self.hours[g]) if g in self.hours else None for g in gids}
        cells = {(h, g): self.buckets.get(h, {}).get(g) for h in hours for g in gids}

        def undo() -> None:
            for g, value in seen.items():
                if value is None:
                    self.seen.pop(g, None)
                else:
                    self.seen[g] = value
            for g, hs in mine.items():
                if hs is None:
                    self.hours.pop(g, None)
                else:
                    self.hours[g] = hs
            for (h, g), n in cells.items():
                bucket = self.buckets.setdefault(h, {})
                if n is None:
                    bucket.pop(g, None)
                else:
                    bucket[g] = n
                if not bucket:
                    del self.buckets[h]

        self.undo.append(undo)

    def _merge_activity(self, root: int, gid: int) -> None:
        """Move *gid*'s first/last seen and hourly counts to *root*."""
        hours = self.hours.get(gid)
        if self.undo is not None and (hours or gid in self.seen):
            self._keep_activity((root, gid), list(hours or ()))
        seen = self.seen.pop(gid, None)
        if seen is not None:
            mine = self.seen.get(root)
            if mine is not None:
                seen = (min(mine[0], seen[0]), max(mine[1], seen[1]))
            self.seen[root] = seen
        hours = self.hours.pop(gid, None)
        if hours:
            into = self.hours.setdefault(root, {})
            for h, n in hours.items():
                into[h] = into.get(h, 0) + n
                bucket = self.buckets[h]
                del bucket[gid]
                bucket[root] = bucket.get(root, 0) + n

    def note(self, gid: int, doc_id: str | None, meta: DocMeta) -> None:
        added = meta.added
        hour = added // HOUR
        if self.undo is not None:
            self._keep_activity((gid,), (hour,))
            if doc_id is not None:
                self._restore(self.meta, doc_id)
        seen = self.seen.get(gid)
        if seen is None:
            self.seen[gid] = (added, added)
        else:
            self.seen[gid] = (min(seen[0], added), max(seen[1], added))
        hours = self.hours.setdefault(gid, {})
        hours[hour] = hours.get(hour, 0) + 1
        bucket = self.buckets.setdefault(hour, {})
        bucket[gid] = bucket.get(gid, 0) + 1
        if doc_id is not None:
            self.meta[doc_id] = (added, meta.url, meta.site)
        if self.log is not None:
            self.log.append(["t", gid, added, doc_id, meta.url, meta.site])

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
        if self.undo is not None:
            self._restore(self.size, gid)
            self.undo.append((self, "documents", self.documents))
            if record is not None:
                self._restore(self.docs, record.doc_id)
                members = self.members.get(gid)
                if type(members) is list:  # appended to in place: cut back
                    kept = len(members)
                    self.undo.append(functools.partial(members.__delitem__, slice(kept, None)))
                else:  # replaced: put back
                    self._restore(self.members, gid)
        self.size[gid] += 1
        self.documents += 1
        if record is None:
            if self.log is not None:
                self.log.append(["m", gid])
            return
        doc_id = record.doc_id
        ids = self.members.get(gid)
        if ids is None:
            self.members[gid] = doc_id
        elif isinstance(ids, str):
            self.members[gid] = [ids, doc_id]
        else:
            ids.append(doc_id)
        fps, merged = record.fingerprints, record.merged_from
        self.docs[doc_id] = pack_record(
            gid, record.duplicate, merged, record.title, fps, record.score, record.verdict
        )
        if self.log is not None:
            op = ["m", gid, doc_id, record.duplicate, merged, record.title, fps]
            if record.score is not None:
                op += [repr(record.score), record.verdict]  # journal lines hold no floats
            self.log.append(op)

    # -- corrections (CorrectionTables) ---------------------------------------------------
    def group_size(self, gid: int) -> int | None:
        return self.size.get(gid)

    def group_members(self, gid: int, most: int | None = None) -> list[str]:
        ids = _ids(self.members.get(gid))
        return ids if most is None else ids[:most]

    def corrections(self) -> list[str]:
        return [self.corrections_kept[c] for c in sorted(self.corrections_kept)]

    def put_correction(self, cid: int, entry: str) -> None:
        if self.undo is not None:
            self._restore(self.corrections_kept, cid)
        self.corrections_kept[cid] = entry
        self.corrections_version += 1
        if self.log is not None:
            self.log.append(["k", cid, entry])

    def vote(self, hs: Sequence[int], groups: tuple[int, int], need: int) -> None:
        vote(self, hs, groups, need)

    def _set_members(self, gid: int, ids: list[str]) -> None:
        if not ids:
            self.members.pop(gid, None)
        else:
            self.members[gid] = ids[0] if len(ids) == 1 else ids

    def move_member(self, doc_id: str, src: int, dst: int, verdict: str | None) -> None:
        rec = self.docs.get(doc_id)
        ids = _ids(self.members.get(src))
        if rec is None or doc_id not in ids or dst not in self.size:
            raise ValueError(f"{doc_id!r:.60} cannot move from group {src} to {dst}")
        meta = self.meta.get(doc_id)
        hour = meta[0] // HOUR if meta is not None else None
        if self.undo is not None:
            for table, key in ((self.size, src), (self.size, dst), (self.docs, doc_id)):
                self._restore(table, key)
            self._restore(self.members, src)
            self._restore(self.members, dst)
            if hour is not None:
                self._keep_activity((src, dst), (hour,))
        ids.remove(doc_id)
        self._set_members(src, ids)
        self._set_members(dst, [*_ids(self.members.get(dst)), doc_id])
        self.size[src] -= 1
        self.size[dst] += 1
        gid, duplicate, merged, title, anchors, score, kept = unpack_full(rec)
        self.docs[doc_id] = pack_record(
            dst, duplicate, merged, title, anchors, score, verdict or kept
        )
        if meta is not None and hour is not None:
            for g, step in ((src, -1), (dst, 1)):
                hours = self.hours.setdefault(g, {})
                bucket = self.buckets.setdefault(hour, {})
                n = hours.get(hour, 0) + step
                if n > 0:
                    hours[hour] = bucket[g] = n
                else:
                    hours.pop(hour, None)
                    bucket.pop(g, None)
                if not hours:
                    del self.hours[g]
                if not bucket:
                    del self.buckets[hour]
            seen = self.seen.get(dst)
            added = meta[0]
            self.seen[dst] = (
                (added, added) if seen is None else (min(seen[0], added), max(seen[1], added))
            )
        if self.log is not None:
            self.log.append(["mv", doc_id, src, dst, verdict])

    def split_off(
        self,
        root: int,
        gid: int,
        sketch: tuple[tuple[int, ...], int],
        root_sketch: tuple[tuple[int, ...], int],
        without_id: int,
    ) -> None:
        if self.parent.get(gid) != root or root not in self.size or gid in self.size:
            raise ValueError(f"group {gid} is not merged into {root}")
        if self.undo is not None:
            self._restore(self.parent, gid)
            self._restore(self.size, gid)
            self._restore(self.size, root)
        del self.parent[gid]
        self._set_sketch(gid, tuple(sketch[0]), sketch[1])
        self._set_sketch(root, tuple(root_sketch[0]), root_sketch[1])
        self.size[gid] = without_id
        self.size[root] -= without_id
        if self.log is not None:
            self.log.append(
                [
                    "sp",
                    root,
                    gid,
                    list(sketch[0]),
                    sketch[1],
                    list(root_sketch[0]),
                    root_sketch[1],
                    without_id,
                ]
            )

    def apply(self, op: Any) -> None:
        """Replay one journaled op (the log must be off), checking it is one this store writes.

        Raises:
            ValueError, KeyError: the op is malformed or names a group that does not exist.
        """
        if not isinstance(op, list) or not op:
            raise ValueError(f"{op!r:.60} is not a journal operation")
        kind, args = op[0], op[1:]
        if kind == "F" and len(args) == 2:
            gid = _gid(args[0])
            if gid > self.counter:
                raise ValueError(f"group {gid} was never handed out")
            for (h,) in _PACKED_FP.iter_unpack(_unbase64(args[1], _PACKED_FP.size)):
                self.set_fp(h, gid)
        elif kind in ("f", "x") and len(args) == 2:
            h, gid = _u64(args[0]), _gid(args[1])
            if gid > self.counter:
                raise ValueError(f"group {gid} was never handed out")
            (self.set_fp if kind == "f" else self.set_exact)(h, gid)
        elif kind == "c" and len(args) == 1:
            self.add_common(_u64s(args[0]))
        elif kind == "v" and len(args) == 2:
            self.set_votes(_u64(args[0]), tuple(_gid(g) for g in _u64s(args[1])))
        elif kind == "n" and len(args) == 3:
            gid = _gid(args[0])
            if gid <= self.counter:
                raise ValueError(f"group {gid} is handed out a second time")
            self.counter = gid - 1
            self.new_group(self._sketch_values(args[1]), _limit(args[2]))
        elif kind == "s" and len(args) == 4:
            hs, limit, cap = self._sketch_values(args[1]), _limit(args[2]), _gid(args[3])
            self.extend_sketch(self._live(args[0]), hs, limit, cap)
        elif kind == "g" and len(args) == 3:
            root, gid = self._live(args[0]), self._live(args[1])
            if root >= gid:
                raise ValueError(f"group {gid} cannot merge into the larger id {root}")
            self.merge_into(root, gid, _gid(args[2]))
        elif kind == "m" and len(args) == 1:
            self.add_member(self._live(args[0]), None)
        elif kind == "m" and len(args) in (6, 8):
            gid, doc_id, duplicate, merged, title, fps = args[:6]
            score, verdict = _evidence(args[6:])
            gid = self._live(gid)
            doc_id = str(_text(doc_id, "doc_id"))
            if type(duplicate) is not bool:
                raise ValueError(f"{duplicate!r:.40} is not a duplicate flag")
            if doc_id in self.docs:
                raise ValueError(f"doc_id {doc_id!r:.60} is added a second time")
            record = DocumentRecord(
                doc_id,
                gid,
                duplicate,
                tuple(_gid(m) for m in merged),
                _text(title, "title", optional=True),
                tuple(_u64s(fps)),
                score,
                verdict,
            )
            self.add_member(gid, record)
        elif kind == "r" and len(args) == 1:
            self.set_window(_gid(args[0]))
        elif kind == "u" and len(args) == 1:
            self.set_letter_units(_gid(args[0]))
        elif kind == "k" and len(args) == 2:
            self.put_correction(_gid(args[0]), str(_text(args[1], "correction")))
        elif kind == "mv" and len(args) == 4:
            doc_id, src, dst, verdict = args
            if verdict is not None and verdict not in VERDICTS:
                raise ValueError(f"{verdict!r:.40} is not a verdict")
            self.move_member(
                str(_text(doc_id, "doc_id")), self._live(src), self._live(dst), verdict
            )
        elif kind == "sp" and len(args) == 7:
            root, gid, values, limit, root_values, root_limit, without_id = args
            self.split_off(
                self._live(root),
                _gid(gid),
                (tuple(self._sketch_values(values)), _limit(limit)),
                (tuple(self._sketch_values(root_values)), _limit(root_limit)),
                count(without_id, "without_id"),
            )
        elif kind == "w" and args == [NARROW_BITS]:
            self.set_narrow()
        elif kind == "l" and len(args) == 2:
            if self.window is None:
                raise ValueError("a group is dated in a store with no retention window")
            self.touch(self._live(args[0]), _time(args[1]))
        elif kind == "p" and len(args) == 1:
            if self.window is None:
                raise ValueError("a group is forgotten in a store with no retention window")
            self.forget(self._live(args[0]))
        elif kind == "t" and len(args) == 5:
            gid, added, doc_id, url, site = args
            meta = DocMeta(
                _time(added), _text(url, "url", optional=True), _text(site, "site", optional=True)
            )
            self.note(self._live(gid), _text(doc_id, "doc_id", optional=True), meta)
        else:
            raise ValueError(f"unknown journal operation {op!r:.60}")

    def _sketch_values(self, values: Any) -> list[int]:
        """*values* if they are sketch values of this store's width, else ValueError: a list
        of ints, or (journals since 2026-12) the str of their base64, packed as the store
        keeps a sketch (:func:`pack_sketch`)."""
        if type(values) is str:
            width = 4 if self.narrow else 8
            hs = list(unpack_sketch(_unbase64(values, width), self.narrow))
        else:
            hs = _u64s(values)
        if self.narrow and not _ints_within(hs, 0, 1 << NARROW_BITS):
            raise ValueError(f"a sketch value is wider than {NARROW_BITS} bits")
        return hs

    def _live(self, gid: Any) -> int:
        """*gid* if it is a canonical group of these tables, else ValueError."""
        gid = _gid(gid)
        if gid not in self.size:
            raise ValueError(f"group {gid} does not exist (or was merged away)")
        return int(gid)

    # -- snapshot ----------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        return self._dump(parted=False)

    def snapshot(self) -> dict[str, Any]:
        # A narrow store writes its per-group tables and documents in parts (format 5); a wide
        # one keeps format 2 whole, which older versions read.
        return self._dump(parted=self.narrow)

    def _dump(self, parted: bool) -> dict[str, Any]:
        return {
            "format": 5 if parted else 4 if self.narrow else 2,
            "narrow": self.narrow,
            "fp": packed(self.fp),
            "exact": packed(self.exact),
            "common": packed(self.common) if self.narrow else set(self.common),
            "votes": packed(self.votes),
            "parent": self.parent,
            "sketch": {} if parted else plain(self.sketch),
            "limit": self.limit,
            "size": {} if parted else plain(self.size),
            "members": {} if parted else plain(self.members),
            "docs": {} if parted else plain(self.docs),
            **({PARTS: self._parts()} if parted else {}),
            "counter": self.counter,
            "documents": self.documents,
            "seen": self.seen,
            "hours": self.hours,
            "meta": self.meta,
            "retention": self.window,
            "last": self.last,
            "owned": self.owned,
            "absorbed": self.absorbed,
            "forgotten": self.forgotten,
            **({"corrections": self.corrections_kept} if self.corrections_kept else {}),
            # (absent, as in every snapshot before the setting: see begun_with)
            **({"letter_units": self.letter_units} if self.letter_units is not None else {}),
        }

    def _parts(self) -> Iterator[dict[str, dict[Any, Any]]]:
        """The sketch, size and members of each :data:`_PART_GROUPS` groups and the records
        of those members, a part at a time (format 5; a last part holds any sketch or record
        of no listed group, which the tables never keep but a snapshot must not lose)."""
        gids = list(self.size)
        sketches = records = 0
        for i in range(0, len(gids), _PART_GROUPS):
            sketch: dict[int, Any] = {}
            size: dict[int, int] = {}
            members: dict[int, Any] = {}
            docs: dict[str, bytes] = {}
            for gid in gids[i : i + _PART_GROUPS]:
                size[gid] = self.size[gid]
                if (values := self.sketch.get(gid)) is not None:
                    sketch[gid] = values
                if (ids := self.members.get(gid)) is not None:
                    members[gid] = ids
                    for doc_id in _ids(ids):
                        if (rec := self.docs.get(doc_id)) is not None:
                            docs[doc_id] = rec
            sketches += len(sketch)
            records += len(docs)
            yield {"sketch": sketch, "size": size, "members": members, "docs": docs}
        del gids
        if sketches == len(self.sketch) and records == len(self.docs):
            return
        listed = {d for ids in self.members.values() for d in _ids(ids)}
        yield {
            "sketch": {g: v for g, v in self.sketch.items() if g not in self.size},
            "docs": {d: r for d, r in self.docs.items() if d not in listed},
        }

    def load(self, data: Any) -> None:
        """Take the tables of a snapshot, after checking every one has the shape it was
        written with (ids positive ints, fingerprints unsigned 64-bit ints, doc records of
        five fields), so a damaged or crafted file fails here, not in a later call.

        Raises:
            StoreCorruptError: a table is missing or holds something this store never writes.
        """
        if not isinstance(data, dict) or data.get("format") not in _SNAPSHOT_FORMATS:
            formats = " or ".join(map(str, _SNAPSHOT_FORMATS))
            raise StoreCorruptError(
                f"The snapshot is not an nshash memory snapshot of format {formats}"
                " (a later version's store needs that version)"
            )
        try:
            # Unpacked at once, no tuple kept: each plain table is dropped below once built.
            (
                self.fp,
                self.exact,
                self.common,
                self.parent,
                sketch,
                size,
                members,
                docs,
                self.counter,
                self.documents,
                self.votes,
                self.limit,
                self.narrow,
            ) = _check_snapshot(data)
        except DAMAGE as exc:
            raise StoreCorruptError(f"The snapshot is damaged: {reason(exc)}") from exc
        try:
            self.seen, self.hours, self.meta = _check_activity(data, size)
        except DAMAGE as exc:
            raise StoreCorruptError(f"The snapshot is damaged: {reason(exc)}") from exc
        self.buckets = {}
        for gid, hours in self.hours.items():
            for h, n in hours.items():
                self.buckets.setdefault(h, {})[gid] = n
        try:
            retention = _check_retention(data, size, self.counter)
        except DAMAGE as exc:
            raise StoreCorruptError(f"The snapshot is damaged: {reason(exc)}") from exc
        self.window, self.last, self.owned, self.absorbed, self.forgotten = retention
        kept = data.get("corrections", {})
        if type(kept) is not dict or not all(
            type(c) is int and c > 0 and type(e) is str for c, e in kept.items()
        ):
            raise StoreCorruptError("The snapshot is damaged: its corrections are not id -> text")
        self.corrections_kept = kept
        self.corrections_version += 1
        units = data.get("letter_units")
        if units is not None and (type(units) is not int or units < 1):
            raise StoreCorruptError(
                f"The snapshot is damaged: letter_units is {units!r:.40}, not a positive int"
            )
        self.letter_units = units
        # Every table is checked. Each plain one is now converted and dropped, the largest
        # first, so that its memory is free before the next is built: a reopen then holds
        # little more than the store it makes (data keeps no table for the caller).
        data.clear()
        self.docs = doc_table(docs)
        del docs
        self.sketch = group_table(sketch, blobs=True)
        del sketch
        self.members = group_table(members)
        del members
        self.size = group_table(size)
        self.order = deque(sorted((t, g) for g, t in self.last.items()))


_Table = TypeVar("_Table", bound=MutableMapping[int, Any])
_T = TypeVar("_T")


def _anchors_of(value: Any, counter: int) -> MutableMapping[int, int]:
    """A snapshot's ``fp`` or ``exact`` table, checked: packed (an AnchorMap's ``pack()``) or
    a dict (the pure path's, and every snapshot before packing), into :func:`anchor_table`'s
    kind, every key an unsigned 64-bit int and every id one handed out."""
    if type(value) is bytes:
        return _unpacked_within(anchor_table(value), counter, "an anchor")
    if type(value) is not dict:
        raise ValueError(f"an anchor table is a {type(value).__name__}")
    if not (_ints_within(value, 0, _U64) and _ints_within(value.values(), 1, counter + 1)):
        for h, gid in value.items():
            _u64(h)
            if _gid(gid) > counter:
                raise ValueError(f"group {gid} is past the id counter {counter}")
    if not COMPILED:
        return value
    table = anchor_table()
    for h, gid in value.items():
        table[h] = gid
    return table


def _common_of(value: Any) -> MutableMapping[int, int]:
    """A snapshot's ``common`` table, checked: packed (an AnchorMap's ``pack()``), a dict (the
    pure path's) or a set (every snapshot before the table was an AnchorMap), into
    :func:`anchor_table`'s kind, every key an unsigned 64-bit int mapped to 1."""
    try:
        if type(value) is bytes:
            table = anchor_table(value, filtered=True)
            ids = table.values() if type(table) is dict else table.bounds() or ()  # type: ignore[attr-defined]
            if not _ints_within(ids, 1, 2):
                raise ValueError("a hash is mapped to something other than 1")
            return table
        if type(value) is dict:
            if not _ints_within(value.values(), 1, 2):
                raise ValueError("a hash is mapped to something other than 1")
        elif type(value) is not set:
            raise ValueError(f"it is a {type(value).__name__}")
        if not _ints_within(value, 0, _U64):
            _u64s(value)
    except ValueError as exc:
        raise ValueError(f"table 'common': {exc}") from None
    if not COMPILED and type(value) is dict:
        return value
    table = anchor_table(filtered=True)
    for h in value:
        table[h] = 1
    return table


def _unpacked_within(table: _Table, counter: int, what: str) -> _Table:
    """*table*, read from a snapshot's packed bytes (which hold only ids from 1), if it names
    no group past *counter*: a compiled map by its ``bounds()``, the pure path's dict by its
    values (ids, or tuples of them)."""
    if isinstance(table, dict):
        ids = [g for v in table.values() for g in (v if type(v) is tuple else (v,))]
        highest = max(ids, default=0)
    else:
        bounds = table.bounds()  # type: ignore[attr-defined]
        highest = 0 if bounds is None else bounds[1]
    if highest > counter:
        raise ValueError(f"{what} names a group past the id counter {counter}")
    return table


def _votes_of(value: Any, counter: int) -> MutableMapping[int, tuple[int, ...]]:
    """A snapshot's ``votes`` table, checked: packed (a VoteMap's ``pack()``) or a dict (the
    pure path's, and every snapshot before packing), into :func:`vote_table`'s kind, every key
    an unsigned 64-bit int and every id one handed out."""
    if type(value) is bytes:
        return _unpacked_within(vote_table(value), counter, "a vote")
    if type(value) is not dict:
        raise ValueError(f"table 'votes' is a {type(value).__name__}")
    voted = (
        _ints_within(value, 0, _U64)
        and set(map(type, value.values())) <= {tuple}
        and _ints_within([g for gids in value.values() for g in gids], 1, counter + 1)
    )
    for h, gids in () if voted else value.items():
        _u64(h)
        if type(gids) is not tuple:
            raise ValueError(f"the votes of {h} are not a tuple")
        for gid in gids:
            if _gid(gid) > counter:
                raise ValueError(f"group {gid} is past the id counter {counter}")
    table = vote_table()
    for h, gids in value.items():
        if gids:  # no votes is no entry
            table[h] = gids
    return table


def _check_snapshot(data: dict[str, Any]) -> tuple[Any, ...]:
    """The tables of a snapshot, each checked (see :meth:`_Tables.load`)."""
    counter = count(data["counter"], "counter")
    documents = count(data["documents"], "documents")
    narrow = data.get("narrow", False)
    if narrow is not (data["format"] in _NARROW_FORMATS):
        raise ValueError(f"a snapshot of format {data['format']} says narrow is {narrow!r:.20}")
    width = 4 if narrow else 8

    def group(gid: Any) -> int:
        if _gid(gid) > counter:
            raise ValueError(f"group {gid} is past the id counter {counter}")
        return int(gid)

    def table(name: str) -> dict[Any, Any]:
        value = data[name]
        if type(value) is not dict:
            raise ValueError(f"table {name!r} is a {type(value).__name__}, not a dict")
        return value

    # The big tables are checked in a few passes at C speed (or built by the AnchorMap, which
    # checks as it goes); only a dict that fails them is walked entry by entry.
    fp, exact = _anchors_of(data["fp"], counter), _anchors_of(data["exact"], counter)
    common = _common_of(data["common"])
    parent = table("parent")
    for gid, root in parent.items():
        if group(root) >= group(gid):
            raise ValueError(f"group {gid} resolves to {root}, which is not smaller")
    sketch, size, members = table("sketch"), table("size"), table("members")
    packed = (
        _ints_within(sketch, 1, counter + 1)
        and set(map(type, sketch.values())) <= {bytes}
        and not any(len(hs) & (width - 1) for hs in sketch.values())
    )
    for gid, hs in () if packed else list(sketch.items()):
        group(gid)
        if type(hs) is bytes:  # packed: every 8 (or 4) bytes are a value
            if len(hs) % width:
                raise ValueError(f"the packed sketch of group {gid} has {len(hs)} bytes")
        elif type(hs) is set and not narrow:  # as snapshots before packed sketches kept them
            _u64s(hs)
            sketch[gid] = pack_sketch(sorted(hs))
        else:
            raise ValueError(f"the sketch of group {gid} is not a set or packed values")
    if not (_ints_within(size, 1, counter + 1) and _ints_within(size.values(), 0, _U64)):
        for gid, n in size.items():
            group(gid)
            count(n, "size")
    docs = table("docs")
    if not _records_within(docs, counter):
        _check_records(docs, group)
    lists = members.values()
    listed = set(map(type, lists)) <= {list, str} and [
        d for ids in lists for d in ((ids,) if type(ids) is str else ids)
    ]
    fast = (
        listed is not False
        and members.keys() <= size.keys()
        and set(map(type, listed)) <= {str}
        and docs.keys() >= set(listed)
    )
    for gid, ids in () if fast else members.items():
        if gid not in size:
            raise ValueError(f"group {gid} lists members but has no size")
        if type(ids) not in (list, str):
            raise ValueError(f"the members of group {gid} are not a list")
        for doc_id in _ids(ids):
            if type(doc_id) is not str or doc_id not in docs:
                raise ValueError(f"group {gid} lists a document it has no record of")
    votes, limit = _votes_of(data["votes"], counter), table("limit")
    cut = _ints_within(limit, 1, counter + 1) and _ints_within(limit.values(), 0, NO_LIMIT + 1)
    for gid, value in () if cut else limit.items():
        group(gid)
        _limit(value)
    return (
        fp, exact, common, parent, sketch, size, members, docs, counter, documents, votes, limit,
        narrow,
    )  # fmt: skip


def _time(value: Any) -> int:
    """*value* if it is a time this store writes (whole epoch seconds), else ValueError."""
    if type(value) is not int or not 0 <= value < 1 << 53:
        raise ValueError(f"{value!r:.40} is not a time")
    return int(value)


def _check_activity(data: dict[str, Any], size: dict[int, int]) -> tuple[Any, Any, Any]:
    """The activity tables of a snapshot (absent in older format-2 snapshots), each checked:
    only canonical groups have activity, counts are positive, times whole seconds."""
    seen, hours, meta = data.get("seen", {}), data.get("hours", {}), data.get("meta", {})
    if type(seen) is not dict or type(hours) is not dict or type(meta) is not dict:
        raise ValueError("an activity table is not a dict")
    for gid, span in seen.items():
        if gid not in size or type(span) is not tuple or len(span) != 2:
            raise ValueError(f"the first and last seen of group {gid!r:.40} are wrong")
        if _time(span[0]) > _time(span[1]):
            raise ValueError(f"group {gid} was first seen after it was last seen")
    for gid, counts in hours.items():
        if gid not in size or type(counts) is not dict:
            raise ValueError(f"the hours of group {gid!r:.40} are wrong")
        for h, n in counts.items():
            _time(h)
            if count(n, "hour count") < 1:
                raise ValueError(f"group {gid} counts no document in hour {h}")
    for doc_id, rec in meta.items():
        _text(doc_id, "doc_id")
        if type(rec) is not tuple or len(rec) != 3:
            raise ValueError(f"the metadata of {doc_id!r:.60} is not 3 fields")
        _time(rec[0])
        _text(rec[1], "url", optional=True)
        _text(rec[2], "site", optional=True)
    return seen, hours, meta


def _check_retention(data: dict[str, Any], size: dict[int, int], counter: int) -> tuple[Any, ...]:
    """The retention tables of a snapshot (absent in snapshots of stores without a window),
    each checked: only canonical groups are dated and own hashes, times whole seconds."""
    window = data.get("retention")
    last, owned = data.get("last", {}), data.get("owned", {})
    absorbed, forgotten = data.get("absorbed", {}), count(data.get("forgotten", 0), "forgotten")
    if window is not None:
        _gid(window)
    if type(last) is not dict or type(owned) is not dict or type(absorbed) is not dict:
        raise ValueError("a retention table is not a dict")
    if (last or owned or absorbed) and window is None:
        raise ValueError("groups are dated in a store with no retention window")
    if not (last.keys() <= size.keys() and owned.keys() <= size.keys()):
        raise ValueError("a group that does not exist is dated or owns hashes")
    if not _ints_within(last.values(), 0, 1 << 53):
        raise ValueError("a group's last document has a time this store never writes")
    if not (
        set(map(type, owned.values())) <= {bytes}
        and not any(len(b) % _OWNED.size for b in owned.values())
        and set().union(*(b[0 :: _OWNED.size] for b in owned.values())) <= set(b"fxv")
    ):
        raise ValueError("a group's hashes are not packed values")
    for gid, ids in absorbed.items():
        if gid not in size or type(ids) is not tuple or not _ints_within(ids, gid + 1, counter + 1):
            raise ValueError(f"the ids merged into group {gid!r:.40} are wrong")
    return window, last, owned, absorbed, forgotten


class MemoryStore(Store):
    """Dicts in this process; with *path*, a journal and snapshot make them durable.

    Safe for threads: one lock serializes every call. Use one process per path (a lock file
    enforces it); share state between processes through Redis instead.

    Args:
        path: the snapshot file; the journal is ``path + ".journal"``. None keeps nothing.
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``; see the module docstring.
        repair: open a damaged journal by keeping every line before the damage (the rest is
            moved to ``PATH.journal.damaged``); :attr:`repaired` says what was dropped.
        readonly: read the snapshot and journal without locking or writing anything; every
            write raises :class:`~nshash.StoreReadOnlyError`.
        retention: forget groups with no new document for this many seconds (see
            :mod:`~nshash.methods.nshash.retention`); None keeps the store's own window.
        clock: what time it is, in epoch seconds, for the retention window.

    Raises:
        StoreLockedError: another process has *path* open (not raised when *readonly*).
        StoreNotFoundError: *readonly* and there is no store at *path*.
        StoreCorruptError: the snapshot or journal cannot be read safely.

    Example:
        >>> store = MemoryStore()
        >>> store.stats().groups
        0
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        fsync: str = "everysec",
        *,
        repair: bool = False,
        readonly: bool = False,
        retention: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if readonly and path is None:
            raise ConfigError("A read-only memory store needs a path: memory:// starts empty")
        if readonly and repair:
            raise ConfigError("A store opened read-only cannot be repaired")
        self.readonly = readonly
        self._lock = threading.RLock()
        #: The detaches that hold, with the tables' correction version they were read at.
        self._detaches: tuple[tuple[int, int], list[dict[str, Any]]] | None = None
        self._closed = False
        self._path = os.fspath(path) if path is not None else None
        self.url = f"memory://{self._path}" if self._path else "memory://"
        #: The tables; durable through :attr:`_file` when there is a path.
        self._tables = _Tables()
        self._file: JournaledFile | None = None
        if self._path is not None:
            self._file = JournaledFile(
                self._path,
                _Tables,
                url=self.url,
                what="memory store",
                fsync=fsync,
                repair=repair,
                readonly=readonly,
                lock=self._lock,
                encode=_encode_line,
            )
        self._clock = clock
        #: The ``letter_units`` to record with the first group (see record_letter_units).
        self._letters: int | None = None
        t = self._t
        window = settle_window(t.window, retention, t.counter == 0, self.url)
        if window != t.window:
            if readonly or self._file is None:
                t.window = window
            else:
                with self._lock, self._file.change() as state:  # the flusher runs already
                    assert isinstance(state, _Tables)
                    assert window is not None  # settle_window never unsets one
                    state.set_window(window)

    @property
    def _t(self) -> _Tables:
        state = self._file.state if self._file is not None else self._tables
        assert isinstance(state, _Tables)
        return state

    @property
    def repaired(self) -> str | None:
        """What opening with ``repair=True`` dropped (None: the files were whole)."""
        return self._file.repaired if self._file is not None else None

    def save(self) -> None:
        """Write a snapshot now and empty the journal (no-op without a path)."""
        with self._lock:
            self._check()
            self._refuse_writes()
            if self._file is not None:
                self._file.save()

    # -- the Store contract ------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)

    def _refuse_writes(self) -> None:
        if self.readonly:
            raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        with self._lock:
            if self._closed or self.readonly:
                self._check()
                self._refuse_writes()
            file = self._file
            mine = self._tables if file is None else file.state
            assert isinstance(mine, _Tables)
            window = mine.window
            if window is not None:
                now = int(self._clock())
                if self._file is None:
                    mine = self._t
                    doc = _compared(mine, doc, self._letters)
                    faster = None
                    if _FAST is not None:
                        faster = functools.partial(
                            self._new_story, mine, doc, policy, doc_id, title, meta
                        )
                    return retained_assign(
                        mine, doc, policy, doc_id, title, meta, window, now, faster
                    )
                with self._file.change() as t:
                    assert isinstance(t, _Tables)
                    doc = _compared(t, doc, self._letters)
                    return retained_assign(t, doc, policy, doc_id, title, meta, window, now)
            # The compiled assignment narrows the document itself (no narrowed DocPrint is
            # made); the Python one gets it narrowed (_compared).
            if file is None:
                t = mine
                # (_narrowing without a call once a group is made: it then only reads narrow)
                narrowed = t.narrow if t.counter else _narrowing(t, self._letters)
                shift = _SHIFT if narrowed else 0
                placed = self._fast(t, doc, policy, doc_id, title, meta, shift)
                if placed is not None:
                    return placed
                return assign(t, narrow(doc) if shift else doc, policy, doc_id, title, meta)
            # The tables change first (the algorithm reads its own writes), then the journal
            # line is written; if that fails, every change is taken back: no trace is left.
            # The compiled assignment logs the same ops and notes the same undo steps.
            # (JournaledFile.change() without its generator: this runs once an add.)
            t = file.begin()
            try:
                assert isinstance(t, _Tables)
                shift = _SHIFT if _narrowing(t, self._letters) else 0
                placed = self._fast(t, doc, policy, doc_id, title, meta, shift)
                if placed is None:
                    placed = assign(t, narrow(doc) if shift else doc, policy, doc_id, title, meta)
            except BaseException:
                file.abort()
                raise
            file.commit()
            return placed

    def placer(self, fingerprinter: Fingerprinter, policy: MatchPolicy) -> Placer | None:
        """One step from a text (or a document fingerprinted already) to its group, for
        :meth:`NSHash.add <nshash.methods.nshash.core.NSHash.add>` of an untracked
        document: the compiled text kernel (see :meth:`Fingerprinter.plain_prepare
        <nshash.text.fingerprint.Fingerprinter.plain_prepare>`) and the compiled assignment,
        with no Python frame between them. The function takes the text (a checked str) or
        the :class:`~nshash.DocPrint`, and the document's checked id and title, and returns
        its :class:`~nshash.AddResult`, or None where either declines (a text the
        kernel leaves to Python, a merge, a retried id, an id in a store that keeps an
        editor's corrections, whose detach rule may move it, a store with no group yet or a
        retention window, a closed store), having written nothing: the caller then takes the
        general way, :meth:`assign`, which places it as it would have. A text holding ``<``
        under ``html="auto"`` is fingerprinted by *fingerprinter*'s
        :meth:`~nshash.text.fingerprint.Fingerprinter.prepare` (it may be HTML). In a store
        kept in a file the change is journaled as :meth:`assign` journals it. None where
        this store has no such step (the pure path, a read-only store).

        The document goes through the same compiled assignment as :meth:`assign`'s, with
        the same arguments: the answers are the same either way.
        """
        plain = fingerprinter.plain_prepare()
        if plain is None or _FAST is None or self.readonly:
            return None
        prepare, markup = plain
        whole = fingerprinter.prepare  # (a text that may be HTML: read as prepare reads it)
        args = _policy_args(policy)
        file, lock = self._file, self._lock

        def place(item: str | DocPrint, doc_id: str | None, title: str | None) -> AddResult | None:
            if isinstance(item, str):
                found = whole(item) if markup and "<" in item else prepare(item)
                if found is None:
                    return None
                doc = found
            else:
                doc = item
            with lock:
                # (the file's state is this store's _Tables; no isinstance test an add)
                t: _Tables = self._tables if file is None else file.state  # type: ignore[assignment]
                if (
                    self._closed
                    or t.window is not None
                    or not t.counter
                    or (doc_id is not None and t.corrections_kept)
                ):
                    return None
                if file is not None:
                    file.begin()
                try:
                    placed = _compiled_place(t, doc, args, doc_id, title, _SHIFT if t.narrow else 0)
                except BaseException:
                    if file is not None:
                        file.abort()
                    raise
                if file is not None:
                    if placed is None:
                        file.abort()  # (nothing was written: the general way places it)
                    else:
                        file.commit()
            if placed is None:
                return None
            root, duplicate, anchors = placed
            if _MAKE is not None:  # AddResult(...), without the frozen __init__'s cost
                made: AddResult = _MAKE(
                    AddResult, ADD_RESULT_FIELDS, root, duplicate, (), anchors, doc_id, False,
                    None, None,
                )  # fmt: skip
                return made
            return AddResult(root, duplicate, (), anchors, doc_id)

        return place

    @staticmethod
    def _fast(
        t: _Tables,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None,
        title: str | None,
        meta: DocMeta | None,
        shift: int = 0,
    ) -> tuple[Assignment, tuple[int, ...]] | None:
        """The compiled assignment (see :data:`_FAST`), or None where it does not apply.
        *shift*: :data:`_SHIFT` to narrow *doc* as it places it (a wide *doc* for narrow
        tables), 0 for a *doc* as the tables compare it."""
        if _FAST is None:
            return None
        placed = _compiled_place(t, doc, _policy_args(policy), doc_id, title, shift)
        if placed is None:
            return None
        root, duplicate, anchors = placed
        if meta is not None:  # what assign does last, in Python
            t.note(root, doc_id, meta)
        if _MAKE is not None:  # Assignment(root, duplicate), made cheaply
            made = _MAKE(Assignment, _ASSIGNMENT_FIELDS, root, duplicate, (), False, None)
            return made, anchors
        return Assignment(root, duplicate, ()), anchors

    def _new_story(
        self,
        t: _Tables,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None,
        title: str | None,
        meta: DocMeta | None,
    ) -> tuple[Assignment, tuple[int, ...]] | None:
        """With a window, the compiled assignment of a document that hits nothing stored (a
        new story: most of a stream), which it places as :func:`assign` would, noting what
        the new group wrote (retained_assign then dates it); None for every other one."""
        if (doc_id is not None and doc_id in t.docs) or doc.exact in t.exact:
            return None
        common, fp = t.common, t.fp
        live = [h for h in doc.sentences if h not in common] if common else doc.sentences
        if any(h in fp for h in (live or doc.sentences)[: anchors_wanted(doc, policy.n)]):
            return None  # a candidate (perhaps expired: assign hides it)
        tail = tail_of(doc, common, NO_HASHES)  # (what the placement votes for its group)
        placed = self._fast(t, doc, policy, doc_id, title, meta)
        if placed is None:
            return None
        root = placed[0].similar_id
        voted = t.votes  # the tail's votes still held (none that made a hash common)
        owned = [_OWNED.pack(b"v", h) for h in tail if root in voted.get(h, ())]
        owned += [_OWNED.pack(b"f", h) for h in placed[1]]
        t.owned[root] = b"".join(owned) + _OWNED.pack(b"x", doc.exact)
        return placed

    def _reading(self) -> _Tables:
        """The tables, with the groups expired by now hidden (when there is a window)."""
        t = self._t
        if t.window is not None:
            t.cutoff = int(self._clock()) - t.window
        return t

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        with self._lock:
            self._check()
            t = self._reading()
            return lookup(t, narrow(doc) if t.narrow else doc, policy)

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        with self._lock:
            self._check()
            t = self._reading()
            return explain(t, narrow(doc) if t.narrow else doc, policy)

    def resolve(self, similar_id: int) -> int:
        with self._lock:
            self._check()
            return resolve(self._t, similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        with self._lock:
            self._check()
            rec = self._t.get_doc(doc_id)
            if rec is None:
                return None
            return dataclasses.replace(rec, similar_id=resolve(self._t, rec.similar_id))

    def _group(self, gid: int, most: int | None = None) -> Group:
        t = self._t
        ids = _ids(t.members.get(gid))
        if most is not None:
            ids = ids[:most]
        members = tuple(_member(d, t.docs[d]) for d in ids)
        return Group(gid, t.size.get(gid, 0), members)

    def _canonical(self, similar_id: int) -> int | None:
        """The group *similar_id* resolves to, or None (never handed out, or forgotten)."""
        t = self._t
        if not 0 < similar_id <= t.counter:
            return None
        gid = resolve(t, similar_id)
        return gid if gid in t.size else None

    def group_head(self, similar_id: int, members: int) -> Group | None:
        with self._lock:
            self._check()
            gid = self._canonical(similar_id)
            return None if gid is None else self._group(gid, members)

    def group(self, similar_id: int) -> Group | None:
        with self._lock:
            self._check()
            gid = self._canonical(similar_id)
            return None if gid is None else self._group(gid)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        with self._lock:
            self._check()
            sizes = self._t.size
            if type(sizes) is dict:
                big: Iterable[int] = (g for g in sizes if sizes[g] >= min_size)
            else:  # a GroupTable walks its slots without making every id
                big = sizes.at_least(min_size)  # type: ignore[attr-defined]
            top = heapq.nlargest(limit, big, key=lambda g: (sizes[g], -g))
            return [self._group(g) for g in top]

    def sketch(self, similar_id: int) -> tuple[tuple[int, ...], int] | None:
        with self._lock:
            self._check()
            gid = self._canonical(similar_id)
            if gid is None:
                return None
            values, limit = self._t.group_sketch(gid)
            return tuple(sorted(values)), limit

    def narrow_sketches(self) -> bool:
        with self._lock:
            self._check()
            return bool(self._t.narrow)

    def letter_units(self) -> int | None:
        with self._lock:
            self._check()
            t = self._t
            return begun_with(t.letter_units, t.counter > 0)

    def record_letter_units(self, units: int) -> int:
        # Recorded with the first group's ops (see _narrowing): in the same journal line.
        with self._lock:
            self._check()
            self._refuse_writes()
            t = self._t
            answer = letters_to_record(
                self.url, t.letter_units, t.counter > 0, self._letters, units
            )
            if t.letter_units is None:
                self._letters = answer
            return answer

    def common(self) -> set[int]:
        with self._lock:
            self._check()
            return set(self._t.common)

    def stats(self) -> StoreStats:
        with self._lock:
            self._check()
            t = self._t
            return StoreStats(
                documents=t.documents,
                groups=len(t.size),
                fingerprints=len(t.fp),
                common_fingerprints=len(t.common),
                last_id=t.counter,
                extra={} if t.window is None else {"retention": t.window, "forgotten": t.forgotten},
            )

    def _buckets(self, first_hour: int, last_hour: int) -> list[dict[int, int]]:
        """The per-hour counts of the hours *first_hour* .. *last_hour* that have any (the
        caller holds the lock)."""
        buckets = self._t.buckets
        # Only the hours in the window are read; a window wider than the hours recorded
        # walks the recorded ones instead.
        if last_hour - first_hour + 1 > len(buckets):
            return [b for h, b in buckets.items() if first_hour <= h <= last_hour and b]
        return [b for h in range(first_hour, last_hour + 1) if (b := buckets.get(h))]

    def active(self, first_hour: int, last_hour: int) -> set[int]:
        with self._lock:
            self._check()
            return set().union(*self._buckets(first_hour, last_hour))

    def counts(self, first_hour: int, last_hour: int, gids: Iterable[int]) -> dict[int, int]:
        with self._lock:
            self._check()
            found = self._buckets(first_hour, last_hour)
            wanted = gids if isinstance(gids, (set, frozenset)) else set(gids)
            out: dict[int, int] = {}
            if len(wanted) * len(found) <= sum(map(len, found)):
                for gid in wanted:  # few groups: look each up in each hour
                    n = sum(b.get(gid, 0) for b in found)
                    if n:
                        out[gid] = n
                return out
            get = out.get
            for bucket in found:  # many: walk the hours once
                for gid, n in bucket.items():
                    if gid in wanted:
                        out[gid] = get(gid, 0) + n
            return out

    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        with self._lock:
            self._check()
            counts: dict[int, int] = {}
            for bucket in self._buckets(first_hour, last_hour):
                if not counts:
                    counts = dict(bucket)
                    continue
                get = counts.get
                for gid, n in bucket.items():
                    counts[gid] = get(gid, 0) + n
            top = heapq.nlargest(limit, counts.items(), key=lambda kv: (kv[1], -kv[0]))
            return [(g, n) for g, n in top]

    def activity(self, similar_id: int) -> Activity | None:
        with self._lock:
            self._check()
            t = self._t
            if not 0 < similar_id <= t.counter:
                return None
            gid = resolve(t, similar_id)
            seen = t.seen.get(gid)
            if seen is None:
                return None
            hours = tuple((h * HOUR, n) for h, n in sorted(t.hours.get(gid, {}).items()))
            return Activity(gid, seen[0], seen[1], hours)

    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        with self._lock:
            self._check()
            meta = self._t.meta
            out: list[DocMeta | None] = []
            for d in doc_ids:
                rec = meta.get(checked_doc_id(d))
                out.append(None if rec is None else DocMeta(*rec))
            return out

    # -- corrections ----------------------------------------------------------------------
    def _change(self, step: Callable[[_Tables], _T]) -> _T:
        """Run *step* on the tables as one atomic, journaled change."""
        with self._lock:
            self._check()
            self._refuse_writes()
            if self._file is None:  # corrections check everything before they write
                return step(self._t)
            with self._file.change() as t:
                assert isinstance(t, _Tables)
                return step(t)

    def detach(self, doc_id: str, by: str, at: int, votes: int) -> Correction:
        return self._change(lambda t: corrections.detach(t, doc_id, by, at, votes))

    def join(self, a: int, b: int, by: str, at: int, cap: int) -> Correction:
        return self._change(lambda t: corrections.join(t, a, b, by, at, cap))

    def undo(self, cid: int, by: str, at: int, cap: int) -> Correction:
        return self._change(lambda t: corrections.undo(t, cid, by, at, cap))

    def corrections(self) -> list[Correction]:
        with self._lock:
            self._check()
            return corrections.listing(self._t)

    def settle(self, doc_id: str, anchors: Sequence[int]) -> int | None:
        with self._lock:
            kept = self._t.corrections_kept
            if not kept:
                return None
            # The detaches that hold, parsed once per change of the corrections (a detach,
            # join or undo writes one entry; the rule runs on every later add).
            key = (id(self._t), self._t.corrections_version)
            if self._detaches is None or self._detaches[0] != key:
                self._detaches = (key, corrections.active_detaches(self._t))
            detaches = self._detaches[1]
            if not detaches:
                return None
        return self._change(lambda t: corrections.settle(t, doc_id, anchors, detaches))

    def ping(self) -> None:
        """Raise StoreError while the store cannot write: its last journal write failed and
        the disk still refuses a small probe write next to it."""
        with self._lock:
            self._check()
            if self._file is not None:
                self._file.check()

    def close(self) -> None:
        """Flush the journal and release the files; closing twice is harmless.

        The snapshot is not rewritten here (see :data:`~nshash.stores.durable.JOURNAL_SHARE`): the
        journal holds every write and the next open replays it.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._file is not None:
                self._file.close()
        if self._file is not None:
            self._file.join()
