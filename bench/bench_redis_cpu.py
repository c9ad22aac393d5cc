"""Benchmark: the Redis server's instructions per document, nshash against simhash (issue 14).

``INFO cpu`` deltas (what ``bench_scale.py`` prints) swing with the load of a shared machine.
This runs a fresh ``redis-server`` (free loopback port, temp dir, no persistence) under
valgrind's callgrind with instrumentation off, feeds it ``--warm`` documents of
``bench_scale.py``'s synthetic corpus, turns instrumentation on (``callgrind_control -i on``)
for the next ``--docs``, and divides the server's instruction count by them: the same figure
for the same code and documents whatever else the machine is doing. It prints the commands a
document makes (``INFO commandstats``, scripts' own calls included) and the share of the
instructions spent in the commands themselves (callgrind's inclusive count of
``scriptCall``); the rest is Lua and the conversions between Lua and Redis.

Systems, each with its own server, one after the other:

``nshash``
    ``NSHash.open("redis://...").add_many`` in batches of ``--batch`` (one script call a
    document, pipelined).
``simhash``
    ``SimhashDedup.open("redis://...").add`` one at a time (the simhash method's script): the
    baseline, a method whose script does little per document.

``--before DIR`` adds the ``nshash`` system once more with the package of another checkout
(``git worktree add DIR <commit>``, its C extensions built there): the same documents, the
same server, the code of that commit. Issue 14 asks for 3x below the server CPU of the code
it was filed against (``3f7c16a``).

Each system runs in a process of its own (the package it imports is its own).

Usage::

    python bench/bench_redis_cpu.py [--warm 3000] [--docs 2000] [--systems nshash,simhash]
    python bench/bench_redis_cpu.py --before /tmp/nshash-3f7c16a
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_scale import DATA_DIR, DATA_FILE, Corpus  # noqa: E402

SYSTEMS = ("nshash", "simhash")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def totals(out: Path) -> tuple[int, int]:
    """The program's instructions, and those inside ``scriptCall``, from a callgrind file."""
    report = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    total = re.search(r"^\s*([\d,]+)\s+\(100\.0%\)\s+PROGRAM TOTALS", report, re.M)
    inside = re.search(r"^\s*([\d,]+)\s+\([\d.]+%\)\s+\S*:scriptCall\b", report, re.M)
    if total is None:
        raise RuntimeError(f"callgrind_annotate printed no total for {out}")

    def count(match: re.Match[str] | None) -> int:
        return int(match.group(1).replace(",", "")) if match else 0

    return count(total), count(inside)


def measure(system: str, warm: int, docs: int, batch: int, data: Path) -> dict[str, Any]:
    """Run one *system* against its own server under callgrind, fed from the corpus source
    *data*; return its figures."""
    import redis

    from nshash import NSHash, SimhashDedup

    with tempfile.TemporaryDirectory(prefix="nshash-bench-redis-cpu-") as tmp:
        out = Path(tmp) / "callgrind.out"
        port = free_port()
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = redis.Redis(port=port)
            for _ in range(600):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            else:
                raise RuntimeError("redis-server under valgrind did not start in 60 s")
            url = f"redis://127.0.0.1:{port}/0?prefix=cpu"
            stream = Corpus(data).stream(warm + docs)
            if system == "nshash":
                nsh = NSHash.open(url)

                def feed(n: int) -> None:
                    while n > 0:
                        chunk = [next(stream) for _ in range(min(batch, n))]
                        nsh.add_many([{"text": d.text, "id": d.doc_id} for d in chunk])
                        n -= len(chunk)
            else:
                sim = SimhashDedup.open(url)

                def feed(n: int) -> None:
                    for _ in range(n):
                        d = next(stream)
                        sim.add(d.text, doc_id=d.doc_id)

            feed(warm)
            client.config_resetstat()
            control = ["callgrind_control", "-i"]
            subprocess.run([*control, "on", str(server.pid)], check=True, capture_output=True)
            feed(docs)
            subprocess.run([*control, "off", str(server.pid)], check=True, capture_output=True)
            stats = client.info("commandstats")
            commands = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_config|resetstat")
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # the shutdown closes the connection
        finally:
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        total, inside = totals(out)
    return {"system": system, "instructions": total / docs, "in_commands": inside / docs,
            "commands": commands / docs}  # fmt: skip


def spawn(system: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Measure *system* in a process of its own that imports nshash from *root*."""
    cmd = [sys.executable, __file__, "--worker", system, "--nshash-root", str(root)]
    cmd += ["--warm", str(args.warm), "--docs", str(args.docs), "--batch", str(args.batch)]
    cmd += ["--data-dir", str(args.data_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{system} ({root}) failed:\n{done.stderr.strip()}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warm", type=int, default=3000, help="documents before counting")
    parser.add_argument("--docs", type=int, default=2000, help="documents counted")
    parser.add_argument("--batch", type=int, default=100, help="add_many batch for nshash")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--before", type=Path, help="a checkout of an earlier commit to compare")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR, help="where zh_news is")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--nshash-root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        sys.path.insert(0, str(args.nshash_root))
        import nshash

        where = Path(nshash.__file__).resolve()
        if not where.is_relative_to(args.nshash_root.resolve()):
            print(f"Error: nshash came from {where}, not {args.nshash_root}", file=sys.stderr)
            return 1
        data = args.data_dir / DATA_FILE
        print(json.dumps(measure(args.worker, args.warm, args.docs, args.batch, data)))
        return 0
    systems = [s for s in args.systems.split(",") if s]
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "redis-server"):
        if shutil.which(tool) is None:
            print(f"Error: {tool} is not installed", file=sys.stderr)
            return 1
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or args.warm < 0 or args.docs < 1 or args.batch < 1:
        what = (
            f"unknown systems {', '.join(unknown)}"
            if unknown
            else "--docs and --batch must be >= 1"
        )
        print(f"Error: {what}", file=sys.stderr)
        return 1
    if not (args.data_dir / DATA_FILE).is_file():
        print(f"Error: {args.data_dir / DATA_FILE} is missing (pass --data-dir)", file=sys.stderr)
        return 1
    if args.before is not None and not (args.before / "nshash" / "__init__.py").is_file():
        print(f"Error: {args.before} is not a checkout of nshash", file=sys.stderr)
        return 1
    print(f"redis-server under callgrind: {args.docs:,} documents counted after {args.warm:,}")
    runs = [(s, ROOT, s) for s in systems]
    if args.before is not None:
        before_root = args.before.resolve()
        runs.append(("nshash", before_root, f"nshash ({before_root.name})"))
    rows = []
    for system, root, label in runs:
        print(f"  {system} ({root}) ...", flush=True)
        row = spawn(system, root, args)
        row["system"] = label
        rows.append(row)
    base = next((r for r in rows if r["system"] == "simhash"), None)
    now = next((r for r in rows if r["system"] == "nshash"), None)
    before = rows[-1] if args.before is not None else None
    width = max(len(r["system"]) for r in rows)
    print(f"{'system':<{width}} {'instructions/doc':>17} {'in commands':>12} {'commands/doc':>13}"
          f" {'x simhash':>10} {'before/now':>11}")  # fmt: skip
    for r in rows:
        ratio = f"{r['instructions'] / base['instructions']:.2f}" if base else ""
        gain = f"{before['instructions'] / r['instructions']:.2f}" if before and r is now else ""
        share = r["in_commands"] / r["instructions"]
        print(f"{r['system']:<{width}} {r['instructions']:>17,.0f} {share:>12.0%}"
              f" {r['commands']:>13.1f} {ratio:>10} {gain:>11}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
