"""Evidence and corrections through every surface: the ``/v1`` API (TestClient), the Python
client (a real ``nshash serve``), the command line (``nshash correct``) and the pages' forms
(TestClient; the browser test is ``test_pages_corrections_browser.py``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nshash import CorrectionError, NSHash
from nshash.client import Client
from service import Settings, create_app
from tests.test_client import serve
from tests.test_store_contract import EN_BAKERY, EN_RAIL, EN_RAIL_REPOST, EN_TURTLES

KEY = "corrections-test-key"
ROOT = Path(__file__).resolve().parents[1]
DOCS = [("a", EN_RAIL), ("b", EN_RAIL_REPOST), ("t", EN_TURTLES), ("k", EN_BAKERY)]


def _fill(client: TestClient, headers: dict[str, str] | None = None) -> None:
    for doc_id, text in DOCS:
        body = {"text": text, "id": doc_id, "url": f"https://news.example/{doc_id}"}
        assert client.post("/v1/documents", json=body, headers=headers).status_code == 200


def _error(response: object, status: int, code: str) -> None:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.json()["error"]["code"] == code  # type: ignore[attr-defined]


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(store_url="memory://"))) as c:
        _fill(c)
        yield c


class TestAPI:
    def test_detach_join_undo_and_the_list(self, client: TestClient) -> None:
        """Each route answers the correction; the list has them all, with who and when."""
        made = client.post("/v1/corrections/detach", json={"id": "b", "by": "night desk"})
        assert made.status_code == 201
        detach = made.json()
        assert (detach["kind"], detach["doc_id"], detach["by"]) == ("detach", "b", "night desk")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", detach["at"])
        new = client.get(f"/v1/groups/{detach['target']}").json()
        assert [(m["id"], m["verdict"]) for m in new["members"]] == [("b", "moved")]
        assert client.get("/v1/documents/b").json()["similar_id"] == detach["target"]
        joined = client.post("/v1/corrections/join", json={"stories": [3, 2]}).json()
        assert (joined["kind"], joined["target"], joined["source"], joined["by"]) == (
            "join",
            2,
            3,
            "api",
        )
        assert client.get("/v1/groups/3").json()["similar_id"] == 2
        undone = client.post(f"/v1/corrections/{joined['id']}/undo", json={"by": "chief"})
        assert undone.status_code == 200 and undone.json()["undone_by"] == "chief"
        assert client.get("/v1/groups/3").json()["similar_id"] == 3
        listed = client.get("/v1/corrections").json()["corrections"]
        assert [c["id"] for c in listed] == [1, 2]
        assert listed[0] == detach and listed[1]["undone_at"] is not None

    @pytest.mark.parametrize(
        ("path", "body", "status", "code"),
        [
            ("/v1/corrections/detach", {"id": "nobody"}, 404, "document_not_found"),
            ("/v1/corrections/detach", {"id": "k"}, 409, "correction_refused"),
            ("/v1/corrections/detach", {"id": ""}, 422, "invalid_request"),
            ("/v1/corrections/detach", {"doc": "b"}, 422, "invalid_request"),
            ("/v1/corrections/detach", {"id": "b", "by": "x" * 101}, 422, "invalid_request"),
            ("/v1/corrections/detach", [1, 2], 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [1, 1]}, 409, "correction_refused"),
            ("/v1/corrections/join", {"stories": [1, 99]}, 404, "group_not_found"),
            ("/v1/corrections/join", {"stories": [1]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [1, 2, 3]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [0, 1]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": ["1x", 2]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [1, 2**64]}, 422, "invalid_request"),
            # past a double's exact integers (a client may send 2**63 - 1 rounded up)
            ("/v1/corrections/join", {"stories": [1, 2**53]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [1, 2.0**63]}, 422, "invalid_request"),
            ("/v1/corrections/join", {"stories": [1, 2**53 - 1]}, 404, "group_not_found"),
            ("/v1/corrections/7/undo", {}, 404, "correction_not_found"),
            ("/v1/corrections/0/undo", {}, 422, "invalid_request"),
            ("/v1/corrections/x/undo", {}, 422, "invalid_request"),
            ("/v1/corrections/1/undo", {"who": 1}, 422, "invalid_request"),
        ],
    )
    def test_bad_input_is_a_4xx_with_a_json_body(
        self, client: TestClient, path: str, body: object, status: int, code: str
    ) -> None:
        """Unknown ids, refusals and malformed bodies are 4xx JSON errors, never a 500."""
        _error(client.post(path, json=body), status, code)

    def test_a_body_that_is_not_json_is_422(self, client: TestClient) -> None:
        """A broken body is invalid_json."""
        response = client.post(
            "/v1/corrections/detach", content=b"{id:", headers={"content-type": "application/json"}
        )
        _error(response, 422, "invalid_json")

    def test_an_undo_twice_is_409(self, client: TestClient) -> None:
        """An undone correction cannot be undone again."""
        client.post("/v1/corrections/detach", json={"id": "b"})
        assert client.post("/v1/corrections/1/undo").status_code == 200
        _error(client.post("/v1/corrections/1/undo"), 409, "correction_refused")

    def test_the_key_guards_the_routes_and_names_the_editor(self) -> None:
        """With an API key the routes need it, and a correction is kept under its name."""
        settings = Settings(store_url="memory://", api_key=KEY, api_key_name="news desk")
        with TestClient(create_app(settings)) as c:
            auth = {"Authorization": f"Bearer {KEY}"}
            _fill(c, auth)
            _error(c.post("/v1/corrections/detach", json={"id": "b"}), 401, "unauthorized")
            _error(c.get("/v1/corrections"), 401, "unauthorized")
            made = c.post("/v1/corrections/detach", json={"id": "b"}, headers=auth).json()
            assert made["by"] == "news desk"

    def test_a_method_without_groups_answers_501(self) -> None:
        """Under NSHASH_METHOD=keyed the correction routes are not offered."""
        with TestClient(create_app(Settings(store_url="memory://", method="keyed"))) as c:
            _error(c.get("/v1/corrections"), 501, "not_supported")
            _error(c.post("/v1/corrections/detach", json={"id": "b"}), 501, "not_supported")


class TestPages:
    def test_the_story_page_shows_evidence_and_the_forms(self, client: TestClient) -> None:
        """Each copy shows its score and verdict, an Explain link and a Detach button."""
        page = client.get("/stories/1").text
        assert re.findall(r'score">([^<]*)<', page) == ["0.00", "0.71"]
        assert re.findall(r'verdict">([^<]*)<', page) == ["new story", "joined"]
        assert page.count('class="explain" href="/check?story=1&amp;doc=') == 2
        assert page.count('class="small detach"') == 2 and 'id="join-other"' in page

    def test_explain_a_copy_against_its_story(self, client: TestClient) -> None:
        """The check page of a copy shows its evidence, then its passages against the story
        (judged as a copy, though its text is stored)."""
        page = client.get("/check?story=1&doc=b").text
        assert "score 0.71, joined" in page and 'name="story" value="1"' in page
        result = client.post("/check", data={"text": EN_RAIL_REPOST, "story": "1", "doc": "b"})
        assert result.status_code == 200
        assert "Against story 1 it shares" in result.text
        assert result.text.count('<mark class="hit">') >= 3
        plain = client.post("/check", data={"text": EN_RAIL_REPOST}).text
        assert "The same text (its letters and digits) was added before" in plain

    def test_detach_join_and_undo_through_the_forms(self, client: TestClient) -> None:
        """The forms make the corrections, then the pages list them with Undo buttons."""
        moved = client.post("/stories/1/detach", data={"doc": "b"}, follow_redirects=False)
        assert (moved.status_code, moved.headers["location"]) == (303, "/stories/1")
        assert 'id="story-corrections"' in client.get("/stories/1").text
        joined = client.post("/stories/2/join", data={"other": "3"}, follow_redirects=False)
        assert (joined.status_code, joined.headers["location"]) == (303, "/stories/2")
        listing = client.get("/corrections").text
        assert listing.count('class="correction"') == 2 and listing.count('class="small undo"') == 2
        undo = client.post(
            "/corrections/2/undo", data={"next": "/stories/2"}, follow_redirects=False
        )
        assert (undo.status_code, undo.headers["location"]) == (303, "/stories/2")
        assert client.get("/corrections").text.count('class="small undo"') == 1
        assert client.get("/v1/groups/3").json()["similar_id"] == 3

    @pytest.mark.parametrize(
        ("path", "data", "status"),
        [
            ("/stories/1/detach", {"doc": "nobody"}, 404),
            ("/stories/1/detach", {"doc": "k"}, 409),
            ("/stories/1/detach", {}, 422),
            ("/stories/1/join", {"other": "1"}, 409),
            ("/stories/1/join", {"other": "99"}, 404),
            ("/stories/1/join", {"other": "x" * 10_000}, 422),
            ("/stories/abc/join", {"other": "2"}, 404),
            ("/corrections/5/undo", {}, 404),
            ("/corrections/x/undo", {}, 404),
        ],
    )
    def test_bad_forms_answer_a_readable_page(
        self, client: TestClient, path: str, data: dict[str, str], status: int
    ) -> None:
        """A refused form is a page with a sentence, never JSON or a 500."""
        response = client.post(path, data=data)
        assert response.status_code == status
        assert response.headers["content-type"].startswith("text/html")
        assert 'id="message"' in response.text

    @pytest.mark.parametrize("query", ["story=99&doc=b", "story=1&doc=nobody", "story=x"])
    def test_a_check_of_an_unknown_copy_is_404(self, client: TestClient, query: str) -> None:
        """The explanation of a copy or story that does not exist is a readable 404."""
        response = client.get(f"/check?{query}")
        assert response.status_code == 404 and 'id="message"' in response.text

    def test_the_forms_need_the_key_when_one_is_set(self) -> None:
        """Without a session the forms answer the login page and change nothing."""
        with TestClient(create_app(Settings(store_url="memory://", api_key=KEY))) as c:
            _fill(c, {"Authorization": f"Bearer {KEY}"})
            for path, data in [("/stories/1/detach", {"doc": "b"}), ("/corrections/1/undo", {})]:
                response = c.post(path, data=data)
                assert response.status_code == 401 and 'name="key"' in response.text
            assert c.get("/corrections").status_code == 401
            listed = c.get("/v1/corrections", headers={"Authorization": f"Bearer {KEY}"})
            assert listed.json() == {"corrections": []}


class TestClientCorrections:
    def test_the_python_client_corrects_through_a_real_service(self, tmp_path: Path) -> None:
        """Client.detach/join/undo/corrections against ``nshash serve``; refusals raise the
        library's CorrectionError with its code."""
        server = serve(tmp_path, PYTHONPATH=str(ROOT))
        try:
            with Client(server.url) as api:
                for doc_id, text in DOCS:
                    api.add(text, id=doc_id)
                group = api.group(1)
                assert group is not None
                assert [m.verdict for m in group.members] == ["new story", "joined"]
                assert group.members[1].score == pytest.approx(0.7105, abs=1e-4)
                made = api.detach("b", by="desk")
                assert (made.kind, made.source, made.by) == ("detach", 1, "desk")
                joined = api.join(2, 3)
                assert api.undo(joined.id).undone_at is not None
                assert [c.id for c in api.corrections()] == [1, 2]
                for call, code in [
                    (lambda: api.detach("nobody"), "document_not_found"),
                    (lambda: api.join(1, 1), "correction_refused"),
                    (lambda: api.undo(9), "correction_not_found"),
                ]:
                    with pytest.raises(CorrectionError) as refused:
                        call()
                    assert refused.value.code == code
        finally:
            server.stop()


class TestCommandLine:
    def test_correct_then_list_then_groups_json(self, store_url: str, run: object) -> None:
        """``nshash correct`` detaches, joins and undoes on a saved store; ``list`` and
        ``groups --json`` show the corrections and the evidence."""
        if store_url == "memory://":
            pytest.skip("the command line reads a saved store")
        with NSHash.open(store_url) as nsh:
            for doc_id, text in DOCS:
                nsh.add(text, doc_id=doc_id)
        go = run  # type: ignore[assignment]
        code, out, _ = go("correct", "detach", "b", "--store", store_url, "--by", "Ann")
        assert code == 0 and "Ann: detached 'b' from story 1 into story 4" in out
        code, out, _ = go("correct", "join", "2", "3", "--store", store_url, "--json")
        assert code == 0 and json.loads(out)["target"] == 2
        assert json.loads(out)["by"].startswith("cli")
        code, out, _ = go("correct", "undo", "2", "--store", store_url)
        assert code == 0 and "undone" in out
        code, out, _ = go("correct", "list", "--store", store_url, "--json")
        listed = json.loads(out)
        assert [c["kind"] for c in listed] == ["detach", "join"]
        assert listed[1]["undone_by"] is not None
        code, out, _ = go("groups", "--store", store_url, "--json", "--min-size", "1")
        members = {m["id"]: m for g in json.loads(out) for m in g["members"]}
        assert (members["b"]["verdict"], members["a"]["verdict"]) == ("moved", "new story")
        assert members["b"]["score"] == pytest.approx(0.7105, abs=1e-4)

    @pytest.mark.parametrize(
        ("args", "exit_code", "says"),
        [
            (("detach", "nobody"), 1, "Error: No document 'nobody'"),
            (("detach", "k"), 1, "Error: 'k' is the only copy"),
            (("join", "1", "1"), 1, "Error: Stories 1 and 1 are one story"),
            (("join", "1", "99"), 1, "Error: No story 99"),
            (("join", "1", "x"), 2, "a story id is a positive integer"),
            (("undo", "4"), 1, "Error: No correction 4"),
            (("undo", "-1"), 2, "error:"),
        ],
    )
    def test_bad_corrections_are_one_error_line(
        self, tmp_path: Path, run: object, args: tuple[str, ...], exit_code: int, says: str
    ) -> None:
        """Unknown ids and refusals print one Error: line and exit 1; bad usage exits 2."""
        url = f"memory://{tmp_path}/s.pkl"
        with NSHash.open(url) as nsh:
            for doc_id, text in DOCS:
                nsh.add(text, doc_id=doc_id)
        code, _out, err = run("correct", *args, "--store", url)  # type: ignore[operator]
        assert code == exit_code and says in err
        if exit_code == 1:
            assert err.count("\n") == 1 and "Traceback" not in err
        assert os.path.exists(f"{tmp_path}/s.pkl") or code != 0
