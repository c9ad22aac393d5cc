"""Editors' corrections of groupings: detach a copy, join two stories, undo either, and the
rule by which a detach decides later placements.

One implementation over :class:`CorrectionTables`, which every nshash store provides: the
memory store and the LevelDB and SQLite stores run these functions on their tables inside the
same atomic step as a placement (a lock and a journal line, a write batch); the Redis store
runs them on a reader that records the writes and then applies them in one generic script
that checks, before writing anything, that what they read still holds (else it reads again).
Every store therefore answers the same.

**Detach** ``(doc)``: the copy leaves its story for a new one of its own (a fresh id from the
counter, an empty sketch), its record says ``moved``, and the correction is kept: the store
remembers that the copy is not that story. The text the copy shares with the story counts as
boilerplate evidence, as a refusal's does: each of its anchors that another copy of the story
(one of the first :data:`RULE_MEMBERS`) holds too is voted to have kept the two stories apart
(:func:`~.assign.vote`), so text shared across several detaches (a series' blurb, a
columnist's bio) becomes common once ``votes`` distinct stories have been kept apart on it,
and no longer finds a story. One detach alone makes nothing common; an undone detach joins
the two stories again, after which its votes count as one story.

**Join** ``(a, b)``: the two stories merge as a placement merges them (the smaller id
survives; :meth:`~nshash.NSHash.resolve` sends the other to it). The correction keeps what the
undo needs: the joined story's sketch and limit, its members and its count of copies sent
without an id, and the surviving story's sketch before.

**The detach rule** (what a later copy does): a copy placed in a story on either side of a
detach that holds (its two stories not joined since) is compared, by its anchors, with the
copies of both sides (the first :data:`RULE_MEMBERS` of each, the detached copy always on
its side): the side holding the copy that shares the most anchors with it wins, and on a tie
it stays where the judge put it. So a later copy of the detached page goes to the detached
page's story even though the judge (whose sketch of the story still holds the detached
page's passages) would put it in the story it was taken from, and a copy of the story stays.
The rule applies to documents sent with an id (the ones a story lists); a copy without one
stays where the judge put it. A moved copy's record says ``moved``.

**Undo**: of a detach, the two stories are joined again (one id survives, as in a join); of a
join, the joined story gets its id back with its sketch, its members of the time that are
still in the surviving story, and its count of copies without an id, and the surviving
story's sketch loses the values only the joined one had (values added since stay). Only a
correction that holds can be undone, and only once.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from ...errors import CorrectionError
from ...results import Correction, DocumentRecord
from ...text.fingerprint import NO_LIMIT
from .assign import resolve

__all__ = [
    "RULE_MEMBERS",
    "CorrectionTables",
    "detach",
    "join",
    "listing",
    "settle",
    "undo",
]

#: The copies of each side of a detach that the rule compares a later copy with (the first
#: ones, in arrival order, and the detached copy).
RULE_MEMBERS = 200


class CorrectionTables(Protocol):
    """The reads and writes corrections need from a store, inside one atomic step."""

    def get_doc(self, doc_id: str) -> DocumentRecord | None: ...
    def get_parent(self, gid: int) -> int | None: ...
    def group_size(self, gid: int) -> int | None:
        """The group's count of documents, or None when it is not a canonical group."""
        ...

    def group_sketch(self, gid: int) -> tuple[Collection[int], int]: ...
    def group_members(self, gid: int, most: int | None = None) -> list[str]:
        """The group's doc ids in arrival order (the first *most*)."""
        ...

    def corrections(self) -> list[str]:
        """Every correction kept, as JSON text, in id order."""
        ...

    def new_group(self, sketch: Iterable[int], limit: int) -> int: ...
    def merge_into(self, root: int, gid: int, cap: int) -> None: ...
    def move_member(self, doc_id: str, src: int, dst: int, verdict: str | None) -> None:
        """Move *doc_id* (a member of canonical *src*) to canonical *dst*: its record (its
        group, and its verdict when one is given), the members, the sizes and its hour of
        activity."""
        ...

    def split_off(
        self,
        root: int,
        gid: int,
        sketch: tuple[tuple[int, ...], int],
        root_sketch: tuple[tuple[int, ...], int],
        without_id: int,
    ) -> None:
        """Make merged *gid* canonical again with *sketch*, give *root* *root_sketch*, and
        move *without_id* documents' count from *root* to it (members move one by one)."""
        ...

    def put_correction(self, cid: int, entry: str) -> None: ...
    def vote(self, hs: Sequence[int], groups: tuple[int, int], need: int) -> None:
        """Vote that *groups* were kept apart on each hash of *hs* (:func:`~.assign.vote`)."""
        ...


def _entries(t: CorrectionTables) -> list[dict[str, Any]]:
    return [json.loads(text) for text in t.corrections()]


def public(entry: dict[str, Any]) -> Correction:
    """The :class:`~nshash.Correction` of a kept entry."""
    return Correction(
        entry["id"],
        entry["kind"],
        entry["at"],
        entry["by"],
        entry["source"],
        entry["target"],
        entry.get("doc"),
        entry.get("undone_at"),
        entry.get("undone_by"),
    )


def _text(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _story(t: CorrectionTables, similar_id: int) -> int:
    if not isinstance(similar_id, int) or isinstance(similar_id, bool) or not 0 < similar_id:
        raise CorrectionError(
            f"A story id is a positive integer, not {similar_id!r:.40}", code="group_not_found"
        )
    if similar_id >= 2**63:  # every store's ids are below 2**63: no story has this one
        raise CorrectionError(f"No story {similar_id}", code="group_not_found")
    gid = resolve(t, similar_id)
    if t.group_size(gid) is None:
        raise CorrectionError(f"No story {similar_id}", code="group_not_found")
    return gid


def _who(by: str) -> str:
    if not isinstance(by, str) or not by or len(by) > 200:
        raise CorrectionError(
            f"Who made a correction is a short name, not {by!r:.40}", code="correction_refused"
        )
    return by


def detach(t: CorrectionTables, doc_id: str, by: str, at: int, votes: int) -> Correction:
    """Take *doc_id* out of its story into a new story of its own; return the correction.
    The anchors it shares with the story's other copies are voted on (*votes*: the policy's
    ``votes``).

    Raises:
        CorrectionError: the document is unknown, or it is its story's only copy.
    """
    by = _who(by)
    rec = t.get_doc(doc_id)
    if rec is None:
        raise CorrectionError(f"No document {doc_id!r:.80}", code="document_not_found")
    src = resolve(t, rec.similar_id)
    size = t.group_size(src)
    if size is None:
        raise CorrectionError(f"The story of {doc_id!r:.80} is gone", code="group_not_found")
    if size <= 1:
        raise CorrectionError(
            f"{doc_id!r:.80} is the only copy of story {src}: it is its own story already",
            code="correction_refused",
        )
    cid = len(t.corrections()) + 1
    shared = _shared(t, set(rec.fingerprints), t.group_members(src, RULE_MEMBERS), doc_id)
    dst = t.new_group((), NO_LIMIT)
    t.move_member(doc_id, src, dst, "moved")
    if shared:
        t.vote(shared, (src, dst), votes)
    entry = {"id": cid, "kind": "detach", "at": at, "by": by, "doc": doc_id}
    entry.update(source=src, target=dst)
    t.put_correction(cid, _text(entry))
    return public(entry)


def join(t: CorrectionTables, a: int, b: int, by: str, at: int, cap: int) -> Correction:
    """Join stories *a* and *b* into one (the smaller canonical id survives); return the
    correction.

    Raises:
        CorrectionError: a story is unknown, or both are one story already.
    """
    by = _who(by)
    ga, gb = _story(t, a), _story(t, b)
    if ga == gb:
        raise CorrectionError(
            f"Stories {a} and {b} are one story ({ga}) already", code="correction_refused"
        )
    root, gid = min(ga, gb), max(ga, gb)
    values, limit = t.group_sketch(gid)
    root_values, root_limit = t.group_sketch(root)
    members = t.group_members(gid)
    size = t.group_size(gid) or 0
    cid = len(t.corrections()) + 1
    t.merge_into(root, gid, cap)
    entry: dict[str, Any] = {"id": cid, "kind": "join", "at": at, "by": by}
    entry.update(source=gid, target=root, members=members, without_id=size - len(members))
    entry.update(sketch=[sorted(values), limit], root_sketch=[sorted(root_values), root_limit])
    t.put_correction(cid, _text(entry))
    return public(entry)


def undo(t: CorrectionTables, cid: int, by: str, at: int, cap: int) -> Correction:
    """Undo correction *cid* (see the module docstring); return it, marked undone.

    Raises:
        CorrectionError: no such correction, it was undone already, or the stories it made
            have changed so that it cannot be (a story gone, or a join joined again).
    """
    by = _who(by)
    entries = _entries(t)
    if not isinstance(cid, int) or isinstance(cid, bool) or not 0 < cid <= len(entries):
        raise CorrectionError(f"No correction {cid!r:.40}", code="correction_not_found")
    entry = entries[cid - 1]
    if entry.get("undone_at") is not None:
        raise CorrectionError(f"Correction {cid} was undone already", code="correction_refused")
    if entry["kind"] == "detach":
        src, dst = resolve(t, entry["source"]), resolve(t, entry["target"])
        if src != dst:
            if t.group_size(src) is None or t.group_size(dst) is None:
                raise CorrectionError(
                    f"A story of correction {cid} is gone", code="correction_refused"
                )
            t.merge_into(min(src, dst), max(src, dst), cap)
    else:
        gid, root = entry["source"], resolve(t, entry["target"])
        if t.get_parent(gid) is None or resolve(t, gid) != root:
            raise CorrectionError(
                f"Story {gid} of correction {cid} is not joined as it was",
                code="correction_refused",
            )
        if t.get_parent(gid) != root:  # joined into a story that was merged away since
            raise CorrectionError(
                f"Story {gid} of correction {cid} was joined into story {entry['target']},"
                f" which is now part of story {root}: undo that later join first",
                code="correction_refused",
            )
        values, limit = entry["sketch"]
        root_values, root_limit = entry["root_sketch"]
        only_joined = set(values) - set(root_values)
        now, now_limit = t.group_sketch(root)
        kept = tuple(sorted(v for v in now if v not in only_joined))
        staying = [m for m in entry["members"] if _in(t, m, root)]
        without_id = min(
            entry["without_id"], (t.group_size(root) or 0) - len(t.group_members(root))
        )
        t.split_off(root, gid, (tuple(values), limit), (kept, now_limit), max(without_id, 0))
        for doc_id in staying:
            t.move_member(doc_id, root, gid, None)
    entry.update(undone_at=at, undone_by=by)
    t.put_correction(cid, _text(entry))
    return public(entry)


def _in(t: CorrectionTables, doc_id: str, gid: int) -> bool:
    rec = t.get_doc(doc_id)
    return rec is not None and resolve(t, rec.similar_id) == gid


def listing(t: CorrectionTables) -> list[Correction]:
    """Every correction, in the order made."""
    return [public(e) for e in _entries(t)]


def active_detaches(t: CorrectionTables) -> list[dict[str, Any]]:
    """The detaches that hold (not undone): what :func:`settle` follows."""
    return [e for e in _entries(t) if e["kind"] == "detach" and e.get("undone_at") is None]


def _others(t: CorrectionTables, ids: Sequence[str], doc_id: str) -> Iterable[set[int]]:
    """The anchors of each of *ids* but *doc_id* itself."""
    for other in ids:
        if other != doc_id:
            rec = t.get_doc(other)
            if rec is not None:
                yield set(rec.fingerprints)


def _closest(t: CorrectionTables, anchors: set[int], ids: Sequence[str], doc_id: str) -> int:
    """The most anchors one of *ids* (not *doc_id* itself) shares with *anchors*."""
    return max((len(anchors & theirs) for theirs in _others(t, ids, doc_id)), default=0)


def _shared(t: CorrectionTables, anchors: set[int], ids: Sequence[str], doc_id: str) -> list[int]:
    """The anchors of *anchors* that one of *ids* (not *doc_id* itself) holds too, sorted."""
    held: set[int] = set()
    for theirs in _others(t, ids, doc_id):
        held |= anchors & theirs
    return sorted(held)


def settle(
    t: CorrectionTables,
    doc_id: str,
    anchors: Iterable[int],
    detaches: list[dict[str, Any]] | None = None,
) -> int | None:
    """Follow the detach rule for *doc_id*, just placed with *anchors*: move it to the other
    side of a detach when a copy there shares more anchors with it; return where it went, or
    None when it stays. *detaches* defaults to :func:`active_detaches`."""
    rec = t.get_doc(doc_id)
    if rec is None:
        return None
    here = resolve(t, rec.similar_id)
    mine = set(anchors)
    for entry in active_detaches(t) if detaches is None else detaches:
        src, dst = resolve(t, entry["source"]), resolve(t, entry["target"])
        if src == dst or here not in (src, dst):
            continue
        there = dst if here == src else src
        if t.group_size(there) is None:
            continue
        sides = {}
        for gid in (here, there):
            ids = t.group_members(gid, RULE_MEMBERS)
            if gid == dst and entry["doc"] not in ids and _in(t, entry["doc"], dst):
                ids.append(entry["doc"])
            sides[gid] = _closest(t, mine, ids, doc_id)
        if sides[there] > sides[here]:
            t.move_member(doc_id, here, there, "moved")
            return there
    return None
