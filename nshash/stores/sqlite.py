"""The SQLite backend of every method: one file through the standard library's ``sqlite3``.

``sqlite:///path/to/news.db`` keeps a method's tables in one table of ``(key, value)`` blobs
(``WITHOUT ROWID``, so a range of keys is a range of the primary key's b-tree, in the byte
order LevelDB keeps too). It needs nothing installed, and it is the proof that a new backend
is one module: :class:`SQLiteKV` implements :class:`~nshash.stores.kv.OrderedKV`, and every
method's tables run on it unchanged.

**One writer.** ``PATH.lock`` and the database file itself are held with ``flock`` while
the store is open for writing: a second opener gets :class:`~nshash.StoreLockedError` (the
tables keep counters in memory between calls, as on LevelDB), even when ``PATH.lock`` was
deleted meanwhile (SQLite's own locks are ``fcntl`` locks, which ``flock`` leaves alone).
The file is in WAL mode, so readers never block the writer.

**Durability.** Each batch is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``): all of it
or none, even on a full disk (SQLite rolls the transaction back). A committed transaction
is in the write-ahead log before :meth:`SQLiteKV.write` returns, so a killed process loses
nothing it acknowledged. ``fsync=always`` syncs the log on every commit
(``synchronous=FULL``); ``everysec`` (the default) lets SQLite sync at checkpoints
(``synchronous=NORMAL``) and a background thread fsyncs the log within about a second of a
commit; ``no`` leaves it to the operating system (``synchronous=OFF``).

**Read-only opens** take no lock and write nothing. While a writer has the file open (its
``PATH-wal`` exists) the reader opens it read-only and reads in one transaction begun at the
open: a consistent view of every write acknowledged before it. With no writer, SQLite would
create the ``-wal`` and ``-shm`` companions even for a read-only open, so the reader copies
the file into a temporary directory and reads the copy (removed on close).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from ..errors import (
    ConfigError,
    StoreCorruptError,
    StoreError,
    StoreNotFoundError,
    StoreReadOnlyError,
)
from .durable import lock_path, probe_writable, start_flusher
from .kv import OrderedKV, namespace, prefix_end
from .url import FSYNC_POLICIES

__all__ = ["SQLiteKV"]

logger = logging.getLogger("nshash")

#: ``PRAGMA synchronous`` for each fsync policy (WAL mode).
_SYNCHRONOUS = {"always": "FULL", "everysec": "NORMAL", "no": "OFF"}

#: Attempts at copying a file no writer holds (a writer that starts mid-copy spoils one).
_COPY_ATTEMPTS = 20


#: How a backend error is introduced when the caller names no operation.
_FAILED = "SQLite failed in"


class SQLiteKV(OrderedKV):
    """A method's :class:`~nshash.stores.kv.OrderedKV` in a SQLite file, its keys under the
    method's :func:`~nshash.stores.kv.namespace` (see the module docstring).

    Args:
        path: the database file; created when missing (unless *readonly*).
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``.
        method: whose tables (``"nshash"``, ``"keyed"``, ``"simhash"``).
        readonly: read a consistent view as of the open, locking and writing nothing.
        repair: check the file's integrity first (SQLite repairs a torn transaction by
            itself on open; a damaged file is refused with :class:`~nshash.StoreCorruptError`).

    Raises:
        ConfigError: *fsync* is not a known policy, or *repair* with *readonly*.
        StoreLockedError: another process (or store) has *path* open for writing.
        StoreNotFoundError: *readonly* and there is no such file.
        StoreCorruptError: *path* is not a SQLite database, or a damaged one.
        StoreError: it cannot be opened for another reason.
    """

    kind = "SQLite"
    url_form = "a file: 'sqlite:///path/to/news.db'"

    def __init__(
        self,
        path: str,
        fsync: str = "everysec",
        method: str = "nshash",
        *,
        readonly: bool = False,
        repair: bool = False,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r}")
        self.path = path
        self.url = f"sqlite://{path}"
        if repair and readonly:
            raise ConfigError(f"{self.url} cannot be repaired through a read-only open")
        self.readonly = readonly
        self._prefix = namespace(method)
        self._fsync = fsync
        self._lock = threading.RLock()
        self._lockfile: Any = None
        self._copy: str | None = None
        self._dirty = False
        #: Why the last write failed (a full disk...), until a write or a probe succeeds.
        self.write_error: str | None = None
        self._closed = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if readonly:
            self._db = self._open_reader()
        else:
            # The database file itself is locked too: PATH.lock alone can be deleted.
            self._lockfile = lock_path(path, "SQLite store", self.url, also=path)
            try:
                self._db = self._open_writer(repair)
            except BaseException:
                self._lockfile.close()
                raise
        if fsync == "everysec" and not readonly:
            self._flusher = start_flusher(self, self._stop, "nshash-sqlite-fsync")

    @staticmethod
    def names_place(path: str) -> bool:
        return bool(path) and not path.endswith("/")

    # -- opening -------------------------------------------------------------------------
    def _connect(self, target: str, uri: bool = False) -> sqlite3.Connection:
        db = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 5000")
        return db

    def _failed_open(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            return StoreCorruptError(f"SQLite file {self.path!r} is damaged: {text}", url=self.url)
        return StoreError(f"Cannot open SQLite file {self.path!r}: {text}", url=self.url)

    def _open_writer(self, repair: bool) -> sqlite3.Connection:
        try:
            db = self._connect(self.path)
        except sqlite3.Error as exc:
            raise self._failed_open(exc) from exc
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            if tables - {"kv"}:
                raise StoreCorruptError(
                    f"SQLite file {self.path!r} holds data that is not an nshash store"
                    f" (tables {sorted(tables)})",
                    url=self.url,
                )
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[self._fsync]}")
            db.execute(
                "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID"
            )
            if repair:
                found = db.execute("PRAGMA integrity_check").fetchone()[0]
                if found != "ok":
                    raise StoreCorruptError(
                        f"SQLite file {self.path!r} is damaged beyond what a reopen repairs:"
                        f" {found}",
                        url=self.url,
                    )
        except sqlite3.Error as exc:
            db.close()
            raise self._failed_open(exc) from exc
        except BaseException:
            db.close()
            raise
        return db

    def _open_reader(self) -> sqlite3.Connection:
        if not os.path.isfile(self.path):
            raise StoreNotFoundError(
                f"There is no SQLite store at {self.path!r} (reading never creates one)",
                url=self.url,
            )
        target = self.path
        if not os.path.exists(self.path + "-wal"):
            target = self._copy_file()
        try:
            db = self._connect(f"file:{quote(target)}?mode=ro", uri=True)
            db.execute("BEGIN")
            # The first read fixes the transaction's view of the file.
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            self._drop_copy()
            raise self._failed_open(exc) from exc
        return db

    def _copy_file(self) -> str:
        """Copy the database no writer holds into a temporary directory; return the copy."""
        self._copy = tempfile.mkdtemp(prefix="nshash-sqlite-ro-")
        copy = os.path.join(self._copy, "store.db")
        for _attempt in range(_COPY_ATTEMPTS):
            try:
                before = os.stat(self.path)
                shutil.copyfile(self.path, copy)
                after = os.stat(self.path)
            except OSError as exc:
                self._drop_copy()
                raise StoreError(f"Cannot read SQLite file {self.path!r}: {exc}") from exc
            unchanged = (before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size)
            if unchanged and not os.path.exists(self.path + "-wal"):
                return copy
            time.sleep(0.01)
        self._drop_copy()
        raise StoreError(
            f"Cannot copy SQLite file {self.path!r}: it kept changing while it was read",
            url=self.url,
        )

    def _drop_copy(self) -> None:
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)
            self._copy = None

    # -- reading -------------------------------------------------------------------------
    @contextlib.contextmanager
    def errors(self, doing: str = _FAILED) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._failure(exc, doing) from exc

    def _failure(self, exc: Exception, doing: str = _FAILED) -> StoreError:
        return StoreError(f"{doing} {self.path!r}: {exc}", url=self.url)

    def get(self, key: bytes) -> bytes | None:
        # A try, not the errors() context: the most frequent call (see LevelKV.get).
        try:
            row = self._db.execute("SELECT v FROM kv WHERE k = ?", (self._prefix + key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc
        return None if row is None else bytes(row[0])

    def items(
        self,
        prefix: bytes = b"",
        *,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        ns = self._prefix
        if prefix:
            start, stop = prefix, prefix_end(prefix)
        low = ns + (start or b"")
        high = ns + stop if stop is not None else prefix_end(ns) if ns else None
        sql = "SELECT k, v FROM kv WHERE k >= ?"
        args: tuple[bytes, ...] = (low,)
        if high is not None:
            sql += " AND k < ?"
            args = (low, high)
        sql += " ORDER BY k DESC" if reverse else " ORDER BY k"
        cut = len(ns)
        with self.errors():
            # Fetched in pages, so the caller may read and write the store between pairs.
            cursor = self._db.execute(sql, args)
            while rows := cursor.fetchmany(256):
                for key, value in rows:
                    yield bytes(key[cut:]), bytes(value)

    # -- writing -------------------------------------------------------------------------
    def write(self, puts: Mapping[bytes, bytes | None], *, sync: bool = False) -> None:
        if self.readonly:
            raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
        if not puts:
            return
        ns = self._prefix
        sets = [(ns + k, v) for k, v in puts.items() if v is not None]
        drops = [(ns + k,) for k, v in puts.items() if v is None]
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    if sets:
                        db.executemany("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", sets)
                    if drops:
                        db.executemany("DELETE FROM kv WHERE k = ?", drops)
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                why = str(exc)
                if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
                    why = f"No space left on device (SQLite: {why})"
                self.write_error = why
                raise StoreError(
                    f"Cannot write to {self.path!r}: {why}; nothing of this call was written",
                    url=self.url,
                ) from exc
            self.write_error = None
            if self._fsync == "always":
                pass  # synchronous=FULL synced the log in the commit
            elif sync:
                self._sync_log()
            elif self._fsync == "everysec":
                self._dirty = True

    def _sync_log(self) -> None:
        """fsync the write-ahead log (what ``synchronous=FULL`` does at every commit)."""
        self._dirty = False
        try:
            fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # checkpointed into the file, which SQLite synced
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def check_writes(self) -> None:
        """Raise StoreError while writes fail: the last one failed and the disk under the
        file still refuses a probe write (SQLite rolled it back whole, so nothing needs
        repair: the next write is simply tried)."""
        failure = self.write_error
        if failure is not None:
            probe_writable(self.path, failure, self.url)
            self.write_error = None

    def flush_pending(self) -> None:
        """Sync a commit left unsynced by the ``everysec`` policy (the flusher's job)."""
        with self._lock:
            if self._closed or not self._dirty:
                return
            try:
                self._sync_log()
            except OSError as exc:
                logger.error("Cannot sync %r: %s", self.path, exc)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            try:
                if self._dirty:
                    self._sync_log()
            except OSError as exc:
                raise StoreError(f"Cannot sync {self.path!r}: {exc}", url=self.url) from exc
            finally:
                with contextlib.suppress(sqlite3.Error):
                    self._db.close()
                self._drop_copy()
                if self._lockfile is not None:
                    self._lockfile.close()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
