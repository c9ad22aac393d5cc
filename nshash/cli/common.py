"""What every command shares: the default store and how a command names the store it reads or
writes, and the errors of bad usage.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, NSHashError, StoreNotFoundError
from ..methods.nshash.core import NSHash
from ..methods.nshash.store import store_exists
from ..stores.url import mask_url, parse_url

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

#: The environment variable that names the default store (shared with the HTTP service).
STORE_ENV = "NSHASH_STORE_URL"


#: The most worker processes ``dedup --jobs`` and ``serve --workers`` start for each CPU core:
#: more only wait for a core, each holds memory of its own (tens of MB), and a mistyped count
#: would start thousands.
PROCESSES_PER_CPU = 4


def most_processes() -> int:
    """The most worker processes a command starts on this machine."""
    return PROCESSES_PER_CPU * (os.cpu_count() or 1)


def existing(url: str, command: str) -> str:
    """*url*, whose store must exist already: *command* (``repair``, ``correct``) never
    creates one.

    Raises:
        StoreNotFoundError: the store has no file yet.
    """
    if not store_exists(url):
        raise StoreNotFoundError(
            f"There is no store at {mask_url(url)!r} ({command} never creates one)", url=url
        )
    return url


class UsageError(Exception):
    """Bad usage found after parsing (exit 2, like argparse's own errors)."""


class RecordError(NSHashError):
    """A bad record met with ``--on-error fail``."""


def _store_url(args: argparse.Namespace, *, saved: bool) -> str:
    """Return the store URL from ``--store`` or the environment.

    Args:
        saved: the command reads what earlier runs stored, so ``memory://`` without a path
            (which starts empty) is refused.
    """
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if not url:
        if saved:
            raise UsageError(
                f"this command reads a saved store: give --store URL or set {STORE_ENV}"
                " (for example memory:///path/news.pkl or leveldb:///path/news.ldb)"
            )
        return "memory://"
    if saved:
        try:
            scheme, path, _ = parse_url(url)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        if scheme == "memory" and not path:
            raise UsageError(
                f"{url!r} starts empty in every process, so there is nothing to read;"
                " use a saved store such as memory:///path/news.pkl"
            )
    return url


# -- parser ------------------------------------------------------------------------------

_STORE_HELP_SAVED = f"store URL (default: ${STORE_ENV}); e.g. memory:///path/news.pkl"
