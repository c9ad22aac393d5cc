"""Which key-value backend a ``memory://`` or ``leveldb://`` URL names (keyed and simhash)."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigError
from .kv import KV
from .url import _fsync_option, _refuse_unknown, mask_url, parse_url

__all__ = ["open_kv"]


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
        from .memory import MemoryKV

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
        from .leveldb import LevelKV  # plyvel is optional: imported for LevelDB only

        return LevelKV(path, fsync, method)
    raise ConfigError(
        f"Unknown store scheme {scheme!r} in {mask_url(url)!r}; "
        "use one of ['leveldb', 'memory', 'redis', 'rediss', 'unix']"
    )
