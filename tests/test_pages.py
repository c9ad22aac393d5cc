"""Hot stories without a browser: ``GET /v1/groups?since=``, the pages' HTML and API key
handling, the local API docs, the highlighter, and ``nshash groups --since``.

The browser tests (``test_pages_browser.py``) drive the same pages in Chromium.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nshash import NSHash
from nshash.cli import main
from service.app import create_app
from service.pages import COOKIE, highlight
from service.settings import Settings

KEY = "pages-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = Path(__file__).resolve().parents[1] / "example" / "articles.jsonl"

RAIL = (
    "The regional rail operator announced on Monday that night trains between the two port "
    "cities will resume in early spring.\n"
    "Service was suspended three years ago, after a landslide damaged a long stretch of track "
    "along the coast.\n"
    "Engineers have since rebuilt the embankment and added drainage channels to protect it "
    "from heavy rain."
)
RAIL_REPOST = "From the Harbour Courier\n" + RAIL.upper() + "\nShare this story!"
BAKERY = (
    "A family bakery in the old market district marked its hundredth anniversary by giving "
    "free bread to every visitor.\n"
    "The founder's great-granddaughter now runs the shop, and she still fires the original "
    "stone oven every morning."
)


def _articles() -> list[dict[str, str]]:
    lines = EXAMPLES.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line]


@pytest.fixture
def client() -> Iterator[TestClient]:
    """The app on a memory store with an API key, fed with the example articles."""
    app = create_app(Settings(store_url="memory://", api_key=KEY))
    with TestClient(app) as c:
        for a in _articles():
            body = {"text": a["content"], "id": a["id"], "title": a["title"], "site": a["site"]}
            assert c.post("/v1/documents", json=body, headers=AUTH).status_code == 200
        yield c


class TestHotApi:
    """``GET /v1/groups?since=`` ranks by documents in the window."""

    def test_since_ranks_by_recent_copies(self, client: TestClient) -> None:
        """The ranking lists the example stories, most copies first, with sites and times."""
        body = client.get("/v1/groups?since=24h", headers=AUTH).json()
        groups = body["groups"]
        assert [g["recent"] for g in groups] == sorted((g["recent"] for g in groups), reverse=True)
        assert groups[0]["title"] == "江城地铁5号线今日开通运营"
        assert groups[0]["recent"] == groups[0]["size"] == 5
        assert groups[0]["sites"][0] == "江城日报"
        assert groups[0]["first_seen"].endswith("Z") and body["since"] == "24h"
        plain = client.get("/v1/groups", headers=AUTH).json()["groups"]
        assert [g["similar_id"] for g in plain][:1] == [groups[0]["similar_id"]]

    def test_published_at_decides_the_window(self, client: TestClient) -> None:
        """A copy published a week ago counts for 7d, not for 24h; the url's host is its site."""
        week_ago = time.time() - 6 * 86400
        for i, text in enumerate([BAKERY, BAKERY + "\nMore photos inside."]):
            body = {"text": text, "id": f"b{i}", "url": f"https://www.bakes.example/{i}",
                    "published_at": week_ago}  # fmt: skip
            assert client.post("/v1/documents", json=body, headers=AUTH).status_code == 200
        day = client.get("/v1/groups?since=24h&limit=1000&min_size=1", headers=AUTH).json()
        week = client.get("/v1/groups?since=7d&limit=1000&min_size=1", headers=AUTH).json()
        sid = client.get("/v1/documents/b0", headers=AUTH).json()["similar_id"]
        assert sid not in [g["similar_id"] for g in day["groups"]]
        bakery = next(g for g in week["groups"] if g["similar_id"] == sid)
        assert (bakery["recent"], bakery["sites"]) == (2, ["bakes.example"])

    def test_bad_window_is_422(self, client: TestClient) -> None:
        """A window that is not a duration answers 422 with the usual error body."""
        response = client.get("/v1/groups?since=yesterday", headers=AUTH)
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_request"
        bad = {"text": RAIL, "published_at": "not a time"}
        assert client.post("/v1/documents", json=bad, headers=AUTH).status_code == 422

    def test_untracked_service_ranks_nothing(self) -> None:
        """With NSHASH_TRACK off, documents are not counted in windows."""
        with TestClient(create_app(Settings(store_url="memory://", track=False))) as c:
            c.post("/v1/documents", json={"text": RAIL})
            c.post("/v1/documents", json={"text": RAIL_REPOST})
            assert c.get("/v1/groups?since=24h").json()["groups"] == []
            assert c.get("/v1/groups").json()["groups"][0]["size"] == 2


class TestPages:
    """The HTML pages, behind the API key."""

    def test_pages_need_the_key(self, client: TestClient) -> None:
        """Without the key every page is the login form (401); the API wants its header."""
        for path in ("/", "/stories/1", "/check"):
            response = client.get(path)
            assert response.status_code == 401 and 'name="key"' in response.text
        assert client.get("/v1/groups").status_code == 401

    def test_login_sets_the_cookie(self, client: TestClient) -> None:
        """The login form checks the key, sets an HttpOnly SameSite cookie and goes on."""
        wrong = client.post("/login", data={"key": "nope", "next": "/check"})
        assert wrong.status_code == 401 and "wrong" in wrong.text
        ok = client.post("/login", data={"key": KEY, "next": "/check"}, follow_redirects=False)
        assert ok.status_code == 303 and ok.headers["location"] == "/check"
        cookie = ok.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert client.get("/check").status_code == 200

    def test_login_never_redirects_off_site(self, client: TestClient) -> None:
        """``next`` must be a path on this site."""
        for target in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
            response = client.post(
                "/login", data={"key": KEY, "next": target}, follow_redirects=False
            )
            assert response.headers["location"] == "/"

    def test_key_in_the_address_is_traded_for_the_cookie(self, client: TestClient) -> None:
        """``?key=`` sets the cookie and redirects to the same address without the key."""
        response = client.get(f"/?since=7d&key={KEY}", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == "/?since=7d"
        assert COOKIE in response.headers["set-cookie"]
        assert client.get("/?since=7d").status_code == 200
        assert client.get("/?key=wrong").status_code == 200  # the cookie still holds

    def test_hot_page_lists_stories(self, client: TestClient) -> None:
        """The front page has one row per story of two or more copies, largest first."""
        html = client.get("/", headers=AUTH).text
        assert html.index("江城地铁5号线今日开通运营") < html.index("Council approves")
        assert "<svg" in html and "http" not in html.split("<main>")[1].split("</main>")[0]
        assert client.get("/?since=nonsense", headers=AUTH).status_code == 422

    def test_story_page(self, client: TestClient) -> None:
        """A story page lists its copies; an unknown id is a 404 page."""
        sid = client.get("/v1/documents/zh-metro-1", headers=AUTH).json()["similar_id"]
        html = client.get(f"/stories/{sid}", headers=AUTH).text
        assert html.count('class="copy"') == 5 and "zh-metro-5" in html
        assert client.get("/stories/999999", headers=AUTH).status_code == 404
        assert client.get("/stories/abc", headers=AUTH).status_code == 404

    def test_only_web_urls_are_links(self, client: TestClient) -> None:
        """A copy's url becomes a link only when it is http(s); markup in titles is text."""
        for i, url in enumerate(["javascript:alert(1)", "https://ok.example/a"]):
            body = {"text": RAIL if i == 0 else RAIL_REPOST, "id": f"x{i}", "url": url,
                    "title": "<script>alert(2)</script>"}  # fmt: skip
            assert client.post("/v1/documents", json=body, headers=AUTH).status_code == 200
        sid = client.get("/v1/documents/x0", headers=AUTH).json()["similar_id"]
        html = client.get(f"/stories/{sid}", headers=AUTH).text
        assert 'href="javascript:' not in html and 'href="https://ok.example/a"' in html
        assert "<script>alert(2)" not in html and "&lt;script&gt;alert(2)" in html

    def test_check_explains(self, client: TestClient) -> None:
        """The paste form names the story and highlights the matched sentences; an empty text
        is a 422 with the error shown."""
        metro = _articles()[0]
        repost = "转载\n" + metro["content"].replace("。", "。\n")
        html = client.post("/check", data={"text": repost}, headers=AUTH).text
        sid = client.get("/v1/documents/zh-metro-1", headers=AUTH).json()["similar_id"]
        assert f'href="/stories/{sid}"' in html and 'mark class="hit"' in html
        empty = client.post("/check", data={"text": "  ...  "}, headers=AUTH)
        assert empty.status_code == 422 and 'id="error"' in empty.text

    def test_check_names_a_site_s_frame(self, client: TestClient) -> None:
        """A page that shares only its site's header and footer with a story, around text of
        its own, is a new story, and the page says what was set aside as the frame."""
        from tests.test_frame import RELATED, lead, page
        from tests.test_store_contract import EN_BAKERY, EN_TURTLES

        first = {"text": page("Harbor Wire", lead(EN_TURTLES), RELATED), "id": "hw-1"}
        assert client.post("/v1/documents", json=first, headers=AUTH).status_code == 200
        text = page("Harbor Wire", lead(EN_BAKERY), RELATED)
        html = client.post("/check", data={"text": text}, headers=AUTH).text
        assert "it would start a new story" in html and "set aside as its site" in html

    def test_check_says_a_long_page_was_judged_on_its_top(self, client: TestClient) -> None:
        """A long page of a story already held by another long page (comments of their own
        below it) joins by its top, and the page says so; a long page of another story under
        the same scroll shares it only further down, and is a new story."""
        from tests.test_store_contract import made_up, synthetic_text

        scroll, story = made_up(800, 100), synthetic_text(70, 4)
        first = {"text": f"{story}\n{made_up(700, 150)}\n{scroll}", "id": "long-1"}
        assert client.post("/v1/documents", json=first, headers=AUTH).status_code == 200
        sid = client.get("/v1/documents/long-1", headers=AUTH).json()["similar_id"]
        second = f"{story}\n{made_up(701, 150)}\n{scroll}"
        html = client.post("/check", data={"text": second}, headers=AUTH).text
        assert f'href="/stories/{sid}"' in html and "judged on its top" in html
        other = f"{synthetic_text(71, 4)}\n{made_up(702, 150)}\n{scroll}"
        html = client.post("/check", data={"text": other}, headers=AUTH).text
        assert "it would start a new story" in html and "judged on its top" not in html

    @pytest.mark.parametrize("method", ["keyed", "simhash"])
    def test_other_methods_have_no_pages(self, method: str) -> None:
        """Under NSHASH_METHOD=keyed or simhash every page says it needs the nshash method
        (and names the method in use); the paste form itself still shows."""
        with TestClient(create_app(Settings(store_url="memory://", method=method))) as c:
            for answer in (c.get("/"), c.get("/stories/1"), c.post("/check", data={"text": "x"})):
                assert answer.status_code == 501
                assert "NSHASH_METHOD=nshash" in answer.text
                assert f"the {method} method" in answer.text
            assert c.get("/check").status_code == 200

    def test_docs_are_local(self, client: TestClient) -> None:
        """Swagger UI and ReDoc load their files from this server."""
        for path in ("/docs", "/redoc"):
            html = client.get(path).text
            assert "/docs-assets/" in html and "cdn" not in html.lower()
            assert "fonts.googleapis" not in html
        assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
        assert client.get("/docs-assets/swagger-ui.css").status_code == 200
        assert client.get("/docs-assets/redoc.standalone.js").status_code == 200


class TestHighlight:
    """The highlighter finds the sentences that hold the anchors."""

    def test_marks_the_sentences_with_hit_anchors(self) -> None:
        """Sentences shared with the story are hits; an added header is not."""
        nsh = NSHash.open("memory://")
        nsh.add(RAIL)
        why = nsh.explain(RAIL_REPOST.replace("SHARE THIS STORY!", ""))
        hits = set(why.candidates[0].anchors)
        pieces = highlight(nsh, RAIL_REPOST, hits, set())
        assert "".join(p for p, _ in pieces) == RAIL_REPOST
        marked = [p for p, mark in pieces if mark == "hit"]
        assert marked and all("HARBOUR COURIER" not in p and "Courier" not in p for p in marked)
        plain = highlight(nsh, RAIL, set(), set())
        assert "".join(p for p, _ in plain) == RAIL and {m for _, m in plain} == {""}
        assert [p for p, _ in plain if p.strip(".\n")][0] == RAIL.split(".")[0]


class TestCliSince:
    """``nshash groups --since`` ranks a saved store's stories over a window."""

    def test_groups_since(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Recent stories are listed with their counts; old ones are not."""
        url = f"memory://{tmp_path}/store.pkl"
        with NSHash.open(url, track=True) as nsh:
            nsh.add(RAIL, doc_id="r1", title="Night trains")
            nsh.add(RAIL_REPOST, doc_id="r2")
            nsh.add(BAKERY, doc_id="b1", published_at=time.time() - 5 * 86400)
        assert main(["groups", "--store", url, "--since", "24h", "--min-size", "1"]) == 0
        out = capsys.readouterr().out
        assert "Night trains" in out and out.count("\n") == 2
        assert main(["groups", "--store", url, "--since", "7d", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert [(g["recent"], g["title"]) for g in data] == [(2, "Night trains")]
        assert main(["groups", "--store", url, "--since", "soon"]) == 1
        assert capsys.readouterr().err.startswith("Error:")
