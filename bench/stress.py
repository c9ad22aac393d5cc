"""Stress sets for the judge: pages whose text besides the story decides nothing.

Builds labelled sets from the shared raw corpora (``zh_news``, ``en_news``, ``zh_hk_news`` in
``../shared/data``), one scenario per kind of trap, deterministically from a seed, and scores
nshash beside MinHash on them: pairwise precision, recall and F1 per scenario, language and
arrival order, and the spread of F1 between orders.

Scenarios (every page is wrapped by its site: a header, a "related articles" block listing
the site's recent headlines, a footer of the site's own prose; all drawn from the corpus and
the seed, so another seed gives other sites and other boilerplate):

``hot``
    hot stories copied by dozens of sites, each copy lightly edited, beside unrelated
    articles of the same sites.
``briefs``
    stories with full copies on established sites, then a new site whose pages are short
    briefs (the lead only) of some of them and of unrelated articles.
``big_short``
    one story copied 90 times over a dozen sites, followed by short unrelated pages of the
    same sites.
``excerpt``
    700-character pages holding a 150-character excerpt of a story (the rest: the site's
    wrapper and teasers of unrelated articles) beside full copies of it.
``long``
    20,000-character pages: a 2,000-character story, then comments and infinite-scroll
    blocks (the site's recent articles, shared by its long pages) beside normal copies.
``typo2``, ``typo4``, ``typo6``
    copies with 2, 4 or 6 % of their letters changed (CJK characters in Chinese).
``variants``
    copies with paragraphs reordered or in another script (traditional Chinese; British
    spelling and typographic quotes in English), digests quoting the leads of three stories
    (each digest its own story) and follow-ups (a new article reusing one paragraph of an
    earlier story: its own story).
``template``
    template news: one formula, different names and facts. Chinese: real CCTV items of one
    kind (meetings, messages of congratulation or condolence); English: a formula paragraph
    whose names and figures change, above each story's own facts. Each story has reposts.
``bio``
    columnists whose bio (or a series blurb on top) ends every article; some articles are
    reposted, and some pages hold nothing but a caption, the bio and the footer (each its own
    story).

Arrival orders: order 0 is the natural one (each scenario's story order: originals, then
copies, then the trap pages), orders 1, 2, ... are fixed shuffles.

Usage::

    python3 bench/stress.py                                 # every scenario, zh and en, 3 orders
    python3 bench/stress.py --scenarios big_short,typo4 --langs en --orders 2
    python3 bench/stress.py --systems nshash --seed 7       # other sites, other boilerplate
    NSHASH_PURE=1 python3 bench/stress.py --systems nshash  # the Python reference judge
    python3 bench/stress.py --dump big_short --langs en | head   # the generated documents

Systems come from :data:`bench.evaluate.SYSTEMS`, plus ``nshash-site`` (nshash given each
page's site, with activity tracking on).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `bench` and `nshash` importable
    sys.path.insert(0, str(_ROOT))

from bench.evaluate import DATA_DIR as _EVAL_DATA  # noqa: E402
from bench.evaluate import SYSTEMS, pairwise_scores, run_in_order, shuffled  # noqa: E402

#: Where the raw corpora are: ``$NSHASH_DATA_DIR``, else ``../shared/data`` beside the checkout.
DATA_DIR = Path(os.environ.get("NSHASH_DATA_DIR", _EVAL_DATA))

__all__ = [
    "LANGS",
    "SCENARIOS",
    "Doc",
    "Source",
    "build",
    "load_source",
    "text_key",
    "main",
]


@dataclass(frozen=True)
class Doc:
    """One generated page: its id, the story it tells, its text and its site."""

    id: str
    story: str
    text: str
    site: str


@dataclass(frozen=True)
class Article:
    """A raw corpus article: title and paragraphs (each a list of sentences)."""

    title: str
    paragraphs: tuple[tuple[str, ...], ...]

    @property
    def sentences(self) -> list[str]:
        return [s for p in self.paragraphs for s in p]

    def text(self, joiner: str) -> str:
        return "\n\n".join(joiner.join(p) for p in self.paragraphs)


#: Language -> (corpus file, text field, Chinese?).
LANGS: dict[str, tuple[str, str, bool]] = {
    "zh": ("zh_news.jsonl.gz", "content", True),
    "en": ("en_news.jsonl.gz", "content", False),
    "hk": ("zh_hk_news.jsonl.gz", "content", True),
}

_ZH_SENT = re.compile(r"(?<=[。！？!?；])")
_EN_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_LEAD = re.compile(
    r"^\*\*[^*]{1,20}\*\*[（(][^）)]{1,12}[）)][：:]"
)  # CCTV's "**央视网消息**（…）："
_HK_FOOT = re.compile(r"\n-{3,}\n.*\Z", re.S)  # the subscription footer and blog bio of zh_hk_news
_MARKUP = re.compile(r"\*\*|#{1,4} |\{\{\}\}")
_NOT_WORD = re.compile(r"[\W_]+")


@dataclass
class Source:
    """A language's articles, shuffled by the seed, handed out without repeats."""

    lang: str
    chinese: bool
    articles: list[Article]
    _next: int = 0
    _used: set[int] = field(default_factory=set)

    @property
    def joiner(self) -> str:
        return "" if self.chinese else " "

    def take(self, count: int, least: int = 0, most: int = 1 << 30) -> list[Article]:
        """The next *count* articles whose text is *least* to *most* characters long."""
        out: list[Article] = []
        for _ in range(len(self.articles)):
            if len(out) == count:
                return out
            i = self._next % len(self.articles)
            self._next += 1
            a = self.articles[i]
            if (
                i not in self._used
                and least <= len(a.text(self.joiner)) <= most
                and len(a.sentences) >= 3
            ):
                self._used.add(i)
                out.append(a)
        raise ValueError(f"{self.lang}: the corpus ran out of articles for the scenarios")

    def claim(self, articles: Sequence[Article]) -> None:
        """Mark *articles* (found with :meth:`take_where`) handed out: :meth:`take` skips them."""
        wanted = {id(a) for a in articles}
        self._used.update(i for i, a in enumerate(self.articles) if id(a) in wanted)

    def take_where(self, count: int, keep: Callable[[Article], bool]) -> list[Article]:
        """*count* articles (from all, not only those not handed out) for which *keep* holds."""
        found = [a for a in self.articles if keep(a)]
        return found[:count]


def _split(text: str, chinese: bool) -> tuple[tuple[str, ...], ...]:
    paragraphs = []
    for para in re.split(r"\n\s*\n|\n", text):
        para = _MARKUP.sub("", para).strip()
        if not para:
            continue
        parts = _ZH_SENT.split(para) if chinese else _EN_SENT.split(para)
        sentences = tuple(s.strip() for s in parts if s.strip())
        if sentences:
            paragraphs.append(sentences)
    return tuple(paragraphs)


def text_key(text: str) -> str:
    """*text*'s letters and digits, casefolded: two texts with one key are one text (what
    :func:`load_source` reads once, and what :mod:`bench.reposts` looks for in the dev sets)."""
    return _NOT_WORD.sub("", text).casefold()


def load_source(lang: str, seed: int, data_dir: Path = DATA_DIR) -> Source:
    """Read language *lang*'s corpus and shuffle it with *seed*."""
    file_name, key, chinese = LANGS[lang]
    articles = []
    seen: set[str] = set()
    with gzip.open(data_dir / file_name, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            text = _LEAD.sub("", row[key]).strip()
            if lang == "hk":
                text = _HK_FOOT.sub("", text)
            # A corpus holds some articles twice (en_news 53 times): one is kept, or two
            # stories of a scenario could be one article and their pages right to group.
            same = text_key(text)
            if same in seen:
                continue
            seen.add(same)
            paragraphs = _split(text, chinese)
            if paragraphs:
                articles.append(Article(str(row.get("title") or ""), paragraphs))
    random.Random(seed).shuffle(articles)
    return Source(lang, chinese, articles)


# -- sites -----------------------------------------------------------------------------------
_ZH_SYLL = "华新东方南北星海天云光明长城环球财经都市晨晚时代中原江山嘉和信达通联网报讯"
_EN_SYLL = [
    "north",
    "star",
    "daily",
    "metro",
    "globe",
    "wire",
    "post",
    "city",
    "bay",
    "ridge",
    "times",
    "herald",
    "view",
    "point",
    "line",
    "press",
    "echo",
    "sun",
    "vale",
    "crest",
]


@dataclass
class Site:
    """A site's wrapper: header, footer prose, and the headlines its related block rotates."""

    name: str
    header: str
    footer: str
    headlines: list[str]
    related: int = 4
    shown: int = 0
    scroll: list[str] = field(default_factory=list)

    def related_block(self, chinese: bool) -> str:
        """The next related-articles block: a window over the site's headlines (consecutive
        pages share most of it)."""
        if not self.headlines or not self.related:
            return ""
        start = self.shown // 2
        self.shown += 1
        picks = [self.headlines[(start + i) % len(self.headlines)] for i in range(self.related)]
        title = "相关阅读" if chinese else "Related articles"
        return title + "\n" + "\n".join(picks)


def make_site(rng: random.Random, src: Source, footer_sentences: int = 3) -> Site:
    """A new site: a made-up name, a header line, a footer of prose drawn from an unrelated
    article plus a notice, and a dozen headlines for its related block."""
    zh = src.chinese
    if zh:
        name = "".join(rng.sample(_ZH_SYLL, rng.randint(2, 4))) + rng.choice(
            ["网", "报", "新闻", "在线"]
        )
        section = rng.choice(["国内", "国际", "财经", "社会", "时政", "综合"])
        header = f"{name} > {section} > 正文 | 手机版 | 客户端下载"
        notice = rng.choice(
            [
                f"本文为{name}原创或转载内容，转载请注明出处，违者必究。",
                f"声明：{name}登载此文出于传递更多信息之目的，并不意味着赞同其观点或证实其描述。",
                f"欢迎关注{name}微信公众号，获取更多精彩内容。责任编辑：{rng.choice('王李张刘陈杨赵黄周吴')}{rng.choice('明华军平伟芳娜敏静丽')}",
            ]
        )
    else:
        words = rng.sample(_EN_SYLL, 2)
        name = (words[0] + words[1]).title() + rng.choice([" News", " Online", " Today", ""])
        section = rng.choice(["World", "Business", "Politics", "Local", "Culture"])
        header = f"{name} | Home > {section} | Subscribe | Sign in"
        notice = rng.choice(
            [
                f"Copyright {rng.randint(2001, 2024)} {name}. All rights reserved. This material"
                " may not be published, broadcast, rewritten or redistributed without permission.",
                f"{name} is not responsible for the content of external sites. Read about our"
                " approach to external linking and our editorial guidelines.",
                f"Follow {name} on social media and sign up for our newsletter to get the day's"
                " top stories in your inbox every morning.",
            ]
        )
    prose = src.take(1)[0].sentences[:footer_sentences]
    footer = src.joiner.join(prose + [notice])
    headlines = [a.title for a in rng.sample(src.articles, 12) if a.title]
    return Site(name, header, footer, headlines)


def wrap(site: Site, body: str, chinese: bool, related: bool = True) -> str:
    """*body* as *site* publishes it."""
    parts = [site.header, body]
    if related:
        block = site.related_block(chinese)
        if block:
            parts.append(block)
    parts.append(site.footer)
    return "\n\n".join(parts)


# -- edits -----------------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def typos(text: str, rate: float, rng: random.Random, pool: str) -> str:
    """*text* with *rate* of its letters (CJK characters when *pool* is CJK) replaced by
    another from *pool*."""
    chars = list(text)
    cjk = pool and "\u4e00" <= pool[0] <= "\u9fff"
    spots = [i for i, c in enumerate(chars) if ("\u4e00" <= c <= "\u9fff" if cjk else c.isalpha())]
    for i in rng.sample(spots, int(len(spots) * rate)):
        new = rng.choice(pool)
        if chars[i].isupper():
            new = new.upper()
        chars[i] = new
    return "".join(chars)


def light(article: Article, rng: random.Random, joiner: str) -> str:
    """A lightly edited copy: maybe a sentence dropped, maybe truncated to 75-100 %."""
    paragraphs = [list(p) for p in article.paragraphs]
    sentences = sum(len(p) for p in paragraphs)
    if sentences > 4 and rng.random() < 0.5:
        p = rng.choice([p for p in paragraphs if len(p) > 1] or paragraphs)
        if len(p) > 1:
            p.pop(rng.randrange(len(p)))
    text = "\n\n".join(joiner.join(p) for p in paragraphs if p)
    if rng.random() < 0.4:
        text = text[: int(len(text) * rng.uniform(0.75, 1.0))]
    return text


def lead(article: Article, joiner: str, least: int) -> str:
    """The article's first sentences, at least *least* characters when it has them."""
    out: list[str] = []
    for s in article.sentences:
        out.append(s)
        if len(joiner.join(out)) >= least:
            break
    return joiner.join(out)


# -- scenarios -------------------------------------------------------------------------------
@dataclass
class Builder:
    """Collects one scenario's documents."""

    name: str
    src: Source
    rng: random.Random
    docs: list[Doc] = field(default_factory=list)
    stories: int = 0

    def story(self) -> str:
        self.stories += 1
        return f"{self.name}-{self.src.lang}-s{self.stories}"

    def add(self, story: str, text: str, site: Site) -> None:
        self.docs.append(Doc(f"{story}-d{len(self.docs)}", story, text, site.name))

    def sites(self, count: int, footer_sentences: int = 3) -> list[Site]:
        return [make_site(self.rng, self.src, footer_sentences) for _ in range(count)]


def _hot(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(30)
    for article in src.take(6, 400, 4000):
        story = b.story()
        for site in rng.sample(sites, 25):
            b.add(story, wrap(site, light(article, rng, j), src.chinese), site)
    for article in src.take(120, 300, 4000):
        site = rng.choice(sites)
        b.add(b.story(), wrap(site, article.text(j), src.chinese), site)


def _briefs(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(10)
    stories = [(b.story(), a) for a in src.take(60, 400, 4000)]
    for story, article in stories:
        for site in rng.sample(sites, 2):
            b.add(story, wrap(site, light(article, rng, j), src.chinese), site)
    new = make_site(rng, src, footer_sentences=2)
    least = 100 if src.chinese else 250
    pages = [(story, lead(a, j, least)) for story, a in stories[:40]]
    pages += [(b.story(), lead(a, j, least)) for a in src.take(40, 300, 4000)]
    rng.shuffle(pages)
    for story, text in pages:
        b.add(story, wrap(new, text, src.chinese), new)


def _big_short(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(12)
    article = src.take(1, 800, 4000)[0]
    story = b.story()
    for i in range(90):
        site = sites[i % len(sites)]
        b.add(story, wrap(site, light(article, rng, j), src.chinese), site)
    least = 60 if src.chinese else 150
    for a in src.take(240, 300, 4000):
        site = rng.choice(sites)
        b.add(b.story(), wrap(site, lead(a, j, least), src.chinese), site)


def _page_of(site: Site, middle: str, teasers: list[str], size: int, chinese: bool) -> str:
    """A page of about *size* characters: the wrapper, *middle*, then teasers to fill it."""
    body = [middle]
    page = wrap(site, "\n\n".join(body), chinese)
    for t in teasers:
        if len(page) + len(t) > size:
            break
        body.append(t)
        page = wrap(site, "\n\n".join(body), chinese, related=False)
    return page


def _excerpt(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(8, footer_sentences=1)
    teasers = [lead(a, j, 80) for a in src.take(60, 200, 4000)]
    stories = [(b.story(), a) for a in src.take(40, 800, 4000)]
    for story, article in stories:
        for site in rng.sample(sites, 2):
            b.add(story, wrap(site, light(article, rng, j), src.chinese), site)
    pages = [(story, a) for story, a in stories]
    pages += [(b.story(), a) for a in src.take(40, 800, 4000)]
    for story, article in pages:
        text = article.text(j).replace("\n\n", j)
        start = rng.randrange(max(1, len(text) - 150))
        piece = text[start : start + 150]
        site = rng.choice(sites)
        b.add(story, _page_of(site, piece, rng.sample(teasers, 12), 700, src.chinese), site)


def _long(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(3)
    for site in sites:  # the site's infinite scroll: its recent articles, on every long page
        site.scroll = [a.text(j) for a in src.take(12, 1000, 4000)]
    comment_pool = [s for a in src.take(40, 300, 4000) for s in a.sentences]
    names = [f"user{rng.randint(100, 9999)}" for _ in range(60)]
    least, most = (1200, 4000) if src.chinese else (1800, 4000)
    for article in src.take(30, least, most):
        story = b.story()
        for site in rng.sample(sites, 2):
            b.add(story, wrap(site, light(article, rng, j), src.chinese), site)
        for _ in range(2):
            site = rng.choice(sites)
            comments = [f"{rng.choice(names)}: {rng.choice(comment_pool)}" for _ in range(40)]
            scroll = rng.sample(site.scroll, 8)
            blocks = [article.text(j)[:2000], "\n".join(comments), *scroll]
            text = "\n\n".join(blocks)
            while len(text) < 20000:
                text += "\n\n" + rng.choice(site.scroll)
            b.add(story, wrap(site, text[:20000], src.chinese), site)


def _typo(rate: float) -> Callable[[Builder], None]:
    def build(b: Builder) -> None:
        src, rng, j = b.src, b.rng, b.src.joiner
        sites = b.sites(10)
        pool = _LETTERS
        if src.chinese:
            pool = "".join(
                sorted({c for a in src.take(20) for c in a.text("") if "\u4e00" <= c <= "\u9fff"})
            )
        for article in src.take(50, 400, 4000):
            story = b.story()
            chosen = rng.sample(sites, 4)
            b.add(story, wrap(chosen[0], article.text(j), src.chinese), chosen[0])
            for site in chosen[1:]:
                b.add(
                    story,
                    wrap(site, typos(light(article, rng, j), rate, rng, pool), src.chinese),
                    site,
                )
        for article in src.take(50, 400, 4000):
            site = rng.choice(sites)
            b.add(b.story(), wrap(site, article.text(j), src.chinese), site)

    return build


_UK = {
    "color": "colour",
    "center": "centre",
    "favorite": "favourite",
    "organization": "organisation",
    "program": "programme",
    "defense": "defence",
    "labor": "labour",
    "analyze": "analyse",
    "percent": "per cent",
    "realize": "realise",
    "recognize": "recognise",
}
_UK_BACK = {v: k for k, v in _UK.items()}


@functools.cache
def _s2t() -> Any:
    """OpenCC's simplified-to-traditional converter (made once: it reads its tables)."""
    import opencc

    return opencc.OpenCC("s2t")


def _script(text: str, chinese: bool) -> str:
    """*text* in its other script: traditional Chinese, or swapped British/American spelling
    with typographic quotes."""
    if chinese:
        return str(_s2t().convert(text))
    for a, b_ in [*_UK.items(), *_UK_BACK.items()]:
        text = re.sub(rf"\b{a}\b", b_, text)
    return text.replace('"', "\u201c").replace("'", "\u2019")


def _variants(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(10)
    stories = [(b.story(), a) for a in src.take(40, 600, 4000)]
    for story, article in stories:
        chosen = rng.sample(sites, 3)
        b.add(story, wrap(chosen[0], article.text(j), src.chinese), chosen[0])
        paragraphs = list(article.paragraphs)
        rng.shuffle(paragraphs)
        moved = "\n\n".join(j.join(p) for p in paragraphs)
        b.add(story, wrap(chosen[1], moved, src.chinese), chosen[1])
        b.add(
            story,
            wrap(chosen[2], _script(light(article, rng, j), src.chinese), src.chinese),
            chosen[2],
        )
    for _ in range(10):  # digests: the leads of three stories, one page
        picked = rng.sample(stories, 3)
        site = rng.choice(sites)
        body = "\n\n".join(
            f"{a.title}\n{lead(a, j, 80 if src.chinese else 250)}" for _, a in picked
        )
        b.add(b.story(), wrap(site, body, src.chinese), site)
    for article in src.take(10, 600, 4000):  # follow-ups: a new article reusing a paragraph
        _, old = rng.choice(stories)
        body = article.text(j) + "\n\n" + j.join(max(old.paragraphs, key=lambda p: len(p)))
        site = rng.choice(sites)
        b.add(b.story(), wrap(site, body, src.chinese), site)


_ZH_KINDS = ("会见", "贺电", "唁电", "致电", "贺信")
_CAP = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]+(?: [A-Z][a-z]+)*")
_NUM = re.compile(r"\d+(?:\.\d+)?")


def _template(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(10)
    if src.chinese:
        kind = [
            a
            for a in src.articles
            if any(k in a.title for k in _ZH_KINDS) and 150 <= len(a.text("")) <= 1500
        ]
        rng.shuffle(kind)
        bodies = [a.text(j) for a in kind[:80]]
    else:
        formulas = src.take(8, 600, 4000)
        names = sorted({m for a in src.take(60) for m in _CAP.findall(a.text(" "))})
        bodies = []
        for formula in formulas:
            frame = j.join(formula.sentences[:3])
            for own in src.take(10, 300, 4000):
                filled = _CAP.sub(lambda _m: rng.choice(names), frame)
                filled = _NUM.sub(lambda _m: str(rng.randint(2, 999)), filled)
                bodies.append(filled + "\n\n" + j.join(own.sentences[:3]))
    for body in bodies:
        story = b.story()
        for site in rng.sample(sites, rng.randint(1, 3)):
            b.add(
                story,
                wrap(
                    site, body if rng.random() < 0.5 else body[: int(len(body) * 0.9)], src.chinese
                ),
                site,
            )


def _bio(b: Builder) -> None:
    src, rng, j = b.src, b.rng, b.src.joiner
    sites = b.sites(6)
    for c in range(8):
        person = src.take(1)[0]
        about = lead(person, j, 60 if src.chinese else 150)[: 120 if src.chinese else 300]
        if c % 2:
            bio = ("本系列：" if src.chinese else "About this series: ") + about
        else:
            bio = ("作者简介：" if src.chinese else "About the author: ") + about
        home = rng.choice(sites)
        least, most = (150, 600) if src.chinese else (400, 1200)
        for article in src.take(8, least, most):
            story = b.story()
            body = article.text(j)
            page = f"{bio}\n\n{body}" if c % 2 else f"{body}\n\n{bio}"
            b.add(story, wrap(home, page, src.chinese, related=False), home)
            if rng.random() < 0.35:
                other = rng.choice([s for s in sites if s is not home])
                copy = light(article, rng, j)
                b.add(story, wrap(other, f"{copy}\n\n{bio}", src.chinese, related=False), other)
        for article in src.take(4):  # a cartoon: a caption, the bio, the footer
            caption = article.title or article.sentences[0][:30]
            b.add(b.story(), wrap(home, f"{caption}\n\n{bio}", src.chinese, related=False), home)


#: Scenario name -> builder.
SCENARIOS: dict[str, Callable[[Builder], None]] = {
    "hot": _hot,
    "briefs": _briefs,
    "big_short": _big_short,
    "excerpt": _excerpt,
    "long": _long,
    "typo2": _typo(0.02),
    "typo4": _typo(0.04),
    "typo6": _typo(0.06),
    "variants": _variants,
    "template": _template,
    "bio": _bio,
}


def build(
    scenario: str, lang: str, seed: int = 0, data_dir: Path = DATA_DIR, source: Source | None = None
) -> list[Doc]:
    """The documents of *scenario* in language *lang*, in natural order, from *seed*.

    The same arguments always give the same documents. *source* (a :func:`load_source` of
    the same language and seed) saves reading the corpus again.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of: {', '.join(SCENARIOS)}")
    if source is None:
        source = load_source(lang, seed, data_dir)
    else:
        source = Source(source.lang, source.chinese, source.articles)
    # Each scenario has its own stream of articles and choices: adding one never changes another.
    offset = list(SCENARIOS).index(scenario)
    source._next = offset * (len(source.articles) // len(SCENARIOS))
    rng = random.Random(f"{seed}:{scenario}:{lang}")
    builder = Builder(scenario, source, rng)
    SCENARIOS[scenario](builder)
    return builder.docs


# -- scoring ---------------------------------------------------------------------------------
#: Systems given each page's site: name -> NSHash options.
SITE_SYSTEMS: dict[str, dict[str, Any]] = {"nshash-site": {}}


class SiteSystem:
    """nshash given each page's site (activity tracking on, so the judge can see it)."""

    def __init__(self, **options: Any) -> None:
        import nshash

        self.method = nshash.NSHash.open("memory://", track=True, **options)
        self.sites: list[str] = []

    def add_page(self, text: str, site: str) -> int:
        return self.method.add(text, site=site).similar_id

    def finish(self, labels: list[Any]) -> list[Any]:
        return [self.method.resolve(x) for x in labels]


def _run(system: str, docs: Sequence[Doc], order: Sequence[int]) -> list[Any]:
    texts = [d.text for d in docs]
    if system not in SITE_SYSTEMS:
        return run_in_order(SYSTEMS[system], texts, order)
    s = SiteSystem(**SITE_SYSTEMS[system])
    got = s.finish([s.add_page(docs[i].text, docs[i].site) for i in order])
    out: list[Any] = [None] * len(docs)
    for i, label in zip(order, got, strict=True):
        out[i] = label
    return out


def score(system: str, docs: Sequence[Doc], orders: int) -> list[dict[str, Any]]:
    """*system*'s pairwise scores on *docs* in each arrival order (0: natural)."""
    truth = [d.story for d in docs]
    rows = []
    for seed in range(orders):
        labels = _run(system, docs, shuffled(len(docs), seed))
        s = pairwise_scores(labels, truth)
        rows.append({"order": seed, "precision": s.precision, "recall": s.recall, "f1": s.f1})
    return rows


def _option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value), the value read as JSON where it parses (numbers)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--option takes KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """Build the scenarios, score the systems, print the table (or dump documents)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--langs", default="zh,en")
    p.add_argument("--systems", default="nshash,minhash")
    p.add_argument("--orders", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--dump", metavar="SCENARIO", help="print one scenario's documents as JSONL")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an NSHash option for the nshash systems (repeatable): --option sketch_cap=1024",
    )
    args = p.parse_args(argv)
    try:
        options = dict(_option(o) for o in args.option)
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if options:
        SYSTEMS["nshash"] = functools.partial(SYSTEMS["nshash"], **options)
        for name in SITE_SYSTEMS:
            SITE_SYSTEMS[name] = {**SITE_SYSTEMS[name], **options}
    scenarios = args.scenarios.split(",")
    langs = args.langs.split(",")
    systems = args.systems.split(",")
    for name in scenarios + ([args.dump] if args.dump else []):
        if name not in SCENARIOS:
            print(
                f"Error: unknown scenario {name!r}; expected one of: {', '.join(SCENARIOS)}",
                file=sys.stderr,
            )
            return 1
    for lang in langs:
        if lang not in LANGS:
            print(
                f"Error: unknown language {lang!r}; expected one of: {', '.join(LANGS)}",
                file=sys.stderr,
            )
            return 1
    for system in systems:
        if system not in SYSTEMS and system not in SITE_SYSTEMS:
            print(f"Error: unknown system {system!r}", file=sys.stderr)
            return 1
    if args.orders < 1:
        print("Error: --orders must be at least 1", file=sys.stderr)
        return 1
    for lang in langs:
        if not (args.data_dir / LANGS[lang][0]).is_file():
            print(
                f"Error: {args.data_dir / LANGS[lang][0]} not found (pass --data-dir or set"
                " NSHASH_DATA_DIR)",
                file=sys.stderr,
            )
            return 1
    sources = {lang: load_source(lang, args.seed, args.data_dir) for lang in langs}
    if args.dump:
        for lang in langs:
            for d in build(args.dump, lang, args.seed, source=sources[lang]):
                print(json.dumps(d.__dict__, ensure_ascii=False))
        return 0
    rows: list[dict[str, Any]] = []
    print(
        f"{'scenario':10} {'lang':4} {'system':12} {'docs':>5} {'stories':>7} "
        f"{'P':>6} {'R':>6} {'F1':>6} {'F1 min':>6} {'spread':>6}  F1 per order",
        flush=True,
    )
    for scenario in scenarios:
        for lang in langs:
            docs = build(scenario, lang, args.seed, source=sources[lang])
            stories = len({d.story for d in docs})
            for system in systems:
                per = score(system, docs, args.orders)
                f1s = [r["f1"] for r in per]
                mean = {k: sum(r[k] for r in per) / len(per) for k in ("precision", "recall", "f1")}
                row = {
                    "scenario": scenario,
                    "lang": lang,
                    "system": system,
                    "docs": len(docs),
                    "stories": stories,
                    **mean,
                    "f1_min": min(f1s),
                    "spread": max(f1s) - min(f1s),
                    "orders": per,
                }
                rows.append(row)
                if not args.json:
                    print(
                        f"{scenario:10} {lang:4} {system:12} {len(docs):5} {stories:7} "
                        f"{mean['precision']:6.3f} {mean['recall']:6.3f} {mean['f1']:6.3f} "
                        f"{min(f1s):6.3f} {row['spread']:6.3f}  "
                        + " ".join(f"{f:.3f}" for f in f1s),
                        flush=True,
                    )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print()
    for system in systems:
        mine = [r for r in rows if r["system"] == system]
        if mine:
            print(
                f"{system}: mean F1 {sum(r['f1'] for r in mine) / len(mine):.3f}"
                f" over {len(mine)} runs, "
                f"lowest {min(r['f1'] for r in mine):.3f}, lowest precision "
                f"{min(r['precision'] for r in mine):.3f}, largest spread "
                f"{max(r['spread'] for r in mine):.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
