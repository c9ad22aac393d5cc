"""Which backend module a store URL's scheme names: the one table that lists them.

Every method opens its in-process tables through :func:`open_kv`: the keyed and simhash
methods on any backend here, the nshash method on the ordered ones (its memory store keeps
its own dicts, its Redis store runs in Lua). Adding a backend is one module with a class
implementing :class:`~nshash.stores.kv.KV` (or :class:`~nshash.stores.kv.OrderedKV`) and a
``from_url`` class method, and one row of :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .kv import KV, OrderedKV
from .url import mask_url, parse_url, readonly_option, repair_option, require_package

__all__ = ["BACKENDS", "Backend", "open_kv", "open_ordered_kv", "ordered_schemes"]


@dataclass(frozen=True)
class Backend:
    """A backend: where its key-value class lives and what it needs installed.

    Attributes:
        module: the module under ``nshash.stores``.
        cls: the class there (with ``from_url(url, path, options, method, readonly, repair)``).
        ordered: whether it is an :class:`~nshash.stores.kv.OrderedKV` (the nshash tables
            need one).
        package: the package it imports, and the extra that installs it (None: nothing).
    """

    module: str
    cls: str
    ordered: bool
    package: tuple[str, str] | None = None


#: Scheme -> backend, for the tables that live in this process (Redis keeps its own).
BACKENDS: dict[str, Backend] = {
    "memory": Backend("memory", "MemoryKV", ordered=False),
    "leveldb": Backend("leveldb", "LevelKV", ordered=True, package=("plyvel", "leveldb")),
    "sqlite": Backend("sqlite", "SQLiteKV", ordered=True),
}


def ordered_schemes() -> list[str]:
    """The schemes whose backend can hold the nshash tables."""
    return [scheme for scheme, backend in BACKENDS.items() if backend.ordered]


def open_ordered_kv(
    url: str, options: dict[str, Any], method: str, *, path: str | None = None
) -> OrderedKV:
    """:func:`open_kv` for tables that need an :class:`~nshash.stores.kv.OrderedKV` (the
    nshash tables); ``readonly`` and ``repair`` options are taken."""
    kv = open_kv(url, options, method, ordered=True, path=path)
    assert isinstance(kv, OrderedKV)
    return kv


def open_kv(
    url: str,
    options: dict[str, Any],
    method: str,
    *,
    ordered: bool = False,
    others: str = "",
    path: str | None = None,
) -> KV:
    """Open the key-value store *url* names for *method*'s tables.

    Args:
        url: ``memory://``, ``memory:///path``, ``leveldb:///dir``, ``sqlite:///file.db``.
        options: options that override the URL's query (``fsync``, ``readonly``, ``repair``).
        method: whose tables (their namespace in the store).
        ordered: an :class:`~nshash.stores.kv.OrderedKV` is needed.
        others: more schemes the caller opens itself, for the message naming the known ones.
        path: the store's path as it is (no URL quoting: ``open_path``), instead of the
            URL's; *options* are then the only options.

    Raises:
        ConfigError: a bad URL or option, or the backend's package missing.
        StoreError: the store cannot be opened.
    """
    if path is None:
        scheme, path, query = parse_url(url)
        query.update(options)
    else:
        scheme, query = url.partition("://")[0].lower(), dict(options)
    backend = BACKENDS.get(scheme)
    if backend is None or (ordered and not backend.ordered):
        fits = (s for s, b in BACKENDS.items() if b.ordered or not ordered)
        known = sorted({*fits, *others.split()})
        raise ConfigError(
            f"Unknown store scheme {scheme!r} in {mask_url(url)!r}; use one of {known}"
        )
    if backend.package is not None:
        require_package(*backend.package)
    # Only the nshash tables read a store opened read-only or repair one; for the others the
    # two options stay in the query, where the backend refuses them as unknown.
    readonly = readonly_option(query, url) if ordered else False
    repair = repair_option(query, url) if ordered else False
    module = importlib.import_module(f"{__package__}.{backend.module}")
    kv: KV = getattr(module, backend.cls).from_url(url, path, query, method, readonly, repair)
    return kv
