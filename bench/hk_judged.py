"""Re-measure the precision of large groups on ``zh_hk_news`` against groups judged by reading.

``bench/hk_labels.json`` holds the 40 largest groups nshash made of ``zh_hk_news`` (file order,
before issue 30), 7 groups that entered the 40 largest since (ranks 41-47), and what they held
unlabelled on 2026-12-07 (rank 48, a group; rank 49, an article that joined rank 1) and on
2026-12-08 (rank 50, a group), with each document's story as judged by reading the articles
(ids and story labels only, never the text). This script groups the archive again with a
system and prints:

- pairwise precision over the labelled documents: of the pairs of labelled documents the
  system puts together, the share that are one story (before: 0.56);
- pairwise recall over the labelled pairs that are one story (copies must stay together);
- how many of the judged groups are still mixed, and whether identical texts share a group;
- the system's own 40 largest groups with how many of their documents are labelled: a large
  group made mostly of unlabelled documents is new and needs reading before its precision is
  known.

Usage::

    python3 bench/hk_judged.py                              # nshash, text only
    python3 bench/hk_judged.py --systems nshash,minhash
    python3 bench/hk_judged.py --site                       # pass each article's url too
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from bench.evaluate import DATA_DIR as _EVAL_DATA  # noqa: E402
from bench.evaluate import SYSTEMS, identical_text_violations, run_once  # noqa: E402

LABELS = Path(__file__).with_name("hk_labels.json")
DATA_DIR = Path(os.environ.get("NSHASH_DATA_DIR", _EVAL_DATA))


def load_labels(path: Path = LABELS) -> dict[str, Any]:
    """The judged groups: ``{"groups": [{"rank", "verdict", "stories": {id: story}}]}``."""
    with path.open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def story_of(labels: dict[str, Any]) -> dict[str, str]:
    """Document id -> its story label, over every judged group."""
    return {d: s for g in labels["groups"] for d, s in g["stories"].items()}


def labelled_scores(groups: dict[str, Hashable], stories: dict[str, str]) -> dict[str, float]:
    """Pairwise precision and recall of *groups* (doc id -> group) on the labelled documents."""
    together: dict[Hashable, list[str]] = defaultdict(list)
    for d in stories:
        together[groups[d]].append(d)
    claimed = correct = 0
    for members in together.values():
        claimed += len(members) * (len(members) - 1) // 2
        for n in Counter(stories[d] for d in members).values():
            correct += n * (n - 1) // 2
    real = sum(n * (n - 1) // 2 for n in Counter(stories.values()).values())
    return {
        "precision": correct / claimed if claimed else 1.0,
        "recall": correct / real if real else 1.0,
        "claimed_pairs": claimed,
        "true_pairs": real,
    }


class _UrlSystem:
    """nshash given each article's url (activity tracking on)."""

    def __init__(self, urls: list[str | None], **options: Any) -> None:
        import nshash

        self.method = nshash.NSHash.open("memory://", track=True, **options)
        self.urls = iter(urls)

    def add(self, text: str) -> Hashable:
        return self.method.add(text, url=next(self.urls)).similar_id

    def finish(self, labels: list[Hashable]) -> list[Hashable]:
        return [self.method.resolve(x) for x in labels]  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Group the archive with each system and print the judged-group figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--systems", default="nshash")
    p.add_argument("--site", action="store_true", help="pass each article's url (nshash only)")
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    path = args.data_dir / "zh_hk_news.jsonl.gz"
    if not path.is_file():
        print(f"Error: {path} not found (pass --data-dir or set NSHASH_DATA_DIR)", file=sys.stderr)
        return 1
    labels = load_labels()
    stories = story_of(labels)
    ids: list[str] = []
    texts: list[str] = []
    urls: list[str | None] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            ids.append(str(row["id"]))
            texts.append(row["content"])
            urls.append(row.get("url"))
    missing = [d for d in stories if d not in set(ids)]
    if missing:
        print(f"Error: {len(missing)} labelled ids are not in {path}", file=sys.stderr)
        return 1
    for name in args.systems.split(","):
        if name not in SYSTEMS:
            print(f"Error: unknown system {name!r}", file=sys.stderr)
            return 1
        if args.site:
            options = getattr(SYSTEMS[name], "keywords", {})
            got, _ = run_once(lambda o=options: _UrlSystem(urls, **o), texts)  # type: ignore[misc]
        else:
            got, _ = run_once(SYSTEMS[name], texts)
        groups = dict(zip(ids, got, strict=True))
        s = labelled_scores(groups, stories)
        mixed = 0
        for g in labels["groups"]:
            members = list(g["stories"])
            for gid in {groups[d] for d in members}:
                inside = [g["stories"][d] for d in members if groups[d] == gid]
                mixed += len(set(inside)) > 1
        split = len(identical_text_violations(texts, got))
        print(
            f"{name}{' +url' if args.site else ''}: labelled pairs precision {s['precision']:.3f}"
            f" ({s['claimed_pairs']} pairs claimed), recall {s['recall']:.3f}"
            f" ({s['true_pairs']} true pairs); judged groups still mixed: {mixed};"
            f" identical texts split: {split}"
        )
        sizes = Counter(got)
        top = sizes.most_common(args.top)
        known = sum(1 for gid, _ in top for d, x in groups.items() if x == gid and d in stories)
        print(
            f"  its {len(top)} largest groups: sizes {top[0][1]}..{top[-1][1]},"
            f" {sum(n for _, n in top)} documents, {known} of them judged"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
