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

import re
import unicodedata
from functools import lru_cache
from typing import Any

__all__ = ["fold_keys", "nfkc", "normalize_key", "normalize_text", "strip_key", "to_simplified"]

#: Characters that are not part of a key: everything but letters, digits and CJK ideographs.
#: ``\W`` is the complement of Unicode word characters; ``_`` is a word character, so add it.
_NON_KEY = re.compile(r"[\W_]+")

#: Zero-width and other format characters (Unicode category Cf) plus C0/C1 controls other than
#: the line breaks and tab, which :func:`normalize_text` unifies instead of dropping.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]"
)
_LINE_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x85\u2028\u2029]")

#: The CJK blocks OpenCC's single characters are taken from.
_CJK_RANGES = ((0x3400, 0x4DC0), (0x4E00, 0xA000), (0xF900, 0xFB00))


@lru_cache(maxsize=1)
def _converter() -> Any:
    """Build the OpenCC traditional-to-simplified converter once per process."""
    import opencc

    return opencc.OpenCC("t2s")


@lru_cache(maxsize=1)
def _traditional() -> re.Pattern[str]:
    """A pattern matching any character that OpenCC changes on its own (about 4,000).

    Most text is not in traditional script; one regex scan (C speed) tells which text needs
    the converter at all, which is several times cheaper than converting everything.
    """
    chars = [chr(c) for lo, hi in _CJK_RANGES for c in range(lo, hi)]
    converted = str(_converter().convert("\n".join(chars))).split("\n")
    if len(converted) != len(chars):  # pragma: no cover - defensive: converter changed shape
        return re.compile("[\u3400-\u9fff\uf900-\ufaff]")
    changed = "".join(a for a, b in zip(chars, converted, strict=True) if a != b)
    return re.compile(f"[{re.escape(changed)}]")


def to_simplified(text: str) -> str:
    """Fold traditional Chinese characters to simplified ones; other text passes unchanged."""
    if text.isascii() or not _traditional().search(text):
        return text
    return str(_converter().convert(text))


def strip_key(text: str) -> str:
    """Keep only letters, digits and CJK characters of *text*, without normalizing them.

    This is the cheap first step of keying: its length ranks sentences before any of them is
    normalized. Full-width characters keep their length under NFKC, so the ranking matches the
    one a fully normalized text would give for all but exotic compatibility characters.
    """
    return _NON_KEY.sub("", text)


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


def _fold_key_once(key: str) -> str:
    if not key.isascii():
        key = to_simplified(nfkc(key))
    return _NON_KEY.sub("", nfkc(key.casefold()))


#: Like _NON_KEY, but keeps the two separators :func:`fold_keys` works with.
_NON_KEY_KEEP_SEPARATORS = re.compile("[^\\w\n\x1f]+|_+")


def _fold_keys_once(keys: str) -> str:
    if keys.isascii():
        return keys.lower()
    folded = nfkc(to_simplified(nfkc(keys)).casefold())
    if folded == keys:
        return keys  # the same object: callers test "is" to stop iterating
    # NFKC and casefolding rarely bring in a character that is not a letter or digit
    # ("⑴" -> "(1)"); one C-speed check spares the regex pass the rest of the time.
    bare = folded.replace("\n", "").replace("\x1f", "")
    if bare.isalnum() or not bare:
        return folded
    return _NON_KEY_KEEP_SEPARATORS.sub("", folded)


def fold_keys(keys: str) -> str:
    """Normalize many stripped keys at once, each ended by ``\n`` or ``\x1f``.

    Equivalent to :func:`normalize_key` on every key, at the cost of a few passes over one
    string instead of a few calls per key. Neither separator is touched by NFKC, OpenCC or
    casefolding, so keys never run into each other.
    """
    # One pass that changes nothing proves a fixed point; casefolding and NFKC do not always
    # commute, so a pass that changed something is followed by one more.
    for _ in range(5):
        folded = _fold_keys_once(keys)
        if folded is keys or folded.isascii():
            return folded
        keys = folded
    return keys


def normalize_key(text: str) -> str:
    """Return the key of *text*: NFKC, simplified script, casefolded, letters and digits only.

    Args:
        text: a sentence, raw or already stripped by :func:`strip_key`.

    Returns:
        The key; empty when *text* holds no letter or digit.

    Example:
        >>> normalize_key("２０２４年，資訊 Ｎｅｗｓ！")
        '2024年资讯news'
    """
    key = _fold_key_once(_NON_KEY.sub("", text))
    # Casefolding and NFKC do not always commute; iterate to the fixed point so that
    # normalize_key(normalize_key(x)) == normalize_key(x) holds for every input.
    for _ in range(4):
        again = _fold_key_once(key)
        if again == key:
            break
        key = again
    return key


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
