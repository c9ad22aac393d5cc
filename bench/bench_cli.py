"""Benchmark: whole-process ``nshash dedup`` with ``--jobs 1`` against ``--jobs N``.

Runs the installed command line (``python -m nshash``) as a subprocess over
``../shared/data/zh_news.jsonl.gz``, output to /dev/null, and reports wall time, docs/s and
the speed-up of N worker processes over one. Each setting runs ``--repeat`` times,
alternating, and the best run counts (the machine is shared; the best is the least disturbed).
Both settings must produce the same output: the script checks the hashes.

A machine check runs two CPU-bound processes side by side before and after: the speed-up
of ``--jobs 2`` can only be read against the share of the 2 CPUs the machine gave right then.

Target (issue 5): ``--jobs 2`` reaches at least 1.5x the docs/s of ``--jobs 1`` on 2 cores.

Usage::

    python bench/bench_cli.py [--jobs 2] [--repeat 3] [--data PATH]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_INPUT = DATA / "zh_news.jsonl.gz"
TARGET = 1.5


def count_lines(path: Path) -> int:
    """Return the number of non-blank lines of a (gzipped) JSONL file."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def children_cpu() -> float:
    """Return the CPU seconds (user + system) of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(path: Path, jobs: int, out: Path | None) -> tuple[float, float]:
    """Run one ``nshash dedup``; return its wall time and the CPU time of its process tree."""
    cmd = [sys.executable, "-m", "nshash", "dedup", str(path), "--jobs", str(jobs), "-q"]
    if out is not None:
        cmd += ["-o", str(out)]
    cpu = children_cpu()
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    # The workers were joined by the nshash process, so their CPU time is counted too.
    return time.perf_counter() - started, children_cpu() - cpu


#: A fixed amount of pure-Python work, to see how much of 2 CPUs this machine gives right now.
SPIN = "s = 0\nfor i in range(3_000_000):\n    s += i * i\n"


def calibrate() -> float:
    """Return how many times faster two copies of a CPU-bound process finish than one by one.

    2.0 means two idle cores; near 1.0 means other processes hold one of them. The speed-up
    of ``--jobs 2`` can only be read against this figure, measured in the same minute.
    """
    spin = [sys.executable, "-c", SPIN]
    started = time.perf_counter()
    subprocess.run(spin, check=True)
    alone = time.perf_counter() - started
    started = time.perf_counter()
    procs = [subprocess.Popen(spin) for _ in range(2)]
    for proc in procs:
        proc.wait()
    together = time.perf_counter() - started
    return 2 * alone / together


def digest(path: Path) -> str:
    """Return the SHA-256 of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--jobs", type=int, default=2, help="workers to compare with 1")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not args.data.exists():
        print(
            f"{args.data} is missing: this benchmark reads the shared data set from"
            " ../shared/data/ next to the repository",
            file=sys.stderr,
        )
        return 1
    docs = count_lines(args.data)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"input: {args.data.name}, {docs:,} documents; {os.cpu_count()} CPUs; load {load}")

    # Same output for any --jobs (checked once, outside the timed runs).
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    outs = {}
    for jobs in (1, args.jobs):
        out = tmp / f"nshash-bench-cli-{os.getpid()}-{jobs}.jsonl"
        run(args.data, jobs, out)
        outs[jobs] = digest(out)
        out.unlink()
    same = outs[1] == outs[args.jobs]
    print(f"output identical for --jobs 1 and --jobs {args.jobs}: {same}")

    print(f"machine check: two CPU-bound processes ran {calibrate():.2f}x as fast as one by one")
    times: dict[int, list[tuple[float, float]]] = {1: [], args.jobs: []}
    for _ in range(args.repeat):
        for jobs in (1, args.jobs):
            times[jobs].append(run(args.data, jobs, None))
    best = {jobs: min(ts)[0] for jobs, ts in times.items()}
    for jobs, ts in times.items():
        runs = ", ".join(f"{wall:.2f}" for wall, _ in ts)
        cpu = min(ts)[1]
        print(
            f"--jobs {jobs}: best {best[jobs]:.2f} s = {docs / best[jobs]:,.0f} docs/s"
            f" (CPU {cpu:.2f} s in that run; all runs: {runs} s)"
        )
    ratio = best[1] / best[args.jobs]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"speed-up --jobs {args.jobs} / --jobs 1: {ratio:.2f}x ({verdict} the {TARGET}x target)")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"machine check again: {calibrate():.2f}x; load average {load}"
        " (other processes on the machine slow --jobs N most)"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
