"""The store contract and the URL factory that picks a backend.

A store keeps the fingerprint -> group tables and makes the assignment of one document atomic.
Four backends share one contract, checked by one test suite:

===============================  ==============================================================
URL                              backend
===============================  ==============================================================
``memory://``                    dicts in this process, gone when it exits
``memory:///path/news.pkl``      dicts, journaled to ``news.pkl.journal`` before every answer,
                                 compacted into the snapshot ``news.pkl``
``leveldb:///path/to/dir``       LevelDB through plyvel (``pip install 'nshash[leveldb]'``)
``sqlite:///path/to/news.db``    SQLite through the standard library's ``sqlite3``
``redis://host:6379/0?prefix=n`` Redis, shared by many processes (``pip install 'nshash[redis]'``)
===============================  ==============================================================

Query parameters tune a backend: ``fsync=always|everysec|no`` for memory, LevelDB and SQLite,
``prefix=NAME`` for Redis. Unknown parameters are refused, so a typo never passes silently.
``retention=30d`` (any backend; also ``12h``, ``90m``, ``3600s``) forgets the groups that got
no new document for that long, and reclaims their space; see
:mod:`~nshash.methods.nshash.retention`. ``clock=`` (a keyword) is the time it counts by.

``readonly=True`` (a keyword, or ``?readonly=1``) opens a store for reading only: nothing is
created, locked or written, a missing store raises :class:`~nshash.StoreNotFoundError`, and
it works while another process is writing (see each backend for how).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...errors import ConfigError, NSHashError, StoreReadOnlyError
from ...results import (
    Activity,
    Assignment,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    StoreStats,
)
from ...stores.durable import store_files
from ...stores.registry import open_ordered_kv, ordered_schemes
from ...stores.url import (
    check_path,
    fsync_option,
    mask_url,
    parse_url,
    readonly_option,
    refuse_unknown,
    repair_option,
    require_package,
    retention_option,
)
from ...text.fingerprint import DocPrint
from .assign import MatchPolicy
from .base import Store
from .retention import clock_option

__all__ = ["ReadOnlyStore", "file_schemes", "open_path", "open_store", "store_exists"]


def _open_memory(url: str, path: str, options: dict[str, Any]) -> Store:
    from .memory import MemoryStore

    fsync = fsync_option(options, url)
    repair = repair_option(options, url)
    readonly = readonly_option(options, url)
    retention = retention_option(options, url)
    clock = clock_option(options)
    refuse_unknown(options, url)
    if readonly and not path:
        raise ConfigError(
            f"{mask_url(url)!r} starts empty in every process, so there is nothing to read;"
            " give a saved store such as memory:///path/news.pkl"
        )
    return MemoryStore(
        path or None,
        fsync=fsync,
        repair=repair,
        readonly=readonly,
        retention=retention,
        clock=clock,
    )


def _open_kv(url: str, path: str, options: dict[str, Any]) -> Store:
    from .kvstore import KVStore

    repair = repair_option(dict(options), url)
    retention = retention_option(options, url)
    clock = clock_option(options)
    kv = open_ordered_kv(url, options, "nshash", path=path)
    return KVStore(kv, repair=repair, retention=retention, clock=clock)


def _open_redis(url: str, path: str, options: dict[str, Any]) -> Store:
    require_package("redis", "redis")
    readonly = readonly_option(options, url)
    module = importlib.import_module("nshash.methods.nshash.redis")
    store: Store = module.RedisStore.from_url(url, **options)
    return ReadOnlyStore(store) if readonly else store


class ReadOnlyStore(Store):
    """A store's read calls, with every write refused (:class:`~nshash.StoreReadOnlyError`).

    A server store needs nothing more to be read safely while others write (Redis serves
    every reader); the file stores have their own read-only mode, which also avoids locking.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.readonly = True
        self.connects_lazily = inner.connects_lazily

    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def assign_many(
        self,
        items: Sequence[tuple[DocPrint, str | None, str | None]],
        policy: MatchPolicy,
        metas: Sequence[DocMeta | None] | None = None,
    ) -> list[tuple[Assignment, tuple[int, ...]] | NSHashError]:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        return self.inner.lookup(doc, policy)

    def letter_units(self) -> int | None:
        return self.inner.letter_units()

    def record_letter_units(self, units: int) -> int:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        return self.inner.explain(doc, policy)

    def resolve(self, similar_id: int) -> int:
        return self.inner.resolve(similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        return self.inner.document(doc_id)

    def group(self, similar_id: int) -> Group | None:
        return self.inner.group(similar_id)

    def group_head(self, similar_id: int, members: int) -> Group | None:
        return self.inner.group_head(similar_id, members)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        return self.inner.groups(min_size, limit)

    def stats(self) -> StoreStats:
        return self.inner.stats()

    def sketch(self, similar_id: int) -> tuple[tuple[int, ...], int] | None:
        return self.inner.sketch(similar_id)

    def narrow_sketches(self) -> bool:
        return self.inner.narrow_sketches()

    def common(self) -> set[int]:
        return self.inner.common()

    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        return self.inner.hot(first_hour, last_hour, limit)

    def active(self, first_hour: int, last_hour: int) -> set[int]:
        return self.inner.active(first_hour, last_hour)

    def counts(self, first_hour: int, last_hour: int, gids: Iterable[int]) -> dict[int, int]:
        return self.inner.counts(first_hour, last_hour, gids)

    def activity(self, similar_id: int) -> Activity | None:
        return self.inner.activity(similar_id)

    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        return self.inner.doc_meta(doc_ids)

    def detach(self, doc_id: str, by: str, at: int, votes: int) -> Correction:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def join(self, a: int, b: int, by: str, at: int, cap: int) -> Correction:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def undo(self, cid: int, by: str, at: int, cap: int) -> Correction:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def corrections(self) -> list[Correction]:
        return self.inner.corrections()

    def settle(self, doc_id: str, anchors: Sequence[int]) -> int | None:
        raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)

    def ping(self) -> None:
        self.inner.ping()

    def close(self) -> None:
        self.inner.close()


#: Scheme -> opener: the nshash memory store keeps its own dicts and the Redis store runs in
#: Lua; every other backend is a row of :data:`nshash.stores.registry.BACKENDS` (one module
#: each) holding :class:`~nshash.methods.nshash.kvstore.KVStore`'s tables.
_OPENERS: dict[str, Callable[[str, str, dict[str, Any]], Store]] = {
    **dict.fromkeys(ordered_schemes(), _open_kv),
    "memory": _open_memory,
    "redis": _open_redis,
    "rediss": _open_redis,
    "unix": _open_redis,
}


def file_schemes() -> list[str]:
    """The schemes of the stores kept in files here (what ``repair`` and :func:`open_path`
    take): the memory store's and every ordered backend's."""
    return ["memory", *ordered_schemes()]


def store_exists(url: str) -> bool:
    """Whether the file-backed store *url* names has any file yet (damaged or not): a memory
    store's snapshot or journal, a LevelDB directory that holds files, an SQLite file. True
    for a store not kept in files (a server's, or ``memory://`` without a path).

    Raises:
        ConfigError: *url* is not a store URL.
    """
    scheme, path, _ = parse_url(url)
    if scheme not in file_schemes() or not path:
        return True
    if scheme == "memory":
        return any(os.path.exists(name) for name in store_files(path))
    if os.path.isdir(path):
        return bool(os.listdir(path))
    return os.path.exists(path)


def open_path(scheme: str, path: str, **options: Any) -> Store:
    """Open a file-backed store (one of :func:`file_schemes`) at *path*, with no URL quoting."""
    files = file_schemes()
    if scheme not in files:
        raise ConfigError(f"open_path takes one of {files}, not {scheme!r}")
    check_path(str(path), str(path))  # (as parse_url checks a URL's path)
    return _OPENERS[scheme](f"{scheme}://{path}", path, dict(options))


def open_store(url: str, **options: Any) -> Store:
    """Open the store a URL names.

    Args:
        url: ``memory://``, ``memory:///path/file.pkl``, ``leveldb:///path/dir``,
            ``sqlite:///path/news.db`` or ``redis://host:port/db?prefix=NAME``.
        **options: backend options; they override the URL's query options.
            ``readonly=True`` opens for reading only (see the module docstring).

    Raises:
        ConfigError: the scheme is unknown, an option is invalid, or the backend's package is
            not installed.
        StoreNotFoundError: opened ``readonly`` and there is no such store.
        StoreError: the store cannot be opened.

    Example:
        >>> store = open_store("memory://")
        >>> store.stats().documents
        0
    """
    scheme, path, query = parse_url(url)
    opener = _OPENERS.get(scheme)
    if opener is None:
        raise ConfigError(
            f"Unknown store scheme {scheme!r} in {mask_url(url)!r}; use one of {sorted(_OPENERS)}"
        )
    query.update({k: v for k, v in options.items()})
    return opener(url, path, query)
