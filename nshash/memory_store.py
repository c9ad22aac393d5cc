"""MemoryStore: the embedded default, dicts in this process, optionally durable on disk.

Without a path the tables live only as long as the process. With a path, every change is
journaled before the call that made it returns, so a killed process loses nothing it had
acknowledged:

* ``PATH.journal`` gets one JSON line per document: a sequence number and the table changes
  it made. JSON cannot run code when read back. The ``fsync`` policy decides when the line
  reaches the disk itself: ``always`` (before returning), ``everysec`` (a background flush
  about once a second, the default) or ``no`` (when the OS decides). Every policy survives a
  killed process, since each line is handed to the OS before the call returns.
* ``PATH`` is a snapshot of all tables, written on :meth:`MemoryStore.save`, on
  :meth:`~MemoryStore.close` and after replaying a journal on open: pickled to ``PATH.tmp``,
  fsynced, then renamed over ``PATH``. It is read back with an unpickler that admits only
  plain containers, numbers and strings, so a tampered snapshot cannot run code; still,
  load only snapshots you wrote. The snapshot records the last journal sequence number it
  includes, so a crash between the rename and the journal truncation replays nothing twice.
* ``PATH.lock`` is held with ``flock`` while the store is open: a second opener gets
  :class:`~nshash.StoreLockedError` instead of two writers corrupting one journal.
"""

from __future__ import annotations

import heapq
import json
import os
import pickle
import threading
from collections.abc import Iterable
from typing import Any, BinaryIO

from .assign import MatchPolicy, assign, combine_sketch, explain, lookup, resolve
from .durable import lock_path, replace_snapshot
from .errors import ConfigError, StoreClosedError, StoreCorruptError, StoreError
from .fingerprint import NO_LIMIT, DocPrint
from .results import Assignment, DocumentRecord, Explanation, Group, Member, StoreStats
from .store import FSYNC_POLICIES, Store

__all__ = ["MemoryStore"]

#: 2: shingle anchors, sketch limits and votes (the first release's format 1 cannot be read:
#: its anchors were whole sentences, so its groups would never match again).
_SNAPSHOT_FORMAT = 2


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

    def set_votes(self, h: int, gids: tuple[int, ...]) -> None:
        if gids:
            self.votes[h] = tuple(gids)
        else:
            self.votes.pop(h, None)
        if self.log is not None:
            self.log.append(["v", h, list(gids)])

    def _set_sketch(self, gid: int, sketch: set[int], limit: int) -> None:
        self.sketch[gid] = sketch
        if limit < NO_LIMIT:
            self.limit[gid] = limit
        else:
            self.limit.pop(gid, None)

    def new_group(self, sketch: Iterable[int], limit: int) -> int:
        gid = self.counter = self.counter + 1
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
        elif kind == "v":
            self.set_votes(args[0], tuple(args[1]))
        elif kind == "n":
            self.counter = args[0] - 1
            self.new_group(args[1], args[2])
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
        if not isinstance(data, dict) or data.get("format") != _SNAPSHOT_FORMAT:
            raise StoreCorruptError(
                f"The snapshot is not an nshash memory snapshot (format {_SNAPSHOT_FORMAT})"
            )
        try:
            self.fp, self.exact, self.common = data["fp"], data["exact"], data["common"]
            self.parent, self.sketch, self.size = data["parent"], data["sketch"], data["size"]
            self.votes, self.limit = data["votes"], data["limit"]
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

    Raises:
        StoreLockedError: another process has *path* open.
        StoreCorruptError: the snapshot or journal cannot be read safely.

    Example:
        >>> store = MemoryStore()
        >>> store.stats().groups
        0
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, fsync: str = "everysec") -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
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
        if self._path is not None:
            self._open_files(self._path)

    # -- durability --------------------------------------------------------------------
    def _open_files(self, path: str) -> None:
        self._lockfile = lock_path(path, "memory store", self.url)
        try:
            snapshot_seq = self._load_snapshot(path)
            replayed = self._replay(path + ".journal", snapshot_seq)
            self._journal = open(path + ".journal", "ab", buffering=0)
            if replayed:
                self._write_snapshot()
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

    def _replay(self, journal: str, after: int) -> int:
        try:
            fh = open(journal, "rb")
        except FileNotFoundError:
            return 0
        replayed = 0
        with fh:
            lines = fh.read().split(b"\n")
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
            replayed += 1
        if lines[-1]:
            replayed += 1  # force a compaction, which drops the torn tail
        return replayed

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

    def save(self) -> None:
        """Write a snapshot now and empty the journal (no-op without a path)."""
        with self._lock:
            self._check()
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

    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        with self._lock:
            self._check()
            result = assign(self._t, doc, policy, doc_id, title)
            self._write_journal()
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
        self._check()

    def close(self) -> None:
        """Snapshot (with a path), release the files; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._path is not None and self._journal is not None:
                    self._write_snapshot()
            finally:
                self._closed = True
                self._release()
        if self._flusher is not None:
            self._flusher.join(timeout=2)
