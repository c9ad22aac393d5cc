"""The LevelDB backend of every method: a directory through plyvel, opened once.

:class:`LevelDB` is what the LevelDB store of each method stands on: it opens the directory
(a second opener gets :class:`~nshash.StoreLockedError`, a damaged one
:class:`~nshash.StoreCorruptError`), takes a *checkpoint* for a read-only open, repairs on
request, writes each change as one ``write_batch(transaction=True)`` under the ``fsync``
policy (a background thread syncs an ``everysec`` write within about a second), and after a
failed write refuses writes until the owner has reopened and verified the directory.
:class:`LevelKV` puts the :class:`~nshash.stores.kv.KV` of the keyed and simhash methods on it.

**Read-only opens** never open the directory itself: LevelDB admits one opener and writes to
any directory it opens (its info log, a new manifest). The checkpoint is a copy of the
directory's files in a temporary directory (immutable table files are hard-linked when the
file system allows, the manifest and write-ahead logs are copied), opened and deleted on
close. It holds every write the writer acknowledged before the open; a torn last log record
(a write in flight) is dropped as LevelDB drops it after a crash. When the writer creates or
deletes files (a compaction) during the copy, the copy is taken again.

**Durability.** Every batch is in LevelDB's log before :meth:`LevelDB.write` returns, so a
killed process loses nothing it acknowledged. ``always`` syncs every write; ``everysec`` (the
default) syncs a write when a second has passed since the last synced one, and the flusher
(or :meth:`~LevelDB.close`) syncs a pending one within about a second; ``no`` never syncs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import plyvel

from ..errors import (
    ConfigError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from .durable import start_flusher
from .kv import OrderedKV, namespace, prefix_end
from .url import FSYNC_POLICIES

__all__ = ["LevelDB", "LevelKV", "checkpoint"]

logger = logging.getLogger("nshash")


#: Attempts to copy a directory that a writer is not compacting at that very moment.
CHECKPOINT_ATTEMPTS = 50

#: The ``plyvel.DB`` options every open uses (open-time settings: a directory written with
#: other ones, or with LevelDB's defaults, opens as before; tables written earlier simply
#: have no filter). A bloom filter of 10 bits a key (~1 % false positives) spares a ``get``
#: of a missing key, most of the store's reads, the table blocks it would read; a 64 MB
#: block cache (LevelDB's default: 8 MB) keeps the hot blocks of a large directory; a
#: 16 MB write buffer (default 4 MB) makes fewer, larger level-0 tables, so less compaction.
#: Paranoid checks make a damaged record in the log or a table an error at open
#: (:class:`~nshash.StoreCorruptError`) where LevelDB would skip it and lose the documents
#: it held; a record torn at the log's end by a crash is still dropped as never written.
OPEN_OPTIONS: dict[str, int | bool] = {
    "paranoid_checks": True,
    "bloom_filter_bits": 10,
    "lru_cache_size": 64 * 1024 * 1024,
    "write_buffer_size": 16 * 1024 * 1024,
}


def _db_files(path: str) -> set[str]:
    """The names of the files LevelDB needs to open *path* (not its LOCK or info logs)."""
    return {
        name
        for name in os.listdir(path)
        if name == "CURRENT"
        or name.startswith("MANIFEST-")
        or name.endswith((".ldb", ".sst", ".log"))
    }


def _order(name: str) -> int:
    # What the copy holds must be at least as new as what the manifest names: the manifest
    # first, then the tables it lists, then the logs (written last, read for the newest writes).
    if name == "CURRENT" or name.startswith("MANIFEST-"):
        return 0
    return 1 if name.endswith((".ldb", ".sst")) else 2


def checkpoint(path: str, into: str) -> None:
    """Copy the LevelDB directory *path* into the empty directory *into*, reading only.

    Safe while a writer has *path* open: the copy is taken again whenever the set of files
    changed while it was being taken. Table files never change once written, so they are
    hard-linked where the file system allows (a link changes no byte of the original).

    Raises:
        StoreNotFoundError: *path* holds no LevelDB database.
        StoreError: no consistent copy could be taken.
    """
    if not os.path.isfile(os.path.join(path, "CURRENT")):
        raise StoreNotFoundError(
            f"There is no LevelDB store at {path!r} (reading never creates one)",
            url=f"leveldb://{path}",
        )
    for _attempt in range(CHECKPOINT_ATTEMPTS):
        try:
            before = _db_files(path)
            for name in sorted(before, key=_order):
                src, dst = os.path.join(path, name), os.path.join(into, name)
                if _order(name) == 1:
                    try:
                        os.link(src, dst)
                        continue
                    except OSError as exc:
                        if isinstance(exc, FileNotFoundError):
                            raise
                shutil.copyfile(src, dst)
            if _db_files(path) == before:
                return
        except FileNotFoundError:
            pass  # a compaction deleted a file under the copy: take it again
        for name in os.listdir(into):
            os.unlink(os.path.join(into, name))
        time.sleep(0.01)
    raise StoreError(
        f"Cannot copy LevelDB directory {path!r}: its files kept changing while they were read",
        url=f"leveldb://{path}",
    )


def reason(exc: Exception) -> str:
    """The text of a plyvel error (plyvel passes LevelDB's status as bytes)."""
    arg = exc.args[0] if exc.args else exc
    return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} KB"


def _not_writable(path: str) -> str:
    """Why a writer cannot open *path*, when the folder it is in says so (LevelDB itself only
    names the LOCK file it failed on), as a clause to add to its message; else ``""``."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    try:
        read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
    except OSError:
        return ""
    if read_only:
        return (
            f" (the file system holding {where!r} is read-only: give a writable path, or add"
            " ?readonly=true to the URL to read the store)"
        )
    if not os.access(where, os.W_OK):
        return f" (this user may not write in {where!r})"
    return ""


def _space_needed(path: str) -> str:
    """Why a full disk stops an open of the LevelDB directory *path*, and what frees it: an
    open first writes the log of the last writes into a table (nothing is lost meanwhile)."""
    try:
        logs = sum(
            os.path.getsize(os.path.join(path, name))
            for name in os.listdir(path)
            if name.endswith(".log")
        )
        st = os.statvfs(path)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    return (
        f" (an open first writes the log of the last writes, {_mb(logs)} here, into a table,"
        f" and the disk has {_mb(free)} free: free at least {_mb(max(logs, 1))} on it and"
        " open again; nothing is lost meanwhile)"
    )


#: How a backend error is introduced when the caller names no operation.
_FAILED = "LevelDB failed in"


class _ClosedDB:
    """Stands for the database while a reopen after a failed write has not succeeded."""

    def __init__(self, why: str) -> None:
        self.reason = why

    def __getattr__(self, name: str) -> Any:
        raise plyvel.IOError(f"the store is not open: {self.reason}".encode())

    def close(self) -> None:
        pass


class LevelDB:
    """A LevelDB directory, opened for one owner (a method's store); see the module docstring.

    Args:
        path: the directory; created when missing (unless *readonly*).
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``.
        sync_key: a key the owner lets this class rewrite (with its own value) to force the
            log to disk when an ``everysec`` write is pending.
        readonly: open a checkpoint (never the directory); writes are the owner's to refuse.
        repair: run LevelDB's repair on *path* first.
        lock: the owner's lock, held around every call (the flusher takes it too).

    Attributes:
        db: the ``plyvel.DB`` (of the checkpoint when *readonly*).
        failed: why writes are refused (a write failed), until :meth:`reopen` succeeds.

    Raises:
        ConfigError: *fsync* is not a known policy, or *repair* with *readonly*.
        StoreLockedError: another process (or another store in this one) holds *path*.
        StoreNotFoundError: *readonly* and *path* holds no LevelDB.
        StoreCorruptError: *path* holds a damaged LevelDB.
        StoreError: the directory cannot be opened for another reason.
    """

    def __init__(
        self,
        path: str,
        fsync: str = "everysec",
        *,
        sync_key: tuple[bytes, bytes],
        readonly: bool = False,
        repair: bool = False,
        lock: threading.Lock | threading.RLock | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.path = path
        self.url = f"leveldb://{path}"
        if repair and readonly:
            raise ConfigError(f"{self.url} cannot be repaired through a read-only open")
        self.readonly = readonly
        self._fsync = fsync
        self._sync_key = sync_key
        self._lock = lock if lock is not None else threading.Lock()
        self._copy: str | None = None
        self._dirty = False
        self._last_sync = 0.0
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self.failed: str | None = None
        self._next_recovery = 0.0
        self._closed = False
        self.db: Any
        #: With *repair*: the damage LevelDB's repair rebuilt the directory from, or None.
        self.repaired: str | None = None
        if readonly:
            self.db = self._open_copy(path)
        else:
            if repair:
                self._repair_files()
            self.db = self._open(path)
        if fsync == "everysec" and not readonly:
            self._flusher = start_flusher(self, self._stop, "nshash-leveldb-fsync")

    # -- opening -------------------------------------------------------------------------
    def _repair_files(self) -> None:
        if os.path.isdir(self.path):
            try:  # what an open finds (paranoid: a damaged record is an error), said after
                self._open(self.path).close()
            except StoreCorruptError as exc:
                self.repaired = f"LevelDB rebuilt its tables from what it could read ({exc})"
        try:
            plyvel.repair_db(self.path)
        except (plyvel.Error, OSError) as exc:
            raise StoreError(
                f"Cannot repair LevelDB directory {self.path!r}: {reason(exc)}", url=self.url
            ) from exc

    def _open(self, path: str) -> plyvel.DB:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            return plyvel.DB(path, create_if_missing=True, **OPEN_OPTIONS)
        except plyvel.IOError as exc:
            # LevelDB says "IO error: lock DIR/LOCK: ..." when the lock is taken; other
            # failures may name the LOCK file too ("IO error: DIR/LOCK: Not a directory").
            if not reason(exc).startswith("IO error: lock "):
                raise self._open_failed(exc) from exc
            raise StoreLockedError(
                f"LevelDB directory {path!r} is already open in another process or store "
                "(LevelDB admits one opener; share state between processes through Redis)",
                url=self.url,
            ) from exc
        except plyvel.CorruptionError as exc:
            raise StoreCorruptError(
                f"LevelDB directory {path!r} is damaged: {reason(exc)}", url=self.url
            ) from exc
        except (plyvel.Error, OSError) as exc:
            raise self._open_failed(exc) from exc

    def _open_copy(self, path: str) -> plyvel.DB:
        """Open a checkpoint of *path* (a read-only store's view; see the module docstring)."""
        self._copy = tempfile.mkdtemp(prefix="nshash-leveldb-ro-")
        try:
            checkpoint(path, self._copy)
            return plyvel.DB(self._copy, create_if_missing=False, **OPEN_OPTIONS)
        except plyvel.CorruptionError as exc:
            self._drop_copy()
            raise StoreCorruptError(
                f"LevelDB directory {path!r} is damaged: {reason(exc)}", url=self.url
            ) from exc
        except (plyvel.Error, OSError) as exc:
            self._drop_copy()
            raise self._open_failed(exc) from exc
        except BaseException:
            self._drop_copy()
            raise

    def _drop_copy(self) -> None:
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)
            self._copy = None

    def _open_failed(self, exc: Exception) -> StoreError:
        text = reason(exc)
        if "No space left on device" in text or getattr(exc, "errno", None) == errno.ENOSPC:
            text += _space_needed(self.path)
        else:
            text += _not_writable(self.path)
        return StoreError(f"Cannot open LevelDB directory {self.path!r}: {text}", url=self.url)

    def reopen(self) -> None:
        """Close and open the directory again (after a failed write, by the owner's recovery).

        Raises:
            StoreError: it cannot be opened; :attr:`db` then refuses every call.
        """
        try:
            self.db.close()
        except plyvel.Error:
            pass
        try:
            self.db = self._open(self.path)
        except StoreError as exc:
            self.db = _ClosedDB(str(exc))
            raise

    def recovery_due(self) -> bool:
        """Whether a failed host should try :meth:`reopen` now (at most once a second)."""
        now = time.monotonic()
        if self.failed is None or now < self._next_recovery:
            return False
        self._next_recovery = now + 1.0
        return True

    def recovered(self) -> None:
        """The owner reopened and verified the directory: writes are accepted again."""
        logger.warning("LevelDB directory %r reopened and verified after a write failed", self.path)
        self.failed = None
        self._dirty = False

    # -- writing -------------------------------------------------------------------------
    @contextlib.contextmanager
    def errors(self, doing: str = _FAILED) -> Iterator[None]:
        """plyvel's errors as :class:`~nshash.StoreError` naming the directory."""
        try:
            yield
        except plyvel.Error as exc:
            raise self.failure(exc, doing) from exc

    def failure(self, exc: Exception, doing: str = _FAILED) -> StoreError:
        """The :class:`~nshash.StoreError` for plyvel's *exc* (what :meth:`errors` raises)."""
        return StoreError(f"{doing} {self.path!r}: {reason(exc)}", url=self.url)

    def write(self, puts: Mapping[bytes, bytes | None], sync: bool = False) -> None:
        """Write *puts* (None deletes) in one transactional batch, synced per the policy (and
        whatever the policy when *sync*).

        Raises:
            StoreError: the batch failed: nothing of it was written, and writes are refused
                from now on until the owner reopens the directory (see :meth:`reopen`).
        """
        if self.failed is not None:
            raise StoreError(
                f"The store refuses writes until it is reopened and verified: {self.failed}",
                url=self.url,
            )
        if not puts:
            return
        now = time.monotonic()
        sync = (
            sync
            or self._fsync == "always"
            or (self._fsync == "everysec" and now - self._last_sync >= 1.0)
        )
        try:
            batch = self.db.write_batch(transaction=True, sync=sync)
            for key, value in puts.items():
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
            batch.write()
        except plyvel.Error as exc:
            self.fail(f"Cannot write to {self.path!r}: {reason(exc)}")
            raise StoreError(
                f"Cannot write to {self.path!r}: {reason(exc)}; nothing of this call was"
                " written, and the store refuses writes until it is reopened",
                url=self.url,
            ) from exc
        if sync:
            self._last_sync = now
            self._dirty = False
        elif self._fsync == "everysec":
            self._dirty = True

    def fail(self, why: str) -> None:
        """Refuse writes from now on: after a failed write LevelDB's log may hold half a
        record, and writes after it could be dropped on the next open."""
        if self.failed is None:
            self.failed = why
            self._next_recovery = time.monotonic() + 1.0

    def _sync_now(self) -> None:
        """Force LevelDB's log to disk with a small synced write; the caller holds the lock."""
        self.db.put(*self._sync_key, sync=True)
        self._last_sync = time.monotonic()
        self._dirty = False

    def flush_pending(self) -> None:
        """Sync a write left unsynced by the ``everysec`` policy (the flusher thread's job)."""
        with self._lock:
            if self._closed or not self._dirty or self.failed is not None:
                return
            try:
                self._sync_now()
            except plyvel.Error as exc:
                self.fail(f"Cannot sync {self.path!r}: {reason(exc)}")

    def close(self) -> None:
        """Sync a pending write and release the directory (the caller holds the lock).

        Raises:
            StoreError: the pending write could not be synced (the directory is released).
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            if self._dirty and self.failed is None:
                self._sync_now()
        except plyvel.Error as exc:
            raise StoreError(f"Cannot sync {self.path!r}: {reason(exc)}", url=self.url) from exc
        finally:
            self.db.close()
            self._drop_copy()

    def join(self) -> None:
        """Wait for the flusher thread to end (after :meth:`close`, without the lock)."""
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)


class LevelKV(OrderedKV):
    """The :class:`~nshash.stores.kv.OrderedKV` of a method in a :class:`LevelDB` directory,
    its keys under the method's :func:`~nshash.stores.kv.namespace`.

    Args:
        path: the directory; created when missing (unless *readonly*).
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``.
        method: whose tables (``"nshash"``, ``"keyed"``, ``"simhash"``).
        readonly: read a checkpoint (see the module docstring), even while a writer holds
            the directory.
        repair: run LevelDB's repair on the directory first.

    Raises:
        See :class:`LevelDB`.
    """

    kind = "LevelDB"
    url_form = "a directory: 'leveldb:///path/to/dir'"

    def __init__(
        self,
        path: str,
        fsync: str = "everysec",
        method: str = "nshash",
        *,
        readonly: bool = False,
        repair: bool = False,
    ) -> None:
        self.url = f"leveldb://{path}"
        self.path = path
        self.readonly = readonly
        self._prefix = namespace(method)
        self._lock = threading.RLock()
        self._host = LevelDB(
            path,
            fsync,
            # Rewritten to force an everysec write to disk: a meta key no table scans.
            sync_key=(self._prefix + b"\x00synced", b"1"),
            readonly=readonly,
            repair=repair,
            lock=self._lock,
        )
        self._view_of: Any = None
        self._view: Any = None
        #: The thread of a compaction :meth:`reclaim` started, if one runs.
        self._compactor: threading.Thread | None = None

    @property
    def db(self) -> Any:
        """The open ``plyvel.DB`` (a checkpoint's when read-only); tests may put a spy or a
        failing disk in its place."""
        return self._host.db

    @db.setter
    def db(self, db: Any) -> None:
        self._host.db = db

    def _ns(self) -> Any:
        """The namespace's view of the database (the database itself for no namespace)."""
        db = self._host.db
        if not self._prefix:
            return db
        if self._view_of is not db:
            self._view_of, self._view = db, db.prefixed_db(self._prefix)
        return self._view

    @property
    def repaired(self) -> str | None:
        """With ``repair``: the damage LevelDB's repair rebuilt the directory from, or None."""
        return self._host.repaired

    @property
    def failed(self) -> str | None:
        """Why writes are refused (a write failed), until the directory is reopened."""
        return self._host.failed

    @failed.setter
    def failed(self, why: str | None) -> None:
        self._host.failed = why

    def errors(self, doing: str = _FAILED) -> contextlib.AbstractContextManager[None]:
        return self._host.errors(doing)

    def get(self, key: bytes) -> bytes | None:
        # A try, not the errors() context: the most frequent call (a context manager made of
        # a generator costs more than LevelDB's own lookup of a missing key).
        try:
            value: bytes | None = self._ns().get(key)
        except plyvel.Error as exc:
            raise self._host.failure(exc) from exc
        return value

    def write(self, puts: Mapping[bytes, bytes | None], *, sync: bool = False) -> None:
        if self.readonly:
            raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
        with self._lock:
            prefix = self._prefix
            self._host.write({prefix + k: v for k, v in puts.items()} if prefix else puts, sync)

    def items(
        self,
        prefix: bytes = b"",
        *,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        with self._host.errors():
            if prefix:
                yield from self._ns().iterator(prefix=prefix, reverse=reverse)
            else:
                yield from self._ns().iterator(start=start, stop=stop, reverse=reverse)

    def scan(self, prefix: bytes) -> Iterator[bytes]:
        with self._host.errors():
            yield from self._ns().iterator(prefix=prefix, include_value=False)

    def reclaim(self) -> None:
        """Compact the namespace's keys in a background thread (one at a time), so deleted
        keys give their space back: LevelDB keeps a deletion as a tombstone, and the value
        it hides, until a compaction reaches them. Reads and writes go on meanwhile."""
        with self._lock:
            if self.readonly or self._host.failed is not None:
                return
            if self._compactor is not None and self._compactor.is_alive():
                return
            db = self._host.db
            thread = threading.Thread(
                target=self._compact, args=(db,), name="nshash-leveldb-compact", daemon=True
            )
            self._compactor = thread
            thread.start()

    def _compact(self, db: Any) -> None:
        prefix = self._prefix
        # Bounds always (plyvel passes no bound as an empty key: an empty range); no key of
        # the layouts starts with 0xff, so an empty namespace ends there.
        bounds = {"start": prefix or b"\x00", "stop": prefix_end(prefix) or b"\xff"}
        try:
            # Twice: the first pass writes the memtable out, perhaps straight to a deeper
            # level, which the range compaction of that same call no longer visits; the second
            # pass compacts every level the keys are on, and drops what deletions hide.
            db.compact_range(**bounds)
            db.compact_range(**bounds)
        except Exception as exc:  # a failed compaction loses nothing: the data stays as it was
            logger.warning("Compacting %s failed: %s", self.url, reason(exc))

    def _join_compactor(self) -> None:
        """Wait for a running compaction (before the database it runs on is closed)."""
        thread = self._compactor
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def recovery_due(self) -> bool:
        return self._host.recovery_due()

    def reopen(self) -> None:
        self._join_compactor()
        self._host.reopen()

    def recovered(self) -> None:
        self._host.recovered()

    def close(self) -> None:
        self._join_compactor()
        with self._lock:
            self._host.close()
        self._host.join()
