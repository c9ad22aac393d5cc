"""The store contract of the nshash method: what every backend's tables answer.

:class:`Store` keeps the anchor -> group tables and makes the assignment of one document
atomic; :func:`nshash.methods.nshash.store.open_store` picks the backend a URL names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

from ...errors import ConfigError, NSHashError, StoreClosedError
from ...results import (
    Activity,
    AddResult,
    Assignment,
    Correction,
    DocMeta,
    DocumentRecord,
    Explanation,
    Group,
    StoreStats,
)
from ...text.fingerprint import DocPrint, Fingerprinter
from .assign import MatchPolicy

__all__ = ["OLD_LETTER_UNITS", "Placer", "Store", "begun_with", "letters_to_record"]

#: A store's one step from a document to its group (see :meth:`Store.placer`): the text or
#: its DocPrint, its id and title -> the answer, or None (declined).
Placer = Callable[[str | DocPrint, str | None, str | None], AddResult | None]

#: A :meth:`Store.hot` limit that cuts nothing.
_EVERY = 1 << 62

#: The ``letter_units`` of every store begun before the setting existed (and recorded):
#: letters and digits then weighed 1 unit in a shingle.
OLD_LETTER_UNITS = 1


def begun_with(recorded: int | None, has_groups: bool) -> int | None:
    """The ``letter_units`` a store's fingerprints were made with: the value it records,
    else :data:`OLD_LETTER_UNITS` when it made groups before recording one (begun by an
    earlier release), else None (a new store: the first writer's value will hold)."""
    if recorded is not None:
        return recorded
    return OLD_LETTER_UNITS if has_groups else None


def letters_to_record(
    url: str, recorded: int | None, has_groups: bool, pending: int | None, units: int
) -> int:
    """What :meth:`Store.record_letter_units` answers for a store that writes the value with
    its first group: the value it records, else the one already asked for (*pending*), else
    *units*.

    Raises:
        ConfigError: the store has groups and records none (NSHash asks only a store that
            has made no group).
    """
    if recorded is not None:
        return recorded
    if has_groups:
        raise ConfigError(f"{url} has groups: its letter_units cannot be set now")
    return units if pending is None else pending


class Store(ABC):
    """A place where fingerprints, groups and documents live.

    Subclasses implement the abstract methods; :meth:`assign_many` has a default that a
    server store overrides to save round trips.
    """

    #: The URL the store was opened from, with any password masked.
    url: str = ""

    #: Whether opening the store sends nothing (a server store connects on its first call):
    #: NSHash then reads the store's :meth:`letter_units` on first use, not when it opens.
    connects_lazily: bool = False

    @abstractmethod
    def assign(
        self,
        doc: DocPrint,
        policy: MatchPolicy,
        doc_id: str | None = None,
        title: str | None = None,
        meta: DocMeta | None = None,
    ) -> tuple[Assignment, tuple[int, ...]]:
        """Place one document atomically; returns the answer and the anchors used.

        With *meta*, its time, url and site are recorded in the same atomic step (see
        :meth:`hot`, :meth:`activity` and :meth:`doc_meta`).
        """

    def assign_many(
        self,
        items: Sequence[tuple[DocPrint, str | None, str | None]],
        policy: MatchPolicy,
        metas: Sequence[DocMeta | None] | None = None,
    ) -> list[tuple[Assignment, tuple[int, ...]] | NSHashError]:
        """Place documents in order; a failing item yields its exception, the rest go on.

        *metas*, when given, holds one :class:`~nshash.DocMeta` (or None) per item.

        Raises:
            StoreClosedError: the store is closed (that is no item's failure).
        """
        out: list[tuple[Assignment, tuple[int, ...]] | NSHashError] = []
        for i, (doc, doc_id, title) in enumerate(items):
            try:
                meta = metas[i] if metas is not None else None
                out.append(self.assign(doc, policy, doc_id, title, meta))
            except StoreClosedError:
                raise
            except NSHashError as exc:
                out.append(exc)
        return out

    def placer(self, fingerprinter: Fingerprinter, policy: MatchPolicy) -> Placer | None:
        """A function that places an untracked document in one step, faster than
        :meth:`Fingerprinter.prepare <nshash.text.fingerprint.Fingerprinter.prepare>` and
        :meth:`assign`, or None (the default: this store has none). It takes the text (a
        checked str, which it fingerprints with *fingerprinter*) or the
        :class:`~nshash.DocPrint`, and the document's checked id and title (None: none),
        and returns its :class:`~nshash.AddResult`, or None where it declines, having
        written nothing: the caller then places the document the general way, with the
        same answer."""
        return None

    @abstractmethod
    def lookup(self, doc: DocPrint, policy: MatchPolicy) -> int | None:
        """Return the group a document would join, or None; writes nothing."""

    @abstractmethod
    def explain(self, doc: DocPrint, policy: MatchPolicy) -> Explanation:
        """Say which group a document would join and why; writes nothing."""

    @abstractmethod
    def resolve(self, similar_id: int) -> int:
        """Return the canonical id of *similar_id* (itself unless it was merged)."""

    @abstractmethod
    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return what was answered for *doc_id*, with its current canonical id, or None."""

    @abstractmethod
    def group(self, similar_id: int) -> Group | None:
        """Return the group *similar_id* resolves to, or None if no such id was handed out."""

    def group_head(self, similar_id: int, members: int) -> Group | None:
        """:meth:`group` with only its first *members* members listed (``size`` is whole):
        what a listing of many large groups needs. Stores override it to read no more."""
        group = self.group(similar_id)
        if group is None or len(group.members) <= members:
            return group
        return Group(group.similar_id, group.size, group.members[:members])

    @abstractmethod
    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return up to *limit* groups of at least *min_size* documents, largest first."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Return counts over the whole store."""

    # -- what a batch job judges new documents against (see nshash.export) ----------------
    @abstractmethod
    def sketch(self, similar_id: int) -> tuple[tuple[int, ...], int] | None:
        """The sketch of the group *similar_id* resolves to: its values, ascending (common
        ones included), and its limit, as the store compares them (see
        :meth:`narrow_sketches`); None when there is no such group."""

    @abstractmethod
    def narrow_sketches(self) -> bool:
        """Whether the store's sketches are narrow
        (:func:`~nshash.text.fingerprint.narrow`): a document is compared with them only
        after it is narrowed too."""

    # -- the fingerprints' settings a store keeps ------------------------------------------
    @abstractmethod
    def letter_units(self) -> int | None:
        """The ``letter_units`` (see :class:`~nshash.Fingerprinter`) the store's fingerprints
        were made with: the value recorded by its first writer, :data:`OLD_LETTER_UNITS` for
        a store that made groups before it recorded one (begun before the setting existed),
        None for a store that has made no group and records none (see :func:`begun_with`)."""

    @abstractmethod
    def record_letter_units(self, units: int) -> int:
        """Record *units* as the store's ``letter_units`` unless it records one already, and
        return the value recorded (another writer's, when one was first). NSHash calls it
        before its first write to a store that records none."""

    @abstractmethod
    def common(self) -> set[int]:
        """The hashes the store has learned to be boilerplate (no longer anchors nor
        counted in a sketch), as a set."""

    @abstractmethod
    def hot(self, first_hour: int, last_hour: int, limit: int = 30) -> list[tuple[int, int]]:
        """Rank groups by their documents in the hours *first_hour* .. *last_hour*.

        Hours are counted since the epoch (``time // 3600``), both ends included. Only
        documents added with a :class:`~nshash.DocMeta` count. The work is proportional to
        the groups active in those hours, never to the whole store.

        Returns:
            Up to *limit* ``(canonical id, documents)`` pairs, most documents first, ties by
            smaller id.
        """

    def active(self, first_hour: int, last_hour: int) -> set[int]:
        """The canonical ids of the groups with documents in the hours *first_hour* ..
        *last_hour* (see :meth:`hot`), in no order: what a search filters before it counts.
        Stores override it to skip the counting and ranking :meth:`hot` does."""
        return {gid for gid, _n in self.hot(first_hour, last_hour, _EVERY)}

    def counts(self, first_hour: int, last_hour: int, gids: Iterable[int]) -> dict[int, int]:
        """The documents each of *gids* got in the hours *first_hour* .. *last_hour*, for
        those that got any. Stores override it to read only those groups' counts."""
        wanted = set(gids)
        ranked = self.hot(first_hour, last_hour, _EVERY)
        return {gid: n for gid, n in ranked if gid in wanted and n > 0}

    @abstractmethod
    def activity(self, similar_id: int) -> Activity | None:
        """Return when the group *similar_id* resolves to got its documents, or None when
        none of them was tracked."""

    @abstractmethod
    def doc_meta(self, doc_ids: Sequence[str]) -> list[DocMeta | None]:
        """Return the :class:`~nshash.DocMeta` kept for each of *doc_ids* (None where none)."""

    # -- editors' corrections (see nshash.methods.nshash.corrections) ----------------------
    @abstractmethod
    def detach(self, doc_id: str, by: str, at: int, votes: int) -> Correction:
        """Take *doc_id* out of its story into a new story of its own, atomically, keeping
        the correction (made by *by* at *at*, epoch seconds); the anchors it shares with the
        story are voted on as a refusal's are (*votes*: ``MatchPolicy.votes``)."""

    @abstractmethod
    def join(self, a: int, b: int, by: str, at: int, cap: int) -> Correction:
        """Join stories *a* and *b* (the smaller canonical id survives), atomically."""

    @abstractmethod
    def undo(self, cid: int, by: str, at: int, cap: int) -> Correction:
        """Undo correction *cid*, atomically; returns it marked undone."""

    @abstractmethod
    def corrections(self) -> list[Correction]:
        """Every correction, in the order made."""

    @abstractmethod
    def settle(self, doc_id: str, anchors: Sequence[int]) -> int | None:
        """Follow the detach rule for *doc_id*, just placed with *anchors*: return the group
        it moved to, or None when it stays (most calls: a store without detaches)."""

    def ping(self) -> None:  # noqa: B027 - a no-op is right for in-process stores
        """Raise a :class:`~nshash.StoreError` unless the store can serve requests."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release everything; later calls raise :class:`~nshash.StoreClosedError`."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url!r}>"
