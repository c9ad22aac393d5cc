"""The file half of the file stores: one opener per path, and snapshots a crash cannot tear."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from typing import BinaryIO, Protocol

from .errors import StoreError, StoreLockedError

__all__ = ["Journal", "lock_path", "probe_writable", "replace_snapshot"]

#: The system calls a journal append makes, looked up at call time so tests can make them
#: fail or come up short (a full disk) without filling one.
_write = os.write
_fsync = os.fsync


class _Truncatable(Protocol):
    def truncate(self, size: int) -> int: ...
    def fileno(self) -> int: ...


class Journal:
    """An append-only file whose every record lands whole or not at all.

    A full disk makes ``write`` come up short or fail with ENOSPC. Then the half record is cut
    off again (``ftruncate`` to the end of the last whole record, which needs no free space),
    so the next record never follows a torn fragment, and the append raises
    :class:`~nshash.StoreError`. Should the cut fail too, the journal refuses every later
    append until it is reopened: the fragment is then its last line, which opening drops.

    Args:
        path: the journal file, created when missing.
        url: the store URL shown in errors.
    """

    def __init__(self, path: str, url: str) -> None:
        self.path = path
        self.url = url
        self._fh = open(path, "ab", buffering=0)
        #: The length of the file up to the end of its last whole record.
        self.end = os.fstat(self._fh.fileno()).st_size
        #: Why appends are refused until the journal is reopened, or None.
        self.broken: str | None = None

    def fileno(self) -> int:
        return self._fh.fileno()

    def append(self, record: bytes, sync: bool) -> None:
        """Append *record* (and fsync it when *sync*); on failure leave the file as it was.

        Raises:
            StoreError: the disk refused the record (full, read-only, I/O error); nothing of
                it stays in the file.
        """
        if self.broken is not None:
            raise StoreError(
                f"The journal refuses writes until the store is reopened: {self.broken}",
                url=self.url,
            )
        fd = self._fh.fileno()
        view = memoryview(record)
        done = 0
        try:
            while done < len(view):
                n = _write(fd, view[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, "No space left on device (a short write)")
                done += n
            if sync:
                _fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, self.end)
            except OSError as cut:
                self.broken = f"a torn record could not be cut off ({cut})"
            else:
                if sync:
                    try:
                        _fsync(fd)
                    except OSError:
                        pass  # the cut is in the page cache; a power cut may undo it
            raise StoreError(f"Cannot write the journal: {exc}", url=self.url) from exc
        self.end += len(record)

    def sync(self) -> None:
        """fsync the journal (raises OSError)."""
        _fsync(self._fh.fileno())

    def truncate(self, size: int) -> int:
        """Cut the journal to *size* bytes (after a snapshot made its records redundant)."""
        os.ftruncate(self._fh.fileno(), size)
        self.end = size
        return size

    def close(self) -> None:
        self._fh.close()


def lock_path(path: str, what: str, url: str) -> BinaryIO:
    """Create *path*'s directory and hold ``path + ".lock"`` (flock) for this process.

    The caller keeps the returned file open for as long as it uses *path*; closing it releases
    the lock (so does the process exiting, however it exits).

    Raises:
        StoreLockedError: another process holds the lock.
        StoreError: the directory or the lock file cannot be created.
    """
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        lockfile = open(path + ".lock", "ab")
    except OSError as exc:
        raise StoreError(f"Cannot open {what} {path!r}: {exc}", url=url) from exc
    try:
        fcntl.flock(lockfile.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        lockfile.close()
        raise StoreLockedError(
            f"{what.capitalize()} {path!r} is open in another process", url=url
        ) from exc
    return lockfile


#: How much a writability probe writes: about what one large journal record needs.
PROBE_BYTES = 64 * 1024


def probe_writable(path: str, failure: str, url: str) -> None:
    """Check that the disk under *path* takes writes again, after *failure*.

    Writes :data:`PROBE_BYTES` to ``path + ".probe"``, fsyncs and removes it.

    Raises:
        StoreError: the probe failed too; the message says so and repeats *failure*.
    """
    probe = path + ".probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            data = memoryview(bytes(PROBE_BYTES))
            done = 0
            while done < len(data):
                n = _write(fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, "No space left on device (a short write)")
                done += n
            _fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreError(f"The store cannot write ({failure}; still: {exc})", url=url) from exc
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


def replace_snapshot(
    path: str,
    write: Callable[[BinaryIO], None],
    journal: _Truncatable | None,
    url: str,
    *,
    keep_journal: bool = False,
) -> None:
    """Write a snapshot to *path* atomically, then empty the journal it makes redundant.

    The content goes to ``path + ".tmp"``, is fsynced and renamed over *path*, and the directory
    is fsynced, so a crash leaves either the old snapshot or the new one, never a mix. Only then
    is the journal (the open handle, or ``path + ".journal"``) truncated and fsynced, unless
    *keep_journal* (a repair moves the damaged journal aside itself).

    Raises:
        StoreError: the disk refused (full, read-only, permissions).
    """
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if keep_journal:
            pass
        elif journal is not None:
            journal.truncate(0)
            os.fsync(journal.fileno())
        else:
            with open(path + ".journal", "wb") as jf:
                os.fsync(jf.fileno())
    except OSError as exc:
        # A half-written temp file only takes space a full disk needs back.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreError(f"Cannot write snapshot {path!r}: {exc}", url=url) from exc
