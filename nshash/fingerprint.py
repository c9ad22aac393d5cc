"""Fingerprints: text -> sentences -> keys -> 64-bit hashes. Pure functions, no I/O.

A document's fingerprint is a short list of sentence hashes. Sentences are split at Chinese and
Latin sentence ends and at line breaks; each sentence is reduced to its *key* (letters, digits
and CJK only, normalized by :func:`nshash.normalize.normalize_key`), so punctuation, spacing,
width and script changes never change a hash.

Only keys that will be hashed are normalized: ranking sentences by the length of their stripped
raw text gives the same order as ranking normalized keys (NFKC keeps the length of full-width
characters), and normalizing five sentences costs far less than normalizing a whole article.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import farmhash

from .errors import ConfigError, EmptyDocumentError
from .normalize import fold_keys

__all__ = [
    "CLAUSE_DELIMITERS",
    "DEFAULT_DELIMITERS",
    "DocPrint",
    "Fingerprinter",
    "HASHFUNCS",
    "split_sentences",
]

#: Sentence ends that always split (after NFKC the full-width forms equal the plain ones, but
#: splitting happens before normalization, so both forms are listed).
DEFAULT_DELIMITERS = "。！？；!?;｡\n\r\u2028\u2029\x0b\x0c\x85"

def _md5(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:8], "big")


#: Hash functions by name. Each maps a key to an unsigned 64-bit integer that is stable across
#: machines, processes and library versions.
HASHFUNCS: dict[str, Callable[[str], int]] = {"farmhash": farmhash.fingerprint64, "md5": _md5}

_STRIP = re.compile(r"[\W_]+").sub


#: Clause ends inside a sentence: the sketch cuts sentences here too, so that a typo spoils
#: one clause of a sentence rather than the whole sentence.
CLAUSE_DELIMITERS = ",，、:：\"“”「」『』()（）《》【】[]"


#: A period ends a sentence only before white space or the end, so 3.14 and example.com stay
#: whole; closing quotes and brackets may stand between.
_PERIOD = re.compile(r"[.．](?=[\"'”’)\]]*(?:\s|$))")


@lru_cache(maxsize=32)
def _splitter(delimiters: str) -> re.Pattern[str]:
    chars = "".join(re.escape(c) for c in dict.fromkeys(delimiters) if c != ".")
    return re.compile(f"[{chars}]+|{_PERIOD.pattern}" if chars else _PERIOD.pattern)


@lru_cache(maxsize=32)
def _run_splitter(delimiters: str) -> re.Pattern[str]:
    """One character class of sentence and clause ends, captured: the fast single pass.

    A single class is several times faster in CPython's regex engine than an alternation of
    two classes; whether a captured run ends a sentence is told afterwards from its characters.
    """
    chars = dict.fromkeys(delimiters.replace(".", "") + CLAUSE_DELIMITERS)
    return re.compile("([" + "".join(re.escape(c) for c in chars) + "]+)")


def split_sentences(text: str, delimiters: str = DEFAULT_DELIMITERS) -> list[str]:
    """Split *text* into sentences at sentence ends and line breaks; empty pieces are dropped.

    Example:
        >>> split_sentences("第一句。第二句！Pi is 3.14. End")
        ['第一句', '第二句', 'Pi is 3.14', ' End']
    """
    if not delimiters:
        raise ConfigError("delimiters must not be empty")
    return [s for s in _splitter(delimiters).split(text) if s and not s.isspace()]


@dataclass(frozen=True, slots=True)
class DocPrint:
    """What the store needs to place one document.

    Attributes:
        sentences: fingerprints of the qualifying sentence keys, longest first (ties by
            position), without repeats. The store takes the first ``n`` that are not known
            boilerplate as the document's anchors.
        sketch: fingerprints of every clause key (sentences cut further at commas, colons and
            quotes), sorted, without repeats. The store compares sketches to tell a real repost
            from an unrelated article that shares a boilerplate sentence.
        exact: the fingerprint of all the document's letters and digits, for exact repeats.
    """

    sentences: tuple[int, ...]
    sketch: tuple[int, ...]
    exact: int


class Fingerprinter:
    """Turns texts into :class:`DocPrint` values with one fixed configuration.

    Args:
        n: how many anchor fingerprints a document gets at most (the store picks them).
        min_length: the shortest sentence key, in characters, that may be an anchor.
        hashfunc: ``"farmhash"`` (``farmhash.fingerprint64``) or ``"md5"`` (first 8 bytes).
        delimiters: the characters that end a sentence (a period always ends one when a
            space or the end of the text follows).
        max_sentences: how many sentence fingerprints (longest first) a document keeps.
        clause_min: the shortest clause key, in characters, that enters the sketch.

    Raises:
        ConfigError: an argument is out of range or unknown.
    """

    def __init__(
        self,
        n: int = 5,
        min_length: int = 10,
        hashfunc: str = "farmhash",
        delimiters: str = DEFAULT_DELIMITERS,
        max_sentences: int = 32,
        clause_min: int = 4,
    ) -> None:
        for name, value in (("n", n), ("min_length", min_length), ("clause_min", clause_min)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        if hashfunc not in HASHFUNCS:
            raise ConfigError(f"Unknown hashfunc {hashfunc!r}; use one of {sorted(HASHFUNCS)}")
        if not isinstance(max_sentences, int) or max_sentences < n:
            raise ConfigError(f"max_sentences must be an integer >= n, not {max_sentences!r}")
        if not isinstance(delimiters, str) or not delimiters:
            raise ConfigError(f"delimiters must be a non-empty string, not {delimiters!r}")
        self.n = n
        self.min_length = min_length
        self.hashfunc = hashfunc
        self.delimiters = delimiters
        self.max_sentences = max_sentences
        self.clause_min = clause_min
        self._hash = HASHFUNCS[hashfunc]
        self._split = _run_splitter(delimiters).split
        self._clause_ends = "".join(c for c in CLAUSE_DELIMITERS if c not in delimiters)

    def _folded(self, text: str) -> str:
        """Return *text*'s normalized keys: sentences end with ``\n``, clauses with ``\x1f``."""
        if not isinstance(text, str):
            raise ConfigError(f"text must be a str, not {type(text).__name__}")
        if "." in text or "．" in text:
            text = _PERIOD.sub("\n", text)
        parts = self._split(text)
        clause_ends = self._clause_ends
        out: list[str] = []
        append = out.append
        strip = _STRIP
        # split() with a capturing group alternates piece, separator, piece, ...
        for i in range(0, len(parts) - 1, 2):
            piece = parts[i]
            if piece:
                if not piece.isalnum():
                    piece = strip("", piece)
                append(piece)
            # A separator run made only of clause ends leaves nothing when stripped of them.
            append("\n" if parts[i + 1].strip(clause_ends) else "\x1f")
        piece = parts[-1]
        if piece and not piece.isalnum():
            piece = strip("", piece)
        append(piece)
        return fold_keys("".join(out))

    def _pieces(self, text: str) -> tuple[list[str], list[str]]:
        """Return the sentence keys (in text order) and the clause keys of *text*.

        Raises:
            EmptyDocumentError: *text* holds no letter or digit.
        """
        folded = self._folded(text)
        sentences = [s for s in folded.replace("\x1f", "").split("\n") if s]
        if not sentences:
            raise EmptyDocumentError("the document has no letters or digits")
        clause_min = self.clause_min
        clauses = [c for c in folded.replace("\n", "\x1f").split("\x1f") if len(c) >= clause_min]
        return sentences, clauses

    def keys(self, text: str) -> list[str]:
        """Return the normalized keys of the qualifying sentences, longest first, no repeats.

        When no sentence is long enough, the key of the whole document is the only one.

        Raises:
            EmptyDocumentError: *text* holds no letter or digit.
        """
        sentences, _ = self._pieces(text)
        return self._ranked(sentences)

    def _ranked(self, sentences: list[str]) -> list[str]:
        min_length = self.min_length
        long_ = [k for k in sentences if len(k) >= min_length]
        if not long_:
            # Nothing qualifies but text remains: the whole document is the one key, so short
            # texts match only when equal after normalization.
            return ["".join(sentences)]
        long_.sort(key=len, reverse=True)  # stable: ties keep their position
        return list(dict.fromkeys(long_))[: self.max_sentences]

    def prepare(self, text: str) -> DocPrint:
        """Fingerprint *text* for the store.

        Raises:
            EmptyDocumentError: *text* holds no letter or digit.
            ConfigError: *text* is not a str.
        """
        sentences, clauses = self._pieces(text)
        h = self._hash
        ranked = tuple(map(h, self._ranked(sentences)))
        sketch = set(map(h, clauses)) if clauses else set(ranked)
        return DocPrint(sentences=ranked, sketch=tuple(sketch), exact=h("".join(sentences)))

    def fingerprints(self, text: str) -> list[int]:
        """Return the n longest sentence fingerprints of *text* (the seed's definition)."""
        return list(self.prepare(text).sentences[: self.n])
