"""The key-value layer under the in-process tables of the keyed and simhash methods.

A :class:`KV` is what such tables need and nothing more: ``get``, an atomic and durable
``write`` of a batch, a prefix ``scan``. Two backends, one module each in spirit and one class
each here:

``MemoryKV``
    a dict; with a path, every batch is appended to ``PATH.journal`` as one framed record
    (lengths and a CRC32; a torn last record is dropped on open) before ``write`` returns,
    and folded into the snapshot ``PATH`` (temp file, fsync, rename) on open and close.
    ``PATH.lock`` admits one process. The files start with the method's magic line
    (``NSHASH-KEYED-1``, ``NSHASH-SIMHASH-1``), so one method never reads another's file.
``LevelKV``
    LevelDB through plyvel under the key prefix ``METHOD\\x00``, each batch one
    ``write_batch(transaction=True)``.

``fsync`` (both): ``always`` syncs every write; ``everysec`` (default) syncs a write when a
second has passed since the last sync, and on close; ``no`` leaves it to the OS. Every write
reaches the OS before it returns, so a killed process loses nothing.

:func:`open_kv` opens the one a ``memory://`` or ``leveldb://`` URL names.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import struct
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, BinaryIO

from .durable import Journal, lock_path, replace_snapshot
from .errors import ConfigError, StoreCorruptError, StoreError, StoreLockedError
from .store import _fsync_option, _refuse_unknown, mask_url, parse_url

__all__ = ["KV", "LevelKV", "MemoryKV", "check_settings", "open_kv"]


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


def _encode_pairs(puts: dict[bytes, bytes]) -> bytes:
    parts: list[bytes] = []
    for key, value in puts.items():
        parts += (struct.pack(">II", len(key), len(value)), key, value)
    return b"".join(parts)


def _decode_pairs(payload: bytes, into: dict[bytes, bytes]) -> None:
    off, end = 0, len(payload)
    while off < end:
        klen, vlen = struct.unpack_from(">II", payload, off)
        off += 8
        into[payload[off : off + klen]] = payload[off + klen : off + klen + vlen]
        off += klen + vlen
    if off != end:
        raise StoreCorruptError("A journal or snapshot record has a cut pair")


def _frame(payload: bytes) -> bytes:
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


#: No journal record is this large (one is one document's keys and vector): a header that
#: claims more means the file is not such a journal (an nshash journal starts with "[").
_MAX_RECORD = 64 << 20


class MemoryKV(KV):
    """A dict; with a path, a journal of framed records and a snapshot (module docstring)."""

    def __init__(self, path: str | None, fsync: str, method: str) -> None:
        self.data: dict[bytes, bytes] = {}
        self.method = method
        self._magic = b"NSHASH-" + method.upper().encode() + b"-1\n"
        self._path = path
        self._fsync = fsync
        self._journal: Journal | None = None
        self._lockfile: BinaryIO | None = None
        self._last_sync = time.monotonic()
        self.persistent = path is not None
        self.url = f"memory://{path}" if path else "memory://"
        if path is not None:
            self._open_files(path)

    def _open_files(self, path: str) -> None:
        self._lockfile = lock_path(path, f"{self.method} store", self.url)
        try:
            self._load(path)
            replayed = self._replay(path + ".journal")
            self._journal = Journal(path + ".journal", self.url)
            if replayed:
                self._snapshot()
        except BaseException:
            self._release()
            raise

    def _load(self, path: str) -> None:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"Cannot read snapshot {path!r}: {exc}", url=self.url) from exc
        if not data.startswith(self._magic):
            raise StoreCorruptError(f"{path!r} is not a {self.method} snapshot", url=self.url)
        body = data[len(self._magic) :]
        if len(body) < 8:
            raise StoreCorruptError(f"Snapshot {path!r} is cut short", url=self.url)
        size, crc = struct.unpack_from(">II", body)
        payload = body[8 : 8 + size]
        if len(payload) != size or zlib.crc32(payload) != crc:
            raise StoreCorruptError(f"Snapshot {path!r} fails its checksum", url=self.url)
        _decode_pairs(payload, self.data)

    def _replay(self, journal: str) -> int:
        try:
            with open(journal, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return 0
        off, count = 0, 0
        while off < len(data):
            if len(data) - off < 8:
                return count + 1  # a torn header: never acknowledged; compaction drops it
            size, crc = struct.unpack_from(">II", data, off)
            if size > _MAX_RECORD:  # no write makes such a record: another store's file
                raise StoreCorruptError(f"{journal!r} is not a {self.method} journal", url=self.url)
            payload = data[off + 8 : off + 8 + size]
            if len(payload) < size:
                return count + 1  # a torn last record
            if zlib.crc32(payload) != crc:
                if off + 8 + size == len(data):
                    return count + 1
                raise StoreCorruptError(
                    f"Journal {journal!r} has a damaged record at byte {off}", url=self.url
                )
            _decode_pairs(payload, self.data)
            off += 8 + size
            count += 1
        return count

    def _snapshot(self) -> None:
        assert self._path is not None

        def write(fh: BinaryIO) -> None:
            fh.write(self._magic)
            fh.write(_frame(_encode_pairs(self.data)))

        replace_snapshot(self._path, write, self._journal, self.url)

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def write(self, puts: dict[bytes, bytes]) -> None:
        if self._journal is not None:
            now = time.monotonic()
            sync = self._fsync == "always" or (
                self._fsync == "everysec" and now - self._last_sync >= 1.0
            )
            # A record the disk did not take whole is cut off again (see durable.Journal).
            self._journal.append(_frame(_encode_pairs(puts)), sync=sync)
            if sync:
                self._last_sync = now
        self.data.update(puts)

    def scan(self, prefix: bytes) -> Iterator[bytes]:
        return (k for k in list(self.data) if k.startswith(prefix))

    def _release(self) -> None:
        for fh in (self._journal, self._lockfile):
            if fh is not None:
                fh.close()
        self._journal = self._lockfile = None

    def close(self) -> None:
        if self._path is None:
            return
        try:
            if self._journal is not None:
                self._snapshot()
        finally:
            self._release()


class LevelKV(KV):
    """LevelDB through plyvel, every key under the prefix ``METHOD\\x00`` (``keyed\\x00``, ...)."""

    persistent = True

    def __init__(self, path: str, fsync: str, method: str) -> None:
        self._plyvel = importlib.import_module("plyvel")
        self.url = f"leveldb://{path}"
        self._fsync = fsync
        self._last_sync = time.monotonic()
        #: Why writes are refused (a write failed) until the directory is reopened.
        self.failed: str | None = None
        try:
            self._db = self._plyvel.DB(path, create_if_missing=True)
        except self._plyvel.IOError as exc:
            reason = self._reason(exc)
            if reason.startswith("IO error: lock "):
                raise StoreLockedError(
                    f"LevelDB {path!r} is open in another process", url=self.url
                ) from exc
            raise StoreError(f"Cannot open LevelDB {path!r}: {reason}", url=self.url) from exc
        except (self._plyvel.Error, OSError) as exc:
            raise StoreError(f"Cannot open LevelDB {path!r}: {exc}", url=self.url) from exc
        self._ns = self._db.prefixed_db(method.encode() + b"\x00")

    @staticmethod
    def _reason(exc: Exception) -> str:
        arg = exc.args[0] if exc.args else exc
        return arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(arg)

    def _fail(self, exc: Exception) -> StoreError:
        return StoreError(f"LevelDB {self.url!r} failed: {self._reason(exc)}", url=self.url)

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._ns.get(key)
        except self._plyvel.Error as exc:
            raise self._fail(exc) from exc
        return value

    def write(self, puts: dict[bytes, bytes]) -> None:
        if self.failed is not None:
            # After a failed write LevelDB's log may hold half a record, and records after
            # it could be dropped when the directory is next opened: reopen first.
            raise StoreError(
                f"LevelDB {self.url!r} refuses writes until it is reopened: {self.failed}",
                url=self.url,
            )
        now = time.monotonic()
        sync = self._fsync == "always" or (
            self._fsync == "everysec" and now - self._last_sync >= 1.0
        )
        try:
            with self._ns.write_batch(transaction=True, sync=sync) as batch:
                for key, value in puts.items():
                    batch.put(key, value)
        except self._plyvel.Error as exc:
            self.failed = self._reason(exc)
            raise self._fail(exc) from exc
        if sync:
            self._last_sync = now

    def scan(self, prefix: bytes) -> Iterator[bytes]:
        try:
            yield from self._ns.iterator(prefix=prefix, include_value=False)
        except self._plyvel.Error as exc:
            raise self._fail(exc) from exc

    def close(self) -> None:
        if not self._db.closed:
            if self._fsync != "no":
                with contextlib.suppress(self._plyvel.Error):
                    self._ns.put(b"m:closed", b"1", sync=True)
            self._db.close()


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


def open_kv(url: str, options: dict[str, Any], method: str) -> KV:
    """Open the key-value store a ``memory://`` or ``leveldb://`` *url* names for *method*.

    Raises:
        ConfigError: a bad URL or option, or plyvel missing for a LevelDB URL.
        StoreError: the store cannot be opened.
    """
    scheme, path, query = parse_url(url)
    query.update(options)
    if scheme == "memory":
        fsync = _fsync_option(query, url)
        _refuse_unknown(query, url)
        return MemoryKV(path or None, fsync, method)
    if scheme == "leveldb":
        try:
            importlib.import_module("plyvel")
        except ImportError as exc:
            raise ConfigError(
                "This store needs the 'plyvel' package: pip install 'nshash[leveldb]'"
            ) from exc
        if not path or path == "/":
            raise ConfigError(
                f"A LevelDB URL needs a directory: 'leveldb:///path/to/dir', not {mask_url(url)!r}"
            )
        fsync = _fsync_option(query, url)
        _refuse_unknown(query, url)
        return LevelKV(path, fsync, method)
    raise ConfigError(
        f"Unknown store scheme {scheme!r} in {mask_url(url)!r}; "
        "use one of ['leveldb', 'memory', 'redis', 'rediss', 'unix']"
    )
