"""Pairwise text similarity: the measures a crawler or scanner engineer reaches for.

nshash groups near-duplicates with sentence fingerprints; this module scores one pair of texts
with the classic measures, each mapped to ``[0, 1]`` (1 = the same text):

==================  =========================================================================
``cosine``          cosine of the two term-frequency vectors (word counts)
``tfidf_cosine``    cosine of the two TF-IDF weight vectors (see *Weights* below)
``simhash``         ``1 - d / 64``, d the Hamming distance of the weighted 64-bit simhashes
``euclidean``       ``1 / (1 + d)``, d the distance of the length-normalized (unit) TF vectors;
                    as d is at most sqrt(2), unrelated texts score 0.414, not 0 (on unit
                    vectors d = sqrt(2 - 2 cos), so it ranks pairs exactly as ``cosine``)
``common_words``    shared word occurrences over the longer text's word count (counted, not
                    distinct: ``"cat cat dog"`` and ``"cat dog dog"`` share 2 of 3 words)
``levenshtein``     ``1 - d / max(len)``, d the character edit distance (rapidfuzz) of the
                    normalized texts with runs of white space folded to one space
==================  =========================================================================

**Words** come from :mod:`nshash.text.tokenize`: the text is normalized as the fingerprints
normalize it, Chinese is cut by jieba and other scripts by a regex. **Stop words** (the small
built-in English and Chinese list :data:`nshash.text.tokenize.STOP_WORDS`) are dropped by default
from the counts of ``cosine``, ``euclidean`` and ``common_words``, unless that would leave
either text without words (then both keep them); pass ``stop_words=False`` to count every word,
as seed 000's example does. Dropping them measured better on the plagiarism benchmark
(ROC AUC 0.905 -> 0.934 for cosine, 0.848 -> 0.940 for common words).

**Weights** (``tfidf_cosine`` and ``simhash``) are term count times IDF, as
``jieba.analyse`` computes them: a Chinese word takes its IDF from jieba's bundled table, a
Chinese word missing from the table and every other word (Latin, digits) the table's median
IDF (11.95), which treats them as moderately rare; so on text without Chinese,
``tfidf_cosine`` equals ``cosine`` without stop words. Stop words weigh nothing (a text made of
stop words only keeps them, so it still has a weight vector). ``simhash`` follows seeds 002
and 004: the :data:`SIMHASH_KEYWORDS` heaviest words (ties by word), each hashed with
``farmhash.fingerprint64`` (stable across processes and machines), each of the 64 bits voted
for with the word's weight.

**Texts without words** (empty, blank or only punctuation) score 1.0 against each other when
their normalized texts are equal and 0.0 otherwise, and 0.0 against a text with words, on the
word measures; ``levenshtein`` compares characters and keeps its formula (two empty texts score
1.0). Identical texts score 1.0 on every measure. Only input that is not a str raises
(:class:`nshash.ConfigError`); unknown metric names too.

Example:
    >>> from nshash.toolkit.similarity import compare
    >>> scores = compare("The cat sat on the mat, the cat purred.", "A cat sat on the red mat!")
    >>> {name: round(score, 3) for name, score in scores.items()}
    {'cosine': 0.756, 'tfidf_cosine': 0.756, 'simhash': 0.703, 'euclidean': 0.589, \
'common_words': 0.6, 'levenshtein': 0.487}
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, lru_cache

import farmhash

from ..errors import ConfigError, install_hint
from ..text.normalize import normalize_text
from ..text.tokenize import STOP_WORDS, has_cjk, jieba_module, quiet_jieba, split_words

__all__ = [
    "METRICS",
    "SIMHASH_KEYWORDS",
    "common_words",
    "compare",
    "cosine",
    "euclidean",
    "hamming_distance",
    "levenshtein",
    "simhash",
    "simhash_fingerprint",
    "tfidf_cosine",
    "tfidf_weights",
]

#: The measures :func:`compare` knows, in the order it reports them.
METRICS: tuple[str, ...] = (
    "cosine",
    "tfidf_cosine",
    "simhash",
    "euclidean",
    "common_words",
    "levenshtein",
)

#: How many of a text's heaviest TF-IDF words make its simhash (seed 004 takes 20).
SIMHASH_KEYWORDS = 20

_BITS = 64


@lru_cache(maxsize=1)
def _idf_table() -> tuple[Mapping[str, float], float]:
    """jieba's IDF table and its median, loaded once per process (about a second)."""
    jieba_module()  # silences jieba before its analyser loads
    try:
        with quiet_jieba():
            import jieba.analyse
    except ImportError as exc:  # pragma: no cover - jieba.analyse ships with jieba
        raise ConfigError(
            f"TF-IDF weights need jieba.analyse, which is missing: {install_hint('similarity')}."
        ) from exc
    analyser = jieba.analyse.default_tfidf
    return analyser.idf_freq, float(analyser.median_idf)


def _check_text(text: object) -> str:
    if not isinstance(text, str):
        raise ConfigError(f"Text to compare must be a str, not {type(text).__name__!r}.")
    return text


class _Text:
    """One text analysed once: its normalized form, words, counts and weights on demand."""

    def __init__(self, text: object) -> None:
        self.normalized = normalize_text(_check_text(text))

    @cached_property
    def all_words(self) -> list[str]:
        return split_words(self.normalized)

    @cached_property
    def all_counts(self) -> Counter[str]:
        return Counter(self.all_words)

    @cached_property
    def content_counts(self) -> Counter[str]:
        """Word counts without the stop words."""
        return Counter(w for w in self.all_words if w not in STOP_WORDS)

    @cached_property
    def squashed(self) -> str:
        """The normalized text with every run of white space folded to one space."""
        return " ".join(self.normalized.split())

    @cached_property
    def weights(self) -> dict[str, float]:
        """TF-IDF weight per word: count times IDF, stop words weightless."""
        counts = self.content_counts or self.all_counts
        if not counts:
            return {}
        if not any(has_cjk(w) for w in counts):
            # Every word would get the median IDF: a common factor, which changes neither a
            # cosine nor a simhash, so jieba's table (and jieba itself) is not needed.
            return {w: float(c) for w, c in counts.items()}
        table, median = _idf_table()
        return {w: c * (table.get(w, median) if has_cjk(w) else median) for w, c in counts.items()}

    @cached_property
    def fingerprint(self) -> int:
        return _simhash_of(self.weights)


def _clamp(score: float) -> float:
    """Keep floating-point noise from leaving [0, 1]."""
    return 0.0 if score < 0.0 else 1.0 if score > 1.0 else score


def _counts(x: _Text, y: _Text, stop_words: bool) -> tuple[Counter[str], Counter[str]]:
    """The two texts' word counts: without stop words if asked and both keep a word."""
    if stop_words and x.content_counts and y.content_counts:
        return x.content_counts, y.content_counts
    return x.all_counts, y.all_counts


def _wordless(x: _Text, y: _Text, x_empty: bool, y_empty: bool) -> float | None:
    """The score when a text has no words (equal texts 1.0, else 0.0); None when both have."""
    if not x_empty and not y_empty:
        return None
    if x_empty and y_empty and x.squashed == y.squashed:
        return 1.0
    return 0.0


def _cosine_of(u: Mapping[str, float], v: Mapping[str, float]) -> float:
    """The cosine of two sparse non-negative vectors, both non-empty."""
    if u == v:
        return 1.0
    # fsum is exact, so the result does not depend on the order of the terms: symmetric.
    dot = math.fsum(u[k] * v[k] for k in u.keys() & v.keys())
    norms = math.fsum(x * x for x in u.values()) * math.fsum(x * x for x in v.values())
    return _clamp(dot / math.sqrt(norms))


def _simhash_of(weights: Mapping[str, float]) -> int:
    top = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:SIMHASH_KEYWORDS]
    if not top:
        return 0
    # Bit i is 1 when the words with bit i set outweigh the others: sum(set) > total / 2.
    set_weight = [0.0] * _BITS
    for word, weight in top:
        h = farmhash.fingerprint64(word)
        while h:
            low = h & -h
            set_weight[low.bit_length() - 1] += weight
            h ^= low
    half = math.fsum(weight for _, weight in top) / 2
    fingerprint = 0
    for bit, weight in enumerate(set_weight):
        if weight > half:
            fingerprint |= 1 << bit
    return fingerprint


def _cosine(x: _Text, y: _Text, stop_words: bool = True) -> float:
    cx, cy = _counts(x, y, stop_words)
    empty = _wordless(x, y, not cx, not cy)
    return empty if empty is not None else _cosine_of(cx, cy)


def _tfidf_cosine(x: _Text, y: _Text, stop_words: bool = True) -> float:
    empty = _wordless(x, y, not x.weights, not y.weights)
    return empty if empty is not None else _cosine_of(x.weights, y.weights)


def _simhash(x: _Text, y: _Text, stop_words: bool = True) -> float:
    empty = _wordless(x, y, not x.weights, not y.weights)
    if empty is not None:
        return empty
    return _clamp(1.0 - hamming_distance(x.fingerprint, y.fingerprint) / _BITS)


def _euclidean(x: _Text, y: _Text, stop_words: bool = True) -> float:
    cx, cy = _counts(x, y, stop_words)
    empty = _wordless(x, y, not cx, not cy)
    if empty is not None:
        return empty
    if cx == cy:
        return 1.0
    nx = math.sqrt(sum(c * c for c in cx.values()))
    ny = math.sqrt(sum(c * c for c in cy.values()))
    squares = math.fsum((cx[k] / nx - cy[k] / ny) ** 2 for k in cx.keys() | cy.keys())
    return _clamp(1.0 / (1.0 + math.sqrt(squares)))


def _common_words(x: _Text, y: _Text, stop_words: bool = True) -> float:
    cx, cy = _counts(x, y, stop_words)
    empty = _wordless(x, y, not cx, not cy)
    if empty is not None:
        return empty
    shared = sum((cx & cy).values())
    return _clamp(shared / max(sum(cx.values()), sum(cy.values())))


def _levenshtein(x: _Text, y: _Text, stop_words: bool = True) -> float:
    from rapidfuzz.distance import Levenshtein

    if x.squashed == y.squashed:
        return 1.0
    return _clamp(float(Levenshtein.normalized_similarity(x.squashed, y.squashed)))


_MEASURES: dict[str, Callable[[_Text, _Text, bool], float]] = {
    "cosine": _cosine,
    "tfidf_cosine": _tfidf_cosine,
    "simhash": _simhash,
    "euclidean": _euclidean,
    "common_words": _common_words,
    "levenshtein": _levenshtein,
}


def _metric_names(metrics: Sequence[str] | None) -> tuple[str, ...]:
    """Check the requested metric names; None means all of them."""
    if metrics is None:
        return METRICS
    if isinstance(metrics, str):
        metrics = (metrics,)
    valid = ", ".join(METRICS)
    try:
        names = tuple(dict.fromkeys(metrics))
    except TypeError as exc:
        raise ConfigError(
            f"Metrics must be a list of names, not {type(metrics).__name__!r}; "
            f"expected some of: {valid}."
        ) from exc
    if not names:
        raise ConfigError(f"No similarity metric given; expected one or more of: {valid}.")
    for name in names:
        if name not in _MEASURES:
            raise ConfigError(f"Unknown similarity metric {name!r}; expected one of: {valid}.")
    return names


def compare(
    a: str, b: str, metrics: Sequence[str] | None = None, *, stop_words: bool = True
) -> dict[str, float]:
    """Score two texts on several similarity measures at once, each in [0, 1].

    Each text is normalized and cut into words once, whatever the number of measures.

    Args:
        a: the first text.
        b: the second text.
        metrics: names from :data:`METRICS` (repeats are ignored); ``None`` for all of them.
        stop_words: drop the built-in stop words from the counts of ``cosine``,
            ``euclidean`` and ``common_words`` (the weighted measures always give them no
            weight; ``levenshtein`` compares characters).

    Returns:
        ``{metric: score}`` in the order asked for.

    Raises:
        ConfigError: a text is not a str, a metric name is unknown, or the ``similarity``
            extra (jieba) is not installed, whatever the texts' language.

    Example:
        >>> compare("the same words", "the same words")
        {'cosine': 1.0, 'tfidf_cosine': 1.0, 'simhash': 1.0, 'euclidean': 1.0, \
'common_words': 1.0, 'levenshtein': 1.0}
    """
    names = _metric_names(metrics)
    # The extra is needed whatever the language: checked here, not first on a Chinese text
    # (found, not imported: Latin text never loads jieba).
    jieba = sys.modules.get("jieba", ...)
    if jieba is None or (jieba is ... and importlib.util.find_spec("jieba") is None):
        raise ConfigError(
            "The similarity measures need jieba (for Chinese words), which is missing:"
            f" {install_hint('similarity')}"
        )
    x, y = _Text(a), _Text(b)
    return {name: _MEASURES[name](x, y, stop_words) for name in names}


def cosine(a: str, b: str, *, stop_words: bool = True) -> float:
    """The cosine of two texts' term-frequency vectors, in [0, 1].

    Args:
        a: the first text.
        b: the second text.
        stop_words: drop the built-in stop words (unless a text would keep no word).

    Example:
        Seed 000's word-count vectors [1, 2, 2, 1, 1, 1, 0] and [1, 2, 2, 1, 1, 2, 1]:

        >>> round(cosine("I like watch TV not like watch movies",
        ...              "I not like watch TV also not like watch movies", stop_words=False), 3)
        0.938
    """
    return _cosine(_Text(a), _Text(b), stop_words)


def tfidf_cosine(a: str, b: str) -> float:
    """The cosine of two texts' TF-IDF weight vectors, in [0, 1]."""
    return _tfidf_cosine(_Text(a), _Text(b))


def simhash(a: str, b: str) -> float:
    """``1 - d / 64``, d the Hamming distance of the texts' :func:`simhash_fingerprint`."""
    return _simhash(_Text(a), _Text(b))


def euclidean(a: str, b: str, *, stop_words: bool = True) -> float:
    """``1 / (1 + d)``, d the Euclidean distance of the texts' unit-length TF vectors.

    The vectors are scaled to length 1 first, so a text and the same text repeated twice
    score 1.0; on raw counts the distance would mostly measure the difference in length.
    Texts without common words are sqrt(2) apart and score 0.414.
    """
    return _euclidean(_Text(a), _Text(b), stop_words)


def common_words(a: str, b: str, *, stop_words: bool = True) -> float:
    """The word occurrences two texts share, over the longer text's number of words.

    Counted, not distinct: a word found twice in one text and three times in the other is
    shared twice.

    Example:
        >>> round(common_words("cat cat dog", "cat dog dog"), 3)
        0.667
    """
    return _common_words(_Text(a), _Text(b), stop_words)


def levenshtein(a: str, b: str) -> float:
    """``1 - d / max(len)``, d the character edit distance of the normalized texts.

    White space runs count as one space, so a change of line wrapping is no edit.
    """
    return _levenshtein(_Text(a), _Text(b))


def tfidf_weights(text: str) -> dict[str, float]:
    """The TF-IDF weight of each word of *text* (see the module docstring)."""
    return dict(_Text(text).weights)


def simhash_fingerprint(text: str) -> int:
    """The weighted 64-bit simhash of *text*: 0 for a text without words.

    Example:
        >>> simhash_fingerprint("same words") == simhash_fingerprint("ＳＡＭＥ words!")
        True
    """
    return _Text(text).fingerprint


def hamming_distance(x: int, y: int) -> int:
    """The number of bits in which two 64-bit fingerprints differ.

    Raises:
        ConfigError: a value is not an int in [0, 2**64).
    """
    for value in (x, y):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << _BITS:
            raise ConfigError(f"A fingerprint must be an int in [0, 2**64), not {value!r}.")
    return (x ^ y).bit_count()
