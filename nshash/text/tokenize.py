"""Words of a text for the similarity toolkit: jieba for Chinese, a regex for other scripts.

A text is first folded by :func:`nshash.text.normalize.normalize_text`, the normalization the
fingerprints use (NFKC, casefolding, simplified Chinese script, no zero-width characters), so
``"ＡＢＣ"`` and ``"abc"`` or ``"資訊"`` and ``"资讯"`` are the same word. Then:

* runs of Chinese characters (CJK ideographs) are cut into words by jieba;
* every other run of letters and digits is one word (``"don't"`` and ``"l'été"`` stay whole, a
  hyphen or a period splits: ``"e-mail"`` is two words, ``"3.14"`` too).

jieba is imported and its dictionary loaded on the first Chinese text only, with its loading
message silenced; texts without Chinese characters never touch it.

Stop words are kept unless asked otherwise: :data:`STOP_WORDS` is a small built-in list of
English and Chinese function words that :func:`words` drops with ``stop_words=True``.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from ..errors import ConfigError, install_hint
from .normalize import normalize_text

__all__ = [
    "CJK_CHARS",
    "MAX_JIEBA_RUN",
    "STOP_WORDS",
    "has_cjk",
    "jieba_module",
    "quiet_jieba",
    "split_words",
    "words",
]

#: The CJK ideograph blocks handed to jieba: Extension A, the unified block, compatibility
#: ideographs and the supplementary planes' Extensions B to H.
CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"

#: A word for the regex: letters and digits, with an apostrophe allowed between them. ``_`` is a
#: word character for ``\w`` but not a letter, so it is excluded.
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_CJK_SPLIT = re.compile(f"([{CJK_CHARS}]+)")
_HAS_CJK = re.compile(f"[{CJK_CHARS}]")

#: The longest run of Chinese characters handed to jieba in one call; a longer run (no
#: punctuation, space or other letter in it) is cut into pieces of this length first. jieba's
#: HMM step keeps a copy of the whole best path at every character of a stretch without
#: dictionary words, so its cost grows with the square of such a stretch (50,000 times "的":
#: about 25 s); cut, it grows with the length. Real sentences between two punctuation marks
#: are far shorter, so their words do not change.
MAX_JIEBA_RUN = 256

_ENGLISH_STOP_WORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it it's its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that that's the their theirs them themselves then
there there's these they this those through to too under until up very was we were what when
where which while who whom why will with would you your yours yourself yourselves
"""
_CHINESE_STOP_WORDS = """
的 了 和 与 及 或 是 在 有 也 就 都 而 被 把 对 从 向 到 由 以 为 于 其 之 着 过 给 让 这 那
这个 那个 这些 那些 我 你 他 她 它 我们 你们 他们 她们 它们 自己 吗 呢 吧 啊 呀 很 还 又 并
但 但是 因为 所以 如果 而且 以及 等 等等 个 么 什么 一个 没有 就是 可以 已经
"""

#: The built-in stop words: common English and Chinese function words, already normalized.
STOP_WORDS: frozenset[str] = frozenset((_ENGLISH_STOP_WORDS + _CHINESE_STOP_WORDS).split())


@contextmanager
def quiet_jieba() -> Iterator[None]:
    """Hide the warnings jieba's loaders give, which are not the caller's business.

    jieba 0.42 reads its IDF table without closing the file (a ResourceWarning) and, where
    setuptools is installed, imports the deprecated ``pkg_resources``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
        yield


@lru_cache(maxsize=1)
def jieba_module() -> Any:
    """Import jieba with its log messages (dictionary loading, to stderr) silenced.

    Raises:
        ConfigError: jieba is not installed.
    """
    try:
        with quiet_jieba():
            import jieba
    except ImportError as exc:  # pragma: no cover - jieba is in the similarity extra
        raise ConfigError(
            f"Chinese words need jieba, which is missing: {install_hint('similarity')}."
        ) from exc
    jieba.setLogLevel(logging.WARNING)
    return jieba


@lru_cache(maxsize=1)
def _jieba() -> Any:
    """jieba with its dictionary loaded (once per process, about a second)."""
    jieba = jieba_module()
    with quiet_jieba():
        jieba.initialize()
    return jieba


def has_cjk(text: str) -> bool:
    """Whether *text* holds at least one CJK ideograph."""
    return not text.isascii() and _HAS_CJK.search(text) is not None


def split_words(normalized: str) -> list[str]:
    """Split an already normalized text into words, in order, stop words included.

    Use :func:`words` for raw text; this is the step after normalization, for callers that
    normalized the text themselves.

    Args:
        normalized: the output of :func:`nshash.text.normalize.normalize_text`.

    Returns:
        The words in text order; empty when the text has no letter or digit.
    """
    out: list[str] = []
    for run in _WORD.findall(normalized):
        if run.isascii():
            out.append(run)
            continue
        run = run.replace("\u2019", "'")
        if not _HAS_CJK.search(run):
            out.append(run)
            continue
        # Alternating pieces: odd indexes are Chinese runs, even ones the letters around them.
        for i, piece in enumerate(_CJK_SPLIT.split(run)):
            if not piece:
                continue
            if i % 2:
                cut = _jieba().lcut
                for at in range(0, len(piece), MAX_JIEBA_RUN):
                    out.extend(cut(piece[at : at + MAX_JIEBA_RUN]))
            else:
                piece = piece.strip("'")
                if piece:
                    out.append(piece)
    return out


def words(text: str, *, stop_words: bool = False) -> list[str]:
    """The words of *text*, normalized as the fingerprints normalize it.

    Args:
        text: any text.
        stop_words: drop the words in :data:`STOP_WORDS` (default: keep them).

    Returns:
        The words in text order.

    Raises:
        ConfigError: *text* is not a str.

    Example:
        >>> words("Ｔhe quick brown fox")
        ['the', 'quick', 'brown', 'fox']
        >>> words("The quick brown fox", stop_words=True)
        ['quick', 'brown', 'fox']
    """
    if not isinstance(text, str):
        raise ConfigError(f"Text must be a str, not {type(text).__name__!r}.")
    found = split_words(normalize_text(text))
    if stop_words:
        return [w for w in found if w not in STOP_WORDS]
    return found
