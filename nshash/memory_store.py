"""MemoryStore: the embedded default, dicts in this process, optionally durable on disk.

Without a path the tables live only as long as the process. With a path, every change is
journaled before the call that made it returns, so a killed process loses nothing it had
acknowledged:

* ``PATH.journal`` gets one JSON line per document: a sequence number and the table changes
  it made. JSON cannot run code when read back. The ``fsync`` policy decides when the line
  reaches the disk itself: ``always`` (before returning), ``everysec`` (a background flush
  about once a second, the default) or ``no`` (when the OS decides). Every policy survives a
  killed process, since each line is handed to the OS before the call returns.
* ``PATH`` is a snapshot of all tables, written on :meth:`MemoryStore.save` and when a write
  finds the journal grown past :data:`JOURNAL_SHARE` times the snapshot (and past
  :data:`JOURNAL_MIN_BYTES`): pickled to ``PATH.tmp``, fsynced, then renamed over ``PATH``.
  Opening and closing alone never rewrite it; the journal is replayed on the next open.
  It is read back with an unpickler that admits only plain containers, numbers and
  strings, so a tampered snapshot cannot run code; still, load only snapshots you wrote.
  The snapshot records the last journal sequence number it includes, so a crash between
  the rename and the journal truncation replays nothing twice.
* ``PATH.lock`` is held with ``flock`` while the store is open: a second opener gets
  :class:`~nshash.StoreLockedError` instead of two writers corrupting one journal.

**Read-only opens** (``readonly=True``) take no lock and create, write or truncate nothing:
they load the snapshot and every complete journal line, so they work while a writer holds
the store (a crawl can be watched) and see every write the writer acknowledged before the
open. A snapshot replaced while it is being read is detected and the read is retried.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import pickle
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from .assign import MatchPolicy, assign, combine_sketch, explain, lookup, resolve
from .durable import Journal, lock_path, probe_writable, replace_snapshot
from .errors import (
    ConfigError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from .fingerprint import NO_LIMIT, DocPrint
from .results import Assignment, DocumentRecord, Explanation, Group, Member, StoreStats
from .store import FSYNC_POLICIES, Store

__all__ = ["MemoryStore"]

logger = logging.getLogger("nshash")

#: 2: shingle anchors, sketch limits and votes (the first release's format 1 cannot be read:
#: its anchors were whole sentences, so its groups would never match again).
_SNAPSHOT_FORMAT = 2
_MISSING: Any = object()

#: its 16.6 MB snapshot in 1.9 s, on a busy 2-core machine).
JOURNAL_SHARE = 1.0

#: ... and past this size, so a small store is not rewritten every few writes.
JOURNAL_MIN_BYTES = 16 << 20

#: How every journal line starts (``[seq,``); a torn last line must too.
_JOURNAL_LINE = re.compile(rb"\[(?:\d|\Z)")

#: Attempts of a read-only open to read a snapshot and journal that a writer is not
#: replacing at that very moment.
READ_ATTEMPTS = 20
_U64 = 1 << 64

#: What a damaged journal line or snapshot may raise while it is read or applied; each
#: becomes a StoreCorruptError naming the file (and the line).
_DAMAGE = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    OverflowError,
    StoreCorruptError,
)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this store writes")


def _refuse_float(text: str) -> Any:
    raise ValueError(f"{text} is not an integer")


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


def _text(value: Any, what: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if type(value) is not str:
        raise ValueError(f"{value!r:.40} is not a {what}")
    return str(value)


def _parse_line(line: bytes) -> tuple[int, list[Any]]:
    """One journal line: ``[seq, ops]``; NaN, infinities and floats are refused."""
    value = json.loads(line, parse_constant=_refuse_constant, parse_float=_refuse_float)
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], list):
        raise ValueError("not a [sequence number, operations] pair")
    seq, ops = value
    if type(seq) is not int or seq < 1:
        raise ValueError(f"{seq!r:.40} is not a sequence number")
    return seq, ops


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global: only dicts, lists, sets, tuples, numbers, str."""

    def find_class(self, module: str, name: str) -> Any:
        raise StoreCorruptError(
            f"Snapshot refers to {module}.{name}; only plain containers are allowed"
        )


class _Tables:
    """The tables of :mod:`nshash.assign`, as dicts; every write is also logged as an op."""

    def __init__(self) -> None:
        self.fp: dict[int, int] = {}
        self.exact: dict[int, int] = {}
        self.common: set[int] = set()
        self.votes: dict[int, tuple[int, ...]] = {}
        self.parent: dict[int, int] = {}
        self.sketch: dict[int, set[int]] = {}
        #: A group's sketch limit, for the groups whose sketch was cut (see combine_sketch).
        self.limit: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.members: dict[int, list[str]] = {}
        self.docs: dict[str, tuple[int, bool, tuple[int, ...], str | None, tuple[int, ...]]] = {}
        self.counter = 0
        self.documents = 0
        #: Ops applied since the last journal write; None when nothing journals them.
        self.log: list[list[Any]] | None = None
        #: While a change is in progress, how to take back each of its writes; see rollback.
        #: A step is a callable, or (table, key, old value) for a dict entry to put back
        #: (table ``self``: an attribute).
        self.undo: list[Callable[[], None] | tuple[Any, Any, Any]] | None = None

    def rollback(self) -> None:
        """Take back every write made since ``undo`` was set (newest first)."""
        undo, self.undo = self.undo, []
        for step in reversed(undo or ()):
            if not isinstance(step, tuple):
                step()
                continue
            table, key, old = step
            if table is self:  # an attribute (a counter)
                setattr(self, key, old)
            elif old is _MISSING:
                table.pop(key, None)
            else:
                table[key] = old
        if self.log is not None:
            self.log = []

    # -- reads -------------------------------------------------------------------------
    def get_fp(self, h: int) -> int | None:
        return self.fp.get(h)

    def get_exact(self, h: int) -> int | None:
        return self.exact.get(h)

    def not_common(self, hs: Iterable[int]) -> list[int]:
        common = self.common
        if not common:
            return list(hs)
        return [h for h in hs if h not in common]

    def live_set(self, hs: Iterable[int]) -> set[int]:
        return set(hs).difference(self.common)

    def get_parent(self, gid: int) -> int | None:
        return self.parent.get(gid)

    def group_sketch(self, gid: int) -> tuple[set[int], int]:
        return self.sketch.get(gid, set()), self.limit.get(gid, NO_LIMIT)

    def get_votes(self, h: int) -> tuple[int, ...]:
        return self.votes.get(h, ())

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        rec = self.docs.get(doc_id)
        if rec is None:
            return None
        sid, duplicate, merged, title, fps = rec
        return DocumentRecord(doc_id, sid, duplicate, tuple(merged), title, tuple(fps))

    # -- writes: each changes the dicts and, when journaling, logs itself as an op; replay
    # feeds the ops back through the same methods, so there is one code path for both.
    def _restore(self, table: dict[Any, Any], key: Any) -> None:
        """Record how to put ``table[key]`` back as it is now (the caller checked ``undo``)."""
        assert self.undo is not None
        # A tuple, not a closure: one is made for nearly every write of every document.
        self.undo.append((table, key, table.get(key, _MISSING)))

    def set_fp(self, h: int, gid: int) -> None:
        fp = self.fp
        if self.undo is not None:  # _restore, inlined: the most frequent write
            self.undo.append((fp, h, fp.get(h, _MISSING)))
        fp[h] = gid
        if self.log is not None:
            self.log.append(["f", h, gid])

    def set_exact(self, h: int, gid: int) -> None:
        if self.undo is not None:
            self._restore(self.exact, h)
        self.exact[h] = gid
        if self.log is not None:
            self.log.append(["x", h, gid])

    def add_common(self, hs: Iterable[int]) -> None:
        hs = list(hs)
        if self.undo is not None:
            new = set(hs).difference(self.common)
            self.undo.append(lambda: self.common.difference_update(new))
        self.common.update(hs)
        if self.log is not None:
            self.log.append(["c", hs])

    def set_votes(self, h: int, gids: tuple[int, ...]) -> None:
        if self.undo is not None:
            self._restore(self.votes, h)
        if gids:
            self.votes[h] = tuple(gids)
        else:
            self.votes.pop(h, None)
        if self.log is not None:
            self.log.append(["v", h, list(gids)])

    def _set_sketch(self, gid: int, sketch: set[int], limit: int) -> None:
        """Replace a group's sketch and limit (old values restorable on rollback)."""
        if self.undo is not None:
            self._restore(self.sketch, gid)
            self._restore(self.limit, gid)
        self.sketch[gid] = sketch
        if limit < NO_LIMIT:
            self.limit[gid] = limit
        else:
            self.limit.pop(gid, None)

    def new_group(self, sketch: Iterable[int], limit: int) -> int:
        gid = self.counter = self.counter + 1
        if self.undo is not None:
            self.undo.append((self, "counter", gid - 1))
            self.undo.append((self.size, gid, _MISSING))
        self._set_sketch(gid, set(sketch), limit)
        self.size[gid] = 0
        if self.log is not None:
            self.log.append(["n", gid, list(self.sketch[gid]), limit])
        return gid

    def extend_sketch(self, gid: int, hs: Iterable[int], limit: int, cap: int) -> None:
        hs = list(hs)
        old, old_limit = self.group_sketch(gid)
        self._set_sketch(gid, *combine_sketch(old, old_limit, hs, limit, cap))
        if self.log is not None:
            self.log.append(["s", gid, hs, limit, cap])

    def merge_into(self, root: int, gid: int, cap: int) -> None:
        if self.undo is not None:
            self._restore(self.parent, gid)
            self._restore(self.sketch, gid)
            self._restore(self.limit, gid)
            self._restore(self.size, gid)
            self._restore(self.size, root)
            self._restore(self.members, gid)
            root_members = self.members.get(root)
            kept = None if root_members is None else len(root_members)

            def undo() -> None:
                if kept is None:
                    self.members.pop(root, None)
                else:
                    del self.members[root][kept:]

            self.undo.append(undo)
        self.parent[gid] = root
        old, old_limit = self.group_sketch(root)
        more, more_limit = self.sketch.pop(gid, set()), self.limit.pop(gid, NO_LIMIT)
        self._set_sketch(root, *combine_sketch(old, old_limit, more, more_limit, cap))
        self.size[root] += self.size.pop(gid, 0)
        moved = self.members.pop(gid, None)
        if moved:
            self.members.setdefault(root, []).extend(moved)
        if self.log is not None:
            self.log.append(["g", root, gid, cap])

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
        if self.undo is not None:
            self._restore(self.size, gid)
            self.undo.append((self, "documents", self.documents))
            if record is not None:
                self._restore(self.docs, record.doc_id)
                members = self.members.get(gid)
                kept = None if members is None else len(members)

                def undo() -> None:
                    if kept is None:
                        self.members.pop(gid, None)
                    else:
                        del self.members[gid][kept:]

                self.undo.append(undo)
        self.size[gid] += 1
        self.documents += 1
        if record is None:
            if self.log is not None:
                self.log.append(["m", gid])
            return
        doc_id = record.doc_id
        self.members.setdefault(gid, []).append(doc_id)
        entry = (gid, record.duplicate, record.merged_from, record.title, record.fingerprints)
        self.docs[doc_id] = entry
        if self.log is not None:
            self.log.append(["m", gid, doc_id, *entry[1:]])

    def apply(self, op: Any) -> None:
        """Replay one journaled op (the log must be off), checking it is one this store writes.

        Raises:
            ValueError, KeyError: the op is malformed or names a group that does not exist.
        """
        if not isinstance(op, list) or not op:
            raise ValueError(f"{op!r:.60} is not a journal operation")
        kind, args = op[0], op[1:]
        if kind in ("f", "x") and len(args) == 2:
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
            self.new_group(_u64s(args[1]), _limit(args[2]))
        elif kind == "s" and len(args) == 4:
            hs, limit, cap = _u64s(args[1]), _limit(args[2]), _gid(args[3])
            self.extend_sketch(self._live(args[0]), hs, limit, cap)
        elif kind == "g" and len(args) == 3:
            root, gid = self._live(args[0]), self._live(args[1])
            if root >= gid:
                raise ValueError(f"group {gid} cannot merge into the larger id {root}")
            self.merge_into(root, gid, _gid(args[2]))
        elif kind == "m" and len(args) == 1:
            self.add_member(self._live(args[0]), None)
        elif kind == "m" and len(args) == 6:
            gid, doc_id, duplicate, merged, title, fps = args
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
            )
            self.add_member(gid, record)
        else:
            raise ValueError(f"unknown journal operation {op!r:.60}")

    def _live(self, gid: Any) -> int:
        """*gid* if it is a canonical group of these tables, else ValueError."""
        gid = _gid(gid)
        if gid not in self.size:
            raise ValueError(f"group {gid} does not exist (or was merged away)")
        return int(gid)

    # -- snapshot ----------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        return {
            "format": _SNAPSHOT_FORMAT,
            "fp": self.fp,
            "exact": self.exact,
            "common": self.common,
            "votes": self.votes,
            "parent": self.parent,
            "sketch": self.sketch,
            "limit": self.limit,
            "size": self.size,
            "members": self.members,
            "docs": self.docs,
            "counter": self.counter,
            "documents": self.documents,
        }

    def load(self, data: Any) -> None:
        """Take the tables of a snapshot, after checking every one has the shape it was
        written with (ids positive ints, fingerprints unsigned 64-bit ints, doc records of
        five fields), so a damaged or crafted file fails here, not in a later call.

        Raises:
            StoreCorruptError: a table is missing or holds something this store never writes.
        """
        if not isinstance(data, dict) or data.get("format") != _SNAPSHOT_FORMAT:
            raise StoreCorruptError(
                f"The snapshot is not an nshash memory snapshot (format {_SNAPSHOT_FORMAT})"
            )
        try:
            tables = _check_snapshot(data)
        except _DAMAGE as exc:
            raise StoreCorruptError(f"The snapshot is damaged: {_reason(exc)}") from exc
        (
            self.fp,
            self.exact,
            self.common,
            self.parent,
            self.sketch,
            self.size,
            self.members,
            self.docs,
            self.counter,
            self.documents,
            self.votes,
            self.limit,
        ) = tables


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc) or type(exc).__name__


def _count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} {value!r:.40} is not a count")
    return int(value)


def _check_snapshot(data: dict[str, Any]) -> tuple[Any, ...]:
    """The tables of a snapshot, each checked (see :meth:`_Tables.load`)."""
    counter = _count(data["counter"], "counter")
    documents = _count(data["documents"], "documents")

    def group(gid: Any) -> int:
        if _gid(gid) > counter:
            raise ValueError(f"group {gid} is past the id counter {counter}")
        return int(gid)

    def table(name: str) -> dict[Any, Any]:
        value = data[name]
        if type(value) is not dict:
            raise ValueError(f"table {name!r} is a {type(value).__name__}, not a dict")
        return value

    fp, exact = table("fp"), table("exact")
    for t in (fp, exact):
        for h, gid in t.items():
            _u64(h)
            group(gid)
    common = data["common"]
    if type(common) is not set:
        raise ValueError("table 'common' is not a set")
    _u64s(common)
    parent = table("parent")
    for gid, root in parent.items():
        if group(root) >= group(gid):
            raise ValueError(f"group {gid} resolves to {root}, which is not smaller")
    sketch, size, members = table("sketch"), table("size"), table("members")
    for gid, hs in sketch.items():
        group(gid)
        if type(hs) is not set:
            raise ValueError(f"the sketch of group {gid} is not a set")
        _u64s(hs)
    for gid, n in size.items():
        group(gid)
        _count(n, "size")
    docs = table("docs")
    for doc_id, rec in docs.items():
        _text(doc_id, "doc_id")
        if type(rec) is not tuple or len(rec) != 5:
            raise ValueError(f"the record of {doc_id!r:.60} is not 5 fields")
        gid, duplicate, merged, title, fps = rec
        group(gid)
        if type(duplicate) is not bool or type(merged) is not tuple or type(fps) is not tuple:
            raise ValueError(f"the record of {doc_id!r:.60} has a field of the wrong type")
        for m in merged:
            group(m)
        _text(title, "title", optional=True)
        _u64s(fps)
    for gid, ids in members.items():
        if gid not in size:
            raise ValueError(f"group {gid} lists members but has no size")
        if type(ids) is not list:
            raise ValueError(f"the members of group {gid} are not a list")
        for doc_id in ids:
            if type(doc_id) is not str or doc_id not in docs:
                raise ValueError(f"group {gid} lists a document it has no record of")
    votes, limit = table("votes"), table("limit")
    for h, gids in votes.items():
        _u64(h)
        if type(gids) is not tuple:
            raise ValueError(f"the votes of {h} are not a tuple")
        for gid in gids:
            group(gid)
    for gid, value in limit.items():
        group(gid)
        _limit(value)
    return fp, exact, common, parent, sketch, size, members, docs, counter, documents, votes, limit


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
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if readonly and path is None:
            raise ConfigError("A read-only memory store needs a path: memory:// starts empty")
        if readonly and repair:
            raise ConfigError("A store opened read-only cannot be repaired")
        self.readonly = readonly
        self._lock = threading.RLock()
        self._t = _Tables()
        self._closed = False
        self._fsync = fsync
        self._path = os.fspath(path) if path is not None else None
        self.url = f"memory://{self._path}" if self._path else "memory://"
        self._journal: Journal | None = None
        self._lockfile: BinaryIO | None = None
        self._seq = 0
        self._dirty = False
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self._repair = repair
        #: What opening with ``repair=True`` dropped (None: the files were whole).
        self.repaired: str | None = None
        #: Why the last write to disk failed, until one succeeds again (see :meth:`ping`).
        self._write_error: str | None = None
        self._snapshot_bytes = 0
        if self._path is not None:
            if readonly:
                self._read_consistent(self._path)
            else:
                self._open_files(self._path)

    # -- durability --------------------------------------------------------------------
    def _open_files(self, path: str) -> None:
        self._lockfile = lock_path(path, "memory store", self.url)
        try:
            snapshot_seq = self._load_snapshot(path)
            journal = path + ".journal"
            _, good_end, damage = self._replay(journal, snapshot_seq)
            if damage is not None:
                # repair: keep what was before the damage, move the damaged journal aside.
                self._write_snapshot(keep_journal=True)
                os.replace(journal, journal + ".damaged")
                self.repaired = damage
                logger.warning("%s; the damaged journal is kept as %s.damaged", damage, journal)
            elif good_end is not None:
                os.truncate(journal, good_end)
            # A plain open rewrites nothing: the journal is folded into the snapshot only once
            # it has outgrown it (see _maybe_compact).
            self._journal = Journal(journal, self.url)
        except OSError as exc:
            self._release()
            raise StoreError(f"Cannot open memory store {path!r}: {exc}", url=self.url) from exc
        except BaseException:
            self._release()
            raise
        self._t.log = []
        if self._fsync == "everysec":
            self._flusher = threading.Thread(
                target=self._flush_loop, name="nshash-journal-fsync", daemon=True
            )
            self._flusher.start()

    def _load_snapshot(self, path: str) -> int:
        try:
            with open(path, "rb") as fh:
                self._snapshot_bytes = os.fstat(fh.fileno()).st_size
                data = _PlainUnpickler(fh).load()
        except FileNotFoundError:
            return 0
        except StoreCorruptError as exc:
            raise StoreCorruptError(f"Snapshot {path!r}: {exc}", url=self.url) from exc
        except Exception as exc:
            raise StoreCorruptError(
                f"Cannot read snapshot {path!r}: {_reason(exc)}", url=self.url
            ) from exc
        try:
            self._t.load(data)
            seq = _count(data.get("seq", 0), "seq")
        except (StoreCorruptError, ValueError) as exc:
            raise StoreCorruptError(f"Snapshot {path!r}: {exc}", url=self.url) from exc
        self._seq = seq
        return seq

    def _replay(self, journal: str, after: int) -> tuple[int, int | None, str | None]:
        """Apply the journal's lines past sequence number *after*.

        Returns:
            How many lines were applied; the length to cut the file to when its last line is
            torn (else None); with ``repair``, what was dropped at the first damaged line.

        Raises:
            StoreCorruptError: a line other than the last is damaged (and not ``repair``).
        """
        try:
            with open(journal, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return 0, None, None
        return self._replay_lines(journal, data, after)

    def _replay_lines(
        self, journal: str, data: bytes, after: int
    ) -> tuple[int, int | None, str | None]:
        """:meth:`_replay` of the journal's bytes *data*."""
        lines = data.split(b"\n")
        t = self._t
        replayed = good_end = 0
        # The last element is b"" after a complete final line; anything else there is a line
        # cut short by a crash before its write returned: it was never acknowledged.
        for lineno, line in enumerate(lines[:-1], 1):
            t.undo = []
            try:
                seq, ops = _parse_line(line)
                if seq > after:
                    if seq <= self._seq:
                        raise ValueError(f"sequence number {seq} does not follow {self._seq}")
                    for op in ops:
                        t.apply(op)
            except _DAMAGE as exc:
                t.rollback()
                where = f"Journal {journal!r} line {lineno} is damaged ({_reason(exc):.200})"
                if not self._repair:
                    raise StoreCorruptError(
                        f"{where}; 'nshash repair --store URL' keeps every line before it",
                        url=self.url,
                    ) from exc
                dropped = len(lines) - lineno - (0 if lines[-1] else 1)
                return replayed, None, f"{where}: dropped it and the {dropped} line(s) after it"
            finally:
                t.undo = None
            good_end += len(line) + 1
            if seq > after:
                self._seq = seq
                replayed += 1
        if lines[-1]:
            if not _JOURNAL_LINE.match(lines[-1]):  # not the start of one of our lines
                raise StoreCorruptError(
                    f"{journal!r} is not an nshash memory journal", url=self.url
                )
            logger.warning(
                "Journal %r ends in a torn line (%d bytes, a write cut short by a crash or a"
                " full disk, never acknowledged): dropped",
                journal,
                len(lines[-1]),
            )
            return replayed, good_end, None
        return replayed, None, None

    def _read_consistent(self, path: str) -> None:
        """Load the snapshot and the journal's complete lines, as of one moment (read-only).

        A writer compacts by renaming a new snapshot over the old one and then emptying the
        journal. Reading the old snapshot and then the emptied journal would lose the lines
        in between, so the snapshot's identity is checked after the journal was read, and
        the read starts over when it changed.
        """
        journal = path + ".journal"
        for _attempt in range(READ_ATTEMPTS):
            self._t = _Tables()
            self._seq = 0
            before = _identity(path)
            if before is None and _identity(journal) is None:
                raise StoreNotFoundError(
                    f"There is no memory store at {path!r} (reading never creates one)",
                    url=self.url,
                )
            try:
                after = self._load_snapshot(path) if before is not None else 0
            except StoreCorruptError:
                if _identity(path) != before:
                    continue  # replaced while being read
                raise
            try:
                with open(journal, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                data = b""
            if _identity(path) != before:
                continue
            # Lines past the snapshot only; a torn last line was never acknowledged.
            self._replay_lines(journal, data, after)
            return
        raise StoreError(
            f"Cannot read {path!r}: its snapshot kept being replaced while it was read",
            url=self.url,
        )

    def _maybe_compact(self) -> None:
        """Fold the journal into a new snapshot once it has grown past its share."""
        journal = self._journal
        if journal is None:
            return
        size = journal.end
        if size > JOURNAL_MIN_BYTES and size > JOURNAL_SHARE * self._snapshot_bytes:
            try:
                self._write_snapshot()
            except StoreError as exc:
                # The journal still holds everything: compaction can wait for space.
                logger.warning("Cannot compact the journal: %s", exc)

    def _write_journal(self) -> None:
        """Append this call's ops as one line; raises StoreError (the caller rolls back)."""
        log = self._t.log
        if self._journal is None or not log:
            return
        seq = self._seq + 1
        line = json.dumps([seq, log], separators=(",", ":")).encode() + b"\n"
        try:
            self._journal.append(line, sync=self._fsync == "always")
        except StoreError as exc:
            self._write_error = str(exc)
            raise
        self._seq = seq
        self._t.log = []
        self._write_error = None
        if self._fsync != "always":
            self._dirty = True

    def _flush_loop(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._dirty and self._journal is not None:
                    try:
                        self._journal.sync()
                    except OSError as exc:
                        self._write_error = f"Cannot fsync the journal: {exc}"
                        continue
                    self._dirty = False

    def _write_snapshot(self, keep_journal: bool = False) -> None:
        assert self._path is not None
        data = self._t.dump()
        data["seq"] = self._seq

        def write(fh: BinaryIO) -> None:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)

        replace_snapshot(self._path, write, self._journal, self.url, keep_journal=keep_journal)
        try:
            self._snapshot_bytes = os.path.getsize(self._path)
        except OSError:
            pass

    def save(self) -> None:
        """Write a snapshot now and empty the journal (no-op without a path)."""
        with self._lock:
            self._check()
            self._refuse_writes()
            if self._path is not None:
                self._write_snapshot()

    def _release(self) -> None:
        self._stop.set()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lockfile is not None:
            self._lockfile.close()
            self._lockfile = None

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
    ) -> tuple[Assignment, tuple[int, ...]]:
        with self._lock:
            self._check()
            self._refuse_writes()
            t = self._t
            # The tables change first (the algorithm reads its own writes), then the journal
            # line is written; if that fails, every change is taken back: no trace is left.
            t.undo = []
            try:
                result = assign(t, doc, policy, doc_id, title)
                self._write_journal()
            except BaseException:
                t.rollback()
                raise
            finally:
                t.undo = None
            self._maybe_compact()
            return result

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        with self._lock:
            self._check()
            return lookup(self._t, doc, policy)

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        with self._lock:
            self._check()
            return explain(self._t, doc, policy)

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
            return DocumentRecord(
                rec.doc_id,
                resolve(self._t, rec.similar_id),
                rec.duplicate,
                rec.merged_from,
                rec.title,
                rec.fingerprints,
            )

    def _group(self, gid: int) -> Group:
        t = self._t
        members = tuple(Member(d, t.docs[d][3]) for d in t.members.get(gid, ()))
        return Group(gid, t.size.get(gid, 0), members)

    def group(self, similar_id: int) -> Group | None:
        with self._lock:
            self._check()
            if not 0 < similar_id <= self._t.counter:
                return None
            return self._group(resolve(self._t, similar_id))

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        with self._lock:
            self._check()
            sizes = self._t.size
            top = heapq.nlargest(
                limit, (g for g in sizes if sizes[g] >= min_size), key=lambda g: (sizes[g], -g)
            )
            return [self._group(g) for g in top]

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
            )

    def ping(self) -> None:
        """Raise StoreError while the store cannot write: its last journal write failed and
        the disk still refuses a small probe write next to it."""
        with self._lock:
            self._check()
            if self._write_error is None or self._path is None:
                return
            if self._journal is not None and self._journal.broken is not None:
                raise StoreError(self._journal.broken, url=self.url)
            probe_writable(self._path, self._write_error, self.url)
            self._write_error = None

    def close(self) -> None:
        """Flush the journal and release the files; closing twice is harmless.

        The snapshot is not rewritten here (see :data:`JOURNAL_SHARE`): the journal holds
        every write and the next open replays it.
        """
        with self._lock:
            if self._closed:
                return
            try:
                if self._dirty and self._journal is not None:
                    self._journal.sync()
                    self._dirty = False
            except OSError as exc:
                raise StoreError(f"Cannot sync the journal: {exc}", url=self.url) from exc
            finally:
                self._closed = True
                self._release()
        if self._flusher is not None:
            self._flusher.join(timeout=2)


def _identity(path: str) -> tuple[int, int, int, int] | None:
    """Return what tells one version of a file from the next (None when it is missing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
