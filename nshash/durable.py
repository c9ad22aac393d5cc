"""Writing files so that a crash never leaves half of one: the snapshot half of the file stores."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

from .errors import StoreError

__all__ = ["replace_snapshot"]


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
