"""The ``nshash`` command line: group a stored corpus by story, inspect a store, serve HTTP.

Commands:

* ``nshash dedup INPUT``: read articles (JSONL, ``.jsonl.gz``, CSV, a folder of ``.txt``
  files, or ``-`` for JSONL on stdin) and write every record back with its ``similar_id``
  and ``duplicate`` flag. Fingerprinting can run in worker processes (``--jobs``); the
  store sees the documents in input order, so the output does not depend on ``--jobs``.
* ``nshash groups``, ``nshash query``, ``nshash stats``: read a saved store.
* ``nshash correct detach|join|undo|list``: an editor's corrections of a saved store.
* ``nshash compare A B``: the similarity measures of :mod:`nshash.toolkit.similarity`.
* ``nshash serve``: the HTTP service on uvicorn.

Results go to stdout (or ``-o``); progress, bad-record reports and the summary go to stderr.
Exit status: 0 on success, 1 on an error (printed as ``Error: ...``), 2 on bad usage.

One module per command (:mod:`.dedup` for ``dedup`` and ``query``, :mod:`.groups`,
:mod:`.stats` for ``stats`` and ``repair``, :mod:`.correct`, :mod:`.compare`,
:mod:`.serve`), each with its options (``add_*_parser``), beside the pieces they share:
:mod:`.common` (the store a command names, usage errors), :mod:`.io` (reading and writing
records), :mod:`.parquet`, :mod:`.workers` (``--jobs``) and :mod:`.progress` (the bar,
reports and summary). This module only builds the parser and runs a command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import NSHashError
from .common import UsageError
from .compare import add_compare_parser
from .correct import add_correct_parser
from .dedup import add_dedup_parser, add_query_parser
from .groups import add_groups_parser
from .serve import add_serve_parser
from .stats import add_repair_parser, add_stats_parser

__all__ = ["build_parser", "main"]


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (the lookup costs every run)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .. import __version__
        from ..methods.nshash.compiled import assign_info
        from ..text.kernel import kernel_info

        info, assign = kernel_info(), assign_info()
        print(
            f"nshash {__version__} (text path: {info['path']}; {info['reason']})"
            f" (assignment: {assign['path']}; {assign['reason']})"
        )
        parser.exit()


#: Each command's options, in the order ``--help`` lists them.
COMMANDS = (
    add_dedup_parser,
    add_groups_parser,
    add_correct_parser,
    add_query_parser,
    add_stats_parser,
    add_repair_parser,
    add_compare_parser,
    add_serve_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``nshash`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="nshash",
        description="Near-duplicate detection for crawled articles: reposts of one story"
        " share a similar_id.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        nargs=0,
        help="show program's version number and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command(sub)
    return parser


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {exc.filename!r}"
    return str(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nshash`` command line and return its exit status.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 on an error, 2 on bad usage.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    sub: argparse.ArgumentParser = args.parser
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        sub.print_usage(sys.stderr)
        print(f"{sub.prog}: error: {exc}", file=sys.stderr)
        return 2
    except NSHashError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"Error: {_describe_os_error(exc)}", file=sys.stderr)
        return 1
    except EOFError:
        print("Error: the input ended in the middle (a truncated .gz file?)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted", file=sys.stderr)
        return 130
