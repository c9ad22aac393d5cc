"""The key-value interfaces every method's in-process tables stand on.

A :class:`KV` is what the keyed and simhash tables need and nothing more: ``get``, an atomic
and durable ``write`` of a batch, a prefix ``scan``. An :class:`OrderedKV` adds what the nshash
tables need on top: deletes in a batch, reads of a key range in order (either way), one error
type, a read-only open and the refusal of writes after a failed one. Each backend is one
module implementing them: :class:`nshash.stores.memory.MemoryKV` (a dict, durable through the
same journal and snapshot as the nshash memory store; not ordered: the nshash memory store
keeps its own dicts), :class:`nshash.stores.leveldb.LevelKV` (LevelDB) and
:class:`nshash.stores.sqlite.SQLiteKV` (SQLite, from the standard library).
:func:`nshash.stores.registry.open_kv` opens the one a URL names.

Every method keeps its keys under its own :func:`namespace` of one store, so the keyed tables
and the nshash tables could share a LevelDB directory without reading each other's keys.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from ..errors import ConfigError, StoreClosedError, StoreCorruptError
from .url import fsync_option, mask_url, refuse_unknown

T = TypeVar("T")

__all__ = ["KV", "KVTables", "OrderedKV", "check_settings", "namespace", "prefix_end"]


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


def namespace(method: str) -> bytes:
    """The key prefix of *method*'s tables in a shared store: ``METHOD\\x00``, or nothing for
    the nshash tables (whose LevelDB layout predates namespaces and starts every key with
    one table byte, never a method's name)."""
    return b"" if method == "nshash" else method.encode("ascii") + b"\x00"


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with *prefix* (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class OrderedKV(KV):
    """A :class:`KV` with keys in byte order: what the nshash tables need of a backend.

    Attributes:
        readonly: opened for reading only (a consistent view as of the open, taken without
            locking or writing anything, while another process may be writing); every
            write raises :class:`~nshash.StoreReadOnlyError` in the tables above it.
        failed: why writes are refused after a write failed half-way (a backend whose failed
            write may have left a torn record sets it), until :meth:`reopen` and the owner's
            check have run; None while writes are accepted.
    """

    readonly: bool = False
    failed: str | None = None
    persistent = True
    #: What the backend is called and the form of its URLs, for the message when a URL
    #: names no place (see :meth:`from_url`).
    kind = "key-value"
    url_form = ""

    @abstractmethod
    def __init__(
        self,
        path: str,
        fsync: str = "everysec",
        method: str = "nshash",
        *,
        readonly: bool = False,
        repair: bool = False,
    ) -> None:
        """Open *path* for *method*'s tables under the *fsync* policy (see each backend)."""

    @staticmethod
    def names_place(path: str) -> bool:
        """Whether a URL's *path* names a place to keep the store (not empty, not ``/``)."""
        return bool(path) and path != "/"

    @classmethod
    def from_url(
        cls, url: str, path: str, options: dict[str, Any], method: str, readonly: bool, repair: bool
    ) -> OrderedKV:
        """Open what ``SCHEME:///path?fsync=...`` names (the registry's call).

        Raises:
            ConfigError: the URL names no place, or has an unknown option.
        """
        if not cls.names_place(path):
            raise ConfigError(f"A {cls.kind} URL needs {cls.url_form}, not {mask_url(url)!r}")
        fsync = fsync_option(options, url)
        refuse_unknown(options, url)
        return cls(path, fsync, method, readonly=readonly, repair=repair)

    @abstractmethod
    def write(self, puts: Mapping[bytes, bytes | None], *, sync: bool = False) -> None:
        """Set every pair, None deleting the key, all or none; durably per the fsync policy,
        and on the disk itself before returning when *sync*.

        Raises:
            StoreError: nothing of *puts* was written.
        """

    @abstractmethod
    def items(
        self,
        prefix: bytes = b"",
        *,
        start: bytes | None = None,
        stop: bytes | None = None,
        reverse: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield the ``(key, value)`` pairs of keys that start with *prefix*, or (without a
        prefix) lie in ``start <= key < stop``, in key order (descending with *reverse*)."""

    def scan(self, prefix: bytes) -> Iterator[bytes]:
        return (key for key, _value in self.items(prefix))

    @abstractmethod
    def errors(self, doing: str = "The store failed in") -> AbstractContextManager[None]:
        """A context in which the backend's own errors become :class:`~nshash.StoreError`
        naming the store (*doing* starts the message)."""

    def reclaim(self) -> None:  # noqa: B027 - a no-op is right for most backends
        """Start freeing the space of deleted keys, where the backend keeps it until told
        (LevelDB compacts in a background thread); a no-op where deletion frees it already
        (SQLite reuses the pages it frees)."""

    def check_writes(self) -> None:  # noqa: B027 - a no-op is right for most backends
        """Raise :class:`~nshash.StoreError` while the backend refuses writes that it would
        not refuse for good (a full disk), so a readiness probe tells the truth."""

    def recovery_due(self) -> bool:
        """Whether a failed store should try :meth:`reopen` now (at most once a second)."""
        return False

    def reopen(self) -> None:
        """Open the store again after a failed write (the owner then checks its tables)."""

    def recovered(self) -> None:
        """The owner checked the reopened store: writes are accepted again."""
        self.failed = None


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


class KVTables:
    """What a method's tables on a :class:`KV` share: one lock, the format marker, the
    counters under ``m:NAME``, the settings check, and closing.

    Args:
        kv: the key-value store (closed here if opening fails).
        method: the method's name, for messages (``"keyed"``, ``"simhash"``).
        fmt: the layout version written to ``m:format``; another one is refused.
        counters: the names of the counters kept under ``m:NAME`` (read into :attr:`meta`).

    Raises:
        StoreCorruptError: *kv* holds the method's tables in another format.
    """

    def __init__(self, kv: KV, method: str, fmt: bytes, counters: Sequence[str]) -> None:
        self._kv = kv
        self.url = kv.url
        self.method = method
        self._lock = threading.RLock()
        self._closed = False
        try:
            stored = kv.get(b"m:format")
            if stored is None:
                kv.write({b"m:format": fmt})
            elif stored != fmt:
                raise StoreCorruptError(
                    f"{kv.url!r} holds {method} tables of format {stored!r}, not {fmt!r}",
                    url=kv.url,
                )
            #: The counters as committed (a write's new values are put by :meth:`counter_puts`).
            self.meta = {n: int(kv.get(b"m:" + n.encode()) or 0) for n in counters}
        except BaseException:
            kv.close()
            raise

    def _check(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.url} is closed", url=self.url)

    def settle(self, settings: dict[str, Any]) -> None:
        """Store the key-defining settings on first use; refuse different ones later."""
        with self._lock:
            self._check()
            stored = self._kv.get(b"m:settings")
            if stored is None:
                self._kv.write({b"m:settings": json.dumps(settings, sort_keys=True).encode()})
            else:
                check_settings(self.url, stored, settings, self.method)

    def read_record(self, doc_id: str, parse: Callable[[str, bytes], T]) -> T | None:
        """The record of *doc_id* (kept under ``d`` + its UTF-8) as *parse* reads it, or None."""
        with self._lock:
            self._check()
            raw = self._kv.get(b"d" + doc_id.encode("utf-8"))
            return None if raw is None else parse(doc_id, raw)

    def counter_puts(self, meta: dict[str, int]) -> dict[bytes, bytes]:
        """The writes that bring the stored counters to *meta*."""
        return {
            b"m:" + name.encode(): str(value).encode()
            for name, value in meta.items()
            if value != self.meta[name]
        }

    def ping(self) -> None:
        self._check()

    def _release(self) -> None:
        """Close the key-value store (a method saves what it keeps in memory first)."""
        self._kv.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._release()
