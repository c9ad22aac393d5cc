"""The judge's stress sets (bench/stress.py) and the judged zh_hk_news groups
(bench/hk_labels.json)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from bench import stress
from bench.hk_judged import labelled_scores, load_labels, story_of

_WORDS = (
    "market river council report energy school vote price storm bank court health trade film"
    " player budget rail farm data"
).split()
_NAMES = ["Alder", "Brook", "Carver", "Dunmore", "Ellis", "Fenwick", "Garrow", "Hollis"]
_CJK = "经济会议发展合作国家城市农业科技教育文化交通医疗环境能源市场企业工人学生政府法律"


def _source(lang: str, count: int = 1600, seed: int = 1) -> stress.Source:
    """A made-up corpus (no shared data needed): articles of random sentences."""
    rng = random.Random(seed)
    chinese = lang != "en"
    articles = []
    for i in range(count):
        paragraphs = []
        for _ in range(rng.randint(3, 8)):
            sentences = []
            for _ in range(rng.randint(2, 4)):
                if chinese:
                    sentences.append("".join(rng.choices(_CJK, k=rng.randint(30, 70))) + "。")
                else:
                    words = rng.choices(_WORDS, k=rng.randint(10, 22))
                    words[3] = rng.choice(_NAMES)
                    words.append(str(rng.randint(2, 900)))
                    sentences.append(" ".join(words).capitalize() + ".")
            paragraphs.append(tuple(sentences))
        title = ("会见" if chinese and i % 5 == 0 else "") + f"title {i}"
        articles.append(stress.Article(title, tuple(paragraphs)))
    return stress.Source(lang, chinese, articles)


@pytest.fixture(scope="module")
def sources() -> dict[str, stress.Source]:
    """One made-up corpus per language, shared by the tests of this module."""
    return {"zh": _source("zh"), "en": _source("en")}


@pytest.mark.parametrize("scenario", list(stress.SCENARIOS))
def test_build_is_deterministic(scenario: str, sources: dict[str, stress.Source]) -> None:
    """The same scenario, language and seed give the same documents, another seed others."""
    for lang, src in sources.items():
        first = stress.build(scenario, lang, 0, source=src)
        again = stress.build(scenario, lang, 0, source=src)
        assert first == again
        assert first != stress.build(scenario, lang, 5, source=src)


@pytest.mark.parametrize("scenario", list(stress.SCENARIOS))
def test_labels_are_consistent(scenario: str, sources: dict[str, stress.Source]) -> None:
    """Ids are unique, every label names its scenario and language, a document's id names
    its story, and every scenario has ten stories or more, some with several copies."""
    for lang, src in sources.items():
        docs = stress.build(scenario, lang, 0, source=src)
        assert len({d.id for d in docs}) == len(docs)
        for d in docs:
            assert d.story.startswith(f"{scenario}-{lang}-s")
            assert d.id.startswith(d.story + "-d")
            assert d.text and d.site
        sizes = Counter(d.story for d in docs)
        assert max(sizes.values()) >= 2 and len(sizes) >= 10


def test_scenarios_hold_their_traps(sources: dict[str, stress.Source]) -> None:
    """Long pages are 20,000 characters, excerpt pages about 700, the big story has 90
    copies, and typo copies differ from their original in about the asked share of letters."""
    src = sources["en"]
    long = stress.build("long", "en", 0, source=src)
    assert sum(1 for d in long if len(d.text) >= 20000) == 60
    big = Counter(d.story for d in stress.build("big_short", "en", 0, source=src))
    assert big.most_common(1)[0][1] == 90
    rng = random.Random(3)
    text = "abcdefghij" * 100
    changed = sum(a != b for a, b in zip(text, stress.typos(text, 0.04, rng, "xyz"), strict=True))
    assert 30 <= changed <= 40


def test_scoring_runs_on_a_scenario(sources: dict[str, stress.Source]) -> None:
    """Scoring gives one row per arrival order, each with figures in [0, 1]."""
    docs = stress.build("variants", "en", 0, source=sources["en"])[:60]
    rows = stress.score("nshash", docs, 2)
    assert [r["order"] for r in rows] == [0, 1]
    assert all(0.0 <= r[k] <= 1.0 for r in rows for k in ("precision", "recall", "f1"))


def test_bad_arguments_exit_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown scenario or language is one Error line and exit status 1."""
    assert stress.main(["--scenarios", "nope"]) == 1
    assert stress.main(["--langs", "fr"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("Error: ") for line in err)


def test_hk_labels_are_consistent() -> None:
    """The judged groups: the 40 largest before issue 30 and 10 that entered the 40 largest
    since (8 groups of one story, a mixed group, and an article that joined the first),
    each id once, a verdict that agrees with its story labels, and the pairwise precision the
    first 40 record (0.56) recomputed from the file."""
    labels = load_labels()
    groups = labels["groups"]
    assert [g["rank"] for g in groups] == list(range(1, 51))
    ids = [d for g in groups for d in g["stories"]]
    assert len(ids) == len(set(ids))
    for g in groups:
        one = len(set(g["stories"].values())) == 1
        assert g["verdict"] == ("one story" if one else "mixed")
        assert all(s.startswith(f"g{g['rank']}") for s in g["stories"].values())
        assert one or g["note"]
    assert [g["verdict"] for g in groups[40:]] == ["one story"] * 7 + ["mixed"] + ["one story"] * 2
    first = {"groups": groups[:40]}
    as_grouped = {d: g["rank"] for g in groups[:40] for d in g["stories"]}
    scores = labelled_scores(as_grouped, story_of(first))
    assert scores["recall"] == 1.0
    assert round(scores["precision"], 2) == 0.56
    assert sum(g["verdict"] == "mixed" for g in groups) == 12


def test_source_keeps_one_of_an_article_the_corpus_holds_twice(tmp_path: Path) -> None:
    """An article the raw corpus holds twice (punctuation and case aside) is read once: two
    stories of a scenario are never one article, so grouping their pages is never scored
    as wrong."""
    import gzip
    import json

    body = "The council met on Monday. It voted to close the old bridge for repairs."
    rows = [
        {"title": "Bridge", "content": body},
        {"title": "Bridge again", "content": body.upper().replace(".", "!")},
        {"title": "Storm", "content": "A storm hit the coast. Trains stopped for a day."},
    ]
    with gzip.open(tmp_path / "en_news.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    src = stress.load_source("en", 0, tmp_path)
    assert sorted(a.title for a in src.articles) == ["Bridge", "Storm"]
