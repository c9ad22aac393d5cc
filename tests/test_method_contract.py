"""One behaviour suite for every method (nshash, keyed, simhash) on every store backend.

Each test runs once per method and backend (``store_url`` of ``conftest.py``: memory,
memory-file, LevelDB, a real ``redis-server``). What is checked here is what a caller may rely
on whichever method they pick: reposts share an id, ids are never reused, a ``doc_id`` sent
again is a replay, queries write nothing, bad input gets a typed error, a reopened store keeps
everything, a closed one refuses calls. The method-specific behaviour is in ``test_core``,
``test_keyed`` and ``test_simhash``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from nshash import (
    AddResult,
    ConfigError,
    EmptyDocumentError,
    KeyedDedup,
    NSHash,
    SimhashDedup,
    StoreClosedError,
    StoreLockedError,
)
from nshash.cli import main

METHODS: dict[str, Callable[..., Any]] = {
    "nshash": NSHash.open,
    "keyed": partial(KeyedDedup.open, expected_items=10_000),
    "simhash": SimhashDedup.open,
}

STORY = (
    "The city council approved a plan on Thursday to turn the old freight yard into a park "
    "with playing fields, a market hall and a cycle path along the river.\n"
    "Work is to start next spring and take about three years, the mayor told reporters after "
    "a vote that ended a decade of argument over the site.\n"
    "Neighbours had campaigned for green space since the last trains left the yard, while "
    "developers wanted to build offices and flats on the land.\n"
    "The plan keeps the brick engine shed, which will house the market, and two of the old "
    "signal towers as lookouts over the new fields."
)
#: A repost every method must find: the same words, re-wrapped, in capitals, with other
#: punctuation (heavier edits are where the methods differ; see bench/evaluate.py).
REPOST = STORY.upper().replace("\n", "\n\n").replace(",", " ,").replace(".", "!")
OTHER = (
    "A small museum in the mountains has reopened after a two-year renovation that added a "
    "glass hall for its collection of old clocks and music boxes.\n"
    "Visitors can now watch restorers at work through a window, and on Sundays the largest "
    "music box plays a programme of folk tunes at noon.\n"
    "The museum's director said the number of school visits had doubled since the reopening, "
    "and that a second hall for mechanical toys is planned."
)
THIRD = (
    "Fishermen along the northern coast reported their best herring season in twenty years, "
    "which scientists link to cooler water and a ban on trawling near the spawning grounds.\n"
    "Prices at the harbour auction fell by a third as boats came back full every morning, "
    "and the canning factory hired extra workers for the winter.\n"
    "The fisheries agency will review the trawling ban next year and has asked the fleets to "
    "report their catches each week until then."
)


@pytest.fixture(params=sorted(METHODS))
def method(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opened(method: str, store_url: str) -> Iterator[Any]:
    dedup = METHODS[method](store_url)
    yield dedup
    dedup.close()


class TestGrouping:
    def test_repost_shares_the_id_and_another_story_does_not(self, opened: Any) -> None:
        first = opened.add(STORY, "a")
        repost = opened.add(REPOST, "b")
        other = opened.add(OTHER, "c")
        assert isinstance(first, AddResult) and not first.duplicate and not first.replayed
        assert repost.similar_id == first.similar_id and repost.duplicate
        assert other.similar_id != first.similar_id and not other.duplicate
        assert first.doc_id == "a" and first.fingerprints

    def test_ids_count_up_from_one(self, opened: Any) -> None:
        ids = [opened.add(text).similar_id for text in (STORY, OTHER, THIRD)]
        assert ids == [1, 2, 3]
        stats = opened.stats()
        assert stats.documents == 3 and stats.last_id == 3

    def test_same_doc_id_is_a_replay(self, opened: Any) -> None:
        first = opened.add(STORY, "a")
        again = opened.add(OTHER, "a")  # another text under a known id: the first answer
        assert again.replayed and again.similar_id == first.similar_id
        assert opened.stats().documents == 1

    def test_document_is_the_answer_given(self, opened: Any) -> None:
        first = opened.add(STORY, "a", title="Freight yard to become a park")
        record = opened.document("a")
        assert record is not None and record.similar_id == first.similar_id
        assert record.title == "Freight yard to become a park"
        assert opened.document("missing") is None

    def test_query_writes_nothing(self, opened: Any) -> None:
        assert opened.query(STORY) is None
        sid = opened.add(STORY).similar_id
        before = opened.stats()
        assert opened.query(REPOST) == sid
        assert opened.query(OTHER) is None
        assert opened.stats().documents == before.documents
        assert opened.add(OTHER).similar_id == sid + 1  # the query took no id

    def test_resolve_of_an_unmerged_id_is_itself(self, opened: Any) -> None:
        sid = opened.add(STORY).similar_id
        assert opened.resolve(sid) == sid

    def test_threads_never_share_a_new_id(self, opened: Any) -> None:
        texts = [" ".join(f"w{n}x{i}" for i in range(80)) for n in range(8)]
        results: list[AddResult] = []
        lock = threading.Lock()

        def work(part: list[str]) -> None:
            for text in part:
                got = opened.add(text)
                with lock:
                    results.append(got)

        threads = [threading.Thread(target=work, args=(texts[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        new = [r.similar_id for r in results if not r.duplicate]
        assert len(new) == len(set(new))
        assert opened.stats().documents == len(texts)


class TestBadInput:
    @pytest.mark.parametrize("text", [None, 42, b"bytes"])
    def test_text_must_be_a_str(self, opened: Any, text: object) -> None:
        with pytest.raises(ConfigError):
            opened.add(text)

    def test_text_without_letters_is_empty(self, opened: Any) -> None:
        with pytest.raises(EmptyDocumentError):
            opened.add("!!! ... ???")

    @pytest.mark.parametrize("doc_id", ["", 7])
    def test_doc_id_must_be_a_nonempty_str(self, opened: Any, doc_id: object) -> None:
        with pytest.raises(ConfigError):
            opened.add(STORY, doc_id)

    def test_add_many_isolates_bad_items(self, opened: Any) -> None:
        out = opened.add_many([STORY, 3, {"text": OTHER, "id": "o"}, {"id": "x"}])
        assert isinstance(out[0], AddResult) and isinstance(out[2], AddResult)
        assert isinstance(out[1], ConfigError) and isinstance(out[3], ConfigError)
        assert opened.stats().documents == 2

    @pytest.mark.parametrize("documents", ["a text", {"text": "one article"}, b"bytes", None, 7])
    def test_add_many_takes_many_documents(self, opened: Any, documents: object) -> None:
        """One text or one dict is not a batch (iterating it would add each character or
        key as a document): a ConfigError, and nothing is added."""
        with pytest.raises(ConfigError, match="add_many takes an iterable of documents"):
            opened.add_many(documents)
        assert opened.query("a text") is None and opened.query("one article") is None

    def test_bad_similar_id(self, opened: Any) -> None:
        with pytest.raises(ConfigError):
            opened.resolve(0)


class TestLifecycle:
    def test_closed_store_refuses_calls(self, method: str, store_url: str) -> None:
        dedup = METHODS[method](store_url)
        dedup.add(STORY)
        dedup.close()
        dedup.close()  # twice is harmless
        with pytest.raises(StoreClosedError):
            dedup.add(OTHER)

    def test_reopen_keeps_everything(self, method: str, store_url: str) -> None:
        if store_url == "memory://":
            pytest.skip("memory:// lives in one process only")
        with METHODS[method](store_url) as dedup:
            first = dedup.add(STORY, "a")
            dedup.add(OTHER, "b")
        with METHODS[method](store_url) as dedup:
            assert dedup.add(REPOST, "c").similar_id == first.similar_id
            assert dedup.add(STORY, "a").replayed
            assert dedup.add(THIRD).similar_id == 3  # ids go on, never reused
            assert dedup.stats().documents == 4

    def test_second_opener_is_locked_out(self, method: str, store_url: str) -> None:
        if not store_url.startswith(("leveldb:", "sqlite:", "memory:///")):
            pytest.skip("only file stores admit one opener")
        with METHODS[method](store_url), pytest.raises(StoreLockedError):
            METHODS[method](store_url)


class TestCommandLine:
    """``nshash dedup --method M`` for every method, in this process and in worker processes."""

    @pytest.mark.parametrize("jobs", ["1", "2"])
    def test_dedup_writes_each_methods_ids(
        self, method: str, jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        src = tmp_path / "in.jsonl"
        texts = [STORY, OTHER, REPOST, "?!", THIRD]
        src.write_text(
            "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
        )
        store = f"leveldb://{tmp_path}/store.ldb"
        assert (
            main(["dedup", str(src), "--method", method, "--store", store, "-j", jobs, "-q"]) == 0
        )
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r.get("similar_id") for r in out] == [1, 2, 1, None, 3]
        assert [r.get("duplicate") for r in out] == [False, False, True, None, False]
        # The tables are the method's own: the same store opened by the method has them.
        with METHODS[method](store) as dedup:
            assert dedup.stats().documents == 4
            assert dedup.query(REPOST) == 1


class TestService:
    """The HTTP service under ``NSHASH_METHOD`` for every method (FastAPI's test client)."""

    @pytest.fixture
    def client(self, method: str, tmp_path: Path) -> Iterator[Any]:
        import warnings

        pytest.importorskip("fastapi")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Using `httpx` with")
            from fastapi.testclient import TestClient
        from service import Settings, create_app

        settings = Settings(store_url=f"leveldb://{tmp_path}/svc.ldb", method=method)
        with TestClient(create_app(settings)) as c:
            yield c

    def test_documents_queries_and_batches(self, method: str, client: Any) -> None:
        first = client.post("/v1/documents", json={"text": STORY, "id": "a"})
        assert first.status_code == 200, first.text
        assert first.json()["similar_id"] == 1 and first.json()["duplicate"] is False
        repost = client.post("/v1/documents", json={"text": REPOST, "id": "b"}).json()
        assert (repost["similar_id"], repost["duplicate"]) == (1, True)
        assert client.post("/v1/query", json={"text": REPOST}).json()["similar_id"] == 1
        assert client.post("/v1/query", json={"text": THIRD}).json()["similar_id"] is None
        assert client.get("/v1/documents/b").json()["similar_id"] == 1
        assert client.get("/v1/documents/zz").status_code == 404
        batch = client.post(
            "/v1/documents/batch",
            json={"documents": [{"text": OTHER}, {"text": " ... "}, {"text": STORY, "id": "a"}]},
        ).json()
        assert (batch["added"], batch["failed"]) == (2, 1)
        assert batch["results"][0]["similar_id"] == 2
        assert batch["results"][1]["error"]["code"] == "empty_document"
        assert batch["results"][2]["replayed"] is True

    def test_bad_input_is_a_4xx_with_a_json_body(self, client: Any) -> None:
        for body in ({"text": 3}, {"text": "?!"}, {"nope": "x"}):
            response = client.post("/v1/documents", json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.json()["error"]["code"]

    def test_group_routes_need_a_method_with_groups(self, method: str, client: Any) -> None:
        client.post("/v1/documents", json={"text": STORY})
        client.post("/v1/documents", json={"text": REPOST})
        listed = client.get("/v1/groups")
        if method == "nshash":
            assert listed.status_code == 200 and listed.json()["groups"][0]["size"] == 2
        else:
            assert listed.status_code == 501
            assert listed.json()["error"]["code"] == "not_supported"
