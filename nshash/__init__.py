"""nshash: near-duplicate detection for crawled articles.

Give every article a ``similar_id``; reposts of one story share it::

    from nshash import NSHash
    nsh = NSHash.open("memory://")
    nsh.add(text, doc_id="a1").similar_id

The package, from the top (imports flow downwards only; ``tests/test_layout.py`` checks it,
and that no module imports itself back through others)::

    cli/           the command line: main, input and output formats, Parquet
    client.py      the HTTP client; scrapy.py the Scrapy pipeline; spark.py the Spark job
    methods/       the dedup methods, each with its tables on every backend:
      nshash/        NSHash (core), the assignment and its guard (assign, with its optional
                     compiled half: compiled, _assign.c), the store contract (base) and
                     factory (store), its tables in memory (memory), on any ordered
                     key-value backend (kvstore: LevelDB, SQLite) and in Redis (Lua)
      keyed.py       seed 001's four keys (KeyedDedup), behind Bloom filters (bloom.py)
      simhash.py     seed 002's simhash (SimhashDedup)
    method.py      what every method shares (add_many, get_similar, the context manager)
    toolkit/       the similarity measures and soft-404 detection (seeds 000, 002, 004)
    stores/        the backends every method stands on, one module each: memory (the memory
                   key-value store, kept by durable: journal, snapshot and lock of every
                   memory store), leveldb, sqlite, redis (connections and errors; each
                   method's Lua in lua/, loaded by scripts); kv (the key-value interfaces),
                   registry (which URL scheme opens which backend), url (store URLs)
    text/          the text pipeline: folding, sentence keys, shingles, anchors and sketches,
                   the simhash fingerprint (simprint), the optional compiled kernel
    errors.py, results.py, inputs.py   the vocabulary every layer shares

An ``add`` flows down and back: the text pipeline makes the document's fingerprints
(:class:`~nshash.DocPrint`); the method hands them to its store, whose tables run the
assignment in one atomic step (a journal line, a LevelDB batch, a SQLite transaction or one
Lua call on the backend); the answer comes back as an :class:`~nshash.AddResult`. The HTTP
service (``service/``) and the command line sit on the methods.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigError,
    CorrectionError,
    EmptyDocumentError,
    NSHashError,
    StateError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from .methods.nshash.assign import MatchPolicy
from .methods.nshash.base import Store
from .methods.nshash.core import Document, NSHash
from .methods.nshash.store import open_store
from .results import (
    Activity,
    AddResult,
    Candidate,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    HotGroup,
    Member,
    StoreStats,
)
from .text.fingerprint import DocPrint, Fingerprinter, split_sentences
from .text.kernel import kernel_info
from .text.normalize import normalize_key, normalize_text

if TYPE_CHECKING:
    from .methods.keyed import KeyedDedup
    from .methods.simhash import SimhashDedup

    __version__: str


def __getattr__(name: str) -> Any:
    """Import :class:`KeyedDedup` and :class:`SimhashDedup` and look ``__version__`` up on
    first use: ``import nshash`` stays quick without them (the command line's startup is a
    fixed cost of every run)."""
    if name == "KeyedDedup":
        from .methods.keyed import KeyedDedup

        return KeyedDedup
    if name == "SimhashDedup":
        from .methods.simhash import SimhashDedup

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


#: Where the modules of the flat layout of nshash 0.1 live now: ``import nshash.similarity``
#: (and the other old paths) still works, with a DeprecationWarning naming the new one.
MOVED_MODULES = {
    "assign": "methods.nshash.assign",
    "bloom": "methods.bloom",
    "core": "methods.nshash.core",
    "durable": "stores.durable",
    "fingerprint": "text.fingerprint",
    "io": "cli.io",
    "kernel": "text.kernel",
    "keyed": "methods.keyed",
    "leveldb_store": "methods.nshash.leveldb",
    "memory_store": "methods.nshash.memory",
    "normalize": "text.normalize",
    "parquet": "cli.parquet",
    "redis_store": "methods.nshash.redis",
    "similarity": "toolkit.similarity",
    "soft404": "toolkit.soft404",
    "store": "methods.nshash.store",
    "tokenize": "text.tokenize",
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old module path as the module now at *target* (one module, two names)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.target}; import it from there", DeprecationWarning, 2
        )
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED_MODULES` (and nothing else)."""

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        name = fullname.removeprefix(__name__ + ".")
        if name == fullname or name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(
            fullname, _MovedLoader(f"{__name__}.{MOVED_MODULES[name]}")
        )


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


__all__ = [
    "Activity",
    "AddResult",
    "Candidate",
    "ConfigError",
    "Correction",
    "CorrectionError",
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
    "StateError",
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
