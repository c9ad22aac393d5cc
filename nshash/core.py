"""NSHash: text in, ``similar_id`` out; reposts of one story share the id."""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from .assign import MatchPolicy
from .errors import ConfigError, NSHashError
from .fingerprint import DEFAULT_DELIMITERS, DocPrint, Fingerprinter
from .inputs import check_doc_id, check_text, check_title
from .results import AddResult, DocumentRecord, Explanation, Group, StoreStats
from .store import Store, open_path, open_store

__all__ = ["Document", "NSHash"]

#: What :meth:`NSHash.add_many` accepts per item: a text, or a mapping with ``text`` and
#: optionally ``id`` and ``title``.
Document = str | dict[str, Any]

#: The original release's file names: ``hashdb`` -> (store scheme, suffix added to ``name``).
_HASHDBS = {"memory": ("memory", ".hashdb.pkl"), "leveldb": ("leveldb", ".hashdb")}


#: Options of :class:`~nshash.Fingerprinter` and :class:`~nshash.MatchPolicy` that NSHash
#: passes through (besides ``n``, ``min_length``, ``hashfunc`` and ``delimiters``).
_TEXT_OPTIONS = ("max_sentences", "shingle", "sketch_rate", "sketch_size", "html")
_POLICY_OPTIONS = ("theta", "min_overlap", "sketch_cap", "merge_theta", "merge_guard", "votes")


_check_doc_id = check_doc_id


class NSHash:
    """A near-duplicate detector: gives each text the ``similar_id`` of its story.

    Each document is reduced to n anchors, short windows of its text (after folding width,
    case, script, punctuation and line breaks) chosen by a consistent sample, and a sketch of
    its whole text; a document joins a group one of its anchors hits when their sketches
    mostly agree, so what two articles share only in a site's header or footer does not join
    them (see :mod:`nshash.assign`). Groups live in a store chosen by URL; see
    :func:`nshash.open_store`.

    The constructor keeps the original release's signature: ``NSHash(name, hashfunc, hashdb)``
    keeps its state in ``name + ".hashdb.pkl"`` (memory) or the directory ``name + ".hashdb"``
    (LevelDB) in the working directory. :meth:`open` takes a store URL instead.

    Args:
        name: the file name stem for ``hashdb``'s files.
        hashfunc: ``"farmhash"`` (default) or ``"md5"``.
        hashdb: ``"memory"`` or ``"leveldb"``.
        n: anchors per document (default 16).
        min_length: the shortest sentence key that may be an anchor (default 10 characters).
        store: an open :class:`~nshash.Store` to use instead of ``name``/``hashdb``.
        **options: more tuning: ``delimiters``, ``max_sentences``, ``shingle``,
            ``sketch_rate``, ``sketch_size``, ``html`` (see :class:`~nshash.Fingerprinter`);
            ``theta``, ``min_overlap``, ``sketch_cap``, ``merge_theta``, ``merge_guard``,
            ``votes`` (see :class:`~nshash.MatchPolicy`).

    Raises:
        ConfigError: an unknown ``hashdb``, ``hashfunc`` or option.

    Example:
        >>> nsh = NSHash.open("memory://")
        >>> a = nsh.add("The quick brown fox jumps over the lazy dog. It was not amused.")
        >>> b = nsh.add("the quick brown fox jumps over the lazy dog! It was not amused")
        >>> a.similar_id == b.similar_id, b.duplicate
        (True, True)
    """

    def __init__(
        self,
        name: str = "nshash",
        hashfunc: str = "farmhash",
        hashdb: str = "memory",
        *,
        n: int = 16,
        min_length: int = 10,
        store: Store | None = None,
        **options: Any,
    ) -> None:
        delimiters = options.pop("delimiters", DEFAULT_DELIMITERS)
        sketch_options = {k: options.pop(k) for k in _TEXT_OPTIONS if k in options}
        policy_options = {k: options.pop(k) for k in _POLICY_OPTIONS if k in options}
        if options:
            raise ConfigError(f"Unknown option(s) {sorted(options)} for NSHash")
        self.fingerprinter = Fingerprinter(
            n=n,
            min_length=min_length,
            hashfunc=hashfunc,
            delimiters=delimiters,
            **sketch_options,
        )
        self.policy = MatchPolicy(n=n, **policy_options)
        if store is None:
            if hashdb not in _HASHDBS:
                raise ConfigError(f"Unknown hashdb {hashdb!r}; use 'memory' or 'leveldb'")
            if not isinstance(name, str) or not name:
                raise ConfigError(f"name must be a non-empty str, not {name!r}")
            scheme, suffix = _HASHDBS[hashdb]
            store = open_path(scheme, os.path.abspath(name + suffix))
        self.store = store

    @classmethod
    def open(cls, url: str = "memory://", *, readonly: bool = False, **options: Any) -> NSHash:
        """Open the store at *url* and return an NSHash on it.

        Args:
            url: a store URL (see :func:`nshash.open_store`).
            readonly: read the store without creating, locking or changing anything: it must
                exist, it may be held by a writer in another process (a crawl can be watched),
                and :meth:`add` raises :class:`~nshash.StoreReadOnlyError`.
            **options: NSHash options (``n``, ``min_length``, ``hashfunc``, ...); anything
                else is passed to the store (``fsync``, ``prefix``, ...).

        Raises:
            StoreNotFoundError: *readonly* and there is no store at *url*.
        """
        mine = {
            k: options.pop(k)
            for k in ("n", "min_length", "hashfunc", "delimiters", *_TEXT_OPTIONS, *_POLICY_OPTIONS)
            if k in options
        }
        if readonly:
            options["readonly"] = True
        store = open_store(url, **options)
        try:
            return cls(store=store, **mine)
        except BaseException:
            store.close()
            raise

    # -- the job -----------------------------------------------------------------------
    def prepare(self, text: str) -> DocPrint:
        """Fingerprint *text* without touching the store (pure; safe in worker processes).

        Raises:
            ConfigError: *text* is not a str, has a lone surrogate or is too long
                (:mod:`nshash.inputs`).
            EmptyDocumentError: *text* has no letter or digit.
        """
        return self.fingerprinter.prepare(check_text(text))

    def explain(self, text: str) -> Explanation:
        """Say which group *text* would join now, and why; writes nothing.

        The explanation lists the anchors looked up, the anchor candidates set aside as known
        boilerplate, and every group an anchor hit with the sketch values shared, the sizes
        compared, the score against ``theta`` and the verdict.
        """
        return self.store.explain(self.prepare(text), self.policy)

    def add(
        self,
        text: str,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        explain: bool = False,
    ) -> AddResult:
        """Add one document and return its group.

        Args:
            text: the article text.
            doc_id: your id for it. Sending the same ``doc_id`` again changes nothing and
                returns the first answer (crawlers retry), with ``canonical_id`` set when that
                group has been merged since.
            title: kept with ``doc_id`` for group listings.

        Raises:
            ConfigError: *text*, *doc_id* or *title* is refused by :mod:`nshash.inputs`
                (a wrong type, a lone surrogate, NUL in an id or title, too long).
            EmptyDocumentError: *text* has no letters or digits.
            StoreError: the store failed; nothing was written.
        """
        doc_id = _check_doc_id(doc_id)
        title = check_title(title)
        return self._add(self.fingerprinter.prepare(check_text(text)), doc_id, title, explain)

    def add_prepared(
        self,
        doc: DocPrint,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        explain: bool = False,
    ) -> AddResult:
        """Add a document fingerprinted earlier by :meth:`prepare`.

        With *explain*, the result carries an :class:`~nshash.Explanation` of the candidates
        as the store judged them just before the add (on Redis another writer may add a
        document in between).
        """
        return self._add(doc, _check_doc_id(doc_id), check_title(title), explain)

    def _add(
        self, doc: DocPrint, doc_id: str | None, title: str | None, explain: bool
    ) -> AddResult:
        """:meth:`add_prepared` for arguments already checked."""
        why = self.store.explain(doc, self.policy) if explain else None
        answer, anchors = self.store.assign(doc, self.policy, doc_id, title)
        return AddResult(
            answer.similar_id,
            answer.duplicate,
            answer.merged_from,
            anchors,
            doc_id,
            answer.replayed,
            answer.canonical_id,
            why,
        )

    def add_many(self, documents: Iterable[Document]) -> list[AddResult | NSHashError]:
        """Add documents in order, batched for server stores (one round trip on Redis).

        Each item is a text or a dict with ``text`` and optional ``id`` and ``title``. A bad
        item (empty text, a wrong type) yields its exception in place; the rest still go in.
        """
        results: list[AddResult | NSHashError | None] = []
        batch: list[tuple[DocPrint, str | None, str | None]] = []
        slots: list[int] = []
        for item in documents:
            try:
                text, doc_id, title = self._unpack(item)
                batch.append((self.prepare(text), doc_id, title))
                slots.append(len(results))
                results.append(None)
            except NSHashError as exc:
                results.append(exc)
        for slot, (_doc, doc_id, _title), outcome in zip(
            slots, batch, self.store.assign_many(batch, self.policy), strict=True
        ):
            if isinstance(outcome, NSHashError):
                results[slot] = outcome
                continue
            answer, anchors = outcome
            results[slot] = AddResult(
                answer.similar_id,
                answer.duplicate,
                answer.merged_from,
                anchors,
                doc_id,
                answer.replayed,
                answer.canonical_id,
            )
        return [r for r in results if r is not None]

    @staticmethod
    def _unpack(item: Document) -> tuple[str, str | None, str | None]:
        if isinstance(item, str):
            return item, None, None
        if isinstance(item, dict):
            text = item.get("text")
            if not isinstance(text, str):
                raise ConfigError(f"A document needs a 'text' string, not {text!r:.80}")
            return text, _check_doc_id(item.get("id")), check_title(item.get("title"))
        raise ConfigError(f"A document is a str or a dict, not {type(item).__name__}")

    def get_similar(self, text: str) -> int:
        """Add *text* and return its ``similar_id`` (the original release's call)."""
        return self.add(text).similar_id

    def query(self, text: str) -> int | None:
        """Return the ``similar_id`` *text* would get, or None if it is new; writes nothing."""
        return self.store.lookup(self.prepare(text), self.policy)

    def resolve(self, similar_id: int) -> int:
        """Return the canonical id for *similar_id* (ids merged away resolve to the survivor)."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self.store.resolve(similar_id)

    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return the stored answer for *doc_id* (with its current canonical id), or None."""
        checked = _check_doc_id(doc_id)
        assert checked is not None
        return self.store.document(checked)

    def group(self, similar_id: int) -> Group | None:
        """Return the group *similar_id* belongs to (after merges), or None if unknown."""
        if not isinstance(similar_id, int) or isinstance(similar_id, bool) or similar_id < 1:
            raise ConfigError(f"similar_id must be a positive integer, not {similar_id!r}")
        return self.store.group(similar_id)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return the largest groups first: the "hot stories" with their doc ids."""
        if not isinstance(min_size, int) or min_size < 1:
            raise ConfigError(f"min_size must be a positive integer, not {min_size!r}")
        if not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be a positive integer, not {limit!r}")
        return self.store.groups(min_size, limit)

    def stats(self) -> StoreStats:
        """Return counts over the store: documents, groups, fingerprints."""
        return self.store.stats()

    def close(self) -> None:
        """Close the store (a memory store with a path flushes its journal, writes no snapshot)."""
        self.store.close()

    def __enter__(self) -> NSHash:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        hashfunc = self.fingerprinter.hashfunc
        return f"NSHash({self.store!r}, n={self.policy.n}, hashfunc={hashfunc!r})"
