"""nshash: near-duplicate detection for crawled articles.

Give every article a ``similar_id``; reposts of one story share it::

    from nshash import NSHash
    nsh = NSHash.open("memory://")
    nsh.add(text, doc_id="a1").similar_id
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .assign import MatchPolicy
from .core import Document, NSHash
from .errors import (
    ConfigError,
    EmptyDocumentError,
    NSHashError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreUnavailableError,
)
from .fingerprint import DocPrint, Fingerprinter, split_sentences
from .normalize import normalize_key, normalize_text
from .results import AddResult, DocumentRecord, Group, Member, StoreStats
from .store import Store, open_store

try:
    __version__ = version("nshash")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

if TYPE_CHECKING:
    from .keyed import KeyedDedup


def __getattr__(name: str) -> Any:
    """Import :class:`KeyedDedup` on first use: ``import nshash`` stays quick without it."""
    if name == "KeyedDedup":
        from .keyed import KeyedDedup

        return KeyedDedup
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AddResult",
    "ConfigError",
    "DocPrint",
    "Document",
    "DocumentRecord",
    "EmptyDocumentError",
    "Fingerprinter",
    "Group",
    "KeyedDedup",
    "MatchPolicy",
    "Member",
    "NSHash",
    "NSHashError",
    "Store",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreStats",
    "StoreUnavailableError",
    "__version__",
    "normalize_key",
    "normalize_text",
    "open_store",
    "split_sentences",
]
