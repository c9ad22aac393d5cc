"""Benchmark: a new batch grouped against stored groups (``--against``), two routes.

Each labelled set (``zh_reposts_dev``, ``en_reposts_dev``, ``zh_hot_dev``, ``en_hot_dev``) is
split in two halves by position, and the second half is grouped against the first half's
stored groups:

- **spark**: the first half through ``nshash.spark.dedup_file`` (what ``nshash dedup --engine
  spark`` runs) into ``out-first.jsonl``, then the second half with
  ``against="out-first.jsonl"``;
- **spark export**: the same first run also writes its groups (``export_groups=``, what
  ``--export-groups`` writes), and the second half is grouped against that export alone;
- **store**: the first half through ``nshash dedup --store sqlite:///.../first.db`` (the local
  engine, online, file order), ``nshash groups --export groups.parquet``, then the second
  half through the Spark job with ``against="groups.parquet"``.

Each route's labels (the first half's stored ids, the second half's answers) are scored
against the ``story`` labels with ``bench/evaluate.py``'s pairwise F1, next to one run over
both halves (one Spark run, and the online path for the store route), and pair by pair
against that run (``agree``: the one run's pairs as the truth).

Usage::

    python3 bench/bench_incremental.py                    # the four sets, both routes
    python3 bench/bench_incremental.py --sets en --routes spark
    python3 bench/bench_incremental.py --sets none --scale 100000   # the cost of a new batch

``--scale N`` times N synthetic articles (``bench_spark.py``'s: stories in four copies, site
footers): the last ``--share`` (10 %) grouped against a Spark export of the rest, next to one
run over all N, with the new batch's seconds per stage and its pairs against the one run's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench.evaluate import DATA_DIR, SYSTEMS, load_corpus, pairwise_scores, run_once  # noqa: E402

SETS = ("zh", "en", "zh_hot", "en_hot")
FILES = {
    "zh": "zh_reposts_dev.jsonl.gz",
    "en": "en_reposts_dev.jsonl.gz",
    "zh_hot": "zh_hot_dev.jsonl.gz",
    "en_hot": "en_hot_dev.jsonl.gz",
}


def _halves(name: str, data_dir: Path, tmp: Path) -> tuple[Path, Path, Path, list[str]]:
    """The set's records as ``all.jsonl``, ``first.jsonl`` and ``second.jsonl`` (split by
    position), and the ids in file order."""
    with gzip.open(data_dir / FILES[name], "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    half = len(lines) // 2
    paths = (tmp / "all.jsonl", tmp / "first.jsonl", tmp / "second.jsonl")
    for path, part in zip(paths, (lines, lines[:half], lines[half:]), strict=True):
        path.write_text("".join(part), "utf-8")
    ids = [json.loads(line)["id"] for line in lines]
    return *paths, ids


def _labels(path: Path) -> dict[str, Any]:
    """id -> similar_id of an output of nshash dedup (a unique label for none)."""
    out = {}
    for line in path.open(encoding="utf-8"):
        r = json.loads(line)
        out[r["id"]] = r["similar_id"] if r["similar_id"] is not None else f"none:{r['id']}"
    return out


def _export_labels(path: Path) -> dict[str, Any]:
    """id -> canonical similar_id from an export of a store's groups."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["similar_id", "ids"])
    return {
        doc_id: sid
        for sid, ids in zip(
            table.column("similar_id").to_pylist(), table.column("ids").to_pylist(), strict=True
        )
        for doc_id in ids
    }


def _line(
    name: str, what: str, got: list[Any], truth: list[Any], runs: dict[str, list[Any]]
) -> str:
    """Scores against the stories, then the pairs against each one run's (its pairs taken
    as the truth)."""
    s = pairwise_scores(got, truth)
    line = f"{name:<7} {what:<22} P {s.precision:.4f} R {s.recall:.4f} F1 {s.f1:.4f}"
    for label, one in runs.items():
        agree = pairwise_scores(got, one)
        line += (
            f"; pairs vs {label}: P {agree.precision:.4f} R {agree.recall:.4f} F1 {agree.f1:.4f}"
        )
    return line


def _missed(got: list[Any], one: list[Any], half: int) -> str:
    """Where the one run's pairs that *got* lacks lie: both documents in the first half (the
    stored run's own grouping), one in each, or both in the second half."""
    from collections import defaultdict

    def pairs(labels: list[Any]) -> set[tuple[int, int]]:
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, label in enumerate(labels):
            groups[label].append(i)
        return {(a, b) for ids in groups.values() for a in ids for b in ids if a < b}

    lost = pairs(one) - pairs(got)
    kinds = [0, 0, 0]
    for a, b in lost:
        kinds[(a >= half) + (b >= half)] += 1
    return (
        f"missed pairs: {kinds[0]} first-first, {kinds[1]} first-second, {kinds[2]} second-second"
    )


def measure(spark: Any, name: str, routes: list[str], data_dir: Path) -> None:
    """Print one set's figures for each route."""
    from nshash.cli import main as cli
    from nshash.spark import dedup_file

    corpus = load_corpus(name, data_dir)
    assert corpus.stories is not None
    with tempfile.TemporaryDirectory(prefix="bench-incremental-") as folder:
        tmp = Path(folder)
        every, first, second, ids = _halves(name, data_dir, tmp)
        assert ids == corpus.ids
        started = time.perf_counter()
        dedup_file(spark, str(every), str(tmp / "one.jsonl"))
        one_s = time.perf_counter() - started
        one_map = _labels(tmp / "one.jsonl")
        one = [one_map[i] for i in ids]
        s = pairwise_scores(one, corpus.stories)
        print(
            f"{name:<7} {'spark, one run':<22} P {s.precision:.4f} R {s.recall:.4f}"
            f" F1 {s.f1:.4f}; {one_s:.0f} s",
            flush=True,
        )
        if "spark" in routes:
            exported = tmp / "spark-groups.parquet"
            dedup_file(spark, str(first), str(tmp / "out-first.jsonl"), export_groups=str(exported))
            started = time.perf_counter()
            dedup_file(
                spark,
                str(second),
                str(tmp / "out-second.jsonl"),
                against=str(tmp / "out-first.jsonl"),
            )
            took = time.perf_counter() - started
            labels = {**_labels(tmp / "out-first.jsonl"), **_labels(tmp / "out-second.jsonl")}
            got = [labels[i] for i in ids]
            runs = {"spark run": one}
            line = _line(name, "halves, spark output", got, corpus.stories, runs)
            print(f"{line}; {took:.0f} s; {_missed(got, one, len(ids) // 2)}", flush=True)
            started = time.perf_counter()
            out = tmp / "out-second-export.jsonl"
            dedup_file(spark, str(second), str(out), against=str(exported))
            took = time.perf_counter() - started
            labels = {**_labels(tmp / "out-first.jsonl"), **_labels(out)}
            got = [labels[i] for i in ids]
            line = _line(name, "halves, spark export", got, corpus.stories, runs)
            print(f"{line}; {took:.0f} s; {_missed(got, one, len(ids) // 2)}", flush=True)
        if "store" in routes:
            online, _ = run_once(SYSTEMS["nshash"], corpus.texts)
            s = pairwise_scores(online, corpus.stories)
            print(
                f"{name:<7} {'online, one run':<22} P {s.precision:.4f} R {s.recall:.4f}"
                f" F1 {s.f1:.4f}",
                flush=True,
            )
            url = f"sqlite://{tmp / 'first.db'}"
            assert cli(["dedup", str(first), "--store", url, "-q", "-o", str(tmp / "f.jsonl")]) == 0
            groups = tmp / "groups.parquet"
            assert cli(["groups", "--store", url, "--export", str(groups)]) == 0
            started = time.perf_counter()
            dedup_file(spark, str(second), str(tmp / "second-store.jsonl"), against=str(groups))
            took = time.perf_counter() - started
            labels = {**_export_labels(groups), **_labels(tmp / "second-store.jsonl")}
            got = [labels[i] for i in ids]
            runs = {"spark run": one, "online run": online}
            line = _line(name, "halves, store export", got, corpus.stories, runs)
            missed = _missed(got, online, len(ids) // 2)
            print(f"{line}; {took:.0f} s; vs the online run {missed}", flush=True)


def scale(spark: Any, rows: int, share: float) -> None:
    """Time a new batch (the last *share* of *rows* synthetic articles, bench_spark's) against
    the groups of the rest (a Spark run's export), next to one run over all of them."""
    import pyarrow.parquet as pq

    from bench.bench_spark import synthetic
    from nshash.spark import dedup_file

    with tempfile.TemporaryDirectory(prefix="bench-incremental-") as folder:
        tmp = Path(folder)
        every = tmp / "all.parquet"
        synthetic(every, rows)
        table = pq.read_table(every)
        cut = rows - int(rows * share) + 2  # not on a story's boundary: stories span the cut
        pq.write_table(table.slice(0, cut), tmp / "old.parquet")
        pq.write_table(table.slice(cut), tmp / "new.parquet")
        started = time.perf_counter()
        dedup_file(spark, str(every), str(tmp / "one.parquet"))
        one_s = time.perf_counter() - started
        started = time.perf_counter()
        groups = tmp / "groups.parquet"
        dedup_file(
            spark, str(tmp / "old.parquet"), str(tmp / "old-out.parquet"), export_groups=str(groups)
        )
        old_s = time.perf_counter() - started
        timings: dict[str, float] = {}
        started = time.perf_counter()
        dedup_file(
            spark,
            str(tmp / "new.parquet"),
            str(tmp / "new-out.parquet"),
            against=str(groups),
            timings=timings,
        )
        new_s = time.perf_counter() - started

        def labels(name: str) -> dict[str, Any]:
            t = pq.read_table(tmp / name, columns=["id", "similar_id"])
            return dict(
                zip(t.column("id").to_pylist(), t.column("similar_id").to_pylist(), strict=True)
            )

        one = labels("one.parquet")
        halves = {**labels("old-out.parquet"), **labels("new-out.parquet")}
        ids = list(one)
        agree = pairwise_scores([halves[i] for i in ids], [one[i] for i in ids])
        print(
            f"scale {rows:,} docs: one run {one_s:.0f} s; the first {cut:,} with"
            f" --export-groups {old_s:.0f} s; the last {rows - cut:,} against that export"
            f" {new_s:.0f} s; pairs vs one run P {agree.precision:.4f} R {agree.recall:.4f}"
            f" F1 {agree.f1:.4f}",
            flush=True,
        )
        print("  stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sets", default=",".join(SETS), help="sets to measure")
    parser.add_argument("--routes", default="spark,store", help="spark, store or both")
    parser.add_argument("--cores", type=int, default=2, help="local[N] (2)")
    parser.add_argument("--memory", default="4g", help="Spark driver memory (4g)")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument(
        "--scale",
        type=int,
        default=0,
        metavar="N",
        help="also time N synthetic articles: the last --share against the rest's export (0)",
    )
    parser.add_argument("--share", type=float, default=0.1, help="the new batch's share (0.1)")
    args = parser.parse_args(argv)
    from nshash.spark import session

    memory = {"spark.driver.memory": args.memory}
    spark = session(f"local[{args.cores}]", app="nshash-bench", **memory)
    routes = [r for r in args.routes.split(",") if r]
    for name in [s for s in args.sets.split(",") if s and s != "none"]:
        measure(spark, name, routes, args.data_dir)
    if args.scale:
        scale(spark, args.scale, args.share)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
