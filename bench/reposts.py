"""Repost sets built the way the shared dev sets were, from articles the dev sets do not hold.

The dev sets (``zh_reposts_dev``, ``en_reposts_dev``, ``zh_hot_dev``, ``en_hot_dev``) are
saturated, and the judge is held to sets of the same kind built from other articles, with other
sites and other edits. This script builds such sets from the raw corpora (``zh_news``,
``en_news`` in ``../shared/data``), deterministically from a seed, leaving out every article
that a dev set of the language holds, and scores nshash beside MinHash on them (pairwise
precision, recall and F1 per arrival order).

Kinds, as ``../shared/data/README.md`` describes the dev sets:

``reposts``
    half of the stories have only their original, the rest 1 to 8 reposts; every document is
    wrapped by its site (a header, a related block, a footer of the site's own prose and a
    notice shared by all its pages), and each repost carries a random mix of light edits:
    typos in a few sentences, a dropped sentence, a moved paragraph, truncation to 60-90 %,
    an attribution line, full-width letters and digits, swapped punctuation widths, changed
    paragraph breaks, now and then the other script (traditional Chinese, British spelling).
``hot``
    30 % of the stories have 10 to 40 copies, 30 % 1 to 5, the rest none; every copy has the
    light edits, and 60 % of them one to three heavier ones: re-wrapped at a fixed width,
    promotional lines between paragraphs, figures changed, a one- or two-sentence lead on
    top, truncation to 30-60 %, HTML markup left in.

Chinese stories are CCTV items, a third of them template news (meetings, messages of
congratulation or condolence: one formula, other names), the trap the held-back sets hold.

Usage::

    python3 bench/reposts.py                                # both kinds, zh and en, 3 orders
    python3 bench/reposts.py --kinds hot --langs zh --seed 7
    python3 bench/reposts.py --dump reposts --langs en | head   # the generated documents

``en_news`` has 1,313 articles and the dev sets use most of them, so the English sets are
small (``--with-dev`` draws from every article instead: other sites and edits, same articles).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench import stress  # noqa: E402
from bench.evaluate import SYSTEMS  # noqa: E402

__all__ = ["KINDS", "Kind", "build", "dev_articles_left_out", "main"]

#: Language -> the dev sets built from its corpus (their articles are left out).
DEV_SETS = {
    "zh": ("zh_reposts_dev.jsonl.gz", "zh_hot_dev.jsonl.gz"),
    "en": ("en_reposts_dev.jsonl.gz", "en_hot_dev.jsonl.gz"),
}

_FIGURE = re.compile(r"\d+(?:\.\d+)?")
_NAMES_ZH = "王李张刘陈杨赵黄周吴徐孙马朱胡郭何林罗高"
_NAMES_EN = ["Alice Moore", "James Reid", "Priya Shah", "Tom Walsh", "Maria Costa", "Ben Ford"]


def dev_articles_left_out(
    src: stress.Source, lang: str, data_dir: Path
) -> tuple[stress.Source, int]:
    """*src* without the articles a dev set of *lang* holds (an article is held when the key
    of its longest sentence, letters and digits only, appears in a dev document), and how
    many were left out. A missing dev file leaves nothing out."""
    held: list[str] = []
    for name in DEV_SETS[lang]:
        path = data_dir / name
        if path.exists():
            with gzip.open(path, "rt", encoding="utf-8") as f:
                held.extend(stress.text_key(json.loads(line)["text"]) for line in f)
    if not held:
        return src, 0
    everything = "\n".join(held)
    kept = []
    for a in src.articles:
        longest = stress.text_key(max(a.sentences, key=len))[:40]
        if not longest or longest not in everything:
            kept.append(a)
    return stress.Source(src.lang, src.chinese, kept), len(src.articles) - len(kept)


# -- edits -----------------------------------------------------------------------------------
#: Characters a Chinese typo puts in (common ones: a typo is a wrong character, not a rare one).
_CJK_POOL = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工"


def _typo_sentences(paragraphs: list[list[str]], rng: random.Random, chinese: bool) -> None:
    """One to three sentences get one to three characters changed, dropped or put in."""
    pool = _CJK_POOL if chinese else "abcdefghijklmnopqrstuvwxyz"
    spots = [(i, j) for i, p in enumerate(paragraphs) for j in range(len(p))]
    for i, j in rng.sample(spots, min(len(spots), rng.randint(1, 3))):
        chars = list(paragraphs[i][j])
        for _ in range(rng.randint(1, 3)):
            if not chars:
                break
            at = rng.randrange(len(chars))
            kind = rng.random()
            if kind < 0.5:
                chars[at] = rng.choice(pool)
            elif kind < 0.75:
                del chars[at]
            else:
                chars.insert(at, rng.choice(pool))
        paragraphs[i][j] = "".join(chars)


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in text)


_WIDTHS = {"，": ",", "。": ".", "：": ":", "（": "(", "）": ")", "；": ";"}


def _punctuation(text: str, chinese: bool) -> str:
    if chinese:
        return "".join(_WIDTHS.get(c, c) for c in text)
    return text.replace('"', "\u201c").replace("'", "\u2019")


def _attribution(title: str, site: str, rng: random.Random, chinese: bool) -> str:
    if chinese:
        return rng.choice(
            [
                f"原标题：{title}",
                f"来源：{site}",
                f"记者 {rng.choice(_NAMES_ZH)}{rng.choice(_NAMES_ZH)}",
            ]
        )
    return rng.choice(
        [f"Originally published as: {title}", f"Source: {site}", f"By {rng.choice(_NAMES_EN)}"]
    )


def light_copy(
    article: stress.Article, site: stress.Site, rng: random.Random, chinese: bool
) -> str:
    """A repost's body: the article with a random mix of the light edits (at least one)."""
    j = "" if chinese else " "
    paragraphs = [list(p) for p in article.paragraphs]
    edits = [e for e in range(9) if rng.random() < 0.3] or [rng.randrange(9)]
    if 0 in edits:
        _typo_sentences(paragraphs, rng, chinese)
    if 1 in edits and sum(len(p) for p in paragraphs) > 3:
        p = rng.choice([p for p in paragraphs if p])
        p.pop(rng.randrange(len(p)))
    if 2 in edits and len(paragraphs) > 2:
        paragraphs.insert(
            rng.randrange(len(paragraphs)), paragraphs.pop(rng.randrange(len(paragraphs)))
        )
    parts = [j.join(p) for p in paragraphs if p]
    if 7 in edits:  # changed paragraph breaks: two joined, one split
        if len(parts) > 2:
            k = rng.randrange(len(parts) - 1)
            parts[k : k + 2] = [j.join(parts[k : k + 2])]
    text = "\n\n".join(parts)
    if 3 in edits:
        text = text[: int(len(text) * rng.uniform(0.6, 0.9))]
    if 4 in edits:
        line = _attribution(article.title, site.name, rng, chinese)
        text = f"{line}\n\n{text}" if rng.random() < 0.5 else f"{text}\n\n{line}"
    if 5 in edits and chinese:
        text = _full_width(text)
    if 6 in edits:
        text = _punctuation(text, chinese)
    if 8 in edits:
        text = stress._script(text, chinese)
    return text


def heavy(
    text: str, site: stress.Site, lead_pool: list[str], rng: random.Random, chinese: bool
) -> str:
    """*text* with one to three of the heavier edits of the hot sets."""
    for edit in rng.sample(range(6), rng.randint(1, 3)):
        if edit == 0:  # re-wrapped at a fixed width
            width = 30 if chinese else 70
            text = "\n".join(
                line[i : i + width]
                for line in text.split("\n")
                for i in range(0, max(len(line), 1), width)
            )
        elif edit == 1:  # promotional lines between paragraphs
            promo = (
                f"点击关注{site.name}，获取更多资讯"
                if chinese
                else f"Sign up to {site.name} alerts for more stories like this"
            )
            text = f"\n\n{promo}\n\n".join(text.split("\n\n"))
        elif edit == 2:  # figures changed as the story develops
            text = _FIGURE.sub(
                lambda m: (
                    str(int(float(m.group()) * rng.uniform(1.05, 1.5)))
                    if rng.random() < 0.5
                    else m.group()
                ),
                text,
            )
        elif edit == 3:  # a one- or two-sentence lead on top
            text = f"{rng.choice(lead_pool)}\n\n{text}"
        elif edit == 4:
            text = text[: int(len(text) * rng.uniform(0.3, 0.6))]
        else:  # HTML markup left in
            text = "".join(f"<p>{p}</p>\n" for p in text.split("\n\n")).replace("，", "，&nbsp;", 1)
    return text


# -- sets ------------------------------------------------------------------------------------
def _stories(
    src: stress.Source, count: int, rng: random.Random, least: int
) -> list[stress.Article]:
    """*count* articles of *least* characters or more; for Chinese a third are template news
    (see :data:`stress._ZH_KINDS`)."""
    if not src.chinese:
        return src.take(count, max(least, 200), 6000)
    kind = [
        a
        for a in src.articles
        if any(k in a.title for k in stress._ZH_KINDS) and len(a.text("")) >= least
    ]
    rng.shuffle(kind)
    picked = kind[: count // 3]
    src.claim(picked)
    return picked + src.take(count - len(picked), least, 6000)


def _reposts(count: int, rng: random.Random) -> list[int]:
    return [0 if rng.random() < 0.5 else rng.randint(1, 8) for _ in range(count)]


def _hot(count: int, rng: random.Random) -> list[int]:
    out = []
    for _ in range(count):
        r = rng.random()
        out.append(rng.randint(10, 40) if r < 0.3 else rng.randint(1, 5) if r < 0.6 else 0)
    return out


@dataclass(frozen=True)
class Kind:
    """How one kind of set is made."""

    #: Stories per language.
    stories: dict[str, int]
    #: Each story's number of copies besides its original.
    copies: Callable[[int, random.Random], list[int]]
    #: Whether copies get the heavier edits too (60 % of them).
    heavy: bool
    #: The shortest story in characters (a hot story is a full report: its copies are cut
    #: to 30-60 %).
    least: int


KINDS: dict[str, Kind] = {
    "reposts": Kind({"zh": 1000, "en": 100}, _reposts, False, 120),
    "hot": Kind({"zh": 200, "en": 50}, _hot, True, 300),
}


def build(
    kind: str,
    lang: str,
    seed: int = 0,
    data_dir: Path = stress.DATA_DIR,
    with_dev: bool = False,
    source: stress.Source | None = None,
    heavy_sites: bool = False,
) -> list[stress.Doc]:
    """The documents of *kind* in *lang*, in arrival order (each story's original first,
    copies spread over the rest of the stream), from *seed*. A site wraps a page in a header
    and a footer notice, as in the dev sets; *heavy_sites* adds a related block of the site's
    headlines and three sentences of another article to its footer (the stress sets' sites:
    more text shared by unrelated pages)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of: {', '.join(KINDS)}")
    src = source or stress.load_source(lang, seed, data_dir)
    if not with_dev and source is None:
        src, _ = dev_articles_left_out(src, lang, data_dir)
    src = stress.Source(src.lang, src.chinese, list(src.articles))
    rng = random.Random(f"{seed}:{kind}:{lang}")
    spec = KINDS[kind]
    stories = _stories(src, spec.stories.get(lang, 100), rng, spec.least)
    # A lead is the first short sentence of an article drawn from the whole corpus (a site's
    # own intro: a pool of a few would be shared by many copies of other stories).
    most = 40 if src.chinese else 120
    lead_pool = [stress.lead(a, src.joiner, 20)[:most] for a in src.articles if a.sentences]
    prose = 3 if heavy_sites else 0
    sites = [stress.make_site(rng, src, prose) for _ in range(40 if src.chinese else 20)]
    slots: list[tuple[float, stress.Doc]] = []

    def page(at: float, doc_id: str, story: str, body: str, site: stress.Site) -> None:
        text = stress.wrap(site, body, src.chinese, related=heavy_sites)
        slots.append((at, stress.Doc(doc_id, story, text, site.name)))

    for n, (article, copies) in enumerate(
        zip(stories, spec.copies(len(stories), rng), strict=True)
    ):
        story = f"{kind}-{lang}-s{n + 1}"
        start = rng.random()
        page(start, f"{story}-d0", story, article.text(src.joiner), rng.choice(sites))
        for c in range(copies):
            site = rng.choice(sites)
            text = light_copy(article, site, rng, src.chinese)
            if spec.heavy and rng.random() < 0.6:
                text = heavy(text, site, lead_pool, rng, src.chinese)
            page(start + rng.random() * (1 - start), f"{story}-d{c + 1}", story, text, site)
    slots.sort(key=lambda s: s[0])
    return [d for _, d in slots]


def main(argv: Sequence[str] | None = None) -> int:
    """Build the sets, score the systems, print a row per kind, language and system."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--langs", default="zh,en")
    p.add_argument("--systems", default="nshash,minhash")
    p.add_argument("--orders", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=stress.DATA_DIR)
    p.add_argument("--with-dev", action="store_true", help="draw from the dev sets' articles too")
    p.add_argument(
        "--heavy-sites",
        action="store_true",
        help="sites with a related block and prose in the footer (the stress sets' sites)",
    )
    p.add_argument("--dump", metavar="KIND", help="print one kind's documents as JSONL")
    args = p.parse_args(argv)
    try:
        kinds = [k for k in args.kinds.split(",") if k]
        langs = [x for x in args.langs.split(",") if x]
        systems = [s for s in args.systems.split(",") if s]
        for k in kinds + ([args.dump] if args.dump else []):
            if k not in KINDS:
                raise ValueError(f"unknown kind {k!r}; expected one of: {', '.join(KINDS)}")
        for x in langs:
            if x not in DEV_SETS:
                raise ValueError(f"unknown language {x!r}; expected zh or en")
        for s in systems:
            if s not in SYSTEMS:
                raise ValueError(f"unknown system {s!r}; expected one of: {', '.join(SYSTEMS)}")
        if args.orders < 1:
            raise ValueError("--orders must be at least 1")
    except ValueError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    if args.dump:
        for lang in langs:
            for d in build(
                args.dump, lang, args.seed, args.data_dir, args.with_dev, None, args.heavy_sites
            ):
                print(json.dumps(d.__dict__, ensure_ascii=False))
        return 0
    head = f"{'kind':<9} {'lang':<4} {'system':<9} {'docs':>5} {'stories':>7}"
    print(f"{head} {'P':>6} {'R':>6} {'F1':>6}  F1 per order")
    for kind in kinds:
        for lang in langs:
            docs = build(
                kind, lang, args.seed, args.data_dir, args.with_dev, None, args.heavy_sites
            )
            stories = len({d.story for d in docs})
            for system in systems:
                rows = stress.score(system, docs, args.orders)
                mean = {
                    k: sum(r[k] for r in rows) / len(rows) for k in ("precision", "recall", "f1")
                }
                per = " ".join(f"{r['f1']:.4f}" for r in rows)
                print(
                    f"{kind:<9} {lang:<4} {system:<9} {len(docs):>5} {stories:>7} "
                    f"{mean['precision']:.4f} {mean['recall']:.4f} {mean['f1']:.4f}  {per}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
