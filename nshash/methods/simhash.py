"""The simhash method: seed 002's document dedup, a 64-bit simhash and Hamming distance <= k.

:class:`SimhashDedup` gives each article a ``similar_id`` the way seed 002 describes: the text
becomes one 64-bit weighted simhash (:func:`nshash.text.simprint.simprint`), and a document whose
fingerprint is within ``k`` bits (3 by default) of an earlier one's joins that document's
group. It answers with the same :class:`~nshash.AddResult` as :class:`~nshash.NSHash` and
:class:`~nshash.KeyedDedup`.

**The index does not scan.** A fingerprint is filed under the keys of
:func:`nshash.text.simprint.index_keys` (Manku, Jain and Das Sarma, WWW 2007: the 64 bits cut into
``k + 2`` blocks, one table per choice of two blocks, 10 tables for ``k = 3``). Two
fingerprints within ``k`` bits agree on every block of at least one table, so reading the
document's 10 buckets finds every earlier fingerprint within ``k``; each candidate in them is
checked by its exact distance.

**Groups.** A document joins the group of its nearest fingerprint within ``k`` (ties: the
smallest group id). When fingerprints of several groups are within ``k``, the document
bridges them and they merge into the smallest id (``merged_from`` lists the others, which
:meth:`~SimhashDedup.resolve` maps to it from then on), as nshash's groups do. Otherwise the
document starts a new group; ids come from a persistent counter and are never reused. A bucket
holds at most ``max_bucket`` entries (default 256): a fingerprint shared that widely is a
template, not a story, and its later copies still meet the ones already filed.

Stores
------
The same URLs as :func:`nshash.open_store`; the tables live beside any other method's.

================================  ===========================================================
URL                               where the simhash tables live
================================  ===========================================================
``memory://``, ``memory:///p``    a dict; with a path, journaled before every answer and
                                  snapshotted like the nshash memory store
``leveldb:///path/dir``           LevelDB under the key prefix ``simhash\\x00``
``redis://host:6379/0?prefix=P``  Redis keys ``{P}:simhash:*``, one Lua script call a document
================================  ===========================================================

Key-value layout (integers 8 bytes big-endian): ``m:format``, ``m:settings`` (the settings
that define the fingerprints: ``k``, ``blocks``, ``top``) and the counters ``m:counter``,
``m:documents``, ``m:groups``; ``b`` + table key: the bucket, ``(fingerprint, group id)``
pairs of 16 bytes; ``p`` + group id: the id a merged group resolves to; ``d`` + doc_id: JSON
``[similar_id, duplicate, merged_from, title, fingerprint, sequence]``.

In Redis the buckets are the hash ``{P}:simhash:idx`` (table key -> packed pairs, each
fingerprint and id as two 32-bit halves), parents ``{P}:simhash:parent``, records
``{P}:simhash:docs``, counters ``{P}:simhash:counter``, ``:documents``, ``:groups``; the
settings in ``{P}:simhash:meta``. ``nshash/lua/simhash_assign.lua`` places a document in one
atomic call, so concurrent writers get the answers of a serial run in Redis's order
(:meth:`SimhashDedup.sequence` gives that order).

Example:
    >>> sd = SimhashDedup.open("memory://")
    >>> text = "The central bank raised rates on Tuesday and markets fell sharply. " * 3
    >>> a = sd.add(text, "a")
    >>> b = sd.add(text + " Reposted from the wire.", "b")
    >>> a.similar_id == b.similar_id, b.duplicate
    (True, True)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, StoreCorruptError
from ..inputs import check_doc_id, check_text, check_title
from ..method import Method
from ..results import AddResult, DocumentRecord, StoreStats
from ..stores.kv import KV, KVTables
from ..stores.registry import open_kv
from ..stores.scripts import lua_script
from ..stores.url import parse_url, require_package
from ..text.simprint import DEFAULT_K, TOP, index_keys, index_layout, simprint

__all__ = ["SimhashDedup", "SimhashDoc", "prepare"]

_U64 = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")
_FORMAT = b"1"
_META_NAMES = ("counter", "documents", "groups")


@dataclass(frozen=True, slots=True)
class SimhashDoc:
    """A document ready to add: its fingerprint and the index keys it is filed under."""

    fingerprint: int
    keys: tuple[int, ...]


def prepare(text: str, k: int = DEFAULT_K, blocks: int | None = None, top: int = TOP) -> SimhashDoc:
    """The fingerprint of *text* and its index keys for *k* and *blocks* (no store needed).

    Raises:
        ConfigError: *text* is not a str, or an option is out of range.
        EmptyDocumentError: *text* has no letter or digit.
    """
    fp = simprint(check_text(text), top=top)
    return SimhashDoc(fp, tuple(index_keys(fp, k, blocks)))


@dataclass(frozen=True, slots=True)
class _Placed:
    """Where the store put a document (or, for a known doc_id, its first answer)."""

    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...]
    record: DocumentRecord | None = None


def _choose(candidates: Iterable[tuple[int, int]]) -> tuple[int | None, tuple[int, ...]]:
    """From ``(distance, group)`` pairs within k: the group to join and the ones to merge.

    The nearest fingerprint's group is joined (ties: the smallest id); every other group within
    k merges into the smallest id of all, which is then the answer.
    """
    groups = sorted({g for _, g in candidates})
    if not groups:
        return None, ()
    return groups[0], tuple(groups[1:])


def _record_json(
    sid: int, duplicate: bool, merged: Sequence[int], title: str | None, fp: int, seq: int
) -> bytes:
    value = [sid, duplicate, list(merged), title, fp, seq]
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _parse_record(doc_id: str, raw: bytes) -> tuple[DocumentRecord, int]:
    """The record of *doc_id* and the sequence number at which it was applied."""
    try:
        sid, duplicate, merged, title, fp, seq = json.loads(raw)
        if (
            type(sid) is not int
            or type(duplicate) is not bool
            or type(fp) is not int
            or type(seq) is not int
            or not (title is None or type(title) is str)
            or any(type(m) is not int for m in merged)
        ):
            raise ValueError("a field has the wrong type")
    except (ValueError, TypeError) as exc:
        raise StoreCorruptError(
            f"The simhash record of doc_id {doc_id!r:.80} is unreadable: {exc}"
        ) from exc
    return DocumentRecord(doc_id, sid, duplicate, tuple(merged), title, (fp,)), seq


class _Backend(ABC):
    """The storage of the simhash method: one implementation per kind of store."""

    url: str = ""

    @abstractmethod
    def settle(self, settings: dict[str, Any]) -> None:
        """Store the fingerprint-defining settings on first use; refuse different ones later."""

    @abstractmethod
    def place(self, doc: SimhashDoc, k: int, doc_id: str | None, title: str | None) -> _Placed:
        """File *doc* in its group, atomically (a known *doc_id*: its first answer)."""

    @abstractmethod
    def lookup(self, doc: SimhashDoc, k: int) -> int | None:
        """The group *doc* would join, or None; writes nothing."""

    @abstractmethod
    def resolve(self, gid: int) -> int:
        """The id *gid* resolves to after merges."""

    @abstractmethod
    def record(self, doc_id: str) -> tuple[DocumentRecord, int] | None:
        """The stored record of *doc_id* and its sequence number, or None."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Counts over the store."""

    def ping(self) -> None:  # noqa: B027 - nothing to reach for in-process stores
        """Raise a StoreError unless the store answers."""

    @abstractmethod
    def close(self) -> None:
        """Release everything (idempotent)."""


class _LocalBackend(KVTables, _Backend):
    """The simhash tables on a :class:`~nshash.stores.kv.KV`, behind one lock."""

    def __init__(self, kv: KV, max_bucket: int) -> None:
        super().__init__(kv, "simhash", _FORMAT, _META_NAMES)
        self._max = max_bucket

    def _resolve(self, gid: int, puts: dict[bytes, bytes] | None = None) -> int:
        for _ in range(1 << 20):
            key = b"p" + _U64.pack(gid)
            raw = puts.get(key) if puts else None
            if raw is None:
                raw = self._kv.get(key)
            if raw is None:
                return gid
            gid = _U64.unpack(raw)[0]
        raise StoreCorruptError(f"The merges of {self.url!r} form a cycle", url=self.url)

    def _near(
        self, doc: SimhashDoc, k: int
    ) -> tuple[list[tuple[int, int]], list[tuple[bytes, bytes]]]:
        """``(distance, canonical group)`` of every filed fingerprint within *k* (a distance
        of 0: the same fingerprint is filed already), and the document's buckets as read."""
        fp = doc.fingerprint
        out: set[tuple[int, int]] = set()
        buckets = []
        get = self._kv.get
        for key in doc.keys:
            bkey = b"b" + _U64.pack(key)
            entry = get(bkey) or b""
            buckets.append((bkey, entry))
            for other, gid in _PAIR.iter_unpack(entry):
                d = (fp ^ other).bit_count()
                if d <= k:
                    out.add((d, gid))
        return [(d, self._resolve(g)) for d, g in out], buckets

    def place(self, doc: SimhashDoc, k: int, doc_id: str | None, title: str | None) -> _Placed:
        with self._lock:
            self._check()
            if doc_id is not None:
                raw = self._kv.get(b"d" + doc_id.encode("utf-8"))
                if raw is not None:
                    record, _ = _parse_record(doc_id, raw)
                    return _Placed(record.similar_id, record.duplicate, (), record)
            meta = dict(self.meta)
            near, buckets = self._near(doc, k)
            root, merged = _choose(near)
            puts: dict[bytes, bytes] = {}
            if root is None:
                meta["counter"] += 1
                meta["groups"] += 1
                root = meta["counter"]
            for gid in merged:
                puts[b"p" + _U64.pack(gid)] = _U64.pack(root)
                meta["groups"] -= 1
            meta["documents"] += 1
            filed = _PAIR.pack(doc.fingerprint, root)
            full = self._max * _PAIR.size
            for bkey, entry in () if any(d == 0 for d, _ in near) else buckets:
                if len(entry) < full:
                    puts[bkey] = entry + filed
            duplicate = root <= self.meta["counter"]
            if doc_id is not None:
                puts[b"d" + doc_id.encode("utf-8")] = _record_json(
                    root, duplicate, merged, title, doc.fingerprint, meta["documents"]
                )
            puts.update(self.counter_puts(meta))
            self._kv.write(puts)
            self.meta = meta
            return _Placed(root, duplicate, merged)

    def lookup(self, doc: SimhashDoc, k: int) -> int | None:
        with self._lock:
            self._check()
            return _choose(self._near(doc, k)[0])[0]

    def resolve(self, gid: int) -> int:
        with self._lock:
            self._check()
            return self._resolve(gid)

    def record(self, doc_id: str) -> tuple[DocumentRecord, int] | None:
        return self.read_record(doc_id, _parse_record)

    def stats(self) -> StoreStats:
        with self._lock:
            self._check()
            return StoreStats(
                documents=self.meta["documents"],
                groups=self.meta["groups"],
                fingerprints=self.meta["documents"],
                common_fingerprints=0,
                last_id=self.meta["counter"],
            )


#: The Redis keys the script takes, after ``{P}:simhash:``.
_REDIS_KEYS = ("idx", "parent", "docs", "counter", "documents", "groups")


def _halves(value: int) -> tuple[int, int]:
    return value >> 32, value & 0xFFFFFFFF


class _RedisBackend(_Backend):
    """The simhash tables in Redis under ``{P}:simhash:``, placed by one Lua script."""

    def __init__(self, url: str, options: dict[str, Any], max_bucket: int) -> None:
        require_package("redis", "redis")
        # Imported here (redis is optional); as a module of Any, since the replies' types are
        # the scripts', not redis-py's declared ones.
        redis_base = importlib.import_module("nshash.stores.redis")
        # The URL, its options and Redis's errors are handled as for every method.
        self._conn = redis_base.Connection(url, **options)
        self._client = self._conn.client
        self.url = self._conn.url
        self._keys, self.meta_key = self._conn.tables("simhash", _REDIS_KEYS)
        self._script = self._client.register_script(lua_script("simhash_assign"))
        with self._errors():
            self._client.hsetnx(self.meta_key, "max_bucket", max_bucket)
            self._max = int(self._client.hget(self.meta_key, "max_bucket"))

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        errors: contextlib.AbstractContextManager[None] = self._conn.errors()
        return errors

    def settle(self, settings: dict[str, Any]) -> None:
        self._conn.settle(self.meta_key, settings, "simhash")

    def place(self, doc: SimhashDoc, k: int, doc_id: str | None, title: str | None) -> _Placed:
        hi, lo = _halves(doc.fingerprint)
        tail = json.dumps([title, doc.fingerprint], ensure_ascii=False)
        args = [doc_id or "", hi, lo, k, self._max, tail, *doc.keys]
        with self._errors():
            reply = self._script(keys=self._keys, args=args)
        if reply[0] == b"R":
            assert doc_id is not None
            record = self._decode(doc_id, reply[1])[0]
            return _Placed(record.similar_id, record.duplicate, (), record)
        return _Placed(int(reply[1]), reply[2] == 1, tuple(int(g) for g in reply[3:]))

    @staticmethod
    def _decode(doc_id: str, raw: bytes) -> tuple[DocumentRecord, int]:
        """A record as the script writes it: ``sid dup seq merged,ids`` then the JSON tail."""
        try:
            head, _, tail = raw.partition(b"\n")
            sid, dup, seq, merged = head.split(b" ")
            title, fp = json.loads(tail)
            return (
                DocumentRecord(
                    doc_id,
                    int(sid),
                    dup == b"1",
                    tuple(int(g) for g in merged.split(b",") if g),
                    title,
                    (int(fp),),
                ),
                int(seq),
            )
        except (ValueError, TypeError) as exc:
            raise StoreCorruptError(
                f"The simhash record of doc_id {doc_id!r:.80} is unreadable: {exc}"
            ) from exc

    def _resolve(self, gid: int) -> int:
        for _ in range(1 << 20):
            parent = self._client.hget(self._keys[1], gid)
            if parent is None:
                return gid
            gid = int(parent)
        raise StoreCorruptError(f"The merges of {self.url!r} form a cycle", url=self.url)

    def lookup(self, doc: SimhashDoc, k: int) -> int | None:
        fp = doc.fingerprint
        near: set[tuple[int, int]] = set()
        with self._errors():
            entries = self._client.hmget(self._keys[0], list(doc.keys))
            for entry in entries:
                for i in range(0, len(entry or b""), 16):
                    ohi, olo, ghi, glo = struct.unpack_from(">IIII", entry, i)
                    d = (fp ^ (ohi << 32 | olo)).bit_count()
                    if d <= k:
                        near.add((d, ghi << 32 | glo))
            return _choose((d, self._resolve(g)) for d, g in near)[0]

    def resolve(self, gid: int) -> int:
        with self._errors():
            return self._resolve(gid)

    def record(self, doc_id: str) -> tuple[DocumentRecord, int] | None:
        with self._errors():
            raw = self._client.hget(self._keys[2], doc_id)
        return None if raw is None else self._decode(doc_id, raw)

    def stats(self) -> StoreStats:
        with self._errors():
            counter, documents, groups = self._client.mget(self._keys[3:6])
        last = int(counter or 0)
        return StoreStats(
            documents=int(documents or 0),
            groups=int(groups or 0),
            fingerprints=int(documents or 0),
            common_fingerprints=0,
            last_id=last,
        )

    def ping(self) -> None:
        self._conn.ping()

    def close(self) -> None:
        self._conn.close()


def _open_backend(url: str, options: dict[str, Any], max_bucket: int) -> _Backend:
    scheme, _, _ = parse_url(url)
    if scheme in ("redis", "rediss", "unix"):
        return _RedisBackend(url, options, max_bucket)
    return _LocalBackend(open_kv(url, options, "simhash", others="redis rediss unix"), max_bucket)


def _positive_int(name: str, value: object, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise ConfigError(f"{name} must be an integer in [1, {most}], not {value!r}")
    return value


class SimhashDedup(Method):
    """Seed 002's simhash dedup: 64-bit weighted simhash, Hamming distance <= ``k``.

    Use it to compare with :class:`~nshash.NSHash` on your own crawl, or where reposts are
    whole copies with small edits: one fingerprint per document, ten bucket reads. It misses
    what nshash finds in heavily edited copies (a truncated repost, a long added lead), since
    those move many of the 64 bits. The module docstring has the index, the groups and the
    stores.

    Open it with :meth:`open` and a store URL, like :meth:`NSHash.open <nshash.NSHash.open>`.

    Args:
        backend: the storage (internal; use :meth:`open`).
        k: the largest Hamming distance of a repost (default 3; at most 8).
        blocks: blocks of the index (default ``k + 2``; see
            :func:`nshash.text.simprint.index_layout`).
        top: the heaviest features that make a fingerprint (default
            :data:`nshash.text.simprint.TOP`; 0 for all).

    Raises:
        ConfigError: an option is out of range, or the store was filled with other settings.

    Example:
        >>> with SimhashDedup.open("memory://") as sd:
        ...     sd.add("Storms hit the coast on Monday, closing ports. " * 4, "a").similar_id
        1
    """

    #: The documented defaults.
    DEFAULTS: dict[str, Any] = {"k": DEFAULT_K, "blocks": None, "top": TOP, "max_bucket": 256}

    def __init__(
        self, backend: _Backend, *, k: int = DEFAULT_K, blocks: int | None = None, top: int = TOP
    ) -> None:
        self.k = _positive_int("k", k, 8)
        index_layout(self.k, blocks)  # checks blocks against k
        self.blocks = self.k + 2 if blocks is None else blocks
        if not isinstance(top, int) or isinstance(top, bool) or top < 0:
            raise ConfigError(f"top must be an integer >= 0, not {top!r}")
        self.top = top
        backend.settle({"k": self.k, "blocks": self.blocks, "top": self.top, "version": 1})
        self._backend = backend

    @classmethod
    def open(cls, url: str = "memory://", **options: Any) -> SimhashDedup:
        """Open the simhash tables in the store at *url*.

        Args:
            url: a store URL, as for :func:`nshash.open_store`.
            **options: ``k``, ``blocks``, ``top`` (see the class), ``max_bucket`` (entries
                kept per bucket, default 256; fixed by the first opener on Redis); anything
                else goes to the store (``fsync``, ``prefix``, ...).

        Raises:
            ConfigError: a bad URL or option.
            StoreError: the store cannot be opened.
        """
        mine = {key: options.pop(key) for key in ("k", "blocks", "top") if key in options}
        max_bucket = _positive_int(
            "max_bucket", options.pop("max_bucket", cls.DEFAULTS["max_bucket"]), 1 << 16
        )
        backend = _open_backend(url, options, max_bucket)
        try:
            return cls(backend, **mine)
        except BaseException:
            backend.close()
            raise

    def prepare(self, text: str) -> SimhashDoc:
        """The fingerprint and index keys of *text* (pure: no store access).

        Raises:
            ConfigError: *text* is not a str.
            EmptyDocumentError: *text* has no letter or digit.
        """
        return prepare(text, self.k, self.blocks, self.top)

    def add(self, text: str, doc_id: str | None = None, *, title: str | None = None) -> AddResult:
        """Add one document and return its group.

        Args:
            text: the article text.
            doc_id: your id for it; the same ``doc_id`` again changes nothing and returns the
                first answer (``replayed=True``).
            title: stored with the record (it does not take part in the fingerprint).

        Returns:
            An :class:`~nshash.AddResult`; ``fingerprints`` holds the one simhash.

        Raises:
            ConfigError: *text*, *doc_id* or *title* has the wrong type.
            EmptyDocumentError: *text* has no letter or digit.
            StoreError: the store failed.
        """
        doc_id = check_doc_id(doc_id)
        check_title(title)
        return self.add_prepared(self.prepare(text), doc_id, title=title)

    def add_prepared(
        self, doc: SimhashDoc, doc_id: str | None = None, *, title: str | None = None
    ) -> AddResult:
        """Add a document prepared earlier by :meth:`prepare`."""
        doc_id = check_doc_id(doc_id)
        check_title(title)
        placed = self._backend.place(doc, self.k, doc_id, title)
        if placed.record is not None:
            rec = placed.record
            now = self._backend.resolve(rec.similar_id)
            return AddResult(
                rec.similar_id,
                rec.duplicate,
                (),
                rec.fingerprints,
                rec.doc_id,
                True,
                now if now != rec.similar_id else None,
            )
        return AddResult(
            placed.similar_id, placed.duplicate, placed.merged_from, (doc.fingerprint,), doc_id
        )

    def distance(self, a: str, b: str) -> int:
        """The Hamming distance of two texts' fingerprints, as this method compares them."""
        return (self.prepare(a).fingerprint ^ self.prepare(b).fingerprint).bit_count()

    def query(self, text: str) -> int | None:
        """Return the ``similar_id`` *text* would get, or None if it is new; writes nothing."""
        return self._backend.lookup(self.prepare(text), self.k)

    def resolve(self, similar_id: int) -> int:
        """Return the canonical id for *similar_id* (ids merged away resolve to the survivor)."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self._backend.resolve(similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return the stored answer for *doc_id* (with its current canonical id), or None."""
        checked = check_doc_id(doc_id)
        assert checked is not None
        found = self._backend.record(checked)
        if found is None:
            return None
        rec = found[0]
        now = self._backend.resolve(rec.similar_id)
        return DocumentRecord(
            rec.doc_id, now, rec.duplicate, rec.merged_from, rec.title, rec.fingerprints
        )

    def sequence(self, doc_id: str) -> int | None:
        """The position (from 1) at which the store applied *doc_id*, or None if unknown.

        Replaying a store's documents serially in this order gives the same groups and ids.
        """
        checked = check_doc_id(doc_id)
        assert checked is not None
        found = self._backend.record(checked)
        return None if found is None else found[1]

    def stats(self) -> StoreStats:
        """Counts over the store: documents, groups (after merges), the last id given."""
        base = self._backend.stats()
        return StoreStats(
            base.documents,
            base.groups,
            base.fingerprints,
            base.common_fingerprints,
            base.last_id,
            {"method": "simhash", "k": self.k},
        )

    def ping(self) -> None:
        """Raise a :class:`~nshash.StoreError` unless the store answers."""
        self._backend.ping()

    @property
    def url(self) -> str:
        """The store URL, with any password masked."""
        return self._backend.url

    def close(self) -> None:
        """Close the store (a memory store with a path writes its snapshot)."""
        self._backend.close()

    def __repr__(self) -> str:
        return f"SimhashDedup({self.url!r}, k={self.k}, blocks={self.blocks}, top={self.top})"
