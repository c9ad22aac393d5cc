"""nshash as a Spark job: group a stored corpus past one machine.

The batch form of the online algorithm (:mod:`nshash.methods.nshash.assign`), with the whole
corpus in view at once instead of one document at a time. Every stage is a Spark DataFrame
operation (the Python ones through Arrow batches, ``mapInArrow``); nothing that grows with the
corpus is collected to the driver (the common hashes, a set the size of the boilerplate, are
broadcast to the verifying tasks).

1. **Fingerprints** on the executors, with the library's own :class:`~nshash.Fingerprinter`
   (the same text path, so the same keys as :class:`~nshash.NSHash`; the compiled text kernel
   where it is built, fed Arrow batches): anchor candidates
   (:attr:`DocPrint.sentences <nshash.DocPrint.sentences>`), sketch, limit and the exact
   fingerprint of every document.
2. **Identical texts** (same exact fingerprint) collapse into one node named by their smallest
   id: they always share a group, whatever the guard says.
3. **Candidate pairs** from shared anchors (the first ``n`` of each document, ``2n`` of a long
   page: :func:`~nshash.text.fingerprint.anchors_wanted`): every pair of an
   anchor's posting list up to ``max_posting`` documents, and past that each document paired
   with the ``hubs`` smallest ones only (a giant posting list is mostly boilerplate; a real hot
   story still links through its hubs). In the first pass, which only learns what is common,
   a long list pairs its hubs with its :data:`VOTERS` smallest documents only, so the pass
   grows with the documents and not with the size of the footers' postings. Each pair is
   verified by the online path's own guard and judge
   (:func:`~nshash.methods.nshash.assign.sketch_guard`, compiled where it is built, then
   :func:`~nshash.methods.nshash.assign.judged`: shared values over the smaller sketch, both
   cut at the smaller limit and without the common hashes, ``theta`` and ``min_overlap``), and
   the frame rule (:func:`~nshash.methods.nshash.assign.unframed`: what the later page of the
   pair shares only at its top and bottom, around a run of its own text, is set aside, as the
   online path sets aside the frame of the page that arrives; the places of each sketch value
   travel with the fingerprints) and the top rule in it (a long page whose top shares nothing
   with the other page is refused: :func:`~nshash.methods.nshash.assign.misses_top`), in
   Arrow batches on the executors; a change to the judge changes this engine with the
   others. A pair is judged again only where it passes: the rules that may raise a pair a
   little short of ``theta`` (scattered edits, :func:`~nshash.methods.nshash.assign.edits_of`,
   and a long page's top, :func:`~nshash.methods.nshash.assign.top_share`) are not made here
   (measured with them: ``en_reposts_dev`` fell from F1 0.9997 to 0.9983, precision
   0.9972).
4. **Boilerplate from corpus-wide evidence**: the verified pairs make a first graph, and every
   refused pair votes, on each anchor that hit and each sketch value the pair shared, for the
   first-graph components of its two documents (each document's votes are written once, so
   the count grows with the documents, not with the refused pairs), and every document votes
   its last values in page order (:func:`~nshash.methods.nshash.assign.tail_values`, as the
   online placement votes them for the group a page joins) for its own. A hash is common
   once it has votes from ``votes`` distinct components (the online rule, with every vote
   there at once). A hot story whose 60 copies share an anchor is one component, so its
   anchors and its end stay; a site footer on thousands of unrelated articles is in
   thousands.
5. **Second pass** without the common hashes: each document's anchors are its first ``n``
   candidates that are not common (``2n`` of a long page; the online selection), its sketch
   leaves out common values, and the pairs are found and verified again.
6. **The merge guard** (the batch form of ``merge_guard``): a document that matches several
   others keeps only the matches that agree with its best one, in that what it shares with
   them overlaps what it shares with the best by at least ``merge_guard``; an edge stays when
   both of its documents keep it. A digest page quoting two whole stories matches both, but
   on disjoint parts of itself, so it joins one and the stories stay apart.
7. **Connected components** of the kept edges in Spark (the large-star/small-star iteration on
   DataFrames), and the smallest document id of a component names it. The edges that are a
   document's first choice (its best match) make the groups; an edge that is no document's
   first choice merges two groups only when they are alike as a whole (the online merge
   guard, :func:`~nshash.methods.nshash.assign.sketch_kinship` of the groups' combined
   sketches, :func:`_grouped`): two stories of a series whose short pages are mostly its
   formula stay apart, as on the online path. A group's combined sketch takes every
   document's values: the online rules that keep a page far longer than its group out of
   the group's sketch (:func:`~nshash.methods.nshash.assign.extends`) and a copy's wrapper
   out of it (:func:`~nshash.methods.nshash.assign.story_span`) are choices made in arrival
   order, and are not made here.

The result does not depend on the order of the input: every choice is made in id order.

**Against stored groups** (``against=``, ``--against``): a new batch is grouped against the
groups of a previous run's output or of a store's export (:mod:`nshash.export`). Each stored
group is one node of the graph, with its documents' anchors and its sketch (cut as a store
keeps it, :func:`~nshash.methods.nshash.assign.combine_sketch`), numbered by its id below the
new documents' nodes: steps 2 to 7 run as above, except that two stored groups are never
paired (their grouping is stored), a stored group accepts every document that the judge and
the document's own merge guard accept (as a store's group takes a document that chooses it),
and the common hashes start from the store's. An export's narrow sketches are compared with
narrowed documents (:func:`~nshash.text.fingerprint.narrow`). The stored side costs one scan
of its groups (their anchors join the new documents' postings; only pairs with a new document
are verified), never a regrouping: an export is read as it is, a previous output's texts are
fingerprinted once and reduced to their groups.

Example:
    A self-contained run on two cores (needs ``pip install 'nshash[spark]'`` and Java)::

        from pyspark.sql import SparkSession
        from .spark import dedup

        spark = SparkSession.builder.master("local[2]").getOrCreate()
        df = spark.createDataFrame([("a", "..."), ("b", "...")], ["id", "text"])
        dedup(df).show()   # id, text, similar_id, duplicate
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.resources import files
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .cli.io import BadRecord, Fields, Item, JsonlWriter, Preparer
from .errors import ConfigError, NSHashError, StateError, install_hint
from .export import read_export_info, signed, write_export
from .inputs import check_text
from .methods.nshash.assign import NO_HASHES, MatchPolicy, combine_sketch, judged, tail_values
from .methods.nshash.core import _POLICY_OPTIONS, _TEXT_OPTIONS
from .text.fingerprint import (
    DEFAULT_DELIMITERS,
    NO_LIMIT,
    DocPrint,
    Fingerprinter,
    is_long,
    narrow,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SPARK_FORMATS", "dedup", "dedup_file"]

#: The input formats :func:`dedup_file` reads (by name or ``--format``).
SPARK_FORMATS = ("parquet", "jsonl")

#: An anchor's posting list up to this many documents gives every pair; past it, each
#: document is paired with the :data:`HUBS` smallest (default of ``max_posting``).
MAX_POSTING = 100

#: Documents of a long posting list that every other one is compared with.
HUBS = 8

#: The first pass, which learns what is common (and the components that its votes count),
#: pairs the hubs of a long posting list with its this many smallest documents only: a hash
#: on thousands of unrelated pages has its votes many times over from these, and the pass
#: then grows with the documents, not with the documents times the size of the site
#: footers' postings. The second pass pairs every document of a list with its hubs.
VOTERS = 1000

T = TypeVar("T")


def _pyspark() -> Any:
    """Import pyspark, or say how to install it."""
    try:
        import pyspark.sql
    except ImportError as exc:
        raise ConfigError(
            f"nshash.spark needs pyspark (and Java): {install_hint('spark')}"
        ) from exc
    return pyspark.sql


def _options(
    options: dict[str, Any],
) -> tuple[Fingerprinter, MatchPolicy, dict[str, Any]]:
    """The fingerprinter, policy and fingerprinter options for *options*, split as
    :class:`~nshash.NSHash` does."""
    options = dict(options)
    n = options.pop("n", 16)
    text = {k: options.pop(k) for k in ("min_length", "hashfunc", *_TEXT_OPTIONS) if k in options}
    policy = {k: options.pop(k) for k in _POLICY_OPTIONS if k in options}
    text.update(n=n, delimiters=options.pop("delimiters", DEFAULT_DELIMITERS))
    if options:
        raise ConfigError(f"Unknown option(s) {sorted(options)} for nshash.spark.dedup")
    return Fingerprinter(**text), MatchPolicy(n=n, **policy), text


# -- stage functions (run on the executors) --------------------------------------------------


def _fingerprint_batches(
    fingerprinter: Fingerprinter,
) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function: ``(key, text)`` batches to ``(key, ok, exact, anchors,
    sketch, limit, places, long)`` batches, the key passed through as it is (*places*: the
    sketch values' places in the page, :attr:`DocPrint.places <nshash.DocPrint.places>`, for
    the frame rule; *long*: whether the page is long and takes twice the anchors,
    :func:`~nshash.text.fingerprint.anchors_wanted`).

    A text the library refuses (not a string, no letters or digits, too long) comes out with
    ``ok`` false and no fingerprints: it gets no group.
    """

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        prepare = fingerprinter.prepare
        longs = pa.list_(pa.int64())
        for batch in batches:
            ok: list[bool] = []
            exact: list[int | None] = []
            anchors: list[list[int] | None] = []
            sketch: list[list[int] | None] = []
            limit: list[int | None] = []
            places: list[bytes | None] = []
            long: list[bool | None] = []
            for text in batch.column(1).to_pylist():
                try:
                    doc = prepare(check_text(text))
                except NSHashError:
                    ok.append(False)
                    exact.append(None)
                    anchors.append(None)
                    sketch.append(None)
                    limit.append(None)
                    places.append(None)
                    long.append(None)
                    continue
                ok.append(True)
                exact.append(signed(doc.exact))
                anchors.append([signed(h) for h in doc.sentences])
                sketch.append(list(doc.sketch))
                limit.append(doc.limit)
                places.append(doc.places)
                long.append(is_long(doc.places, len(doc.sketch)))
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column(0),
                    pa.array(ok, pa.bool_()),
                    pa.array(exact, pa.int64()),
                    pa.array(anchors, longs),
                    pa.array(sketch, longs),
                    pa.array(limit, pa.int64()),
                    pa.array(places, pa.binary()),
                    pa.array(long, pa.bool_()),
                ],
                names=["key", "ok", "exact", "anchors", "sketch", "limit", "places", "long"],
            )

    return run


def _agree(best: set[int], shared: set[int], size: int, guard: float) -> bool:
    """Whether a match of a node is alike its best match: what the node shares with both is
    at least *guard* of the match's own sketch (*size* values). That is a lower bound of the
    two matches' :func:`~nshash.methods.nshash.assign.kinship` from what the node sees of them,
    and it keeps a short page that is mostly a columnist's bio from tying all of the columnist's
    articles to its best match: each shares the bio, a small part of each."""
    return bool(size) and len(best & shared) / size >= guard


def _guard_rows(
    policy: MatchPolicy, floor: int = 0
) -> Callable[[Iterable[Any]], Iterator[tuple[int, int, bool, bool]]]:
    """A partition function: a node and its verified matches to the matches it agrees to.

    The batch form of the online choice (:mod:`nshash.methods.nshash.assign`): a document joins
    its best match, and merges others into it only where they match strongly (``merge_theta``) and
    agree with the best one (``merge_guard``). Rows are ``(node, [(other, score, shared,
    size), ...])``, *size* being the other node's live sketch size; out come ``(node, other,
    pick, first)`` for every match the node agrees to, *first* true for the node's first
    choice: the match it picks with the best score (then the most shared, the smallest id),
    the group the online path would place it in. Its other picks are merges, which
    :func:`_grouped` makes only between groups alike as a whole.

    The node's reference match is the one it shares the most with (ties: the better score,
    the smaller id); another match agrees with it when what the node shares with both is at
    least ``merge_guard`` of the other match's sketch (the online merge guard, as far as the
    node can see the two). The node *picks* its strong agreeing matches, or only the
    reference when none is strong, and merely *accepts* its other agreeing matches. An edge
    stays when both nodes agree to it and one picks it: a heavily edited copy still joins its
    story through its best match, while a weak match between two stories glues nothing, nor
    does a digest page quoting both (its two matches share disjoint parts of it).

    A node below *floor* is a stored group (a run against stored groups): it agrees to every
    match and picks none, so each document chooses, as the online path lets a document choose
    among the groups it matches. A document reads a stored group's agreement on the smaller of
    the two sketches, the group's and its reference match's, as the online guard's kinship
    does: a stored sketch is the union of its pages' (cut at the cap), so it is wider than any
    page, and new copies that share more with each other than with it would otherwise leave
    their stored story for a new group of their own.
    """

    def run(rows: Iterable[Any]) -> Iterator[tuple[int, int, bool, bool]]:
        guard, strong = policy.merge_guard, policy.merge_theta
        for node, matches in rows:
            if node < floor:
                for match in matches:
                    yield node, match[0], False, False
                continue
            # The reference is the match the node shares most with (then the best score, then
            # the smallest id): a contained short copy scores 1.0 but says little of the rest.
            ref = max(matches, key=lambda m: (len(m[2]), m[1], -m[0]))
            best = set(ref[2])
            any_strong = max(m[1] for m in matches) >= strong
            kept: list[tuple[int, float, int, bool]] = []
            for other, score, shared, size in matches:
                if other < floor:
                    # A stored group's sketch is the union of its pages' (up to the cap), not
                    # one page's: it agrees on the smaller of the two sketches, as the online
                    # guard's kinship reads two groups.
                    size = min(size, ref[3])
                if other != ref[0] and not _agree(best, set(shared), size, guard):
                    continue
                pick = score >= strong if any_strong else other == ref[0]
                kept.append((other, score, len(shared), pick))
            picked = [(score, count, -other) for other, score, count, pick in kept if pick]
            first = -max(picked)[2] if picked else None
            for other, _, _, pick in kept:
                yield node, other, pick, other == first

    return run


# -- DataFrame stages ------------------------------------------------------------------------


def _pairs(post: DataFrame, max_posting: int, hubs: int, reach: int | None = None) -> DataFrame:
    """Candidate pairs ``(a, b, hits)``, ``a < b``, from anchor postings ``(node, h)``.

    Each anchor's posting list is gathered once (one shuffle) and sorted; a list of up to
    *max_posting* nodes pairs all of them, a longer one pairs each node with the *hubs*
    smallest (the pairs are made in the JVM, by Spark's array functions); the pairs are then
    gathered with the anchors that made them (a second shuffle). With *reach*, a longer list
    pairs only its *reach* smallest nodes with the hubs (the first pass, which only learns
    what is common: see :data:`VOTERS`).
    """
    sql = _pyspark()
    F = sql.functions
    lists = post.groupBy("h").agg(F.array_sort(F.collect_set("node")).alias("ns"))
    lists = lists.where(F.size("ns") > 1)
    size = F.size("ns")
    small = size <= max_posting
    heads = F.slice("ns", 1, F.when(small, size).otherwise(F.lit(hubs)))
    tails = (
        F.col("ns")
        if reach is None
        else F.when(small, F.col("ns")).otherwise(F.slice("ns", 1, max(reach, hubs)))
    )
    made = F.flatten(
        F.transform(
            heads,
            lambda x, i: F.transform(
                F.slice(tails, i + 2, size), lambda y: F.struct(x.alias("a"), y.alias("b"))
            ),
        )
    )
    every = lists.select("h", F.explode(made).alias("p")).select("p.a", "p.b", "h")
    return every.groupBy("a", "b").agg(F.sort_array(F.collect_set("h")).alias("hits"))


#: The kinds of rows :func:`_verify_batches` writes: an accepted pair, a vote (a node of a
#: refused pair and a hash the pair shared), and the count of pairs a task verified.
ACCEPTED, VOTE, COUNTED = 0, 1, 2

#: Vote rows a verifying task holds before it writes them out (its memory bound): until then
#: the repeats of a (node, hash) vote are written once.
VOTES_HELD = 1 << 20


def _verdict_schema() -> Any:
    """The rows :func:`_verify_batches` writes (see :data:`ACCEPTED`)."""
    T = _pyspark().types
    return T.StructType(
        [
            T.StructField("kind", T.ByteType()),
            T.StructField("a", T.LongType()),
            T.StructField("b", T.LongType()),
            T.StructField("score", T.DoubleType()),
            T.StructField("shared", T.ArrayType(T.LongType())),
            T.StructField("na", T.LongType()),
            T.StructField("nb", T.LongType()),
        ]
    )


def _verify_batches(policy: MatchPolicy, common: Any) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function: candidate pairs with both sketches to verdicts.

    Input batches hold ``(a, b, hits, sa, la, sb, lb, pb)``: a pair, the anchors that paired
    it, each node's sketch and limit, and the places of *b*'s sketch values. Each pair goes
    through the online path's guard (:func:`~nshash.methods.nshash.assign.sketch_guard`, with
    the common hashes left out) and judge (:func:`~nshash.methods.nshash.assign.judged`,
    then :func:`~nshash.methods.nshash.assign.unframed`: the frame rule); the sketches reach
    the compiled guard as Arrow's packed buffers, not as Python lists.

    The frame is read from *b*'s side, as the online path reads it from the document that
    arrives: *b* is the later node (nodes are numbered in key order, and a stored group is
    always below the new documents), *a* stands for the group it is compared with. Out come rows of
    :func:`_verdict_schema`: every accepted pair with what it shares; for a refused pair, a
    vote of each of its nodes on each hash the pair shared (its hits and its shared values),
    each (node, hash) written once per task as far as :data:`VOTES_HELD` allows; and the
    count of pairs verified.

    *common* is a broadcast of the common hashes (or a list of them).
    """

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from .methods.nshash.assign import NO_HASHES, sketch_guard, unframed
        from .methods.nshash.compiled import compiled

        known = set(getattr(common, "value", common))
        packed = compiled("sketch_guard") is not None  # the compiled guard reads raw bytes
        theta = policy.theta
        schema = pa.schema(
            [
                ("kind", pa.int8()),
                ("a", pa.int64()),
                ("b", pa.int64()),
                ("score", pa.float64()),
                ("shared", pa.list_(pa.int64())),
                ("na", pa.int64()),
                ("nb", pa.int64()),
            ]
        )
        votes: dict[int, set[int]] = {}
        held = 0
        counted = 0

        def verdict_batch(kind: int, a: list[int], *rest: list[Any] | None) -> Any:
            """Rows of *kind* for the nodes *a*, with the columns after it in schema order
            (those not given, or None, are null)."""
            size = len(a)
            columns = [pa.array([kind] * size, pa.int8()), pa.array(a, pa.int64())]
            fields = list(schema)[2:]
            values = [*rest, *([None] * (len(fields) - len(rest)))]
            for field, column in zip(fields, values, strict=True):
                columns.append(
                    pa.nulls(size, field.type) if column is None else pa.array(column, field.type)
                )
            return pa.RecordBatch.from_arrays(columns, schema=schema)

        def vote_batch() -> Any:
            nodes = [n for n, hs in votes.items() for _ in hs]
            hashes = [h for hs in votes.values() for h in hs]
            return verdict_batch(VOTE, nodes, hashes)

        def sides(column: Any) -> tuple[list[int], memoryview]:
            """A list column's offsets and its values as int64s (a view of Arrow's buffer)."""
            values = column.values
            raw = values.buffers()[1]
            view = memoryview(raw if raw is not None else b"").cast("q")
            start = values.offset
            return [start + o for o in column.offsets.to_pylist()], view

        def blobs(column: Any) -> tuple[list[int], memoryview]:
            """A binary column's offsets and its bytes (read only for the pairs that need
            them)."""
            _, offsets, raw = column.buffers()
            if offsets is None or raw is None:  # an empty batch
                return [0] * (len(column) + 1), memoryview(b"")
            at = memoryview(offsets).cast("i")[column.offset : column.offset + len(column) + 1]
            return at.tolist(), memoryview(raw)

        for batch in batches:
            a_ids = batch.column(0).to_pylist()
            b_ids = batch.column(1).to_pylist()
            h_off, h_vals = sides(batch.column(2))  # read for the refused pairs only
            a_off, a_vals = sides(batch.column(3))
            la = batch.column(4).to_pylist()
            b_off, b_vals = sides(batch.column(5))
            lb = batch.column(6).to_pylist()
            p_off, p_raw = blobs(batch.column(7))
            b_bytes = b_vals.cast("B")
            out_a: list[int] = []
            out_b: list[int] = []
            scores: list[float] = []
            shares: list[list[int]] = []
            mines: list[int] = []
            theirs_: list[int] = []
            counted += len(a_ids)
            for i, (a, b) in enumerate(zip(a_ids, b_ids, strict=True)):
                mine_values = a_vals[a_off[i] : a_off[i + 1]]
                start, stop = b_off[i], b_off[i + 1]
                their_values: Any = (
                    b_bytes[start * 8 : stop * 8].tobytes() if packed else b_vals[start:stop]
                )
                shared, mine, theirs = sketch_guard(
                    mine_values, la[i], their_values, lb[i], known, NO_HASHES
                )
                # b is the document, a the group (see above): b's frame is set aside.
                found = judged(0, (), len(shared), theirs, mine, policy)
                if found.score >= theta:
                    places = p_raw[p_off[i] : p_off[i + 1]].tobytes()
                    limit = min(la[i], lb[i])
                    found = unframed(
                        found, b_vals[start:stop], places, limit, known, NO_HASHES, shared, policy
                    )
                score = found.score
                if score >= theta:
                    out_a.append(a)
                    out_b.append(b)
                    scores.append(score)
                    shares.append(sorted(shared))
                    mines.append(mine)
                    theirs_.append(theirs)
                    continue
                voted = set(shared)
                voted.update(h_vals[h_off[i] : h_off[i + 1]])
                for node in (a, b):
                    have = votes.get(node)
                    if have is None:
                        votes[node] = have = set()
                    before = len(have)
                    have |= voted
                    held += len(have) - before
            if out_a:
                yield verdict_batch(ACCEPTED, out_a, out_b, scores, shares, mines, theirs_)
            if held >= VOTES_HELD:
                yield vote_batch()
                votes.clear()
                held = 0
        if votes:
            yield vote_batch()
        yield verdict_batch(COUNTED, [counted])

    return run


class _Verdicts:
    """What verifying a set of candidate pairs found (see :func:`_verify_batches`).

    Attributes:
        accepted: ``(a, b, score, shared, na, nb)``: the accepted pairs, what each shares
            and each node's live sketch size.
        votes: ``(node, h)``: a node of a refused pair, and a hash that pair shared.
        rows: every row (to count the pairs verified, :meth:`pairs`).
    """

    def __init__(self, rows: DataFrame) -> None:
        F = _pyspark().functions
        self.rows = rows
        self.accepted = rows.where(F.col("kind") == ACCEPTED).drop("kind")
        self.votes = rows.where(F.col("kind") == VOTE).select(
            F.col("a").alias("node"), F.col("b").alias("h")
        )

    def pairs(self) -> int:
        """The candidate pairs verified."""
        F = _pyspark().functions
        row = self.rows.where(F.col("kind") == COUNTED).agg(F.sum("a")).first()
        return int(row[0] or 0) if row is not None else 0


def _verify(
    pairs: DataFrame, nodes: DataFrame, policy: MatchPolicy, common: Sequence[int] = ()
) -> DataFrame:
    """Verdicts of candidate *pairs* ``(a, b, hits)``, as rows of :func:`_verdict_schema`
    (wrap them in :class:`_Verdicts`).

    *nodes* is ``(node, sketch, limit, places)``; *common*, the common hashes, which the
    guard leaves out of both sketches as the online path does. Each pair is judged by the
    online path's own guard and judge, in Arrow batches on the executors
    (:func:`_verify_batches`), with the frame of *b* (the later node) set aside.
    """
    joined = _with_sides(pairs, nodes, "node", places=True)
    joined = joined.select("a", "b", "hits", "sa", "la", "sb", "lb", "pb")
    shared: Any = pairs.sparkSession.sparkContext.broadcast(sorted(common)) if common else []
    return joined.mapInArrow(_verify_batches(policy, shared), _verdict_schema())


def _with_sides(pairs: DataFrame, sketches: DataFrame, key: str, places: bool = False) -> DataFrame:
    """*pairs* ``(a, b, ...)`` joined with the sketch and limit of each side from *sketches*
    (keyed by column *key*): columns ``sa, la, sb, lb``, and ``pb``, *b*'s places, when
    *places*."""
    F = _pyspark().functions
    side = {
        name: sketches.select(
            F.col(key).alias(name),
            F.col("sketch").alias(f"s{name}"),
            F.col("limit").alias(f"l{name}"),
            *([F.col("places").alias("pb")] if places and name == "b" else []),
        )
        for name in ("a", "b")
    }
    return pairs.join(side["a"], "a").join(side["b"], "b")


def _guard_batches(policy: MatchPolicy, floor: int = 0) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function: :func:`_guard_rows` over Arrow batches of ``(u, ms)``, *ms*
    a node's matches as structs ``(v, score, shared, n)``; out come ``(u, v, pick, first)``."""
    guard = _guard_rows(policy, floor)

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            nodes = batch.column(0).to_pylist()
            matches = batch.column(1).to_pylist()
            rows = (
                (u, [(m["v"], m["score"], m["shared"], m["n"]) for m in ms])
                for u, ms in zip(nodes, matches, strict=True)
            )
            us: list[int] = []
            vs: list[int] = []
            picks: list[bool] = []
            firsts: list[bool] = []
            for u, v, pick, first in guard(rows):
                us.append(u)
                vs.append(v)
                picks.append(pick)
                firsts.append(first)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(us, pa.int64()),
                    pa.array(vs, pa.int64()),
                    pa.array(picks, pa.bool_()),
                    pa.array(firsts, pa.bool_()),
                ],
                names=["u", "v", "pick", "first"],
            )

    return run


def _guarded(
    spark: SparkSession, verdicts: DataFrame, policy: MatchPolicy, floor: int = 0
) -> DataFrame:
    """The accepted edges ``(a, b, first)`` that both of their nodes keep under the merge
    guard (nodes below *floor* are stored groups, see :func:`_guard_rows`), from the accepted
    pairs (*verdicts*: :attr:`_Verdicts.accepted`); *first*: the edge is the first choice of
    one of its nodes (else it is a merge, see :func:`_grouped`)."""
    sql = _pyspark()
    F, T = sql.functions, sql.types
    ok = verdicts
    sides = ok.select(
        F.col("a").alias("u"),
        F.struct(F.col("b").alias("v"), "score", "shared", F.col("nb").alias("n")).alias("m"),
    ).unionByName(
        ok.select(
            F.col("b").alias("u"),
            F.struct(F.col("a").alias("v"), "score", "shared", F.col("na").alias("n")).alias("m"),
        )
    )
    grouped = sides.groupBy("u").agg(F.collect_list("m").alias("ms"))
    schema = T.StructType(
        [
            T.StructField("u", T.LongType()),
            T.StructField("v", T.LongType()),
            T.StructField("pick", T.BooleanType()),
            T.StructField("first", T.BooleanType()),
        ]
    )
    kept = grouped.mapInArrow(_guard_batches(policy, floor), schema)
    undirected = kept.select(
        F.least("u", "v").alias("a"),
        F.greatest("u", "v").alias("b"),
        F.col("pick").cast("int"),
        F.col("first").cast("int"),
    )
    votes = undirected.groupBy("a", "b").agg(
        F.count("*").alias("sides"), F.max("pick").alias("pick"), F.max("first").alias("first")
    )
    kept_both = votes.where((F.col("sides") == 2) & (F.col("pick") == 1))
    return kept_both.select("a", "b", (F.col("first") == 1).alias("first"))


def _materialize(df: DataFrame) -> DataFrame:
    """Compute *df* now and cut its lineage (the iterations would grow it without end)."""
    return df.localCheckpoint(eager=True)


def components(edges: DataFrame) -> DataFrame:
    """Connected components of an undirected graph, computed in Spark.

    The large-star/small-star iteration (Kiveris et al., "Connected Components in MapReduce
    and Beyond", 2014) on DataFrames: each round points every node at the smallest node it can
    see, until every edge points from a node to the smallest node of its component.

    Args:
        edges: ``(a, b)`` long columns, one row per edge (either direction; self loops and
            repeats are fine).

    Returns:
        ``(node, comp)`` for every node of *edges*, *comp* the smallest node of its component.
    """
    sql = _pyspark()
    F = sql.functions
    e = (
        edges.select(F.greatest("a", "b").alias("x"), F.least("a", "b").alias("y"))
        .where(F.col("x") != F.col("y"))
        .distinct()
    )
    e = _materialize(e)
    while not e.isEmpty():
        # Large star: every node's larger neighbours point at the node's smallest neighbour.
        sym = e.select(F.col("x").alias("u"), F.col("y").alias("v")).unionByName(
            e.select(F.col("y").alias("u"), F.col("x").alias("v"))
        )
        low = sym.groupBy("u").agg(F.least(F.min("v"), F.col("u")).alias("m"))
        e = (
            sym.where(F.col("v") > F.col("u"))
            .join(low, "u")
            .select(F.col("v").alias("x"), F.col("m").alias("y"))
            .distinct()
        )
        # Small star: a node and its smaller neighbours all point at the smallest of them.
        low = e.groupBy("x").agg(F.min("y").alias("m"))
        joined = e.join(low, "x")
        e = (
            joined.select(F.col("y").alias("x"), F.col("m").alias("y"))
            .where(F.col("x") != F.col("y"))
            .unionByName(joined.select("x", F.col("m").alias("y")))
            .distinct()
        )
        e = _materialize(e)
        # Done when the edges form stars: each node points at one node that points nowhere.
        roots = e.select(F.col("y").alias("x")).distinct()
        forked = e.groupBy("x").count().where(F.col("count") > 1).select("x")
        if forked.unionByName(e.join(roots, "x").select("x")).isEmpty():
            break
    roots = e.select(F.col("y").alias("node"), F.col("y").alias("comp")).distinct()
    return e.select(F.col("x").alias("node"), F.col("y").alias("comp")).unionByName(roots)


def _group_sketch_rows(
    cap: int,
) -> Callable[[Iterable[Any]], Iterator[tuple[int, tuple[Any, int]]]]:
    """A partition function: rows ``(comp, sketch, limit)`` to ``(comp, (values, limit))``,
    each sketch cut as a store cuts a new group's (:func:`combine_sketch`), to be combined."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[int, tuple[Any, int]]]:
        for comp, sketch, limit in rows:
            yield comp, combine_sketch((), NO_LIMIT, sketch or (), limit, cap)

    return run


def _group_sketch_merge(cap: int) -> Callable[[tuple[Any, int], tuple[Any, int]], tuple[Any, int]]:
    """Two parts of a group's sketch as one, through :func:`combine_sketch`, as a store extends
    a group's."""

    def merge(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
        return combine_sketch(a[0], a[1], b[0], b[1], cap)

    return merge


def _kin_batches(policy: MatchPolicy, common: Any) -> Callable[[Iterable[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function: ``(a, b, sa, la, sb, lb)``, two groups and their sketches,
    to the ``(a, b)`` that are alike enough to merge: the online merge guard
    (:func:`~nshash.methods.nshash.assign.sketch_kinship` at least ``merge_guard``, the
    common hashes left out). *common*: a broadcast of the common hashes (or a list)."""

    def run(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from .methods.nshash.assign import sketch_kinship

        known = set(getattr(common, "value", common))

        def live(hs: Iterable[int]) -> set[int]:
            return {h for h in hs if h not in known}

        for batch in batches:
            a_s, b_s = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            sa, la = batch.column(2).to_pylist(), batch.column(3).to_pylist()
            sb, lb = batch.column(4).to_pylist(), batch.column(5).to_pylist()
            out_a: list[int] = []
            out_b: list[int] = []
            for i, (a, b) in enumerate(zip(a_s, b_s, strict=True)):
                kin = sketch_kinship(sa[i] or (), la[i], sb[i] or (), lb[i], live)
                if kin >= policy.merge_guard:
                    out_a.append(a)
                    out_b.append(b)
            yield pa.RecordBatch.from_arrays(
                [pa.array(out_a, pa.int64()), pa.array(out_b, pa.int64())], names=["a", "b"]
            )

    return run


def _grouped(
    edges: DataFrame, sketches: DataFrame, policy: MatchPolicy, common: Sequence[int] = ()
) -> DataFrame:
    """The groups of the kept *edges* ``(a, b, first)`` (:func:`_guarded`), as ``(node,
    comp)`` (:func:`components`), merged as the online path merges groups.

    The online path places a document in its best group and merges another group into it
    only when the two groups are alike as a whole (``merge_guard`` of the smaller group's
    sketch, :func:`~nshash.methods.nshash.assign.kinship`), not merely the document and each
    of them. So the edges that are a node's first choice make the groups, and an edge that is
    no node's first choice (a merge) joins two of them only when their sketches (the nodes'
    sketches combined as a store combines them, :func:`combine_sketch`, and *common* left
    out) pass that guard. A short page of one story that shares a series' template with a
    short page of another matches it strongly, and each page's story agrees with it, but the
    two stories, each the sum of its pages, share only the template: they stay apart.

    *sketches* is ``(node, sketch, limit)`` for every node.
    """
    sql = _pyspark()
    F, T = sql.functions, sql.types
    spark = edges.sparkSession
    edges = _materialize(edges)
    firsts = edges.where("first").select("a", "b")
    made = _materialize(components(firsts))
    comp_of = made.select(F.col("node").alias("n"), F.col("comp").alias("c"))
    # Each merge as the two groups it joins (a node without a first choice is its own).
    merges = edges.where(~F.col("first")).select("a", "b")
    merges = merges.join(comp_of.withColumnRenamed("n", "a"), "a", "left").select(
        F.coalesce("c", "a").alias("ca"), "b"
    )
    merges = merges.join(comp_of.withColumnRenamed("n", "b"), "b", "left").select(
        "ca", F.coalesce("c", "b").alias("cb")
    )
    merges = merges.select(F.least("ca", "cb").alias("a"), F.greatest("ca", "cb").alias("b")).where(
        F.col("a") != F.col("b")
    )
    merges = _materialize(merges.distinct())
    if merges.isEmpty():
        return made
    # The groups a merge would join, each with its nodes' sketches combined.
    ends = merges.select(F.col("a").alias("c")).unionByName(merges.select(F.col("b").alias("c")))
    ends = ends.distinct()
    members = ends.join(comp_of, "c", "left").select("c", F.coalesce("n", "c").alias("node"))
    members = members.unionByName(ends.select("c", F.col("c").alias("node"))).distinct()
    rows = members.join(sketches.select("node", "sketch", "limit"), "node")
    cap = policy.sketch_cap
    combined = (
        rows.select("c", "sketch", "limit")
        .rdd.mapPartitions(_group_sketch_rows(cap))
        .reduceByKey(_group_sketch_merge(cap))
        .map(lambda kv: (kv[0], sorted(kv[1][0]), kv[1][1]))
    )
    longs = T.ArrayType(T.LongType())
    schema = T.StructType(
        [
            T.StructField("c", T.LongType()),
            T.StructField("sketch", longs),
            T.StructField("limit", T.LongType()),
        ]
    )
    group = spark.createDataFrame(combined, schema, verifySchema=False)
    joined = _with_sides(merges, group, "c").select("a", "b", "sa", "la", "sb", "lb")
    shared: Any = spark.sparkContext.broadcast(sorted(common)) if common else []
    kin = T.StructType([T.StructField("a", T.LongType()), T.StructField("b", T.LongType())])
    alike = joined.mapInArrow(_kin_batches(policy, shared), kin)
    return components(firsts.unionByName(alike))


def _tail_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """A ``mapInArrow`` function: ``(node, sketch, limit, places)`` batches to ``(node, h)``
    batches, a row for each value of a node's tail
    (:func:`~nshash.methods.nshash.assign.tail_values`: its last values in page order, which
    the online placement votes for the group the page joins; here no hash is common yet)."""
    import pyarrow as pa

    for batch in batches:
        nodes: list[int] = []
        hashes: list[int] = []
        columns = [batch.column(i).to_pylist() for i in range(4)]
        for node, sketch, limit, places in zip(*columns, strict=True):
            if sketch is None or not places:
                continue
            tail = tail_values(sketch, places, limit, NO_HASHES, NO_HASHES)
            nodes += [node] * len(tail)
            hashes += tail
        yield pa.RecordBatch.from_arrays(
            [pa.array(nodes, pa.int64()), pa.array(hashes, pa.int64())], names=["node", "h"]
        )


def _tails(nodes: DataFrame) -> DataFrame:
    """``(node, h)``: each node's tail values (:func:`_tail_batches`)."""
    return nodes.select("node", "sketch", "limit", "places").mapInArrow(
        _tail_batches, "node long, h long"
    )


def _common(votes: DataFrame, comps: DataFrame, count: int, tails: DataFrame) -> DataFrame:
    """Hashes (column ``h``) that refused pairs kept apart, or page ends carried, across
    *count* components.

    *votes* is ``(node, h)`` (:attr:`_Verdicts.votes`): a node of a refused pair and a hash
    the pair shared; *tails* is ``(node, h)`` too (:func:`_tails`): a node and a value of its
    tail, which the online placement votes for the group the page joins. Each node votes for
    its first-pass component (itself when it has none), so the work is one join of the votes,
    which :func:`_verify_batches` wrote once per node and hash: it grows with the nodes, not
    with the refused pairs.
    """
    sql = _pyspark()
    F = sql.functions
    votes = votes.unionByName(tails)
    tagged = votes.join(comps, "node", "left").select("h", F.coalesce("comp", "node").alias("c"))
    counted = tagged.distinct().groupBy("h").count()
    return counted.where(F.col("count") >= count).select("h")


class _Clock:
    """Seconds per stage, when asked for."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def __call__(self, stage: str, df: DataFrame, keep: bool = True) -> DataFrame:
        """*df* computed now when it is used again (*keep*) or stages are timed."""
        if keep or self.timings is not None:
            df = _materialize(df)
            self.tick(stage)
        return df

    def tick(self, stage: str) -> None:
        """Charge the time since the last stage to *stage*."""
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + now - self.last
        self.last = now


# -- the session, and what the workers need --------------------------------------------------

#: Documents per shuffle partition: a small input runs in one partition (one task per stage),
#: a large one in as many as its size asks for (see :func:`partitions_for`).
DOCS_PER_PARTITION = 25_000

#: The modules the workers import (nshash and what its Arrow stages need).
WORKER_MODULES = ("nshash", "pyarrow", "pandas")

#: The one line said when the workers cannot import nshash.
WORKERS_HINT = (
    "the Spark workers cannot import nshash: install nshash on every worker, or point"
    " PYSPARK_PYTHON (spark.pyspark.python) at a Python that has it"
)


#: Inputs up to this many bytes are small: ``nshash dedup --engine spark`` starts its
#: session with ``small=True`` (see :func:`session`).
SMALL_INPUT = 16 << 20

#: The local driver JVM's options for a small input: the quick (C1) compiler only and the
#: serial collector. On 30 documents they halve the CPU of the whole run (most of it was
#: the optimizing compiler's, at work on Spark's planner for a job of seconds).
SMALL_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: Spark SQL settings of a session for a small input: no adaptive execution (it runs every
#: shuffle of a query as a job of its own, planned again, which pays only on large
#: shuffles) and no generated code (compiling each query's Java code costs a cold driver
#: more than interpreting a few thousand rows). On 30 documents: 17 jobs instead of 53, and
#: about 5 s less CPU.
SMALL_SQL = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

#: The environment that decides the driver JVM's class path and runtime: an archive of its
#: classes (see :func:`_class_archive`) is kept per value of these.
_ARCHIVE_ENV = (
    "JAVA_HOME",
    "SPARK_HOME",
    "SPARK_CONF_DIR",
    "SPARK_DIST_CLASSPATH",
    "HADOOP_CONF_DIR",
    "YARN_CONF_DIR",
    "SPARK_SUBMIT_OPTS",
)

#: An archive being written (see :func:`_class_archive`) that no run finished within this
#: many seconds is left over from a killed run, and removed.
_ARCHIVE_STALE = 3600


def _cache_dir() -> str | None:
    """nshash's folder in the user's cache (``$XDG_CACHE_HOME/nshash``, else
    ``~/.cache/nshash``), made if need be; None when there is none to write."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "nshash")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _archive_key(java_options: str, conf: dict[str, str]) -> str:
    """What names the class archive of a driver JVM: its Java and its options, Spark's jars
    (names, sizes, times) and what else sets its class path, as far as this process can tell
    them (the JVM checks the archive against its own runtime and class path too)."""
    import hashlib

    import pyspark

    java = os.path.realpath(shutil.which("java") or "java")
    home = os.path.dirname(pyspark.__file__)
    jars = os.path.join(home, "jars")
    parts = [pyspark.__version__, os.path.realpath(home), java, java_options]
    parts += [f"{k}={os.environ.get(k, '')}" for k in _ARCHIVE_ENV]
    parts += [f"{k}={v}" for k, v in sorted(conf.items()) if "classpath" in k.lower()]
    files = sorted(os.path.join(jars, n) for n in os.listdir(jars)) if os.path.isdir(jars) else []
    for path in [java, *files]:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        parts.append(f"{path} {stat.st_size} {stat.st_mtime_ns}")
    return hashlib.sha256("\0".join(map(str, parts)).encode("utf-8")).hexdigest()[:16]


#: The JVM's messages about class archives, off (a missing or refused archive only costs
#: the speed-up; Spark's output stays what it was).
_QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"

#: The first bytes of a whole dynamic class archive (JDK 13 and later): the JVM writes them
#: last, after the rest of the file, so an archive cut short by a killed JVM lacks them.
_ARCHIVE_MAGIC = bytes.fromhex("a8ab0bf0")


def _alive(pid: int) -> bool:
    """Whether process *pid* runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _class_archive(java_options: str, conf: dict[str, str]) -> tuple[str, str]:
    """The options that give a small input's local driver JVM a class-data-sharing archive
    of Spark's classes (JDK 13 or newer), which saves about 5 s of a short job's start, and
    the file to write the JVM's process id to when this run writes the archive (else "").

    The archive is a file in nshash's cache folder (:func:`_cache_dir`), one per Java, Spark
    and class path (:func:`_archive_key`), named with its size. When it is there, whole, the
    JVM maps it (``-XX:SharedArchiveFile``). When it is not, this run's JVM writes it as it
    exits (``-XX:ArchiveClassesAtExit``, to a file of its own, after the command is done), and
    a later run names it once that JVM has exited and the file is whole (it starts with
    :data:`_ARCHIVE_MAGIC`): a run never maps a partial archive (a cut one can crash the JVM),
    and an archive of another size than its name says is removed; so is one of a run whose
    job failed (:func:`spoil_class_archive`: it may have stopped before most of Spark's
    classes were loaded, and would be kept in place of a whole one). While a JVM writes one,
    the runs go without. The JVM checks an archive against its own runtime and class path and
    starts without it when they differ, so a stale one costs only the speed-up. Nothing
    without a cache folder to write.
    """
    folder = _cache_dir()
    if folder is None:
        return "", ""
    stem = os.path.join(folder, f"spark-{_archive_key(java_options, conf)}")
    if _splits(stem):
        return "", ""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return "", ""
    base = os.path.basename(stem)
    now = time.time()
    busy = False
    for name in names:
        path = os.path.join(folder, name)
        try:
            if name.startswith(base + "-") and name.endswith(".jsa"):
                if str(os.path.getsize(path)) == name[len(base) + 1 : -len(".jsa")]:
                    return f"-XX:SharedArchiveFile={path} {_QUIET_CDS}", ""
                os.remove(path)  # not the size it was written with
            elif name.startswith(base + ".") and name.endswith(".tmp.pid"):
                with open(path, encoding="ascii") as f:
                    words = f.read().split()
                writer = int(words[0]) if words else 0
                if writer and _alive(writer):  # its JVM runs, or writes the archive
                    busy = True
                    continue
                written = path.removesuffix(".pid")
                whole = False
                if os.path.exists(written) and _SPOILED not in words:
                    with open(written, "rb") as f:
                        whole = f.read(len(_ARCHIVE_MAGIC)) == _ARCHIVE_MAGIC
                if whole:
                    for other in names:  # one archive is kept: this Java's and Spark's
                        if other.startswith("spark-") and other.endswith(".jsa"):
                            os.remove(os.path.join(folder, other))
                    kept = f"{stem}-{os.path.getsize(written)}.jsa"
                    os.replace(written, kept)
                    os.remove(path)
                    return f"-XX:SharedArchiveFile={kept} {_QUIET_CDS}", ""
                if os.path.exists(written):
                    os.remove(written)  # cut short (its JVM killed as it wrote), or spoiled
                os.remove(path)
        except (OSError, ValueError):
            pass
        try:  # left over from runs that were killed
            if name.endswith((".tmp", ".pid")) and now - os.path.getmtime(path) > _ARCHIVE_STALE:
                os.remove(path)
        except OSError:
            pass
    if busy:
        return "", ""
    writing = f"{stem}.{os.getpid()}.tmp"
    return f"-XX:ArchiveClassesAtExit={writing} {_QUIET_CDS}", writing + ".pid"


#: The word a run adds to its archive's process-id file when its job failed.
_SPOILED = "spoiled"

#: The process-id file of the class archive this process's JVM writes as it exits ("" when
#: it writes none): see :func:`spoil_class_archive`.
_archive_writer = ""


def _claim_archive(writer: str, pid: int) -> None:
    """Write the process id of the JVM that writes a class archive to its *writer* file,
    which this process then names to :func:`spoil_class_archive`."""
    global _archive_writer
    try:
        with open(writer, "w", encoding="ascii") as f:
            f.write(str(pid))
    except OSError:
        return
    _archive_writer = writer


def _splits(path: str) -> bool:
    """Whether Spark would split *path*, given in a JVM option, into more than one option
    (it splits them on blanks and reads quotes)."""
    return any(c.isspace() or c in "\"'" for c in path)


def spoil_class_archive() -> None:
    """Say that this process's Spark job failed: the class archive its JVM writes as it
    exits (see :func:`session`'s *small*) is then removed, not kept, by the next run. A job
    that stopped early loaded only some of Spark's classes, and its archive would take the
    place of a whole one for good. Nothing when this process writes no archive."""
    global _archive_writer
    if _archive_writer:
        try:
            with open(_archive_writer, "a", encoding="ascii") as f:
                f.write(f" {_SPOILED}")
        except OSError:
            pass
        _archive_writer = ""


def failure_reason(exc: BaseException) -> str:
    """Why a Spark call failed, in one line: the root cause of a Java exception (the class
    and message of the error that started it, say ``java.io.EOFException: Unexpected end of
    input stream`` for a cut ``.gz`` file) rather than Py4J's "An error occurred while
    calling o68.localCheckpoint"; else the exception's first line. Call it while the session
    runs (the cause is read from its JVM)."""
    root = getattr(exc, "java_exception", None)
    if root is not None:
        try:
            for _ in range(32):  # a cause chain is short; a cycle is not followed for ever
                cause = root.getCause()
                if cause is None:
                    break
                root = cause
            lines = str(root.toString()).strip().splitlines()
            if lines:
                return lines[0]
        except Exception:  # the JVM is gone: say what Python has
            pass
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def check_outputs(output: str, export_groups: str | None = None) -> None:
    """Refuse an *output* (or *export_groups*) file that exists, before any work is done.

    Raises:
        ConfigError: one of them exists.
    """
    if os.path.exists(output):
        raise ConfigError(f"{output!r} exists; remove it or choose another -o")
    if export_groups is not None and os.path.exists(export_groups):
        raise ConfigError(f"{export_groups!r} exists; remove it or choose another export file")


def partitions_for(documents: int, parallelism: int) -> int:
    """Shuffle partitions for *documents*: one per :data:`DOCS_PER_PARTITION`, and at least
    one per core (*parallelism*) once there are a thousand documents a core to share."""
    by_size = -(-documents // DOCS_PER_PARTITION)
    return max(1, by_size, min(parallelism, documents // 1000))


def session(
    master: str | None = None,
    *,
    cores: int = 2,
    app: str = "nshash",
    small: bool = False,
    **conf: str,
) -> SparkSession:
    """A Spark session for nshash jobs, started so that its workers run this Python.

    In local mode (*master* ``local[...]``, or none set anywhere: then ``local[cores]``) the
    workers are started with the driver's own interpreter (:data:`sys.executable`) unless
    ``PYSPARK_PYTHON`` is set, so a virtual environment works without activating it. On a
    cluster the workers' Python is the cluster's to choose; when it cannot import nshash,
    :func:`dedup` says so in one line. Adaptive execution is on; the UI and the console
    progress bar are off unless *conf* turns them on. A local driver binds to the loopback
    address (``SPARK_LOCAL_IP=127.0.0.1`` unless set) and logs errors only, without Spark's
    start-up notices (nshash's ``spark-log4j2.properties``), unless Spark has a log4j2
    configuration of yours or *conf* or ``spark-submit`` sets
    ``spark.driver.extraJavaOptions``; what stays is the JVM's own line about its incubator
    modules.

    With *small* (a short job on a small input: ``nshash dedup --engine spark`` on a file
    under :data:`SMALL_INPUT` bytes) a local driver's JVM compiles with its quick compiler
    only and collects with the serial collector (:data:`SMALL_JVM`): a job of a few seconds
    spends most of its CPU compiling Spark's own code with the optimizing compiler, which
    pays back only on long jobs. It applies when this call starts the JVM, and not when
    *conf* or ``spark-submit`` sets ``spark.driver.extraJavaOptions``.

    Args:
        master: the Spark master; default: what ``spark-submit`` or ``spark.master`` set,
            else ``local[cores]``.
        cores: the cores of a local master.
        app: the application name.
        small: tune a local driver's JVM for a short job (see above).
        **conf: more Spark settings, with dots as underscores or quoted
            (``**{"spark.driver.memory": "6g"}``).

    Raises:
        ConfigError: pyspark is missing, or Spark did not start (no Java, say).
    """
    sql = _pyspark()
    from pyspark import SparkConf

    builder = sql.SparkSession.builder.appName(app)
    if master is None and not SparkConf().contains("spark.master"):
        master = f"local[{cores}]"
    if master is not None:
        builder = builder.master(master)
    local = (master or SparkConf().get("spark.master", "")).startswith("local")
    if local and not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
    }
    archive = writer = ""
    if small and local:
        settings.update(SMALL_SQL)
    own = "spark.driver.extraJavaOptions" in conf or SparkConf().contains(
        "spark.driver.extraJavaOptions"
    )
    if local and not own:
        options = [_quiet_logging()]
        if small:
            if sql.SparkSession.getActiveSession() is None and not _jvm_running():
                archive, writer = _class_archive(SMALL_JVM, conf)
            options += [SMALL_JVM, archive]
        if any(options):
            settings["spark.driver.extraJavaOptions"] = " ".join(o for o in options if o)
        if not _jvm_running():
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver on loopback
    settings.update(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if not _jvm_running() and "PYSPARK_GATEWAY_PORT" not in os.environ:
        missing = _no_java()  # pyspark is about to start a JVM: say so before it fails
        if missing:
            raise ConfigError(f"Spark needs a Java runtime (17 or newer): {missing}")
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Spark would not start (a Java too old, say)
        why = str(exc).strip().splitlines()[0]
        if "JAVA_GATEWAY_EXITED" in why:
            why += " (Spark needs Java 17 or newer: see JAVA_HOME)"
        raise ConfigError(f"Spark did not start: {why}") from None
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if writer and proc is not None:  # this JVM writes the class archive as it exits
        _claim_archive(writer, proc.pid)  # spark-submit runs the JVM in its own process
    spark.sparkContext.setLogLevel("ERROR")
    return cast("SparkSession", spark)


def _no_java() -> str:
    """Why no Java runtime can be started here ("" when one can): a ``JAVA_HOME`` without
    ``bin/java``, or none set and no ``java`` on the PATH (what Spark's launcher runs)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.access(os.path.join(home, "bin", "java"), os.X_OK):
            return f"JAVA_HOME is {home!r}, which has no bin/java"
        return ""
    if shutil.which("java") is None:
        return "JAVA_HOME is not set and there is no java on the PATH"
    return ""


def _quiet_logging() -> str:
    """The JVM option that points a local driver's logging at nshash's
    ``spark-log4j2.properties`` (errors only, and none of the start-up notices), or "" when
    Spark has a log4j2 configuration of the user's (in ``SPARK_CONF_DIR`` or
    ``$SPARK_HOME/conf``), or the file is not a plain file whose path has no blank (Spark
    splits the options on blanks)."""
    home = os.environ.get("SPARK_HOME")
    folder = os.environ.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else "")
    if folder and any(
        os.path.exists(os.path.join(folder, n)) for n in ("log4j2.properties", "log4j2.xml")
    ):
        return ""
    path = str(files(__package__) / "spark-log4j2.properties")
    if not os.path.isfile(path) or _splits(path):
        return ""
    return f"-Dlog4j2.configurationFile={path}"


def _jvm_running() -> bool:
    """Whether this process has a Spark JVM already (its options are then set)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None


@contextmanager
def _worker_errors() -> Iterator[None]:
    """Turn a task that died because its Python has no nshash into one clear ConfigError."""
    try:
        yield
    except NSHashError:
        raise
    except Exception as exc:
        if any(f"No module named '{name}'" in str(exc) for name in WORKER_MODULES):
            raise ConfigError(WORKERS_HINT) from None
        raise


@contextmanager
def _shuffle_partitions(spark: SparkSession, count: int) -> Iterator[None]:
    """Run with ``spark.sql.shuffle.partitions`` at *count*, then put it back."""
    key = "spark.sql.shuffle.partitions"
    before = spark.conf.get(key) or "200"
    spark.conf.set(key, str(count))
    try:
        yield
    finally:
        spark.conf.set(key, before)


# -- the job -----------------------------------------------------------------------------------


def _numbering(reps: DataFrame, key_type: Any, floor: int) -> DataFrame:
    """``(rep, exact, node)``: each distinct text of *reps* numbered from *floor* in
    (key, text) order, so keys that repeat (stored documents, tied order values) never give
    two texts one node."""
    T = _pyspark().types
    ranked = (
        reps.select("rep", "exact")
        .orderBy("rep", "exact")
        .rdd.map(lambda r: (r[0], r[1]))
        .zipWithIndex()
        .map(lambda ri: (ri[0][0], ri[0][1], floor + ri[1]))
    )
    schema = T.StructType(
        [
            T.StructField("rep", key_type),
            T.StructField("exact", T.LongType()),
            T.StructField("node", T.LongType()),
        ]
    )
    return reps.sparkSession.createDataFrame(ranked, schema)


def _group(
    prints: DataFrame,
    key_type: Any,
    policy: MatchPolicy,
    max_posting: int,
    hubs: int,
    clock: _Clock,
    stats: dict[str, int] | None,
    unique: bool = False,
    extra: dict[str, Any] | None = None,
) -> DataFrame:
    """Steps 2 to 7 over fingerprints ``(key, ok, exact, anchors, sketch, limit, places)``.

    *unique*: the keys are distinct longs (file positions), so they serve as node numbers.
    *extra*, when given, gets ``common``: the common hashes (a DataFrame of ``h``).

    Returns ``(key, rep)`` for every row with ``ok``: *rep* is the smallest key of its group.
    """
    sql = _pyspark()
    F = sql.functions
    spark = prints.sparkSession

    # 2. One node per distinct text, numbered in key order (so node order is key order).
    reps = (
        prints.where("ok")
        .groupBy("exact")
        .agg(
            F.min("key").alias("rep"),
            F.first("anchors").alias("anchors"),
            F.first("sketch").alias("sketch"),
            F.first("limit").alias("limit"),
            F.first("places").alias("places"),
            F.first("long").alias("long"),
        )
    )
    if unique:  # the keys are distinct numbers already: each names its text's node
        nodes = clock("exact", reps.withColumn("node", F.col("rep").cast("long")))
        numbering = nodes.select("rep", "exact", "node")
    else:  # keys may repeat (stored documents, tied order values): number (key, text)
        numbering = _numbering(reps, key_type, 0)
        nodes = clock("exact", reps.join(numbering.drop("rep"), "exact"))

    # 3. First pass: the first n anchor candidates (2n of a long page), raw sketches.
    want = _wanted(policy)
    candidates = nodes.select("node", want.alias("want"), F.posexplode("anchors").alias("pos", "h"))
    first = candidates.where(F.col("pos") < F.col("want")).select("node", "h")
    sketches = nodes.select("node", "sketch", "limit", "places")
    pairs = _pairs(first, max_posting, hubs, VOTERS)
    verdicts = _Verdicts(clock("pass1 verify", _verify(pairs, sketches, policy)))

    # 4. Boilerplate: votes of refused pairs and of page ends across first-pass components.
    edges1 = _guarded(spark, verdicts.accepted, policy)
    comps = clock("pass1 components", _grouped(edges1, sketches, policy), False)
    common = clock("common", _common(verdicts.votes, comps, policy.votes, _tails(nodes)))
    if extra is not None:
        extra["common"] = common
    known = [int(r[0]) for r in common.collect()]

    # 5. Second pass without the common hashes.
    live = candidates.join(F.broadcast(common), "h", "left_anti")
    order = sql.Window.partitionBy("node").orderBy("pos")
    anchors = live.withColumn("r", F.row_number().over(order)).where(F.col("r") <= F.col("want"))
    verdicts2 = _Verdicts(
        clock(
            "pass2 verify",
            _verify(
                _pairs(anchors.select("node", "h"), max_posting, hubs), sketches, policy, known
            ),
        )
    )

    # 6. The merge guard, then 7. components.
    edges = clock("guard", _guarded(spark, verdicts2.accepted, policy), stats is not None)
    groups = clock("components", _grouped(edges, sketches, policy, known), False)

    if stats is not None:
        stats.update(
            nodes=nodes.count(),
            pairs_pass1=verdicts.pairs(),
            common=len(known),
            pairs_pass2=verdicts2.pairs(),
            edges=edges.count(),
        )

    named = nodes.select("node", "exact").join(groups, "node", "left")
    named = named.select("exact", F.coalesce("comp", "node").alias("comp"))
    names = numbering.select(F.col("node").alias("comp"), F.col("rep").alias("group_rep"))
    by_text = named.join(names, "comp").select("exact", "group_rep")
    found = prints.where("ok").join(by_text, "exact")
    return found.groupBy("key").agg(F.min("group_rep").alias("rep"))


def _one_partition(spark: SparkSession) -> bool:
    """Whether the job's shuffles run in one partition (a small input, see
    :func:`partitions_for`)."""
    return spark.conf.get("spark.sql.shuffle.partitions") == "1"


def _numbered(answers: DataFrame, key_type: Any, first_id: int) -> DataFrame:
    """``(key, similar_id, duplicate)`` from ``(key, rep)``: groups numbered from *first_id*
    in the order of their first keys, as the local engine numbers them in input order."""
    sql = _pyspark()
    F, T = sql.functions, sql.types
    spark = answers.sparkSession
    distinct = answers.select("rep").distinct()
    if _one_partition(spark):
        # All in one task anyway: a window numbers the groups in the JVM, without the job
        # zipWithIndex runs to count its partitions and without a Python stage.
        rank = F.row_number().over(sql.Window.orderBy("rep")) + (first_id - 1)
        ids = distinct.select("rep", rank.cast("long").alias("similar_id"))
    else:
        reps = distinct.orderBy("rep").rdd.map(lambda r: r[0])
        ids = spark.createDataFrame(
            reps.zipWithIndex().map(lambda ri: (ri[0], first_id + ri[1])),
            T.StructType(
                [T.StructField("rep", key_type), T.StructField("similar_id", T.LongType())]
            ),
        )
    return answers.join(ids, "rep").select(
        "key", "similar_id", (F.col("key") != F.col("rep")).alias("duplicate")
    )


def _check(max_posting: int, hubs: int, first_id: int) -> None:
    for name, value in (("max_posting", max_posting), ("hubs", hubs), ("first_id", first_id)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")


def dedup(
    df: DataFrame,
    text_col: str = "text",
    id_col: str = "id",
    *,
    order_col: str | None = None,
    first_id: int = 1,
    against: DataFrame | str | Sequence[DataFrame | str] | None = None,
    max_posting: int = MAX_POSTING,
    hubs: int = HUBS,
    timings: dict[str, float] | None = None,
    stats: dict[str, int] | None = None,
    **options: Any,
) -> DataFrame:
    """Group the documents of *df* by story, as a Spark job.

    Args:
        df: the documents; ids should be unique (rows sharing an id get one answer).
        text_col: the column with the article text.
        id_col: the column with the document id (any type Spark can order).
        order_col: the column that orders the documents (an arrival time, a file position):
            groups are numbered in the order of their first documents, and the first document
            of a group is the one that is not a ``duplicate``, as ``nshash dedup`` numbers them
            in input order. Default: the id column.
        first_id: the number of the first group (the next free id of a store, to hand the
            groups on).
        against: stored groups to group *df* against: a previous result (a DataFrame with
            the text column and ``similar_id``, or the path of a JSONL or Parquet output of
            ``nshash dedup``), or the path of an export of a store's groups
            (``nshash groups --export``, :mod:`nshash.export`). Each stored group is judged
            as one node, by its anchors and its sketch, as a store judges a new document; the
            stored documents are not grouped again and are not returned. A new document that
            belongs to a stored group gets its id (the smallest one, when it joins several);
            the new groups are numbered after the largest stored id (an export's last id).
            Several of them (a list) are one set of groups: yesterday's export and today's
            output, say. The stored side is read with the same options as *df* (give the
            ones the store or the previous run used).
        max_posting: an anchor held by up to this many documents pairs all of them; past
            that, each is paired with the ``hubs`` smallest.
        hubs: see *max_posting*.
        timings: if given, filled with the seconds each stage took (the stages are computed
            one after the other, so the figures add up to the run).
        stats: if given, filled with counts: documents, nodes, pairs, common hashes, edges
            (without *against*).
        **options: the :class:`~nshash.NSHash` options (``n``, ``min_length``, ``hashfunc``,
            ``shingle``, ``sketch_rate``, ``sketch_size``, ``theta``, ``min_overlap``,
            ``merge_guard``, ``votes``, ...), for the same keys and the same checks.

    Returns:
        *df* with two more columns, typed as the local engine's: ``similar_id`` (a long,
        ``first_id`` upwards; null for a text with no letters or digits, or not a string) and
        ``duplicate`` (false for the first document of each group, true for the others).

    Raises:
        ConfigError: pyspark is missing, a column is missing, an option is bad, or the
            workers cannot import nshash (the message says what to set).
        StateError: *against* cannot be used (a missing file, no ``similar_id``, a malformed
            export).
    """
    return _dedup(
        df,
        text_col,
        id_col,
        order_col=order_col,
        first_id=first_id,
        against=against,
        max_posting=max_posting,
        hubs=hubs,
        timings=timings,
        stats=stats,
        options=options,
    )


def _dedup(
    df: DataFrame,
    text_col: str,
    id_col: str,
    *,
    order_col: str | None,
    first_id: int,
    against: DataFrame | str | Sequence[DataFrame | str] | None,
    max_posting: int,
    hubs: int,
    timings: dict[str, float] | None,
    stats: dict[str, int] | None,
    options: dict[str, Any],
    extra: dict[str, Any] | None = None,
    unique: bool = False,
) -> DataFrame:
    """:func:`dedup`; *extra*: as for :func:`_group`, and it gets ``partitions``, the shuffle
    partitions the job ran with; *unique*: the ids are distinct longs (as for :func:`_group`)."""
    F = _pyspark().functions
    _check(max_posting, hubs, first_id)
    order_col = order_col or id_col
    for column in (text_col, id_col, order_col):
        if column not in df.columns:
            raise ConfigError(f"The DataFrame has no column {column!r}; it has {df.columns!r}")
    fingerprinter, policy, _ = _options(options)
    spark = df.sparkSession
    clock = _Clock(timings)
    # Rows sharing an id get one answer: the key of an id is its smallest order value.
    keyed = (
        df.groupBy(id_col).agg(F.min(order_col).alias("key"), F.first(text_col).alias("text"))
        if order_col != id_col
        else df.select(F.col(id_col).alias("key"), F.col(text_col).alias("text"))
    )
    key_type = keyed.schema["key"].dataType
    with _worker_errors():
        stored = None
        if against is not None:
            texts = tuple(dict.fromkeys((text_col, *Fields().text)))
            stored = _load_against(spark, against, texts, fingerprinter, policy, id_col)
            if extra is not None:
                extra["stored"] = stored
        prints = _prints(keyed, key_type, fingerprinter, clock)
        documents = prints.count()
        if stats is not None:
            stats["documents"] = documents
        count = partitions_for(documents, spark.sparkContext.defaultParallelism)
        if extra is not None:
            extra["partitions"] = count
        with _shuffle_partitions(spark, count):
            if stored is None:
                answers = _group(
                    prints, key_type, policy, max_posting, hubs, clock, stats, unique, extra
                )
                numbered = clock("number", _numbered(answers, key_type, first_id))
            else:
                if stored.narrow:
                    prints = clock("narrow", _narrowed(prints))
                answers = _group_against(
                    prints, key_type, stored, policy, max_posting, hubs, clock, extra
                )
                start = max(first_id, stored.floor)
                numbered = clock("number", _numbered_against(answers, key_type, start))
    if order_col != id_col:
        ids = keyed.select(F.col(id_col).alias("_nshash_id"), "key")
        numbered = ids.join(numbered, "key").drop("key")
    else:
        numbered = numbered.withColumnRenamed("key", "_nshash_id")
    out = df.join(numbered, df[id_col] == numbered["_nshash_id"], "left").drop("_nshash_id")
    return out


def _wanted(policy: MatchPolicy) -> Any:
    """How many anchor candidates a node takes (its first that are not common), as a column:
    ``n``, or twice ``n`` for a long page (:func:`~nshash.text.fingerprint.anchors_wanted`)."""
    F = _pyspark().functions
    return F.when(F.col("long"), 2 * policy.n).otherwise(policy.n)


def _prints(
    keyed: DataFrame, key_type: Any, fingerprinter: Fingerprinter, clock: _Clock
) -> DataFrame:
    """Step 1, on the executors: ``(key, text)`` to ``(key, ok, exact, anchors, sketch, limit,
    places)``."""
    sql = _pyspark()
    T = sql.types
    longs = T.ArrayType(T.LongType())
    schema = T.StructType(
        [
            T.StructField("key", key_type),
            T.StructField("ok", T.BooleanType()),
            T.StructField("exact", T.LongType()),
            T.StructField("anchors", longs),
            T.StructField("sketch", longs),
            T.StructField("limit", T.LongType()),
            T.StructField("places", T.BinaryType()),
            T.StructField("long", T.BooleanType()),
        ]
    )
    text = keyed.select("key", "text")
    return clock("fingerprint", text.mapInArrow(_fingerprint_batches(fingerprinter), schema))


# -- against stored groups ---------------------------------------------------------------------


class _Stored:
    """Stored groups a new batch is grouped against.

    Attributes:
        groups: ``(gid, anchors, sketch, limit, exacts)``: each stored group's id, the anchors
            of its documents, its sketch (cut as a store keeps it, :func:`combine_sketch`),
            its limit and the exact fingerprints of its texts (empty when unknown).
        floor: one past the largest id handed out: every gid is below it, and new groups are
            numbered from it.
        narrow: whether the sketches are narrow (new documents are narrowed to be compared).
        common: hashes known to be boilerplate (signed), or none.
    """

    def __init__(self, groups: DataFrame, last_id: int, narrow: bool, common: list[int]) -> None:
        self.groups = groups
        self.floor = last_id + 1
        self.narrow = narrow
        self.common = common


def _stored_rows(
    fingerprinter: Fingerprinter, cap: int, narrowed: bool
) -> Callable[[Iterable[Any]], Iterator[tuple[int, tuple[Any, ...]]]]:
    """A partition function: stored records ``(similar_id, text, id)`` to ``(similar_id,
    (sketch, limit, anchors, exacts, ids, size))``, each document's sketch (*narrowed*, to go
    with a store's narrow sketches) cut as a store cuts a new group's (:func:`combine_sketch`),
    its anchor candidates and exact fingerprint as sets, its id in a list, a size of 1."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[int, tuple[Any, ...]]]:
        prepare = fingerprinter.prepare
        for sid, text, doc_id in rows:
            try:
                doc = prepare(check_text(text))
            except NSHashError:
                continue
            if narrowed:
                doc = narrow(doc)
            values, limit = combine_sketch((), NO_LIMIT, doc.sketch, doc.limit, cap)
            anchors = {signed(h) for h in doc.sentences}
            ids = [] if doc_id is None else [str(doc_id)]
            yield sid, (values, limit, anchors, {signed(doc.exact)}, ids, 1)

    return run


def _stored_merge(cap: int) -> Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]:
    """Two documents' (or parts of a group's) sketches, anchors, exacts, ids and sizes as one
    group's: the sketch through :func:`combine_sketch`, as a store extends a group's."""

    def merge(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        values, limit = combine_sketch(a[0], a[1], b[0], b[1], cap)
        return values, limit, a[2] | b[2], a[3] | b[3], a[4] + b[4], a[5] + b[5]

    return merge


def _stored_row(kv: tuple[int, tuple[Any, ...]]) -> tuple[Any, ...]:
    """A merged group as a row of :func:`_groups_schema`."""
    gid, (values, limit, anchors, exacts, ids, size) = kv
    return gid, sorted(anchors), sorted(values), limit, sorted(exacts), sorted(ids), size


def _groups_schema() -> Any:
    T = _pyspark().types
    longs = T.ArrayType(T.LongType())
    return T.StructType(
        [
            T.StructField("gid", T.LongType()),
            T.StructField("anchors", longs),
            T.StructField("sketch", longs),
            T.StructField("limit", T.LongType()),
            T.StructField("exacts", longs),
            T.StructField("ids", T.ArrayType(T.StringType())),
            T.StructField("size", T.LongType()),
        ]
    )


def _stored_from_records(
    records: DataFrame,
    text_col: str,
    fingerprinter: Fingerprinter,
    policy: MatchPolicy,
    narrowed: bool = False,
    id_col: str | None = None,
) -> _Stored:
    """The groups of a previous result (records with *text_col* and ``similar_id``, and
    their ids in *id_col* when there is one): its texts fingerprinted once, each group's
    sketch, anchors, exacts, ids and size gathered."""
    F, T = _pyspark().functions, _pyspark().types
    kind = records.schema["similar_id"].dataType
    if not isinstance(kind, T.IntegralType | T.NullType):
        raise StateError(f"similar_id of the stored records is {kind.simpleString()}, not integers")
    cap = policy.sketch_cap
    sid = F.col("similar_id").cast("long")
    ids = F.col(id_col).cast("string") if id_col in records.columns else F.lit(None)
    rows = records.where(sid.isNotNull()).select(sid, F.col(text_col), ids).rdd
    merged = (
        rows.mapPartitions(_stored_rows(fingerprinter, cap, narrowed))
        .reduceByKey(_stored_merge(cap))
        .map(_stored_row)
    )
    groups = records.sparkSession.createDataFrame(merged, _groups_schema(), verifySchema=False)
    top = records.agg(F.max(sid)).first()
    return _Stored(groups, int(top[0] or 0) if top is not None else 0, narrowed, [])


def _record_lines(
    texts: tuple[str, ...], id_field: str
) -> Callable[[Iterable[Any]], Iterator[tuple[int, str, str | None]]]:
    """A partition function: JSONL lines of a previous output to ``(similar_id, text, id)``
    (records without an integer ``similar_id`` or a text are left out: they had no group)."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[int, str, str | None]]:
        for (line,) in rows:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            sid = record.get("similar_id")
            if not isinstance(sid, int) or isinstance(sid, bool):
                continue
            text = next((record[f] for f in texts if isinstance(record.get(f), str)), None)
            if text is not None:
                doc_id = record.get(id_field)
                yield sid, text, None if doc_id is None else str(doc_id)

    return run


def _parquet_schema(path: str) -> Any:
    """The Arrow schema of a Parquet file, or of the first part file of a folder."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(f"reading --against needs pyarrow: {install_hint('spark')}") from exc
    name = path
    if os.path.isdir(path):
        parts = _part_names(path, (".parquet",))
        if not parts:
            raise StateError(f"{path!r} holds no Parquet part files")
        name = parts[0]
    try:
        return pq.read_schema(name)
    except Exception as exc:  # not Parquet, or damaged
        raise StateError(f"{path!r} is not a readable Parquet file: {exc}") from None


def _export_of(path: str) -> Any:
    """The :class:`~nshash.export.ExportInfo` of *path* when it is an export, else None."""
    if not isinstance(path, str):
        return None
    if "://" not in path and not os.path.exists(path):
        raise StateError(f"No such file: {path!r} (the stored groups to group against)")
    if _format_of_state(path) != "parquet":
        return None
    schema = _parquet_schema(path)
    return read_export_info(schema.metadata, list(schema.names), path)


def _format_of_state(path: str) -> str:
    try:
        return _format_of(path)
    except ConfigError:
        raise StateError(
            f"Cannot tell what {path!r} is for --against: name a .jsonl[.gz] or .parquet output"
            " of nshash dedup, or a store's export (nshash groups --store URL --export"
            " FILE.parquet)"
        ) from None


def _load_against(
    spark: SparkSession,
    against: Any,
    texts: tuple[str, ...],
    fingerprinter: Fingerprinter,
    policy: MatchPolicy,
    id_field: str = "id",
) -> _Stored:
    """The stored groups *against* names (one source or several, see :func:`_load_one`),
    as one set of groups: a group found in several sources (an export, and a later output
    whose records joined its groups) is one, its sketches combined (:func:`combine_sketch`)
    and its anchors and exacts joined; the last id is the largest, the common hashes all of
    theirs. The sketches are narrow when an export's are (the outputs' texts are then
    narrowed to go with them)."""
    sources = (
        [against]
        if isinstance(against, str) or not isinstance(against, list | tuple)
        else list(against)
    )
    if not sources:
        raise StateError("against names no stored groups")
    infos = [_export_of(source) for source in sources]
    widths = {info.narrow for info in infos if info is not None}
    if len(widths) > 1:
        raise StateError(
            "the exports in against mix narrow and full sketches (stores of two kinds)"
        )
    narrowed = widths == {True}
    loaded = [
        _load_one(spark, source, info, texts, fingerprinter, policy, narrowed, id_field)
        for source, info in zip(sources, infos, strict=True)
    ]
    return _merged(loaded, policy)


def _merged(loaded: list[_Stored], policy: MatchPolicy) -> _Stored:
    """Several sets of stored groups as one (see :func:`_load_against`)."""
    if len(loaded) == 1:
        return loaded[0]
    cap = policy.sketch_cap
    rows = None
    for one in loaded:
        part = one.groups.rdd.map(
            lambda r: (
                r[0],
                (set(r[2] or ()), r[3], set(r[1] or ()), set(r[4] or ()), list(r[5] or ()), r[6]),
            )
        )
        rows = part if rows is None else rows.union(part)
    assert rows is not None
    merged = rows.reduceByKey(_stored_merge(cap)).map(_stored_row)
    spark = loaded[0].groups.sparkSession
    groups = spark.createDataFrame(merged, _groups_schema(), verifySchema=False)
    common = sorted({h for one in loaded for h in one.common})
    narrowed = loaded[0].narrow
    return _Stored(groups, max(one.floor for one in loaded) - 1, narrowed, common)


def _load_one(
    spark: SparkSession,
    against: DataFrame | str,
    info: Any,
    texts: tuple[str, ...],
    fingerprinter: Fingerprinter,
    policy: MatchPolicy,
    narrowed: bool,
    id_field: str = "id",
) -> _Stored:
    """The stored groups *against* names: a previous result (a DataFrame, or a JSONL or
    Parquet output of ``nshash dedup``), or an export of a store's groups (a Parquet file,
    :mod:`nshash.export`, whose :class:`~nshash.export.ExportInfo` is *info*). *texts*: the
    text columns to try, in order; *narrowed*: narrow the records' sketches; *id_field*: the
    records' id."""
    F, T = _pyspark().functions, _pyspark().types

    def from_records(records: DataFrame, name: str) -> _Stored:
        """The stored groups of a previous result's *records* (*name* says which)."""
        columns = records.columns
        if "similar_id" not in columns:
            raise StateError(
                f"{name} has no similar_id column (it has {columns!r}): give an output of"
                " nshash dedup or an export of a store's groups (nshash groups --export)"
            )
        text = next((c for c in texts if c in columns), None)
        if text is None:
            raise StateError(
                f"{name} has no {' or '.join(map(repr, texts))} column; it has {columns!r}"
            )
        return _stored_from_records(records, text, fingerprinter, policy, narrowed, id_field)

    if not isinstance(against, str):
        return from_records(against, "against")
    path = against
    if _format_of_state(path) == "jsonl":
        lines = spark.read.text(path)
        head = lines.where(F.trim("value") != "").first()
        try:
            record = json.loads(head[0]) if head is not None else {}
        except ValueError:
            record = None
        if not isinstance(record, dict) or "similar_id" not in record:
            raise StateError(
                f"{path!r} has no similar_id field: give an output of nshash dedup or an"
                " export of a store's groups (nshash groups --export)"
            )
        rows = lines.rdd.mapPartitions(_record_lines(texts, id_field))
        schema = "similar_id long, text string, id string"
        records = spark.createDataFrame(rows, schema, verifySchema=False)
        return _stored_from_records(records, "text", fingerprinter, policy, narrowed, "id")
    schema = _parquet_schema(path)
    if info is not None:
        longs = T.ArrayType(T.LongType())
        groups = spark.read.parquet(path).select(
            F.col("similar_id").cast("long").alias("gid"),
            F.col("anchors").cast(longs).alias("anchors"),
            F.col("sketch").cast(longs).alias("sketch"),
            F.col("limit").cast("long").alias("limit"),
            (
                F.col("exacts").cast(longs) if "exacts" in schema.names else F.array().cast(longs)
            ).alias("exacts"),
            F.col("ids").cast(T.ArrayType(T.StringType())).alias("ids"),
            F.col("size").cast("long").alias("size"),
        )
        top = groups.agg(F.max("gid")).first()
        if top is not None and top[0] is not None and top[0] > info.last_id:
            raise StateError(
                f"{path!r} is not a readable nshash groups export: group {top[0]} is past its"
                f" last_id {info.last_id}"
            )
        return _Stored(groups, info.last_id, info.narrow, info.common)
    return from_records(spark.read.parquet(path), repr(path))


def _narrowed(prints: DataFrame) -> DataFrame:
    """Fingerprints ``(key, ok, exact, anchors, sketch, limit, places, ...)`` with each
    sketch, limit and places narrowed (:func:`~nshash.text.fingerprint.narrow`), to be
    compared with a store's narrow sketches."""

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        for row in rows:
            if row[4] is None:
                yield tuple(row)
                continue
            doc = narrow(DocPrint((), tuple(row[4]), 0, row[5], bytes(row[6] or b"")))
            yield (*row[:4], list(doc.sketch), doc.limit, doc.places, *row[7:])

    spark = prints.sparkSession
    return spark.createDataFrame(prints.rdd.mapPartitions(run), prints.schema, verifySchema=False)


def _group_against(
    prints: DataFrame,
    key_type: Any,
    stored: _Stored,
    policy: MatchPolicy,
    max_posting: int,
    hubs: int,
    clock: _Clock,
    extra: dict[str, Any] | None = None,
) -> DataFrame:
    """Steps 2 to 7 for new documents ``(key, ok, exact, anchors, sketch, limit)`` against
    stored groups: each stored group is one node, with its anchors and its sketch (what a
    store judges a new document against), numbered by its id; the new texts are numbered after
    them. Pairs of two stored groups are never made (their grouping is stored), a stored group
    takes every document the judge and the document's own guard accept, and the common hashes
    are the stored ones and those the new batch's refused pairs vote for.

    Returns ``(key, gid, rep)`` for every row with ``ok``: *gid* the stored group it joins
    (null for none), *rep* the smallest key of its new group otherwise. *extra*: as for
    :func:`_group`.
    """
    sql = _pyspark()
    F = sql.functions
    spark = prints.sparkSession
    floor = stored.floor
    # Computed once (a previous output's texts are fingerprinted here), used by every pass.
    groups = stored.groups = clock("stored groups", stored.groups)

    # 2. A text identical to a stored one joins its group (the exact table's answer); the
    # other texts are one node each, numbered from the floor in key order.
    exacts = (
        groups.select("gid", F.explode("exacts").alias("exact"))
        .groupBy("exact")
        .agg(F.min("gid").alias("gid"))
    )
    reps = (
        prints.where("ok")
        .groupBy("exact")
        .agg(
            F.min("key").alias("rep"),
            F.first("anchors").alias("anchors"),
            F.first("sketch").alias("sketch"),
            F.first("limit").alias("limit"),
            F.first("places").alias("places"),
            F.first("long").alias("long"),
        )
        .join(exacts, "exact", "left")
    )
    reps = clock("exact", reps)
    direct = reps.where(F.col("gid").isNotNull()).select("exact", "gid")
    fresh = reps.where(F.col("gid").isNull()).drop("gid")
    numbering = _numbering(fresh, key_type, floor)
    nodes = clock("number nodes", fresh.join(numbering.drop("rep"), "exact"))
    # A stored group has no places: it is only ever the group side of a pair (below the floor).
    sketches = nodes.select("node", "sketch", "limit", "places").unionByName(
        groups.select(
            F.col("gid").alias("node"),
            "sketch",
            "limit",
            F.lit(None).cast("binary").alias("places"),
        )
    )
    known = spark.createDataFrame([(h,) for h in stored.common], "h long")

    def postings(common: DataFrame) -> DataFrame:
        """A new node's first n anchor candidates that are not common, and every anchor of a
        stored group that is not."""
        want = _wanted(policy)
        live = nodes.select(
            "node", want.alias("want"), F.posexplode("anchors").alias("pos", "h")
        ).join(F.broadcast(common), "h", "left_anti")
        order = sql.Window.partitionBy("node").orderBy("pos")
        first = live.withColumn("r", F.row_number().over(order)).where(F.col("r") <= F.col("want"))
        kept = groups.select(F.col("gid").alias("node"), F.explode("anchors").alias("h")).join(
            F.broadcast(common), "h", "left_anti"
        )
        return first.select("node", "h").unionByName(kept.select("node", "h"))

    def verdicts(
        common: DataFrame, hashes: list[int], stage: str, reach: int | None = None
    ) -> _Verdicts:
        pairs = _pairs(postings(common), max_posting, hubs, reach).where(F.col("b") >= floor)
        return _Verdicts(clock(stage, _verify(pairs, sketches, policy, hashes)))

    # 3. and 4. The first pass, with the stored common hashes; its refusals vote.
    first = verdicts(known, list(stored.common), "pass1 verify", VOTERS)
    edges1 = _guarded(spark, first.accepted, policy, floor)
    comps = clock(
        "pass1 components", _grouped(edges1, sketches, policy, list(stored.common)), False
    )
    common = clock(
        "common",
        _common(first.votes, comps, policy.votes, _tails(nodes)).unionByName(known).distinct(),
    )
    if extra is not None:
        extra["common"] = common

    # 5. to 7. The second pass without every common hash, the guard, components.
    hashes = [int(r[0]) for r in common.collect()]
    second = verdicts(common, hashes, "pass2 verify")
    edges = clock("guard", _guarded(spark, second.accepted, policy, floor), False)
    found = clock("components", _grouped(edges, sketches, policy, hashes), False)

    named = nodes.select("node", "exact", "rep").join(found, "node", "left")
    named = named.select("exact", F.coalesce("comp", "node").alias("comp"))
    names = numbering.select(F.col("node").alias("comp"), F.col("rep").alias("group_rep"))
    joined = named.where(F.col("comp") < floor).select("exact", F.col("comp").alias("gid"))
    new = named.where(F.col("comp") >= floor).join(names, "comp").select("exact", "group_rep")
    by_text = (
        joined.unionByName(direct)
        .select("exact", "gid", F.lit(None).cast(key_type).alias("group_rep"))
        .unionByName(new.select("exact", F.lit(None).cast("long").alias("gid"), "group_rep"))
    )
    rows = prints.where("ok").join(by_text, "exact")
    return rows.groupBy("key").agg(F.min("gid").alias("gid"), F.min("group_rep").alias("rep"))


def _numbered_against(answers: DataFrame, key_type: Any, start: int) -> DataFrame:
    """``(key, similar_id, duplicate)`` from ``(key, gid, rep)``: a document that joins a
    stored group gets its id (a duplicate), the new groups are numbered from *start*."""
    F = _pyspark().functions
    joined = answers.where(F.col("gid").isNotNull()).select(
        "key", F.col("gid").alias("similar_id"), F.lit(True).alias("duplicate")
    )
    fresh = _numbered(answers.where(F.col("gid").isNull()).select("key", "rep"), key_type, start)
    return joined.unionByName(fresh)


# -- files -------------------------------------------------------------------------------------


def _prepare_lines(
    preparer: Preparer,
) -> Callable[[Iterable[tuple[Any, int]]], Iterator[tuple[Any, ...]]]:
    """A partition function: ``(line, position)`` of a JSONL file to fingerprints
    ``(key, ok, exact, anchors, sketch, limit, places, long, head, error)``, parsed and
    checked by the local engine's own :class:`~nshash.cli.io.Preparer` (the same fields, the
    same messages). Blank lines are no records, as for ``nshash dedup``."""

    def run(rows: Iterable[tuple[str, int]]) -> Iterator[tuple[Any, ...]]:
        for line, pos in rows:
            if pos == 0 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.strip():
                continue
            got = preparer.run([line.encode("utf-8")])[0]
            if isinstance(got, BadRecord):
                bad = f"line {pos + 1}: {got.message}"
                yield pos, False, None, None, None, None, None, None, None, bad
                continue
            exact, limit, places = cast("tuple[int, int, bytes]", got[4])  # nshash's three
            sketch = cast("tuple[int, ...]", got[3])
            yield (
                pos,
                True,
                signed(exact),
                [signed(h) for h in cast("tuple[int, ...]", got[2])],  # run() unpacked
                list(sketch),
                limit,
                places,
                is_long(places, len(sketch)),
                got[5],
                None,
            )

    return run


def _positions(df: DataFrame) -> DataFrame:
    """*df* with ``pos``: each row's place in the input (0, 1, ...), computed in the JVM from
    each partition's row count (a file's partitions are read in order)."""
    F = _pyspark().functions
    if df.rdd.getNumPartitions() == 1:  # a small file: the row ids are the positions
        return df.withColumn("pos", F.monotonically_increasing_id())
    tagged = df.withColumn("_part", F.spark_partition_id()).withColumn(
        "_mid", F.monotonically_increasing_id()
    )
    offsets: list[Any] = []
    total = 0
    for part, count in sorted(tuple(r) for r in tagged.groupBy("_part").count().collect()):
        offsets += [F.lit(part), F.lit(total)]
        total += count
    start = F.create_map(*offsets)[F.col("_part")] if offsets else F.lit(0)
    local = F.col("_mid") - F.shiftleft(F.col("_part").cast("long"), 33)
    return tagged.withColumn("pos", start + local).drop("_part", "_mid")


def _write_lines(rows: Iterable[Any]) -> Iterator[tuple[int, str]]:
    """A partition function: rows ``(pos, value, similar_id, duplicate, head, error)`` to
    ``(pos, line)``, the lines ``nshash dedup`` writes (:class:`~nshash.cli.io.JsonlWriter`)."""
    out = io.BytesIO()
    writer = JsonlWriter(out, ADDED)
    for pos, value, similar_id, duplicate, head, error in rows:
        line = value.encode("utf-8")
        if pos == 0 and value.startswith("\ufeff"):
            line = value[1:].encode("utf-8")
        item = Item(f"line {pos + 1}", line)
        if error is not None:
            writer.write_bad(item, error, (None, None))
        else:
            writer.write(item, (None, None, (), (), (0, 0), head, None), (similar_id, duplicate))
        writer.flush()
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        yield pos, text.decode("utf-8").removesuffix("\n")


#: The fields ``dedup`` adds to every record, in order.
ADDED = ("similar_id", "duplicate")


def dedup_file(
    spark: SparkSession,
    path: str,
    output: str,
    *,
    fmt: str | None = None,
    fields: Fields | None = None,
    parts: bool = False,
    first_id: int = 1,
    against: str | Sequence[str] | None = None,
    export_groups: str | None = None,
    timings: dict[str, float] | None = None,
    **options: Any,
) -> dict[str, int]:
    """Read *path* (JSONL or Parquet), group it, and write *output* as ``nshash dedup`` does.

    Every record comes out in input order with ``similar_id`` (integers from *first_id*, in
    the order of each group's first record) and ``duplicate``; a JSONL record is its input
    line with the two fields added (the local engine's bytes), a bad one gets nulls and an
    ``error``. *output* is Parquet when its name ends in ``.parquet``, else JSON lines
    (gzip for ``.gz``).

    Args:
        spark: the session (see :func:`session`).
        path: the input file (or a folder of part files).
        output: the output file; with *parts*, a folder of Spark's part files instead.
        fmt: ``jsonl`` or ``parquet``; default from the name.
        fields: where the text, id and title are (default: ``content`` or ``text``, ``id``).
        parts: write a folder of part files named *output* (for outputs too large for one
            file, or on a cluster's storage) instead of one file.
        first_id: the first group's number.
        against: stored groups to group the input against (see :func:`dedup`): an output of
            ``nshash dedup`` (JSONL or Parquet) or an export of a store's groups, or a list
            of such files.
        export_groups: also write the groups as an export (:mod:`nshash.export`): the
            stored groups of *against* with this run's records joined in, and the new ones,
            with the common hashes of this run and of *against*; the next run groups against
            it alone (``against=export_groups``), without any text before it.
        timings: if given, filled with the seconds each stage took.
        **options: the :class:`~nshash.NSHash` options.

    Returns:
        counts: ``documents``, ``groups`` (of two or more), ``duplicates``, ``errors``; with
        *export_groups*, ``exported`` (the groups in the export) too.

    Raises:
        ConfigError: an unknown format, a missing column, an output or export that exists, or
            workers that cannot import nshash.
        StateError: *against* cannot be used (missing, no ``similar_id``, a malformed
            export).
    """
    sql = _pyspark()
    F, T = sql.functions, sql.types
    fmt = fmt or _format_of(path)
    fields = fields or Fields()
    check_outputs(output, export_groups)
    fingerprinter, policy, text_options = _options(options)
    _check(MAX_POSTING, HUBS, first_id)
    clock = _Clock(timings)
    extra: dict[str, Any] = {}
    if fmt == "parquet":
        df = spark.read.parquet(path)
        names = [c for c in fields.text if c in df.columns]
        if not names:
            raise ConfigError(f"{path!r} has no {fields.describe_text()} column")
        if "_nshash_pos" in df.columns:
            raise ConfigError("the input has a column named '_nshash_pos'")
        indexed = _positions(df).withColumnRenamed("pos", "_nshash_pos")
        result = _dedup(
            indexed,
            names[0],
            "_nshash_pos",
            order_col=None,
            first_id=first_id,
            against=against,
            max_posting=MAX_POSTING,
            hubs=HUBS,
            timings=timings,
            stats=None,
            options=options,
            extra=extra,
            unique=True,
        )
        result = result.orderBy("_nshash_pos").drop("_nshash_pos")
        clock.last = time.perf_counter()  # the stages so far are _dedup's, timed there
        with _worker_errors(), _shuffle_partitions(spark, extra["partitions"]):
            counts = _finish_parquet(result, output, parts, clock)
            if export_groups is not None:
                counts["exported"] = _export_run(
                    spark, output, against, extra, fields, fingerprinter, policy, export_groups
                )
        return counts
    preparer = Preparer(fields, ADDED, text_options)
    lines = _positions(spark.read.text(path))
    source = lines.select("value", "pos").rdd
    parallelism = spark.sparkContext.defaultParallelism
    if source.getNumPartitions() < parallelism and _size(path) > 8 << 20:
        source = source.repartition(parallelism)  # a .gz file is one split
    longs = T.ArrayType(T.LongType())
    schema = T.StructType(
        [
            T.StructField("key", T.LongType()),
            T.StructField("ok", T.BooleanType()),
            T.StructField("exact", T.LongType()),
            T.StructField("anchors", longs),
            T.StructField("sketch", longs),
            T.StructField("limit", T.LongType()),
            T.StructField("places", T.BinaryType()),
            T.StructField("long", T.BooleanType()),
            T.StructField("head", T.BinaryType()),
            T.StructField("error", T.StringType()),
        ]
    )
    with _worker_errors():
        stored = None
        if against is not None:
            stored = _load_against(spark, against, fields.text, fingerprinter, policy, fields.id)
            extra["stored"] = stored
        rows = source.mapPartitions(_prepare_lines(preparer))
        prints = clock("fingerprint", spark.createDataFrame(rows, schema, verifySchema=False))
        documents = prints.count()
        count = partitions_for(documents, parallelism)
        with _shuffle_partitions(spark, count):
            if stored is None:
                answers = _group(
                    prints, T.LongType(), policy, MAX_POSTING, HUBS, clock, None, True, extra
                )
                numbered = clock("number", _numbered(answers, T.LongType(), first_id))
            else:
                if stored.narrow:
                    prints = clock("narrow", _narrowed(prints))
                answers = _group_against(
                    prints, T.LongType(), stored, policy, MAX_POSTING, HUBS, clock, extra
                )
                start = max(first_id, stored.floor)
                numbered = clock("number", _numbered_against(answers, T.LongType(), start))
            done = prints.select(F.col("key").alias("pos"), "head", "error").join(
                numbered.withColumnRenamed("key", "pos"), "pos", "left"
            )
            joined = lines.join(done, "pos")
            # A plain record is its line with the two fields added, written in the JVM; a
            # record to rewrite or a bad one goes through the local engine's writer.
            plain = F.col("head").isNull() & F.col("error").isNull() & (F.col("pos") > 0)
            body = F.regexp_replace("value", r"\s+$", "")
            fast = (
                joined.where(plain)
                .withColumn("body", body)
                .select(
                    "pos",
                    F.concat(
                        F.expr("substring(body, 1, length(body) - 1)"),
                        F.lit(', "similar_id": '),
                        F.col("similar_id").cast("string"),
                        F.lit(', "duplicate": '),
                        F.when(F.col("duplicate"), "true").otherwise("false"),
                        F.lit("}"),
                    ).alias("line"),
                )
            )
            rest = joined.where(~plain).select(
                "pos", "value", "similar_id", "duplicate", "head", "error"
            )
            slow = spark.createDataFrame(
                rest.rdd.mapPartitions(_write_lines), "pos long, line string"
            )
            out = fast.unionByName(slow).orderBy("pos").select("line")
            counts = _counts(numbered, documents, prints)
            target = output if parts else _scratch(output)
            writer = out.write.option("lineSep", "\n")
            if output.endswith(".gz"):
                writer = writer.option("compression", "gzip")
            writer.text(target)
    if not parts:
        _join_parts(target, output)
    clock.tick("write")
    if export_groups is not None:
        with _worker_errors():
            counts["exported"] = _export_run(
                spark, output, against, extra, fields, fingerprinter, policy, export_groups
            )
    return counts


def _export_run(
    spark: SparkSession,
    output: str,
    against: str | Sequence[str] | None,
    extra: dict[str, Any],
    fields: Fields,
    fingerprinter: Fingerprinter,
    policy: MatchPolicy,
    path: str,
) -> int:
    """Write the groups after a run (:func:`dedup_file`'s *export_groups*) as an export:
    the run's stored groups (in *extra*, named by *against*) and its *output* read back as
    one set of groups, with the run's common hashes (in *extra*) and the stored ones. Returns
    the groups written."""
    sources = [] if against is None else [against] if isinstance(against, str) else list(against)
    stored = extra.get("stored")
    narrowed = stored.narrow if stored is not None else False
    mine = _load_one(spark, output, None, fields.text, fingerprinter, policy, narrowed, fields.id)
    state = mine if stored is None else _merged([stored, mine], policy)
    learned = extra.get("common")
    common = set(state.common)
    if learned is not None:
        common.update(int(r[0]) for r in learned.collect())
    rows = (
        {
            "similar_id": r["gid"],
            "size": r["size"],
            "ids": list(r["ids"] or ()),
            "anchors": list(r["anchors"] or ()),
            "sketch": list(r["sketch"] or ()),
            "limit": r["limit"],
            "exacts": list(r["exacts"] or ()),
        }
        for r in state.groups.orderBy("gid").toLocalIterator()
    )
    made = f"nshash dedup --engine spark of {output}" + (
        f" against {', '.join(sources)}" if sources else ""
    )
    counts = write_export(path, rows, state.floor - 1, narrowed, sorted(common), made, True)
    return counts["groups"]


def _counts(numbered: DataFrame, documents: int, prints: DataFrame) -> dict[str, int]:
    sql = _pyspark()
    F = sql.functions
    row = numbered.agg(
        F.count("*").alias("grouped"),
        F.sum(F.col("duplicate").cast("long")).alias("duplicates"),
        F.countDistinct(F.when(F.col("duplicate"), F.col("similar_id"))).alias("groups"),
    ).first()
    assert row is not None  # an aggregate has one row
    return {
        "documents": documents,
        "groups": int(row["groups"] or 0),
        "duplicates": int(row["duplicates"] or 0),
        "errors": documents - int(row["grouped"] or 0),
    }


def _finish_parquet(result: DataFrame, output: str, parts: bool, clock: _Clock) -> dict[str, int]:
    sql = _pyspark()
    F = sql.functions
    result = result.cache()
    row = result.agg(
        F.count("*").alias("documents"),
        F.sum(F.col("duplicate").cast("long")).alias("duplicates"),
        F.sum(F.col("similar_id").isNull().cast("long")).alias("errors"),
        F.countDistinct(F.when(F.col("duplicate"), F.col("similar_id"))).alias("groups"),
    ).first()
    assert row is not None  # an aggregate has one row
    target = output if parts else _scratch(output)
    result.write.parquet(target)
    result.unpersist()
    if not parts:
        _join_parquet(target, output)
    clock.tick("write")
    return {
        "documents": int(row["documents"] or 0),
        "groups": int(row["groups"] or 0),
        "duplicates": int(row["duplicates"] or 0),
        "errors": int(row["errors"] or 0),
    }


def _size(path: str) -> int:
    """The bytes of a local input (0 when it is not on this machine's disk)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def is_small(path: str) -> bool:
    """Whether the input *path* (a file, or a folder of part files) is on this machine's
    disk and at most :data:`SMALL_INPUT` bytes."""
    if not os.path.isdir(path):
        return 0 < _size(path) <= SMALL_INPUT
    total = 0
    for folder, _, names in os.walk(path):
        total += sum(_size(os.path.join(folder, name)) for name in names)
        if total > SMALL_INPUT:
            return False
    return True


def _scratch(output: str) -> str:
    """A folder beside *output* for the part files that become it."""
    folder = os.path.dirname(os.path.abspath(output))
    return tempfile.mkdtemp(prefix=".nshash-parts-", dir=folder) + "/parts"


def _part_names(folder: str, suffixes: tuple[str, ...]) -> list[str]:
    return sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.startswith("part-") and name.endswith(suffixes)
    )


def _join_parts(folder: str, output: str) -> None:
    """Concatenate the part files of *folder*, in order, into *output* (gzip members
    concatenate into one gzip file), then remove the folder."""
    names = [n for n in _part_names(folder, ("",)) if not n.endswith(".crc")]
    tmp = output + ".tmp"
    with open(tmp, "wb") as out:
        for name in names:
            with open(name, "rb") as part:
                shutil.copyfileobj(part, out, 1 << 20)
    os.replace(tmp, output)
    shutil.rmtree(os.path.dirname(folder))


def _join_parquet(folder: str, output: str) -> None:
    """Copy the row groups of *folder*'s Parquet parts, in order, into one file *output*."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ConfigError(
            "one Parquet output file needs pyarrow: pip install 'nshash[spark]',"
            " or write a folder of part files (--spark-parts)"
        ) from exc
    names = _part_names(folder, (".parquet",))
    tmp = output + ".tmp"
    writer = None
    try:
        for name in names:
            part = pq.ParquetFile(name)
            for i in range(part.num_row_groups):
                table = part.read_row_group(i)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, compression="zstd")
                writer.write_table(table)
        if writer is None:  # no rows: still one file, with the schema
            schema = pq.read_schema(names[0]) if names else None
            if schema is not None:
                writer = pq.ParquetWriter(tmp, schema)
    finally:
        if writer is not None:
            writer.close()
    os.replace(tmp, output)
    shutil.rmtree(os.path.dirname(folder))


def _format_of(path: str) -> str:
    name = path.rstrip("/").lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")):
        return "jsonl"
    raise ConfigError(
        f"Cannot tell the format of {path!r} for --engine spark; give --format parquet or jsonl"
    )
