"""The Scrapy pipeline: real crawls of a loopback site in subprocesses, and the pipeline's own
rules driven in-process with a real store.

The site serves ``example/articles.jsonl`` as HTML pages (an index linking one page per
article, each with a header and footer around the article). The crawls run
``example/crawl_pages.py``, which is the project's Scrapy example, so the example is tested too.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("scrapy")

import scrapy  # noqa: E402
from scrapy.exceptions import DropItem  # noqa: E402
from scrapy.settings import Settings  # noqa: E402

from nshash import ConfigError, NSHash  # noqa: E402
from nshash.cli import main  # noqa: E402
from nshash.scrapy import NSHashPipeline, PipelineSettings  # noqa: E402
from tests.test_service_uvicorn import UvicornServer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"
EXAMPLE = REPO / "example" / "crawl_pages.py"


def load_example() -> ModuleType:
    """Import ``example/crawl_pages.py`` (it is a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("crawl_pages", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """A loopback HTTP site of the example articles; yields its index URL."""
    example = load_example()
    pages = {
        "/" + path: page.encode("utf-8")
        for path, page in example.render_site(example.read_articles(ARTICLES)).items()
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body or b"<html><body>Not found</body></html>")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def dedup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, bool]]:
    """``nshash dedup`` on the articles: id -> (similar_id, duplicate)."""
    out = tmp_path_factory.mktemp("dedup") / "out.jsonl"
    assert main(["dedup", str(ARTICLES), "-q", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return {r["id"]: (r["similar_id"], r["duplicate"]) for r in rows}


@dataclass
class Crawl:
    """What one crawl left: its items, Scrapy's stats and what it printed."""

    items: list[dict[str, Any]]
    stats: dict[str, Any]
    stdout: str


def crawl(tmp_path: Path, name: str, *args: str) -> Crawl:
    """Run the example spider in a subprocess with *args*; return what it left."""
    items, stats = tmp_path / f"{name}.jsonl", tmp_path / f"{name}-stats.json"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "-o", str(items), "--stats", str(stats), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**_env(), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = items.read_text(encoding="utf-8").splitlines() if items.exists() else []
    return Crawl([json.loads(x) for x in lines], json.loads(stats.read_text()), done.stdout)


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}


def check_tagged(result: Crawl, dedup: dict[str, tuple[int, bool]]) -> None:
    """Every article came out once, with the similar_id and duplicate flag dedup gives it."""
    got = {item["id"]: (item["similar_id"], item["duplicate"]) for item in result.items}
    assert len(result.items) == len(got) == 30
    assert got == dedup
    assert result.stats["nshash/items"] == 30
    assert result.stats["nshash/duplicates"] == sum(d for _, d in dedup.values()) == 19
    assert result.stats["nshash/new"] == 11
    assert "江城地铁5号线今日开通运营  (5 copies, similar_id 1)" in result.stdout


def check_dropped(result: Crawl, dedup: dict[str, tuple[int, bool]]) -> None:
    """Reposts were dropped and counted, by Scrapy and by nshash; the rest are tagged."""
    first = {doc_id: sid for doc_id, (sid, dup) in dedup.items() if not dup}
    assert {item["id"]: item["similar_id"] for item in result.items} == first
    assert not any(item["duplicate"] for item in result.items)
    assert result.stats["item_dropped_count"] == 19
    assert result.stats["item_dropped_reasons_count/DropItem"] == 19
    assert result.stats["nshash/dropped"] == 19
    assert result.stats["item_scraped_count"] == 11


@pytest.mark.slow
class TestCrawl:
    """Real Scrapy crawls (subprocesses) of the loopback site through the pipeline."""

    def test_embedded_store(
        self, site: str, dedup: dict[str, tuple[int, bool]], tmp_path: Path
    ) -> None:
        """An embedded store gives every item dedup's similar_id; drop drops the reposts
        (this crawl on Twisted's own epoll reactor, where the pipeline answers Deferreds)."""
        tagged = crawl(tmp_path, "tag", "--start-url", site)
        check_tagged(tagged, dedup)
        articles = {json.loads(x)["id"]: json.loads(x) for x in ARTICLES.read_text().splitlines()}
        for item in tagged.items:  # the pages carried the texts dedup read
            lines = [x.strip() for x in articles[item["id"]]["content"].splitlines()]
            assert item["text"] == "\n".join(x for x in lines if x)
        reactor = "TWISTED_REACTOR=twisted.internet.epollreactor.EPollReactor"
        check_dropped(crawl(tmp_path, "drop", "--start-url", site, "--drop", "-s", reactor), dedup)

    def test_through_the_service(
        self, site: str, dedup: dict[str, tuple[int, bool]], tmp_path: Path
    ) -> None:
        """Through a running ``nshash serve``: the same ids; a second crawler process shares
        the state, so every page replays its first answer and drop drops the same reposts."""
        server = UvicornServer(
            {"NSHASH_STORE_URL": "memory://"},
            cwd=tmp_path,
            command=[sys.executable, "-m", "nshash", "serve", "--port", "{port}"],
        )
        server.start()
        try:
            check_tagged(
                crawl(tmp_path, "tag", "--start-url", site, "--service", server.url), dedup
            )
            again = crawl(tmp_path, "again", "--start-url", site, "--service", server.url, "--drop")
        finally:
            server.stop()
        check_dropped(again, dedup)
        assert again.stats["nshash/replayed"] == 30


class Stats:
    """A stats sink with Scrapy's ``inc_value`` (the crawls above use Scrapy's own)."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def inc_value(self, key: str, count: int = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count


class Article(scrapy.Item):
    """An item class that declares the fields nshash sets."""

    text = scrapy.Field()
    url = scrapy.Field()
    similar_id = scrapy.Field()
    duplicate = scrapy.Field()


class Bare(scrapy.Item):
    """An item class without them."""

    text = scrapy.Field()


STORY = "The council voted to repair the old mill bridge before the winter floods arrive."


def run_items(settings: PipelineSettings, items: list[Any]) -> tuple[list[Any], Stats]:
    """Open a pipeline, pass *items* through it on an asyncio loop, close it."""
    stats = Stats()
    pipeline = NSHashPipeline(settings, stats)

    async def go() -> list[Any]:
        await pipeline.open_spider()
        try:
            out = []
            for item in items:
                try:
                    out.append(await pipeline.process_item(item))
                except DropItem as exc:
                    out.append(exc)
            return out
        finally:
            await pipeline.close_spider()

    return asyncio.run(go()), stats


class TestPipeline:
    """The pipeline's rules, in-process on a real store."""

    def test_settings(self) -> None:
        """Settings are read with their defaults; a contradiction or a typo is ConfigError."""
        s = PipelineSettings.from_settings(Settings({"NSHASH_TEXT_FIELD": "body"}))
        assert (s.store_url, s.service_url, s.text_fields, s.duplicates) == (
            "memory://", None, ("body",), "tag",
        )  # fmt: skip
        listed = PipelineSettings.from_settings({"NSHASH_TEXT_FIELD": "body, content"})
        assert listed.text_fields == ("body", "content")
        service = PipelineSettings.from_settings({"NSHASH_SERVICE_URL": "http://h:1"})
        assert service.store_url is None and service.service_url == "http://h:1"
        for bad in (
            {"NSHASH_STORE_URL": "memory://", "NSHASH_SERVICE_URL": "http://h:1"},
            {"NSHASH_DUPLICATES": "delete"},
            {"NSHASH_RETRIES": "many"},
            {"NSHASH_TEXT_FIELD": [1]},
            {"NSHASH_TEXT_FIELD": ","},
            {"NSHASH_TEXT_FIELD": 5},
            {"NSHASH_SERVICE_URL": 5},
            {"NSHASH_TIMEOUT": "nan"},
            {"NSHASH_TIMEOUT": "inf"},
            {"NSHASH_RETRIES": 1.7},
            {"NSHASH_RETRIES": True},
        ):
            with pytest.raises(ConfigError):
                PipelineSettings.from_settings(bad)

    def test_items_of_every_kind(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Dicts and Items are tagged, list texts joined, textless items passed on and
        counted; store calls run in the pipeline's thread, never on the event loop."""
        threads: list[str] = []
        real_add = NSHash.add

        def add(self: NSHash, *args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real_add(self, *args, **kwargs)

        monkeypatch.setattr(NSHash, "add", add)
        store = f"memory://{tmp_path}/s.pkl"
        items: list[Any] = [
            {"text": STORY, "url": "https://a.example/1"},
            Article(text=["Breaking:", STORY.upper()], url="https://b.example/2"),
            {"title": "no text here"},
            {"text": " ... "},
            {"text": STORY, "url": "https://a.example/1"},  # the same page again: a replay
        ]
        out, stats = run_items(PipelineSettings(store_url=store), items)
        assert out[0]["similar_id"] == out[1]["similar_id"] == out[4]["similar_id"] == 1
        assert (out[0]["duplicate"], out[1]["duplicate"], out[4]["duplicate"]) == (
            False, True, False,
        )  # fmt: skip
        assert out[2] == {"title": "no text here"} and out[3] == {"text": " ... "}
        assert stats.values == {
            "nshash/items": 3,
            "nshash/new": 2,
            "nshash/duplicates": 1,
            "nshash/replayed": 1,
            "nshash/skipped/no_text": 1,
            "nshash/skipped/empty": 1,
        }
        assert threads and all(name.startswith("nshash") for name in threads)
        with NSHash.open(store) as nsh:  # closed cleanly: everything was written
            assert nsh.document("https://b.example/2") is not None
            assert nsh.stats().documents == 2

    def test_drop(self) -> None:
        """With drop, a repost raises DropItem and is counted."""
        items = [{"text": STORY, "id": "a"}, {"text": "Update\n" + STORY, "id": "b"}]
        out, stats = run_items(PipelineSettings(duplicates="drop"), items)
        assert out[0]["similar_id"] == 1
        assert isinstance(out[1], DropItem) and "story 1" in str(out[1])
        assert stats.values["nshash/dropped"] == 1

    def test_ids_of_other_kinds(self) -> None:
        """A float or UUID id is an id (a page crawled again replays its first answer, it is
        not its own repost); an id of a kind no id is passes the item on untouched, counted
        and said, where the item used to be kept as a new document without its id."""
        import uuid

        key = uuid.UUID(int=7)
        items = [
            {"text": STORY, "id": 20240101.0},
            {"text": STORY, "id": 20240101.0},
            {"text": "Another story: the lighthouse keeper retires.", "id": key},
            {"text": "Another story: the lighthouse keeper retires.", "id": key},
            {"text": "A third story, about the orchard.", "id": {"a": 1}},
        ]
        out, stats = run_items(PipelineSettings(), items)
        assert [o.get("duplicate") for o in out] == [False, False, False, False, None]
        assert out[1]["similar_id"] == out[0]["similar_id"]
        assert stats.values["nshash/replayed"] == 2
        assert stats.values["nshash/skipped/refused"] == 1

    def test_items_the_store_refuses_are_passed_on(self) -> None:
        """An item whose url (standing for its id) is too long, or whose text holds a lone
        surrogate, is passed on untouched and counted: it used to vanish from the crawl."""
        items = [
            {"text": STORY, "url": "http://e.com/?" + "q" * 1100},
            {"text": "A text with a lone surrogate \ud800 in it."},
            {"text": "The orchard's harvest came early this year.", "id": "ok"},
        ]
        out, stats = run_items(PipelineSettings(), items)
        assert out[:2] == items[:2] and "similar_id" not in out[0]
        assert out[2]["similar_id"] == 1
        assert stats.values["nshash/skipped/refused"] == 2

    def test_an_empty_text_field_does_not_hide_another(self) -> None:
        items = [
            {"content": "", "text": STORY, "id": "c1"},
            {"text": STORY + " Again.", "id": "c2"},
        ]
        out, _ = run_items(PipelineSettings(), items)
        assert out[0]["similar_id"] == out[1]["similar_id"] and out[1]["duplicate"]

    def test_a_frozen_dataclass_item_is_refused_before_any_write(self) -> None:
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Frozen:
            text: str
            similar_id: int | None = None
            duplicate: bool | None = None

        with pytest.raises(ConfigError, match="frozen dataclass"):
            run_items(PipelineSettings(), [Frozen(STORY)])

    def test_item_class_without_the_fields(self) -> None:
        """An Item class that cannot hold similar_id is a clear ConfigError, before any write."""
        with pytest.raises(ConfigError, match="declare similar_id = scrapy.Field()"):
            run_items(PipelineSettings(), [Bare(text=STORY)])

    def test_unreachable_service(self) -> None:
        """A service that cannot be reached fails the spider's opening with a clear error."""
        from nshash import StoreUnavailableError
        from tests.redis_server import free_port

        settings = PipelineSettings(
            store_url=None, service_url=f"http://127.0.0.1:{free_port()}", retries=0
        )
        with pytest.raises(StoreUnavailableError, match="cannot be reached"):
            run_items(settings, [])
