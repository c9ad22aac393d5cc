"""The newsroom's pages without a browser: the find form on the front page, the display time
zone, page links, bad input, the readable page when the store is down, the API key links, the
story chart's bars and ``nshash serve``'s start-up line.

``test_pages_find_browser.py`` drives the same pages in Chromium.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nshash.results import HOUR, Activity
from service.app import create_app
from service.pages import CHART_BARS, chart
from service.settings import Settings
from tests.redis_server import free_port
from tests.test_groups_find import DOCS, SEEDS, _text
from tests.test_service_uvicorn import UvicornServer

KEY = "newsroom-key"


def _fill(c: TestClient, headers: dict[str, str] | None = None) -> None:
    for i, (story, title, site, when) in enumerate(DOCS):
        body = {
            "text": _text(SEEDS[story]),
            "id": f"{story}-{i}",
            "title": title,
            "site": site,
            "published_at": when.isoformat(),
        }
        assert c.post("/v1/documents", json=body, headers=headers).status_code == 200


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """The app with no API key on a memory store, fed with the find tests' documents."""
    with TestClient(create_app(Settings(store_url="memory://"))) as c:
        _fill(c)
        yield c


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr class="story" data-id="(\d+)"', html)


class TestFindPage:
    """The front page's form finds what ``GET /v1/groups`` finds."""

    def test_search_site_range(self, client: TestClient) -> None:
        """A term, a site and a range keep the one story that has all three."""
        r = client.get(
            "/", params={"q": "ferry", "site": "c.com", "from": "2019-01-01", "to": "2019-12-31"}
        )
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        api = client.get(
            "/v1/groups",
            params={"q": "ferry", "site": "c.com", "from": "2019-01-01", "to": "2019-12-31"},
        ).json()
        assert _rows(r.text) == [str(g["similar_id"]) for g in api["groups"]] and api["total"] == 1
        assert 'value="ferry"' in r.text and "1–1 of 1" in r.text

    def test_time_zone_shown_and_used(self, client: TestClient) -> None:
        """``tz`` moves the day a date means and the times shown."""
        hk = client.get(
            "/", params={"from": "2019-03-01", "to": "2019-03-01", "tz": "Asia/Hong_Kong"}
        )
        assert len(_rows(hk.text)) == 1 and "2019-03-01 00:30 HKT" in hk.text
        utc = client.get("/", params={"from": "2019-03-01", "to": "2019-03-01"})
        assert _rows(utc.text) == [] and 'id="empty"' in utc.text

    def test_page_links(self, client: TestClient) -> None:
        """Next and previous links walk the pages; together they list every story once."""
        first = client.get("/", params={"since": "all", "limit": "3"})
        assert len(_rows(first.text)) == 3 and 'id="prev"' not in first.text
        link = re.search(r'id="next" href="([^"]+)"', first.text)
        assert link is not None
        second = client.get(link.group(1).replace("&amp;", "&"))
        assert len(_rows(second.text)) == 1 and 'id="next"' not in second.text
        assert 'id="prev"' in second.text
        assert set(_rows(first.text)) | set(_rows(second.text)) == set(
            str(g["similar_id"])
            for g in client.get("/v1/groups", params={"from": "1970-01-01"}).json()["groups"]
        )

    @pytest.mark.parametrize(
        "params",
        [
            {"from": "2019-03-02", "to": "2019-03-01"},
            {"from": "2019-02-30"},
            {"q": "x" * 10_000},
            {"tz": "Nowhere/Land"},
        ],
    )
    def test_bad_input_is_a_readable_page(self, client: TestClient, params: dict[str, str]) -> None:
        """Bad input answers 422 with the form and a sentence, never a 500 or JSON."""
        r = client.get("/", params=params)
        assert r.status_code == 422 and "text/html" in r.headers["content-type"]
        assert 'id="error"' in r.text and 'id="find"' in r.text

    def test_story_bad_zone_and_unknown_id(self, client: TestClient) -> None:
        """A story page with an unknown zone or id is a readable 4xx page."""
        assert client.get("/stories/1", params={"tz": "Mars/Base"}).status_code == 422
        r = client.get("/stories/99999")
        assert r.status_code == 404 and "No such story" in r.text


class TestKeyLinks:
    """Log out and the key form appear only when a key is set."""

    def test_no_key(self, client: TestClient) -> None:
        """Without a key no page offers Log out, and /login says none is needed."""
        for path in ("/", "/check", "/stories/1"):
            assert "Log out" not in client.get(path).text
        login = client.get("/login")
        assert 'id="no-key"' in login.text and 'name="key"' not in login.text

    def test_with_key(self) -> None:
        """With a key the pages offer Log out and /login asks for the key."""
        with TestClient(create_app(Settings(store_url="memory://", api_key=KEY))) as c:
            page = c.get("/", headers={"Authorization": f"Bearer {KEY}"})
            assert 'id="logout"' in page.text
            assert 'name="key"' in c.get("/login").text


class TestStoreDown:
    """Pages answer a readable page while the store cannot be reached."""

    def test_pages_say_so(self) -> None:
        """With Redis unreachable each page is HTML with status 503, naming the store masked."""
        url = f"redis://:secret@127.0.0.1:{free_port()}/0"
        pytest.importorskip("redis")
        app = create_app(Settings(store_url=url, reconnect_interval=0))
        with TestClient(app) as c:
            for path in ("/", "/stories/1", "/?q=ferry"):
                r = c.get(path)
                assert r.status_code == 503, path
                assert "text/html" in r.headers["content-type"] and "secret" not in r.text
                assert "unavailable" in r.text
            story = c.get("/stories/1").text
            assert "The store cannot be reached" in story and "redis://:***@" in story
            r = c.post("/check", data={"text": "Some words to look up here."})
            assert r.status_code == 503 and "text/html" in r.headers["content-type"]


class TestChart:
    """A story's chart keeps bars wide enough to see at every age."""

    @pytest.mark.parametrize(
        ("days", "unit"), [(1, "hour"), (7, "2 hours"), (30, "12 hours"), (400, "week")]
    )
    def test_bars(self, days: int, unit: str) -> None:
        """A story of *days* days is drawn in at most CHART_BARS bars of the right width."""
        start = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp())
        hours = tuple((start + h * HOUR, 1) for h in range(0, days * 24, 5))
        html = str(chart(Activity(1, hours[0][0], hours[-1][0], hours)))
        bars = html.count("<rect")
        assert 0 < bars <= CHART_BARS
        assert f"copies per {unit}," in html
        # The scale, as text beside the drawing: from the first bar to the last.
        assert re.search(r'class="chart-axis"><span>20(23-12|24-01)-\d\d \d\d:00 UTC</span>', html)


class TestServeBanner:
    """``nshash serve`` says where it listens and what it serves."""

    def test_banner(self, tmp_path: Path) -> None:
        """The first line names the address, the store with its password masked, the method
        and the workers."""
        pytest.importorskip("redis")
        url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
        srv = UvicornServer(
            {"NSHASH_STORE_URL": url},
            cwd=tmp_path,
            command=[sys.executable, "-m", "nshash", "serve", "--host", "127.0.0.1",
                     "--port", "{port}"],
        )  # fmt: skip
        srv.start(timeout=60)
        try:
            lines = srv.log.read_text().splitlines()
        finally:
            srv.stop()
        # Before it, a line may say that the store cannot be reached yet (it is retried).
        first = next(line for line in lines if line.startswith("nshash serve:"))
        assert first.startswith(f"nshash serve: http://127.0.0.1:{srv.port}/")
        assert "redis://:***@127.0.0.1" in first and "hunter2" not in first
        assert "method nshash" in first and "1 worker" in first and "no API key" in first
