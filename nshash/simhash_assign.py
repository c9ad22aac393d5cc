"""Group assignment for the simhash method: the algorithm every store runs over its tables.

A store keeps these tables for the method (the lead's stores implement :class:`SimhashTables`;
:class:`MemorySimhashTables` is the dict-backed reference used by the tests and benchmarks):

========  ==========================================  ======================================
table     maps                                        written when
========  ==========================================  ======================================
bucket    index key -> (fingerprint, group id) list   a fingerprint not seen before arrives
parent    merged group id -> canonical id             groups merge; the smaller id stays
size      canonical id -> document count              every new document
members   canonical id -> doc ids in order            every new document that has a doc_id
docs      doc id -> the answer given for it           every new document that has a doc_id
counter   last id handed out                          a group is made
========  ==========================================  ======================================

**Near fingerprints without a scan.** A fingerprint is filed under its
:func:`nshash.simprint.index_keys` (one key per table of Manku et al.'s block scheme); looking
up the same keys returns every filed fingerprint within ``k`` bits, among a few others that the
distance check drops.

**Joining and merging.** A document whose fingerprint has no filed fingerprint within ``k``
bits starts a new group. Otherwise it joins: with ``merge`` (the default) every group within
``k`` bits merges into the smallest id, which the document joins (so the groups are the
connected components of "within k bits", as an offline run would find; measured better on
both repost sets than joining the nearest group alone). Without ``merge`` it joins the group of
the nearest fingerprint (ties: the smallest id). ``duplicate`` is True when the document joined
a group that existed, as for :class:`nshash.NSHash`. A fingerprint already filed is not filed
again: an identical fingerprint finds the earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .errors import ConfigError
from .results import Assignment, DocumentRecord, Group, Member
from .simprint import DEFAULT_K, index_keys, index_layout

__all__ = [
    "MemorySimhashTables",
    "SimhashPolicy",
    "SimhashTables",
    "assign",
    "lookup",
    "near_groups",
    "resolve",
]


@dataclass(frozen=True, slots=True)
class SimhashPolicy:
    """How near is near, how the index is cut, and whether near groups merge.

    Attributes:
        k: the largest Hamming distance at which two fingerprints are near.
        blocks: blocks of the index (see :func:`nshash.simprint.index_layout`; None: ``k + 2``).
        merge: a document near several groups merges them (else it joins the nearest only).
    """

    k: int = DEFAULT_K
    blocks: int | None = None
    merge: bool = True

    def __post_init__(self) -> None:
        index_layout(self.k, self.blocks)  # raises ConfigError when out of range
        if not isinstance(self.merge, bool):
            raise ConfigError(f"merge must be a bool, not {self.merge!r}")


class SimhashTables(Protocol):
    """**Protocol**: the reads and writes :func:`assign` needs from a store, in one atomic step."""

    def bucket(self, key: int) -> Sequence[tuple[int, int]]:
        """The (fingerprint, group id as filed) pairs filed under index key *key*."""
        ...

    def file(self, key: int, fp: int, gid: int) -> None:
        """File fingerprint *fp* of group *gid* under index key *key*."""
        ...

    def new_group(self) -> int:
        """A new group id from the persistent counter (never reused)."""
        ...

    def get_parent(self, gid: int) -> int | None:
        """The id *gid* was merged into, or None for a canonical id."""
        ...

    def merge_into(self, root: int, gid: int) -> None:
        """Make canonical *gid* resolve to canonical *root*; its size and members move to it."""
        ...

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        """The answer first given for *doc_id*, or None."""
        ...

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
        """Count one more document in canonical group *gid* (and remember *record*)."""
        ...


def resolve(tables: SimhashTables, gid: int) -> int:
    """Follow merge links from *gid* to its canonical id."""
    parent = tables.get_parent(gid)
    while parent is not None:
        gid = parent
        parent = tables.get_parent(gid)
    return gid


def near_groups(
    tables: SimhashTables, fp: int, policy: SimhashPolicy, keys: Sequence[int] | None = None
) -> dict[int, int]:
    """Canonical group -> the smallest distance of its filed fingerprints to *fp*, within k."""
    if keys is None:
        keys = index_keys(fp, policy.k, policy.blocks)
    k = policy.k
    found: dict[int, int] = {}
    by_gid: dict[int, int] = {}
    for key in keys:
        for other, gid in tables.bucket(key):
            d = (other ^ fp).bit_count()
            if d <= k and d < by_gid.get(gid, k + 1):
                by_gid[gid] = d
    for gid, d in by_gid.items():
        root = resolve(tables, gid)
        if d < found.get(root, k + 1):
            found[root] = d
    return found


def _choose(near: dict[int, int], policy: SimhashPolicy) -> list[int]:
    """The groups to join, the one to keep first: all near ones with merge, else the nearest."""
    if policy.merge:
        return sorted(near)
    return [min(near, key=lambda g: (near[g], g))]


def lookup(tables: SimhashTables, fp: int, policy: SimhashPolicy) -> int | None:
    """The canonical id a document with fingerprint *fp* would join, or None; reads only."""
    near = near_groups(tables, fp, policy)
    return _choose(near, policy)[0] if near else None


def assign(
    tables: SimhashTables,
    fp: int,
    policy: SimhashPolicy,
    doc_id: str | None = None,
    title: str | None = None,
) -> Assignment:
    """Place a document with fingerprint *fp* in a group, writing through *tables*.

    The caller makes this atomic (a lock, a LevelDB write batch, a Redis Lua script).

    Raises:
        ConfigError: *fp* is not an int in ``[0, 2**64)``.
    """
    if doc_id is not None:
        seen = tables.get_doc(doc_id)
        if seen is not None:  # a retry: the first answer again, and where it points now
            canonical = resolve(tables, seen.similar_id)
            return Assignment(
                seen.similar_id,
                seen.duplicate,
                seen.merged_from,
                True,
                canonical if canonical != seen.similar_id else None,
            )
    keys = index_keys(fp, policy.k, policy.blocks)
    near = near_groups(tables, fp, policy, keys)
    merged: tuple[int, ...] = ()
    if near:
        chosen = _choose(near, policy)
        root = chosen[0]
        merged = tuple(chosen[1:])
        for gid in merged:
            tables.merge_into(root, gid)
        duplicate = True
    else:
        root = tables.new_group()
        duplicate = False
    if 0 not in near.values():
        for key in keys:
            tables.file(key, fp, root)
    record = None
    if doc_id is not None:
        record = DocumentRecord(doc_id, root, duplicate, merged, title, (fp,))
    tables.add_member(root, record)
    return Assignment(root, duplicate, merged)


class MemorySimhashTables:
    """Dict-backed :class:`SimhashTables`: the reference for tests and the benchmark.

    Not a store: nothing persists and nothing locks. The stores replace it.
    """

    def __init__(self) -> None:
        self.buckets: dict[int, list[tuple[int, int]]] = {}
        self.parents: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.members: dict[int, list[Member]] = {}
        self.docs: dict[str, DocumentRecord] = {}
        self.counter = 0

    def bucket(self, key: int) -> Sequence[tuple[int, int]]:
        """The pairs filed under *key* (empty for a key never used)."""
        return self.buckets.get(key, ())

    def file(self, key: int, fp: int, gid: int) -> None:
        """Append (fp, gid) to the bucket of *key*."""
        self.buckets.setdefault(key, []).append((fp, gid))

    def new_group(self) -> int:
        """The next id."""
        self.counter += 1
        self.sizes[self.counter] = 0
        return self.counter

    def get_parent(self, gid: int) -> int | None:
        """The id *gid* was merged into, if any."""
        return self.parents.get(gid)

    def merge_into(self, root: int, gid: int) -> None:
        """Link *gid* to *root* and move its size and members."""
        self.parents[gid] = root
        self.sizes[root] = self.sizes.get(root, 0) + self.sizes.pop(gid, 0)
        moved = self.members.pop(gid, [])
        if moved:
            self.members.setdefault(root, []).extend(moved)

    def get_doc(self, doc_id: str) -> DocumentRecord | None:
        """The record of *doc_id*, if it was added."""
        return self.docs.get(doc_id)

    def add_member(self, gid: int, record: DocumentRecord | None) -> None:
        """Count a document in *gid*; remember it when it has an id."""
        self.sizes[gid] = self.sizes.get(gid, 0) + 1
        if record is not None:
            self.docs[record.doc_id] = record
            self.members.setdefault(gid, []).append(Member(record.doc_id, record.title))

    def group(self, gid: int) -> Group:
        """The canonical group *gid* resolves to, with its size and members."""
        root = resolve(self, gid)
        return Group(root, self.sizes.get(root, 0), tuple(self.members.get(root, ())))
