"""Group assignment: the one algorithm every Python store runs (Redis runs the same in Lua).

A store keeps these tables (the names are the ones the code and the Redis key layout use):

========  =====================================  ===========================================
table     maps                                   written when
========  =====================================  ===========================================
fp        anchor fingerprint -> group id         first time an anchor is seen (never moved)
exact     whole-text fingerprint -> group id     first time a text is seen
common    set of fingerprints                    a match on them was refused (boilerplate)
parent    merged group id -> canonical id        groups merge; the smaller id stays canonical
sketch    canonical id -> set of sketch hashes   a group is made or joined (capped in size)
size      canonical id -> document count         every new document
members   canonical id -> doc ids in order       every new document that has a doc_id
docs      doc id -> the answer given for it      every new document that has a doc_id
counter   last id handed out                     a group is made
========  =====================================  ===========================================

**The boilerplate guard.** An anchor (one of a document's n longest sentences) that hits a
group is only evidence. The match is accepted when the document's *sketch* (hashes of the two
ends of every sentence, repeated by sentence length; see :class:`nshash.DocPrint`) and the
group's sketch share at least ``min_overlap`` hashes and at least ``theta`` of the smaller
sketch, after removing hashes known to be common. A site's disclaimer shared by two
unrelated articles passes the first test but not the second: the rest of the two articles
differs. A refused match teaches the store: the anchors that led to it and the sketch hashes
both documents share become *common*; common hashes are skipped as anchors and ignored in sketches
from then on, so a site's footer stops pulling its articles together after its first
appearance, whatever its wording. Since a sentence weighs by its length, a short footer
cannot outweigh the story around it. Identical texts (same letters and digits) always join one
group through the ``exact`` table, whatever the guard says. A document that matches several
groups joins the best match and merges the others into it only where it matches them at least
``merge_theta``: half of one story and half of another glue nothing together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .errors import ConfigError
from .fingerprint import DocPrint
from .results import Assignment, DocumentRecord

__all__ = ["MatchPolicy", "Tables", "assign", "lookup", "resolve"]


@dataclass(frozen=True, slots=True)
class MatchPolicy:
    """How strict the boilerplate guard is, and how much a store keeps per group.

    Attributes:
        n: anchors per document (the "n" of nshash).
        theta: the share of the smaller sketch that two documents must have in common.
        min_overlap: the fewest shared sketch hashes for a match (unless a sketch is smaller).
        merge_theta: a document that matches several groups joins the best one, and merges
            the others into it only where it matches them this strongly.
        sketch_cap: a group's sketch stops growing past this many hashes.
    """

    n: int = 5
    theta: float = 0.5
    min_overlap: int = 2
    sketch_cap: int = 256
    merge_theta: float = 0.6

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ConfigError(f"n must be a positive integer, not {self.n!r}")
        if not isinstance(self.theta, (int, float)) or not 0.0 < self.theta <= 1.0:
            raise ConfigError(f"theta must be in (0, 1], not {self.theta!r}")
        if not isinstance(self.merge_theta, (int, float)) or not 0.0 < self.merge_theta <= 1.0:
            raise ConfigError(f"merge_theta must be in (0, 1], not {self.merge_theta!r}")
        if not isinstance(self.min_overlap, int) or self.min_overlap < 1:
            raise ConfigError(f"min_overlap must be a positive integer, not {self.min_overlap!r}")
        if not isinstance(self.sketch_cap, int) or self.sketch_cap < 1:
            raise ConfigError(f"sketch_cap must be a positive integer, not {self.sketch_cap!r}")


class Tables(Protocol):
    """The reads and writes :func:`assign` needs from a store, inside one atomic step."""

    def get_fp(self, h: int) -> int | None: ...
    def get_exact(self, h: int) -> int | None: ...
    def not_common(self, hs: Iterable[int]) -> list[int]:
        """The hashes of *hs* (which has no repeats) that are not common, in their order."""
        ...

    def live_set(self, hs: Iterable[int]) -> set[int]:
        """The hashes of *hs* that are not common, as a set."""
        ...

    def get_parent(self, gid: int) -> int | None: ...
    def sketch_overlap(self, gid: int, live: set[int]) -> tuple[set[int], int]:
        """The hashes *live* shares with the group's sketch, and the sketch's size without
        the hashes that are common (*live* holds no common hash)."""
        ...

    def sketch_size(self, gid: int) -> int: ...
    def get_doc(self, doc_id: str) -> DocumentRecord | None: ...

    def set_fp(self, h: int, gid: int) -> None: ...
    def set_exact(self, h: int, gid: int) -> None: ...
    def add_common(self, hs: Iterable[int]) -> None: ...
    def new_group(self, sketch: Iterable[int]) -> int: ...
    def extend_sketch(self, gid: int, hs: Iterable[int]) -> None: ...
    def merge_into(self, root: int, gid: int) -> None: ...
    def add_member(self, gid: int, record: DocumentRecord | None) -> None: ...


def resolve(tables: Tables, gid: int) -> int:
    """Follow merge links from *gid* to its canonical id."""
    parent = tables.get_parent(gid)
    while parent is not None:
        gid = parent
        parent = tables.get_parent(gid)
    return gid


def _select(tables: Tables, doc: DocPrint, n: int) -> tuple[int, ...]:
    live = tables.not_common(doc.sentences)
    return tuple((live or doc.sentences)[:n])


def _known(tables: Tables, anchors: tuple[int, ...]) -> dict[int, int | None]:
    """Each anchor's group as written (None for an anchor never seen)."""
    get = tables.get_fp
    return {h: get(h) for h in anchors}


def _candidates(tables: Tables, known: dict[int, int | None]) -> dict[int, list[int]]:
    """Canonical group -> the anchors that hit it, in order of first hit."""
    found: dict[int, list[int]] = {}
    for h, gid in known.items():
        if gid is not None:
            found.setdefault(resolve(tables, gid), []).append(h)
    return found


def _verify(
    tables: Tables,
    live_sketch: set[int],
    gid: int,
    policy: MatchPolicy,
    made_common: set[int] | None = None,
) -> tuple[float, set[int]]:
    """Score how much of the smaller sketch the document and group share (0 when too little).

    *made_common* holds hashes that became common earlier in the same call: they no longer
    count as shared, while the document's sketch keeps the size it had when the call began.
    """
    shared, group_size = tables.sketch_overlap(gid, live_sketch)
    if made_common:
        shared -= made_common
    smaller = min(len(live_sketch), group_size)
    if smaller == 0 or len(shared) < min(policy.min_overlap, smaller):
        return 0.0, shared
    return len(shared) / smaller, shared


def _choose(scores: dict[int, float], policy: MatchPolicy) -> list[int]:
    """The accepted groups to join: the best match, plus any other that matches strongly.

    A document that half-matches two stories (one sentence from each) must not glue them
    together; it joins the better one. Groups merge only on strong evidence for each.
    """
    accepted = {g: s for g, s in scores.items() if s >= policy.theta}
    if len(accepted) <= 1:
        return list(accepted)
    best = max(accepted, key=lambda g: (accepted[g], -g))
    return sorted({best} | {g for g, s in accepted.items() if s >= policy.merge_theta})


def lookup(tables: Tables, doc: DocPrint, policy: MatchPolicy) -> int | None:
    """Return the canonical id *doc* would join, or None; reads only."""
    gid = tables.get_exact(doc.exact)
    if gid is not None:
        return resolve(tables, gid)
    live_sketch = tables.live_set(doc.sketch)
    scores = {
        g: _verify(tables, live_sketch, g, policy)[0]
        for g in _candidates(tables, _known(tables, _select(tables, doc, policy.n)))
    }
    accepted = _choose(scores, policy)
    return min(accepted) if accepted else None


def assign(
    tables: Tables,
    doc: DocPrint,
    policy: MatchPolicy,
    doc_id: str | None = None,
    title: str | None = None,
) -> tuple[Assignment, tuple[int, ...]]:
    """Place *doc* in a group, writing through *tables*; returns the answer and the anchors.

    The caller makes this atomic (a lock, a LevelDB write batch, a Redis Lua script).
    """
    if doc_id is not None:
        seen = tables.get_doc(doc_id)
        if seen is not None:  # a retry: the first answer again, and where it points now
            canonical = resolve(tables, seen.similar_id)
            answer = Assignment(
                seen.similar_id,
                seen.duplicate,
                seen.merged_from,
                True,
                canonical if canonical != seen.similar_id else None,
            )
            return answer, seen.fingerprints
    anchors = _select(tables, doc, policy.n)
    known = _known(tables, anchors)
    merged: tuple[int, ...] = ()
    exact = tables.get_exact(doc.exact)
    if exact is not None:
        root = resolve(tables, exact)
        duplicate = True
    else:
        live_sketch = tables.live_set(doc.sketch)
        scores: dict[int, float] = {}
        made_common: set[int] = set()
        for gid, hits in _candidates(tables, known).items():
            scores[gid], shared = _verify(tables, live_sketch, gid, policy, made_common)
            if scores[gid] < policy.theta:
                newly = set(hits) | shared
                tables.add_common(sorted(newly))
                made_common |= newly
        accepted = _choose(scores, policy)
        if accepted:
            root = min(accepted)
            merged = tuple(sorted(g for g in accepted if g != root))
            for gid in merged:
                tables.merge_into(root, gid)
            if tables.sketch_size(root) < policy.sketch_cap:
                tables.extend_sketch(root, doc.sketch)
            duplicate = True
        else:
            root = tables.new_group(doc.sketch)
            duplicate = False
        tables.set_exact(doc.exact, root)
    for h, hit in known.items():
        if hit is None:
            tables.set_fp(h, root)
    record = None
    if doc_id is not None:
        record = DocumentRecord(doc_id, root, duplicate, merged, title, anchors)
    tables.add_member(root, record)
    return Assignment(root, duplicate, merged), anchors
