"""Benchmark: the peak memory of ``nshash dedup`` on one huge line, against a small file.

Writes a gzipped JSONL file of three records whose middle one is one line of ``--line-mib``
MiB (1 GiB by default: a file of about 1 MB), and a file of the two small records alone. Runs
``python -m nshash dedup`` on each in a child process and prints each one's peak resident
memory (its own ``ru_maxrss``), the difference, and the difference over the record limit
(``nshash.cli.io.MAX_RECORD_BYTES``): the line is a bad record read on to its end, never held
whole, so the difference stays within about one limit whatever the line's length.

Usage::

    python bench/bench_hostile.py [--line-mib 1024]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nshash.cli.io import MAX_RECORD_BYTES  # noqa: E402

FIRST = {"id": "a", "text": "Wind turbines were installed on the northern ridge. Power flows."}
LAST = {"id": "c", "text": "The harbour bridge reopened after two years of repairs to its deck."}

#: Runs ``nshash ARGS`` and prints its peak resident memory (KiB) last on stderr.
MEASURED = (
    "import resource, sys\n"
    "from nshash.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def write_inputs(folder: Path, line_mib: int) -> tuple[Path, Path]:
    """The small file and the gzip file with one line of *line_mib* MiB."""
    small = folder / "small.jsonl"
    small.write_text(json.dumps(FIRST) + "\n" + json.dumps(LAST) + "\n", encoding="utf-8")
    big = folder / "big.jsonl.gz"
    pack = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = b"a" * (1 << 20)
    with big.open("wb") as fh:
        fh.write(pack.compress((json.dumps(FIRST) + "\n").encode() + b'{"id": "b", "text": "'))
        for _ in range(line_mib):
            fh.write(pack.compress(chunk))
        fh.write(pack.compress(b'"}\n' + (json.dumps(LAST) + "\n").encode()))
        fh.write(pack.flush())
    return small, big


def peak(path: Path, out: Path) -> tuple[int, float, str]:
    """Run ``nshash dedup PATH -o OUT``: peak memory in bytes, seconds, its summary line."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, "dedup", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    elapsed = time.perf_counter() - started
    lines = done.stderr.strip().splitlines()
    if done.returncode != 0:
        sys.exit(f"nshash dedup {path} failed:\n{done.stderr}")
    summary = next((x for x in lines if x.startswith("nshash dedup:")), "")
    return int(lines[-1]) * 1024, elapsed, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line-mib", type=int, default=1024, help="the long line's MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        small, big = write_inputs(folder, args.line_mib)
        base, base_s, _ = peak(small, folder / "small.out")
        high, high_s, summary = peak(big, folder / "big.out")
        mb = 1e6
        print(f"input: {big.stat().st_size / mb:.1f} MB gzip holding one {args.line_mib} MiB line")
        print(f"small file:   peak {base / mb:6.1f} MB  ({base_s:.2f} s)")
        print(f"huge line:    peak {high / mb:6.1f} MB  ({high_s:.2f} s)  {summary}")
        print(
            f"difference:   {(high - base) / mb:6.1f} MB = {(high - base) / MAX_RECORD_BYTES:.2f}x"
            f" the record limit ({MAX_RECORD_BYTES / mb:.1f} MB);"
            f" {(high - base) / (args.line_mib << 20):.3f}x the line"
        )


if __name__ == "__main__":
    main()
