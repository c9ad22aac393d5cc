"""A document's record packed in one bytes object: how the memory store and the LevelDB and
SQLite stores keep what :meth:`~nshash.Store.document` answers.

Packed, a record with 13 anchors takes 121 bytes, where the JSON text of the same fields took
about 340 (its anchors in decimal) and a Python tuple of them about 260 more in objects the
garbage collector walks. The compiled assignment (``_assign.c``) writes the same layout.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = [
    "DUPLICATE",
    "EVIDENCE",
    "HEAD",
    "TITLED",
    "VERDICTS",
    "pack_record",
    "unpack_full",
    "unpack_record",
    "verdict_code",
]

#: A document record (doc id -> the answer given for it), packed in one bytes object: the
#: group id (8 bytes), flags (1: a duplicate, 2: titled, 4: with evidence), the number of
#: anchors and of merged ids (4 bytes each), then the anchors and the merged ids (8 bytes
#: each), the evidence (:data:`EVIDENCE_PART`) and the title in UTF-8; little-endian. A tuple
#: of the five fields with its int and bytes took ~140 bytes more, in objects the garbage
#: collector walks. The compiled assignment writes the same. Records written before evidence
#: was kept have no flag 4 and load with no score and no verdict.
HEAD = struct.Struct("<QBII")
DUPLICATE, TITLED, EVIDENCE = 1, 2, 4
#: The evidence a placement leaves with a record: the score (a double) and the verdict's code
#: (one byte, an index into :data:`VERDICTS`).
EVIDENCE_PART = struct.Struct("<dB")

#: A placement's verdicts, by code (0: unknown). ``new story``: no story was found through the
#: document's anchors; ``refused``: the guard refused every story found (the score is the
#: best refused one), so it started a story of its own; ``identical``: the same letters and
#: digits were added before (score 1); ``joined``: it joined the story it matched best (its
#: score against it); ``merged``: it joined a story and merged others into it; ``moved``: an
#: editor's correction put it where it is (a detach, or the side a detach decided).
VERDICTS = ("", "new story", "refused", "identical", "joined", "merged", "moved")


def verdict_code(verdict: str | None) -> int:
    """The code of *verdict* in :data:`VERDICTS` (0 for None or one unknown)."""
    try:
        return VERDICTS.index(verdict or "")
    except ValueError:
        return 0


def pack_record(
    gid: int,
    duplicate: bool,
    merged: Sequence[int],
    title: str | None,
    anchors: Sequence[int],
    score: float | None = None,
    verdict: str | None = None,
) -> bytes:
    """One document record as the stores keep it (see :data:`HEAD`); the evidence part is
    written when a *score* is given."""
    flags = DUPLICATE * bool(duplicate) | TITLED * (title is not None)
    flags |= EVIDENCE * (score is not None)
    head = HEAD.pack(gid, flags, len(anchors), len(merged))
    body = struct.pack(f"<{len(anchors) + len(merged)}Q", *anchors, *merged)
    if score is not None:
        body += EVIDENCE_PART.pack(score, verdict_code(verdict))
    return head + body + (b"" if title is None else title.encode("utf-8", "surrogatepass"))


def unpack_record(
    rec: bytes,
) -> tuple[int, bool, tuple[int, ...], str | None, tuple[int, ...]]:
    """(group, duplicate, merged from, title, anchors) of a :func:`pack_record` record.

    Raises:
        ValueError: *rec* is not one.
    """
    gid, duplicate, merged, title, anchors, _score, _verdict = unpack_full(rec)
    return gid, duplicate, merged, title, anchors


def unpack_full(
    rec: bytes,
) -> tuple[int, bool, tuple[int, ...], str | None, tuple[int, ...], float | None, str | None]:
    """:func:`unpack_record`'s fields, then the score and verdict (None in a record written
    before evidence was kept).

    Raises:
        ValueError: *rec* is not a record.
    """
    try:
        gid, flags, anchors, merged = HEAD.unpack_from(rec)
        end = HEAD.size + 8 * (anchors + merged)
        values = struct.unpack_from(f"<{anchors + merged}Q", rec, HEAD.size)
        score: float | None = None
        verdict: str | None = None
        if flags & EVIDENCE:
            score, code = EVIDENCE_PART.unpack_from(rec, end)
            end += EVIDENCE_PART.size
            verdict = VERDICTS[code] if code < len(VERDICTS) else ""
    except struct.error as exc:
        raise ValueError(f"a document record is torn: {exc}") from None
    if flags & ~(DUPLICATE | TITLED | EVIDENCE) or (len(rec) != end and not flags & TITLED):
        raise ValueError("a document record is torn")
    title = rec[end:].decode("utf-8", "surrogatepass") if flags & TITLED else None
    return gid, bool(flags & DUPLICATE), values[anchors:], title, values[:anchors], score, verdict
