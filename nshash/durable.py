"""The file half of the file stores: one opener per path, and snapshots a crash cannot tear."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from typing import BinaryIO

from .errors import StoreError, StoreLockedError

__all__ = ["lock_path", "replace_snapshot"]


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


def replace_snapshot(
    path: str,
    write: Callable[[BinaryIO], None],
    journal: BinaryIO | None,
    url: str,
) -> None:
    """Write a snapshot to *path* atomically, then empty the journal it makes redundant.

    The content goes to ``path + ".tmp"``, is fsynced and renamed over *path*, and the directory
    is fsynced, so a crash leaves either the old snapshot or the new one, never a mix. Only then
    is the journal (the open handle, or ``path + ".journal"``) truncated and fsynced.

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
        if journal is not None:
            journal.truncate(0)
            os.fsync(journal.fileno())
        else:
            with open(path + ".journal", "wb") as jf:
                os.fsync(jf.fileno())
    except OSError as exc:
        raise StoreError(f"Cannot write snapshot {path!r}: {exc}", url=url) from exc
