"""Fingerprints: text -> sentence keys -> a stream -> shingles -> anchors and a sketch.

Sentences are split at Chinese and Latin sentence ends and at line breaks; each sentence is
reduced to its *key* (letters, digits and CJK only, normalized as
:func:`nshash.text.normalize.normalize_key` does), so punctuation, spacing, width and script changes
never change a hash. The keys joined end to end are the document's *stream*: where the lines
break (a repost re-wrapped at another width) no longer matters either.

A *shingle* is a short window of the stream, starting at every character, just long enough to
weigh ``shingle`` units (a CJK character weighs 3, any other letter or digit ``letter_units``,
2 by default: about 8 Chinese characters or 12 English letters, 2 to 3 words). Every shingle
gets a 64-bit rolling hash. Two samples of those hashes describe the document, and both are
*consistent*: the same text yields the same picks in any document that holds it, whatever
surrounds it.

* The **anchors** are the shingles of the smallest hashes (a bottom-k sample). A copy that keeps
  only a third of the text, re-wrapped, with promotional lines between its paragraphs, still has
  several of the original's smallest shingles among its own smallest.
* The **sketch** is every shingle hash whose low bits are zero (one in ``sketch_rate``), so its
  size follows the document's length and a truncated copy's sketch is nearly contained in the
  original's: the store verifies a candidate by that containment.

Speed matters here (the job is microseconds per article): the text is keyed with a few
C-speed passes over the whole string (``str.replace`` for sentence ends, one call of
rapidfuzz's C++ preprocessing), and normalization is proven unnecessary by two quick scans for
nearly all text; see :func:`nshash.text.normalize.fold_keys`.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import zip_longest
from typing import TYPE_CHECKING, Any

import farmhash
from rapidfuzz.utils import default_process

from ..errors import ConfigError, EmptyDocumentError
from .kernel import compile_kernel, compiled_function
from .normalize import fold_keys, html_to_text, looks_like_html

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_DELIMITERS",
    "DocPrint",
    "Fingerprinter",
    "HASHFUNCS",
    "LETTER_UNITS",
    "MOST_SETTING",
    "NARROW_BITS",
    "PLACES",
    "SKETCH_BITS",
    "narrow",
    "narrow_pure",
    "places_of",
    "read_places",
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

#: Sketch values keep the top 53 bits of a shingle hash: they stay exact as Lua numbers (the
#: Redis script compares them) and as JSON numbers.
SKETCH_BITS = 53

#: A sketch value above every real one: "no limit" for a sketch that is not cut short.
NO_LIMIT = 1 << SKETCH_BITS

#: The array type code of :attr:`DocPrint.places`: native unsigned 32-bit words.
PLACES = "I"

#: The sketch values a compact store keeps: the top 31 bits of the same hashes (see
#: :func:`narrow`). Measured on every shared evaluation set, the guard decides exactly as
#: with 53 bits, and a value takes 4 bytes instead of 8 (a Redis set of them is an intset
#: of 32-bit integers).
NARROW_BITS = 31
_NARROW_SHIFT = SKETCH_BITS - NARROW_BITS

#: The rolling hash: sum of code point * B**i over a window, mod 2**64, then a 64-bit finalizer
#: (MurmurHash3's fmix64). Any machine computes the same values.
_B = 0x100000001B3
_B_INV = pow(_B, -1, 1 << 64)
#: numpy is imported by the pure path only (the compiled kernel needs none of it: a process
#: that never runs the pure path never starts numpy's threads).
_MIX1, _MIX2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
_SALT = 0x9E3779B97F4A7C15
_S_SKETCH = 64 - SKETCH_BITS

#: A page whose sketch values reach this far into its keyed stream (a value's place, in
#: characters) is long (:func:`is_long`). A 20,000-character page whose story is its first
#: 2,000 (then comments, then its site's infinite scroll) has few of its smallest hashes in
#: its story, so its ``n`` anchors would mostly miss the story's copies. A long page offers
#: the anchor candidates of its top (its first 1/:data:`TOP_PART`) beside those of the whole
#: page, in turn (:func:`interleave`), and a store takes twice as many anchors of it
#: (:func:`anchors_wanted`): ``n`` as a shorter page would, and ``n`` from its top. The
#: guard's top rule (``assign.misses_top``) reads long pages by the same measure.
LONG_PAGE = 8000
TOP_PART = 8

#: The largest value of each count setting (far past any useful one: a value past it would
#: only exhaust memory, or not fit the text kernel's integers).
MOST_SETTING = {
    "n": 1 << 16,
    "max_sentences": (1 << 16) + 8,
    "min_length": 1 << 20,
    "shingle": 1 << 20,
    "letter_units": 1 << 10,
    "sketch_rate": 1 << 30,
    "sketch_size": 1 << 20,
    "sketch_cap": 1 << 20,
    "min_overlap": 1 << 20,
}

#: Code points from here up weigh 3 units in a shingle (CJK, kana, Hangul); every other code
#: point weighs the Fingerprinter's ``letter_units`` (:data:`LETTER_UNITS` by default).
_WIDE = 0x2E80
_WIDE_UNITS = 3

#: The units a letter or digit below the wide range weighs in a shingle by default: 12 English
#: letters to a shingle of 24 units, so a copy with a typo every 25 letters still keeps about
#: 60% of its shingles (at 1 unit, 24 letters, only 37%). Stores begun before this setting
#: existed hold fingerprints made with 1 (see :meth:`nshash.Store.letter_units`).
LETTER_UNITS = 2


class _Powers:
    """B**i and B**-i mod 2**64 for i < n, grown on demand (shared, read-only arrays)."""

    def __init__(self) -> None:
        self.up: np.ndarray | None = None
        self.down: np.ndarray | None = None

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        if self.up is None or self.down is None or len(self.up) < n:
            have = 0 if self.up is None else len(self.up)
            size = max(n, 2 * have, 4096)
            with np.errstate(over="ignore"):
                up = np.cumprod(np.full(size, _B, dtype=np.uint64))
                down = np.cumprod(np.full(size, _B_INV, dtype=np.uint64))
            one = np.ones(1, dtype=np.uint64)
            self.up = np.concatenate((one, up[:-1]))
            self.down = np.concatenate((one, down[:-1]))
        return self.up[:n], self.down[:n]


_POWERS = _Powers()


def shingle_hashes(
    stream: str, width: int, letter_units: int = LETTER_UNITS
) -> tuple[np.ndarray, np.ndarray] | None:
    """The 64-bit hash and the end of every shingle of *stream*, in order of their starts.

    A shingle starts at every character and ends as soon as it weighs *width* units (a wide
    character 3, any other *letter_units*); starts too close to the end for a whole shingle
    give none. Returns None when the whole stream weighs less than one shingle.
    """
    import numpy as np

    mix1, mix2, salt, s33 = np.uint64(_MIX1), np.uint64(_MIX2), np.uint64(_SALT), np.uint64(33)
    codes = np.frombuffer(stream.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    units = np.where(codes >= _WIDE, _WIDE_UNITS, letter_units)
    weight = np.cumsum(units)
    total = int(weight[-1])
    if total < width:
        return None
    before = weight - units  # units before each start
    starts = int(np.searchsorted(before, total - width, side="right"))
    ends = np.searchsorted(weight, before[:starts] + width, side="left") + 1
    up, down = _POWERS.get(len(codes))
    with np.errstate(over="ignore"):
        prefix = np.cumsum(codes * up)
        below = np.concatenate((np.zeros(1, dtype=np.uint64), prefix[: starts - 1]))
        h = (prefix[ends - 1] - below) * down[:starts] ^ salt
        h ^= h >> s33
        h *= mix1
        h ^= h >> s33
        h *= mix2
        h ^= h >> s33
    return h, ends


def split_sentences(text: str, delimiters: str = DEFAULT_DELIMITERS) -> list[str]:
    """Split *text* into sentences at sentence ends and line breaks; empty pieces are dropped.

    Example:
        >>> split_sentences("第一句。第二句！Pi is 3.14. End")
        ['第一句', '第二句', 'Pi is 3.14', ' End']
    """
    if not delimiters:
        raise ConfigError("delimiters must not be empty")
    return [s for s in _splitter(delimiters).split(text) if s and not s.isspace()]


class _Packed:
    """The slot in which the text kernel hands over a :class:`DocPrint`'s anchors and sketch.

    The compiled kernel sets ``_packed`` (their count, the anchors and the sketch values as
    native 64-bit words) and leaves ``sentences`` and ``sketch`` unset: the compiled
    assignment reads the words themselves, and the tuples of ints are made only when Python
    first reads them (``DocPrint.__getattr__``). A DocPrint made by its ``__init__`` never
    has it.
    """

    __slots__ = ("_packed",)


def _unpacked(packed: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The anchors and the sketch of the kernel's packed words."""
    words = memoryview(packed).cast("Q")
    n = words[0] + 1
    return tuple(words[1:n]), tuple(words[n:])


def _fingerprints(h: Callable[[str], int], stream: str, picks: Any, ends: Any) -> list[int]:
    """The fingerprints of the shingles of *stream* that start at *picks* (numpy indexes)."""
    starts = picks.tolist()
    return [h(stream[i:e]) for i, e in zip(starts, ends[picks].tolist(), strict=True)]


def interleave(top: Sequence[int], whole: Sequence[int], most: int) -> tuple[int, ...]:
    """A long page's anchor candidates: those of its top and those of the whole page taken in
    turn (the top's first), without repeats, at most *most* (see :data:`LONG_PAGE`).

    Example:
        >>> interleave((1, 2, 3), (4, 1, 5, 6), 5)
        (1, 4, 2, 3, 5)
    """
    out: dict[int, None] = {}
    for pair in zip_longest(top, whole):
        for h in pair:
            if h is not None:
                out[h] = None
    return tuple(out)[:most]


@dataclass(frozen=True, slots=True)
class DocPrint(_Packed):
    """What the store needs to place one document.

    Attributes:
        sentences: the anchor candidates: fingerprints of the shingles with the smallest
            rolling hashes (``n`` plus a few spares), smallest first, without repeats. The
            store takes the first ``n`` that are not known boilerplate as the anchors.
            (The name is the first release's, whose anchors were whole sentences.)
        sketch: the sampled shingle hashes (:data:`SKETCH_BITS` bits each), ascending, at
            most ``sketch_size`` of them: compared between a document and a group to tell a
            real repost from an unrelated article that shares a boilerplate passage.
        exact: the fingerprint of all the document's letters and digits, for exact repeats.
        limit: the sketch holds every sampled value below this one. A long document's sketch
            is cut to its smallest values, so only values below ``limit`` are compared;
            :data:`NO_LIMIT` when nothing was cut.
        places: where each sketch value lies in the page: for ``sketch[i]``, the start (in
            characters of the keyed stream) of the first shingle that gave it, as native
            unsigned 32-bit words (:data:`PLACES`), in the sketch's order. The guard reads
            them to tell a page's frame from its story (see
            :func:`nshash.methods.nshash.assign.set_aside`); empty when unknown (a DocPrint
            made by hand), and the guard then reads no frame.
    """

    sentences: tuple[int, ...]
    sketch: tuple[int, ...]
    exact: int
    limit: int = NO_LIMIT
    places: bytes = b""

    if not TYPE_CHECKING:  # (a __getattr__ would let any attribute pass the type checks)

        def __getattr__(self, name: str) -> Any:
            # Reached only for an unset slot: the anchors and sketch of a DocPrint the text
            # kernel made, still packed (see _Packed), are made into tuples on first read.
            if name in ("sentences", "sketch"):
                try:
                    packed = object.__getattribute__(self, "_packed")
                except AttributeError:
                    pass
                else:
                    sentences, sketch = _unpacked(packed)
                    object.__setattr__(self, "sentences", sentences)
                    object.__setattr__(self, "sketch", sketch)
                    return sentences if name == "sentences" else sketch
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


def packed_words(doc: DocPrint) -> bytes:
    """*doc*'s anchors and sketch as the text kernel packs them (see :class:`_Packed`): the
    anchor count, the anchors and the sketch values, native 64-bit words.

    The kernel's own words when it made *doc* (no int is read), else packed from the tuples.
    :func:`from_packed` makes the DocPrint back; ``dedup --jobs N`` sends these words from
    its workers, so the parent never makes the values into ints.

    Raises:
        OverflowError: a value does not fit in 64 bits (never one the pipeline made).
    """
    words: bytes | None = getattr(doc, "_packed", None)
    if words is None:
        words = array("Q", (len(doc.sentences), *doc.sentences, *doc.sketch)).tobytes()
    return words


_new_object = object.__new__
_set_slot = object.__setattr__


def from_packed(words: bytes, exact: int, limit: int = NO_LIMIT, places: bytes = b"") -> DocPrint:
    """The DocPrint of *words* (from :func:`packed_words`), made as the kernel makes one: its
    anchors and sketch stay packed until Python reads them, and the compiled assignment
    reads the words themselves."""
    doc: DocPrint = _new_object(DocPrint)
    _set_slot(doc, "_packed", words)
    _set_slot(doc, "exact", exact)
    _set_slot(doc, "limit", limit)
    _set_slot(doc, "places", places)
    return doc


#: The compiled narrow (the text kernel's), or None on the pure path.
_NARROW = compiled_function("narrow")


def narrow(doc: DocPrint) -> DocPrint:
    """*doc* with its sketch as a compact store compares it: each value's top
    :data:`NARROW_BITS` bits, and the limit likewise (:data:`NO_LIMIT` stays as it is).

    The shift keeps the values ascending; two values that become one are kept once, and a
    value that becomes the limit is dropped (the values at the limit were cut, so only those
    below it are whole). The anchors and the exact fingerprint are unchanged. Compiled where
    the text kernel is built (every document a compact store places passes here), else
    :func:`narrow_pure`; the answers are equal."""
    if _NARROW is not None and type(doc) is DocPrint:
        found: DocPrint | None = _NARROW(doc, _NARROW_SHIFT, NO_LIMIT)
        if found is not None:
            return found
    return narrow_pure(doc)


def narrow_pure(doc: DocPrint) -> DocPrint:
    """:func:`narrow` in Python: what the compiled one must equal."""
    shift = _NARROW_SHIFT
    limit = doc.limit if doc.limit >= NO_LIMIT else doc.limit >> shift
    # Each narrow value and its place: the first (least) place of the values it stands for.
    had = places_of(doc)
    first: dict[int, int] = {}
    for i, v in enumerate(doc.sketch):
        w = v >> shift
        p = had[i] if had else 0
        first[w] = min(first.get(w, p), p)
    values = tuple(first)
    if values and values[-1] >= limit:
        kept = tuple(v for v in values if v < limit)
        # Every value in the limit's bucket (a cut in a run of equal top bits: never seen on
        # real text) keeps the sketch whole by moving the limit past them.
        values, limit = (kept, limit) if kept else (values, values[-1] + 1)
    places = array(PLACES, (first[v] for v in values)).tobytes() if had else b""
    return DocPrint(doc.sentences, values, doc.exact, limit, places)


def places_of(doc: DocPrint) -> list[int]:
    """*doc*'s :attr:`~DocPrint.places` as ints, one for each sketch value (empty when it has
    none, or not one for each value)."""
    return read_places(doc.places, len(doc.sketch))


def read_places(places: bytes, count: int) -> list[int]:
    """*places* (:attr:`DocPrint.places`' words) as ints when they are *count* of them, else
    empty: places of the wrong length (a hand-made DocPrint) read as none."""
    at = array(PLACES)
    if not places or len(places) != count * at.itemsize:
        return []
    at.frombytes(places)
    return at.tolist()


def is_long(places: bytes, count: int) -> bool:
    """Whether a page whose *count* sketch values lie at *places* (:attr:`DocPrint.places`)
    is long: its values reach :data:`LONG_PAGE` into its stream (without places, not)."""
    at = read_places(places, count)
    return bool(at) and max(at) >= LONG_PAGE


def anchors_wanted(doc: DocPrint, n: int) -> int:
    """How many of *doc*'s anchor candidates a store takes as its anchors (the first that are
    not common): *n*, or twice *n* for a long page (:data:`LONG_PAGE`), whose candidates are
    those of its top and of the whole page in turn.

    Example:
        >>> anchors_wanted(DocPrint((1, 2), (5,), 9), 16)
        16
    """
    return 2 * n if is_long(doc.places, len(doc.sketch)) else n


class Fingerprinter:
    """Turns texts into :class:`DocPrint` values with one fixed configuration.

    Args:
        n: how many anchors a document gets at most (the store picks them).
        min_length: the shortest sentence key, in characters, that :meth:`keys` and
            :meth:`fingerprints` (the first release's sentence anchors) consider.
        hashfunc: ``"farmhash"`` (``farmhash.fingerprint64``) or ``"md5"`` (first 8 bytes):
            the fingerprint of an anchor's shingle and of the whole text.
        delimiters: the characters that end a sentence (a period always ends one when a
            space or the end of the text follows).
        max_sentences: how many anchor candidates a document offers (default ``n + 8``:
            spares for shingles the store knows to be boilerplate); a long page offers up to
            twice as many, those of its top and of the whole page (:data:`LONG_PAGE`).
        shingle: a shingle's weight in units (a CJK character weighs 3, other letters and
            digits ``letter_units``). Shorter shingles survive denser edits; longer ones are
            rarer by chance.
        letter_units: the units a letter or digit below the CJK range weighs in a shingle
            (default :data:`LETTER_UNITS`, 2: an English shingle is 12 letters). Fingerprints
            made with different values never match: a store keeps the value it was begun
            with (see :meth:`nshash.Store.letter_units`).
        sketch_rate: one shingle hash in this many (a power of two) enters the sketch.
        sketch_size: the sketch keeps at most this many values (the smallest).
        html: reduce HTML to text first: ``True``, ``False``, or ``"auto"`` (the default:
            when the text holds a tag), so a repost stored with its markup keys like the
            plain copy.

    Raises:
        ConfigError: an argument is out of range or unknown.
    """

    def __init__(
        self,
        n: int = 16,
        min_length: int = 10,
        hashfunc: str = "farmhash",
        delimiters: str = DEFAULT_DELIMITERS,
        max_sentences: int | None = None,
        shingle: int = 24,
        sketch_rate: int = 8,
        sketch_size: int = 256,
        html: bool | str = "auto",
        letter_units: int = LETTER_UNITS,
    ) -> None:
        for name, value in (
            ("n", n),
            ("min_length", min_length),
            ("shingle", shingle),
            ("letter_units", letter_units),
            ("sketch_rate", sketch_rate),
            ("sketch_size", sketch_size),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}")
            if value > MOST_SETTING[name]:
                raise ConfigError(
                    f"{name} must be an integer from 1 to {MOST_SETTING[name]}, not {value!r}"
                )
        if sketch_rate & (sketch_rate - 1):
            raise ConfigError(f"sketch_rate must be a power of two, not {sketch_rate!r}")
        if hashfunc not in HASHFUNCS:
            raise ConfigError(f"Unknown hashfunc {hashfunc!r}; use one of {sorted(HASHFUNCS)}")
        if max_sentences is None:
            max_sentences = n + 8
        if (
            not isinstance(max_sentences, int)
            or isinstance(max_sentences, bool)
            or not n <= max_sentences <= MOST_SETTING["max_sentences"]
        ):
            raise ConfigError(
                f"max_sentences must be an integer from n to {MOST_SETTING['max_sentences']},"
                f" not {max_sentences!r}"
            )
        if html not in (True, False, "auto"):
            raise ConfigError(f"html must be True, False or 'auto', not {html!r}")
        if not isinstance(delimiters, str) or not delimiters:
            raise ConfigError(f"delimiters must be a non-empty string, not {delimiters!r}")
        self.n = n
        self.min_length = min_length
        self.hashfunc = hashfunc
        self.delimiters = delimiters
        self.max_sentences = max_sentences
        self.shingle = shingle
        self.letter_units = letter_units
        self.sketch_rate = sketch_rate
        self.sketch_size = sketch_size
        self.html = html
        self._hash = HASHFUNCS[hashfunc]
        self._ends = _sentence_ends(delimiters)
        self._kernel = self._compile()

    def _compile(self) -> Any:
        """The compiled kernel for this configuration, or None: the pure path runs."""
        return compile_kernel(
            ends="".join(self._ends) + "\n" + _SENTINEL,
            shingle=self.shingle,
            wide=_WIDE,
            wide_units=_WIDE_UNITS,
            narrow_units=self.letter_units,
            max_sentences=self.max_sentences,
            long_page=LONG_PAGE,
            top_part=TOP_PART,
            sketch_rate=self.sketch_rate,
            sketch_size=self.sketch_size,
            sketch_bits=SKETCH_BITS,
            base=_B,
            salt=_SALT,
            hashfunc=self._hash,
            fold=fold_keys,
            docprint=DocPrint,
            period=_PERIOD.pattern,
        )

    @property
    def compiled(self) -> bool:
        """Whether :meth:`prepare` runs the compiled kernel (see :func:`nshash.kernel_info`)."""
        return self._kernel is not None

    def plain_prepare(self) -> tuple[Callable[[str], DocPrint | None], bool] | None:
        """What :meth:`prepare` runs for a str it reads as plain text: the compiled kernel's
        own call (it returns None where a text takes the Python path), and whether a str
        holding ``<`` is read otherwise (``html="auto"``: such a text must go through
        :meth:`prepare`). None without the kernel, or with ``html=True``.

        For a caller that fingerprints a checked str on its hot path without this method's
        Python frame (see :meth:`nshash.methods.nshash.memory.MemoryStore.placer`).
        """
        if self._kernel is None or self.html is True:
            return None
        return self._kernel.prepare, self.html == "auto"

    def __getstate__(self) -> dict[str, Any]:
        # The compiled kernel does not pickle; a worker process compiles its own.
        return {k: v for k, v in self.__dict__.items() if k != "_kernel"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._kernel = self._compile()

    def sentence_keys(self, text: str) -> list[str]:
        """Return the normalized keys of *text*'s sentences, in text order, empty ones dropped.

        Raises:
            ConfigError: *text* is not a str.
            EmptyDocumentError: *text* holds no letter or digit.
        """
        return self._sentence_keys(self._plain(text))

    def _plain(self, text: str) -> str:
        """*text* checked, and reduced to text if it is HTML (by the ``html`` setting)."""
        if not isinstance(text, str):
            raise ConfigError(f"text must be a str, not {type(text).__name__}")
        if self.html is True or (self.html == "auto" and looks_like_html(text)):
            text = html_to_text(text)
        return text

    def _sentence_keys(self, text: str) -> list[str]:
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
        html = self.html  # (_plain is called only where it may change or refuse the text)
        if html is True or not isinstance(text, str) or (html == "auto" and "<" in text):
            text = self._plain(text)
        if self._kernel is not None:
            found: DocPrint | None = self._kernel.prepare(text)
            if found is not None:
                return found
        return self._prepare_pure(text)

    def prepare_pure(self, text: str) -> DocPrint:
        """:meth:`prepare` on the pure-Python path, whichever path is active: what the
        compiled kernel must equal, bit for bit."""
        return self._prepare_pure(self._plain(text))

    def _prepare_pure(self, text: str) -> DocPrint:
        import numpy as np

        stream = "".join(self._sentence_keys(text))
        h = self._hash
        exact = h(stream)
        found = shingle_hashes(stream, self.shingle, self.letter_units)
        if found is None:
            # Shorter than one shingle: the whole text is the one anchor, so short texts match
            # only when equal after normalization.
            return DocPrint((exact,), (exact >> (64 - SKETCH_BITS),), exact)
        hashes, ends = found
        m = self.max_sentences
        if len(hashes) > m:
            picks = np.argpartition(hashes, m - 1)[:m]
            picks = picks[np.argsort(hashes[picks], kind="stable")]
        else:
            picks = np.argsort(hashes, kind="stable")
        anchors = tuple(dict.fromkeys(_fingerprints(h, stream, picks, ends)))
        shift = np.uint64(_S_SKETCH)
        at = np.flatnonzero((hashes & np.uint64(self.sketch_rate - 1)) == 0)
        # np.unique's index is each value's first occurrence: its place in the stream.
        sampled, first = np.unique(hashes[at] >> shift, return_index=True)
        places = at[first]
        limit = NO_LIMIT
        if len(sampled) > self.sketch_size:
            limit = int(sampled[self.sketch_size])
            sampled = sampled[: self.sketch_size]
            places = places[: self.sketch_size]
        if not len(sampled):
            least = int(np.argmin(hashes))
            sampled, places = hashes[least : least + 1] >> shift, np.array([least])
        if int(places.max()) >= LONG_PAGE:  # its top's anchors too
            picks = np.argsort(hashes[: len(stream) // TOP_PART], kind="stable")[:m]
            top = tuple(dict.fromkeys(_fingerprints(h, stream, picks, ends)))
            anchors = interleave(top, anchors, 2 * m)
        sketch = tuple(sampled.tolist())
        return DocPrint(anchors, sketch, exact, limit, places.astype(np.uint32).tobytes())

    def fingerprints(self, text: str) -> list[int]:
        """Return the fingerprints of the n longest sentences of *text* (the seed's definition)."""
        return list(self.prepare(text).sentences[: self.n])
