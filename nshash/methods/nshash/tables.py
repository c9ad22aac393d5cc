"""The memory store's compact tables: compiled where the assignment's extension is built
(``AnchorMap``, ``VoteMap``, ``GroupTable`` and ``DocTable`` of ``_assign.c``), dicts on the
pure path, with the same mapping protocol.

:mod:`~nshash.methods.nshash.memory` keeps all its large tables in them. The key-value stores
(:mod:`~nshash.methods.nshash.kvstore`) keep their common hashes, which they hold in memory, in
an :func:`anchor_table` too (each hash mapped to 1).
"""

from __future__ import annotations

import struct
from collections.abc import MutableMapping
from typing import Any, TypeVar

from .compiled import compiled

__all__ = [
    "COMPILED",
    "anchor_table",
    "doc_table",
    "group_table",
    "key_filter",
    "packed",
    "plain",
    "vote_table",
]

#: The compiled anchor table (``AnchorMap``: fingerprint -> group id in 12 bytes an entry,
#: where a dict entry with its two ints takes ~85), which holds ``fp``, ``exact`` and ``common``
#: (each common hash mapped to 1, where a set of ints took ~110 bytes a hash); None on
#: the pure path, where they are dicts. A snapshot keeps it packed (``pack()``), and either
#: path reads either form.
_MAP = compiled("AnchorMap")
_PACKED_ANCHOR = struct.Struct("<QI")
#: The compiled vote table (``VoteMap``: hash -> the ids of the groups kept apart on it, in
#: slots of 3 ids, 20 bytes an entry where a dict entry with its tuple takes ~200), packed like
#: an AnchorMap but for a 4-byte width first and that many ids (0 past the tuple) an entry;
#: None on the pure path, where it is a dict.
_VOTE_MAP = compiled("VoteMap")
#: The compiled per-group table (``GroupTable``: group id -> object, a slot of 8 bytes an id in
#: pages of 1024 ids, where a dict entry with its int key takes about 70, and which grows
#: without a dict's resize pause), which holds ``sketch``, ``size`` and ``members``; None on
#: the pure path, where they are dicts. A snapshot keeps them as dicts.
_GROUP_TABLE = compiled("GroupTable")
#: The compiled document table (``DocTable``: doc id -> packed record, a slot of 16 bytes and
#: each record in a raw block of its length and bytes, where a dict entry with its bytes object
#: takes ~75 bytes more), which holds ``docs``; None on the pure path, where it is a dict. A
#: snapshot keeps it as a dict.
_DOC_TABLE = compiled("DocTable")
#: The compiled Bloom filter of 64-bit keys (``KeyFilter``); None on the pure path.
_KEY_FILTER = compiled("KeyFilter")


def anchor_table(packed: bytes = b"", filtered: bool = False) -> MutableMapping[int, int]:
    """An empty ``fp``, ``exact`` or ``common`` table (an AnchorMap where compiled, else a
    dict), or one holding the entries *packed* (12 bytes each: key, id; little-endian).
    *filtered*: the AnchorMap keeps a Bloom filter of its keys from the start (the ``common``
    table, asked about every sketch value a placement compares, most of which it does not
    hold; it would make one on the first such question anyway).

    Raises:
        ValueError: *packed* is not whole entries, repeats a key or holds id 0.
    """
    if _MAP is not None:
        table: MutableMapping[int, int] = (
            _MAP(packed, filtered=filtered) if packed else _MAP(filtered=filtered)
        )
        return table
    if len(packed) % _PACKED_ANCHOR.size:
        raise ValueError("packed anchors are 12 bytes each")
    entries = dict(_PACKED_ANCHOR.iter_unpack(packed))
    if len(entries) * _PACKED_ANCHOR.size != len(packed) or 0 in entries.values():
        raise ValueError("packed anchors hold a repeated key or a bad id")
    return entries


_V = TypeVar("_V")


def group_table(
    entries: dict[int, _V] | None = None, blobs: bool = False
) -> MutableMapping[int, _V]:
    """A table keyed by group id (a GroupTable where compiled, else a dict), holding
    *entries* (a dict whose keys are group ids, checked by the caller). With *blobs*, its
    values are bytes only, each kept as a raw block (~30 bytes less than a bytes object, and
    outside the object allocator's pools): how the sketches are kept."""
    if _GROUP_TABLE is None:
        return {} if entries is None else entries
    table: MutableMapping[int, _V] = _GROUP_TABLE(entries or {}, blobs)
    return table


def doc_table(entries: dict[str, bytes] | None = None) -> MutableMapping[str, bytes]:
    """A ``docs`` table (a DocTable where compiled, else a dict), holding *entries* (a dict of
    doc ids and packed records, checked by the caller)."""
    if _DOC_TABLE is None:
        return {} if entries is None else entries
    table: MutableMapping[str, bytes] = _DOC_TABLE(entries or {})
    return table


def key_filter() -> Any:
    """A new ``KeyFilter`` (``add(key)``; ``key in f`` is True for every key added and for
    about 1 key in 240 to 40 never added, more as it grows; ~3.4 bytes a key), or None on
    the pure path."""
    return _KEY_FILTER() if _KEY_FILTER is not None else None


_K = TypeVar("_K")


def plain(table: MutableMapping[_K, _V]) -> dict[_K, _V]:
    """*table* as a dict: how a snapshot keeps a :func:`group_table` or a :func:`doc_table`
    (made in one pass, with no list of its items first: a snapshot's peak memory)."""
    return table if type(table) is dict else table.to_dict()  # type: ignore[attr-defined]


def vote_table(packed: bytes = b"") -> MutableMapping[int, tuple[int, ...]]:
    """An empty ``votes`` table (a VoteMap where compiled, else a dict), or one holding the
    entries *packed* (see :data:`_VOTE_MAP`).

    Raises:
        ValueError: *packed* is not a width and whole entries, repeats a key, holds id 0 before
            another id, or an entry of no id.
    """
    if _VOTE_MAP is not None:
        table: MutableMapping[int, tuple[int, ...]] = _VOTE_MAP(packed) if packed else _VOTE_MAP()
        return table
    if not packed:
        return {}
    width = int.from_bytes(packed[:4], "little") if len(packed) >= 4 else 0
    entry = struct.Struct(f"<Q{width}I")
    if not 1 <= width <= 1 << 16 or (len(packed) - 4) % entry.size:
        raise ValueError("packed votes are a width and whole entries")
    votes: dict[int, tuple[int, ...]] = {}
    for h, *ids in entry.iter_unpack(packed[4:]):
        kept = tuple(ids[: ids.index(0)] if 0 in ids else ids)
        if h in votes or not kept or any(ids[len(kept) :]):
            raise ValueError("packed votes hold a repeated key or a bad id")
        votes[h] = kept
    return votes


def packed(table: MutableMapping[int, Any]) -> Any:
    """What a snapshot keeps of an ``fp``, ``exact``, ``common`` or ``votes`` table: an
    AnchorMap or VoteMap packed, a dict as it is (the pure path's)."""
    return table if isinstance(table, dict) else table.pack()  # type: ignore[attr-defined]


#: Whether the tables are the compiled ones.
COMPILED = _MAP is not None
