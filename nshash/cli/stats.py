"""``nshash stats`` and ``nshash repair``: a saved store's counts, and recovering a damaged one."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..methods.nshash.core import NSHash
from ..methods.nshash.store import file_schemes, open_store
from ..stores.url import mask_url, parse_url
from .common import _STORE_HELP_SAVED, UsageError, _store_url, existing

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup


def _cmd_stats(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    with NSHash.open(url, readonly=True) as nsh:
        stats = nsh.stats()
    data: dict[str, Any] = {
        "store": mask_url(url),
        "documents": stats.documents,
        "groups": stats.groups,
        "fingerprints": stats.fingerprints,
        "common_fingerprints": stats.common_fingerprints,
        "last_id": stats.last_id,
        **{str(k): v for k, v in stats.extra.items()},
    }
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    else:
        for key, value in data.items():
            number = isinstance(value, int) and not isinstance(value, bool)
            shown = f"{value:,}" if number else value
            print(f"{key + ':':<21}{shown}")
    return 0


def _cmd_repair(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    scheme = parse_url(url)[0]
    if scheme not in file_schemes():
        raise UsageError(
            f"repair works on {', '.join(file_schemes())} stores, not {mask_url(url)!r}"
        )
    with open_store(existing(url, "repair"), repair=True) as store:
        repaired: str | None = getattr(store, "repaired", None)
        stats = store.stats()
    kept = f"{stats.documents:,} documents, {stats.groups:,} groups, last id {stats.last_id:,}"
    if repaired is None:
        print(f"{mask_url(url)}: nothing to repair ({kept})")
    else:
        print(f"{mask_url(url)}: repaired: {repaired}")
        print(f"  kept {kept}")
    return 0


def add_stats_parser(sub: Any) -> None:
    """The ``stats`` command's options."""
    p = sub.add_parser(
        "stats",
        help="counts over a saved store",
        description="Print a saved store's counts: documents, groups, fingerprints, the"
        " fingerprints learned as boilerplate, the last id given, and the store's own figures.",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_stats, parser=p)


def add_repair_parser(sub: Any) -> None:
    """The ``repair`` command's options."""
    p = sub.add_parser(
        "repair",
        help="recover a damaged memory or LevelDB store (keeps everything before the damage)",
        description="Open a memory store whose journal is damaged, keeping every line before"
        " the damage (the damaged journal is kept as PATH.journal.damaged), or a LevelDB"
        " directory (LevelDB's repair, then every counter checked against its tables).",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.set_defaults(func=_cmd_repair, parser=p)
