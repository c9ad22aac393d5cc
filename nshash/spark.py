"""nshash as a Spark job: group a stored corpus past one machine.

The batch form of the online algorithm (:mod:`nshash.methods.nshash.assign`), with the whole
corpus in view at once instead of one document at a time. Every stage is a Spark DataFrame (or RDD)
operation; nothing that grows with the corpus is collected to the driver.

1. **Fingerprints** on the executors, with the library's own :class:`~nshash.Fingerprinter`
   (the same text path, so the same keys as :class:`~nshash.NSHash`): anchor candidates
   (:attr:`DocPrint.sentences <nshash.DocPrint.sentences>`), sketch, limit and the exact
   fingerprint of every document.
2. **Identical texts** (same exact fingerprint) collapse into one node named by their smallest
   id: they always share a group, whatever the guard says.
3. **Candidate pairs** from shared anchors (the first ``n`` of each document): every pair of an
   anchor's posting list up to ``max_posting`` documents, and past that each document paired
   with the ``hubs`` smallest ones only (a giant posting list is mostly boilerplate; a real hot
   story still links through its hubs). Each pair is verified by the sketch check of the
   online path (:func:`nshash.methods.nshash.assign.judged`: shared values over the smaller
   sketch, both cut at the smaller limit, ``theta`` and ``min_overlap``).
4. **Boilerplate from corpus-wide evidence**: the verified pairs make a first graph, and every
   refused pair votes, on each anchor that hit and each sketch value the pair shared, for the
   first-graph components of its two documents. A hash is common once it has votes from
   ``votes`` distinct components (the online rule, with every vote there at once). A hot story
   whose 60 copies share an anchor is one component, so its anchors stay; a site footer on
   thousands of unrelated articles is in thousands.
5. **Second pass** without the common hashes: each document's anchors are its first ``n``
   candidates that are not common (the online selection), its sketch leaves out common values,
   and the pairs are found and verified again.
6. **The merge guard** (the batch form of ``merge_guard``): a document that matches several
   others keeps only the matches that agree with its best one, in that what it shares with
   them overlaps what it shares with the best by at least ``merge_guard``; an edge stays when
   both of its documents keep it. A digest page quoting two whole stories matches both, but
   on disjoint parts of itself, so it joins one and the stories stay apart.
7. **Connected components** of the kept edges in Spark (the large-star/small-star iteration on
   DataFrames), and the smallest document id of a component names it.

The result does not depend on the order of the input: every choice is made in id order.

Example:
    A self-contained run on two cores (needs ``pip install 'nshash[spark]'`` and Java)::

        from pyspark.sql import SparkSession
        from .spark import dedup

        spark = SparkSession.builder.master("local[2]").getOrCreate()
        df = spark.createDataFrame([("a", "..."), ("b", "...")], ["id", "text"])
        dedup(df).show()   # id, text, similar_id, duplicate
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import ConfigError, NSHashError, install_hint
from .inputs import check_text
from .methods.nshash.assign import MatchPolicy, judged
from .methods.nshash.core import _POLICY_OPTIONS, _TEXT_OPTIONS
from .text.fingerprint import DEFAULT_DELIMITERS, Fingerprinter

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

_SIGN = 1 << 63
_WRAP = 1 << 64

T = TypeVar("T")


def _signed(value: int) -> int:
    """A 64-bit unsigned fingerprint as Spark's signed ``long`` (the same bits)."""
    return value - _WRAP if value >= _SIGN else value


def _pyspark() -> Any:
    """Import pyspark, or say how to install it."""
    try:
        import pyspark.sql
    except ImportError as exc:
        raise ConfigError(
            f"nshash.spark needs pyspark (and Java): {install_hint('spark')}"
        ) from exc
    return pyspark.sql


def _options(options: dict[str, Any]) -> tuple[Fingerprinter, MatchPolicy]:
    """The fingerprinter and policy for *options*, split as :class:`~nshash.NSHash` does."""
    options = dict(options)
    n = options.pop("n", 16)
    text = {k: options.pop(k) for k in ("min_length", "hashfunc", *_TEXT_OPTIONS) if k in options}
    policy = {k: options.pop(k) for k in _POLICY_OPTIONS if k in options}
    delimiters = options.pop("delimiters", DEFAULT_DELIMITERS)
    if options:
        raise ConfigError(f"Unknown option(s) {sorted(options)} for nshash.spark.dedup")
    return Fingerprinter(n=n, delimiters=delimiters, **text), MatchPolicy(n=n, **policy)


# -- stage functions (run on the executors) --------------------------------------------------


def _fingerprint_rows(
    fingerprinter: Fingerprinter,
) -> Callable[[Iterable[Any]], Iterator[tuple[Any, ...]]]:
    """A partition function: ``(id, text)`` rows to ``(id, ok, exact, anchors, sketch, limit)``.

    A text the library refuses (not a string, no letters or digits, too long) comes out with
    ``ok`` false and no fingerprints: it gets no group.
    """

    def run(rows: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        prepare = fingerprinter.prepare
        for doc_id, text in rows:
            try:
                doc = prepare(check_text(text))
            except NSHashError:
                yield doc_id, False, None, None, None, None
                continue
            yield (
                doc_id,
                True,
                _signed(doc.exact),
                [_signed(h) for h in doc.sentences],
                list(doc.sketch),
                doc.limit,
            )

    return run


def _scorer(policy: MatchPolicy) -> Callable[[int, int, int], float]:
    """The online path's score of a pair, from its counts
    (:func:`nshash.methods.nshash.assign.judged`)."""

    def score(shared: int, mine: int, theirs: int) -> float:
        return judged(0, (), shared, mine, theirs, policy).score

    return score


def _agree(best: set[int], shared: set[int], size: int, guard: float) -> bool:
    """Whether a match of a node is alike its best match: what the node shares with both is
    at least *guard* of the match's own sketch (*size* values). That is a lower bound of the
    two matches' :func:`~nshash.methods.nshash.assign.kinship` from what the node sees of them,
    and it keeps a short page that is mostly a columnist's bio from tying all of the columnist's
    articles to its best match: each shares the bio, a small part of each."""
    return bool(size) and len(best & shared) / size >= guard


def _guard_rows(policy: MatchPolicy) -> Callable[[Iterable[Any]], Iterator[tuple[int, int, bool]]]:
    """A partition function: a node and its verified matches to the matches it agrees to.

    The batch form of the online choice (:mod:`nshash.methods.nshash.assign`): a document joins
    its best match, and merges others into it only where they match strongly (``merge_theta``) and
    agree with the best one (``merge_guard``). Rows are ``(node, [(other, score, shared,
    size), ...])``, *size* being the other node's live sketch size; out come ``(node, other,
    pick)`` for every match the node agrees to.

    The node's reference match is the one it shares the most with (ties: the better score,
    the smaller id); another match agrees with it when what the node shares with both is at
    least ``merge_guard`` of the other match's sketch (the online merge guard, as far as the
    node can see the two). The node *picks* its strong agreeing matches, or only the
    reference when none is strong, and merely *accepts* its other agreeing matches. An edge
    stays when both nodes agree to it and one picks it: a heavily edited copy still joins its
    story through its best match, while a weak match between two stories glues nothing, nor
    does a digest page quoting both (its two matches share disjoint parts of it).
    """

    def run(rows: Iterable[Any]) -> Iterator[tuple[int, int, bool]]:
        guard, strong = policy.merge_guard, policy.merge_theta
        for node, matches in rows:
            # The reference is the match the node shares most with (then the best score, then
            # the smallest id): a contained short copy scores 1.0 but says little of the rest.
            ref = max(matches, key=lambda m: (len(m[2]), m[1], -m[0]))
            best = set(ref[2])
            any_strong = max(m[1] for m in matches) >= strong
            for other, score, shared, size in matches:
                if other != ref[0] and not _agree(best, set(shared), size, guard):
                    continue
                yield node, other, score >= strong if any_strong else other == ref[0]

    return run


# -- DataFrame stages ------------------------------------------------------------------------


def _pairs(post: DataFrame, max_posting: int, hubs: int) -> DataFrame:
    """Candidate pairs ``(a, b, hits)``, ``a < b``, from anchor postings ``(node, h)``."""
    sql = _pyspark()
    F, Window = sql.functions, sql.Window
    sized = post.withColumn("df", F.count("*").over(Window.partitionBy("h")))
    small = sized.where(F.col("df") <= max_posting).select("node", "h")
    left, right = small.alias("x"), small.alias("y")
    every = left.join(right, "h").where(F.col("x.node") < F.col("y.node"))
    every = every.select(F.col("x.node").alias("a"), F.col("y.node").alias("b"), "h")
    big = sized.where(F.col("df") > max_posting).select("node", "h")
    rank = F.row_number().over(Window.partitionBy("h").orderBy("node"))
    hub = big.withColumn("r", rank).where(F.col("r") <= hubs).select("h", F.col("node").alias("k"))
    star = big.join(hub, "h").where(F.col("node") != F.col("k"))
    star = star.select(
        F.least("node", "k").alias("a"), F.greatest("node", "k").alias("b"), F.col("h")
    )
    both = every.unionByName(star)
    return both.groupBy("a", "b").agg(F.sort_array(F.collect_set("h")).alias("hits"))


def _verify(pairs: DataFrame, nodes: DataFrame, policy: MatchPolicy) -> DataFrame:
    """Verdicts ``(a, b, score, accepted, hits, shared)`` of candidate *pairs*.

    *nodes* is ``(node, sketch, limit, common)``, *common* being the node's sketch values
    known to be common (null for none). As on the online path, both sketches leave out common
    values and are cut at the smaller limit; *shared* holds what is left in common. The set
    arithmetic runs in Spark; the score is :func:`nshash.methods.nshash.assign.judged`'s.
    """
    sql = _pyspark()
    F, T = sql.functions, sql.types
    side = {
        name: nodes.select(
            F.col("node").alias(name),
            F.col("sketch").alias(f"s{name}"),
            F.col("limit").alias(f"l{name}"),
            F.coalesce("common", F.array().cast(T.ArrayType(T.LongType()))).alias(f"c{name}"),
        )
        for name in ("a", "b")
    }
    joined = pairs.join(side["a"], "a").join(side["b"], "b")
    limit = F.least("la", "lb")
    live = {
        name: F.filter(F.array_except(f"s{name}", f"c{name}"), lambda v: v < limit)
        for name in ("a", "b")
    }
    counted = joined.select(
        "a", "b", "hits", live["a"].alias("mine"), live["b"].alias("theirs")
    ).withColumn("shared", F.array_sort(F.array_intersect("mine", "theirs")))
    scorer = _scorer(policy)
    # A plain Python UDF (no Arrow, no pandas: pyspark alone runs it); the lambda has no type
    # hints, from which pyspark would try to infer a pandas UDF.
    score = F.udf(lambda s, m, t: scorer(s, m, t), T.DoubleType(), useArrow=False)(
        F.size("shared"), F.size("mine"), F.size("theirs")
    )
    scored = counted.select(
        "a",
        "b",
        score.alias("score"),
        "hits",
        "shared",
        F.size("mine").alias("na"),
        F.size("theirs").alias("nb"),
    )
    return scored.withColumn("accepted", F.col("score") >= policy.theta)


def _guarded(spark: SparkSession, verdicts: DataFrame, policy: MatchPolicy) -> DataFrame:
    """The accepted edges ``(a, b)`` that both of their nodes keep under the merge guard."""
    sql = _pyspark()
    F, T = sql.functions, sql.types
    ok = verdicts.where("accepted")
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
        ]
    )
    kept = spark.createDataFrame(
        grouped.rdd.map(lambda r: (r[0], [(m[0], m[1], m[2], m[3]) for m in r[1]])).mapPartitions(
            _guard_rows(policy)
        ),
        schema,
        verifySchema=False,
    )
    undirected = kept.select(
        F.least("u", "v").alias("a"), F.greatest("u", "v").alias("b"), F.col("pick").cast("int")
    )
    votes = undirected.groupBy("a", "b").agg(
        F.count("*").alias("sides"), F.max("pick").alias("pick")
    )
    return votes.where((F.col("sides") == 2) & (F.col("pick") == 1)).select("a", "b")


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
    while True:
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
        if e.join(roots, "x").limit(1).count() == 0 and (
            e.count() == e.select("x").distinct().count()
        ):
            break
    roots = e.select(F.col("y").alias("node"), F.col("y").alias("comp")).distinct()
    return e.select(F.col("x").alias("node"), F.col("y").alias("comp")).unionByName(roots)


def _common(verdicts: DataFrame, comps: DataFrame, votes: int) -> DataFrame:
    """Hashes (column ``h``) that refused pairs kept apart across *votes* components."""
    sql = _pyspark()
    F = sql.functions
    refused = verdicts.where(~F.col("accepted")).select(
        "a", "b", F.explode(F.array_union("hits", "shared")).alias("h")
    )
    ca = comps.select(F.col("node").alias("a"), F.col("comp").alias("ca"))
    cb = comps.select(F.col("node").alias("b"), F.col("comp").alias("cb"))
    tagged = refused.join(ca, "a", "left").join(cb, "b", "left")
    sides = tagged.select("h", F.coalesce("ca", "a").alias("c")).unionByName(
        tagged.select("h", F.coalesce("cb", "b").alias("c"))
    )
    counted = sides.groupBy("h").agg(F.countDistinct("c").alias("n"))
    return counted.where(F.col("n") >= votes).select("h")


class _Clock:
    """Seconds per stage, when asked for."""

    def __init__(self, timings: dict[str, float] | None) -> None:
        self.timings = timings
        self.last = time.perf_counter()

    def __call__(self, stage: str, df: DataFrame) -> DataFrame:
        df = _materialize(df)
        now = time.perf_counter()
        if self.timings is not None:
            self.timings[stage] = self.timings.get(stage, 0.0) + now - self.last
        self.last = now
        return df


def dedup(
    df: DataFrame,
    text_col: str = "text",
    id_col: str = "id",
    *,
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
        id_col: the column with the document id (any type Spark can order): the smallest id
            of a group is its ``similar_id``.
        max_posting: an anchor held by up to this many documents pairs all of them; past
            that, each is paired with the ``hubs`` smallest.
        hubs: see *max_posting*.
        timings: if given, filled with the seconds each stage took (the stages are computed
            one after the other, so the figures add up to the run).
        stats: if given, filled with counts: documents, nodes, pairs, common hashes, edges.
        **options: the :class:`~nshash.NSHash` options (``n``, ``min_length``, ``hashfunc``,
            ``shingle``, ``sketch_rate``, ``sketch_size``, ``theta``, ``min_overlap``,
            ``merge_guard``, ``votes``, ...), for the same keys and the same checks.

    Returns:
        *df* with two more columns: ``similar_id`` (the id column's type; null for a text
        with no letters or digits, or not a string) and ``duplicate`` (true for every member
        of a group but the one whose id names it).

    Raises:
        ConfigError: pyspark is missing, a column is missing, or an option is bad.
    """
    sql = _pyspark()
    F, T = sql.functions, sql.types
    for name, value in (("max_posting", max_posting), ("hubs", hubs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, not {value!r}")
    for column in (text_col, id_col):
        if column not in df.columns:
            raise ConfigError(f"The DataFrame has no column {column!r}; it has {df.columns!r}")
    fingerprinter, policy = _options(options)
    spark = df.sparkSession
    clock = _Clock(timings)
    id_type = df.schema[id_col].dataType
    longs = T.ArrayType(T.LongType())

    # 1. Fingerprints on the executors.
    prints_schema = T.StructType(
        [
            T.StructField("id", id_type),
            T.StructField("ok", T.BooleanType()),
            T.StructField("exact", T.LongType()),
            T.StructField("anchors", longs),
            T.StructField("sketch", longs),
            T.StructField("limit", T.LongType()),
        ]
    )
    rows = df.select(id_col, text_col).rdd.mapPartitions(_fingerprint_rows(fingerprinter))
    prints = clock("fingerprint", spark.createDataFrame(rows, prints_schema, verifySchema=False))

    # 2. One node per distinct text, numbered in id order (so node order is id order).
    reps = (
        prints.where("ok")
        .groupBy("exact")
        .agg(
            F.min("id").alias("rep_id"),
            F.first("anchors").alias("anchors"),
            F.first("sketch").alias("sketch"),
            F.first("limit").alias("limit"),
        )
    )
    ranked = reps.select("rep_id").orderBy("rep_id").rdd.map(lambda r: r[0]).zipWithIndex()
    numbering = spark.createDataFrame(
        ranked,
        T.StructType([T.StructField("rep_id", id_type), T.StructField("node", T.LongType())]),
    )
    nodes = clock("exact", reps.join(numbering, "rep_id"))

    # 3. First pass: the first n anchor candidates, raw sketches.
    candidates = nodes.select("node", F.posexplode("anchors").alias("pos", "h"))
    first = candidates.where(F.col("pos") < policy.n).select("node", "h")
    raw = nodes.select("node", "sketch", "limit", F.lit(None).cast(longs).alias("common"))
    verdicts = clock("pass1 verify", _verify(_pairs(first, max_posting, hubs), raw, policy))

    # 4. Boilerplate: votes of refused pairs across first-pass components.
    comps = clock("pass1 components", components(_guarded(spark, verdicts, policy)))
    common = clock("common", _common(verdicts, comps, policy.votes))

    # 5. Second pass without the common hashes.
    live = candidates.join(F.broadcast(common), "h", "left_anti")
    order = sql.Window.partitionBy("node").orderBy("pos")
    anchors = live.withColumn("r", F.row_number().over(order)).where(F.col("r") <= policy.n)
    sampled = nodes.select("node", F.explode("sketch").alias("h"))
    dropped = (
        sampled.join(F.broadcast(common), "h")
        .groupBy("node")
        .agg(F.collect_list("h").alias("common"))
    )
    cleaned = nodes.join(dropped, "node", "left").select("node", "sketch", "limit", "common")
    verdicts2 = clock(
        "pass2 verify",
        _verify(_pairs(anchors.select("node", "h"), max_posting, hubs), cleaned, policy),
    )

    # 6. The merge guard, then 7. components.
    edges = clock("guard", _guarded(spark, verdicts2, policy))
    groups = clock("components", components(edges))

    if stats is not None:
        stats.update(
            documents=prints.count(),
            nodes=nodes.count(),
            pairs_pass1=verdicts.count(),
            common=common.count(),
            pairs_pass2=verdicts2.count(),
            edges=edges.count(),
        )

    named = nodes.select("node", "exact").join(groups, "node", "left")
    named = named.select("exact", F.coalesce("comp", "node").alias("comp"))
    names = numbering.select(F.col("node").alias("comp"), F.col("rep_id").alias("similar_id"))
    by_text = named.join(names, "comp").select("exact", "similar_id")
    answers = (
        prints.join(by_text, "exact", "left")
        .groupBy("id")
        .agg(F.min("similar_id").alias("similar_id"))
    )
    answers = answers.withColumnRenamed("id", "_nshash_id")
    out = df.join(answers, df[id_col] == answers["_nshash_id"], "left").drop("_nshash_id")
    return out.withColumn(
        "duplicate",
        F.when(F.col("similar_id").isNull(), F.lit(None).cast("boolean")).otherwise(
            F.col(id_col) != F.col("similar_id")
        ),
    )


def dedup_file(
    spark: SparkSession,
    path: str,
    output: str,
    *,
    fmt: str | None = None,
    text_col: str | None = None,
    id_col: str = "id",
    **options: Any,
) -> dict[str, int]:
    """Read *path* (Parquet or JSONL, what Spark reads), group it, write *output*.

    *output* is a directory of part files as Spark writes them: Parquet when its name ends in
    ``.parquet``, else JSON lines. The text column defaults to ``content``, else ``text``
    (as ``nshash dedup`` does).

    Returns:
        counts: ``documents``, ``groups`` (of two or more), ``duplicates``, ``errors``.

    Raises:
        ConfigError: an unknown format or a missing column.
    """
    fmt = fmt or _format_of(path)
    reader = spark.read
    df = reader.parquet(path) if fmt == "parquet" else reader.json(path)
    if text_col is None:
        text_col = "content" if "content" in df.columns else "text"
    result = dedup(df, text_col, id_col, **options).cache()
    if output.endswith(".parquet"):
        result.write.mode("errorifexists").parquet(output)
    else:
        result.write.mode("errorifexists").json(output)
    sql = _pyspark()
    F = sql.functions
    row = result.agg(
        F.count("*").alias("documents"),
        F.sum(F.col("duplicate").cast("long")).alias("duplicates"),
        F.sum(F.col("similar_id").isNull().cast("long")).alias("errors"),
    ).first()
    assert row is not None  # an aggregate has one row
    groups = result.where("duplicate").select("similar_id").distinct().count()
    counts = {
        "documents": int(row["documents"] or 0),
        "groups": int(groups),
        "duplicates": int(row["duplicates"] or 0),
        "errors": int(row["errors"] or 0),
    }
    result.unpersist()
    return counts


def _format_of(path: str) -> str:
    name = path.rstrip("/").lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson")):
        return "jsonl"
    raise ConfigError(
        f"Cannot tell the format of {path!r} for --engine spark; give --format parquet or jsonl"
    )
