"""A document's record packed in one bytes object: how the memory store and the LevelDB and
SQLite stores keep what :meth:`~nshash.Store.document` answers.

Packed, a record with 13 anchors takes 121 bytes, where the JSON text of the same fields took
about 340 (its anchors in decimal) and a Python tuple of them about 260 more in objects the
garbage collector walks. The compiled assignment (``_assign.c``) writes the same layout.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["DUPLICATE", "HEAD", "TITLED", "pack_record", "unpack_record"]

#: A document record (doc id -> the answer given for it), packed in one bytes object: the
#: group id (8 bytes), flags (1: a duplicate, 2: titled), the number of anchors and of merged
#: ids (4 bytes each), then the anchors and the merged ids (8 bytes each) and the title in
#: UTF-8; little-endian. A tuple of the five fields with its int and bytes took ~140 bytes
#: more, in objects the garbage collector walks. The compiled assignment writes the same.
HEAD = struct.Struct("<QBII")
DUPLICATE, TITLED = 1, 2


def pack_record(
    gid: int, duplicate: bool, merged: Sequence[int], title: str | None, anchors: Sequence[int]
) -> bytes:
    """One document record as the stores keep it (see :data:`HEAD`)."""
    flags = DUPLICATE * bool(duplicate) | TITLED * (title is not None)
    head = HEAD.pack(gid, flags, len(anchors), len(merged))
    body = struct.pack(f"<{len(anchors) + len(merged)}Q", *anchors, *merged)
    return head + body + (b"" if title is None else title.encode("utf-8", "surrogatepass"))


def unpack_record(
    rec: bytes,
) -> tuple[int, bool, tuple[int, ...], str | None, tuple[int, ...]]:
    """(group, duplicate, merged from, title, anchors) of a :func:`pack_record` record.

    Raises:
        ValueError: *rec* is not one.
    """
    try:
        gid, flags, anchors, merged = HEAD.unpack_from(rec)
        end = HEAD.size + 8 * (anchors + merged)
        values = struct.unpack_from(f"<{anchors + merged}Q", rec, HEAD.size)
    except struct.error as exc:
        raise ValueError(f"a document record is torn: {exc}") from None
    if flags & ~(DUPLICATE | TITLED) or (len(rec) != end and not flags & TITLED):
        raise ValueError("a document record is torn")
    title = rec[end:].decode("utf-8", "surrogatepass") if flags & TITLED else None
    return gid, bool(flags & DUPLICATE), values[anchors:], title, values[:anchors]
