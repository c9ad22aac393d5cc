"""Crawl article pages with Scrapy, group them with nshash's pipeline, print the hot stories.

What a Scrapy project does with nshash: the spider extracts each page's title and text, and the
item pipeline ``nshash.scrapy.NSHashPipeline`` gives the item its ``similar_id`` (or drops
reposts). At the end the script asks the store (or the service) for the largest groups.

Without arguments it writes ``example/articles.jsonl`` as HTML pages into a temporary folder
(an index page linking one page per article, each with a site header and footer around the
article) and crawls that folder through ``file://`` URLs, with a store file in the same folder.
Needs ``pip install 'nshash[scrapy]'``.

Usage::

    python example/crawl_pages.py                                  # the example articles
    python example/crawl_pages.py --pages DIR                      # a folder of .html pages
    python example/crawl_pages.py --start-url http://127.0.0.1:8080/    # a site, from there
    python example/crawl_pages.py --service http://127.0.0.1:8000 --drop  # a running service
    python example/crawl_pages.py -o items.jsonl --stats stats.json      # keep what it saw

Pages are fetched one at a time (``--concurrency 1``), in the order of the folder or of the
links, so the ids are the ones ``nshash dedup`` gives the same articles in that order; a real
crawl raises it and gets the same groups, numbered in the order pages arrive.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import scrapy
from scrapy.crawler import CrawlerProcess

HERE = Path(__file__).resolve().parent

PAGE = """<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title} - {site}</title>
<meta name="article-id" content="{id}"></head>
<body><header><nav><a href="../index.html">{site}</a> | Home | News | Sports</nav></header>
<article><h1>{title}</h1>
{paragraphs}
</article>
<footer><p>Copyright {site}. All rights reserved.</p></footer></body></html>
"""

INDEX = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Example articles</title></head>
<body><h1>Example articles</h1><ul>
{links}
</ul></body></html>
"""


def page_path(article_id: str) -> str:
    """The path of an article's page in the site."""
    return f"articles/{quote(article_id, safe='')}.html"


def render_site(articles: list[dict[str, Any]]) -> dict[str, str]:
    """Render articles as a small site: ``{path: html}``, an index page and one per article."""
    pages = {}
    links = []
    for article in articles:
        text = article.get("content") or article.get("text") or ""
        paragraphs = "\n".join(
            f"<p>{html.escape(line)}</p>" for line in text.splitlines() if line.strip()
        )
        title = html.escape(article.get("title") or "")
        path = page_path(str(article["id"]))
        pages[path] = PAGE.format(
            lang="zh" if str(article["id"]).startswith("zh") else "en",
            title=title,
            site=html.escape(article.get("site") or "News"),
            id=html.escape(str(article["id"]), quote=True),
            paragraphs=paragraphs,
        )
        links.append(f'<li><a href="{html.escape(path, quote=True)}">{title}</a></li>')
    pages["index.html"] = INDEX.format(links="\n".join(links))
    return pages


def read_articles(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file of articles (``id``, ``title``, ``content`` or ``text``)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class ArticleSpider(scrapy.Spider):
    """Follows the links of the start pages within their site; yields one item per article.

    An article is the text of the ``<p>`` elements of a page's ``<article>`` (or of the whole
    page when it has none), one paragraph a line; its title is the first ``<h1>`` (or the
    ``<title>``); its id the page's ``<meta name="article-id">``, else the pipeline uses the url.
    """

    name = "articles"

    def __init__(self, urls: list[str], within: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.urls = urls
        self.within = within

    async def start(self) -> AsyncIterator[scrapy.Request]:
        """The start pages, in the order given."""
        for rank, url in enumerate(self.urls):
            yield scrapy.Request(url, priority=-rank)

    def parse(self, response: Any) -> Iterator[Any]:
        """Yield the page's article, then the links to follow, in page order."""
        if not hasattr(response, "css"):  # not HTML
            return
        scope = response.css("article") or response
        lines = [t.strip() for t in scope.css("p::text").getall() if t.strip()]
        if lines:
            item: dict[str, Any] = {
                "url": response.url,
                "title": (
                    scope.css("h1::text").get() or response.css("title::text").get() or ""
                ).strip(),
                "text": "\n".join(lines),
            }
            article_id = response.css('meta[name="article-id"]::attr(content)').get()
            if article_id:
                item["id"] = article_id
            yield item
        for rank, href in enumerate(response.css("a::attr(href)").getall()):
            url = response.urljoin(href)
            if url.startswith(self.within):
                yield response.follow(url, callback=self.parse, priority=-rank)


def hot_stories(args: argparse.Namespace, store_url: str | None, top: int) -> list[Any]:
    """Ask the store (or the service) for the largest groups after the crawl."""
    if args.service:
        from nshash.client import Client

        with Client(args.service, api_key=args.api_key) as client:
            return client.groups(min_size=2, limit=top)
    from nshash import NSHash

    with NSHash.open(store_url or "memory://") as nsh:
        return nsh.groups(min_size=2, limit=top)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, crawl, print the hot stories."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--pages", type=Path, help="a folder of .html pages to crawl")
    where.add_argument("--start-url", help="a site to crawl from this page (links within it)")
    parser.add_argument(
        "--articles", type=Path, default=HERE / "articles.jsonl", help="JSONL rendered as pages"
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--store", help="store URL (default: a file beside the pages)")
    store.add_argument("--service", help="a running nshash service instead, e.g. http://h:8000")
    parser.add_argument("--api-key", help="the service's NSHASH_API_KEY")
    parser.add_argument("--drop", action="store_true", help="drop reposts instead of tagging")
    parser.add_argument("--concurrency", type=int, default=1, help="pages fetched at once")
    parser.add_argument("-o", "--output", type=Path, help="write the items here (JSON lines)")
    parser.add_argument("--stats", type=Path, help="write Scrapy's stats here (JSON)")
    parser.add_argument("--top", type=int, default=5, help="how many stories to show")
    parser.add_argument("-v", "--verbose", action="store_true", help="Scrapy's INFO log")
    parser.add_argument(
        "-s",
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Scrapy setting, as with `scrapy crawl -s` (e.g. TWISTED_REACTOR=...)",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="nshash-crawl-") as tmp:
        if args.start_url:
            urls, within = [args.start_url], urljoin(args.start_url, "./")
        else:
            folder = args.pages
            if folder is None:
                folder = Path(tmp) / "site"
                for path, page in render_site(read_articles(args.articles)).items():
                    (folder / path).parent.mkdir(parents=True, exist_ok=True)
                    (folder / path).write_text(page, encoding="utf-8")
            pages = sorted(p for p in folder.resolve().rglob("*.html") if p.is_file())
            if not pages:
                sys.exit(f"No .html page in {folder}")
            index = [p for p in pages if p.name == "index.html"]
            urls = [p.as_uri() for p in index or pages]
            within = folder.resolve().as_uri() + "/"
        store_url = None if args.service else (args.store or f"memory://{tmp}/nshash.pkl")
        settings: dict[str, Any] = {
            "ITEM_PIPELINES": {"nshash.scrapy.NSHashPipeline": 300},
            "NSHASH_DUPLICATES": "drop" if args.drop else "tag",
            "NSHASH_TEXT_FIELD": "text",
            "CONCURRENT_REQUESTS": args.concurrency,
            "ROBOTSTXT_OBEY": False,
            "TELNETCONSOLE_ENABLED": False,
            "REMOTE_CONTROL_ENABLED": False,
            "LOG_LEVEL": "INFO" if args.verbose else "WARNING",
        }
        if args.service:
            settings["NSHASH_SERVICE_URL"] = args.service
            settings["NSHASH_API_KEY"] = args.api_key
        else:
            settings["NSHASH_STORE_URL"] = store_url
        for pair in args.set:
            name, _, value = pair.partition("=")
            settings[name] = value
        if args.output:
            settings["FEEDS"] = {str(args.output): {"format": "jsonlines", "encoding": "utf8"}}
        process = CrawlerProcess(settings)
        crawler = process.create_crawler(ArticleSpider)
        process.crawl(crawler, urls=urls, within=within)
        process.start()
        stats = crawler.stats.get_stats() if crawler.stats else {}
        if args.stats:
            args.stats.write_text(json.dumps(stats, default=str, indent=1), encoding="utf-8")
        if stats.get("finish_reason") != "finished":
            print(f"The crawl did not finish: {stats.get('finish_reason')}", file=sys.stderr)
            return 1

        kept = stats.get("item_scraped_count", 0)
        dropped = stats.get("nshash/dropped", 0)
        print(
            f"{stats.get('response_received_count', 0)} pages, {kept} items kept,"
            f" {stats.get('nshash/duplicates', 0)} reposts ({dropped} dropped)\n"
        )
        print("Hot stories:")
        for rank, group in enumerate(hot_stories(args, store_url, args.top), 1):
            first = group.members[0] if group.members else None
            label = (first.title or first.doc_id) if first else f"story {group.similar_id}"
            print(f"{rank:>2}. {label}  ({group.size} copies, similar_id {group.similar_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
