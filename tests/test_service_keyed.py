"""The HTTP service with ``method="keyed"`` (``NSHASH_METHOD=keyed``): the four-key method.

Every route the keyed method offers is exercised through FastAPI's TestClient on a
``memory://`` store; the group routes, which it cannot offer, answer 501 in the one error shape.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service import Settings, create_app
from tests.test_service import (
    BATTERY_TEXT,
    CHINESE,
    FLOOD_TEXT,
    assert_error,
    fast_path_of,
    metric_value,
)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with")
    from fastapi.testclient import TestClient

#: FLOOD_TEXT with other punctuation and spacing: the same letters, so the same content key.
FLOOD_REPOST = FLOOD_TEXT.replace(".", "!").replace(" ", "  ")


def make_client(**settings: Any) -> TestClient:
    """Return a TestClient (not yet entered) on a fresh keyed app with these settings."""
    settings.setdefault("store_url", "memory://")
    settings.setdefault("method", "keyed")
    return TestClient(create_app(Settings(**settings)))


@pytest.fixture
def client() -> Iterator[TestClient]:
    """A client of a keyed app on an empty in-memory store, lifespan running."""
    with make_client() as c:
        yield c


class TestSetting:
    """The ``method`` setting."""

    def test_default_is_nshash(self) -> None:
        """Without the setting the service keeps the nshash method."""
        assert Settings(store_url="memory://").method == "nshash"

    def test_read_from_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """NSHASH_METHOD=keyed selects the keyed method."""
        monkeypatch.setenv("NSHASH_METHOD", "keyed")
        assert Settings(store_url="memory://").method == "keyed"

    def test_unknown_method_refused(self) -> None:
        """A method other than nshash, keyed or simhash is a configuration error."""
        with pytest.raises(ValidationError):
            Settings(store_url="memory://", method="minhash")  # type: ignore[arg-type]

    def test_other_methods_snapshot_refused(self, tmp_path: Path) -> None:
        """A journaled memory store written by nshash does not open as a keyed store."""
        from nshash import StoreCorruptError

        url = f"memory://{tmp_path}/store.pkl"
        with make_client(store_url=url, method="nshash") as c:
            assert c.post("/v1/documents", json={"text": FLOOD_TEXT}).status_code == 200
        with pytest.raises(StoreCorruptError), make_client(store_url=url):
            pass


class TestDocuments:
    """POST /v1/documents and GET /v1/documents/{id} with the keyed method."""

    def test_repost_gets_the_same_similar_id(self, client: TestClient) -> None:
        """A repost joins the first story's group; another story gets a new group."""
        first = client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        assert first.status_code == 200, first.text
        assert first.json() == {
            "similar_id": 1,
            "duplicate": False,
            "merged_from": [],
            "id": "a",
            "replayed": False,
        }
        repost = client.post("/v1/documents", json={"text": FLOOD_REPOST, "id": "b"})
        assert repost.json()["similar_id"] == 1
        assert repost.json()["duplicate"] is True
        other = client.post("/v1/documents", json={"text": BATTERY_TEXT})
        assert other.json()["similar_id"] == 2
        assert other.json()["duplicate"] is False

    def test_replay_of_a_known_id(self, client: TestClient) -> None:
        """The same id again returns the first answer, replayed, whatever the text."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        again = client.post("/v1/documents", json={"text": BATTERY_TEXT, "id": "a"})
        assert again.json() == {
            "similar_id": 1,
            "duplicate": False,
            "merged_from": [],
            "id": "a",
            "replayed": True,
        }
        assert client.post("/v1/documents", json={"text": BATTERY_TEXT}).json()["similar_id"] == 2

    def test_title_key_matches(self, client: TestClient) -> None:
        """A text with a new head and tail matches by its title, noise words stripped."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "title": "Flood hits town"})
        wrapped = "News: " + FLOOD_TEXT + " Share it."
        assert client.post("/v1/query", json={"text": wrapped}).json()["similar_id"] is None
        body = {"text": wrapped, "title": "原创 Flood hits town"}
        assert client.post("/v1/documents", json=body).json()["similar_id"] == 1

    def test_fast_path_answers_keyed_adds(self, client: TestClient) -> None:
        """Ordinary adds go through the fast path, on the same keyed object as the route."""
        client.get("/healthz")
        fast = fast_path_of(client.app)  # type: ignore[arg-type]
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        routed = client.post(
            "/v1/documents",
            content=json.dumps({"text": FLOOD_REPOST, "id": "b"}),
            headers={"content-type": "application/json; charset=utf-8"},
        )
        assert fast.handled == 1
        assert routed.json()["similar_id"] == 1
        assert client.get("/v1/documents/b").json()["similar_id"] == 1

    def test_get_document(self, client: TestClient) -> None:
        """A document added with an id is found with its group and its four key hashes."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a", "title": "Flood"})
        client.post("/v1/documents", json={"text": FLOOD_REPOST, "id": "b/c"})
        body = client.get("/v1/documents/b/c").json()
        assert body["id"] == "b/c"
        assert body["similar_id"] == 1
        assert body["duplicate"] is True
        assert body["merged_from"] == []
        assert len(body["fingerprints"]) == 4
        assert all(len(f) == 16 for f in body["fingerprints"])
        assert client.get("/v1/documents/a").json()["title"] == "Flood"

    def test_unknown_document(self, client: TestClient) -> None:
        """An id never added answers 404 document_not_found."""
        assert_error(client.get("/v1/documents/nope"), 404, "document_not_found")

    @pytest.mark.parametrize(
        "body",
        [{"text": ""}, {"text": 5}, {"txt": "x"}, {"text": FLOOD_TEXT, "id": 3}],
    )
    def test_bad_document_is_422(self, client: TestClient, body: dict[str, Any]) -> None:
        """A missing, empty or mistyped field answers 422 invalid_request."""
        assert_error(client.post("/v1/documents", json=body), 422, "invalid_request")

    def test_text_without_letters_is_422(self, client: TestClient) -> None:
        """A text with no letter or digit answers 422 empty_document."""
        assert_error(client.post("/v1/documents", json={"text": " ... "}), 422, "empty_document")

    def test_invalid_json_is_422(self, client: TestClient) -> None:
        """A body that is not JSON answers 422 invalid_json."""
        response = client.post(
            "/v1/documents", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert_error(response, 422, "invalid_json")


class TestBatch:
    """POST /v1/documents/batch with the keyed method."""

    def test_items_in_order_with_errors_in_place(self, client: TestClient) -> None:
        """Valid items go in, in order; invalid ones get an error entry at their index."""
        response = client.post(
            "/v1/documents/batch",
            json={
                "documents": [
                    {"text": FLOOD_TEXT, "id": "a"},
                    {"text": ""},
                    {"text": FLOOD_REPOST},
                    {"text": " ... "},
                    {"text": BATTERY_TEXT, "id": "c"},
                    {"text": BATTERY_TEXT, "id": "a"},
                ]
            },
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["added"], body["failed"]) == (4, 2)
        results = body["results"]
        assert [r["index"] for r in results] == [0, 1, 2, 3, 4, 5]
        assert results[0]["similar_id"] == 1 and results[0]["duplicate"] is False
        assert results[1]["error"]["code"] == "invalid_request"
        assert results[2]["similar_id"] == 1 and results[2]["duplicate"] is True
        assert results[3]["error"]["code"] == "empty_document"
        assert results[4]["similar_id"] == 2
        assert results[5]["similar_id"] == 1 and results[5]["replayed"] is True

    def test_too_large_batch_is_413(self) -> None:
        """More documents than max_batch answers 413 batch_too_large."""
        with make_client(max_batch=2) as c:
            body = {"documents": [{"text": FLOOD_TEXT}] * 3}
            assert_error(c.post("/v1/documents/batch", json=body), 413, "batch_too_large")

    def test_bad_batch_is_422(self, client: TestClient) -> None:
        """A batch body without a documents list answers 422 invalid_request."""
        bad = client.post("/v1/documents/batch", json={"documents": "x"})
        assert_error(bad, 422, "invalid_request")


class TestQuery:
    """POST /v1/query with the keyed method."""

    def test_query_finds_without_adding(self, client: TestClient) -> None:
        """A repost's group is found, a new story is null, and nothing is written."""
        assert client.post("/v1/query", json={"text": FLOOD_TEXT}).json() == {"similar_id": None}
        client.post("/v1/documents", json={"text": FLOOD_TEXT})
        assert client.post("/v1/query", json={"text": FLOOD_REPOST}).json() == {"similar_id": 1}
        assert client.post("/v1/query", json={"text": CHINESE}).json() == {"similar_id": None}
        added = client.post("/v1/documents", json={"text": CHINESE}).json()
        assert added["similar_id"] == 2  # the queries handed out no id

    def test_bad_query_is_422(self, client: TestClient) -> None:
        """A query without text, or with an unknown field, answers 422."""
        assert_error(client.post("/v1/query", json={}), 422, "invalid_request")
        bad = client.post("/v1/query", json={"text": FLOOD_TEXT, "n": 3})
        assert_error(bad, 422, "invalid_request")
        assert_error(client.post("/v1/query", json={"text": "!!"}), 422, "empty_document")


class TestGroups:
    """The group routes, which the keyed method does not offer."""

    def test_list_is_501(self, client: TestClient) -> None:
        """GET /v1/groups answers 501 not_supported, saying the method keeps no groups."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT})
        error = assert_error(client.get("/v1/groups"), 501, "not_supported")
        assert "keyed" in error["message"] and "group" in error["message"]

    def test_one_is_501(self, client: TestClient) -> None:
        """GET /v1/groups/{id} answers 501 not_supported, even for an id handed out."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT})
        error = assert_error(client.get("/v1/groups/1"), 501, "not_supported")
        assert "keyed" in error["message"]

    def test_bad_group_id_still_422(self, client: TestClient) -> None:
        """A group id that is not a positive integer answers 422 before the method check."""
        assert_error(client.get("/v1/groups/zero"), 422, "invalid_request")
        assert_error(client.get("/v1/groups/0"), 422, "invalid_request")

    def test_501_even_while_the_store_is_down(self) -> None:
        """The group routes answer 501 from the setting, without reaching the store."""
        pytest.importorskip("redis")
        from tests.redis_server import free_port

        url = f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"
        with make_client(store_url=url) as c:
            assert_error(c.get("/readyz"), 503, "store_unavailable")
            assert_error(c.get("/v1/groups"), 501, "not_supported")

    def test_nshash_method_still_lists_groups(self) -> None:
        """With the default method the group routes answer as before."""
        with make_client(method="nshash") as c:
            c.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
            assert c.get("/v1/groups/1").json()["similar_id"] == 1
            assert c.get("/v1/groups", params={"min_size": 1}).status_code == 200

    def test_documented_in_openapi(self, client: TestClient) -> None:
        """The OpenAPI schema documents the 501 of the group routes and the setting."""
        schema = client.get("/openapi.json").json()
        assert "501" in schema["paths"]["/v1/groups"]["get"]["responses"]
        assert "501" in schema["paths"]["/v1/groups/{similar_id}"]["get"]["responses"]
        assert "NSHASH_METHOD" in schema["info"]["description"]


class TestOps:
    """GET /healthz, /readyz and /metrics with the keyed method."""

    def test_healthz_and_readyz(self, client: TestClient) -> None:
        """The process is live and the keyed store ready, named by its URL."""
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready", "store": "memory://"}

    def test_metrics(self, client: TestClient) -> None:
        """Documents added, duplicates found and the keyed store's counts are exported."""
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        client.post("/v1/documents", json={"text": FLOOD_REPOST})
        client.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})  # a replay
        client.post("/v1/documents/batch", json={"documents": [{"text": BATTERY_TEXT}]})
        text = client.get("/metrics").text
        assert metric_value(text, "nshash_documents_added_total") == 3
        assert metric_value(text, "nshash_duplicates_found_total") == 1
        assert metric_value(text, "nshash_groups_merged_total") == 0
        assert metric_value(text, "nshash_store_documents") == 3
        assert metric_value(text, "nshash_store_groups") == 2

    def test_journaled_store_survives_restart(self, tmp_path: Path) -> None:
        """A keyed journaled memory store keeps its documents across a restart."""
        url = f"memory://{tmp_path}/keyed.pkl"
        with make_client(store_url=url) as c:
            c.post("/v1/documents", json={"text": FLOOD_TEXT, "id": "a"})
        with make_client(store_url=url) as c:
            assert c.get("/v1/documents/a").json()["similar_id"] == 1
            assert c.post("/v1/documents", json={"text": FLOOD_REPOST}).json()["similar_id"] == 1
