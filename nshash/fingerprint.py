"""Fingerprints: text -> sentences -> keys -> 64-bit hashes. Pure functions, no I/O.

A document's fingerprint is a short list of sentence hashes. Sentences are split at Chinese and
Latin sentence ends and at line breaks; each sentence is reduced to its *key* (letters, digits
and CJK only, normalized as :func:`nshash.normalize.normalize_key` does), so punctuation,
spacing, width and script changes never change a hash.

Speed matters here (the job is microseconds per article): the text is keyed with a few
C-speed passes over the whole string (``str.replace`` for sentence ends, one call of
rapidfuzz's C++ preprocessing), and normalization is proven unnecessary by two quick scans for
nearly all text; see :func:`nshash.normalize.fold_keys`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import farmhash
from rapidfuzz.utils import default_process

from .errors import ConfigError, EmptyDocumentError
from .normalize import fold_keys, html_to_text, looks_like_html

__all__ = [
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

#: A period ends a sentence before white space or the end, so 3.14 and example.com stay whole
#: (closing quotes and brackets may stand between), and right after a Chinese character: a
#: repost that swaps 。 for its half-width form still splits where the original did.
_PERIOD = re.compile(r"[.．](?:(?=[\"'”’)\]]*(?:\s|$))|(?<=[\u3400-\u9fff\uf900-\ufaff][.．]))")


@lru_cache(maxsize=32)
def _splitter(delimiters: str) -> re.Pattern[str]:
    chars = "".join(re.escape(c) for c in dict.fromkeys(delimiters) if c != ".")
    return re.compile(f"[{chars}]+|{_PERIOD.pattern}" if chars else _PERIOD.pattern)


@lru_cache(maxsize=32)
def _sentence_ends(delimiters: str) -> tuple[str, ...]:
    """The delimiters other than the line break and the period (handled by its own rule)."""
    return tuple(c for c in dict.fromkeys(delimiters) if c not in ".\n")


#: A letter that survives rapidfuzz's preprocessing unchanged and that news text does not use
#: (U+A66E CYRILLIC LETTER MULTIOCULAR O): it stands for sentence ends while keying.
_SENTINEL = "\ua66e"

#: Per-length salts for the sketch, so that two sentences sharing their first or last
#: characters but of clearly different lengths ("习近平强调，..." in many articles) differ.
_SALT_MASK = (1 << 64) - 1
_PREFIX_SALT = tuple((i * 0x9E3779B97F4A7C15) & _SALT_MASK for i in range(256))
#: Salts that turn one sketch element into several distinct ones (a sentence's weight).
_COPIES = tuple((i * 0xD6E8FEB86659FD93 + 0x2545F4914F6CDD1D) & _SALT_MASK for i in range(1, 257))
_SUFFIX_SALT = tuple((i * 0xC2B2AE3D27D4EB4F + 0x165667B19E3779F9) & _SALT_MASK for i in range(256))


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
        sentences: fingerprints of the longest sentence keys (``n`` plus a few spares),
            longest first (ties by position), without repeats. The store takes the first
            ``n`` that are not known boilerplate as the document's anchors.
        sketch: a set of hashes describing the whole document, compared between a document
            and a group to tell a real repost from an unrelated article that shares a
            boilerplate sentence. Each sentence key of at least ``sketch_min`` characters
            gives two: its first and its last ``sketch_width`` characters, each salted with
            the key's length in steps of 8, and one more salted copy of each per
            ``sketch_unit`` characters, so that a sentence weighs by its length. A typo
            spoils one end of one sentence; an unrelated sentence with a common opening
            ("习近平强调") differs in length.
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
        max_sentences: how many of the longest sentences give anchor candidates (default
            ``n + 3``: a few spares for sentences the store knows to be boilerplate).
        sketch_min: the shortest sentence key that enters the sketch.
        sketch_width: how many characters of each end of a sentence key the sketch hashes.
        sketch_unit: a sentence adds one more pair of sketch elements per this many
            characters (its weight).
        html: reduce HTML to text first: ``True``, ``False``, or ``"auto"`` (the default:
            when the text holds a tag), so a repost stored with its markup keys like the
            plain copy.

    Raises:
        ConfigError: an argument is out of range or unknown.
    """

    def __init__(
        self,
        n: int = 5,
        min_length: int = 10,
        hashfunc: str = "farmhash",
        delimiters: str = DEFAULT_DELIMITERS,
        max_sentences: int | None = None,
        sketch_min: int = 8,
        sketch_width: int = 8,
        sketch_unit: int = 32,
        html: bool | str = "auto",
    ) -> None:
        for name, value in (
            ("n", n),
            ("min_length", min_length),
            ("sketch_min", sketch_min),
            ("sketch_width", sketch_width),
            ("sketch_unit", sketch_unit),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
        if hashfunc not in HASHFUNCS:
            raise ConfigError(f"Unknown hashfunc {hashfunc!r}; use one of {sorted(HASHFUNCS)}")
        if max_sentences is None:
            max_sentences = n + 3
        if not isinstance(max_sentences, int) or max_sentences < n:
            raise ConfigError(f"max_sentences must be an integer >= n, not {max_sentences!r}")
        if html not in (True, False, "auto"):
            raise ConfigError(f"html must be True, False or 'auto', not {html!r}")
        if not isinstance(delimiters, str) or not delimiters:
            raise ConfigError(f"delimiters must be a non-empty string, not {delimiters!r}")
        self.n = n
        self.min_length = min_length
        self.hashfunc = hashfunc
        self.delimiters = delimiters
        self.max_sentences = max_sentences
        self.sketch_min = sketch_min
        self.sketch_width = sketch_width
        self.sketch_unit = sketch_unit
        self.html = html
        self._hash = HASHFUNCS[hashfunc]
        self._ends = _sentence_ends(delimiters)

    def sentence_keys(self, text: str) -> list[str]:
        """Return the normalized keys of *text*'s sentences, in text order, empty ones dropped.

        Raises:
            ConfigError: *text* is not a str.
            EmptyDocumentError: *text* holds no letter or digit.
        """
        if not isinstance(text, str):
            raise ConfigError(f"text must be a str, not {type(text).__name__}")
        if self.html is True or (self.html == "auto" and looks_like_html(text)):
            text = html_to_text(text)
        if "." in text or "．" in text:
            text = _PERIOD.sub("\n", text)
        for end in self._ends:
            if end in text:
                text = text.replace(end, "\n")
        # rapidfuzz's C++ preprocessing keeps letters and digits (lowercased) and blanks the
        # rest, in one call for the whole text: sentence ends survive it as a letter no news
        # text uses (should one occur, the text just has one more sentence break there).
        keys = default_process(text.replace("\n", _SENTINEL)).replace(" ", "")
        keys = keys.replace(_SENTINEL, "\n")
        sentences = [k for k in fold_keys(keys).split("\n") if k]
        if not sentences:
            raise EmptyDocumentError("the document has no letters or digits")
        return sentences

    def keys(self, text: str) -> list[str]:
        """Return the normalized keys of the qualifying sentences, longest first, no repeats.

        When no sentence is long enough, the key of the whole document is the only one.

        Raises:
            EmptyDocumentError: *text* holds no letter or digit.
        """
        return self._ranked(self.sentence_keys(text))

    def _ranked(self, sentences: list[str]) -> list[str]:
        min_length = self.min_length
        long_ = [k for k in sentences if len(k) >= min_length]
        if not long_:
            # Nothing qualifies but text remains: the whole document is the one key, so short
            # texts match only when equal after normalization. Joining keys can make what
            # NFKC composes (Hangul jamo on either side of a break): fold the join again.
            return [fold_keys("".join(sentences))]
        long_.sort(key=len, reverse=True)  # stable: ties keep their position
        return list(dict.fromkeys(long_))[: self.max_sentences]

    def prepare(self, text: str) -> DocPrint:
        """Fingerprint *text* for the store.

        Raises:
            EmptyDocumentError: *text* holds no letter or digit.
            ConfigError: *text* is not a str.
        """
        sentences = self.sentence_keys(text)
        h = self._hash
        least, width = self.sketch_min, self.sketch_width
        ps, ss = _PREFIX_SALT, _SUFFIX_SALT
        sketch: set[int] = set()
        add = sketch.add
        unit, copies = self.sketch_unit, _COPIES
        for k in sentences:
            size = len(k)
            if size < least:
                continue
            bucket = (size >> 3) & 255  # lengths past 2,040 characters wrap: harmless
            head = h(k[:width]) ^ ps[bucket]
            tail = h(k[-width:]) ^ ss[bucket]
            add(head)
            add(tail)
            # A sentence weighs as much as its length: one more pair of elements per
            # sketch_unit characters, so a long story sentence outweighs a footer line.
            for salt in copies[: size // unit]:
                add(head ^ salt)
                add(tail ^ salt)
        ranked = tuple(map(h, self._ranked(sentences)))
        return DocPrint(
            sentences=ranked,
            sketch=tuple(sketch) if sketch else ranked,
            exact=h("".join(sentences)),
        )

    def fingerprints(self, text: str) -> list[int]:
        """Return the fingerprints of the n longest sentences of *text* (the seed's definition)."""
        return list(self.prepare(text).sentences[: self.n])
