"""``nshash groups``: the largest groups of a saved store, the hot stories of a window
(``--since``), or a search (``--search``, ``--site``, ``--from``, ``--to``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from datetime import timezone, tzinfo
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..methods.nshash.core import NSHash
from ..methods.nshash.find import local_time, zone
from ..results import HotGroup
from ..stores.url import mask_url
from .common import _STORE_HELP_SAVED, UsageError, _store_url

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup


def _group_label(members: Sequence[Any]) -> str:
    for member in members:
        if member.title:
            return f"{member.title} ({member.doc_id})"
    return members[0].doc_id if members else "-"


def _when(seconds: int | None, tz: tzinfo = timezone.utc) -> str:
    if seconds is None:
        return "-"
    return local_time(seconds, tz).strftime("%Y-%m-%d %H:%M")


def _hot_json(h: HotGroup) -> dict[str, Any]:
    """A ranked story (:class:`~nshash.results.HotGroup`) as ``--json`` prints it."""
    return {
        "similar_id": h.similar_id,
        "recent": h.recent,
        "size": h.size,
        "first_seen": h.first_seen,
        "last_seen": h.last_seen,
        "title": h.title,
        "sites": list(h.sites),
    }


def _cmd_hot(args: argparse.Namespace, url: str) -> int:
    """``nshash groups --since WINDOW``: the hot stories of the window."""
    with NSHash.open(url, readonly=True) as nsh:
        hot = nsh.hot(args.since, args.top, min_count=args.min_size)
    if args.json:
        data = [_hot_json(h) for h in hot]
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not hot:
        print(
            f"no group got {args.min_size} or more documents in the last {args.since}"
            f" in {mask_url(url)} (only documents added with tracking on count)",
            file=sys.stderr,
        )
        return 0
    print(f"{'recent':>6}  {'size':>6}  {'similar_id':>10}  {'last seen (UTC)':<16}  title")
    for h in hot:
        title = h.title or "-"
        print(f"{h.recent:>6}  {h.size:>6}  {h.similar_id:>10}  {_when(h.last_seen):<16}  {title}")
    return 0


def _finding(args: argparse.Namespace) -> bool:
    """Whether ``nshash groups`` was asked to search, filter or page (the time zone comes
    from ``--tz``, else ``$NSHASH_TIMEZONE`` as the service reads it)."""
    asked = args.tz is not None
    if not asked:
        args.tz = os.environ.get("NSHASH_TIMEZONE") or None
    named = (args.search, args.site, args.start, args.end)
    return asked or any(v is not None for v in named) or args.offset != 0


def _cmd_find(args: argparse.Namespace, url: str) -> int:
    """``nshash groups --search/--site/--from/--to``: a page of the matching stories."""
    tz = zone(args.tz)
    least = 1 if args.min_size is None else args.min_size
    with NSHash.open(url, readonly=True) as nsh:
        page = nsh.find(
            args.search,
            site=args.site,
            start=args.start,
            end=args.end,
            since=args.since,
            tz=args.tz,
            limit=args.top,
            offset=args.offset,
            min_count=least,
        )
    if args.json:
        data = {
            "total": page.total,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "groups": [_hot_json(h) for h in page.stories],
        }
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not page.stories:
        print(
            f"no story matches in {mask_url(url)} ({page.total} in all; searches read the"
            " documents added with tracking on: dedup --track, or the service's NSHASH_TRACK)",
            file=sys.stderr,
        )
        return 0
    seen = f"last seen ({args.tz or 'UTC'})"
    print(f"{'copies':>6}  {'size':>6}  {'similar_id':>10}  {seen:<22}  title")
    for h in page.stories:
        print(
            f"{h.recent:>6}  {h.size:>6}  {h.similar_id:>10}  {_when(h.last_seen, tz):<22}"
            f"  {h.title or '-'}"
        )
    shown = f"{page.offset + 1}-{page.offset + len(page.stories)} of {page.total}"
    more = f"; next page: --offset {page.next_offset}" if page.next_offset is not None else ""
    print(f"stories {shown}{more}", file=sys.stderr)
    return 0


#: How many groups a listing shows unless ``--top`` says.
TOP = 30


def _cmd_export(args: argparse.Namespace, url: str) -> int:
    """``nshash groups --export FILE.parquet``: every group, for a batch job's --against."""
    from ..export import export_groups

    target = args.export
    if target in ("", "-") or not target.lower().endswith(".parquet"):
        raise UsageError(
            f"--export writes every group to a Parquet file: give a FILE.parquet, not {target!r}"
        )
    listing = {
        "--top": args.top != TOP, "--min-size": args.min_size is not None,
        "--json": args.json, "--since": args.since is not None,
        "--search/--site/--from/--to/--tz/--offset": _finding(args),
    }  # fmt: skip
    given = [flag for flag, on in listing.items() if on]
    if given:
        raise UsageError(
            f"--export writes every group; {', '.join(given)} choose what a listing shows"
            " and cannot be given with it"
        )

    with NSHash.open(url, readonly=True) as nsh:
        counts = export_groups(nsh, args.export)
    print(
        f"exported {counts['groups']:,} groups ({counts['documents']:,} documents with an id,"
        f" {counts['anchors']:,} anchors, {counts['common']:,} common hashes; last id"
        f" {counts['last_id']:,}) from {mask_url(url)} -> {args.export}",
        file=sys.stderr,
    )
    return 0


def _cmd_groups(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    if args.export is not None:
        return _cmd_export(args, url)
    if _finding(args):
        return _cmd_find(args, url)
    if args.min_size is None:
        args.min_size = 2
    if args.since is not None:
        return _cmd_hot(args, url)
    with NSHash.open(url, readonly=True) as nsh:
        groups = nsh.groups(min_size=args.min_size, limit=args.top)
    if args.json:
        data = [
            {
                "similar_id": g.similar_id,
                "size": g.size,
                # "doc_id" repeats "id" for scripts written before the names were made one
                # (deprecated; see the README's vocabulary table).
                "members": [
                    {
                        "id": m.doc_id,
                        "title": m.title,
                        "doc_id": m.doc_id,
                        "score": m.score,
                        "verdict": m.verdict,
                    }
                    for m in g.members
                ],
            }
            for g in groups
        ]
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not groups:
        print(f"no group of {args.min_size} or more documents in {mask_url(url)}", file=sys.stderr)
        return 0
    print(f"{'size':>6}  {'similar_id':>10}  title")
    for g in groups:
        print(f"{g.size:>6}  {g.similar_id:>10}  {_group_label(g.members)}")
    return 0


def add_groups_parser(sub: Any) -> None:
    """The ``groups`` command's options."""
    p = sub.add_parser(
        "groups",
        help="the largest groups of a saved store (hot stories)",
        description="List the largest groups of a saved store, or with --since the stories"
        " that got the most copies in a recent window, with their titles.",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.add_argument(
        "--top", type=int, default=TOP, metavar="N", help=f"how many groups (default {TOP})"
    )
    p.add_argument(
        "--min-size",
        type=int,
        default=None,
        metavar="N",
        help="smallest group shown (default 2; 1 with --search, --site, --from or --to)",
    )
    p.add_argument("--json", action="store_true", help="JSON with every member")
    p.add_argument(
        "--search",
        "-q",
        metavar="TERM",
        help="only stories whose headline holds TERM (case, width and traditional or"
        " simplified script do not matter)",
    )
    p.add_argument("--site", metavar="SITE", help="only stories carried by this site")
    p.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        help="rank by copies from this date or time (ISO 8601: 2019-01-01, 2019-01-01T08:00)",
    )
    p.add_argument(
        "--to",
        dest="end",
        metavar="WHEN",
        help="... up to this one (exclusive; a bare date takes that whole day)",
    )
    p.add_argument(
        "--tz",
        metavar="ZONE",
        help="time zone of --from/--to and of the times shown (Asia/Hong_Kong; default"
        " $NSHASH_TIMEZONE, else UTC)",
    )
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        metavar="N",
        help="skip this many matching stories (next pages)",
    )
    p.add_argument(
        "--since",
        metavar="WINDOW",
        help="rank by documents added in this window instead (24h, 90m, 7d; counts only"
        " documents added with tracking on, as the service does); --min-size is then the"
        " fewest documents in the window",
    )
    p.add_argument(
        "--export",
        metavar="FILE",
        help="write every group (ids, anchors, sketch) and the learned boilerplate to the"
        " Parquet file FILE instead, for `nshash dedup --engine spark --against FILE`"
        " (needs pyarrow)",
    )
    p.set_defaults(func=_cmd_groups, parser=p)
