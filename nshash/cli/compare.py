"""``nshash compare A B``: the similarity measures of :mod:`nshash.toolkit.similarity` on two
texts.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, install_hint
from ..methods.nshash.core import NSHash
from .common import UsageError

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

#: The measures of ``nshash compare``, for its help
#: (:data:`nshash.toolkit.similarity.METRICS`, named here so that ``--help`` does not import
#: the toolkit; a test keeps the two equal).
METRIC_NAMES = ("cosine", "tfidf_cosine", "simhash", "euclidean", "common_words", "levenshtein")


#: The longest text ``nshash compare`` reads by default, in characters: some measures grow
#: with the product of both lengths (two texts this long take seconds, not minutes).
COMPARE_MAX_CHARS = 200_000


def _read_text(name: str, max_chars: int | None = None) -> str:
    """Read a UTF-8 text file (``-``: stdin), refusing one over *max_chars* characters
    without reading much more than that (UTF-8 has at most 4 bytes a character)."""
    shown = "<stdin>" if name == "-" else name
    limit = None if max_chars is None else 4 * max_chars + 4
    if name == "-":
        data = sys.stdin.buffer.read(-1 if limit is None else limit)
    else:
        with open(name, "rb") as f:
            data = f.read(-1 if limit is None else limit)
    too_long = ConfigError(
        f"{shown!r} is over {max_chars:,} characters; give --max-chars N to compare longer"
        " texts (the time grows with the product of both lengths)"
    )
    if limit is not None and len(data) >= limit:
        raise too_long
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{shown!r} is not UTF-8 text") from None
    if max_chars is not None and len(text) > max_chars:
        raise too_long
    return text


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.a == "-" and args.b == "-":
        raise UsageError("only one of A and B can be '-' (stdin)")
    try:
        similarity = importlib.import_module("nshash.toolkit.similarity")
    except ImportError as exc:
        raise ConfigError(
            f"nshash compare needs the similarity toolkit, which cannot be imported ({exc}):"
            f" {install_hint('similarity')}"
        ) from exc
    known = list(similarity.METRICS)
    metrics: list[str] | None = None
    if args.metrics:
        metrics = [m for part in args.metrics for m in part.split(",") if m]
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise UsageError(f"unknown metric(s) {unknown}; choose from {', '.join(known)}")
    if args.max_chars < 1:
        raise UsageError(f"--max-chars must be 1 or more, not {args.max_chars}")
    scores: dict[str, float] = similarity.compare(
        _read_text(args.a, args.max_chars), _read_text(args.b, args.max_chars), metrics=metrics
    )
    if args.json:
        print(json.dumps(scores))
    else:
        width = max((len(name) for name in scores), default=0)
        for name, score in scores.items():
            print(f"{name:<{width}}  {score:.4f}")
    return 0


def add_compare_parser(sub: Any) -> None:
    """The ``compare`` command's options."""
    p = sub.add_parser(
        "compare",
        help="similarity scores of two texts (nshash[similarity])",
        description="Score two texts with the similarity measures, each in [0, 1]:"
        f" {', '.join(METRIC_NAMES)}.",
    )
    p.add_argument("a", metavar="FILE_A", help="a text file, or - for stdin")
    p.add_argument("b", metavar="FILE_B", help="a text file, or - for stdin")
    p.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help=f"which measures (default: all): {', '.join(METRIC_NAMES)}",
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=COMPARE_MAX_CHARS,
        metavar="N",
        help=f"refuse a text longer than N characters (default {COMPARE_MAX_CHARS:,})",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_compare, parser=p)
