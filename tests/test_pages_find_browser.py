"""Finding stories in a real browser: Playwright driving Debian's Chromium against a real
``nshash serve`` fed with ``../shared/data/zh_hk_news.jsonl.gz`` at the articles' own dates
(Hong Kong noon of each ``date``), at desktop and at phone width.

A search by headline, a site filter, a from/to range over 2019 in Hong Kong time, the page
links, a story page's copies and chart, and the pages' answer to bad input. Each test writes
screenshots to one folder (its path is printed) and checks that no request left 127.0.0.1.

Skipped when Playwright, ``/usr/bin/chromium`` or the shared data is missing.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.test_service_uvicorn import UvicornServer

sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("NSHASH_CHROMIUM", "/usr/bin/chromium"))
DATA = Path(os.environ.get("NSHASH_DATA_DIR", REPO.parent / "shared" / "data"))
HK_NEWS = DATA / "zh_hk_news.jsonl.gz"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]  # fmt: skip
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    """One real ``nshash serve`` (Hong Kong time by default), fed with the HK archive."""
    if not HK_NEWS.exists():
        pytest.skip(f"{HK_NEWS} is missing (the shared data is not checked out)")
    srv = UvicornServer(
        {"NSHASH_STORE_URL": "memory://", "NSHASH_TIMEZONE": "Asia/Hong_Kong"},
        cwd=tmp_path_factory.mktemp("find-pages"),
        command=[sys.executable, "-m", "nshash", "serve", "--host", "127.0.0.1",
                 "--port", "{port}"],
    )  # fmt: skip
    srv.start(timeout=60)
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            batch: list[dict[str, Any]] = []
            with gzip.open(HK_NEWS, "rt", encoding="utf-8") as fh:
                for line in fh:
                    row = json.loads(line)
                    doc = {"text": row["content"], "id": row["id"], "title": row["title"],
                           "url": row["url"]}  # fmt: skip
                    if row.get("date"):
                        doc["published_at"] = f"{row['date']}T12:00:00+08:00"
                    batch.append(doc)
                    if len(batch) == 500:
                        assert http.post(
                            "/v1/documents/batch", json={"documents": batch}
                        ).is_success
                        batch = []
            if batch:
                assert http.post("/v1/documents/batch", json={"documents": batch}).is_success
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the screenshots go to."""
    folder = tmp_path_factory.mktemp("find-screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium."""
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Tab:
    """A tab of its own context at one viewport, recording every request it makes."""

    def __init__(self, browser: Any, base: str, viewport: dict[str, int]) -> None:
        self.base = base
        self.context = browser.new_context(viewport=viewport)
        self.tab = self.context.new_page()
        self.requests: list[str] = []
        self.tab.on("request", lambda request: self.requests.append(request.url))

    def all_local(self) -> None:
        """Every request went to the test server."""
        assert self.requests
        assert [u for u in self.requests if not u.startswith(self.base + "/")] == []

    def fits(self) -> None:
        """Nothing is wider than the window: no sideways scrolling of the page."""
        wide = self.tab.evaluate("document.documentElement.scrollWidth")
        assert wide <= self.tab.viewport_size["width"], wide


@pytest.fixture(params=["desktop", "phone"])
def tab(request: pytest.FixtureRequest, browser: Any, server: UvicornServer) -> Iterator[Tab]:
    """A tab at desktop width and at phone width."""
    t = Tab(browser, server.url, DESKTOP if request.param == "desktop" else PHONE)
    t.name = request.param  # type: ignore[attr-defined]
    try:
        yield t
    finally:
        t.context.close()


def _api(server: UvicornServer, **params: str) -> Any:
    response = httpx.get(server.url + "/v1/groups", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _ids(tab: Tab) -> list[int]:
    return [int(r.get_attribute("data-id")) for r in tab.tab.locator("#hot tr.story").all()]


class TestFind:
    """The front page's form, as an editor uses it."""

    def test_search_site_and_2019(self, tab: Tab, server: UvicornServer, shots: Path) -> None:
        """Typing a headline word, a site and the dates of 2019 lists what the API finds."""
        page = tab.tab
        page.goto(server.url + "/")
        page.fill("#q", "六四")
        page.fill("#site", "hkcnews.com")
        page.fill("#from", "2019-01-01")
        page.fill("#to", "2019-12-31")
        page.click("#search")
        page.wait_for_load_state()
        expected = _api(
            server, q="六四", site="hkcnews.com", **{"from": "2019-01-01"}, to="2019-12-31"
        )
        assert expected["total"] >= 3
        assert _ids(tab) == [g["similar_id"] for g in expected["groups"]]
        for link in page.locator("#hot a.headline").all():
            assert "六四" in link.inner_text()
        assert "2019-01-01 00:00 HKT" in page.locator("#range").inner_text()
        assert page.locator("#count").inner_text().endswith(f"of {expected['total']}")
        for cell in page.locator("#hot tr.story td.when").all():  # last seen, in 2019
            assert cell.inner_text().startswith("2019") or tab.name == "phone"  # type: ignore[attr-defined]
        tab.fits()
        page.screenshot(path=str(shots / f"search-{tab.name}.png"), full_page=True)  # type: ignore[attr-defined]
        tab.all_local()

    def test_range_pages(self, tab: Tab, server: UvicornServer, shots: Path) -> None:
        """The 2019 range walks page by page through the API's whole ranking."""
        page = tab.tab
        page.goto(server.url + "/?from=2019-01-01&to=2019-12-31&limit=20")
        expected = _api(server, **{"from": "2019-01-01"}, to="2019-12-31", limit="60")
        seen = _ids(tab)
        assert len(seen) == 20
        page.click("#next")
        seen += _ids(tab)
        page.click("#next")
        seen += _ids(tab)
        assert seen == [g["similar_id"] for g in expected["groups"]]
        page.click("#prev")
        assert _ids(tab) == seen[20:40]
        headline = page.locator("#hot a.headline").first.bounding_box()
        assert headline is not None and headline["width"] >= 150  # not a column of 3 characters
        tab.fits()
        page.screenshot(path=str(shots / f"range-{tab.name}.png"), full_page=True)  # type: ignore[attr-defined]
        tab.all_local()

    def test_site_link_filters(self, tab: Tab, server: UvicornServer) -> None:
        """An unknown site finds nothing; a story's site link filters by it."""
        page = tab.tab
        page.goto(server.url + "/?site=nowhere.example")
        assert page.locator("#empty").is_visible()
        if tab.name == "desktop":  # type: ignore[attr-defined]
            page.goto(server.url + "/?since=all")
            page.locator("#hot a.site").first.click()
            assert "site=hkcnews.com" in page.url and len(_ids(tab)) == 30

    def test_bad_input_reads(self, tab: Tab, server: UvicornServer, shots: Path) -> None:
        """An inverted range, a malformed date and a 10,000-character search are readable pages."""
        page = tab.tab
        for query in ("from=2019-12-31&to=2019-01-01", "from=2019-02-30", "q=" + "字" * 10_000):
            response = page.goto(f"{server.url}/?{query}")
            assert response is not None and response.status == 422
            assert page.locator("#error").is_visible() and page.locator("#find").is_visible()
        tab.fits()
        page.screenshot(path=str(shots / f"bad-{tab.name}.png"), full_page=True)  # type: ignore[attr-defined]


class TestStory:
    """A story page: its copies and a chart that can be read."""

    def test_largest_story(self, tab: Tab, server: UvicornServer, shots: Path) -> None:
        """The largest story lists each copy with its site and Hong Kong time; its chart's
        bars are wide enough to see at both widths."""
        largest = httpx.get(server.url + "/v1/groups?limit=1", timeout=30).json()["groups"][0]
        page = tab.tab
        page.goto(f"{server.url}/?since=all")
        page.locator(f'#hot tr.story[data-id="{largest["similar_id"]}"] a.headline').click()
        assert page.locator("#copies tr.copy").count() == largest["size"]
        assert "HKT" in page.locator("#copies tr.copy").first.inner_text()
        bars = page.locator("svg.chart rect").all()
        assert bars and min(b.bounding_box()["width"] for b in bars) >= 2.5
        assert page.locator(".chart-axis span").first.bounding_box()["height"] >= 10
        tab.fits()
        page.screenshot(path=str(shots / f"story-{tab.name}.png"), full_page=True)  # type: ignore[attr-defined]
        tab.all_local()
