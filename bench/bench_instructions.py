"""Benchmark: CPU instructions per document, nshash (compiled and pure) against the seed.

Instruction counts (valgrind's callgrind) do not swing with the load of a shared machine the
way wall-clock time does. Every system runs in its own process under callgrind, once over 0
documents and once over the first ``--docs`` (300) documents of each set, with the same
imports, the same documents read and the same warm-up in both runs: the difference divided by
the number of documents is the cost per document, start-up subtracted.

Systems (each a fresh instance per run, documents fed one at a time in file order):

``seed``
    ``bench/seed_nshash.py``: the seed algorithm as released (``get_similar``), the reference.
``nshash``
    ``NSHash.open("memory://").add(text)`` with the compiled kernel (if it is built).
``nshash-pure``
    the same with ``NSHASH_PURE=1``: the pure-Python text path.
``journaled``
    ``NSHash.open("memory:///TMP/bench.pkl").add(text)``: the durable memory store (journal,
    ``fsync`` everysec), in a new temporary directory.
``original``
    ``NSHash(name, hashdb="memory").get_similar(text)``: the original release's API, which
    keeps a journaled ``name.hashdb.pkl`` (issue 29's target for these two: >= 0.8x the docs/s
    of ``nshash`` in the same run).
``prepare``, ``prepare-pure``
    ``Fingerprinter.prepare`` alone (the text path, no store), compiled and pure.

The ratio printed is the seed's instructions over the system's ("x seed speed"; issue 15's
target is >= 1.0x for ``nshash`` on ``zh_reposts_dev``, its bar 0.6x).

**Steady state** (issue 29): ``--windows 1500:3000`` counts documents 1,500 to 3,000 of each
set instead (runs over the first 1,500 and the first 3,000, the difference divided by the
documents placed between them: 1,500, or fewer in a set that ends sooner, such as the 785 of
``en_reposts_dev``'s 2,285; start-up and the earlier documents subtracted).
``--synthetic 100000:101000`` counts documents 100,000 to 101,000 of the synthetic stream of
``bench_scale.py`` (set ``synth``):
the first 100,000 are placed once, outside callgrind, and the state saved (the seed's
pickled; nshash's a memory store snapshot, whose tables a ``memory://`` store adopts); each
counted run loads that state, then places none or all of the window's documents. Then docs/s of the
library (``add`` over whole sets, the passes of the systems interleaved, best of
``--repeat``) for the same systems, measured in this run.

Usage::

    python bench/bench_instructions.py [--docs 300] [--sets zh,en,hk] [--jobs 2] [--data-dir D]
    python bench/bench_instructions.py --no-callgrind       # docs/s only
    python bench/bench_instructions.py --windows 1500:3000 --synthetic 100000:101000 \
        --systems seed,nshash --no-throughput              # steady state
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("NSHASH_DATA_DIR", ROOT.parent / "shared" / "data"))
SETS = {
    "zh": "zh_reposts_dev.jsonl.gz",
    "en": "en_reposts_dev.jsonl.gz",
    "hk": "zh_hk_news.jsonl.gz",
}
SYSTEMS = ("seed", "nshash", "nshash-pure", "prepare", "prepare-pure", "journaled", "original")
#: A text that fills every lazy table (traditional script, full-width forms, Latin) before
#: anything is counted; both runs of a pair do it, so it cancels out.
WARM_UP = "预热一下，繁體字。Ｗａｒｍ up: 1, 2. 第二句話在這裡，還有一些文字。"


def read_texts(path: Path, limit: int | None = None) -> list[str]:
    """The text of each record (``text``, else ``content``) of a gzipped JSONL file."""
    texts: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(texts) >= limit:
                break
            record = json.loads(line)
            texts.append(record.get("text") or record.get("content") or "")
    return texts


def adopt(url: str) -> object:
    """An NSHash on a ``memory://`` store holding the tables saved at the memory store *url*
    (copied first: each run its own), as if it had placed those documents itself."""
    from nshash import NSHash

    path = url.removeprefix("memory://")
    tmp = tempfile.mkdtemp(prefix="nshash-bench-")
    shutil.copy(path, f"{tmp}/state.pkl")
    nsh = NSHash.open(f"memory://{tmp}/state.pkl")
    store: Any = nsh.store
    store._tables = store._file.state  # the loaded tables, now with no file behind them
    store._file.close()
    store._file.join()
    store._file = None
    # What a memory:// store's tables hold with no file: no journal ops kept, no undo (the
    # file left its list of ops, which every placement would then fill and keep).
    store._tables.log = None
    store._tables.undo = None
    shutil.rmtree(tmp, True)
    return nsh


def make_system(name: str, state: str | None = None) -> object:
    """A callable taking one text, for system *name* (fresh state, or the one saved at
    *state*: see :func:`save_state`)."""
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    from seed_nshash import SeedNSHash

    from nshash import EmptyDocumentError, Fingerprinter, NSHash

    if name == "seed":
        if state is not None:
            with open(state, "rb") as fh:
                seed: SeedNSHash = pickle.load(fh)
            return seed.get_similar
        return SeedNSHash().get_similar
    if name.startswith("prepare"):
        prepare = Fingerprinter().prepare
        prepare(WARM_UP)
        step = prepare
    elif name in ("journaled", "original"):
        import atexit

        tmp = tempfile.mkdtemp(prefix="nshash-bench-")
        if name == "journaled":
            nsh = NSHash.open(f"memory://{tmp}/bench.pkl")
            step = nsh.add
        else:
            nsh = NSHash(f"{tmp}/bench", hashdb="memory")
            step = nsh.get_similar
        nsh.prepare(WARM_UP)
        atexit.register(shutil.rmtree, tmp, True)
        atexit.register(nsh.close)
    else:
        nsh = NSHash.open("memory://") if state is None else adopt(state)
        nsh.prepare(WARM_UP)
        step = nsh.add

    def run(text: str) -> object:
        try:
            return step(text)
        except EmptyDocumentError:
            return None

    return run


def worker(name: str, path: str, count: int, docs: int, state: str | None = None) -> None:
    """What runs under callgrind: read *docs* texts, set up, feed the first *count*."""
    texts = read_texts(Path(path), docs)
    run = make_system(name, state)
    gc.disable()
    for text in texts[:count]:
        run(text)


def env_for(name: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(ROOT))
    env.pop("NSHASH_PURE", None)
    if name.endswith("-pure"):
        env["NSHASH_PURE"] = "1"
    return env


def callgrind(name: str, path: Path, count: int, docs: int, state: str | None = None) -> int:
    """Total instructions of one worker run under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--worker", name, str(path), str(count), str(docs),
            state or "-",
        ]  # fmt: skip
        done = subprocess.run(cmd, env=env_for(name), capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"callgrind run failed ({name}, {count}):\n{done.stderr[-2000:]}")
        found = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.M)
        if not found:
            raise SystemExit(f"no instruction total in callgrind's output ({name})")
        return int(found.group(1))


def save_state(system: str, stream: Iterable[str], where: Path) -> str:
    """Place *stream* with *system* (``seed`` or ``nshash``) and save its state under
    *where*: the seed pickled, nshash as a memory store snapshot. Returns where it is."""
    if system == "seed":
        seed = make_system("seed").__self__  # type: ignore[attr-defined]
        for text in stream:
            seed.get_similar(text)
        out = where / "seed.pickle"
        with open(out, "wb") as fh:
            pickle.dump(seed, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return str(out)
    from nshash import EmptyDocumentError, NSHash

    url = f"memory://{where}/nshash.pkl"
    with NSHash.open(url, fsync="no") as nsh:
        for text in stream:
            try:
                nsh.add(text)
            except EmptyDocumentError:
                pass
        nsh.store.save()  # type: ignore[attr-defined]
    return url


def synthetic(data: Path, systems: list[str], first: int, last: int, where: Path) -> dict[str, str]:
    """Write documents *first* to *last* of the synthetic stream to ``where/synth.jsonl.gz``
    and save each system's state after the ones before (see :func:`save_state`)."""
    from bench_scale import Corpus

    corpus = Corpus(data / "zh_news.jsonl.gz")
    texts = [d.text for d in corpus.stream(last)]
    with gzip.open(where / "synth.jsonl.gz", "wt", encoding="utf-8") as fh:
        for text in texts[first:]:
            fh.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return {s: save_state(s, texts[:first], where) for s in systems if s in ("seed", "nshash")}


def instructions(
    data: Path,
    systems: list[str],
    sets: list[str],
    window: tuple[int, int],
    jobs: int,
    states: dict[str, str] | None = None,
) -> None:
    """Print instructions per document for every system and set over documents *window*
    (from, to) of each, and the ratios; *states* holds each system's saved state (the
    ``synth`` set: its window starts where that state ends)."""
    low, high = window
    # A set shorter than the window is counted to its end: its documents past *low*.
    ends = {k: high if k == "synth" else min(high, len(read_texts(data / SETS[k]))) for k in sets}
    for k, end in ends.items():
        if end <= low:
            raise SystemExit(f"Error: set {k!r} has no documents past {low:,}")
    runs = [(s, k, c) for s in systems for k in sets for c in window]

    def one(r: tuple[str, str, int]) -> int:
        name, k, count = r
        if k == "synth":
            assert states is not None
            return callgrind(name, data, count - low, high - low, states[name])
        return callgrind(name, data / SETS[k], count, high)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        totals = dict(zip(runs, pool.map(one, runs), strict=True))
    print(
        f"\nInstructions per document (callgrind, documents {low:,} to {high:,} or the set's"
        " end, start-up and the earlier documents subtracted)"
    )
    print(f"{'set':<5} {'system':<14} {'docs':>12} {'instr/doc':>12} {'x seed speed':>13}")
    for k in sets:
        docs = ends[k] - low
        per = {s: (totals[(s, k, high)] - totals[(s, k, low)]) / docs for s in systems}
        for s in systems:
            ratio = f"{per['seed'] / per[s]:.3f}x" if "seed" in per and per[s] > 0 else "-"
            span = f"{low:,}-{ends[k]:,}"
            print(f"{k:<5} {s:<14} {span:>12} {per[s]:>12,.0f} {ratio:>13}")
        sys.stdout.flush()


def throughput(data: Path, systems: list[str], sets: list[str], repeat: int) -> None:
    """Print docs/s of each system over whole sets: passes interleaved, best of *repeat*; by
    the wall clock, and by the CPU time of the process (all its threads: on a shared,
    loaded machine, what a system costs is read more steadily there)."""
    print("\nLibrary docs/s (whole sets, best of", repeat, "interleaved passes; wall, then CPU)")
    head = f"{'set':<4} {'system':<14} {'docs':>7} {'docs/s':>10} {'x seed':>8} {'x nshash':>9}"
    print(f"{head} {'cpu docs/s':>11} {'x nshash':>9}")
    for k in sets:
        texts = read_texts(data / SETS[k])
        best = {s: 0.0 for s in systems}
        cpu = {s: 0.0 for s in systems}
        for _ in range(repeat):
            for s in systems:
                # The pure systems need the kernel off for the whole process: a subprocess.
                cmd = [sys.executable, __file__, "--time", s, str(data / SETS[k])]
                done = subprocess.run(cmd, env=env_for(s), capture_output=True, text=True)
                if done.returncode != 0:
                    raise SystemExit(f"timing run failed ({s}):\n{done.stderr[-2000:]}")
                wall, used = map(float, done.stdout.split())
                best[s] = max(best[s], wall)
                cpu[s] = max(cpu[s], used)
        for s in systems:
            ratio = f"{best[s] / best['seed']:.3f}x" if "seed" in best else "-"
            mine = f"{best[s] / best['nshash']:.3f}x" if "nshash" in best else "-"
            by_cpu = f"{cpu[s] / cpu['nshash']:.3f}x" if "nshash" in cpu else "-"
            line = f"{k:<4} {s:<14} {len(texts):>7} {best[s]:>10,.0f} {ratio:>8} {mine:>9}"
            print(f"{line} {cpu[s]:>11,.0f} {by_cpu:>9}")
        sys.stdout.flush()


def time_one(name: str, path: str) -> None:
    texts = read_texts(Path(path))
    run = make_system(name)
    gc.disable()
    started, began = time.perf_counter(), time.process_time()
    for text in texts:
        run(text)
    wall, used = time.perf_counter() - started, time.process_time() - began
    print(len(texts) / wall, len(texts) / used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=DATA)
    parser.add_argument("--docs", type=int, default=300, help="count documents 0 to DOCS")
    parser.add_argument("--windows", help="count documents FROM:TO of each set instead")
    parser.add_argument(
        "--synthetic", help="count documents FROM:TO of the synthetic stream too (seed, nshash)"
    )
    parser.add_argument("--sets", default="zh,en,hk")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--jobs", type=int, default=2, help="callgrind runs side by side")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-callgrind", action="store_true")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--time", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, path, count, docs, state = args.worker
        worker(name, path, int(count), int(docs), None if state == "-" else state)
        return 0
    if args.time:
        time_one(*args.time)
        return 0
    data: Path = args.data_dir
    sets = args.sets.split(",")
    systems = args.systems.split(",")
    for k in sets if sets != [""] else []:
        if k not in SETS or not (data / SETS[k]).exists():
            print(f"Error: data set {k!r} not found under {data}", file=sys.stderr)
            return 2
    sys.path.insert(0, str(ROOT))
    from nshash.text.kernel import kernel_info

    print("text path:", kernel_info())
    if not args.no_callgrind:
        if shutil.which("valgrind") is None:
            print("Error: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
            return 2
        window = (0, args.docs)
        if args.windows:
            low, high = map(int, args.windows.split(":"))
            window = (low, high)
        if sets != [""]:
            instructions(data, systems, sets, window, args.jobs)
        if args.synthetic:
            low, high = map(int, args.synthetic.split(":"))
            with tempfile.TemporaryDirectory() as tmp:
                print(f"\nplacing the first {low:,} documents of the synthetic stream...")
                sys.stdout.flush()
                states = synthetic(data, systems, low, high, Path(tmp))
                instructions(
                    Path(tmp) / "synth.jsonl.gz", list(states), ["synth"], (low, high),
                    args.jobs, states,
                )  # fmt: skip
    if not args.no_throughput and sets != [""]:
        throughput(data, systems, sets, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
