"""Group assignment: the one algorithm every Python store runs (Redis runs the same in Lua).

A store keeps these tables (the names are the ones the code and the Redis key layout use):

========  =====================================  ===========================================
table     maps                                   written when
========  =====================================  ===========================================
fp        anchor fingerprint -> group id         first time an anchor is seen (never moved)
exact     whole-text fingerprint -> group id     first time a text is seen
votes     hash -> groups it was seen to join     a match on it was clearly refused
common    set of hashes                          a hash has votes from ``votes`` groups
parent    merged group id -> canonical id        groups merge; the smaller id stays canonical
sketch    canonical id -> sketch values, limit   a group is made, joined or merged (capped)
size      canonical id -> document count         every new document
members   canonical id -> doc ids in order       every new document that has a doc_id
docs      doc id -> the answer given for it      every new document that has a doc_id
counter   last id handed out                     a group is made
activity  canonical id -> first/last seen and    every new document given a DocMeta (merges
          documents per hour; doc id -> DocMeta  move a group's hours to the canonical id)
========  =====================================  ===========================================

**Candidates.** A document's anchors (the shingles of its smallest hashes, see
:class:`nshash.DocPrint`) are looked up; every group one of them hits is a candidate. Since
the anchors are a consistent sample, a copy keeps several of its story's anchors through
re-wrapping, inserted lines, changed figures and heavy truncation, and each copy adds its own
new anchors to the group, so a hot story gets easier to find with every copy.

**Verification (the boilerplate guard).** A candidate is accepted when the document's sketch and
the group's share at least ``min_overlap`` values and at least ``theta`` of the smaller of the
two, after leaving out hashes known to be common and values past either sketch's limit. A
site's footer shared by two unrelated articles hits, but the rest of the articles differs.

**The page's frame is not its story** (:func:`set_aside`). A site wraps every page alike: a
header on top; a related block, a footer or a columnist's bio at the end. A page's story is
one run between them. So the guard reads the document's compared values in page order
(:attr:`~nshash.DocPrint.places`), each shared with the group or not: when the page starts
and ends with shared text around a long unshared run (the site's header and footer around
another story), that shared edge text is set aside before the score (:func:`frame_of`). A
repost with a new site's wrapper shares its middle, and a copy that shares its whole
beginning keeps it, so neither loses anything; a new site's first pages stop gluing on its
wrapper before any vote could say it is boilerplate, and a template's formula stops deciding
between two stories of one site. A page that starts with text of its own, at least a
quarter of it, and shares only what lies below (a columnist's bio, a series blurb, a site's
related block and footer under another story, or under a cartoon's caption), has that end
matter set aside too, where the group holds as much text of its own; a copy under a short
new intro keeps its match. What a refusal shares
still gets its votes, frame included: the wrapper is learned as boilerplate sooner.

**A copy with typos all through it is still a copy** (:func:`edits_of`). Every shingle
that spans a changed letter is lost: at 6 % of its letters changed, half of an English
copy's values, and the copy scores under ``theta``. What it keeps, though, lies all along its
text, with short gaps; another story's text, a follow-up's paragraphs or comments are long
runs of their own. So a candidate a little short of ``theta`` whose shared values span most
of the page, densely and with no long unshared run, has the unshared values in that span left
out of the score as edits (and as many of the group's), and is judged again.

**Boilerplate is learned from evidence, never from one refusal.** A refusal is only a vote:
each hash the refused pair shared (the anchors that hit and the sketch values in common)
records the two groups, and becomes *common*, no longer an anchor nor counted in any sketch,
once ``votes`` distinct groups (after merges) have been kept apart on it. A site's footer
reaches that within a few articles; a story's own text does not, since the only groups kept
apart on it are fragments of that one story (a heavily edited copy that failed the check),
and fragments merge as soon as one copy matches two of them strongly (``merge_theta``), after
which they count as one. A client posting crafted documents around one real sentence can
at most make that one sentence common: the story's other anchors and sketch still find it.

**Boilerplate is learned from frequency too** (:func:`tail_of`). A page's end matter is seldom
compared with another's (a long page's anchors rarely fall in its footer; a short page of a
site is seldom refused on it), so refusals alone learn a site's footer, related block or a
columnist's bio late or never. So every placed page votes its last :data:`TAIL_VOTES` values
in page order (those not common yet) for the group it joins: end matter lands in many groups
and becomes common once ``votes`` distinct groups hold it, while the end of a story lands in
that story's group however many copies carry it.

**A page far longer than its group keeps its text out of the group's sketch**
(:func:`extends`). A joining page adds its sketch values to the group's, so that later copies
that quote other parts of the story find them; but a 20,000-character page whose story is the
group's 2,000 characters (the rest comments and its site's infinite scroll) would fill the
group's sketch with that other text, and the site's next long page, about another story,
would join on it. Where the page holds more than :data:`LONGER` times the group's sampled
values in the range both sketches cover, it joins (its anchors lead to the group) and the
group's sketch stays as it was; a group of fewer than :data:`LONGER_FROM` values (a flash
whose full story arrives later) takes the page's values all the same.

**A long page's story is at its top** (:func:`misses_top`, :func:`top_share`). A page
whose sampled text reaches :data:`~nshash.text.fingerprint.LONG_PAGE` characters into its
stream is long: it takes twice the anchors, half of them from its top
(:func:`~nshash.text.fingerprint.anchors_wanted`), so a story of 2,000 characters above 18,000
of comments and its site's scroll still leads to its copies. A long page whose anchors miss
its story's group anyway starts a group of its own, which then holds its site's scroll; the
site's next long page shares the scroll with it. So a long page is judged on its top (its
first 1/:data:`TOP_SHARE` of values): it is refused where its top shares (next to) nothing
with a group that has text of its own, and it joins a group that holds most of its top even
where the rest of the two differs (two long pages of one story, under comments of their own).

**A copy adds its story's text to the group, not its site's wrapper** (:func:`story_span`).
What a copy shares with its story lies between its site's header and its related block and
footer; the group takes the values between the first and the last shared one, so a story
copied by a dozen sites holds its own text, not twelve wrappers that would fill its sketch
and lead any short page of those sites to it. A group of fewer than :data:`LONGER_FROM`
values takes every value, as it takes a long page's.

Identical texts (same letters and digits) always join one group through the ``exact`` table,
whatever the guard says. A document that matches several groups joins the best match and
merges the others into it only where it matches them at least ``merge_theta``: half of one
story and half of another glue nothing together.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ...errors import ConfigError
from ...results import Assignment, Candidate, DocMeta, DocumentRecord, Explanation
from ...text.fingerprint import (
    MOST_SETTING,
    NO_LIMIT,
    DocPrint,
    anchors_wanted,
    is_long,
    read_places,
)
from .compiled import compiled, either

__all__ = [
    "MatchPolicy",
    "Tables",
    "assign",
    "combine_sketch",
    "edits_in",
    "edits_of",
    "evidence",
    "explain",
    "extends",
    "finish_explanation",
    "frame_of",
    "judged",
    "kinship",
    "lookup",
    "misses_top",
    "top_share",
    "page_flags",
    "resolve",
    "set_aside",
    "sketch_kinship",
    "story_span",
    "tail_of",
    "tail_values",
    "unframed",
    "vote",
]


def _ratio(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 < value <= 1.0:
        raise ConfigError(f"{name} must be in (0, 1], not {value!r}")


def _count(name: str, value: object, least: int = 1, most: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{name} must be an integer >= {least}, not {value!r}")
    if most is not None and value > most:
        raise ConfigError(f"{name} must be an integer from {least} to {most}, not {value!r}")


#: The most votes a policy may ask for: a hash's vote table entry keeps fewer groups than that
#: (the widest entry the compiled vote table packs is 65,536 ids).
MOST_VOTES = 1 << 16


@dataclass(frozen=True, slots=True)
class MatchPolicy:
    """How strict the boilerplate guard is, and how much a store keeps per group.

    Attributes:
        n: anchors per document (the "n" of nshash).
        theta: the share of the smaller sketch that a document and a group must have in common.
        min_overlap: the fewest shared sketch values for a match (unless a sketch is smaller).
        sketch_cap: a group's sketch keeps at most this many values (the smallest).
        merge_theta: a document that matches several groups joins the best one, and merges
            the others into it only where it matches them this strongly.
        merge_guard: ... and only where the two groups themselves share this much of the
            smaller one's sketch: a digest page quoting two whole stories matches both
            strongly, but the stories share nothing, so they stay apart.
        votes: how many distinct groups must have been kept apart on a hash before it is
            common (boilerplate).
    """

    n: int = 16
    theta: float = 0.5
    min_overlap: int = 3
    sketch_cap: int = 256
    merge_theta: float = 0.6
    merge_guard: float = 0.25
    votes: int = 3

    def __post_init__(self) -> None:
        _count("n", self.n, 1, MOST_SETTING["n"])
        _ratio("theta", self.theta)
        _ratio("merge_theta", self.merge_theta)
        _ratio("merge_guard", self.merge_guard)
        _count("min_overlap", self.min_overlap, 1, MOST_SETTING["min_overlap"])
        _count("sketch_cap", self.sketch_cap, 1, MOST_SETTING["sketch_cap"])
        _count("votes", self.votes, 2, MOST_VOTES)


def combine_sketch(
    values: Iterable[int], limit: int, more: Iterable[int], more_limit: int, cap: int
) -> tuple[set[int], int]:
    """Join two consistent sketch samples into one of at most *cap* values.

    Each side holds every sampled value below its limit, so the union holds every one below the
    smaller limit; past *cap* values only the smallest stay and the limit falls to the first
    value dropped. Every store keeps group sketches through this one function (the Redis
    script mirrors it).
    """
    bound = min(limit, more_limit)
    # A side whose own limit is the bound holds only values below it already.
    joined = set(values) if limit <= bound else {v for v in values if v < bound}
    joined.update(more if more_limit <= bound else (v for v in more if v < bound))
    if len(joined) > cap:
        bound = cut_sketch(joined, cap)
    return joined, bound


#: A page that joins a group adds its sketch to the group's unless it holds more than this
#: many times the group's sampled values in the range both hold (see :func:`extends`) ...
LONGER = 4

#: ... and the group's sketch holds at least this many values (a story's text, not a brief).
LONGER_FROM = 128


def extends(group: tuple[Collection[int], int], sketch: Sequence[int], limit: int) -> bool:
    """Whether a document that joins a group adds its *sketch* (complete below *limit*) to
    the group's (*group*: its values and limit, after any merge the document made).

    Not when the document is a page far longer than the group's text: below the document's
    limit both sketches are complete, and the document holds more than :data:`LONGER` times
    the group's values there (a 20,000-character page whose 2,000-character story is the
    group's, the rest comments and another site's infinite scroll). Its values would fill
    the group's sketch with that other text, and the next such page of the site would join
    on it; the group keeps its story's values, and the page its anchors, so a copy of it
    still finds the group. A page as long as its group's text or shorter always adds its
    own, and so does any page that joins a group of fewer than :data:`LONGER_FROM` values:
    a flash or a brief, whose full story comes later, and whose later paragraphs, quoted
    alone, must then find the group through the full story's values. The compiled core's
    ``fast_assign`` and the Redis script decide the same."""
    values, group_limit = group
    if limit >= group_limit or len(values) < LONGER_FROM:
        return True
    below = sum(1 for v in values if v < limit)
    return len(sketch) <= LONGER * below


def story_span(
    group: tuple[Collection[int], int],
    sketch: Sequence[int],
    places: bytes,
    shared: Collection[int],
) -> Sequence[int]:
    """The values of a joining document's *sketch* that the group (*group*: its values and
    limit, after any merge the document made) takes: those whose place in the page lies
    between the first and the last value it *shared* with the groups it joins.

    A copy carries its own site's wrapper, a header above the story and a related block and a
    footer below it, and what it shares with its story lies between them. Every copy used to
    add its wrapper to the group's sketch: a story copied by a dozen sites held twelve
    wrappers, which filled its 256 values (its limit fell, so a short page was compared on a
    handful of values, mostly its site's wrapper, and joined on it), and any page of those
    sites then shared its header and footer with the story. Text a copy adds inside the
    shared span (a paragraph the story's earlier copies lacked) is still taken. A group of
    fewer than :data:`LONGER_FROM` values (a flash or a brief, whose full story comes later,
    with text past the brief's end) takes every value, as :func:`extends` lets it; so does
    any group where the document has no places. The compiled core's ``fast_assign`` and the
    Redis script take the same."""
    at = read_places(places, len(sketch))
    if len(group[0]) < LONGER_FROM or not at or not shared:
        return sketch
    held = set(shared)
    spots = [at[i] for i, v in enumerate(sketch) if v in held]
    if not spots:
        return sketch
    first, last = min(spots), max(spots)
    return [v for i, v in enumerate(sketch) if first <= at[i] <= last]


#: The compiled cut (_assign.cut_sketch), or None on the pure path.
_CUT = compiled("cut_sketch")


def cut_sketch_pure(values: set[int], cap: int) -> int:
    """:func:`cut_sketch` in Python: what the compiled one must equal."""
    ordered = sorted(values)
    bound = ordered[cap]
    values.difference_update(ordered[cap:])
    return bound


def cut_sketch(values: set[int], cap: int) -> int:
    """Cut *values* (more than *cap* distinct ints) to its *cap* smallest, in place, and
    return the smallest value dropped: the new limit. Compiled where the kernel is built
    (sorting a few hundred ints in C, not Python objects), else :func:`cut_sketch_pure`."""
    return either(_CUT, cut_sketch_pure, values, cap)


class Tables(Protocol):
    """The reads and writes :func:`assign` needs from a store, inside one atomic step."""

    def get_fp(self, h: int) -> int | None: ...
    def get_exact(self, h: int) -> int | None: ...
    def not_common(self, hs: Iterable[int]) -> list[int]:
        """The hashes of *hs* (which has no repeats) that are not common, in their order."""
        ...

    def live_set(self, hs: Iterable[int]) -> set[int]:
        """The hashes of *hs* that are not common, as a set."""
        ...

    def common_sets(self) -> tuple[Collection[int], set[int]]:
        """The common hashes: the store's (a set, or the memory store's AnchorMap) and
        those this call made common (a set, often :data:`NO_HASHES`), for
        :func:`sketch_guard`; read only."""
        ...

    def get_parent(self, gid: int) -> int | None: ...
    def group_sketch(self, gid: int) -> tuple[Collection[int], int]:
        """The group's sketch values (common ones included) and its limit."""
        ...

    def get_votes(self, h: int) -> tuple[int, ...]:
        """The groups kept apart on hash *h* so far (empty for most hashes)."""
        ...

    def get_doc(self, doc_id: str) -> DocumentRecord | None: ...

    def set_fp(self, h: int, gid: int) -> None: ...
    def set_exact(self, h: int, gid: int) -> None: ...
    def add_common(self, hs: Iterable[int]) -> None: ...
    def set_votes(self, h: int, gids: tuple[int, ...]) -> None:
        """Record the groups kept apart on *h* (an empty tuple forgets them)."""
        ...

    def new_group(self, sketch: Iterable[int], limit: int) -> int: ...
    def extend_sketch(self, gid: int, hs: Iterable[int], limit: int, cap: int) -> None:
        """Join the values *hs* (complete below *limit*) into the group's sketch, through
        :func:`combine_sketch`."""
        ...

    def merge_into(self, root: int, gid: int, cap: int) -> None:
        """Make *gid* resolve to *root*; its sketch, size, members and activity (first and
        last seen, documents per hour) move to *root*."""
        ...

    def add_member(self, gid: int, record: DocumentRecord | None) -> None: ...
    def note(self, gid: int, doc_id: str | None, meta: DocMeta) -> None:
        """Count a new document of group *gid* in the hour of ``meta.added``, widen the
        group's first and last seen, and keep *meta* for *doc_id* (when there is one)."""
        ...


class Parents(Protocol):
    """What :func:`resolve` reads: the merge links."""

    def get_parent(self, gid: int) -> int | None: ...


def resolve(tables: Parents, gid: int) -> int:
    """Follow merge links from *gid* to its canonical id."""
    parent = tables.get_parent(gid)
    while parent is not None:
        gid = parent
        parent = tables.get_parent(gid)
    return gid


def _select(tables: Tables, doc: DocPrint, n: int) -> tuple[int, ...]:
    """The document's anchors: its first candidates that are not common (all of the first if
    every one is), *n* of them, or twice *n* for a long page (:func:`anchors_wanted`)."""
    live = tables.not_common(doc.sentences)
    return tuple((live or doc.sentences)[: anchors_wanted(doc, n)])


def _known(tables: Tables, anchors: tuple[int, ...]) -> dict[int, int | None]:
    """Each anchor's group as written (None for an anchor never seen)."""
    get = tables.get_fp
    return {h: get(h) for h in anchors}


def _candidates(tables: Tables, known: dict[int, int | None]) -> dict[int, list[int]]:
    """Canonical group -> the anchors that hit it, in order of first hit."""
    found: dict[int, list[int]] = {}
    for h, gid in known.items():
        if gid is not None:
            found.setdefault(resolve(tables, gid), []).append(h)
    return found


def _verify(
    tables: Tables, doc: DocPrint, gid: int, hits: list[int], policy: MatchPolicy
) -> tuple[Candidate, list[int]]:
    """Judge group *gid* against the document's sketch; returns the shared values too (the
    frame's among them: a refusal votes on them all)."""
    values, group_limit = tables.group_sketch(gid)
    common, more = tables.common_sets()
    shared, mine, theirs = sketch_guard(doc.sketch, doc.limit, values, group_limit, common, more)
    found = judged(gid, tuple(hits), len(shared), mine, theirs, policy)
    limit = min(doc.limit, group_limit)
    return unframed(found, doc.sketch, doc.places, limit, common, more, shared, policy), shared


def unframed(
    found: Candidate,
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Sequence[int],
    policy: MatchPolicy,
) -> Candidate:
    """*found* (a document's candidate, judged on all it shares: :func:`judged` with the
    counts of :func:`sketch_guard`) judged again with the document's frame set aside
    (:func:`set_aside`, the document's *sketch* and *places* compared below *limit*, the
    smaller of the two limits), or *found* itself when there is no frame to set aside.

    Setting a frame aside only lowers a score: it is looked for where it can decide (a
    candidate that passes), and where the values not shared leave room for the unshared run
    a frame surrounds. A candidate short of ``theta`` by a little (at least :data:`EDIT_LOW`)
    is read for scattered edits instead (:func:`edits_in`): a copy with typos all through it
    has them left out of both counts, and may pass. A long page is judged on its top: one
    that passes is refused where its top shares next to nothing with the group
    (:func:`misses_top`), and one short of ``theta`` (scoring at least :data:`TOP_LOW`)
    joins where the group holds most of its top (:func:`top_share`). The online placement and the
    Spark job's pairs judge through it."""
    mine = found.document_values
    unshared = mine - found.shared
    theirs = found.group_values
    again = found
    if found.score >= policy.theta and unshared >= FRAME_GAP and unshared * FRAME_SHARE >= mine:
        frame = set_aside(sketch, places, limit, common, more, shared, theirs)
        if frame:
            n = found.shared - frame
            again = judged(
                found.similar_id, found.anchors, n, mine - frame, theirs - frame, policy, frame
            )
    elif EDIT_LOW <= found.score < policy.theta and mine >= EDIT_LEAST:
        edits = edits_in(sketch, places, limit, common, more, shared)
        if edits:
            again = judged(
                found.similar_id,
                found.anchors,
                found.shared,
                mine - edits,
                theirs - min(edits, theirs - found.shared),
                policy,
                edits=edits,
            )
    if again.score >= policy.theta:
        if misses_top(again, sketch, places, limit, common, more, shared):
            return replace(again, score=0.0, long_page=True)
    elif again.score >= TOP_LOW:
        top = top_share(sketch, places, limit, common, more, shared)
        if top >= policy.theta:
            return replace(again, score=top, long_page=True)
    return again


#: The top rule (:func:`misses_top`) reads a long page
#: (:data:`~nshash.text.fingerprint.LONG_PAGE`: its sampled text reaches 8,000 characters
#: into its stream; it also takes twice the anchors) ...

#: ... and that shares at most one in :data:`TOP_FEW` of the first 1/this of its values
#: compared (in page order) ...
TOP_SHARE = 8

#: ... (a phrase or two of the comments that follow its story, drawn from one pool, may be
#: shared) ...
TOP_FEW = 8

#: ... with a group of which at least 1/this of the values compared are not the page's.
GROUP_OWN = 8


def misses_top(
    found: Candidate,
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> bool:
    """Whether a long page must not join the group it passed against (*found*, after any
    frame or edits were left out): its story is at its top, and its top shares next to
    nothing with the group.

    A page of 20,000 characters (a 2,000-character story, then comments and its site's
    infinite scroll) whose anchors miss its story's group starts a group of its own, and that
    group then holds the site's scroll: the site's next long page, about another story, shares
    the scroll with it, well over ``theta``. What tells them apart is where the shared text
    lies: a copy of the page, or of its story, shares its top, and the scroll lies below.
    So a long page (:func:`~nshash.text.fingerprint.is_long`) whose first
    1/:data:`TOP_SHARE` of the values compared (in page order, as :func:`page_flags` reads
    them) holds at most one in :data:`TOP_FEW` that the group holds (a stray phrase of the
    comments below its story), is refused, where at least 1/:data:`GROUP_OWN` of the group's
    values compared are not the page's (the group has a story of its own). A group
    that is a part of the page (an excerpt of a long report's middle, then the report) is
    not refused, nor is a page under a long intro of its own where the group is its story.
    The compiled core's ``fast_assign`` and the Redis scripts decide the same."""
    if (found.group_values - found.shared) * GROUP_OWN < found.group_values:
        return False
    top = _top_flags(sketch, places, limit, common, more, shared)
    return bool(top) and sum(top) * TOP_FEW <= len(top)


#: The top's share (:func:`top_share`): a long page that scores at least this against a
#: group ...
TOP_LOW = 0.2

#: ... and whose top holds at least this many of the values compared ...
TOP_LEAST = 6


def top_share(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> float:
    """The share of a long page's top (its first 1/:data:`TOP_SHARE` of the values compared,
    in page order) that a group holds: the score a long page that scores at least
    :data:`TOP_LOW` against the group is judged by, where it reaches ``theta``. 0 for a page
    that is not long, or whose top holds fewer than :data:`TOP_LEAST` values compared.

    Two long pages of one story (its 2,000 characters, then 18,000 of comments of their own
    and their site's scroll, partly the same) share a fifth to two fifths of their sketches,
    and a group begun by the first holds little else of the second: but the second's top is
    the story, which the group holds. A long page of another story shares the scroll, lower
    down, and not its top. The compiled core's ``fast_assign`` and the Redis scripts decide
    the same."""
    top = _top_flags(sketch, places, limit, common, more, shared)
    if len(top) < TOP_LEAST:
        return 0.0
    return sum(top) / len(top)


def _top_flags(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> list[bool]:
    """The first 1/:data:`TOP_SHARE` of a long page's :func:`page_flags` (at least one, where
    it has any); empty for a page that is not long."""
    if not is_long(places, len(sketch)):
        return []
    flags = page_flags(sketch, places, limit, common, more, shared)
    return flags[: max(1, len(flags) // TOP_SHARE)]


#: The frame rule (:func:`frame_of`): a page compared on fewer values than this has no shared
#: end set aside (a handful of values, cut short by a big group's limit, says too little) ...
END_LEAST = 6

#: ... and a page compared on fewer than this has no frame of two edges (a short text whose
#: sentences were reordered reads shared, unshared, shared too).
FRAME_LEAST = 12

#: ... and the unshared run a frame surrounds is at least this many values ...
FRAME_GAP = 3

#: ... and at least one in this many of the values compared.
FRAME_SHARE = 4

#: A page that shares only what lies below its own head with a group (its first values
#: unshared, its last shared) has that end matter set aside when the head is at least one in
#: this many of the values compared (and at least :data:`FRAME_GAP` values).
END_SHARE = 4

#: ... and a shared end of at most 1/this of the values compared is set aside whatever the group
#: holds (a bio under an article, where the group is little but that bio: a cartoonist's
#: strips under the same bio) ...
END_PART = 4

#: ... and so is one of under 1/this of them that is one unbroken run (every value from the
#: first shared one to the page's last is shared: a bio, a series blurb, a site's related
#: block and footer, the same words on every page that carries them).
END_RUN = 2


def frame_of(shared: Sequence[bool], theirs: int) -> int:
    """How many of a page's shared values are its frame, given for each value it compared
    with a group, in page order, whether the group holds it, and how many values of the
    group's were compared (*theirs*).

    The page starts and ends with shared values, and between them lies an unshared run at
    least :data:`FRAME_GAP` values long, at least 1/:data:`FRAME_SHARE` of the values compared,
    at least as long as the leading shared run, and at least half of all that lies between
    the two: the leading and trailing shared runs are the frame (a site's header, and its
    related block and footer, around one block of text the group does not hold). Not when the
    two runs are more than 3/4 of the group's values: then the group is that text (a short
    copy of this page, which adds text in its middle). A copy that shares its whole beginning
    and, by its site's footer, its end keeps both, since its unshared run is shorter than its
    shared beginning; so does a copy whose figures or words were changed here and there, whose
    unshared runs are many and short.

    The page's end matter is a frame too: when the page ends with shared text and its first
    shared value comes after an unshared head of at least :data:`FRAME_GAP` values and
    1/:data:`END_SHARE` of the values compared, every shared value (all below that head) is
    set aside where they are at most half of the group's values (a columnist's bio, a series
    blurb, a site's related block and footer, below the page's own text, be it a story or a
    cartoon's caption, where the group has as much text of its own; a line of the page's
    own between the headlines of a related block and the footer changes nothing), or at most
    1/:data:`END_PART` of the page's, whatever the group holds (a cartoonist's article under
    the bio that a group of the same cartoonist's strips is little but), or under
    1/:data:`END_RUN` of the page's in one unbroken run, whatever the group holds: the same
    words on every page that carries them (two stories of one site whose related block and
    footer are most of a short group; a caption above a series blurb that a group of the
    series is little but). A copy under a new intro keeps its match while the intro is
    under a quarter of it; where the group is mostly what the page shares, and that is more
    than 1/:data:`END_PART` of the page and either broken by unshared values (a copy edited
    here and there) or at least 1/:data:`END_RUN` of it, the group is this page's later
    part or overlaps it (a fragment of the story that this whole copy bridges to the first
    part; a copy that dropped the first sentence, against one cut after the fourth), kept
    too; and a copy with its own site's wrapper starts with shared text (its header) or ends
    with unshared text (its footer), so the end rule does not see it.

    0 for anything else, for a page of fewer than :data:`END_LEAST` values, and for two edges
    on fewer than :data:`FRAME_LEAST`. The compiled
    core's ``frame_of`` (``_assign.c``) and the Redis scripts' must equal this.
    """
    n = len(shared)
    if n < END_LEAST or not shared[-1] or all(shared):
        return 0
    if not shared[0]:  # the page's end matter
        head = shared.index(True)
        if head < FRAME_GAP or head * END_SHARE < n:
            return 0
        held = sum(shared)
        if held * 2 <= theirs or held * END_PART <= n:
            return held
        return held if held * END_RUN < n and held == n - head else 0
    if n < FRAME_LEAST:
        return 0
    trail = 0
    while shared[n - 1 - trail]:
        trail += 1
    lead = 0
    while shared[lead]:
        lead += 1
    gap = run = 0
    for s in shared[lead : n - trail]:
        run = 0 if s else run + 1
        gap = max(gap, run)
    if gap < FRAME_GAP or gap * FRAME_SHARE < n or gap < lead or gap * 2 < n - lead - trail:
        return 0
    return lead + trail if (lead + trail) * 4 <= theirs * 3 else 0


def set_aside_pure(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
    theirs: int,
) -> int:
    """:func:`set_aside` in Python: what the compiled one must equal."""
    flags = page_flags(sketch, places, limit, common, more, shared)
    return frame_of(flags, theirs) if flags else 0


def page_flags(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> list[bool]:
    """A document's sketch values below *limit* that are not common (in *common* or *more*),
    in the order of their *places* in the page (ties by value), each marked shared (in
    *shared*) or not: what :func:`frame_of` and :func:`edits_of` read. Empty when the
    document has no places (or not one a value)."""
    at = read_places(places, len(sketch))
    if not at:
        return []
    held = set(shared)
    compared = sorted(
        (at[i], i, v in held)
        for i, v in enumerate(sketch)
        if v < limit and v not in common and v not in more
    )
    return [s for _, _, s in compared]


#: The compiled frame rule (_assign.set_aside), or None on the pure path.
_SET_ASIDE = compiled("set_aside")


def set_aside(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
    theirs: int,
) -> int:
    """How many of the *shared* values are the document's frame (:func:`frame_of`): its
    sketch values below *limit* that are not common (in *common* or *more*), in the order of
    their *places* in the page (:attr:`~nshash.DocPrint.places`; ties by value), each marked
    shared or not, against a group of which *theirs* values were compared. 0 when the
    document has no places. Compiled where the kernel is built, else :func:`set_aside_pure`;
    the answers are equal."""
    return either(_SET_ASIDE, set_aside_pure, sketch, places, limit, common, more, shared, theirs)


#: The edit rule (:func:`edits_of`): a candidate that scores at least this, short of
#: ``theta``, is read for scattered edits ...
EDIT_LOW = 0.3

#: ... over a shared span (first shared value to last, in page order) of at least this many
#: values ...
EDIT_LEAST = 24

#: ... that covers at least this share of the values compared ...
EDIT_COVER = 0.6

#: ... and of which at least this share is shared ...
EDIT_DENSITY = 0.25

#: ... with no unshared run in it longer than one in this many of its values ...
EDIT_GAP = 9

#: ... after at most this many stray ends were cut off it (a shared value or two past a
#: long unshared run: a related block's heading, a phrase of a footer) ...
EDIT_TRIMS = 2

#: ... and whose unshared values lie in runs of at most this many on average.
EDIT_RUN = 6


def edits_of(shared: Sequence[bool]) -> int:
    """How many of a page's values not shared with a group are scattered edits, given for
    each value it compared, in page order, whether the group holds it.

    A copy with a typo every few words (or OCR noise, or a word changed here and there all
    through it) loses every shingle that spans a change: at 6 % of its letters changed, half
    of an English copy's values, so it scores under ``theta`` against its own story; two such
    copies of one story share a quarter of theirs. But what a copy keeps is spread all along
    its text: its shared values span most of the page (at least :data:`EDIT_COVER` of the
    values compared, at least :data:`EDIT_LEAST` values), at least :data:`EDIT_DENSITY` of
    the values in that span are shared, and no unshared run in it is longer than
    1/:data:`EDIT_GAP` of it. Then the unshared values inside the span are edits and the
    count of them is returned, to leave out of the score as a frame is. Anything else is 0:
    text of its own (another story's sentences under a shared formula, a follow-up's new
    paragraphs, comments under a story) is a long unshared run, and text shared only at the
    edges (a site's wrapper) is no span; nor is another article on the same event that quotes
    some of the story's sentences whole: its unshared values come in runs of more than
    :data:`EDIT_RUN` values on average, a typo's in short ones.

    The span runs from the first shared value to the last, but a stray shared value past a
    long unshared run (a related block's heading that two sites word alike, under the
    copy's own related block and footer) would stretch it over the page's own wrapper: where
    the longest unshared run is too long, the side of it holding fewer shared values is cut
    off and the rest read again, :data:`EDIT_TRIMS` times at most. The compiled core's
    ``edits_of`` (``_assign.c``) and the Redis scripts' must equal this."""
    if True not in shared:
        return 0
    first = shared.index(True)
    last = len(shared) - 1 - shared[::-1].index(True)
    for _ in range(EDIT_TRIMS + 1):
        span = last - first + 1
        held = run = gap = runs = 0
        gap_end = first  # the last value of the longest unshared run (the first such run)
        for i in range(first, last + 1):
            if shared[i]:
                held += 1
                run = 0
            else:
                run += 1
                runs += run == 1
                if run > gap:
                    gap, gap_end = run, i
        if gap * EDIT_GAP <= span:
            break
        before = sum(shared[first : gap_end - gap + 1])  # (a shared value on each side)
        if before * 2 >= held:
            last = gap_end - gap
        else:
            first = gap_end + 1
    else:
        return 0
    if span < EDIT_LEAST or span < EDIT_COVER * len(shared) or held < EDIT_DENSITY * span:
        return 0
    return span - held if span - held <= EDIT_RUN * runs else 0


def edits_in_pure(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> int:
    """:func:`edits_in` in Python: what the compiled one must equal."""
    return edits_of(page_flags(sketch, places, limit, common, more, shared))


#: The compiled edit rule (_assign.edits_in), or None on the pure path.
_EDITS = compiled("edits_in")


def edits_in(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
    shared: Iterable[int],
) -> int:
    """How many of the document's values not *shared* with a group are scattered edits
    (:func:`edits_of`), read as :func:`set_aside` reads the frame: the sketch values below
    *limit* that are not common, in page order. 0 when the document has no places. Compiled
    where the kernel is built, else :func:`edits_in_pure`; the answers are equal."""
    return either(_EDITS, edits_in_pure, sketch, places, limit, common, more, shared)


#: The compiled comparison (_assign.sketch_guard), or None on the pure path.
_GUARD = compiled("sketch_guard")

#: An empty set to pass for "no more common hashes" (never changed).
NO_HASHES: set[int] = set()


def sketch_guard_pure(
    sketch: Iterable[int],
    doc_limit: int,
    values: Iterable[int],
    group_limit: int,
    common: Collection[int],
    more: Collection[int],
) -> tuple[list[int], int, int]:
    """:func:`sketch_guard` in Python: what the compiled one must equal."""
    limit = min(doc_limit, group_limit)
    live = {v for v in sketch if v < limit and v not in common and v not in more}
    theirs = [v for v in values if v < limit and v not in common and v not in more]
    return [v for v in theirs if v in live], len(live), len(theirs)


def sketch_guard(
    sketch: Iterable[int],
    doc_limit: int,
    values: Iterable[int],
    group_limit: int,
    common: Collection[int],
    more: set[int],
) -> tuple[list[int], int, int]:
    """Compare a document's sketch with a group's sketch, the guard's core.

    Each side holds every sampled value below its limit, so only values below the smaller
    limit are compared, and values in *common* or *more* (known boilerplate) are left out.
    Returns the values both hold (in the group's order), how many of the document's values
    were compared, and how many of the group's. Compiled where the kernel is built (no set
    is built: the document's values are sorted into an array once), else
    :func:`sketch_guard_pure`; the answers are equal.
    """
    return either(_GUARD, sketch_guard_pure, sketch, doc_limit, values, group_limit, common, more)


def score_pure(shared: int, mine: int, theirs: int, min_overlap: int) -> float:
    """The guard's score of a candidate, the reference: *shared* values over the smaller of
    *mine* and *theirs*, 0 when fewer than *min_overlap* are shared (unless a sketch is
    smaller than that). The compiled core's ``judge_score`` (``_assign.score``) must equal it."""
    smaller = min(mine, theirs)
    if smaller and shared >= min(min_overlap, smaller):
        return shared / smaller
    return 0.0


#: The compiled core's score (_assign.score, the one fast_assign uses), or None on the pure
#: path.
_SCORE = compiled("score")


def judged(
    gid: int,
    hits: tuple[int, ...],
    shared: int,
    mine: int,
    theirs: int,
    policy: MatchPolicy,
    frame: int = 0,
    edits: int = 0,
) -> Candidate:
    """A candidate scored by the compiled core's rule where it is built (the Python stores'
    placements and the Spark job's pairs then judge as ``fast_assign`` does), else by
    :func:`score_pure`; the two are equal. The counts are the ones left after the *frame*
    (:func:`set_aside`) or the *edits* (:func:`edits_in`) were left out."""
    if _SCORE is not None:
        score: float = _SCORE(shared, mine, theirs, policy.min_overlap)
    else:
        score = score_pure(shared, mine, theirs, policy.min_overlap)
    return Candidate(gid, hits, shared, mine, theirs, score, frame=frame, edits=edits)


def kinship(tables: Tables, a: int, b: int) -> float:
    """How much of the smaller of two groups' sketches the other holds (common values and
    values past either limit left out): :func:`sketch_kinship` of their sketches."""
    values_a, limit_a = tables.group_sketch(a)
    values_b, limit_b = tables.group_sketch(b)
    return sketch_kinship(values_a, limit_a, values_b, limit_b, tables.live_set)


def sketch_kinship(
    values_a: Iterable[int],
    limit_a: int,
    values_b: Iterable[int],
    limit_b: int,
    live: Callable[[Iterable[int]], set[int]],
) -> float:
    """How much of the smaller of two group sketches (values and limit each) the other holds:
    only values below the smaller limit are compared, and *live* leaves the common ones out.
    The merge guard of :func:`kinship`, which the Spark job applies to the groups its edges
    would merge."""
    limit = min(limit_a, limit_b)
    mine = live(v for v in values_a if v < limit)
    theirs = live(v for v in values_b if v < limit)
    smaller = min(len(mine), len(theirs))
    return len(mine & theirs) / smaller if smaller else 0.0


def _choose(tables: Tables, scores: dict[int, float], policy: MatchPolicy) -> list[int]:
    """The accepted groups to join: the best match, plus any other that matches strongly.

    A document that half-matches two stories (one sentence from each) must not glue them
    together; it joins the better one. Groups merge only on strong evidence for each, and
    only when the groups are alike themselves (``merge_guard``): a digest of two stories
    matches both, yet the stories stay apart.
    """
    accepted = {g: s for g, s in scores.items() if s >= policy.theta}
    if len(accepted) <= 1:
        return list(accepted)
    best = max(accepted, key=lambda g: (accepted[g], -g))
    merge = {
        g
        for g, s in accepted.items()
        if g != best and s >= policy.merge_theta and kinship(tables, best, g) >= policy.merge_guard
    }
    return sorted({best} | merge)


def _judge(
    tables: Tables, doc: DocPrint, known: dict[int, int | None], policy: MatchPolicy
) -> tuple[list[Candidate], list[list[int]], list[int]]:
    """Verify every candidate group (*known*: each anchor's group, see :func:`_known`);
    returns the candidates, their shared values and the groups to join, in id order (the
    document goes to the first, the rest merge into it)."""
    candidates: list[Candidate] = []
    shared: list[list[int]] = []
    for gid, hits in _candidates(tables, known).items():
        candidate, common = _verify(tables, doc, gid, hits, policy)
        candidates.append(candidate)
        shared.append(common)
    return candidates, shared, _choose(tables, {c.similar_id: c.score for c in candidates}, policy)


#: Each placed page votes this many of its last values, in page order, for its group
#: (:func:`tail_of`).
TAIL_VOTES = 4


def tail_of(doc: DocPrint, common: Collection[int], more: Collection[int]) -> list[int]:
    """The document's last :data:`TAIL_VOTES` sketch values in page order (ties by value)
    that are not common (in *common* or *more*), ascending: what its placement votes for the
    group it joins (:func:`vote` with that group twice), as a refusal votes for the two groups
    it keeps apart. A site's footer, related block and a columnist's bio end page after page in
    group after group, and become common once ``votes`` distinct groups have voted for them;
    the last lines of a story end its copies, which all vote for one group. Empty for a
    document without places."""
    return tail_values(doc.sketch, doc.places, doc.limit, common, more)


def tail_values(
    sketch: Sequence[int],
    places: bytes,
    limit: int,
    common: Collection[int],
    more: Collection[int],
) -> list[int]:
    """:func:`tail_of` of a sketch, its places and its limit (how the Spark job reads its
    nodes' tails)."""
    at = read_places(places, len(sketch))
    if not at:
        return []
    live = sorted(
        (at[i], v) for i, v in enumerate(sketch) if v < limit and v not in common and v not in more
    )
    return sorted(v for _, v in live[-TAIL_VOTES:])


class VoteTables(Parents, Protocol):
    """The reads and writes :func:`vote` needs (part of :class:`Tables`)."""

    def get_votes(self, h: int) -> tuple[int, ...]: ...
    def add_common(self, hs: Iterable[int]) -> None: ...
    def set_votes(self, h: int, gids: tuple[int, ...]) -> None: ...


def vote(tables: VoteTables, hs: Iterable[int], groups: tuple[int, int], need: int) -> None:
    """Record that *groups* were kept apart on each hash of *hs*; make a hash common once
    *need* (``MatchPolicy.votes``) distinct groups (after merges) have been. A refusal votes
    so, and so does an editor's detach (:mod:`.corrections`)."""
    for h in hs:
        seen = set(tables.get_votes(h))
        seen.update(groups)
        if len(seen) >= need:
            seen = {resolve(tables, g) for g in seen}
            if len(seen) >= need:
                tables.add_common((h,))
                tables.set_votes(h, ())
                continue
        tables.set_votes(h, tuple(sorted(seen)))


def finish_explanation(
    chosen: list[int],
    anchors: tuple[int, ...],
    boilerplate: tuple[int, ...],
    candidates: list[Candidate],
    policy: MatchPolicy,
) -> Explanation:
    """An explanation of a query's candidates, given the groups it would join (the one to
    join first): verdicts given, best first."""
    similar_id = chosen[0] if chosen else None
    for c in candidates:
        if c.similar_id in chosen:
            c.verdict = "joined" if c.similar_id == chosen[0] else "merged"
        elif c.score >= policy.theta:
            c.verdict = "not best"
        else:
            c.verdict = "refused"
    candidates.sort(key=lambda c: (-c.score, c.similar_id))
    reason = "matched" if chosen else ("new" if candidates else "nothing")
    return Explanation(similar_id, reason, anchors, boilerplate, candidates, policy.theta)


def explain(tables: Tables, doc: DocPrint, policy: MatchPolicy) -> Explanation:
    """Say which group *doc* would join and why; reads only (what a query answers)."""
    gid = tables.get_exact(doc.exact)
    if gid is not None:
        return Explanation(resolve(tables, gid), "exact", theta=policy.theta)
    anchors = _select(tables, doc, policy.n)
    live = set(tables.not_common(doc.sentences))
    boilerplate = tuple(h for h in doc.sentences if h not in live)
    candidates, _, chosen = _judge(tables, doc, _known(tables, anchors), policy)
    return finish_explanation(chosen, anchors, boilerplate, candidates, policy)


def lookup(tables: Tables, doc: DocPrint, policy: MatchPolicy) -> int | None:
    """Return the canonical id *doc* would join, or None; reads only."""
    gid = tables.get_exact(doc.exact)
    if gid is not None:
        return resolve(tables, gid)
    chosen = _judge(tables, doc, _known(tables, _select(tables, doc, policy.n)), policy)[2]
    return min(chosen) if chosen else None


def evidence(candidates: list[Candidate], chosen: list[int]) -> tuple[float, str]:
    """The score and verdict a placement keeps with its document (see
    :attr:`~nshash.DocumentRecord.verdict`): the score against the group joined (the first
    chosen), else the best refused one."""
    if chosen:
        score = next(c.score for c in candidates if c.similar_id == chosen[0])
        return score, "merged" if len(chosen) > 1 else "joined"
    if candidates:
        return max(c.score for c in candidates), "refused"
    return 0.0, "new story"


def assign(
    tables: Tables,
    doc: DocPrint,
    policy: MatchPolicy,
    doc_id: str | None = None,
    title: str | None = None,
    meta: DocMeta | None = None,
) -> tuple[Assignment, tuple[int, ...]]:
    """Place *doc* in a group, writing through *tables*; returns the answer and the anchors.

    With *meta*, the document's time (and url and site) are recorded too (:meth:`Tables.note`);
    a replayed ``doc_id`` records nothing. The caller makes this atomic (a lock, a LevelDB
    write batch, a Redis Lua script).
    """
    if doc_id is not None:
        seen = tables.get_doc(doc_id)
        if seen is not None:  # a retry: the first answer again, and where it points now
            canonical = resolve(tables, seen.similar_id)
            answer = Assignment(
                seen.similar_id,
                seen.duplicate,
                seen.merged_from,
                True,
                canonical if canonical != seen.similar_id else None,
            )
            return answer, seen.fingerprints
    anchors = _select(tables, doc, policy.n)
    known = _known(tables, anchors)
    merged: tuple[int, ...] = ()
    exact = tables.get_exact(doc.exact)
    if exact is not None:
        root = resolve(tables, exact)
        duplicate = True
        score, verdict = 1.0, "identical"
    else:
        candidates, shared, chosen = _judge(tables, doc, known, policy)
        score, verdict = evidence(candidates, chosen)
        if chosen:
            root = chosen[0]
            merged = tuple(chosen[1:])
            for gid in merged:
                tables.merge_into(root, gid, policy.sketch_cap)
            group = tables.group_sketch(root)
            if extends(group, doc.sketch, doc.limit):
                held = [
                    v
                    for c, s in zip(candidates, shared, strict=True)
                    if c.similar_id in chosen
                    for v in s
                ]
                values = story_span(group, doc.sketch, doc.places, held)
                tables.extend_sketch(root, values, doc.limit, policy.sketch_cap)
            duplicate = True
        else:
            if len(doc.sketch) <= policy.sketch_cap:  # what combine_sketch would make of it
                root = tables.new_group(doc.sketch, doc.limit)
            else:
                cut = combine_sketch((), NO_LIMIT, doc.sketch, doc.limit, policy.sketch_cap)
                root = tables.new_group(*cut)
            duplicate = False
        for c, common in zip(candidates, shared, strict=True):
            if c.score < policy.theta:
                hs = sorted(set(c.anchors).union(common))
                vote(tables, hs, (c.similar_id, root), policy.votes)
        vote(tables, tail_of(doc, *tables.common_sets()), (root, root), policy.votes)
        tables.set_exact(doc.exact, root)
    for h, hit in known.items():
        if hit is None:
            tables.set_fp(h, root)
    record = None
    if doc_id is not None:
        record = DocumentRecord(doc_id, root, duplicate, merged, title, anchors, score, verdict)
    tables.add_member(root, record)
    if meta is not None:
        tables.note(root, doc_id, meta)
    return Assignment(root, duplicate, merged), anchors
