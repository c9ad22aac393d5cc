"""Text normalization: what counts as "the same text" to nshash.

Reposts differ from their original in ways a reader does not notice: full-width digits and
letters, punctuation of the other width, zero-width characters, line-break conventions, letter
case, traditional instead of simplified Chinese script. Normalization folds all of these away.

Two entry points:

* :func:`normalize_text` folds a whole text and keeps its layout (spaces, punctuation, line
  breaks). The similarity toolkit tokenizes its output.
* :func:`normalize_key` folds a sentence into a *key*: letters, digits and CJK characters only.
  Fingerprints are hashes of keys.

Both are idempotent: normalizing a normalized text changes nothing.
"""

from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache
from typing import Any

from rapidfuzz.utils import default_process

__all__ = [
    "fold_keys",
    "html_to_text",
    "nfkc",
    "normalize_key",
    "normalize_text",
    "strip_key",
    "strip_words",
    "to_simplified",
]

#: Zero-width and other format characters (Unicode category Cf) plus C0/C1 controls other than
#: the line breaks and tab, which :func:`normalize_text` unifies instead of dropping.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)
_LINE_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x85\u2028\u2029]")

#: A tag with well-formed attributes (so "a<b 且 b>c" is not one), a comment, or a
#: script/style element with its content. Block-level tags end a line.
_TAG = (
    r"<(/?)([a-zA-Z][a-zA-Z0-9]*)"
    r"(?:\s+[a-zA-Z_:][-\w:.]*(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'=<>`]+))?)*\s*/?>"
)
_MARKUP = re.compile(
    r"<(script|style|noscript|template)\b.*?</\1\s*>|<!--.*?-->|" + _TAG, re.S | re.I
)
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br dd div dl dt figcaption figure footer form h1 h2 h3 "
    "h4 h5 h6 header hr li main nav ol p pre section table td th tr ul".split()
)
_TAG_HINT = re.compile(_TAG)


def _markup(match: re.Match[str]) -> str:
    if match.group(1) or match.group(0).startswith("<!--"):
        return "\n"
    return "\n" if match.group(3).lower() in _BLOCK_TAGS else ""  # group 3: the tag name


def looks_like_html(text: str) -> bool:
    """Whether *text* holds at least one HTML tag (``<p>``, ``</div>``, ``<br/>``...)."""
    return "<" in text and _TAG_HINT.search(text) is not None


def html_to_text(text: str) -> str:
    """Return the text of an HTML fragment: tags dropped, block tags ending lines, entities decoded.

    A light reduction for article bodies that crawlers store with their markup; it is not an
    HTML parser (see :mod:`nshash.toolkit.soft404` for whole pages).

    Example:
        >>> html_to_text("<b>Markets</b> fell &amp; rose")
        'Markets fell & rose'
    """
    if "<" in text:
        text = _MARKUP.sub(_markup, text)
    if "&" in text:
        text = html.unescape(text)
    return text


#: The CJK blocks OpenCC's single characters are taken from: the BMP's, and the supplementary
#: ideographs (Extensions B to F and the compatibility supplement), about 900 of which OpenCC
#: converts too. Left out, a text whose only traditional character was one of those was never
#: converted, while the same character in a text with another was: its key depended on the
#: rest of the text.
_CJK_RANGES = ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00), (0x20000, 0x2FA20))


@lru_cache(maxsize=1)
def _converter() -> Any:
    """Build the OpenCC traditional-to-simplified converter once per process."""
    import opencc

    return opencc.OpenCC("t2s")


@lru_cache(maxsize=1)
def _traditional_chars() -> str:
    """The characters OpenCC changes on their own (about 4,000), from its own tables."""
    chars = [chr(c) for lo, hi in _CJK_RANGES for c in range(lo, hi)]
    converted = str(_converter().convert("\n".join(chars))).split("\n")
    if len(converted) != len(chars):  # pragma: no cover - defensive: converter changed shape
        return "".join(chars)
    return "".join(a for a, b in zip(chars, converted, strict=True) if a != b)


#: Any character past the BMP (rare in text; the supplementary ideographs among them).
_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")


@lru_cache(maxsize=1)
def _traditional() -> tuple[re.Pattern[str], frozenset[str]]:
    """A pattern matching any traditional character of the BMP, and the set of those past it.

    The two are apart because CPython's regex engine reads a character class that lists
    characters past the BMP one by one in a slow path, on every character of every text:
    listing the 900 supplementary ideographs in the class made this scan (and the text path
    of every non-ASCII document) about a hundred times slower.
    """
    chars = _traditional_chars()
    bmp = "".join(c for c in chars if c <= "\uffff")
    return re.compile(f"[{re.escape(bmp)}]"), frozenset(c for c in chars if c > "\uffff")


def _has_traditional(text: str) -> bool:
    """Whether *text* holds a character OpenCC converts on its own."""
    pattern, beyond = _traditional()
    if pattern.search(text):
        return True
    return any(c in beyond for c in _SUPPLEMENTARY.findall(text))


def to_simplified(text: str) -> str:
    """Fold traditional Chinese characters to simplified ones; other text passes unchanged."""
    if text.isascii() or not _has_traditional(text):
        return text
    return str(_converter().convert(text))


def strip_key(text: str) -> str:
    """Keep only the letters and digits of *text* (CJK characters included), lowercased.

    rapidfuzz's ``default_process`` does the work in C++: it lowercases and turns every other
    character into a space, which is then dropped. One call costs what CPython's regex engine
    spends on a few characters.
    """
    return str(default_process(text)).replace(" ", "")


def strip_words(text: str) -> list[str]:
    """The runs of letters and digits of *text* (CJK characters included), lowercased.

    :func:`strip_key` without dropping the word boundaries: what it would keep, split where
    it drops something. Fold them with :func:`fold_keys` (one per line) for their keys.
    """
    return str(default_process(text)).split()


@lru_cache(maxsize=1)
def _needs_work() -> re.Pattern[str]:
    """A pattern matching any character of the BMP that OpenCC or casefolding would change.

    Built once per process (tens of milliseconds): the traditional characters OpenCC converts
    one by one, every BMP character whose casefold is not itself, and everything beyond the
    BMP (rare; listing those characters one by one makes the regex engine many times slower
    on every character).
    """
    points = sorted(
        {ord(c) for c in _traditional_chars() if c <= "\uffff"}
        | {c for c in range(0x10000) if chr(c).casefold() != chr(c)}
    )
    ranges: list[str] = []
    start = prev = points[0]
    for point in [*points[1:], -1]:
        if point != prev + 1:
            first, last = re.escape(chr(start)), re.escape(chr(prev))
            ranges.append(first if start == prev else f"{first}-{last}")
            start = point
        prev = point
    # Everything past the BMP takes the slow path too: one range keeps the class fast (the
    # supplementary ideographs OpenCC converts are in it; listed one by one, they made every
    # scan about a hundred times slower).
    return re.compile("[" + "".join(ranges) + "\U00010000-\U0010ffff]")


#: Full-width ASCII forms and the ideographic space: by far the most common reason a crawled
#: text is not in NFKC. Their NFKC forms are the plain ASCII characters (offset 0xFEE0).
_FULLWIDTH = re.compile("[\uff01-\uff5e\u3000]+")


def _halfwidth(match: re.Match[str]) -> str:
    return "".join(" " if c == "\u3000" else chr(ord(c) - 0xFEE0) for c in match.group())


def nfkc(text: str) -> str:
    """Return ``unicodedata.normalize("NFKC", text)``, cheaply for the usual cases.

    Text already in NFKC is detected by a quick check; text whose only compatibility
    characters are full-width ASCII forms is fixed by a regex over those characters alone.
    """
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        return text
    folded = _FULLWIDTH.sub(_halfwidth, text)
    if unicodedata.is_normalized("NFKC", folded):
        return folded
    return unicodedata.normalize("NFKC", folded)


def _settle(key: str) -> str:
    """Normalize one stripped key the slow, certain way: repeat every step to a fixed point."""
    for _ in range(8):
        again = strip_key(nfkc(to_simplified(nfkc(key)).casefold()))
        if again == key:
            break
        key = again
    return key


def fold_keys(keys: str) -> str:
    """Normalize stripped keys (from :func:`strip_key`), one per line, in one go.

    The result is what :func:`normalize_key` gives for each line: NFKC, simplified script,
    casefolded, letters and digits only; a fixed point of both functions. Nearly all text
    needs none of it, and two C-speed scans of the whole string (the NFKC quick check and one
    character class) prove so; only lines that fail them take the slow, certain path.
    """
    if keys.isascii():
        return keys  # strip_key lowercased it; nothing else applies to ASCII
    check = _needs_work().search
    if unicodedata.is_normalized("NFKC", keys):
        if not check(keys):
            return keys
    else:
        # Full-width letters and digits (strip_key already lowercased them) are the usual
        # reason: their NFKC forms are plain ASCII, which nothing else changes.
        keys = _FULLWIDTH.sub(_halfwidth, keys)
        if _done(keys):
            return keys
    # One converter call for the whole text (a call per line costs far more); then two scans
    # prove most converted texts done (nine in ten of zh_hk_news), and only the lines of the
    # others that still fail the checks take the slow path.
    keys = to_simplified(keys)
    if _done(keys):
        return keys
    return "\n".join([k if k.isascii() or _done(k) else _settle(k) for k in keys.split("\n")])


def _done(text: str) -> bool:
    """Whether *text* needs no normalizing: in NFKC already, and holding no character that
    OpenCC or casefolding would change (the two C-speed scans :func:`fold_keys` proves with)."""
    return unicodedata.is_normalized("NFKC", text) and not _needs_work().search(text)


def normalize_key(text: str) -> str:
    """Return the key of *text*: NFKC, simplified script, casefolded, letters and digits only.

    Args:
        text: a sentence.

    Returns:
        The key; empty when *text* holds no letter or digit.

    Example:
        >>> normalize_key("２０２４年，資訊 Ｎｅｗｓ！")
        '2024年资讯news'
    """
    return fold_keys(strip_key(text.replace("\n", " ")))


def _fold_text_once(text: str) -> str:
    if not text.isascii():
        text = to_simplified(nfkc(_INVISIBLE.sub("", text)))
    return nfkc(_LINE_BREAKS.sub("\n", text).casefold())


def normalize_text(text: str) -> str:
    """Return *text* folded for comparison, keeping its words, punctuation and line breaks.

    Applies NFKC (full-width letters, digits and punctuation to plain forms), drops zero-width
    and control characters, turns every line break into ``\\n``, casefolds and converts
    traditional Chinese to simplified.

    Example:
        >>> normalize_text("ＡＢＣ\\r\\n資訊\\u200b！")
        'abc\\n资讯!'
    """
    text = _fold_text_once(text)
    for _ in range(4):
        again = _fold_text_once(text)
        if again == text:
            break
        text = again
    return text
