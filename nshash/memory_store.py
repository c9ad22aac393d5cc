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
import os
import pickle
import re
import threading
from collections.abc import Iterable
from typing import Any, BinaryIO

from .assign import MatchPolicy, assign, lookup, resolve
from .durable import lock_path, replace_snapshot
from .errors import (
    ConfigError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from .fingerprint import DocPrint
from .results import Assignment, DocumentRecord, Group, Member, StoreStats
from .store import FSYNC_POLICIES, Store

__all__ = ["MemoryStore"]

_SNAPSHOT_FORMAT = 1

#: A write compacts the journal into a new snapshot once the journal is larger than this
#: share of the snapshot. JSON lines take about twice the bytes of the pickled tables they
#: add and twice the time to load, so the snapshot is rewritten about each time the store
#: grows by half (a bounded share of the work), and an open reads at most about twice what
#: the snapshot alone would take (measured on zh_hk_news: 34 MB of journal load in 3.9 s,
#: its 16.6 MB snapshot in 1.9 s, on a busy 2-core machine).
JOURNAL_SHARE = 1.0

#: ... and past this size, so a small store is not rewritten every few writes.
JOURNAL_MIN_BYTES = 16 << 20

#: How every journal line starts (``[seq,``); a torn last line must too.
_JOURNAL_LINE = re.compile(rb"\[(?:\d|\Z)")

#: Attempts of a read-only open to read a snapshot and journal that a writer is not
#: replacing at that very moment.
READ_ATTEMPTS = 20


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
        self.parent: dict[int, int] = {}
        self.sketch: dict[int, set[int]] = {}
        self.size: dict[int, int] = {}
        self.members: dict[int, list[str]] = {}
        self.docs: dict[str, tuple[int, bool, tuple[int, ...], str | None, tuple[int, ...]]] = {}
        self.counter = 0
        self.documents = 0
        #: Ops applied since the last journal write; None when nothing journals them.
        self.log: list[list[Any]] | None = None

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

    def sketch_overlap(self, gid: int, live: set[int]) -> tuple[set[int], int]:
        sketch = self.sketch.get(gid)
        if not sketch:
            return set(), 0
        common = self.common
        size = len(sketch) - len(sketch.intersection(common)) if common else len(sketch)
        return live & sketch, size

    def sketch_size(self, gid: int) -> int:
        return len(self.sketch.get(gid, ()))

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        rec = self.docs.get(doc_id)
        if rec is None:
            return None
        sid, duplicate, merged, title, fps = rec
        return DocumentRecord(doc_id, sid, duplicate, tuple(merged), title, tuple(fps))

    # -- writes: each changes the dicts and, when journaling, logs itself as an op; replay
    # feeds the ops back through the same methods, so there is one code path for both.
    def set_fp(self, h: int, gid: int) -> None:
        self.fp[h] = gid
        if self.log is not None:
            self.log.append(["f", h, gid])

    def set_exact(self, h: int, gid: int) -> None:
        self.exact[h] = gid
        if self.log is not None:
            self.log.append(["x", h, gid])

    def add_common(self, hs: Iterable[int]) -> None:
        hs = list(hs)
        self.common.update(hs)
        if self.log is not None:
            self.log.append(["c", hs])

    def new_group(self, sketch: Iterable[int]) -> int:
        gid = self.counter = self.counter + 1
        self.sketch[gid] = set(sketch)
        self.size[gid] = 0
        if self.log is not None:
            self.log.append(["n", gid, list(self.sketch[gid])])
        return gid

    def extend_sketch(self, gid: int, hs: Iterable[int]) -> None:
        hs = list(hs)
        self.sketch[gid].update(hs)
        if self.log is not None:
            self.log.append(["s", gid, hs])

    def merge_into(self, root: int, gid: int) -> None:
        self.parent[gid] = root
        self.sketch[root].update(self.sketch.pop(gid, ()))
        self.size[root] += self.size.pop(gid, 0)
        moved = self.members.pop(gid, None)
        if moved:
            self.members.setdefault(root, []).extend(moved)
        if self.log is not None:
            self.log.append(["g", root, gid])

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
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

    def apply(self, op: list[Any]) -> None:
        """Replay one journaled op (the log must be off)."""
        kind, args = op[0], op[1:]
        if kind == "f":
            self.set_fp(*args)
        elif kind == "x":
            self.set_exact(*args)
        elif kind == "c":
            self.add_common(*args)
        elif kind == "n":
            self.counter = args[0] - 1
            self.new_group(args[1])
        elif kind == "s":
            self.extend_sketch(*args)
        elif kind == "g":
            self.merge_into(*args)
        elif kind == "m" and len(args) == 1:
            self.add_member(args[0], None)
        elif kind == "m" and len(args) == 6:
            gid, doc_id, duplicate, merged, title, fps = args
            self.add_member(
                gid, DocumentRecord(doc_id, gid, duplicate, tuple(merged), title, tuple(fps))
            )
        else:
            raise StoreCorruptError(f"Unknown journal operation {op!r:.80}")

    # -- snapshot ----------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        return {
            "format": _SNAPSHOT_FORMAT,
            "fp": self.fp,
            "exact": self.exact,
            "common": self.common,
            "parent": self.parent,
            "sketch": self.sketch,
            "size": self.size,
            "members": self.members,
            "docs": self.docs,
            "counter": self.counter,
            "documents": self.documents,
        }

    def load(self, data: Any) -> None:
        if not isinstance(data, dict) or data.get("format") != _SNAPSHOT_FORMAT:
            raise StoreCorruptError("The snapshot is not an nshash memory snapshot (format 1)")
        try:
            self.fp, self.exact, self.common = data["fp"], data["exact"], data["common"]
            self.parent, self.sketch, self.size = data["parent"], data["sketch"], data["size"]
            self.members, self.docs = data["members"], data["docs"]
            self.counter, self.documents = int(data["counter"]), int(data["documents"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptError(f"The snapshot is missing a table: {exc}") from exc


class MemoryStore(Store):
    """Dicts in this process; with *path*, a journal and snapshot make them durable.

    Safe for threads: one lock serializes every call. Use one process per path (a lock file
    enforces it); share state between processes through Redis instead.

    Args:
        path: the snapshot file; the journal is ``path + ".journal"``. None keeps nothing.
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``; see the module docstring.
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
        readonly: bool = False,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        if readonly and path is None:
            raise ConfigError("A read-only memory store needs a path: memory:// starts empty")
        self.readonly = readonly
        self._lock = threading.RLock()
        self._t = _Tables()
        self._closed = False
        self._fsync = fsync
        self._path = os.fspath(path) if path is not None else None
        self.url = f"memory://{self._path}" if self._path else "memory://"
        self._journal: BinaryIO | None = None
        self._lockfile: BinaryIO | None = None
        self._seq = 0
        self._dirty = False
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
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
            torn = self._replay(path + ".journal", snapshot_seq)
            self._journal = open(path + ".journal", "ab", buffering=0)
            if torn is not None:
                self._drop_torn_tail(torn)
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
        except StoreCorruptError:
            raise
        except Exception as exc:
            raise StoreCorruptError(f"Cannot read snapshot {path!r}: {exc}", url=self.url) from exc
        self._t.load(data)
        self._seq = int(data.get("seq", 0))
        return self._seq

    def _replay(self, journal: str, after: int) -> int | None:
        """Apply the journal's complete lines past *after*; return where a torn tail starts."""
        try:
            fh = open(journal, "rb")
        except FileNotFoundError:
            return None
        with fh:
            data = fh.read()
        return self._replay_lines(journal, data, after)

    def _replay_lines(self, journal: str, data: bytes, after: int) -> int | None:
        lines = data.split(b"\n")
        # The last element is b"" after a complete final line; anything else there is a line
        # cut short by a crash before its write returned: it was never acknowledged.
        for lineno, line in enumerate(lines[:-1], 1):
            try:
                seq, ops = json.loads(line)
            except (ValueError, TypeError) as exc:
                raise StoreCorruptError(
                    f"Journal {journal!r} line {lineno} is unreadable: {exc}", url=self.url
                ) from exc
            if seq <= after:
                continue
            for op in ops:
                self._t.apply(op)
            self._seq = seq
        if lines[-1]:
            if not _JOURNAL_LINE.match(lines[-1]):  # not the start of one of our lines
                raise StoreCorruptError(
                    f"{journal!r} is not an nshash memory journal", url=self.url
                )
            return len(data) - len(lines[-1])
        return None

    def _drop_torn_tail(self, size: int) -> None:
        """Cut a line torn by a crash off the journal, so the next line starts cleanly."""
        assert self._journal is not None
        try:
            self._journal.truncate(size)
            os.fsync(self._journal.fileno())
        except OSError as exc:
            raise StoreError(f"Cannot repair the journal: {exc}", url=self.url) from exc

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
        size = journal.tell()
        if size > JOURNAL_MIN_BYTES and size > JOURNAL_SHARE * self._snapshot_bytes:
            self._write_snapshot()

    def _write_journal(self) -> None:
        log = self._t.log
        if self._journal is None or not log:
            return
        self._seq += 1
        line = json.dumps([self._seq, log], separators=(",", ":")).encode() + b"\n"
        self._t.log = []
        try:
            self._journal.write(line)
            if self._fsync == "always":
                os.fsync(self._journal.fileno())
            else:
                self._dirty = True
        except OSError as exc:
            raise StoreError(f"Cannot write the journal: {exc}", url=self.url) from exc

    def _flush_loop(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._dirty and self._journal is not None:
                    try:
                        os.fsync(self._journal.fileno())
                    except OSError:
                        continue
                    self._dirty = False

    def _write_snapshot(self) -> None:
        assert self._path is not None
        data = self._t.dump()
        data["seq"] = self._seq

        def write(fh: BinaryIO) -> None:
            pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)

        replace_snapshot(self._path, write, self._journal, self.url)
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
            result = assign(self._t, doc, policy, doc_id, title)
            self._write_journal()
            self._maybe_compact()
            return result

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        with self._lock:
            self._check()
            return lookup(self._t, doc, policy)

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
        self._check()

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
                    os.fsync(self._journal.fileno())
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
