"""Exceptions raised by nshash.

Every exception nshash raises on purpose derives from :class:`NSHashError`::

    NSHashError
    ├── ConfigError              bad argument, option or store URL
    │   ├── UnknownOptionError   an option nobody takes
    │   └── CorrectionError      an editor's correction names nothing or is refused
    ├── EmptyDocumentError       a text with no letter or digit (also a ValueError)
    └── StoreError               the store failed or refused an operation
        ├── StoreClosedError     the store was used after close()
        ├── StoreLockedError     a LevelDB directory is held by another process
        ├── StoreNotFoundError   a store opened read-only does not exist
        ├── StoreReadOnlyError   a write to a store opened read-only
        ├── StoreCorruptError    a snapshot or journal cannot be read safely
        └── StoreUnavailableError  a server store (Redis) cannot be reached in time
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = [
    "ConfigError",
    "CorrectionError",
    "EmptyDocumentError",
    "NSHashError",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StateError",
    "StoreUnavailableError",
    "UnknownOptionError",
    "install_hint",
]


class NSHashError(Exception):
    """The base for all exceptions that nshash defines."""


class ConfigError(NSHashError, ValueError):
    """An argument, option or store URL is invalid."""


class UnknownOptionError(ConfigError):
    """Options that neither nshash nor the store takes."""

    def __init__(self, message: str, *, names: list[str]) -> None:
        super().__init__(message)
        #: The unknown options' names.
        self.names = names


class CorrectionError(ConfigError):
    """A correction (a detach, a join or an undo) that names a document, story or
    correction the store does not have, or that cannot be made (a document that is its
    story's only copy, a story joined with itself, a correction undone twice)."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        #: ``document_not_found``, ``group_not_found``, ``correction_not_found`` or
        #: ``correction_refused``.
        self.code = code


class StateError(ConfigError):
    """Stored groups a batch is grouped against (``against=``, ``--against``) that cannot be
    used: a missing file, records without ``similar_id``, or a malformed export of a store's
    groups."""


class EmptyDocumentError(NSHashError, ValueError):
    """A document has no letter or digit, so it has no fingerprint and cannot get an id."""


class StoreError(NSHashError):
    """The store failed or refused an operation."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        #: The store URL, with any password masked.
        self.url = url


class StoreClosedError(StoreError):
    """The store was used after it was closed."""


class StoreLockedError(StoreError):
    """The store's files are held by another process (LevelDB admits one opener)."""


class StoreNotFoundError(StoreError):
    """A store opened read-only does not exist (reading never creates one)."""


class StoreReadOnlyError(StoreError):
    """A write was asked of a store opened read-only."""


class StoreCorruptError(StoreError):
    """A snapshot or journal holds something that cannot be loaded safely."""


class StoreUnavailableError(StoreError):
    """A server store cannot be reached within its timeout."""


@functools.cache
def _installed_from() -> str:
    """Where ``pip`` can find nshash again: a local folder or file, or the name on an index."""
    try:
        raw = importlib.metadata.distribution("nshash").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        raw = None
    source = ""
    if raw:
        with contextlib.suppress(ValueError, AttributeError):
            url = str(json.loads(raw).get("url", ""))
            if url.startswith("file://"):
                source = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    if not source:
        # Not installed (run from a checkout), or installed from an index.
        checkout = Path(__file__).resolve().parents[1]
        if raw is None and (checkout / "pyproject.toml").is_file():
            source = str(checkout)
    if not source:
        return "nshash"
    with contextlib.suppress(ValueError):
        if Path(source).resolve() == Path.cwd().resolve():
            return "."
    return source


def install_hint(extra: str) -> str:
    """The command that installs nshash's *extra* the way this nshash was installed.

    ``pip install 'nshash[extra]'`` for a release from an index; for a clone or a local
    wheel, the same folder or file (``pip install '.[extra]'`` from the clone itself).

    Example:
        >>> install_hint("redis").startswith("pip install '")
        True
    """
    return f"pip install '{_installed_from()}[{extra}]'"
