"""Evidence and corrections in a real browser: Playwright driving Debian's Chromium against a
real ``nshash serve`` on a journaled memory store fed with the first 3,000 articles of
``../shared/data/zh_hk_news.jsonl.gz``, at desktop and at phone width.

A story page's evidence (score and verdict of each copy), the explanation of one copy against
its story (its text pasted: shared passages highlighted), a detach and a join through the
pages' forms, the same after the server is restarted on the same store, their undo through
the corrections page, and that once more after a restart. Screenshots go to one folder (its
path is printed); no request leaves 127.0.0.1.

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
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
ARTICLES = 3000

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium", allow_module_level=True)


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    """The articles fed to the server, by id."""
    if not HK_NEWS.exists():
        pytest.skip(f"{HK_NEWS} is missing (the shared data is not checked out)")
    out = {}
    with gzip.open(HK_NEWS, "rt", encoding="utf-8") as fh:
        for _, line in zip(range(ARTICLES), fh, strict=False):
            row = json.loads(line)
            out[row["id"]] = row
    return out  # type: ignore[return-value]


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, texts: dict[str, Any]
) -> Iterator[UvicornServer]:
    """One real ``nshash serve`` on a journaled memory store, fed with the articles."""
    folder = tmp_path_factory.mktemp("correct-pages")
    srv = UvicornServer(
        {"NSHASH_STORE_URL": f"memory://{folder}/news.pkl", "NSHASH_TIMEZONE": "Asia/Hong_Kong"},
        cwd=folder,
        command=[sys.executable, "-m", "nshash", "serve", "--host", "127.0.0.1",
                 "--port", "{port}"],
    )  # fmt: skip
    srv.start(timeout=60)
    try:
        with httpx.Client(base_url=srv.url, timeout=120) as http:
            docs = [
                {"text": r["content"], "id": r["id"], "title": r["title"], "url": r["url"],
                 **({"published_at": f"{r['date']}T12:00:00+08:00"} if r.get("date") else {})}
                for r in texts.values()
            ]  # fmt: skip
            for i in range(0, len(docs), 500):
                answer = http.post("/v1/documents/batch", json={"documents": docs[i : i + 500]})
                assert answer.is_success, answer.text
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("correct-screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _get(server: UvicornServer, path: str) -> Any:
    response = httpx.get(server.url + path, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _restart(server: UvicornServer) -> None:
    server.stop()
    server.start(timeout=60)


class TestCorrectInTheBrowser:
    @pytest.mark.parametrize("width", ["desktop", "phone"])
    def test_evidence_detach_join_undo_and_restarts(
        self, width: str, browser: Any, server: UvicornServer, texts: dict[str, Any], shots: Path
    ) -> None:
        """An editor reads a story's evidence, explains one copy, detaches it, joins two
        stories, restarts the server, undoes both, restarts again: each step holds."""
        largest = _get(server, "/v1/groups?min_size=3&limit=8")["groups"]
        pick = 0 if width == "desktop" else 1
        story = largest[pick]
        one, other = largest[2 + 2 * pick]["similar_id"], largest[3 + 2 * pick]["similar_id"]
        sid, size = story["similar_id"], story["size"]
        copy = story["members"][1]["id"]
        context = browser.new_context(viewport=VIEWPORTS[width])
        requests: list[str] = []
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        try:
            # The evidence of every copy.
            page.goto(f"{server.url}/stories/{sid}")
            if width == "desktop":
                scores = page.locator("#copies td.score").all_inner_texts()
                verdicts = page.locator("#copies td.verdict").all_inner_texts()
                assert len(scores) == len(verdicts) == size
                assert verdicts[0] in ("new story", "refused")
                assert all(
                    v in ("joined", "identical", "merged", "refused", "new story") for v in verdicts
                )
            else:
                lines = page.locator("#copies tr.copy .narrow-only").all_inner_texts()
                assert any("score" in line for line in lines)
            assert (
                page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[width]["width"]
            )
            page.screenshot(path=str(shots / f"story-{width}.png"), full_page=True)

            # Why this copy is in the story: its evidence, then its text against the story.
            page.locator("#copies tr.copy").nth(1).locator("a.explain").click()
            page.wait_for_load_state()
            assert page.locator("#copy-evidence").inner_text().startswith("score ")
            page.fill("#text", texts[copy]["content"])
            page.click("#submit")
            page.wait_for_load_state()
            assert f"Against story {sid}" in page.locator("#reason").inner_text()
            assert page.locator("#highlighted mark.hit").count() >= 1
            page.screenshot(path=str(shots / f"explain-{width}.png"), full_page=True)

            # Detach that copy.
            page.goto(f"{server.url}/stories/{sid}")
            page.locator("#copies tr.copy").nth(1).locator("button.detach").click()
            page.wait_for_load_state()
            assert page.locator("#size").inner_text().startswith(str(size - 1))
            assert page.locator("#story-corrections tr.correction").count() == 1
            moved = _get(server, f"/v1/documents/{copy}")["similar_id"]
            assert moved != sid
            # Join two other stories.
            page.goto(f"{server.url}/stories/{one}")
            page.fill("#join-other", str(other))
            page.click("#join-submit")
            page.wait_for_load_state()
            kept = min(one, other)
            assert page.url.endswith(f"/stories/{kept}")
            joined_size = _get(server, f"/v1/groups/{kept}")["size"]
            assert _get(server, f"/v1/groups/{max(one, other)}")["similar_id"] == kept
            page.screenshot(path=str(shots / f"joined-{width}.png"), full_page=True)

            # A restart keeps both.
            _restart(server)
            assert _get(server, f"/v1/documents/{copy}")["similar_id"] == moved
            assert _get(server, f"/v1/groups/{max(one, other)}")["similar_id"] == kept
            page.goto(f"{server.url}/corrections")
            rows = page.locator("#corrections tr.correction")
            mine = [
                r for r in rows.all() if str(sid) in r.inner_text() or str(kept) in r.inner_text()
            ]
            assert len(mine) >= 2
            assert (
                page.evaluate("document.documentElement.scrollWidth") <= VIEWPORTS[width]["width"]
            )
            page.screenshot(path=str(shots / f"corrections-{width}.png"), full_page=True)

            # Undo both on the corrections page (newest first: the join, then the detach).
            for _ in range(2):
                page.locator("#corrections tr.correction button.undo").first.click()
                page.wait_for_load_state()
            assert _get(server, f"/v1/groups/{max(one, other)}")["similar_id"] == max(one, other)
            assert _get(server, f"/v1/groups/{sid}")["size"] == size
            page.screenshot(path=str(shots / f"undone-{width}.png"), full_page=True)

            # And a restart keeps the undo.
            _restart(server)
            assert _get(server, f"/v1/groups/{sid}")["size"] == size
            assert _get(server, f"/v1/groups/{kept}")["size"] < joined_size
            page.goto(f"{server.url}/corrections")
            assert page.locator("#corrections tr.correction button.undo").count() == 0
            page.goto(f"{server.url}/stories/{sid}")
            assert page.locator("#size").inner_text().startswith(str(size))
            page.screenshot(path=str(shots / f"after-restart-{width}.png"), full_page=True)
        finally:
            context.close()
        assert [u for u in requests if not u.startswith("http://127.0.0.1:")] == []
