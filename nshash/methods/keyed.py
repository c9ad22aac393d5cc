"""The keyed method: a crawler's four-key dedup pipeline (seed 001), beside nshash's anchors.

:class:`KeyedDedup` gives each article a ``similar_id`` the way the crawler of seed 001 does:

1. **Keys.** The text is normalized as nshash normalizes it (NFKC, casefolded, simplified
   script) and reduced to its letters, digits and CJK characters. Four keys come from it:
   the whole *content*, its first 100 characters (*head*), its last 100 (*tail*), and the
   *title* without crawl noise (``【…】`` and ``[…]`` tags, 转载, 转摘, 原创, 置顶, …). Head and
   tail exist only when the content is longer than 100 characters (otherwise they would be the
   content key again); the title key only when a title is given. Each key is hashed with
   ``farmhash.fingerprint64`` (``md5`` on request, as the seed does).
2. **Checks**, in the seed's order: content, then head, then tail, then title. For each key a
   Bloom filter is asked first; a *probably seen* fetches the documents filed under that key
   (the first ``max_candidates`` of them) and compares their stored term-frequency vectors
   with this one. The first candidate whose cosine reaches ``threshold`` (0.9) gives its
   ``similar_id``: the document is a duplicate. The seed takes a content match as a duplicate
   without comparing; here it is compared too, so neither a Bloom false positive nor a hash
   collision can make a false duplicate. One guard the seed does not have: a key whose
   entries already belong to ``common_groups`` (8) different groups is a site's footer or a
   columnist's byline, not a story, and is not compared (``common_groups=0`` turns it off).
3. **Otherwise** the document gets a new id from a persistent counter. Either way its four keys
   go into the filters and indexes, and its vector into the store, so later reposts can find
   it through any of them.

**Terms** (``terms=``): ``"chars"`` (default) counts each CJK character as a term and each run
of other letters or digits as one, as the seed's Java code does; ``"words"`` cuts Chinese with
jieba (:func:`nshash.text.tokenize.split_words`; ``pip install 'nshash[similarity]'``), and
then the cosine equals :func:`nshash.toolkit.similarity.cosine` with ``stop_words=False``. A
term is stored as its code point (a CJK character) or its 64-bit farmhash fingerprint
(anything else), with its count: 12 bytes a term.

There are no merges: an id, once given, never changes (``merged_from`` is always empty), and
``resolve`` is the identity.

Stores
------
The same URLs as :func:`nshash.open_store`, each backend keeping its own tables under its own
namespace (an nshash store and a keyed one can share a LevelDB directory or a Redis prefix).
The in-process backends sit on a tiny key-value layer (:class:`~nshash.stores.kv.KV`: ``get``,
an atomic ``write`` of a batch, a prefix ``scan``); Redis has its own two Lua scripts.

================================  ===========================================================
URL                               where the keyed tables live
================================  ===========================================================
``memory://``                     a dict in this process
``memory:///path/keyed.db``       a dict, every write appended to ``keyed.db.journal`` before
                                  it returns (binary records with a CRC32; a torn last record
                                  is dropped), compacted into the snapshot ``keyed.db`` on open
                                  and close (temp file, fsync, rename); ``keyed.db.lock`` admits
                                  one process. ``fsync=always|everysec|no``
``leveldb:///path/dir``           LevelDB under the key prefix ``keyed\\x00``, each document one
                                  ``write_batch(transaction=True)``. ``fsync=`` as above
``redis://host:6379/0?prefix=P``  Redis keys ``{P}:keyed:*`` (``P`` defaults to ``nshash``)
================================  ===========================================================

``fsync``: ``always`` syncs every write; ``everysec`` (default) syncs a write when a second has
passed since the last sync, and on close; ``no`` leaves it to the OS. Every write reaches the
OS before ``add`` returns, so a killed process loses nothing; a power cut may lose the writes
since the last sync.

Key-value layout of the in-process backends (integers 8 bytes big-endian):

=========================  ===================================================================
key                        value
=========================  ===================================================================
``m:format`` and ``m:NAME``  ``1``; the decimal ``counter`` (last id), ``documents``, ``keys``
``m:bloom``                the four filters as saved on close, with the document count then
``i`` + kind + hash        the documents filed under a key: number and ``similar_id``, 8 bytes
                           each, at most ``max_candidates``; kind is one byte, 0-3 for
                           content..title
``v`` + number             the document's ``similar_id`` then its packed term vector
``d`` + doc_id             JSON ``[similar_id, duplicate, title, [content, head, tail, title]]``
=========================  ===================================================================

On open the in-process filters are loaded from ``m:bloom`` when it was saved at the current
document count, and rebuilt by scanning the ``i`` keys otherwise (after a crash). In Redis the
filters are bit strings ``{P}:keyed:bloom:K`` (K one of ``c h t n``) tested and set at
:func:`nshash.methods.bloom.bit_positions`; the key index is the hash ``{P}:keyed:idx:K`` (key hash
-> comma-separated ``number:similar_id`` entries), vectors ``{P}:keyed:vec`` (number ->
``"sid " + packed``), records ``{P}:keyed:docs``, the counters ``{P}:keyed:counter`` and
``{P}:keyed:documents``, and the filter sizes in ``{P}:keyed:meta`` (the first opener's sizes
win, so every process sets the same bits).

Concurrency
-----------
In-process stores hold one lock across a document's checks and writes: concurrent threads
get the answers of some serial order. On Redis a document takes two script calls: a read-only
one (replay check, filters, candidates and their vectors in one round trip), the cosine checks
in Python, then a write script that first verifies that none of the document's key entries
grew since the read (``HSTRLEN``) and otherwise starts over (optimistic concurrency, at most
:data:`MAX_ATTEMPTS` tries). So: ids come from ``INCR`` and are never handed out twice; no
write is lost; and every answer is the one a serial run in Redis's order of writes would give
(a concurrent repost of a story that was just added sees it). The same ``doc_id`` sent twice,
even at once, is stored once and answered alike.

Example:
    >>> kd = KeyedDedup.open("memory://", expected_items=1000)
    >>> text = "The quick brown fox jumps over the lazy dog. " * 4
    >>> a = kd.add(text, title="[原创] Fox news")
    >>> b = kd.add(text + " Reposted.", title="转载：Fox news")
    >>> a.similar_id == b.similar_id, b.duplicate
    (True, True)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import re
import struct
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import farmhash

from ..errors import (
    ConfigError,
    EmptyDocumentError,
    StoreCorruptError,
    StoreError,
)
from ..inputs import check_doc_id, check_text, check_title
from ..method import Method
from ..results import AddResult, DocumentRecord, StoreStats
from ..stores.kv import KV, KVTables
from ..stores.registry import open_kv
from ..stores.scripts import lua_script
from ..stores.url import parse_url, require_package
from ..text.normalize import normalize_key, normalize_text
from ..text.tokenize import CJK_CHARS
from .bloom import LocalBloom, bit_positions, bloom_params

__all__ = [
    "DEFAULT_TITLE_NOISE",
    "KINDS",
    "MAX_ATTEMPTS",
    "KeyedDedup",
    "KeyedDoc",
    "KeyedMatch",
    "KeyMaker",
    "title_key",
]

#: The four keys, in the order they are checked.
KINDS = ("content", "head", "tail", "title")

#: Words a crawler's titles carry that say nothing about the story (seed 001 names 转摘,
#: 原创 and 置顶); removed from the title before it becomes a key.
DEFAULT_TITLE_NOISE: tuple[str, ...] = ("转载", "转摘", "转帖", "原创", "置顶", "精华", "独家")

#: Tries of one Redis write against concurrent writers before giving up with a StoreError.
MAX_ATTEMPTS = 50

#: KeyedDedup's own options; :meth:`KeyedDedup.open` passes the rest to the store.
_OPTIONS = (
    "threshold",
    "head_chars",
    "tail_chars",
    "max_candidates",
    "terms",
    "hashfunc",
    "title_noise",
    "common_groups",
    "expected_items",
    "fp_rate",
)

#: ``【独家】``, ``[原创]``, ``〖转〗``, ``〔图〕``: a short bracketed tag in a title.
_TITLE_TAG = re.compile(r"【[^】]{0,20}】|\[[^\]]{0,20}\]|〖[^〗]{0,20}〗|〔[^〕]{0,20}〕")

#: The seed's terms: one CJK character, or a run of other letters and digits.
_CJK_CHAR = re.compile(f"[{CJK_CHARS}]")
_OTHER_RUN = re.compile(f"[^\\W_{CJK_CHARS}]+")

_U64 = struct.Struct(">Q")
_MASK64 = (1 << 64) - 1


# -- documents -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KeyedDoc:
    """A document as the keyed method sees it: four key hashes and a term-frequency vector.

    Attributes:
        keys: the hashes of the content, head, tail and title keys, in that order; 0 where a
            key does not exist (short text: no head or tail; no title).
        vector: the term fingerprints, then their counts, in the same order (``2n`` ints).
    """

    keys: tuple[int, ...]
    vector: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KeyedMatch:
    """Why a document would join a group: the key that found the candidate, and the score.

    Attributes:
        similar_id: the candidate's group.
        kind: which key found it: ``"content"``, ``"head"``, ``"tail"`` or ``"title"``.
        cosine: the cosine of the two term-frequency vectors.
    """

    similar_id: int
    kind: str
    cosine: float


def title_key(title: str, noise: Iterable[str] = DEFAULT_TITLE_NOISE) -> str:
    """Return the key of a title: normalized, without tags and noise words, letters only.

    Example:
        >>> title_key("【独家】[原创] 网页爬虫：富文本判重（转载）")
        '网页爬虫富文本判重'
    """
    text = _TITLE_TAG.sub(" ", normalize_text(title))
    key = normalize_key(text)
    for word in noise:
        if word:
            key = key.replace(word, "")
    return key


def _farmhash(key: str) -> int:
    return int(farmhash.fingerprint64(key))


def _md5(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:8], "big")


_HASHFUNCS: dict[str, Callable[[str], int]] = {"farmhash": _farmhash, "md5": _md5}


def _pack_vector(vector: Sequence[int]) -> bytes:
    n = len(vector) // 2
    return struct.pack(f">{n}Q{n}I", *vector)


def _unpack_vector(blob: bytes) -> tuple[int, ...]:
    n = len(blob) // 12
    if n * 12 != len(blob):
        raise StoreCorruptError(f"A stored term vector has {len(blob)} bytes, not 12 per term")
    return struct.unpack(f">{n}Q{n}I", blob)


def _cosine(mine: dict[int, int], norm: float, other: Sequence[int]) -> float:
    """The cosine of *mine* (with its *norm*) and a packed vector's ints."""
    n = len(other) // 2
    terms, counts = other[:n], other[n:]
    other_norm = math.hypot(*counts)
    if not norm or not other_norm:
        return 0.0
    dot = sum(map(int.__mul__, counts, map(mine.get, terms, repeat(0))))
    return min(1.0, dot / (norm * other_norm))


_check_doc_id = check_doc_id
_check_title = check_title


# -- the backend interface -----------------------------------------------------------------
@dataclass
class _Found:
    """What a backend read for one document: enough to decide, and to detect a conflict."""

    #: The stored record when the ``doc_id`` was added before (then nothing else is read).
    replay: DocumentRecord | None = None
    #: Per kind: whether the Bloom filter said "probably seen".
    bloom: tuple[bool, ...] = (False, False, False, False)
    #: Per kind: ``(number, similar_id)`` of the documents filed under the key (the first
    #: ``max_candidates``).
    postings: tuple[tuple[tuple[int, int], ...], ...] = ((), (), (), ())
    #: Per kind: the size of the stored entry, for the write's conflict check (Redis).
    sizes: tuple[int, ...] = (0, 0, 0, 0)
    #: Candidate number -> (similar_id, packed vector), when the read prefetched them.
    vectors: dict[int, tuple[int, bytes]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Written:
    similar_id: int
    duplicate: bool
    record: DocumentRecord | None = None  # set when the doc_id turned out to be known


class _Backend(ABC):
    """The storage of the keyed method: one implementation per kind of store."""

    url: str = ""

    @abstractmethod
    def settle(self, settings: dict[str, Any]) -> None:
        """Store the key-defining settings on first use; refuse different ones later.

        Raises:
            ConfigError: the store was filled with other settings.
        """

    @abstractmethod
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        """Held across one document's read and write (a real lock in process, else none)."""

    @abstractmethod
    def read(self, keys: Sequence[int], doc_id: str | None) -> _Found:
        """Look the document's keys up: replay record, filters, key entries."""

    @abstractmethod
    def vector(self, number: int, found: _Found) -> tuple[int, bytes]:
        """Return ``(similar_id, packed vector)`` of stored document *number*."""

    @abstractmethod
    def write(
        self,
        doc: KeyedDoc,
        found: _Found,
        similar_id: int | None,
        doc_id: str | None,
        title: str | None,
    ) -> _Written | None:
        """File the document (new id when *similar_id* is None); None: a conflict, retry."""

    @abstractmethod
    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return the record of *doc_id*, or None."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Counts over the store."""

    def ping(self) -> None:  # noqa: B027 - nothing to reach for in-process stores
        """Raise a StoreError unless the store answers."""

    @abstractmethod
    def close(self) -> None:
        """Release everything (idempotent)."""


def _record_json(sid: int, duplicate: bool, title: str | None, keys: Sequence[int]) -> bytes:
    return json.dumps([sid, duplicate, title, list(keys)], ensure_ascii=False).encode("utf-8")


def _parse_record_json(doc_id: str, raw: bytes) -> DocumentRecord:
    try:
        sid, duplicate, title, keys = json.loads(raw)
        return DocumentRecord(doc_id, int(sid), bool(duplicate), (), title, tuple(keys))
    except (ValueError, TypeError) as exc:
        raise StoreCorruptError(f"The record of doc_id {doc_id!r} is unreadable: {exc}") from exc


_FORMAT = b"1"
_META_NAMES = ("counter", "documents", "keys")


class _LocalBackend(KVTables, _Backend):
    """The keyed tables on a :class:`~nshash.stores.kv.KV`, behind one lock, with local Bloom
    filters."""

    def __init__(self, kv: KV, expected_items: int, fp_rate: float, max_candidates: int) -> None:
        super().__init__(kv, "keyed", _FORMAT, _META_NAMES)
        self._max = max_candidates
        self._sizes = (expected_items, fp_rate)
        try:
            self._blooms = self._load_blooms()
        except BaseException:
            kv.close()
            raise

    # -- filters ---------------------------------------------------------------------------
    def _load_blooms(self) -> list[LocalBloom]:
        saved = self._kv.get(b"m:bloom")
        if saved is not None:
            loaded = self._parse_blooms(saved)
            if loaded is not None:
                return loaded
        blooms = [LocalBloom(*self._sizes) for _ in KINDS]
        for key in self._kv.scan(b"i"):
            blooms[key[1]].add(_U64.unpack_from(key, 2)[0])
        return blooms

    def _parse_blooms(self, saved: bytes) -> list[LocalBloom] | None:
        """The saved filters, if they were saved at the current count and sizes."""
        try:
            head = json.loads(saved[: saved.index(b"\n")])
            if head["documents"] != self.meta["documents"] or head["sizes"] != list(self._sizes):
                return None
            off = saved.index(b"\n") + 1
            blooms = []
            for length in head["lengths"]:
                blooms.append(LocalBloom.from_bytes(saved[off : off + length], *self._sizes))
                off += length
        except (ValueError, KeyError, TypeError):
            return None
        return blooms if len(blooms) == len(KINDS) else None

    def _save_blooms(self) -> None:
        blobs = [b.to_bytes() for b in self._blooms]
        head = {
            "documents": self.meta["documents"],
            "sizes": list(self._sizes),
            "lengths": [len(b) for b in blobs],
        }
        self._kv.write({b"m:bloom": json.dumps(head).encode() + b"\n" + b"".join(blobs)})

    # -- the contract ----------------------------------------------------------------------
    def lock(self) -> contextlib.AbstractContextManager[Any]:
        return self._lock

    @staticmethod
    def _index_key(kind: int, h: int) -> bytes:
        return b"i" + bytes((kind,)) + _U64.pack(h)

    def read(self, keys: Sequence[int], doc_id: str | None) -> _Found:
        self._check()
        if doc_id is not None:
            raw = self._kv.get(b"d" + doc_id.encode("utf-8"))
            if raw is not None:
                return _Found(replay=_parse_record_json(doc_id, raw))
        bloom: list[bool] = []
        postings: list[tuple[tuple[int, int], ...]] = []
        for kind, h in enumerate(keys):
            hit = bool(h) and h in self._blooms[kind]
            bloom.append(hit)
            entry = self._kv.get(self._index_key(kind, h)) if hit else None
            if entry:
                n = min(len(entry) // 16, self._max)
                ints = struct.unpack_from(f">{2 * n}Q", entry)
                postings.append(tuple(zip(ints[0::2], ints[1::2], strict=True)))
            else:
                postings.append(())
        return _Found(bloom=tuple(bloom), postings=tuple(postings))

    def vector(self, number: int, found: _Found) -> tuple[int, bytes]:
        raw = self._kv.get(b"v" + _U64.pack(number))
        if raw is None or len(raw) < 8:
            raise StoreCorruptError(f"Document {number} is filed but has no vector", url=self.url)
        return _U64.unpack_from(raw)[0], raw[8:]

    def write(
        self,
        doc: KeyedDoc,
        found: _Found,
        similar_id: int | None,
        doc_id: str | None,
        title: str | None,
    ) -> _Written | None:
        self._check()
        meta = dict(self.meta)
        duplicate = similar_id is not None
        if similar_id is None:
            meta["counter"] += 1
            similar_id = meta["counter"]
        meta["documents"] += 1
        number = _U64.pack(meta["documents"])
        filed = number + _U64.pack(similar_id)
        puts: dict[bytes, bytes] = {}
        for kind, h in enumerate(doc.keys):
            if not h:
                continue
            key = self._index_key(kind, h)
            entry = self._kv.get(key)
            if entry is None:
                meta["keys"] += 1
                puts[key] = filed
            elif len(entry) // 16 < self._max:
                puts[key] = entry + filed
        puts[b"v" + number] = _U64.pack(similar_id) + _pack_vector(doc.vector)
        if doc_id is not None:
            puts[b"d" + doc_id.encode("utf-8")] = _record_json(
                similar_id, duplicate, title, doc.keys
            )
        puts.update(self.counter_puts(meta))
        self._kv.write(puts)
        self.meta = meta
        for kind, h in enumerate(doc.keys):
            if h:
                self._blooms[kind].add(h)
        return _Written(similar_id, duplicate)

    def document(self, doc_id: str) -> DocumentRecord | None:
        return self.read_record(doc_id, _parse_record_json)

    def stats(self) -> StoreStats:
        with self._lock:
            self._check()
            return StoreStats(
                documents=self.meta["documents"],
                groups=self.meta["counter"],
                fingerprints=self.meta["keys"],
                common_fingerprints=0,
                last_id=self.meta["counter"],
            )

    def _release(self) -> None:
        try:
            # After a failed write the filters are not saved: the next open rebuilds them.
            if self._kv.persistent and getattr(self._kv, "failed", None) is None:
                self._save_blooms()
        finally:
            self._kv.close()


# -- Redis ---------------------------------------------------------------------------------
#: The Redis keys the scripts take, after ``{P}:keyed:``.
_REDIS_KEYS = (
    *(f"bloom:{k}" for k in "chtn"),
    *(f"idx:{k}" for k in "chtn"),
    "vec",
    "docs",
    "counter",
    "documents",
)


class _RedisBackend(_Backend):
    """The keyed tables in Redis under ``{P}:keyed:``, read and written by two Lua scripts."""

    def __init__(
        self,
        url: str,
        options: dict[str, Any],
        expected_items: int,
        fp_rate: float,
        max_candidates: int,
    ) -> None:
        require_package("redis", "redis")
        # Imported here (redis is optional); as a module of Any, since the replies' types are
        # the scripts', not redis-py's declared ones.
        redis_base = importlib.import_module("nshash.stores.redis")
        # The URL, its options and Redis's errors are handled as for every method.
        self._conn = redis_base.Connection(url, **options)
        self._client = self._conn.client
        self.url = self._conn.url
        self._keys, self._meta_key = self._conn.tables("keyed", _REDIS_KEYS)
        self._read_script = self._client.register_script(lua_script("keyed_read"))
        self._write_script = self._client.register_script(lua_script("keyed_write"))
        bits, hashes = bloom_params(expected_items, fp_rate)
        with self._errors():
            self._client.hsetnx(self._meta_key, "bits", bits)
            self._client.hsetnx(self._meta_key, "hashes", hashes)
            self._client.hsetnx(self._meta_key, "max_candidates", max_candidates)
            stored = self._client.hmget(self._meta_key, "bits", "hashes", "max_candidates")
        self.bits, self.hashes, self.max_candidates = (int(v) for v in stored)

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Redis errors as the store's typed errors, translated as for every method."""
        errors: contextlib.AbstractContextManager[None] = self._conn.errors()
        return errors

    def settle(self, settings: dict[str, Any]) -> None:
        self._conn.settle(self._meta_key, settings, "keyed")

    def lock(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def _key_args(self, keys: Sequence[int], sizes: Sequence[int] | None) -> list[Any]:
        args: list[Any] = []
        for kind, h in enumerate(keys):
            if not h:
                args.append("")
                if sizes is not None:
                    args.append(0)
                args += [0] * self.hashes
                continue
            args.append(h)
            if sizes is not None:
                args.append(sizes[kind])
            args += bit_positions(h, self.bits, self.hashes)
        return args

    def read(self, keys: Sequence[int], doc_id: str | None) -> _Found:
        args = [doc_id or "", self.hashes, self.max_candidates, *self._key_args(keys, None)]
        with self._errors():
            reply = self._read_script(keys=self._keys[:10], args=args)
        if reply[0] == 1:
            assert doc_id is not None
            return _Found(replay=self._parse_record(doc_id, reply[1]))
        bloom, postings, sizes = [], [], []
        for kind in range(len(KINDS)):
            hit, entry = reply[1 + 2 * kind], reply[2 + 2 * kind]
            bloom.append(hit == 1)
            sizes.append(len(entry))
            parts = entry.split(b",")[: self.max_candidates] if entry else []
            pairs = (part.split(b":") for part in parts)
            postings.append(tuple((int(n), int(g)) for n, g in pairs))
        vectors: dict[int, tuple[int, bytes]] = {}
        rest = reply[1 + 2 * len(KINDS) :]
        for i in range(0, len(rest), 2):
            value = rest[i + 1]
            if value is None:
                continue
            sid, _, blob = value.partition(b" ")
            vectors[int(rest[i])] = (int(sid), blob)
        return _Found(None, tuple(bloom), tuple(postings), tuple(sizes), vectors)

    def vector(self, number: int, found: _Found) -> tuple[int, bytes]:
        try:
            return found.vectors[number]
        except KeyError:
            raise StoreCorruptError(
                f"Document {number} is filed but has no vector", url=self.url
            ) from None

    @staticmethod
    def _parse_record(doc_id: str, raw: bytes) -> DocumentRecord:
        try:
            head, _, title = raw.partition(b"\n")
            sid, dup, keys = head.split(b" ")
            return DocumentRecord(
                doc_id,
                int(sid),
                dup == b"1",
                (),
                title[1:].decode("utf-8") if title[:1] == b"+" else None,
                tuple(int(h) for h in keys.split(b",")),
            )
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreCorruptError(f"The record of doc {doc_id!r} is unreadable: {exc}") from exc

    def write(
        self,
        doc: KeyedDoc,
        found: _Found,
        similar_id: int | None,
        doc_id: str | None,
        title: str | None,
    ) -> _Written | None:
        duplicate = similar_id is not None
        tail = (
            ("1 " if duplicate else "0 ")
            + ",".join(str(h) for h in doc.keys)
            + "\n"
            + ("-" if title is None else "+" + title)
        )
        args = [
            doc_id or "",
            tail,
            similar_id or 0,
            _pack_vector(doc.vector),
            self.hashes,
            self.max_candidates,
            *self._key_args(doc.keys, found.sizes),
        ]
        with self._errors():
            reply = self._write_script(keys=self._keys, args=args)
        if reply[0] == b"C":
            return None
        if reply[0] == b"R":
            assert doc_id is not None
            record = self._parse_record(doc_id, reply[1])
            return _Written(record.similar_id, record.duplicate, record)
        return _Written(int(reply[1]), duplicate)

    def document(self, doc_id: str) -> DocumentRecord | None:
        with self._errors():
            raw = self._client.hget(self._keys[9], doc_id)
        return None if raw is None else self._parse_record(doc_id, raw)

    def stats(self) -> StoreStats:
        with self._errors():
            pipe = self._client.pipeline(transaction=False)
            for key in self._keys[4:8]:
                pipe.hlen(key)
            pipe.get(self._keys[10])
            pipe.get(self._keys[11])
            *lengths, counter, documents = pipe.execute()
        last = int(counter or 0)
        return StoreStats(
            documents=int(documents or 0),
            groups=last,
            fingerprints=sum(int(n) for n in lengths),
            common_fingerprints=0,
            last_id=last,
        )

    def ping(self) -> None:
        self._conn.ping()

    def close(self) -> None:
        self._conn.close()


# -- opening -------------------------------------------------------------------------------
def _open_backend(
    url: str, options: dict[str, Any], expected_items: int, fp_rate: float, max_candidates: int
) -> _Backend:
    scheme, _, _ = parse_url(url)
    if scheme in ("redis", "rediss", "unix"):
        return _RedisBackend(url, options, expected_items, fp_rate, max_candidates)
    kv = open_kv(url, options, "keyed", others="redis rediss unix")
    return _LocalBackend(kv, expected_items, fp_rate, max_candidates)


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    return value


# -- the method ----------------------------------------------------------------------------
class KeyMaker:
    """The pure half of the keyed method: text and title in, :class:`KeyedDoc` out.

    Picklable and free of any store, so it can run in worker processes (the CLI's ``--jobs``).
    :class:`KeyedDedup` holds one; its options are the ones documented there.

    Raises:
        ConfigError: an option is out of range.
    """

    def __init__(
        self,
        *,
        head_chars: int = 100,
        tail_chars: int = 100,
        terms: str = "chars",
        hashfunc: str | Callable[[str], int] = "farmhash",
        title_noise: Sequence[str] = DEFAULT_TITLE_NOISE,
    ) -> None:
        self.head_chars = _positive_int("head_chars", head_chars)
        self.tail_chars = _positive_int("tail_chars", tail_chars)
        if terms not in ("chars", "words"):
            raise ConfigError(f"terms must be 'chars' or 'words', not {terms!r}")
        self.terms = terms
        if callable(hashfunc):
            self._hash = hashfunc
        elif isinstance(hashfunc, str) and hashfunc in _HASHFUNCS:
            self._hash = _HASHFUNCS[hashfunc]
        else:
            raise ConfigError(f"hashfunc must be 'farmhash', 'md5' or a function, not {hashfunc!r}")
        self.hashfunc = hashfunc
        if isinstance(title_noise, str) or not all(isinstance(w, str) for w in title_noise):
            raise ConfigError(f"title_noise must be a list of str, not {title_noise!r}")
        self.title_noise = tuple(title_noise)
        if terms == "words":
            from ..text.tokenize import jieba_module

            jieba_module()  # fail now, not on the first Chinese text, when jieba is missing

    def settings(self) -> dict[str, Any]:
        """The settings that define keys and terms: a store keeps the ones it was filled with."""
        return {
            "terms": self.terms,
            "hashfunc": self.hashfunc if isinstance(self.hashfunc, str) else "custom",
            "head_chars": self.head_chars,
            "tail_chars": self.tail_chars,
        }

    def prepare(self, text: str, title: str | None = None) -> KeyedDoc:
        """Compute the keys and term vector of a document.

        Raises:
            ConfigError: *text* or *title* is not a str.
            EmptyDocumentError: *text* has no letter or digit.
        """
        check_text(text)
        _check_title(title)
        normalized = normalize_text(text)
        key = normalize_key(normalized)
        if not key:
            raise EmptyDocumentError(f"The text has no letter or digit: {text[:40]!r}")
        keys = [
            self._key_hash(key),
            self._key_hash(key[: self.head_chars]) if len(key) > self.head_chars else 0,
            self._key_hash(key[-self.tail_chars :]) if len(key) > self.tail_chars else 0,
            0,
        ]
        if title:
            stripped = title_key(title, self.title_noise)
            keys[3] = self._key_hash(stripped) if stripped else 0
        if self.terms == "chars":
            # A CJK character is its code point; any other term its 64-bit fingerprint.
            cjk = Counter(_CJK_CHAR.findall(normalized))
            other = Counter(_OTHER_RUN.findall(normalized))
        else:
            from ..text.tokenize import split_words

            cjk, other = Counter(), Counter(split_words(normalized))
        if not cjk and not other:
            other = Counter(key)  # letters no term pattern knows (rare scripts)
        vector = (
            *map(ord, cjk),
            *map(farmhash.fingerprint64, other),
            *cjk.values(),
            *other.values(),
        )
        return KeyedDoc(tuple(keys), vector)

    def _key_hash(self, key: str) -> int:
        h = self._hash(key)
        if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h <= _MASK64:
            raise ConfigError(f"hashfunc must return an int in [0, 2**64), not {h!r}")
        return h or 1  # 0 means "no such key"


class KeyedDedup(Method):
    """The four-key dedup of seed 001: content, head, tail and title keys, confirmed by cosine.

    Use it beside :class:`~nshash.NSHash` to compare the two methods, or where reposts are
    mostly whole copies with a changed title, header or footer: one exact key match and one
    cosine decide, with no tuning. nshash's anchors also find reposts whose beginning, end and
    title all changed. See the module docstring for the steps, the stores and what concurrent
    writers are guaranteed.

    Open it with :meth:`open` and a store URL, like :meth:`NSHash.open <nshash.NSHash.open>`.

    Args:
        backend: the storage (internal; use :meth:`open`).
        threshold: the cosine a candidate needs to be the same story (default 0.9).
        head_chars: the length of the head key in characters (default 100).
        tail_chars: the length of the tail key in characters (default 100).
        max_candidates: documents kept and compared per key (default 32; an option of
            :meth:`open`, fixed by the first opener on Redis): a key that many documents
            share costs at most this many comparisons.
        common_groups: a key whose entries span this many different groups is boilerplate
            and is skipped (default 8; 0 compares every key, as the seed does).
        terms: ``"chars"`` (default) or ``"words"`` (see the module docstring).
        hashfunc: ``"farmhash"`` (default), ``"md5"``, or a function from a key string to a
            64-bit unsigned int (for experiments; it must be the same in every process).
        title_noise: words removed from titles (default :data:`DEFAULT_TITLE_NOISE`).

    Raises:
        ConfigError: an option is out of range.

    Example:
        >>> with KeyedDedup.open("memory://", expected_items=1000) as kd:
        ...     first = kd.add("Storms hit the coast on Monday; " * 5, doc_id="a")
        ...     kd.add("Storms hit the coast on Monday. " * 5, doc_id="b").similar_id
        1
    """

    #: The documented defaults.
    DEFAULTS: dict[str, Any] = {
        "threshold": 0.9,
        "head_chars": 100,
        "tail_chars": 100,
        "max_candidates": 32,
        "common_groups": 8,
        "terms": "chars",
        "hashfunc": "farmhash",
        "expected_items": 1_000_000,
        "fp_rate": 0.001,
    }

    def __init__(
        self,
        backend: _Backend,
        *,
        threshold: float = 0.9,
        head_chars: int = 100,
        tail_chars: int = 100,
        terms: str = "chars",
        hashfunc: str | Callable[[str], int] = "farmhash",
        title_noise: Sequence[str] = DEFAULT_TITLE_NOISE,
        common_groups: int = 8,
    ) -> None:
        if (
            not isinstance(common_groups, int)
            or isinstance(common_groups, bool)
            or (common_groups < 0)
        ):
            raise ConfigError(f"common_groups must be an integer >= 0, not {common_groups!r}")
        self.common_groups = common_groups
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not 0 < threshold <= 1
        ):
            raise ConfigError(f"threshold must be a number in (0, 1], not {threshold!r}")
        self.threshold = float(threshold)
        self.keymaker = KeyMaker(
            head_chars=head_chars,
            tail_chars=tail_chars,
            terms=terms,
            hashfunc=hashfunc,
            title_noise=title_noise,
        )
        backend.settle(self.keymaker.settings())
        self._backend = backend
        self._counters_lock = threading.Lock()
        #: Per-process diagnostics since open: ``checks`` (keys looked up), ``bloom_hits``,
        #: ``bloom_false_positives`` (the filter said yes, the index had nothing),
        #: ``compared``, ``rejected`` (cosine below the threshold), ``new``,
        #: ``matched_<kind>`` per key that found the confirmed candidate, ``common_skipped``
        #: (keys skipped as boilerplate, see ``common_groups``), and ``conflicts``
        #: (Redis writes retried because another writer filed one of the same keys first).
        self.counters: Counter[str] = Counter()

    @classmethod
    def open(cls, url: str = "memory://", **options: Any) -> KeyedDedup:
        """Open the keyed tables in the store at *url*.

        Args:
            url: a store URL, as for :func:`nshash.open_store`.
            **options: the constructor's options, plus ``expected_items`` (default 1,000,000)
                and ``fp_rate`` (default 0.001) to size the four Bloom filters and
                ``max_candidates``; anything else goes to the store (``fsync``,
                ``prefix``, ...).

        Raises:
            ConfigError: a bad URL or option.
            StoreError: the store cannot be opened.
        """
        mine = {k: options.pop(k) for k in _OPTIONS if k in options}
        expected = mine.pop("expected_items", cls.DEFAULTS["expected_items"])
        fp_rate = mine.pop("fp_rate", cls.DEFAULTS["fp_rate"])
        bloom_params(expected, fp_rate)  # check before opening anything
        max_candidates = _positive_int(
            "max_candidates", mine.pop("max_candidates", cls.DEFAULTS["max_candidates"])
        )
        backend = _open_backend(url, options, expected, fp_rate, max_candidates)
        try:
            return cls(backend, **mine)
        except BaseException:
            backend.close()
            raise

    # -- documents -------------------------------------------------------------------------
    def prepare(self, text: str, title: str | None = None) -> KeyedDoc:
        """Compute the keys and term vector of a document (pure: no store access).

        Raises:
            ConfigError: *text* or *title* is not a str.
            EmptyDocumentError: *text* has no letter or digit.
        """
        return self.keymaker.prepare(text, title)

    def _decide(self, doc: KeyedDoc, found: _Found) -> KeyedMatch | None:
        """Run the checks in order; the first confirmed candidate wins."""
        n = len(doc.vector) // 2
        mine = dict(zip(doc.vector[:n], doc.vector[n:], strict=True))
        norm = math.hypot(*doc.vector[n:])
        seen: set[int] = set()
        tally: Counter[str] = Counter()
        match = None
        for kind, h in enumerate(doc.keys):
            if not h:
                continue
            tally["checks"] += 1
            if not found.bloom[kind]:
                continue
            tally["bloom_hits"] += 1
            entries = found.postings[kind]
            if not entries:
                tally["bloom_false_positives"] += 1
                continue
            if self.common_groups and len({g for _, g in entries}) >= self.common_groups:
                tally["common_skipped"] += 1  # a site's footer or byline, not a story
                continue
            for number, _ in entries:
                if number in seen:
                    continue
                seen.add(number)
                sid, blob = self._backend.vector(number, found)
                score = _cosine(mine, norm, _unpack_vector(blob))
                tally["compared"] += 1
                if score >= self.threshold:
                    match = KeyedMatch(sid, KINDS[kind], score)
                    break
                tally["rejected"] += 1
            if match is not None:
                break
        with self._counters_lock:
            self.counters.update(tally)
        return match

    def add(self, text: str, doc_id: str | None = None, *, title: str | None = None) -> AddResult:
        """Add one document and return its group.

        Args:
            text: the article text.
            doc_id: your id for it; the same ``doc_id`` again changes nothing and returns the
                first answer (``replayed=True``).
            title: the article's title: the fourth key.

        Returns:
            An :class:`~nshash.AddResult`; ``fingerprints`` are the content, head, tail and
            title key hashes (0 where a key does not exist), ``merged_from`` is empty.

        Raises:
            ConfigError: *text*, *doc_id* or *title* has the wrong type.
            EmptyDocumentError: *text* has no letter or digit.
            StoreError: the store failed.
        """
        doc_id = _check_doc_id(doc_id)
        return self.add_prepared(self.prepare(text, title), doc_id, title=title)

    def add_prepared(
        self, doc: KeyedDoc, doc_id: str | None = None, *, title: str | None = None
    ) -> AddResult:
        """Add a document prepared earlier by :meth:`prepare`."""
        doc_id = _check_doc_id(doc_id)
        _check_title(title)
        backend = self._backend
        for _ in range(MAX_ATTEMPTS):
            with backend.lock():
                found = backend.read(doc.keys, doc_id)
                if found.replay is not None:
                    return self._replayed(found.replay)
                match = self._decide(doc, found)
                written = backend.write(
                    doc, found, None if match is None else match.similar_id, doc_id, title
                )
            if written is None:
                with self._counters_lock:
                    self.counters["conflicts"] += 1
                continue  # another writer filed one of our keys meanwhile: decide again
            if written.record is not None:
                return self._replayed(written.record)
            with self._counters_lock:
                self.counters["new" if match is None else f"matched_{match.kind}"] += 1
            return AddResult(written.similar_id, written.duplicate, (), doc.keys, doc_id)
        raise StoreError(
            f"Gave up adding a document after {MAX_ATTEMPTS} conflicting concurrent writes",
            url=backend.url,
        )

    @staticmethod
    def _replayed(record: DocumentRecord) -> AddResult:
        return AddResult(
            record.similar_id, record.duplicate, (), record.fingerprints, record.doc_id, True
        )

    def cosine(self, a: str, b: str) -> float:
        """The cosine of two texts' term-frequency vectors, as this method compares them.

        Use it to pick a ``threshold`` for your texts.

        Raises:
            ConfigError: a text is not a str.
            EmptyDocumentError: a text has no letter or digit.
        """
        x, y = self.prepare(a).vector, self.prepare(b).vector
        n = len(x) // 2
        mine = dict(zip(x[:n], x[n:], strict=True))
        return _cosine(mine, math.hypot(*x[n:]), y)

    def explain(self, text: str, *, title: str | None = None) -> KeyedMatch | None:
        """Return the match *text* would get (key, cosine, group), or None; writes nothing."""
        doc = self.prepare(text, title)
        with self._backend.lock():
            return self._decide(doc, self._backend.read(doc.keys, None))

    def query(self, text: str, *, title: str | None = None) -> int | None:
        """Return the ``similar_id`` *text* would get, or None if it is new; writes nothing."""
        match = self.explain(text, title=title)
        return None if match is None else match.similar_id

    def resolve(self, similar_id: int) -> int:
        """Return *similar_id*: the keyed method never merges groups."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return similar_id

    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return what was answered for *doc_id*, or None."""
        checked = _check_doc_id(doc_id)
        assert checked is not None
        return self._backend.document(checked)

    def stats(self) -> StoreStats:
        """Counts over the store: documents, groups (ids handed out), keys; plus counters."""
        base = self._backend.stats()
        with self._counters_lock:
            extra: dict[str, object] = {"method": "keyed", "counters": dict(self.counters)}
        return StoreStats(
            base.documents,
            base.groups,
            base.fingerprints,
            base.common_fingerprints,
            base.last_id,
            extra,
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
        terms = self.keymaker.terms
        return f"KeyedDedup({self.url!r}, threshold={self.threshold}, terms={terms!r})"
