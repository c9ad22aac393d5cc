"""Hot stories: group a file of articles by story and print the largest groups.

The job the original nshash example did: feed crawled articles one at a time, let reposts of
one story share a ``similar_id``, then list the stories that were reposted the most. Runs on
the in-process ``memory://`` store, so it needs no server and writes nothing.

Usage::

    python example/hot_stories.py                      # example/articles.jsonl
    python example/hot_stories.py articles.jsonl --top 5

The input is JSONL (``.jsonl`` or gzipped ``.jsonl.gz``) with ``id``, ``title`` and
``content`` (or ``text``) per line.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path
from typing import IO

from nshash import EmptyDocumentError, NSHash

HERE = Path(__file__).resolve().parent


def open_text(path: Path) -> IO[str]:
    """Open a JSONL file for reading, gunzipping a ``.gz`` one."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def main() -> None:
    """Group the articles and print the hot stories."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=HERE / "articles.jsonl", type=Path)
    parser.add_argument("--top", type=int, default=10, help="how many stories to show")
    args = parser.parse_args()

    with NSHash.open("memory://") as nsh, open_text(args.file) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                article = json.loads(line)
            except ValueError:
                print(f"line {number}: not JSON, skipped")
                continue
            text = article.get("content") or article.get("text") or ""
            try:
                nsh.add(text, doc_id=str(article.get("id", number)), title=article.get("title"))
            except EmptyDocumentError:
                print(f"line {number}: no text, skipped")

        stats = nsh.stats()
        print(f"{stats.documents} articles, {stats.groups} stories\n")
        for rank, group in enumerate(nsh.groups(min_size=2, limit=args.top), 1):
            first = group.members[0]
            print(f"{rank:>2}. {first.title or first.doc_id}  ({group.size} copies)")
            for member in group.members[1:]:
                print(f"      {member.doc_id}: {member.title}")


if __name__ == "__main__":
    main()
