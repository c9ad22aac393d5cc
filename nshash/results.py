"""Plain result types returned by :class:`nshash.NSHash` and the stores."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = [
    "HOUR",
    "Activity",
    "AddResult",
    "Assignment",
    "Candidate",
    "Correction",
    "DocMeta",
    "DocumentRecord",
    "Explanation",
    "Group",
    "HotGroup",
    "Member",
    "StoreStats",
]


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


@dataclass(slots=True)
class Candidate:
    """One group an anchor led to, and how the guard judged it.

    Attributes:
        similar_id: the group's canonical id.
        anchors: the document's anchors that hit it.
        shared: sketch values the document and the group have in common (common ones left out).
        document_values: the document's live sketch values compared.
        group_values: the group's live sketch values compared.
        score: shared over the smaller of the two (0 when under ``min_overlap``).
        verdict: ``"joined"``, ``"merged"`` (accepted, and merged into the group joined),
            ``"not best"`` (accepted, but too weak to merge) or ``"refused"`` (what the two
            share gets a vote as boilerplate when the document is added).
        frame: shared values set aside as the page's frame (a site's header and footer
            around text the group does not hold, or a shared end such as a bio after it, see
            :func:`nshash.methods.nshash.assign.frame_of`), already left out of the three
            counts above; looked for only where it can decide (a candidate that passes with
            it), else 0.
        edits: the document's values not shared that were read as scattered edits (a copy
            with typos all through it, see :func:`nshash.methods.nshash.assign.edits_of`),
            already left out of its count (and as many of the group's unshared values of the
            group's count); looked for only in a candidate a little short of ``theta``, else 0.
        long_page: judged as a long page on its top, where its story is: refused (score 0)
            where its top shares nothing with the group (what it shares lies below: its site's
            scroll, comments), see :func:`nshash.methods.nshash.assign.misses_top`; or, where
            it scored a little short of ``theta``, scored by the share of its top the group
            holds (:func:`nshash.methods.nshash.assign.top_share`).
    """

    similar_id: int
    anchors: tuple[int, ...]
    shared: int
    document_values: int
    group_values: int
    score: float
    verdict: str = ""
    frame: int = 0
    edits: int = 0
    long_page: bool = False


@dataclass(slots=True)
class Explanation:
    """Why a document got its answer: what :meth:`nshash.NSHash.explain` returns.

    Attributes:
        similar_id: the answer (None: a query that matches nothing).
        reason: ``"exact"`` (the same text was seen), ``"matched"``, ``"new"`` (no candidate
            passed), ``"nothing"`` (a query that found no candidate) or ``"replayed"``.
        anchors: the anchors looked up.
        boilerplate: anchor candidates left out because they are known to be common.
        candidates: every group the anchors led to, best first.
        theta: the threshold a candidate's score had to reach.
    """

    similar_id: int | None
    reason: str
    anchors: tuple[int, ...] = ()
    boilerplate: tuple[int, ...] = ()
    candidates: list[Candidate] = field(default_factory=list)
    theta: float = 0.0

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready values; fingerprints as 16 hex digits, as the service shows them."""
        return {
            "similar_id": self.similar_id,
            "reason": self.reason,
            "theta": self.theta,
            "anchors": [f"{h:016x}" for h in self.anchors],
            "boilerplate": [f"{h:016x}" for h in self.boilerplate],
            "candidates": [
                {
                    "similar_id": c.similar_id,
                    "anchors": [f"{h:016x}" for h in c.anchors],
                    "shared": c.shared,
                    "document_values": c.document_values,
                    "group_values": c.group_values,
                    "score": round(c.score, 4),
                    "verdict": c.verdict,
                    "frame": c.frame,
                    "edits": c.edits,
                    "long_page": c.long_page,
                }
                for c in self.candidates
            ],
        }


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
        explanation: with ``add(..., explain=True)``, why (an :class:`nshash.Explanation`).
    """

    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...]
    fingerprints: tuple[int, ...]
    doc_id: str | None = None
    replayed: bool = False
    canonical_id: int | None = None
    explanation: Explanation | None = None

    def __int__(self) -> int:
        return self.similar_id

    @property
    def id(self) -> str | None:
        """The document's id: ``doc_id`` under the name every surface uses."""
        return self.doc_id


#: AddResult's fields in order: what the compiled ``make_record`` fills an answer by, without
#: the frozen ``__init__`` (the memory store's one step and NSHash.add make every answer so).
ADD_RESULT_FIELDS = tuple(f.name for f in fields(AddResult))


@dataclass(frozen=True, slots=True)
class Member:
    """A document of a group: its id and, when one was given, its title.

    Attributes:
        score: the score it had against the story when it was placed (None when the store
            kept none: a record written before evidence was kept, or a listing that reads
            none; see :meth:`nshash.NSHash.group`).
        verdict: how it was placed (see :attr:`DocumentRecord.verdict`).
    """

    doc_id: str
    title: str | None = None
    score: float | None = None
    verdict: str | None = None

    @property
    def id(self) -> str:
        """The document's id: ``doc_id`` under the name every surface uses."""
        return self.doc_id


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
    """What the store remembers about a document added with a ``doc_id``.

    Attributes:
        score: the evidence kept from its placement: the guard's score against the story it
            joined (1.0 for an identical text; for a new story the best score a refused
            story had, 0.0 when none was found). None in a record written before evidence
            was kept.
        verdict: how it was placed, one of :data:`nshash.methods.nshash.records.VERDICTS`:
            ``"new story"``, ``"refused"``, ``"identical"``, ``"joined"``, ``"merged"`` or
            ``"moved"`` (an editor's correction put it there). None where ``score`` is.
    """

    doc_id: str
    similar_id: int
    duplicate: bool
    merged_from: tuple[int, ...] = ()
    title: str | None = None
    fingerprints: tuple[int, ...] = ()
    score: float | None = None
    verdict: str | None = None

    @property
    def id(self) -> str:
        """The document's id: ``doc_id`` under the name every surface uses."""
        return self.doc_id


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts over a whole store."""

    documents: int
    groups: int
    fingerprints: int
    common_fingerprints: int
    last_id: int
    extra: dict[str, object] = field(default_factory=dict)


#: The width of an activity bucket, in seconds: a store counts each group's documents per hour.
HOUR = 3600


@dataclass(frozen=True, slots=True)
class DocMeta:
    """What a store keeps about a document besides its group, when activity is tracked.

    Attributes:
        added: when the document was added (or published, when that was given), in whole
            seconds since the epoch (UTC).
        url: where it was found, if given.
        site: the site that carried it: the given one, else the host of ``url``.
    """

    added: int
    url: str | None = None
    site: str | None = None


@dataclass(frozen=True, slots=True)
class Activity:
    """When a group's documents came in (documents added while activity was tracked).

    Attributes:
        similar_id: the group's canonical id.
        first_seen: the earliest ``added`` time of its documents (epoch seconds).
        last_seen: the latest one.
        hours: ``(hour, count)`` pairs in ascending order, ``hour`` being the start of the
            hour in epoch seconds; hours without a document are left out.
    """

    similar_id: int
    first_seen: int
    last_seen: int
    hours: tuple[tuple[int, int], ...] = ()

    @property
    def documents(self) -> int:
        """How many of the group's documents were tracked."""
        return sum(c for _h, c in self.hours)


@dataclass(frozen=True, slots=True)
class HotGroup:
    """A group ranked by the documents it got in a time window: a hot story.

    Attributes:
        similar_id: the group's canonical id.
        recent: its documents added in the window (the ranking key).
        size: all its documents.
        first_seen: its first document's time (epoch seconds), None if never tracked.
        last_seen: its latest document's time.
        title: the headline: the first title among its first members (None without one).
        sites: the distinct sites of its first members (:meth:`nshash.NSHash.hot` reads 100),
            in order of first appearance.
    """

    similar_id: int
    recent: int
    size: int
    first_seen: int | None = None
    last_seen: int | None = None
    title: str | None = None
    sites: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Correction:
    """An editor's correction of a grouping, as the store keeps it (see
    :meth:`nshash.NSHash.detach`, :meth:`~nshash.NSHash.join` and
    :meth:`~nshash.NSHash.undo`).

    Attributes:
        id: its number in the store (1, 2, ... in the order made).
        kind: ``"detach"`` (a copy taken out of its story into a story of its own) or
            ``"join"`` (two stories made one).
        at: when it was made (epoch seconds).
        by: who made it (the API key's name, the command line's user, ``"cli"``...).
        doc_id: the copy detached (a detach only).
        source: a detach: the story the copy was taken from; a join: the story that was
            joined into the other.
        target: a detach: the copy's new story; a join: the story that survived.
        undone_at: when it was undone (None while it holds).
        undone_by: who undid it.
    """

    id: int
    kind: str
    at: int
    by: str
    source: int
    target: int
    doc_id: str | None = None
    undone_at: int | None = None
    undone_by: str | None = None
