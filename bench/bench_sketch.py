"""Benchmark: the guard's accuracy against the bytes its sketches take (issue 14).

Every store keeps each group's sketch (8 bytes a value): most of what a document costs. This
bench runs nshash on the labelled sets with other sketch rates (one shingle hash in
``sketch_rate`` enters the sketch) and caps, and prints pairwise F1 per set next to the sketch
values a group holds on average, so a size is chosen from what it costs in accuracy.

Usage::

    python bench/bench_sketch.py                         # rates 8, 16, 32; every set
    python bench/bench_sketch.py --rates 8,16 --caps 256,128 --sets zh_hot,en_hot
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from evaluate import DATA_DIR, MethodSystem, load_corpus, pairwise_scores, run_once  # noqa: E402

SETS = ("zh", "en", "zh_hot", "en_hot")


def measure(
    rate: int, cap: int, sets: list[str], data: Path, limit: int | None = None
) -> dict[str, float]:
    """F1 per set, and the mean sketch values per group, for one size."""
    out: dict[str, float] = {}
    values = groups = 0
    for name in sets:
        corpus = load_corpus(name, data, limit)
        system = MethodSystem("nshash", sketch_rate=rate, sketch_cap=cap)
        tables = system.method.store._t  # type: ignore[attr-defined]
        labels, _ = run_once(lambda system=system: system, corpus.texts)  # type: ignore[misc]
        assert corpus.stories is not None
        out[name] = pairwise_scores(labels, corpus.stories).f1
        values += sum(len(v) for v in tables.sketch.values()) // 8
        groups += len(tables.sketch)
    out["values_per_group"] = values / groups if groups else 0.0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rates", default="8,16,32", help="sketch rates (powers of two)")
    parser.add_argument("--caps", default="256", help="sketch caps")
    parser.add_argument("--sets", default=",".join(SETS), help=f"of {', '.join(SETS)}")
    parser.add_argument("--limit", type=int, default=None, help="the first N documents of each")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    try:
        rates = [int(r) for r in args.rates.split(",")]
        caps = [int(c) for c in args.caps.split(",")]
    except ValueError:
        print("Error: --rates and --caps are comma-separated integers", file=sys.stderr)
        return 2
    sets = [s for s in args.sets.split(",") if s]
    if not args.data_dir.is_dir():
        print(f"Error: {args.data_dir} is missing (the labelled sets of ../shared/data)",
              file=sys.stderr)  # fmt: skip
        return 2
    if set(sets) - set(SETS):
        print(f"Error: unknown set(s); use {', '.join(SETS)}", file=sys.stderr)
        return 2
    print(
        f"{'rate':>5} {'cap':>5} " + " ".join(f"{s:>8}" for s in sets) + "  values/group  B/group"
    )
    for rate in rates:
        for cap in caps:
            r = measure(rate, cap, sets, args.data_dir, args.limit)
            f1 = " ".join(f"{r[s]:>8.4f}" for s in sets)
            v = r["values_per_group"]
            print(f"{rate:>5} {cap:>5} {f1}  {v:>12.1f}  {v * 8:>7.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
