"""Plain result types returned by :class:`nshash.NSHash` and the stores."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AddResult", "Assignment", "DocumentRecord", "Group", "Member", "StoreStats"]


@dataclass(frozen=True, slots=True)
class Assignment:
    """What a store answers for one document.

    Attributes:
        similar_id: the canonical id of the document's group.
        duplicate: True when the document joined a group that already existed.
        merged_from: ids that this document merged into ``similar_id`` (empty most of the time).
        replayed: True when the ``doc_id`` had been added before and nothing changed; the
            answer is then the first one given for it.
        canonical_id: on a replay whose group has been merged since, the id it resolves to
            now; None otherwise (``similar_id`` is then canonical).
    """

    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...] = ()
    replayed: bool = False
    canonical_id: int | None = None


@dataclass(frozen=True, slots=True)
class AddResult:
    """The outcome of :meth:`nshash.NSHash.add`.

    Attributes:
        similar_id: the group id; reposts of one story share it.
        duplicate: True when an earlier document of the same story was already there (or the
            same ``doc_id`` was sent before).
        merged_from: ids this document merged into ``similar_id``; they resolve to it from now on.
        fingerprints: the document's anchor fingerprints (64-bit unsigned integers).
        doc_id: the caller's id for the document, if one was given.
        replayed: True when ``doc_id`` had been added before: the answer is the first one
            given for it, unchanged (so a resumed run writes what the first run wrote), and
            the store did not change.
        canonical_id: on a replay whose group was merged into another since, the id the
            group has now (what :meth:`~nshash.NSHash.resolve` gives for ``similar_id``);
            None otherwise.
    """

    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...]
    fingerprints: tuple[int, ...]
    doc_id: str | None = None
    replayed: bool = False
    canonical_id: int | None = None

    def __int__(self) -> int:
        return self.similar_id


@dataclass(frozen=True, slots=True)
class Member:
    """A document of a group: its id and, when one was given, its title."""

    doc_id: str
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """A group of near-duplicate documents.

    Attributes:
        similar_id: the canonical id of the group.
        size: how many documents joined it, with or without a ``doc_id``.
        members: the documents that came with a ``doc_id``, in the order they arrived;
            :attr:`without_id` counts the others (``size == len(members) + without_id``).
    """

    similar_id: int
    size: int
    members: tuple[Member, ...] = ()

    @property
    def doc_ids(self) -> list[str]:
        """The ids of the members, in arrival order."""
        return [m.doc_id for m in self.members]

    @property
    def without_id(self) -> int:
        """How many of the group's documents came without a ``doc_id`` (not in ``members``)."""
        return self.size - len(self.members)

    def __repr__(self) -> str:
        # The count of documents without an id is shown, so size and members add up.
        return (
            f"Group(similar_id={self.similar_id!r}, size={self.size!r},"
            f" members={self.members!r}, without_id={self.without_id!r})"
        )


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """What the store remembers about a document added with a ``doc_id``."""

    doc_id: str
    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...] = ()
    title: str | None = None
    fingerprints: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts over a whole store."""

    documents: int
    groups: int
    fingerprints: int
    common_fingerprints: int
    last_id: int
    extra: dict[str, object] = field(default_factory=dict)
