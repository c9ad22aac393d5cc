"""``nshash correct``: an editor's corrections of a saved store's groupings (detach a copy,
join two stories, undo either) and their list (``nshash correct list``).
"""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigError
from ..methods.nshash.core import NSHash
from ..results import Correction
from .common import _STORE_HELP_SAVED, _store_url, existing


def _who(args: argparse.Namespace) -> str:
    """``--by``, else the user running the command (``cli`` when there is none)."""
    if args.by:
        return str(args.by)
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


def _when(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _as_json(c: Correction) -> dict[str, Any]:
    return {
        "id": c.id,
        "kind": c.kind,
        "at": _when(c.at),
        "by": c.by,
        "doc_id": c.doc_id,
        "source": c.source,
        "target": c.target,
        "undone_at": None if c.undone_at is None else _when(c.undone_at),
        "undone_by": c.undone_by,
    }


def _line(c: Correction) -> str:
    what = (
        f"detached {c.doc_id!r} from story {c.source} into story {c.target}"
        if c.kind == "detach"
        else f"joined story {c.source} into story {c.target}"
    )
    undone = f"; undone {_when(c.undone_at)} by {c.undone_by}" if c.undone_at is not None else ""
    return f"#{c.id}  {_when(c.at)}  {c.by}: {what}{undone}"


def _story(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 2**63:
        raise argparse.ArgumentTypeError(f"a story id is a positive integer, not {value!r}")
    return int(value)


def _cmd_correct(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    if args.action == "list":
        with NSHash.open(url, readonly=True) as nsh:
            done = nsh.corrections()
        if args.json:
            print(json.dumps([_as_json(c) for c in done], ensure_ascii=False, indent=2))
        else:
            for c in done:
                print(_line(c))
        return 0
    with NSHash.open(existing(url, "correct")) as nsh:
        if args.action == "detach":
            made = nsh.detach(args.doc_id, by=_who(args))
        elif args.action == "join":
            made = nsh.join(args.a, args.b, by=_who(args))
        elif args.action == "undo":
            made = nsh.undo(args.correction_id, by=_who(args))
        else:  # pragma: no cover - argparse allows only the actions above
            raise ConfigError(f"unknown action {args.action!r}")
    print(json.dumps(_as_json(made), ensure_ascii=False) if args.json else _line(made))
    return 0


def add_correct_parser(sub: Any) -> None:
    """The ``correct`` command's actions and options."""
    p = sub.add_parser(
        "correct",
        help="correct a saved store's groupings: detach a copy, join two stories, undo",
        description="An editor's corrections, kept in the store with who made them and"
        " when: detach a copy into a story of its own (later copies like it follow it), join"
        " two stories into one, undo a correction, or list them.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    detach = actions.add_parser("detach", help="take a copy out of its story")
    detach.add_argument("doc_id", metavar="DOC_ID", help="the copy, by the id it was added with")
    join = actions.add_parser("join", help="join two stories (the smaller id survives)")
    join.add_argument("a", type=_story, metavar="STORY")
    join.add_argument("b", type=_story, metavar="OTHER")
    undo = actions.add_parser("undo", help="undo a correction")
    undo.add_argument("correction_id", type=_story, metavar="CORRECTION_ID")
    listing = actions.add_parser("list", help="list the corrections, oldest first")
    for q in (detach, join, undo, listing):
        q.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
        q.add_argument("--json", action="store_true", help="print JSON")
        q.set_defaults(func=_cmd_correct, parser=q)
    for q in (detach, join, undo):
        q.add_argument(
            "--by", metavar="NAME", help="who makes the correction (default: cli:$USER)"
        )
