"""Benchmark: the Redis store against the memory store, in the same run, on ``zh_reposts_dev``.

Starts its own ``redis-server`` on a free loopback port in a temp dir (no persistence), then
measures documents per second, text in and answer out, with a ``doc_id`` per document:

* ``memory``: ``memory://``, ``NSHash.add`` one document at a time (the baseline);
* ``redis add``: ``redis://``, ``NSHash.add`` one at a time (one script call, one round trip);
* ``redis add_many``: ``NSHash.add_many`` in batches of ``--batch`` (one round trip a batch);
* ``redis 4 procs``: ``--procs`` processes, each adding an interleaved slice with ``add_many``,
  all at once into one prefix; wall time from the common start to the last one done.

The store alone (documents fingerprinted beforehand, only the store's ``assign`` timed) is
shown too, since fingerprinting costs the same for every store. Each setting runs ``--repeat``
times, interleaved; the best run counts (the machine is shared). The serial settings must give
the memory store's answers exactly: the script checks them.

Target (issue 3): ``redis add_many`` reaches at least 0.3x the memory store's docs/s.

Usage::

    python bench/bench_redis.py [--repeat 3] [--batch 100] [--procs 4] [--limit N]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "zh_reposts_dev.jsonl.gz"
TARGET = 0.3

sys.path.insert(0, str(ROOT))

from nshash import AddResult, NSHash  # noqa: E402
from tests.redis_server import RedisServer, redis_server_available  # noqa: E402


def load(path: Path, limit: int | None) -> list[dict[str, str]]:
    """Return the documents of a JSONL.gz file (the first *limit* ones)."""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if limit is not None and len(rows) == limit:
                break
    return rows


def answers(results: list[Any]) -> list[tuple[int, bool, tuple[int, ...]]]:
    """The comparable part of each result."""
    out = []
    for r in results:
        assert isinstance(r, AddResult), r
        out.append((r.similar_id, r.duplicate, r.merged_from))
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run *fn* with the garbage collector off; return (seconds, result)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
    finally:
        gc.enable()


def run_add(url: str, rows: list[dict[str, str]]) -> tuple[float, list[Any]]:
    """Add every document one at a time."""
    with NSHash.open(url) as nsh:
        return timed(lambda: [nsh.add(r["text"], r["id"]) for r in rows])


def run_many(url: str, rows: list[dict[str, str]], batch: int) -> tuple[float, list[Any]]:
    """Add the documents with add_many, *batch* at a time."""
    items = [{"text": r["text"], "id": r["id"]} for r in rows]
    with NSHash.open(url) as nsh:

        def go() -> list[Any]:
            out: list[Any] = []
            for i in range(0, len(items), batch):
                out += nsh.add_many(items[i : i + batch])
            return out

        return timed(go)


def run_store(url: str, rows: list[dict[str, str]], batch: int) -> float:
    """Time only the store: fingerprints are computed before the clock starts."""
    with NSHash.open(url) as nsh:
        items = [(nsh.prepare(r["text"]), r["id"], None) for r in rows]
        store, policy = nsh.store, nsh.policy
        if batch:
            return timed(
                lambda: [
                    store.assign_many(items[i : i + batch], policy)
                    for i in range(0, len(items), batch)
                ]
            )[0]
        return timed(lambda: [store.assign(d, policy, i, t) for d, i, t in items])[0]


def _proc(url: str, path: str, limit: int | None, index: int, procs: int, batch: int,
          barrier: Any, done: Any) -> None:  # fmt: skip
    rows = load(Path(path), limit)[index::procs]
    items = [{"text": r["text"], "id": r["id"]} for r in rows]
    with NSHash.open(url) as nsh:
        nsh.stats()  # connect before the start
        barrier.wait()
        gc.disable()
        for i in range(0, len(items), batch):
            for result in nsh.add_many(items[i : i + batch]):
                assert isinstance(result, AddResult), result
        done.put(time.perf_counter())


def run_procs(url: str, limit: int | None, procs: int, batch: int) -> float:
    """Start *procs* writer processes at once; return the wall time until the last is done."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs + 1)
    done = ctx.Queue()
    workers = [
        ctx.Process(target=_proc, args=(url, str(DATA), limit, i, procs, batch, barrier, done))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    ends = [float(done.get(timeout=600)) for _ in workers]
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"a writer process exited with {w.exitcode}")
    return max(ends) - start


def main() -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--limit", type=int, default=None, help="only the first N documents")
    args = parser.parse_args()
    if not DATA.exists():
        print(
            f"{DATA} is missing: this benchmark reads the shared data set from ../shared/data/"
            " next to the repository",
            file=sys.stderr,
        )
        return 2
    if not redis_server_available():
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 2
    rows = load(DATA, args.limit)
    n = len(rows)
    print(f"input: {DATA.name}, {n:,} documents; {os.cpu_count()} CPUs; best of {args.repeat}")

    with tempfile.TemporaryDirectory(prefix="nshash-bench-redis-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            base = server.url

            def fresh() -> str:
                return f"{base}?prefix=bench-{uuid.uuid4().hex[:10]}"

            # Correctness first, outside the timed runs: the same answers as the memory store.
            expected = answers(run_add("memory://", rows)[1])
            same_add = answers(run_add(fresh(), rows)[1]) == expected
            same_many = answers(run_many(fresh(), rows, args.batch)[1]) == expected
            print(f"answers identical to memory://: add {same_add}, add_many {same_many}")

            best: dict[str, float] = {}

            def keep(name: str, seconds: float) -> None:
                best[name] = min(best.get(name, float("inf")), seconds)

            for _ in range(args.repeat):
                keep("memory", run_add("memory://", rows)[0])
                keep("redis add", run_add(fresh(), rows)[0])
                keep(f"redis add_many (batch {args.batch})", run_many(fresh(), rows, args.batch)[0])
                keep(f"redis {args.procs} procs (add_many)",
                     run_procs(fresh(), args.limit, args.procs, args.batch))  # fmt: skip
                keep("store only: memory", run_store("memory://", rows, 0))
                keep("store only: redis assign", run_store(fresh(), rows, 0))
                keep(f"store only: redis assign_many (batch {args.batch})",
                     run_store(fresh(), rows, args.batch))  # fmt: skip
        finally:
            server.stop()

    print(f"{'setting':<44} {'best s':>8} {'docs/s':>10} {'x memory':>9}")
    for name, seconds in best.items():
        baseline = best["store only: memory"] if name.startswith("store") else best["memory"]
        print(f"{name:<44} {seconds:>8.3f} {n / seconds:>10,.0f} {baseline / seconds:>8.2f}x")
    ratio = best["memory"] / best[f"redis add_many (batch {args.batch})"]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"redis add_many / memory: {ratio:.2f}x ({verdict} the {TARGET}x target)")
    return 0 if same_add and same_many else 1


if __name__ == "__main__":
    raise SystemExit(main())
