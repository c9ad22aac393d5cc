"""The key-value interface under the in-process tables of the keyed and simhash methods.

A :class:`KV` is what such tables need and nothing more: ``get``, an atomic and durable
``write`` of a batch, a prefix ``scan``. One backend module implements it each:
:class:`nshash.stores.memory.MemoryKV` (a dict, durable through the same journal and snapshot as
the nshash memory store) and :class:`nshash.stores.leveldb.LevelKV` (LevelDB, on the same host
as the nshash LevelDB store). :func:`nshash.stores.registry.open_kv` opens the one a URL names.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError, StoreCorruptError

__all__ = ["KV", "check_settings"]


class KV(ABC):
    """A minimal key-value store: what the in-process tables of a method need, nothing more."""

    url: str = ""
    #: Whether what is written survives the process (a saved filter is worth writing).
    persistent: bool = False

    @abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value of *key*, or None."""

    @abstractmethod
    def write(self, puts: dict[bytes, bytes]) -> None:
        """Set every pair, all or none, durably per the fsync policy."""

    @abstractmethod
    def scan(self, prefix: bytes) -> Iterator[bytes]:
        """Yield every key that starts with *prefix*."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release (idempotent)."""


def check_settings(url: str, stored: bytes, settings: dict[str, Any], method: str) -> None:
    """Refuse to go on when *stored* (JSON) holds other values of *settings* than given.

    The settings a method's keys and fingerprints depend on are written by the first opener;
    a later opener with other ones would file documents under keys nobody looks up.

    Raises:
        StoreCorruptError: *stored* is not JSON.
        ConfigError: a setting differs.
    """
    try:
        before = json.loads(stored)
    except ValueError as exc:
        raise StoreCorruptError(f"The {method} settings in {url!r} are unreadable") from exc
    changed = sorted(k for k in settings if before.get(k) != settings[k])
    if changed:
        theirs = {k: before.get(k) for k in changed}
        raise ConfigError(
            f"The {method} tables in {url!r} were built with {theirs!r}; open them with the"
            " same settings (they define the keys)"
        )
