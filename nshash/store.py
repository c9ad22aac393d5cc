"""The store contract and the URL factory that picks a backend.

A store keeps the fingerprint -> group tables and makes the assignment of one document atomic.
Three backends share one contract, checked by one test suite:

===============================  ==============================================================
URL                              backend
===============================  ==============================================================
``memory://``                    dicts in this process, gone when it exits
``memory:///path/news.pkl``      dicts, journaled to ``news.pkl.journal`` before every answer,
                                 compacted into the snapshot ``news.pkl``
``leveldb:///path/to/dir``       LevelDB through plyvel (``pip install 'nshash[leveldb]'``)
``redis://host:6379/0?prefix=n`` Redis, shared by many processes (``pip install 'nshash[redis]'``)
===============================  ==============================================================

Query parameters tune a backend: ``fsync=always|everysec|no`` for memory and LevelDB,
``prefix=NAME`` for Redis. Unknown parameters are refused, so a typo never passes silently.

``readonly=True`` (a keyword, or ``?readonly=1``) opens a store for reading only: nothing is
created, locked or written, a missing store raises :class:`~nshash.StoreNotFoundError`, and
it works while another process is writing (see each backend for how).
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .assign import MatchPolicy
from .errors import ConfigError, NSHashError, StoreClosedError, StoreReadOnlyError
from .fingerprint import DocPrint
from .results import (
    Activity,
    Assignment,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    StoreStats,
)

__all__ = [
    "FSYNC_POLICIES",
    "ReadOnlyStore",
    "Store",
    "mask_url",
    "open_path",
    "open_store",
    "parse_url",
]

#: How often the memory journal and LevelDB writes reach the disk: after every write, about
#: once a second, or when the operating system decides. Every policy survives a killed
#: process; only ``always`` also survives a power cut without losing the last second.
FSYNC_POLICIES = ("always", "everysec", "no")


class Store(ABC):
    """A place where fingerprints, groups and documents live.

    Subclasses implement the abstract methods; :meth:`assign_many` has a default that a
    server store overrides to save round trips.
    """

    #: The URL the store was opened from, with any password masked.
    url: str = ""

    @abstractmethod
    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        """Place one document atomically; returns the answer and the anchors used.

        With *meta*, its time, url and site are recorded in the same atomic step (see
        :meth:`hot`, :meth:`activity` and :meth:`doc_meta`).
        """

    def assign_many(
        self,
        items: Sequence[tuple[DocPrint, str | None, str | None]],
        policy: MatchPolicy,
        metas: Sequence[DocMeta | None] | None = None,
    ) -> list[tuple[Assignment, tuple[int, ...]] | NSHashError]:
        """Place documents in order; a failing item yields its exception, the rest go on.

        *metas*, when given, holds one :class:`~nshash.DocMeta` (or None) per item.

        Raises:
            StoreClosedError: the store is closed (that is no item's failure).
        """
        out: list[tuple[Assignment, tuple[int, ...]] | NSHashError] = []
        for i, (doc, doc_id, title) in enumerate(items):
            try:
                meta = metas[i] if metas is not None else None
                out.append(self.assign(doc, policy, doc_id, title, meta))
            except StoreClosedError:
                raise
            except NSHashError as exc:
                out.append(exc)
        return out

    @abstractmethod
    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        """Return the group a document would join, or None; writes nothing."""

    @abstractmethod
    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        """Say which group a document would join and why; writes nothing."""

    @abstractmethod
    def resolve(self, similar_id: int) -> int:
        """Return the canonical id of *similar_id* (itself unless it was merged)."""

    @abstractmethod
    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return what was answered for *doc_id*, with its current canonical id, or None."""

    @abstractmethod
    def group(self, similar_id: int) -> Group | None:
        """Return the group *similar_id* resolves to, or None if no such id was handed out."""

    def group_head(self, similar_id: int, members: int) -> Group | None:
        """:meth:`group` with only its first *members* members listed (``size`` is whole):
        what a listing of many large groups needs. Stores override it to read no more."""
        group = self.group(similar_id)
        if group is None or len(group.members) <= members:
            return group
        return Group(group.similar_id, group.size, group.members[:members])

    @abstractmethod
    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return up to *limit* groups of at least *min_size* documents, largest first."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Return counts over the whole store."""

    @abstractmethod
    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        """Rank groups by their documents in the hours *first_hour* .. *last_hour*.

        Hours are counted since the epoch (``time // 3600``), both ends included. Only
        documents added with a :class:`~nshash.DocMeta` count. The work is proportional to
        the groups active in those hours, never to the whole store.

        Returns:
            Up to *limit* ``(canonical id, documents)`` pairs, most documents first, ties by
            smaller id.
        """

    @abstractmethod
    def activity(self, similar_id: int) -> Activity | None:
        """Return when the group *similar_id* resolves to got its documents, or None when
        none of them was tracked."""

    @abstractmethod
    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        """Return the :class:`~nshash.DocMeta` kept for each of *doc_ids* (None where none)."""

    def ping(self) -> None:  # noqa: B027 - a no-op is right for in-process stores
        """Raise a :class:`~nshash.StoreError` unless the store can serve requests."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release everything; later calls raise :class:`~nshash.StoreClosedError`."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url!r}>"


#: Query options whose value is a secret (``password=``, ``auth_token=``, ``api_key=``...).
_SECRET_OPTION = re.compile(r"pass|pwd|secret|token|auth|credential|(?:^|_)key$", re.IGNORECASE)


def mask_url(url: str) -> str:
    """Return *url* with every secret in it replaced by ``***``.

    The password of the user part (a user part with no ``:`` is masked whole, since some
    clients read it as the password) and the value of every query option named like a
    secret (``password``, ``token``, ``api_key``...). It never raises, whatever the string:
    a bad port or a stray bracket is left for the URL parser to report.

    Example:
        >>> mask_url("redis://:secret@cache:6379/0")
        'redis://:***@cache:6379/0'
        >>> mask_url("redis://cache:99999/0?password=S3cret&prefix=news")
        'redis://cache:99999/0?password=***&prefix=news'
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        # Not a URL; still, "user:secret@host" without a scheme keeps its secret.
        return f"***@{url.rpartition('@')[2]}" if "@" in url else url
    cut = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1:
            cut = min(cut, at)
    netloc, tail = rest[:cut], rest[cut:]
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, _secret = userinfo.partition(":")
        netloc = f"{user}:***@{hostport}" if colon else f"***@{hostport}"
    head, q, after = tail.partition("?")
    if q:
        query, hash_, fragment = after.partition("#")
        pairs = []
        for pair in query.split("&"):
            name, eq, _value = pair.partition("=")
            pairs.append(f"{name}=***" if eq and _SECRET_OPTION.search(name) else pair)
        tail = head + "?" + "&".join(pairs) + hash_ + fragment
    return f"{scheme}://{netloc}{tail}"


def parse_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split a store URL into its scheme, its path and its query options.

    Raises:
        ConfigError: the URL has no scheme or repeats an option.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = mask_url(url) if isinstance(url, str) else url
        raise ConfigError(f"A store URL looks like 'memory://' or 'leveldb:///path', not {shown!r}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError as exc:
        raise ConfigError(f"Invalid store URL {mask_url(url)!r}: {exc}") from None
    options: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key in options:
            raise ConfigError(f"Option {key!r} is given twice in {mask_url(url)!r}")
        options[key] = value
    # memory:// and leveldb:// take a file path: "leveldb:///abs/dir" or "leveldb://rel/dir".
    path = (
        parts.path
        if parts.scheme.lower().startswith(("redis", "unix"))
        else (parts.netloc + parts.path)
    )
    return parts.scheme.lower(), path, options


def _fsync_option(options: dict[str, Any], url: str) -> str:
    fsync = options.pop("fsync", "everysec")
    if fsync not in FSYNC_POLICIES:
        raise ConfigError(
            f"fsync must be one of {', '.join(FSYNC_POLICIES)}, not {fsync!r} in {mask_url(url)!r}"
        )
    return str(fsync)


def _readonly_option(options: dict[str, Any], url: str) -> bool:
    value = options.pop("readonly", False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
        return value.lower() in ("1", "true", "yes")
    raise ConfigError(f"readonly must be true or false, not {value!r} in {mask_url(url)!r}")


def _refuse_unknown(options: dict[str, Any], url: str) -> None:
    if options:
        raise ConfigError(f"Unknown option(s) {sorted(options)} in store URL {mask_url(url)!r}")


def _repair_option(options: dict[str, Any], url: str) -> bool:
    value = options.pop("repair", False)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no", ""):
        return False
    raise ConfigError(f"repair must be true or false, not {value!r} in {mask_url(url)!r}")


def _open_memory(url: str, path: str, options: dict[str, Any]) -> Store:
    from .memory_store import MemoryStore

    fsync = _fsync_option(options, url)
    repair = _repair_option(options, url)
    readonly = _readonly_option(options, url)
    _refuse_unknown(options, url)
    if readonly and not path:
        raise ConfigError(
            f"{mask_url(url)!r} starts empty in every process, so there is nothing to read;"
            " give a saved store such as memory:///path/news.pkl"
        )
    return MemoryStore(path or None, fsync=fsync, repair=repair, readonly=readonly)


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"This store needs the {module!r} package: pip install 'nshash[{extra}]'"
        ) from exc


def _open_leveldb(url: str, path: str, options: dict[str, Any]) -> Store:
    _require("plyvel", "leveldb")
    from .leveldb_store import LevelDBStore

    if not path or path == "/":
        raise ConfigError(
            f"A LevelDB URL needs a directory: 'leveldb:///path/to/dir', not {mask_url(url)!r}"
        )
    fsync = _fsync_option(options, url)
    repair = _repair_option(options, url)
    readonly = _readonly_option(options, url)
    _refuse_unknown(options, url)
    return LevelDBStore(path, fsync=fsync, repair=repair, readonly=readonly)


def _open_redis(url: str, path: str, options: dict[str, Any]) -> Store:
    _require("redis", "redis")
    readonly = _readonly_option(options, url)
    module = importlib.import_module("nshash.redis_store")
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

    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        return self.inner.hot(first_hour, last_hour, limit)

    def activity(self, similar_id: int) -> Activity | None:
        return self.inner.activity(similar_id)

    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        return self.inner.doc_meta(doc_ids)

    def ping(self) -> None:
        self.inner.ping()

    def close(self) -> None:
        self.inner.close()


#: Scheme -> opener. Adding a backend means one module and one row here.
_OPENERS: dict[str, Callable[[str, str, dict[str, Any]], Store]] = {
    "memory": _open_memory,
    "leveldb": _open_leveldb,
    "redis": _open_redis,
    "rediss": _open_redis,
    "unix": _open_redis,
}


def open_path(scheme: str, path: str, **options: Any) -> Store:
    """Open a file-backed store (``memory`` or ``leveldb``) at *path*, with no URL quoting."""
    if scheme not in ("memory", "leveldb"):
        raise ConfigError(f"open_path takes 'memory' or 'leveldb', not {scheme!r}")
    return _OPENERS[scheme](f"{scheme}://{path}", path, dict(options))


def open_store(url: str, **options: Any) -> Store:
    """Open the store a URL names.

    Args:
        url: ``memory://``, ``memory:///path/file.pkl``, ``leveldb:///path/dir`` or
            ``redis://host:port/db?prefix=NAME``.
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
