"""The simhash method against PyPI ``simhash``'s ``SimhashIndex`` at the same k.

Feeds ``zh_reposts_dev`` and ``en_reposts_dev`` in file order, one document at a time, to
:class:`nshash.SimhashDedup` on the memory store and to :class:`bench.baselines.SimhashBaseline`,
and prints, from the same run, pairwise precision, recall and F1 (scored by
:func:`bench.evaluate.pairwise_scores`), docs/s and the docs/s ratio. Timing covers the ``add``
calls with the garbage collector off; ``--repeat K`` interleaves the systems K times and keeps
each one's best docs/s (wall clock on a shared machine is noisy: trust the ratio more than the
figures).

``--sweep`` also scores other settings of the method (features per fingerprint) and, for each
index layout, the keys per document and the fingerprints read per lookup (all bucket entries,
the near ones among them).

``--instructions N`` counts CPU instructions per document instead (valgrind's callgrind, which
the load of a shared machine does not sway): each system runs in its own process over 0 and
over the first N documents, and the difference over N is its cost per document::

    python3 bench/bench_simhash.py --data-dir ../shared/data
    python3 bench/bench_simhash.py --sets zh --repeat 3 --sweep
    python3 bench/bench_simhash.py --instructions 300
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench.baselines import SimhashBaseline  # noqa: E402
from bench.evaluate import DATA_DIR, load_corpus, pairwise_scores  # noqa: E402
from nshash.errors import EmptyDocumentError  # noqa: E402
from nshash.methods.simhash import SimhashDedup  # noqa: E402
from nshash.text.simprint import TOP, index_keys, index_layout, simprint  # noqa: E402


class SimprintSystem:
    """The simhash method, :class:`nshash.SimhashDedup` on the memory store."""

    def __init__(self, k: int = 3, top: int = TOP, blocks: int | None = None):
        self.dedup = SimhashDedup.open("memory://", k=k, top=top, blocks=blocks)
        #: Documents refused as empty (each gets a group of its own).
        self.empty = 0

    def add(self, text: str) -> Hashable:
        """Place *text*; an empty document gets a unique negative label."""
        try:
            return self.dedup.add(text).similar_id
        except EmptyDocumentError:
            self.empty += 1
            return -self.empty

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Resolve every id to its canonical id after all merges."""
        return [
            self.dedup.resolve(label) if isinstance(label, int) and label > 0 else label
            for label in labels
        ]


def timed(
    system: SimprintSystem | SimhashBaseline, texts: Sequence[str]
) -> tuple[list[Hashable], float]:
    """Feed *texts*; return the final labels and the seconds the ``add`` calls took."""
    add = system.add
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        labels = [add(t) for t in texts]
        seconds = time.perf_counter() - start
    finally:
        gc.enable()
    return system.finish(labels), seconds


def index_load(fps: Sequence[int], k: int, blocks: int) -> tuple[int, float, float]:
    """Keys per document, and bucket entries read per lookup (all, and within k) when each
    fingerprint is looked up before it is filed."""
    buckets: dict[int, list[int]] = {}
    read = near = 0
    for fp in fps:
        keys = index_keys(fp, k, blocks)
        seen = set()
        for key in keys:
            for other in buckets.get(key, ()):
                read += 1
                if other not in seen and (other ^ fp).bit_count() <= k:
                    seen.add(other)
            buckets.setdefault(key, []).append(fp)
        near += len(seen)
    return len(index_keys(0, k, blocks)), read / len(fps), near / len(fps)


def unrelated(docs: int, k: int, blocks: int) -> float:
    """Expected bucket entries per lookup from *docs* random fingerprints (one per table whose
    key bits all agree by chance)."""
    widths = [64 // blocks + (1 if b < 64 % blocks else 0) for b in range(blocks)]
    return sum(docs / 2.0 ** sum(widths[b] for b in kept) for kept in index_layout(k, blocks))


def _feed(system: str, path: Path, docs: int, k: int, top: int) -> None:
    """Run one system over the first *docs* documents of *path* (the callgrind child)."""
    import gzip
    import json

    with gzip.open(path, "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(docs), f, strict=False)]
    target = SimprintSystem(k=k, top=top) if system == "simprint" else SimhashBaseline(k=k)
    target.add("warm up 热身 text")  # the same imports and tables in the 0-document run
    for text in texts:
        target.add(text)


def instructions(path: Path, docs: int, k: int, top: int) -> dict[str, float]:
    """Instructions per document of each system, start-up subtracted (needs valgrind)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("Error: --instructions needs valgrind on the PATH")
    out: dict[str, float] = {}
    for system in ("simprint", "pypi-simhash"):
        counts = []
        for n in (0, docs):
            run = subprocess.run(
                [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                 __file__, "--feed", system, str(path), str(n), str(k), str(top)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            found = re.search(r"Collected : (\d+)", run.stderr)
            assert found is not None, run.stderr[-2000:]
            counts.append(int(found.group(1)))
        out[system] = (counts[1] - counts[0]) / docs
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="zh,en", help="comma-separated: zh, en")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--top", type=int, default=TOP)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sweep", action="store_true", help="score other settings too")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--instructions", type=int, metavar="N", help="count instructions")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--feed"]:
        _feed(argv[1], Path(argv[2]), int(argv[3]), int(argv[4]), int(argv[5]))
        return 0
    args = parser.parse_args(argv)
    for name in args.sets.split(","):
        missing = args.data_dir / f"{name}_reposts_dev.jsonl.gz"
        if name not in ("zh", "en") or not missing.exists():
            print(f"Error: no set {name!r} at {missing} (see --data-dir)", file=sys.stderr)
            return 2
        if args.instructions:
            path = args.data_dir / f"{name}_reposts_dev.jsonl.gz"
            per_doc = instructions(path, args.instructions, args.k, args.top)
            print(f"{name}: instructions per document over {args.instructions} documents")
            for label, value in per_doc.items():
                print(f"  {label:14s} {value:12,.0f}")
            ratio = per_doc["pypi-simhash"] / per_doc["simprint"]
            print(f"  ratio pypi-simhash / simprint: {ratio:.1f}x")
            continue
        corpus = load_corpus(name, args.data_dir)
        texts, stories = corpus.texts, corpus.stories
        assert stories is not None
        simprint(texts[0])  # load the normalization tables outside the timing
        best: dict[str, float] = {}
        labels: dict[str, list[Hashable]] = {}
        for _ in range(args.repeat):
            for label, factory in (
                ("simprint", lambda: SimprintSystem(k=args.k, top=args.top)),
                ("pypi-simhash", lambda: SimhashBaseline(k=args.k)),
            ):
                got, seconds = timed(factory(), texts)
                labels[label] = got
                best[label] = max(best.get(label, 0.0), len(texts) / seconds)
        print(f"{name} ({len(texts)} docs, k={args.k})")
        for label in ("simprint", "pypi-simhash"):
            s = pairwise_scores(labels[label], stories)
            print(
                f"  {label:14s} P {s.precision:.3f}  R {s.recall:.3f}  F1 {s.f1:.3f}"
                f"  {best[label]:8.0f} docs/s"
            )
        ratio = best["simprint"] / best["pypi-simhash"]
        print(f"  docs/s ratio simprint / pypi-simhash: {ratio:.1f}x")
        if args.sweep:
            for top in (5, 8, 10, 15, 20, 30, 50, 0):
                got, _ = timed(SimprintSystem(k=args.k, top=top), texts)
                s = pairwise_scores(got, stories)
                print(
                    f"  sweep top={top or 'all':>3}"
                    f"  P {s.precision:.3f}  R {s.recall:.3f}  F1 {s.f1:.3f}"
                )
            fps = []
            for text in texts:
                try:
                    fps.append(simprint(text, top=args.top))
                except EmptyDocumentError:
                    pass
            for blocks in range(args.k + 1, args.k + 5):
                keys, read, near = index_load(fps, args.k, blocks)
                print(
                    f"  index blocks={blocks}: {keys:3d} keys/doc, {read:7.2f} entries read"
                    f" per lookup, {near:.2f} within k; unrelated entries per lookup at"
                    f" 1e7 docs: {unrelated(10**7, args.k, blocks):.3g}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
