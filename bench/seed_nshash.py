"""The seed nshash algorithm as published: the speed and accuracy baseline of the benchmarks.

A re-implementation, written for this project, of the algorithm described in seed 003 (the
blog post "nshash (top-n longest sentences hash)") and in the original ``nshash`` release:

1. split the document into sentences with one regular expression;
2. take the n (5) longest sentences;
3. hash each one (``farmhash.fingerprint64`` here by default; ``md5`` hex digests as an
   option, as in the release);
4. look every hash up in a dict; on a hit the document gets that hash's ``similar_id``; on no
   hit it gets ``counter + 1``;
5. write all n hashes -> that id (overwriting earlier entries).

There is deliberately no normalization, no boilerplate guard and no merging: this is what the
project improves on, and it is the speed reference (it does almost no work per document).

Two readings of the seed exist, both available through ``variant``:

``"release"`` (default)
    The code of the original release: split at ``: ： ； ？ 。 ！ 】`` and line breaks, keep
    the sentences longer than 30 characters (all sentences when none is), sort by length
    (stable, so ties keep their order), and on several hits take the smallest id.
``"article"``
    The wording of the blog post alone: split at ``。 ！ ？`` and line breaks, no length
    filter, and the first hit (in the order of the n longest sentences) wins.

The release hashed with ``farmhash.hash64``, whose values may change between farmhash versions;
``fingerprint64`` is the stable equivalent and costs the same, so the default uses it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Hashable

import farmhash

__all__ = ["HASHFUNCS", "SEED_PATTERNS", "VARIANTS", "SeedNSHash", "md5_hex"]

#: The sentence-splitting pattern of each variant.
SEED_PATTERNS: dict[str, str] = {
    "release": r":|：|；|？|。|！|】|\n",
    "article": r"。|！|？|\n",
}

#: The variants :class:`SeedNSHash` accepts.
VARIANTS = tuple(SEED_PATTERNS)

#: The release's "long sentence" bar: only sentences longer than this are candidates.
RELEASE_MIN_CHARS = 30


def md5_hex(sentence: str) -> str:
    """The release's md5 option: the hex digest of the UTF-8 bytes."""
    return hashlib.md5(sentence.encode("utf-8")).hexdigest()


#: Hash function name -> function from a sentence to its hash.
HASHFUNCS: dict[str, Callable[[str], Hashable]] = {
    "farmhash": farmhash.fingerprint64,
    "md5": md5_hex,
}


class SeedNSHash:
    """The seed algorithm: a dict from sentence hashes to ``similar_id``, nothing more.

    Use it as the baseline in benchmarks; it is not meant for production (a site's footer
    merges every article of the site into one group).

    Args:
        n: how many of the longest sentences to hash (the seed uses 5).
        hashfunc: ``"farmhash"`` (``farmhash.fingerprint64``, default) or ``"md5"``.
        variant: ``"release"`` (default) or ``"article"``; see the module docstring.

    Raises:
        ValueError: an unknown ``hashfunc`` or ``variant``, or ``n`` below 1.

    Example:
        >>> seed = SeedNSHash()
        >>> seed.get_similar("今天天气很好，我们去公园散步吧。明天会下雨。")
        1
    """

    def __init__(self, n: int = 5, hashfunc: str = "farmhash", variant: str = "release") -> None:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n must be an int of at least 1, not {n!r}")
        if hashfunc not in HASHFUNCS:
            raise ValueError(f"Unknown hashfunc {hashfunc!r}; use one of {sorted(HASHFUNCS)}")
        if variant not in SEED_PATTERNS:
            raise ValueError(f"Unknown variant {variant!r}; use one of {list(VARIANTS)}")
        self.n = n
        self.variant = variant
        self.hashfunc = HASHFUNCS[hashfunc]
        self._split = re.compile(SEED_PATTERNS[variant]).split
        self._release = variant == "release"
        #: Sentence hash -> similar_id (the seed's HashDBMemory).
        self.db: dict[Hashable, int] = {}
        #: The last id handed out (ids start at 1).
        self.max_similar_id = 0

    def sentences(self, doc: str) -> list[str]:
        """The n sentences of *doc* the seed fingerprints, longest first."""
        sentences = self._split(doc)
        if self._release:
            long_ones = [s for s in sentences if len(s) > RELEASE_MIN_CHARS]
            if long_ones:
                sentences = long_ones
        sentences.sort(key=len, reverse=True)
        return sentences[: self.n]

    def fingerprints(self, doc: str) -> list[Hashable]:
        """The hashes of the n longest sentences of *doc*."""
        h = self.hashfunc
        return [h(s) for s in self.sentences(doc)]

    def get_similar(self, doc: str) -> int:
        """Give *doc* a ``similar_id`` and record its hashes, as the seed does."""
        hashes = self.fingerprints(doc)
        get = self.db.get
        similar_id = 0
        if self._release:
            hits = [sid for sid in map(get, hashes) if sid]
            if hits:
                similar_id = min(hits)
        else:
            for h in hashes:
                sid = get(h)
                if sid:
                    similar_id = sid
                    break
        if not similar_id:
            self.max_similar_id += 1
            similar_id = self.max_similar_id
        db = self.db
        for h in hashes:
            db[h] = similar_id
        return similar_id

    # The benchmark system protocol (see bench/evaluate.py).
    add = get_similar

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Final labels: the seed never merges, so they are the ids it returned."""
        return labels
