"""Exceptions raised by nshash.

Every exception nshash raises on purpose derives from :class:`NSHashError`::

    NSHashError
    ├── ConfigError              bad argument, option or store URL
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

__all__ = [
    "ConfigError",
    "EmptyDocumentError",
    "NSHashError",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreUnavailableError",
]


class NSHashError(Exception):
    """The base for all exceptions that nshash defines."""


class ConfigError(NSHashError, ValueError):
    """An argument, option or store URL is invalid."""


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
