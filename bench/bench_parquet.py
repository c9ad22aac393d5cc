"""Benchmark: ``nshash dedup`` on Parquet files of several sizes; peak memory must not grow.

Writes synthetic Parquet files (default 250,000, 500,000 and 1,000,000 rows) of articles:
``text`` (one of ``--stories`` stories, each in a few copies with a different site header),
a unique ``url``, a ``site``, a ``published`` timestamp, a ``score`` and a list of ``tags``,
in row groups of 65,536 rows. Then it runs the command line on each (``python -m nshash dedup
FILE -o OUT.parquet``, a subprocess) and reports wall time, docs/s and the peak resident
memory of that process (``ru_maxrss``, through a small launcher), and checks the output:
every row, every input column plus ``similar_id``, ``duplicate`` and ``error`` (all null), one
group per story.

The file has no ``id`` column, so no document is stored by name: the store keeps one entry
per story and what grows with the file, if anything, is the reading and writing. The baseline,
measured in the same run on the same files, is a process that reads the whole file at once
(``pyarrow.parquet.read_table``), which is what a reader that does not stream needs.

Target (issue 17): the peak memory of ``dedup`` on the largest file is within 10% of the next
one's (the peak settles over the first few row groups, as the allocator warms up, then stays),
while the whole-file read grows with the file. Every ratio is printed.

Usage::

    python bench/bench_parquet.py [--rows 250000,500000,1000000] [--stories 2000] [--jobs 1]
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

import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP = 65_536
TARGET = 1.10
REPO = Path(__file__).resolve().parents[1]


def story_texts(stories: int, seed: int = 17) -> list[str]:
    """Return the distinct texts: each story in four copies with other site headers."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(5000)
    ]
    texts = []
    for _ in range(stories):
        body = " ".join(
            " ".join(rng.choice(words) for _ in range(rng.randint(12, 20))).capitalize() + "."
            for _ in range(6)
        )
        for header in ("", "By Staff Reporter\n", "Metro desk\n", "From our correspondent\n"):
            texts.append(header + body)
    return texts


def write_file(path: Path, rows: int, texts: list[str], seed: int = 5) -> None:
    """Write *rows* rows in row groups of :data:`ROW_GROUP`, one group at a time."""
    rng = random.Random(seed)
    sites = [f"site{i}.example" for i in range(50)]
    schema = pa.schema(
        [
            ("url", pa.string()),
            ("site", pa.string()),
            ("published", pa.timestamp("s")),
            ("score", pa.float64()),
            ("tags", pa.list_(pa.string())),
            ("text", pa.string()),
        ]
    )
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, rows, ROW_GROUP):
            n = min(ROW_GROUP, rows - start)
            picks = [rng.randrange(len(texts)) for _ in range(n)]
            site = [sites[p % len(sites)] for p in picks]
            columns = [
                pa.array([f"https://{s}/{start + i}.html" for i, s in enumerate(site)]),
                pa.array(site),
                pa.array([1_700_000_000 + start + i for i in range(n)], pa.timestamp("s")),
                pa.array([rng.random() for _ in range(n)]),
                pa.array([[s, str(p % 7)] for s, p in zip(site, picks, strict=True)]),
                pa.array([texts[p] for p in picks]),
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), ROW_GROUP)


#: Runs a command and prints its peak resident memory. A child's ``ru_maxrss`` starts from
#: the memory of the process that started it (Linux counts the parent's pages up to the
#: exec), so the command is started from this small launcher, not from the benchmark, which
#: holds the texts.
LAUNCHER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)
"""


def measure(cmd: list[str]) -> tuple[float, int]:
    """Run *cmd*; return its wall time and its peak resident memory in bytes."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("NSHASH_STORE_URL", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *cmd], env=env, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return elapsed, int(done.stdout) * 1024  # kilobytes on Linux


def check_output(source: Path, out: Path, stories: int) -> None:
    """Every row and column is there, and there is one group per story."""
    src, dst = pq.ParquetFile(source), pq.ParquetFile(out)
    assert dst.metadata.num_rows == src.metadata.num_rows, "rows lost"
    added = ["similar_id", "duplicate", "error"]
    assert dst.schema_arrow.names == [*src.schema_arrow.names, *added]
    errors = pq.read_table(out, columns=["error"]).column(0)
    assert errors.null_count == len(errors), "rows with an error"
    ids = pq.read_table(out, columns=["similar_id"]).column(0)
    groups = len(pa.compute.unique(ids))
    assert groups == stories, f"{groups} groups for {stories} stories"
    first = next(src.iter_batches(batch_size=1000))
    again = next(dst.iter_batches(batch_size=1000, columns=src.schema_arrow.names))
    assert first.equals(again), "values changed"


def main() -> int:
    """Parse the arguments, write the files, run, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", default="250000,500000,1000000", help="the file sizes, in rows (two or more)"
    )
    parser.add_argument("--stories", type=int, default=2000, help="distinct stories")
    parser.add_argument("--jobs", type=int, default=1, help="nshash dedup --jobs")
    args = parser.parse_args()
    sizes = sorted(int(r) for r in args.rows.split(","))
    texts = story_texts(args.stories)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-parquet-") as tmp:
        for rows in sizes:
            source, out = Path(tmp) / f"in-{rows}.parquet", Path(tmp) / f"out-{rows}.parquet"
            print(f"writing {rows:,} rows...", file=sys.stderr)
            write_file(source, rows, texts)
            dedup = [sys.executable, "-m", "nshash", "dedup", str(source), "-o", str(out), "-q"]
            wall, rss = measure([*dedup, "--jobs", str(args.jobs)])
            check_output(source, out, args.stories)
            script = f"import pyarrow.parquet as pq; pq.read_table({str(source)!r})"
            _, whole = measure([sys.executable, "-c", script])
            size = source.stat().st_size
            results.append((rows, size, wall, rss, whole))
            out.unlink()
            source.unlink()

    print(f"nshash dedup on Parquet (--jobs {args.jobs}, {args.stories:,} stories x 4 copies)")
    print(f"{'rows':>10} {'file MB':>8} {'seconds':>8} {'docs/s':>8} {'peak MB':>8}"
          f" {'read_table MB':>14}")  # fmt: skip
    for rows, size, wall, rss, whole in results:
        print(
            f"{rows:>10,} {size / 2**20:>8.1f} {wall:>8.1f} {rows / wall:>8,.0f}"
            f" {rss / 2**20:>8.1f} {whole / 2**20:>14.1f}"
        )
    large, *_, large_rss, large_whole = results[-1]
    for rows, _, _, rss, whole in results[:-1]:
        print(
            f"{large:,} rows against {rows:,} (x{large / rows:.1f}): peak memory of dedup"
            f" x{large_rss / rss:.2f}, of the whole-file read x{large_whole / whole:.2f}"
        )
    # The allocator's high-water mark settles over the first few row groups, so the target
    # compares the two largest files.
    ratio = large_rss / results[-2][3]
    print(f"target: dedup x{ratio:.2f} between the two largest files (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
