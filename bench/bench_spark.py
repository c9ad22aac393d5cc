"""Benchmark: nshash as a Spark job (:mod:`nshash.spark`), accuracy and throughput.

Accuracy: the labelled sets (``zh_reposts_dev``, ``en_reposts_dev``, ``zh_hot_dev``,
``en_hot_dev``) through ``nshash.spark.dedup`` in local mode, scored with ``bench/evaluate.py``'s
own code (pairwise precision, recall and F1 against the ``story`` labels), next to the online
path (``NSHash`` on the memory store, file order) from the same run; and ``zh_hk_news``: the
largest group and whether identical texts always share a group.

Halves: each labelled set split in two by position, the second half grouped against the first
half's result (``dedup(..., against=...)``), scored and compared pair by pair with one run.

Small input: the whole ``nshash dedup --engine spark -o out.jsonl`` process on the first 30
documents of ``zh_reposts_dev`` (best and median of 3), next to the local engine, and whether
the two outputs are byte-identical.

Throughput: synthetic Parquet files (default 100,000 and 1,000,000 rows: stories in four
edited copies, each with one of 50 sites' footers) through the Spark job in ``local[2]`` and
through ``nshash dedup FILE --jobs 2`` on the same file, with the Spark job's seconds per stage
at each size, so that how each stage scales can be read off.

Usage::

    python3 bench/bench_spark.py                                 # everything
    python3 bench/bench_spark.py --sets zh,en --rows 0 --small 0  # accuracy only
    python3 bench/bench_spark.py --sets none --rows 100000,1000000

Wall-clock figures are noisy on a shared machine; compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench.evaluate import (  # noqa: E402
    DATA_DIR,
    SYSTEMS,
    identical_text_sets,
    identical_text_violations,
    largest_group,
    load_corpus,
    pairwise_scores,
    run_once,
)

LABELLED = ("zh", "en", "zh_hot", "en_hot")
ROW_GROUP = 65_536


def session(cores: int, memory: str) -> Any:
    """A local Spark session on *cores* cores (:func:`nshash.spark.session`)."""
    from nshash.spark import session as start

    return start(f"local[{cores}]", app="nshash-bench", **{"spark.driver.memory": memory})


def spark_labels(
    spark: Any, ids: list[str], texts: list[str], halves: bool = False
) -> tuple[list[Any], dict[str, float]]:
    """Group *texts* with the Spark job; labels in input order (a unique one for no group).

    With *halves*, the first half by position is grouped alone and the second half against
    its result (``dedup(..., against=...)``)."""
    from nshash.spark import dedup

    rows = [(i, t, n) for n, (i, t) in enumerate(zip(ids, texts, strict=True))]
    schema = "id string, text string, pos long"
    timings: dict[str, float] = {}
    started = time.perf_counter()
    if halves:
        half = len(rows) // 2
        first = dedup(spark.createDataFrame(rows[:half], schema), order_col="pos").cache()
        second = dedup(spark.createDataFrame(rows[half:], schema), order_col="pos", against=first)
        got = first.select("id", "similar_id").collect()
        got += second.select("id", "similar_id").collect()
        first.unpersist()
    else:
        df = spark.createDataFrame(rows, schema)
        got = dedup(df, order_col="pos", timings=timings).select("id", "similar_id").collect()
    timings["total"] = time.perf_counter() - started
    found = {r["id"]: r["similar_id"] for r in got}
    return [found[i] if found[i] is not None else f"none:{i}" for i in ids], timings


def accuracy(spark: Any, sets: list[str], data_dir: Path) -> None:
    """Print the Spark job's scores next to the online path's."""
    for name in sets:
        corpus = load_corpus(name, data_dir)
        labels, timings = spark_labels(spark, corpus.ids, corpus.texts)
        if corpus.stories is None:
            _, size = largest_group(labels)
            split = identical_text_violations(corpus.texts, labels)
            sets_ = len(identical_text_sets(corpus.texts))
            over = sum(1 for c in _sizes(labels) if c > 30)
            print(
                f"{name}: {len(labels):,} docs; spark largest group {size}, {over} over 30;"
                f" identical-text sets {sets_}, {len(split)} split; {timings['total']:.0f} s",
                flush=True,
            )
            continue
        assert corpus.stories is not None
        online, _ = run_once(SYSTEMS["nshash"], corpus.texts)
        halves, _ = spark_labels(spark, corpus.ids, corpus.texts, halves=True)
        for system, got in (("online", online), ("spark", labels), ("halves", halves)):
            s = pairwise_scores(got, corpus.stories)
            print(
                f"{name:<7} {system:<7} P {s.precision:.4f} R {s.recall:.4f} F1 {s.f1:.4f}",
                flush=True,
            )
        agree = pairwise_scores(halves, labels)
        print(
            f"{name:<7} halves against one spark run: pairs P {agree.precision:.4f}"
            f" R {agree.recall:.4f} F1 {agree.f1:.4f}; spark {timings['total']:.0f} s",
            flush=True,
        )


def _sizes(labels: list[Any]) -> list[int]:
    from collections import Counter

    return list(Counter(labels).values())


def synthetic(path: Path, rows: int, seed: int = 11) -> None:
    """Write *rows* synthetic articles: stories in four edited copies, site footers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghiklmnoprstuvwyz") for _ in range(rng.randint(3, 9)))
        for _ in range(20_000)
    ]
    footers = [" ".join(rng.choice(words) for _ in range(30)).capitalize() + "." for _ in range(50)]
    schema = pa.schema([("id", pa.string()), ("site", pa.int32()), ("text", pa.string())])
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        done = 0
        while done < rows:
            n = min(ROW_GROUP, rows - done)
            ids, sites, texts = [], [], []
            while len(ids) < n:
                body = [
                    " ".join(rng.choice(words) for _ in range(rng.randint(12, 20))).capitalize()
                    + "."
                    for _ in range(6)
                ]
                for copy in range(min(4, n - len(ids))):
                    sentences = list(body)
                    if copy:
                        del sentences[rng.randrange(len(sentences))]
                        sentences.insert(0, f"By staff reporter {rng.randint(1, 10**6)}.")
                    site = rng.randrange(len(footers))
                    ids.append(f"d{done + len(ids):09d}")
                    sites.append(site)
                    texts.append("\n".join([*sentences, footers[site]]))
            table = pa.table([ids, sites, texts], schema=schema)
            writer.write_table(table, ROW_GROUP)
            done += n


def throughput(rows_list: list[int], cores: int, memory: str) -> None:
    """Time the Spark job and ``nshash dedup --jobs N`` on the same synthetic files."""
    from nshash.spark import dedup_file

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        for rows in rows_list:
            source = Path(tmp) / f"in-{rows}.parquet"
            print(f"writing {rows:,} rows...", file=sys.stderr, flush=True)
            synthetic(source, rows)
            out = Path(tmp) / f"out-{rows}.parquet"
            cmd = [sys.executable, "-m", "nshash", "dedup", str(source), "-o", str(out), "-q"]
            started = time.perf_counter()
            subprocess.run([*cmd, "--jobs", str(cores)], check=True, cwd=_ROOT)
            local = time.perf_counter() - started
            out.unlink()

            spark = session(cores, memory)
            timings: dict[str, float] = {}
            started = time.perf_counter()
            counts = dedup_file(spark, str(source), str(out), timings=timings)
            total = time.perf_counter() - started
            spark.stop()
            print(
                f"{rows:,} docs: spark local[{cores}] {total:.0f} s ({rows / total:,.0f} docs/s);"
                f" nshash dedup --jobs {cores} {local:.0f} s ({rows / local:,.0f} docs/s);"
                f" spark/local docs/s x{local / total:.2f}; {counts['groups']:,} groups of 2+",
                flush=True,
            )
            print("  stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))


def small(docs: int, cores: int, data_dir: Path, repeat: int = 3) -> None:
    """Wall time of the whole ``nshash dedup --engine spark`` process on *docs* documents
    (the first of ``zh_reposts_dev``), next to the local engine's."""
    import gzip

    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        source = Path(tmp) / f"first-{docs}.jsonl"
        with gzip.open(data_dir / "zh_reposts_dev.jsonl.gz", "rt", encoding="utf-8") as f:
            source.write_text(
                "".join(line for _, line in zip(range(docs), f, strict=False)), "utf-8"
            )
        for engine in ("spark", "local"):
            times = []
            load = os.getloadavg()[0]
            for run in range(repeat):
                out = Path(tmp) / f"out-{engine}-{run}.jsonl"
                cmd = [sys.executable, "-m", "nshash", "dedup", str(source), "-o", str(out)]
                cmd += ["-q", "--jobs", str(cores), "--engine", engine]
                started = time.perf_counter()
                subprocess.run(cmd, check=True, cwd=_ROOT)
                times.append(time.perf_counter() - started)
            same = (
                (Path(tmp) / "out-spark-0.jsonl").exists()
                and engine == "local"
                and (
                    (Path(tmp) / "out-spark-0.jsonl").read_bytes()
                    == (Path(tmp) / "out-local-0.jsonl").read_bytes()
                )
            )
            print(
                f"{docs} docs, nshash dedup --engine {engine} (local[{cores}]): wall"
                f" {min(times):.1f} s best, {sorted(times)[len(times) // 2]:.1f} s median of"
                f" {repeat} (load average {load:.1f} before, {os.getloadavg()[0]:.1f} after)"
                + (f"; output byte-identical to spark's: {same}" if engine == "local" else ""),
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sets", default="zh,en,zh_hot,en_hot,hk", help="sets to score, or 'none'")
    parser.add_argument(
        "--rows", default="100000,1000000", help="synthetic file sizes, or 0 for none"
    )
    parser.add_argument(
        "--small", type=int, default=30, help="documents of the small run (0: none)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of the small input (3)")
    parser.add_argument("--cores", type=int, default=2, help="local[N] and --jobs N (2)")
    parser.add_argument("--memory", default="6g", help="Spark driver memory (6g)")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    sets = [] if args.sets == "none" else [s for s in args.sets.split(",") if s]
    rows = [int(r) for r in args.rows.split(",") if int(r) > 0]
    if args.small:
        small(args.small, args.cores, args.data_dir, args.repeat)
    if sets:
        spark = session(args.cores, args.memory)
        accuracy(spark, sets, args.data_dir)
        spark.stop()
    if rows:
        throughput(rows, args.cores, args.memory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
