"""nshash: near-duplicate detection for crawled articles.

Give every article a ``similar_id``; reposts of one story share it::

    from nshash import NSHash
    nsh = NSHash.open("memory://")
    nsh.add(text, doc_id="a1").similar_id
"""

from __future__ import annotations

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
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from .fingerprint import DocPrint, Fingerprinter, split_sentences
from .kernel import kernel_info
from .normalize import normalize_key, normalize_text
from .results import (
    Activity,
    AddResult,
    Candidate,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    HotGroup,
    Member,
    StoreStats,
)
from .store import open_store
from .store_base import Store

if TYPE_CHECKING:
    from .keyed import KeyedDedup
    from .simhash_dedup import SimhashDedup

    __version__: str


def __getattr__(name: str) -> Any:
    """Import :class:`KeyedDedup` and :class:`SimhashDedup` and look ``__version__`` up on
    first use: ``import nshash`` stays quick without them (the command line's startup is a
    fixed cost of every run)."""
    if name == "KeyedDedup":
        from .keyed import KeyedDedup

        return KeyedDedup
    if name == "SimhashDedup":
        from .simhash_dedup import SimhashDedup

        return SimhashDedup
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("nshash")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            found = "0.0.0"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Activity",
    "AddResult",
    "Candidate",
    "ConfigError",
    "DocMeta",
    "DocPrint",
    "Document",
    "DocumentRecord",
    "EmptyDocumentError",
    "Explanation",
    "Fingerprinter",
    "Group",
    "HotGroup",
    "KeyedDedup",
    "MatchPolicy",
    "Member",
    "NSHash",
    "NSHashError",
    "SimhashDedup",
    "Store",
    "StoreClosedError",
    "StoreCorruptError",
    "StoreError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreReadOnlyError",
    "StoreStats",
    "StoreUnavailableError",
    "__version__",
    "kernel_info",
    "normalize_key",
    "normalize_text",
    "open_store",
    "split_sentences",
]
