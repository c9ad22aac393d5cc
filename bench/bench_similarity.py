"""How well and how fast each similarity measure tells copied text from independent text.

English: every answer of the Clough & Stevenson short-answer corpus
(``../shared/data/en_plagiarism.jsonl``) is compared with its ``source_doc``; answers labelled
``cut``, ``light`` or ``heavy`` (copied with less or more rewriting) are positives, ``non``
(written independently on the same topic) negatives. Chinese (throughput and a sanity check of
the jieba path): pairs of documents of one story in ``zh_reposts_dev.jsonl.gz`` against pairs
of two random stories.

For every measure it prints the ROC AUC (Mann-Whitney: the chance that a random positive pair
scores above a random negative one, ties half), the mean score of each class, and pairs per
second with each text tokenized afresh for every pair (jieba and its IDF table are loaded
before timing). Baselines measured in the same run: the stdlib ``difflib`` ratio, the PyPI
``simhash`` package on its default features, and seed 000's "similarity" (the ratio of the two
simhash integers, which the seeds use and which is wrong).

Run: ``python bench/bench_similarity.py [--zh-pairs 300] [--repeat 3]``; ``--limits`` prints
only the CPU time of compares at ``/v1/compare``'s size limit (see :func:`limits`).
``NSHASH_DATA_DIR`` names the data folder when it is not ``../shared/data``.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from nshash.toolkit import similarity

_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DATA = Path(os.environ.get("NSHASH_DATA_DIR", _SHARED))

Measure = Callable[[str, str], float]
Pair = tuple[str, str, bool]


def _seed_ratio(a: str, b: str) -> float:
    """Seed 000's simhash "similarity": the smaller fingerprint over the larger one."""
    x, y = similarity.simhash_fingerprint(a), similarity.simhash_fingerprint(b)
    if x == y:
        return 1.0
    return min(x, y) / max(x, y)


def _difflib_ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _pypi_simhash(a: str, b: str) -> float:
    from simhash import Simhash

    distance: int = Simhash(a).distance(Simhash(b))
    return 1.0 - distance / 64


def measures() -> dict[str, Measure]:
    """Every nshash measure, then the baselines (names in brackets)."""
    table: dict[str, Measure] = {
        name: getattr(similarity, name) for name in similarity.METRICS
    }
    table["compare(all six)"] = lambda a, b: min(similarity.compare(a, b).values())
    table["[difflib ratio]"] = _difflib_ratio
    table["[pypi simhash]"] = _pypi_simhash
    table["[seed 000 ratio]"] = _seed_ratio
    return table


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """ROC AUC by the Mann-Whitney U statistic, with average ranks for ties."""
    scored = sorted([(s, True) for s in positives] + [(s, False) for s in negatives])
    rank_sum = 0.0
    i = 0
    while i < len(scored):
        j = i
        while j < len(scored) and scored[j][0] == scored[i][0]:
            j += 1
        mean_rank = (i + 1 + j) / 2  # ranks i+1 .. j share their mean
        rank_sum += mean_rank * sum(1 for _, pos in scored[i:j] if pos)
        i = j
    p, n = len(positives), len(negatives)
    return (rank_sum - p * (p + 1) / 2) / (p * n)


def english_pairs() -> list[Pair]:
    rows = [json.loads(line) for line in (DATA / "en_plagiarism.jsonl").open(encoding="utf-8")]
    by_id = {row["id"]: row for row in rows}
    pairs = []
    for row in rows:
        if row["label"] == "orig":
            continue
        source = by_id[row["source_doc"]]["content"]
        pairs.append((row["content"], source, row["label"] in ("cut", "light", "heavy")))
    return pairs


def chinese_pairs(count: int, seed: int = 7) -> list[Pair]:
    by_story: dict[str, list[str]] = defaultdict(list)
    with gzip.open(DATA / "zh_reposts_dev.jsonl.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            by_story[str(row["story"])].append(row["text"])
    rng = random.Random(seed)
    stories = sorted(by_story)
    reposted = [s for s in stories if len(by_story[s]) > 1]
    pairs: list[Pair] = []
    for story in rng.sample(reposted, min(count, len(reposted))):
        a, b = rng.sample(by_story[story], 2)
        pairs.append((a, b, True))
    for _ in range(count):
        s, t = rng.sample(stories, 2)
        pairs.append((rng.choice(by_story[s]), rng.choice(by_story[t]), False))
    return pairs


def run(name: str, pairs: list[Pair], repeat: int) -> None:
    print(f"\n{name}: {sum(p for *_, p in pairs)} positive and "
          f"{sum(not p for *_, p in pairs)} negative pairs, "
          f"{sum(len(a) + len(b) for a, b, _ in pairs) / (2 * len(pairs)):.0f} chars a text")
    header = f"{'measure':<18} {'AUC':>6} {'mean+':>6} {'mean-':>6} {'pairs/s':>9} {'x difflib':>9}"
    print(header)
    print("-" * len(header))
    results = []
    for label, measure in measures().items():
        measure(pairs[0][0], pairs[0][1])  # warm up: jieba, IDF table, imports
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            scores = [measure(a, b) for a, b, _ in pairs]
            best = min(best, time.perf_counter() - start)
        pos = [s for s, (*_, p) in zip(scores, pairs, strict=True) if p]
        neg = [s for s, (*_, p) in zip(scores, pairs, strict=True) if not p]
        results.append((label, auc(pos, neg), sum(pos) / len(pos), sum(neg) / len(neg),
                        len(pairs) / best))
    reference = dict((r[0], r[4]) for r in results)["[difflib ratio]"]
    for label, area, mpos, mneg, rate in results:
        print(f"{label:<18} {area:>6.3f} {mpos:>6.3f} {mneg:>6.3f} {rate:>9,.0f} "
              f"{rate / reference:>9.2f}")


def _cpu(a: str, b: str) -> float:
    start = time.process_time()
    similarity.compare(a, b)
    return time.process_time() - start


def limits(chars: int = 50_000) -> None:
    """CPU seconds of one compare (all measures) of two texts at ``/v1/compare``'s limit:
    one character repeated (jieba's worst case: no dictionary word, one HMM stretch), rare
    characters in a random order, and real news text; and, as the baseline measured in this
    run, the repeated character at a fifth of the length with jieba given whole runs (no
    ``MAX_JIEBA_RUN`` cut, as before)."""
    from nshash.text import tokenize

    similarity.compare("热门新闻", "新闻热门")  # jieba's dictionary and IDF table, once
    rng = random.Random(3)
    rare = "鬯鬲鬼魃魈魍魉魑魅魔卤鹿麦麻黍黹黾鼎鼓鼠鼻齐齿龟龠"
    news = "".join(
        json.loads(line)["content"] for line in gzip.open(DATA / "zh_news.jsonl.gz", "rt")
        if rng.random() < 0.05
    )
    cases = {
        "的 x N vs 是 x N": ("的" * chars, "是" * chars),
        "rare characters": (
            "".join(rng.choice(rare) for _ in range(chars)),
            "".join(rng.choice(rare) for _ in range(chars)),
        ),
        "zh_news text": (news[:chars], news[chars : 2 * chars]),
    }
    print(f"\n== compare at the limit ({chars:,} characters a text), CPU seconds ==")
    for label, (a, b) in cases.items():
        print(f"{label:<22} {_cpu(a, b):>7.2f}")
    short = chars // 5
    cut = _cpu("的" * short, "是" * short)
    kept = tokenize.MAX_JIEBA_RUN
    tokenize.MAX_JIEBA_RUN = 1 << 62
    try:
        whole = _cpu("的" * short, "是" * short)
    finally:
        tokenize.MAX_JIEBA_RUN = kept
    print(f"的 x {short:,}: runs cut {cut:.2f} s, whole runs (baseline) {whole:.2f} s,"
          f" {whole / cut:.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zh-pairs", type=int, default=300,
                        help="positive and negative Chinese pairs each (0: skip)")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs; the best counts")
    parser.add_argument("--limits", action="store_true",
                        help="only the CPU time of compares at the size limit (see limits())")
    args = parser.parse_args(argv)
    if not (DATA / "en_plagiarism.jsonl").exists():
        print(f"Benchmark data not found in {DATA}: this script reads ../shared/data/ "
              "relative to the repository root.", file=sys.stderr)
        return 1
    if args.limits:
        limits()
        return 0
    run("en_plagiarism (answer vs its source)", english_pairs(), args.repeat)
    if args.zh_pairs > 0:
        run("zh_reposts_dev (same story vs random)", chinese_pairs(args.zh_pairs), args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
