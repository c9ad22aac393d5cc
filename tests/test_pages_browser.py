"""The hot-stories pages in a real browser: Playwright driving Debian's Chromium against a real
``nshash serve`` (uvicorn in a subprocess) with an API key set.

The server is fed over HTTP with ``../shared/data/zh_hk_news.jsonl.gz`` (real Hong Kong news,
with its real duplicates; ``NSHASH_DATA_DIR`` points elsewhere) and the example articles of
``example/articles.jsonl``, spread over the last hours so the charts have bars. Every test
records the requests its page makes and checks that none leaves 127.0.0.1, and writes a
screenshot of each page it looks at to one folder under the test run (its path is printed).

Skipped when Playwright or ``/usr/bin/chromium`` is missing (``.ci/run`` installs both), or
when the shared data is absent.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.test_service_uvicorn import UvicornServer

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("NSHASH_CHROMIUM", "/usr/bin/chromium"))
DATA = Path(os.environ.get("NSHASH_DATA_DIR", REPO.parent / "shared" / "data"))
HK_NEWS = DATA / "zh_hk_news.jsonl.gz"
EXAMPLES = REPO / "example" / "articles.jsonl"
KEY = "page-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)


def _examples() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXAMPLES.read_text(encoding="utf-8").splitlines() if line]


def _feed(server: UvicornServer) -> None:
    """Post the Hong Kong corpus (now) and the examples (over the last five hours)."""
    if not HK_NEWS.exists():
        pytest.skip(f"{HK_NEWS} is missing (the shared data is not checked out)")
    now = time.time()
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
        batch: list[dict[str, Any]] = []
        with gzip.open(HK_NEWS, "rt", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                batch.append(
                    {"text": row["content"], "id": row["id"], "title": row["title"],
                     "url": row["url"]}
                )  # fmt: skip
                if len(batch) == 500:
                    assert http.post("/v1/documents/batch", json={"documents": batch}).is_success
                    batch = []
        if batch:
            assert http.post("/v1/documents/batch", json={"documents": batch}).is_success
        for i, article in enumerate(_examples()):
            body = {
                "text": article["content"],
                "id": article["id"],
                "title": article["title"],
                "site": article.get("site"),
                "url": f"http://127.0.0.1:{server.port}/copy/{article['id']}",
                "published_at": now - (4 - i % 5) * 3600,
            }
            assert http.post("/v1/documents", json=body).is_success


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    """One real ``nshash serve`` for the module, with an API key, fed with the corpus."""
    directory = tmp_path_factory.mktemp("pages")
    srv = UvicornServer(
        {"NSHASH_STORE_URL": "memory://", "NSHASH_API_KEY": KEY},
        cwd=directory,
        command=[sys.executable, "-m", "nshash", "serve", "--host", "127.0.0.1",
                 "--port", "{port}"],
    )  # fmt: skip
    srv.start(timeout=60)
    try:
        _feed(srv)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the screenshots go to."""
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Debian's Chromium with a fresh profile (a persistent context in a temp directory)."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


class Page:
    """A browser tab that records every request it makes."""

    def __init__(self, context: Any, base: str) -> None:
        self.base = base
        self.tab = context.new_page()
        self.requests: list[str] = []
        self.tab.on("request", lambda request: self.requests.append(request.url))

    def all_local(self) -> None:
        """Every request went to the test server on 127.0.0.1."""
        assert self.requests
        outside = [u for u in self.requests if not u.startswith(self.base + "/")]
        assert outside == []


@pytest.fixture
def page(browser: Any, server: UvicornServer) -> Iterator[Page]:
    """A tab logged in with the key (by ``?key=``, which sets the cookie and redirects)."""
    tab = Page(browser, server.url)
    tab.tab.goto(f"{server.url}/check?key={KEY}")
    assert "key=" not in tab.tab.url
    try:
        yield tab
    finally:
        tab.tab.close()


def _api(server: UvicornServer, path: str) -> Any:
    response = httpx.get(server.url + path, headers=AUTH, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


class TestHotStoriesPage:
    """The front page, a story page, the paste form, the key, the docs."""

    def test_lists_largest_stories_in_order(
        self, page: Page, server: UvicornServer, shots: Path
    ) -> None:
        """The page shows the API's ranking: most copies first, with headline and sites."""
        tab = page.tab
        response = tab.goto(f"{server.url}/?since=24h")
        assert response is not None and response.status == 200
        rows = tab.locator("#hot tr.story")
        expected = _api(server, "/v1/groups?since=24h&min_size=2&limit=30")["groups"]
        assert rows.count() == len(expected) == 30
        ids = [int(r.get_attribute("data-id")) for r in rows.all()]
        counts = [int(r.get_attribute("data-recent")) for r in rows.all()]
        assert ids == [g["similar_id"] for g in expected]
        assert counts == sorted(counts, reverse=True) and counts[0] >= 5
        largest = _api(server, "/v1/groups?min_size=2&limit=1")["groups"][0]
        assert counts[0] == largest["size"]
        first = rows.first
        assert first.locator("a.headline").inner_text() == (
            expected[0]["title"] or f"Story {expected[0]['similar_id']}"
        )
        metro = tab.locator("tr.story", has_text="江城地铁5号线今日开通运营")
        assert metro.locator("td.sites").inner_text().startswith("江城日报")
        assert metro.locator("svg.spark rect").count() >= 2  # copies spread over hours
        tab.screenshot(path=str(shots / "hot.png"), full_page=True)
        page.all_local()

    def test_story_page_lists_copies(self, page: Page, server: UvicornServer, shots: Path) -> None:
        """Following a headline shows every copy with its link, site and time, and a chart."""
        tab = page.tab
        tab.goto(f"{server.url}/?since=24h")
        tab.locator("a.headline", has_text="江城地铁5号线今日开通运营").click()
        tab.wait_for_url("**/stories/*")
        sid = int(tab.url.rsplit("/", 1)[1])
        group = _api(server, f"/v1/groups/{sid}")
        copies = tab.locator("#copies tr.copy")
        assert copies.count() == group["size"] == 5
        assert [c.locator(".doc-id").inner_text() for c in copies.all()] == [
            m["id"] for m in group["members"]
        ]
        first_link = copies.first.locator("td.story a")
        assert first_link.get_attribute("href") == f"{server.url}/copy/{group['members'][0]['id']}"
        assert "江城日报" in copies.first.inner_text()
        assert tab.locator("svg.chart rect").count() >= 2
        tab.screenshot(path=str(shots / "story.png"), full_page=True)
        page.all_local()

    def test_paste_form_explains_a_repost(
        self, page: Page, server: UvicornServer, shots: Path
    ) -> None:
        """A pasted, edited repost is matched to its story, with the reason and the matched
        sentences highlighted."""
        rain = next(a for a in _examples() if "暴雨" in a["title"])
        sentences = rain["content"].split("\n")
        repost = "转载自某某网\n" + "\n".join(sentences[1:]).replace("，", ",") + "\n(完)"
        tab = page.tab
        tab.goto(f"{server.url}/check")
        tab.fill("#text", repost)
        tab.click("#submit")
        tab.wait_for_selector("#result")
        story = int(tab.locator("#story-link").get_attribute("href").rsplit("/", 1)[1])
        assert story == _api(server, f"/v1/documents/{rain['id']}")["similar_id"]
        assert "shares" in tab.locator("#reason").inner_text()
        assert tab.locator("#candidates td", has_text="joined").count() == 1
        marked = tab.locator("#highlighted mark.hit")
        assert marked.count() >= 2
        assert "转载自某某网" not in " ".join(m.inner_text() for m in marked.all())
        tab.screenshot(path=str(shots / "check.png"), full_page=True)
        page.all_local()

    def test_needs_the_api_key(self, browser: Any, server: UvicornServer, shots: Path) -> None:
        """Without the key the pages show a login form; a wrong key is refused, the right one
        opens the page; the API still wants its header."""
        browser.clear_cookies()
        tab = Page(browser, server.url)
        try:
            response = tab.tab.goto(f"{server.url}/?since=7d")
            assert response is not None and response.status == 401
            assert tab.tab.locator("#hot").count() == 0
            tab.tab.fill("#key", "wrong")
            tab.tab.click("#login")
            assert tab.tab.locator("#wrong").is_visible()
            tab.tab.screenshot(path=str(shots / "login.png"), full_page=True)
            tab.tab.fill("#key", KEY)
            tab.tab.click("#login")
            tab.tab.wait_for_selector("#hot")
            assert tab.tab.url == f"{server.url}/?since=7d"
            assert httpx.get(server.url + "/v1/groups?since=24h").status_code == 401
            tab.all_local()
        finally:
            tab.tab.close()

    def test_docs_load_from_this_server(
        self, page: Page, server: UvicornServer, shots: Path
    ) -> None:
        """Swagger UI at /docs comes from this server: no CDN."""
        tab = page.tab
        tab.goto(f"{server.url}/docs")
        tab.wait_for_selector(".swagger-ui .info .title", timeout=15_000)
        assert "nshash" in tab.locator(".swagger-ui .info .title").inner_text()
        tab.screenshot(path=str(shots / "docs.png"))
        page.all_local()
        assert any(u.endswith("/docs-assets/swagger-ui-bundle.js") for u in page.requests)
