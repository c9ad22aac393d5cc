"""LevelDBStore: the nshash tables in a LevelDB directory, opened by path.

The tables are :class:`~nshash.methods.nshash.kvstore.KVStore`'s, on
:class:`nshash.stores.leveldb.LevelKV`; ``open_store("leveldb:///path/to/dir")`` makes the
same. This class keeps the constructor of the first release.
"""

from __future__ import annotations

import os

from ...stores.leveldb import LevelKV
from .kvstore import KVStore

__all__ = ["LevelDBStore"]


class LevelDBStore(KVStore):
    """A :class:`KVStore` in the LevelDB directory *path*.

    Args:
        path: the LevelDB directory; created when missing (unless *readonly*).
        fsync: ``"always"``, ``"everysec"`` (default) or ``"no"``.
        repair: run LevelDB's repair on *path* first and recount every counter (what
            ``nshash repair`` does); :attr:`repaired` then says what was fixed.
        readonly: read a checkpoint of *path*, even while another process holds it; every
            write raises :class:`~nshash.StoreReadOnlyError`.

    Raises:
        See :class:`~nshash.stores.leveldb.LevelDB` and :class:`KVStore`.

    Example:
        >>> import tempfile
        >>> store = LevelDBStore(tempfile.mkdtemp() + "/news.ldb")
        >>> store.stats().documents
        0
        >>> store.close()
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fsync: str = "everysec",
        *,
        repair: bool = False,
        readonly: bool = False,
    ) -> None:
        kv = LevelKV(os.fspath(path), fsync, "nshash", readonly=readonly, repair=repair)
        super().__init__(kv, repair=repair)
