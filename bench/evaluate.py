"""Accuracy and speed of nshash against the seed algorithm, MinHash LSH and simhash.

Feeds the labelled repost sets (``zh_reposts_dev``, ``en_reposts_dev``) and the hot-story sets
(``zh_hot_dev``, ``en_hot_dev``: many heavily edited copies per story) in file order, one
document at a time, to every system and prints, side by side from the same run: pairwise
precision, recall and F1 against the ``story`` labels, the largest group, docs/s and the docs/s
ratio against the seed. Then runs nshash and the seed over ``zh_hk_news`` (real site
boilerplate, real duplicates) and prints the group count, the largest group with sample titles,
and whether identical texts (ignoring whitespace) always share a group.

Run from anywhere::

    python3 bench/evaluate.py                       # everything
    python3 bench/evaluate.py --sets zh --systems nshash,seed --repeat 5
    python3 bench/evaluate.py --json > figures.json
    python3 bench/evaluate.py --sets zh_hot,en_hot --systems nshash --orders 3 --repeat 1

``--orders K`` also feeds every labelled set in K - 1 shuffled orders (fixed seeds 1, 2, ...)
and prints each order's scores and the spread of F1 over the orders: an online grouping
should not depend on which copy of a story arrives first.

Scoring: a pair of documents is positive when both share a story, predicted positive when the
system put both in one group; precision, recall and F1 are over all such pairs. With no
predicted pairs precision is 1.0 (nothing claimed, nothing wrong); with no true pairs recall is
1.0.

Timing covers the ``add`` calls only (not reading the files, not the final label pass), with
the garbage collector off for every system alike; ``--repeat K`` runs each set K times,
interleaving the systems, and keeps each system's best docs/s.

Systems are pluggable: :data:`SYSTEMS` maps a name to a factory returning an object with
``add(text) -> label`` and ``finish(labels) -> labels`` (see :class:`System`). ``spark``
(named only: ``--systems nshash,spark``; needs pyspark and Java) is the Spark job over the
whole set in arrival order (:class:`SparkSystem`): its scores compare, its docs/s do not (its
``add`` only keeps the text). ``bench/stress.py --systems nshash,spark`` runs it too.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench.baselines import MinHashBaseline, SimhashBaseline  # noqa: E402
from bench.seed_nshash import SeedNSHash  # noqa: E402

#: Where the shared evaluation data lives: ``../shared/data`` next to the repository.
DATA_DIR = _ROOT.parent / "shared" / "data"

#: Set name -> (file name, text field, story field or None, title field or None).
SETS: dict[str, tuple[str, str, str | None, str | None]] = {
    "zh": ("zh_reposts_dev.jsonl.gz", "text", "story", None),
    "en": ("en_reposts_dev.jsonl.gz", "text", "story", None),
    "zh_hot": ("zh_hot_dev.jsonl.gz", "text", "story", None),
    "en_hot": ("en_hot_dev.jsonl.gz", "text", "story", None),
    "hk": ("zh_hk_news.jsonl.gz", "content", None, "title"),
}

#: The systems run over ``hk`` by default (the slow baselines add nothing there).
HK_DEFAULT_SYSTEMS = ("nshash", "seed")

#: The system every docs/s ratio is measured against.
REFERENCE = "seed"


class System(Protocol):
    """**Protocol**: a grouping system under evaluation."""

    def add(self, text: str) -> Hashable:
        """Place one document; return its group label as known now."""
        ...

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Final labels for all documents, given what :meth:`add` returned (merges apply)."""
        ...


class MethodSystem:
    """One of nshash's methods on the memory store; ids are resolved at the end (groups merge).

    Args:
        method: ``"nshash"`` (:class:`nshash.NSHash`), ``"keyed"``
            (:class:`nshash.KeyedDedup`) or ``"simhash"`` (:class:`nshash.SimhashDedup`).
        url: the store.
        **options: the method's options.
    """

    def __init__(self, method: str = "nshash", url: str = "memory://", **options: Any) -> None:
        import nshash

        if method == "keyed":
            options.setdefault("expected_items", 100_000)
        cls = {"nshash": nshash.NSHash, "keyed": nshash.KeyedDedup, "simhash": nshash.SimhashDedup}
        self.method = cls[method].open(url, **options)
        self._empty = nshash.EmptyDocumentError
        #: Documents the method refused as empty (each gets a group of its own).
        self.empty = 0

    def add(self, text: str) -> Hashable:
        """Add *text*; an empty document gets a unique negative label."""
        try:
            return self.method.add(text).similar_id
        except self._empty:
            self.empty += 1
            return -self.empty

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Resolve every id to its canonical id after all merges."""
        resolve = self.method.resolve
        cache: dict[int, int] = {}
        out: list[Hashable] = []
        for label in labels:
            if isinstance(label, int) and label > 0:
                if label not in cache:
                    cache[label] = resolve(label)
                out.append(cache[label])
            else:
                out.append(label)
        self.method.close()
        return out


#: nshash on the memory store.
NSHashSystem = partial(MethodSystem, "nshash")


class SparkSystem:
    """nshash's Spark job (:func:`nshash.spark.dedup`) as a system: :meth:`add` only keeps
    the text, :meth:`finish` groups them all in one run in ``local[2]``, ordered by arrival
    (a batch sees every document at once; the labels are its final groups). One session
    serves every run of the process (it starts on the first, stops at exit).

    Args:
        **options: the :class:`~nshash.NSHash` options, as :func:`nshash.spark.dedup` takes them.
    """

    _session: Any = None

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.texts: list[str] = []

    def add(self, text: str) -> Hashable:
        """Keep *text*; its label comes from :meth:`finish`."""
        self.texts.append(text)
        return len(self.texts) - 1

    @classmethod
    def spark(cls) -> Any:
        """The process's session (:func:`nshash.spark.session`, ``local[2]``)."""
        if cls._session is None:
            import atexit

            from nshash.spark import session

            cls._session = session("local[2]", app="nshash-evaluate")
            atexit.register(cls._session.stop)
        return cls._session

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        """Group the texts kept; a text with no group gets a label of its own."""
        from nshash.spark import dedup

        spark = self.spark()
        rows = [(n, t) for n, t in enumerate(self.texts)]
        df = spark.createDataFrame(rows, "pos long, text string")
        found = {
            r["pos"]: r["similar_id"] for r in dedup(df, id_col="pos", **self.options).collect()
        }
        return [found[n] if found[n] is not None else f"none:{n}" for n in labels]


#: System name -> factory. Add a system by adding an entry.
SYSTEMS: dict[str, Callable[[], System]] = {
    "nshash": NSHashSystem,
    "keyed": partial(MethodSystem, "keyed"),
    "simhash-method": partial(MethodSystem, "simhash"),
    "spark": SparkSystem,
    "seed": SeedNSHash,
    "minhash": MinHashBaseline,
    "simhash": SimhashBaseline,
}


#: Systems run only when named (``spark`` starts a JVM).
ASKED_FOR = ("spark",)


# -- scoring -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairScore:
    """Pairwise precision, recall and F1 of a grouping against the true stories."""

    precision: float
    recall: float
    f1: float
    true_pairs: int
    predicted_pairs: int
    correct_pairs: int


def _pairs(count: int) -> int:
    return count * (count - 1) // 2


def pairwise_scores(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> PairScore:
    """Score *predicted* group labels against *truth* story labels over all document pairs.

    A pair is positive when both documents have the same truth label, predicted positive when
    they have the same predicted label. Labels are compared only within their own sequence.

    Raises:
        ValueError: the sequences differ in length.
    """
    if len(predicted) != len(truth):
        raise ValueError(f"predicted has {len(predicted)!r} labels but truth has {len(truth)!r}")
    correct = sum(_pairs(c) for c in Counter(zip(predicted, truth, strict=True)).values())
    claimed = sum(_pairs(c) for c in Counter(predicted).values())
    real = sum(_pairs(c) for c in Counter(truth).values())
    precision = correct / claimed if claimed else 1.0
    recall = correct / real if real else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return PairScore(precision, recall, f1, real, claimed, correct)


def largest_group(labels: Iterable[Hashable]) -> tuple[Hashable, int]:
    """The most common label and its count (``(None, 0)`` for no labels)."""
    common = Counter(labels).most_common(1)
    return common[0] if common else (None, 0)


_SPACE = re.compile(r"\s+")


def identical_text_sets(texts: Sequence[str]) -> list[list[int]]:
    """Sets of two or more texts that are identical ignoring whitespace, as index lists."""
    by_text: dict[str, list[int]] = defaultdict(list)
    for i, text in enumerate(texts):
        by_text[_SPACE.sub("", text)].append(i)
    return [idx for idx in by_text.values() if len(idx) > 1]


def identical_text_violations(texts: Sequence[str], labels: Sequence[Hashable]) -> list[list[int]]:
    """Sets of identical texts (ignoring whitespace) that are split over several groups.

    Returns:
        For each such set, the indexes of its documents (in order).
    """
    return [idx for idx in identical_text_sets(texts) if len({labels[i] for i in idx}) > 1]


# -- running -------------------------------------------------------------------------------
@dataclass
class Corpus:
    """One evaluation set, loaded."""

    name: str
    path: Path
    ids: list[str]
    texts: list[str]
    stories: list[Hashable] | None
    titles: list[str] | None


def load_corpus(name: str, data_dir: Path, limit: int | None = None) -> Corpus:
    """Read set *name* from *data_dir* (the first *limit* documents)."""
    file_name, text_key, story_key, title_key = SETS[name]
    path = data_dir / file_name
    ids: list[str] = []
    texts: list[str] = []
    stories: list[Hashable] = []
    titles: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if limit is not None and len(texts) >= limit:
                break
            row = json.loads(line)
            ids.append(str(row.get("id", len(ids))))
            texts.append(row[text_key])
            if story_key:
                stories.append(row[story_key])
            if title_key:
                titles.append(str(row.get(title_key) or ""))
    return Corpus(
        name,
        path,
        ids,
        texts,
        stories if story_key else None,
        titles if title_key else None,
    )


@dataclass
class Run:
    """One system's result over one set."""

    system: str
    labels: list[Hashable]
    seconds: list[float] = field(default_factory=list)

    @property
    def best_seconds(self) -> float:
        return min(self.seconds)


def run_once(factory: Callable[[], System], texts: Sequence[str]) -> tuple[list[Hashable], float]:
    """Feed *texts* to a fresh system; return its final labels and the seconds ``add`` took."""
    system = factory()
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


def shuffled(count: int, seed: int) -> list[int]:
    """A fixed shuffle of ``range(count)`` (seed 0: file order)."""
    order = list(range(count))
    if seed:
        random.Random(seed).shuffle(order)
    return order


def run_in_order(
    factory: Callable[[], System], texts: Sequence[str], order: Sequence[int]
) -> list[Hashable]:
    """Feed *texts* in *order* to a fresh system; return the final labels in file order."""
    labels, _ = run_once(factory, [texts[i] for i in order])
    out: list[Hashable] = [None] * len(texts)
    for i, label in zip(order, labels, strict=True):
        out[i] = label
    return out


def order_rows(
    corpus: Corpus, names: Sequence[str], orders: int, progress: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Each system's scores over *orders* arrival orders (file order first) and the F1 spread."""
    assert corpus.stories is not None
    rows = []
    for name in names:
        f1s = []
        for seed in range(orders):
            labels = run_in_order(SYSTEMS[name], corpus.texts, shuffled(len(corpus.texts), seed))
            score = pairwise_scores(labels, corpus.stories)
            f1s.append(score.f1)
            progress(f"  {name}: order {seed} F1 {score.f1:.4f}")
            rows.append({"system": name, "order": seed, **asdict(score)})
        rows.append({"system": name, "order": "spread", "f1": max(f1s) - min(f1s)})
    return rows


def run_systems(
    names: Sequence[str], texts: Sequence[str], repeat: int, progress: Callable[[str], None]
) -> dict[str, Run]:
    """Run every system over *texts* *repeat* times, interleaved; keep all timings."""
    runs: dict[str, Run] = {}
    for r in range(repeat):
        for name in names:
            labels, seconds = run_once(SYSTEMS[name], texts)
            progress(f"  {name}: pass {r + 1}/{repeat} {len(texts) / seconds:,.0f} docs/s")
            if name not in runs:
                runs[name] = Run(name, labels)
            elif labels != runs[name].labels:
                progress(f"  warning: {name} gave different labels on pass {r + 1}")
            runs[name].seconds.append(seconds)
    return runs


def score_set(corpus: Corpus, runs: dict[str, Run]) -> list[dict[str, Any]]:
    """The accuracy and speed rows of a labelled set."""
    assert corpus.stories is not None
    docs = len(corpus.texts)
    ref = runs.get(REFERENCE)
    rows = []
    for name, run in runs.items():
        score = pairwise_scores(run.labels, corpus.stories)
        _, size = largest_group(run.labels)
        rate = docs / run.best_seconds
        row: dict[str, Any] = {"system": name, **asdict(score), "largest_group": size}
        row["groups"] = len(set(run.labels))
        row["docs_per_s"] = rate
        row["ratio_vs_seed"] = rate / (docs / ref.best_seconds) if ref else None
        rows.append(row)
    return rows


def inspect_hk(corpus: Corpus, runs: dict[str, Run], samples: int = 3) -> list[dict[str, Any]]:
    """The real-world rows: group counts, the largest group, identical-text violations."""
    docs = len(corpus.texts)
    ref = runs.get(REFERENCE)
    titles = corpus.titles or [""] * docs
    identical = len(identical_text_sets(corpus.texts))
    rows = []
    for name, run in runs.items():
        sizes = Counter(run.labels)
        label, size = largest_group(run.labels)
        members = [i for i, lab in enumerate(run.labels) if lab == label]
        violations = identical_text_violations(corpus.texts, run.labels)
        rate = docs / run.best_seconds
        rows.append(
            {
                "system": name,
                "docs": docs,
                "groups": len(sizes),
                "groups_2plus": sum(1 for c in sizes.values() if c > 1),
                "top_sizes": sorted(sizes.values(), reverse=True)[:5],
                "groups_over_30": sum(1 for c in sizes.values() if c > 30),
                "largest_group": size,
                "largest_ids": [corpus.ids[i] for i in members[:samples]],
                "largest_titles": [titles[i] for i in members[:samples]],
                "identical_sets": identical,
                "identical_violations": len(violations),
                "violation_examples": [
                    {
                        "ids": [corpus.ids[i] for i in idx],
                        "labels": [run.labels[i] for i in idx],
                    }
                    for idx in violations[:samples]
                ],
                "docs_per_s": rate,
                "ratio_vs_seed": rate / (docs / ref.best_seconds) if ref else None,
            }
        )
    return rows


# -- output --------------------------------------------------------------------------------
def format_scores(corpus: Corpus, rows: list[dict[str, Any]]) -> str:
    """A side-by-side table of one labelled set."""
    stories = len(set(corpus.stories or []))
    lines = [
        f"{corpus.name}: {corpus.path.name}, {len(corpus.texts):,} docs, {stories:,} stories",
        f"{'system':<10} {'precision':>9} {'recall':>7} {'F1':>7} {'largest':>8} {'groups':>7}"
        f" {'docs/s':>9} {'x seed':>7}",
    ]
    for row in rows:
        ratio = row["ratio_vs_seed"]
        lines.append(
            f"{row['system']:<10} {row['precision']:>9.4f} {row['recall']:>7.4f}"
            f" {row['f1']:>7.4f} {row['largest_group']:>8,} {row['groups']:>7,}"
            f" {row['docs_per_s']:>9,.0f} {'-' if ratio is None else f'{ratio:.3f}':>7}"
        )
    return "\n".join(lines)


def format_hk(corpus: Corpus, rows: list[dict[str, Any]]) -> str:
    """The real-world report of ``hk``."""
    lines = [f"hk: {corpus.path.name}, {len(corpus.texts):,} docs"]
    for row in rows:
        ratio = row["ratio_vs_seed"]
        lines += [
            f"{row['system']}: {row['groups']:,} groups ({row['groups_2plus']:,} with 2+ docs,"
            f" {row['groups_over_30']} over 30); top sizes {row['top_sizes']};"
            f" {row['docs_per_s']:,.0f} docs/s"
            + ("" if ratio is None else f" ({ratio:.3f}x seed)"),
            f"  largest group: {row['largest_group']:,} docs, e.g.",
        ]
        for doc_id, title in zip(row["largest_ids"], row["largest_titles"], strict=True):
            lines.append(f"    {doc_id}: {title[:60]}")
        lines.append(
            f"  identical texts (ignoring whitespace): {row['identical_sets']:,} sets,"
            f" {row['identical_violations']:,} split over several groups"
        )
        for example in row["violation_examples"]:
            lines.append(f"    split: ids {example['ids']} -> groups {example['labels']}")
    return "\n".join(lines)


def format_orders(corpus: Corpus, rows: list[dict[str, Any]]) -> str:
    """Scores per arrival order (0 is file order) and the F1 spread of each system."""
    lines = [
        f"{corpus.name}: arrival orders",
        f"{'system':<10} {'order':>6} {'P':>7} {'R':>7} {'F1':>7}",
    ]
    for row in rows:
        if row["order"] == "spread":
            lines.append(f"{row['system']:<10} {'spread':>6} {'':>7} {'':>7} {row['f1']:>7.4f}")
        else:
            lines.append(
                f"{row['system']:<10} {row['order']:>6} {row['precision']:>7.4f}"
                f" {row['recall']:>7.4f} {row['f1']:>7.4f}"
            )
    return "\n".join(lines)


# -- command line --------------------------------------------------------------------------
def _names(value: str, known: Iterable[str], what: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    known = list(known)
    for name in names:
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {name!r}; choose from {', '.join(known)}"
            )
    if not names:
        raise argparse.ArgumentTypeError(f"no {what} given in {value!r}")
    return names


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of this script."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    default = ",".join(s for s in SYSTEMS if s not in ASKED_FOR)
    parser.add_argument(
        "--systems",
        default=default,
        type=lambda v: _names(v, SYSTEMS, "system"),
        help=f"comma-separated systems (default: {default}; also: {','.join(ASKED_FOR)})",
    )
    parser.add_argument(
        "--hk-systems",
        default=",".join(HK_DEFAULT_SYSTEMS),
        type=lambda v: _names(v, SYSTEMS, "system"),
        help=f"systems for the hk set (default: {','.join(HK_DEFAULT_SYSTEMS)})",
    )
    parser.add_argument(
        "--sets",
        default=",".join(SETS),
        type=lambda v: _names(v, SETS, "set"),
        help=f"comma-separated sets (default: {','.join(SETS)})",
    )
    parser.add_argument("--limit", type=_positive, help="only the first N documents of each set")
    parser.add_argument(
        "--repeat", type=_positive, default=3, help="timed passes per system; best counts (3)"
    )
    parser.add_argument(
        "--orders",
        type=_positive,
        default=1,
        help="arrival orders per labelled set: file order, then K-1 fixed shuffles (1)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--data-dir", type=Path, default=DATA_DIR, help=f"where the sets are (default {DATA_DIR})"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the evaluation; return the exit status (0, or 2 when a data file is missing)."""
    args = build_parser().parse_args(argv)
    missing = [
        args.data_dir / SETS[name][0]
        for name in args.sets
        if not (args.data_dir / SETS[name][0]).is_file()
    ]
    if missing:
        for path in missing:
            print(f"error: data file {str(path)!r} not found", file=sys.stderr)
        print(
            "The evaluation data lives in ../shared/data next to the repository"
            " (or pass --data-dir).",
            file=sys.stderr,
        )
        return 2

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    report: dict[str, Any] = {
        "repeat": args.repeat,
        "limit": args.limit,
        "python": sys.version.split()[0],
        "sets": {},
    }
    out: list[str] = []
    for name in args.sets:
        corpus = load_corpus(name, args.data_dir, args.limit)
        systems = args.hk_systems if corpus.stories is None else args.systems
        progress(f"{name}: {len(corpus.texts):,} docs, systems {', '.join(systems)}")
        runs = run_systems(systems, corpus.texts, args.repeat, progress)
        if corpus.stories is None:
            rows = inspect_hk(corpus, runs)
            out.append(format_hk(corpus, rows))
        else:
            rows = score_set(corpus, runs)
            out.append(format_scores(corpus, rows))
        report["sets"][name] = {"file": corpus.path.name, "docs": len(corpus.texts), "rows": rows}
        if corpus.stories is not None and args.orders > 1:
            ordered = order_rows(corpus, systems, args.orders, progress)
            out.append(format_orders(corpus, ordered))
            report["sets"][name]["orders"] = ordered
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        print(f"best of {args.repeat} timed pass(es); docs/s covers add() only\n")
        print("\n\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
