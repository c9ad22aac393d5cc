"""Third-party near-duplicate baselines, run online the way nshash is: MinHash LSH and simhash.

Both are fed one document at a time: query the index with the new document, then insert it.
They answer "which earlier documents are near this one?", not "which group is this in?", so a
grouping rule turns candidates into labels. Two rules are available:

``"union"`` (default)
    Union-find over all candidates: the document links every candidate's group into one, so
    the groups are the connected components of the "is a candidate of" graph (LSH candidacy is
    symmetric, so this is also what an offline run would find). Labels are final only after
    ``finish``. With it MinHash scores the reference F1 of 0.90 on ``zh_reposts_dev``.
``"first"``
    The document joins the group of its earliest candidate (the one inserted first); no
    candidate: a new group. Groups never merge, like the seed. Slightly lower recall (MinHash:
    F1 0.86 on ``zh_reposts_dev``).

:class:`MinHashBaseline`
    datasketch ``MinHashLSH`` (128 permutations, threshold 0.5) over the set of character
    5-grams of the lowercased text with all whitespace removed (so changed paragraph breaks do
    not change shingles); documents shorter than 5 characters give one shingle, the text.
:class:`SimhashBaseline`
    PyPI ``simhash``'s ``SimhashIndex`` (64 bits, k=3) over the features its README suggests
    for text: character 3-grams of the lowercased text with everything but ``\\w`` characters
    removed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Hashable

from datasketch import MinHash, MinHashLSH
from simhash import Simhash, SimhashIndex

__all__ = [
    "GROUPINGS",
    "MinHashBaseline",
    "SimhashBaseline",
    "char_shingles",
    "simhash_features",
]

#: The grouping rules a baseline accepts.
GROUPINGS = ("union", "first")

_NON_WORD = re.compile(r"[^\w]+")
_SPACE = re.compile(r"\s+")


def char_shingles(text: str, width: int = 5) -> set[str]:
    """The set of character *width*-grams of *text* (the text itself when it is shorter)."""
    if len(text) <= width:
        return {text}
    return {text[i : i + width] for i in range(len(text) - width + 1)}


def simhash_features(text: str, width: int = 3) -> list[str]:
    """The simhash README's text features: *width*-grams of the lowercased ``\\w`` characters."""
    s = _NON_WORD.sub("", text.lower())
    return [s[i : i + width] for i in range(max(len(s) - width + 1, 1))]


class _Groups:
    """Online grouping of documents 0, 1, 2, ... from the candidates found for each."""

    def __init__(self, grouping: str) -> None:
        if grouping not in GROUPINGS:
            raise ValueError(f"Unknown grouping {grouping!r}; use one of {list(GROUPINGS)}")
        self.union = grouping == "union"
        #: Document index -> its label (first) or union-find parent (union).
        self.parent: list[int] = []

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:  # path compression
            parent[i], i = root, parent[i]
        return root

    def place(self, candidates: list[int]) -> int:
        """Add the next document, given the indexes of its candidates; return its label."""
        me = len(self.parent)
        if not candidates:
            self.parent.append(me)
            return me
        if not self.union:
            label = self.parent[min(candidates)]
            self.parent.append(label)
            return label
        roots = {self.find(c) for c in candidates}
        root = min(roots)
        for r in roots:
            self.parent[r] = root
        self.parent.append(root)
        return root

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        if not self.union:
            return labels
        return [self.find(i) for i in range(len(self.parent))]


class MinHashBaseline:
    """datasketch MinHash LSH over character 5-grams, queried then fed one document at a time.

    Args:
        threshold: the LSH Jaccard threshold (0.5).
        num_perm: MinHash permutations (128).
        width: shingle width in characters (5).
        grouping: ``"first"`` or ``"union"``; see the module docstring.

    Labels are document indexes (of a document of the group), final after :meth:`finish`.
    """

    def __init__(
        self,
        threshold: float = 0.5,
        num_perm: int = 128,
        width: int = 5,
        grouping: str = "union",
    ) -> None:
        self.groups = _Groups(grouping)
        self.lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self.num_perm = num_perm
        self.width = width
        # One permutation table for every MinHash (building it per document costs more
        # than hashing a short article).
        template = MinHash(num_perm=num_perm)
        self._permutations = template.permutations
        self._scheme = template.scheme

    def minhash(self, text: str) -> MinHash:
        """The MinHash of *text*'s shingles (lowercased, whitespace removed)."""
        m = MinHash(num_perm=self.num_perm, permutations=self._permutations, scheme=self._scheme)
        text = _SPACE.sub("", text.lower())
        m.update_batch([s.encode("utf-8") for s in char_shingles(text, self.width)])
        return m

    def add(self, text: str) -> Hashable:
        """Place *text* in a group and index it; return the group's label."""
        m = self.minhash(text)
        candidates: list[int] = self.lsh.query(m)
        label = self.groups.place(candidates)
        self.lsh.insert(len(self.groups.parent) - 1, m, check_duplication=False)
        return label

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Final labels (union-find roots in ``"union"`` mode)."""
        return self.groups.finish(labels)


class SimhashBaseline:
    """PyPI simhash with ``SimhashIndex`` (k=3), queried then fed one document at a time.

    Args:
        k: the largest Hamming distance that counts as near (3).
        width: feature width in characters (3, as in the simhash README).
        grouping: ``"first"`` or ``"union"``; see the module docstring.
    """

    def __init__(self, k: int = 3, width: int = 3, grouping: str = "union") -> None:
        self.groups = _Groups(grouping)
        # SimhashIndex logs a warning for every bucket over 200 entries; boilerplate makes
        # many, and the log would swamp the benchmark's output and its timing.
        log = logging.getLogger("nshash.bench.simhash")
        log.setLevel(logging.ERROR)
        self.index = SimhashIndex([], k=k, log=log)
        self.width = width

    def add(self, text: str) -> Hashable:
        """Place *text* in a group and index it; return the group's label."""
        sh = Simhash(simhash_features(text, self.width))
        candidates = [int(obj_id) for obj_id in self.index.get_near_dups(sh)]
        label = self.groups.place(candidates)
        self.index.add(str(len(self.groups.parent) - 1), sh)
        return label

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Final labels (union-find roots in ``"union"`` mode)."""
        return self.groups.finish(labels)
