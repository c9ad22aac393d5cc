"""The held-back analog of the repost sets (bench/reposts.py), on a made-up corpus."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from bench import reposts
from tests.test_stress_sets import _source


@pytest.mark.parametrize("kind", list(reposts.KINDS))
def test_build_is_deterministic_and_labelled(kind: str) -> None:
    """The same kind, language and seed give the same documents; ids are unique and name
    their story, each story's original comes first, and some stories have copies."""
    for lang in ("zh", "en"):
        src = _source(lang, 1200)
        docs = reposts.build(kind, lang, 0, source=src)
        assert docs == reposts.build(kind, lang, 0, source=src)
        assert len({d.id for d in docs}) == len(docs)
        seen: set[str] = set()
        for d in docs:
            assert d.id.startswith(d.story + "-d")
            if d.story not in seen:
                assert d.id.endswith("-d0")  # the original arrives before its copies
                seen.add(d.story)
        sizes = Counter(d.story for d in docs)
        assert len(sizes) == reposts.KINDS[kind].stories[lang]
        assert max(sizes.values()) >= 2 and min(sizes.values()) == 1


def test_hot_stories_have_ten_copies_or_more() -> None:
    """About 30 % of hot stories have 10 to 40 copies besides the original."""
    docs = reposts.build("hot", "en", 0, source=_source("en", 1200))
    sizes = Counter(d.story for d in docs)
    big = [n for n in sizes.values() if n >= 11]
    assert 0.15 <= len(big) / len(sizes) <= 0.45 and max(sizes.values()) <= 41


def test_copies_are_edited_and_wrapped() -> None:
    """Copies differ from their original (all but the few whose only edit found nothing to
    change, on the same site), and every page carries its site's header; heavy sites add a
    related block."""
    src = _source("zh", 1200)
    docs = reposts.build("reposts", "zh", 0, source=src)
    originals = {d.story: d.text for d in docs if d.id.endswith("-d0")}
    copies = [d for d in docs if not d.id.endswith("-d0")]
    same = sum(d.text == originals[d.story] for d in copies)
    assert copies and same * 50 <= len(copies)
    assert all(" > 正文 | " in d.text for d in docs)
    heavy = reposts.build("reposts", "zh", 0, source=src, heavy_sites=True)
    assert any("相关阅读" in d.text for d in heavy)
    assert not any("相关阅读" in d.text for d in docs)


def test_dev_articles_are_left_out(tmp_path: Path) -> None:
    """An article whose longest sentence a dev document holds is not drawn."""
    folder = tmp_path
    src = _source("en", 50)
    held = src.articles[3]
    with gzip.open(folder / "en_reposts_dev.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": "x", "story": "s", "text": "Site\n\n" + held.text(" ")}) + "\n")
    kept, out = reposts.dev_articles_left_out(src, "en", folder)
    assert out >= 1 and held not in kept.articles and len(kept.articles) == 50 - out


def test_bad_arguments_exit_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown kind or language is one Error line and exit status 1."""
    assert reposts.main(["--kinds", "nope"]) == 1
    assert reposts.main(["--langs", "fr"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("Error: ") for line in err)
