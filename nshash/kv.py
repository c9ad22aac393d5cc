"""The key-value layer under the in-process tables of the keyed and simhash methods.

A :class:`KV` is what such tables need and nothing more: ``get``, an atomic and durable
``write`` of a batch, a prefix ``scan``. Two backends, one module each in spirit and one class
each here:

``MemoryKV``
    a dict; with a path, kept durable by :class:`nshash.durable.JournaledFile`, the same
    journal and snapshot as the nshash memory store: every batch is one journal line
    before ``write`` returns (a torn last line is dropped on open, a line the disk refused
    leaves no trace), the snapshot ``PATH`` is rewritten once the journal outgrows it, and
    ``PATH.lock`` admits one process. The method's name is in every journal op and in the
    snapshot, so one method never reads another's files.
``LevelKV`` (in :mod:`nshash.leveldb_base`)
    LevelDB through plyvel under the key prefix ``METHOD\\x00``, each batch one
    ``write_batch(transaction=True)``, on the same :class:`~nshash.leveldb_base.LevelDB`
    host as the nshash LevelDB store.

``fsync`` (both): ``always`` syncs every write; ``everysec`` (default) syncs a write when a
second has passed since the last sync, and on close; ``no`` leaves it to the OS. Every write
reaches the OS before it returns, so a killed process loses nothing.

:func:`open_kv` opens the one a ``memory://`` or ``leveldb://`` URL names.
"""

from __future__ import annotations

import importlib
import json
import threading
from abc import ABC, abstractmethod
from base64 import b64decode, b64encode
from collections.abc import Callable, Iterator
from typing import Any

from .durable import JournaledFile
from .errors import ConfigError, StoreCorruptError
from .store import _fsync_option, _refuse_unknown, mask_url, parse_url

__all__ = ["KV", "MemoryKV", "check_settings", "open_kv"]


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


_MISSING: Any = object()


class _KVState:
    """The :class:`~nshash.durable.State` of a :class:`MemoryKV`: a dict of bytes.

    A write is journaled as the op ``[METHOD, key, value]`` (key and value in base64), so a
    journal of one method, or of the nshash store, never replays into another's tables.
    """

    def __init__(self, method: str) -> None:
        self.method = method
        self.data: dict[bytes, bytes] = {}
        self.log: list[Any] | None = None
        self.undo: list[Callable[[], None]] | None = None

    def put(self, key: bytes, value: bytes) -> None:
        data = self.data
        if self.undo is not None:
            old = data.get(key, _MISSING)
            if old is _MISSING:
                self.undo.append(lambda: data.__delitem__(key))
            else:
                self.undo.append(lambda: data.__setitem__(key, old))
        data[key] = value
        if self.log is not None:
            self.log.append([self.method, b64encode(key).decode(), b64encode(value).decode()])

    def apply(self, op: Any) -> None:
        if not isinstance(op, list) or len(op) != 3 or op[0] != self.method:
            raise ValueError(f"{op!r:.60} is not a write of the {self.method} tables")
        if type(op[1]) is not str or type(op[2]) is not str:
            raise ValueError(f"{op!r:.60} is not a key and a value")
        self.put(b64decode(op[1], validate=True), b64decode(op[2], validate=True))

    def rollback(self) -> None:
        undo, self.undo = self.undo or [], []
        for step in reversed(undo):
            step()
        if self.log is not None:
            self.log = []

    def dump(self) -> dict[str, Any]:
        return {"format": f"{self.method}-kv-1", "pairs": self.data}

    def load(self, data: Any) -> None:
        if data.get("format") != f"{self.method}-kv-1":
            raise ValueError(f"it holds {data.get('format')!r}, not the {self.method} tables")
        pairs = data["pairs"]
        if type(pairs) is not dict or any(
            type(k) is not bytes or type(v) is not bytes for k, v in pairs.items()
        ):
            raise ValueError("its pairs are not bytes")
        self.data = pairs


#: How the files of the first release's keyed memory store began (a binary format).
_OLD_MAGIC = b"NSHASH-KEYED-1\n"


class MemoryKV(KV):
    """A dict; with a path, kept by :class:`~nshash.durable.JournaledFile` (module docstring)."""

    def __init__(self, path: str | None, fsync: str, method: str) -> None:
        self.method = method
        self.persistent = path is not None
        self.url = f"memory://{path}" if path else "memory://"
        self._lock = threading.RLock()
        self._state = _KVState(method)
        self._file: JournaledFile | None = None
        if path is not None:
            try:
                with open(path, "rb") as fh:
                    old = fh.read(len(_OLD_MAGIC)) == _OLD_MAGIC
            except OSError:
                old = False
            if old:
                raise StoreCorruptError(
                    f"{path!r} holds keyed tables of the first release's format; this version"
                    " cannot read them: add the documents again to a new path",
                    url=self.url,
                )
            self._file = JournaledFile(
                path,
                lambda: _KVState(method),
                url=self.url,
                what=f"{method} store",
                fsync=fsync,
                lock=self._lock,
            )

    @property
    def data(self) -> dict[bytes, bytes]:
        state = self._file.state if self._file is not None else self._state
        assert isinstance(state, _KVState)
        return state.data

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def write(self, puts: dict[bytes, bytes]) -> None:
        with self._lock:
            if self._file is None:
                self.data.update(puts)
                return
            # One journal line for the batch; a disk that refuses it leaves no trace.
            with self._file.change() as state:
                assert isinstance(state, _KVState)
                for key, value in puts.items():
                    state.put(key, value)

    def scan(self, prefix: bytes) -> Iterator[bytes]:
        return (k for k in list(self.data) if k.startswith(prefix))

    def _release(self) -> None:
        """Let go of the files without syncing (what a crash does)."""
        if self._file is not None:
            self._file.release()

    def close(self) -> None:
        if self._file is None:
            return
        with self._lock:
            self._file.close()
        self._file.join()


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
        from .leveldb_base import LevelKV  # plyvel is optional: imported for LevelDB only

        return LevelKV(path, fsync, method)
    raise ConfigError(
        f"Unknown store scheme {scheme!r} in {mask_url(url)!r}; "
        "use one of ['leveldb', 'memory', 'redis', 'rediss', 'unix']"
    )
