"""The memory backend of the key-value methods: :class:`MemoryKV`, a dict of bytes.

With a path it is kept durable by :class:`nshash.stores.durable.JournaledFile`, the same journal and
snapshot as the nshash memory store: every batch is one journal line before ``write`` returns
(a torn last line is dropped on open, a line the disk refused leaves no trace), the snapshot
``PATH`` is rewritten once the journal outgrows it, and ``PATH.lock`` admits one process. The
method's name is in every journal op and in the snapshot, so one method never reads another's
files (nor the nshash store's).
"""

from __future__ import annotations

import threading
from base64 import b64decode, b64encode
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import StoreCorruptError
from .durable import JournaledFile
from .kv import KV
from .url import fsync_option, refuse_unknown

__all__ = ["MemoryKV"]

_MISSING: Any = object()


class _KVState:
    """The :class:`~nshash.stores.durable.State` of a :class:`MemoryKV`: a dict of bytes.

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

    snapshot = dump

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
    """A dict; with a path, kept by :class:`~nshash.stores.durable.JournaledFile` (see the module
    docstring)."""

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
        state = self._file.state if self._file is not None else self._state
        assert isinstance(state, _KVState)
        #: The pairs (the state's dict: loading is over once the file is open).
        self.data = state.data

    @classmethod
    def from_url(
        cls, url: str, path: str, options: dict[str, Any], method: str, readonly: bool, repair: bool
    ) -> MemoryKV:
        """Open what ``memory://`` or ``memory:///path?fsync=...`` names (the registry's call)."""
        fsync = fsync_option(options, url)
        refuse_unknown(options, url)
        return cls(path or None, fsync, method)

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
