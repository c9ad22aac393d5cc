"""``nshash.client`` against a real ``nshash serve`` (uvicorn in a subprocess) over loopback.

Faults are injected by transports that wrap the real one: they pass the request on to the
server and then lose its answer, or answer 503 in its place, so the retries meet a real server.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from nshash import AddResult, ConfigError, EmptyDocumentError, StoreUnavailableError
from nshash.client import AsyncClient, Client, ServiceError
from tests.redis_server import free_port
from tests.test_service_uvicorn import UvicornServer

KEY = "client-test-key"
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example" / "http_client.py"

FLOOD = (
    "The river flooded the lower town after three days of heavy rain. "
    "Rescue teams evacuated more than two hundred families by boat. "
    "The mayor said the damage would take months to repair completely."
)
FLOOD_REPOST = "Breaking news!\n" + FLOOD.upper() + "\nShare this story."
ORCHARD = "The old orchard on the hill produced a record harvest of apples this autumn."


def serve(directory: Path, **env: str) -> UvicornServer:
    """Start ``nshash serve`` with a fresh in-process store (and *env*); return the server."""
    directory.mkdir(parents=True, exist_ok=True)
    server = UvicornServer(
        {"NSHASH_STORE_URL": "memory://", **env},
        cwd=directory,
        command=[sys.executable, "-m", "nshash", "serve", "--port", "{port}"],
    )
    server.start()
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    """One service for the module's sync tests, with an API key."""
    srv = serve(tmp_path_factory.mktemp("client"), NSHASH_API_KEY=KEY)
    yield srv
    srv.stop()


def counter(server: UvicornServer, name: str) -> float:
    """Read one unlabelled metric of the server's ``/metrics``."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


class Faulty(httpx.BaseTransport):
    """Passes requests to a real transport, and makes the numbered ones fail.

    Args:
        lose: request numbers (from 1) whose answer is read from the server, then lost.
        unavailable: request numbers answered 503 here, without reaching the server.
    """

    def __init__(self, lose: set[int] = frozenset(), unavailable: set[int] = frozenset()):
        self.real = httpx.HTTPTransport()
        self.lose = set(lose)
        self.unavailable = set(unavailable)
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent in self.unavailable:
            body = {"error": {"code": "store_unavailable", "message": "injected"}}
            return httpx.Response(503, json=body)
        response = self.real.handle_request(request)
        if self.sent in self.lose:
            response.read()
            response.close()
            raise httpx.ReadError("injected: the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.real.close()


class TestClient:
    """The blocking client: the library's types over HTTP, errors under NSHashError."""

    def test_calls_answer_library_types(self, server: UvicornServer) -> None:
        """add, query, document, group and groups answer as NSHash does."""
        with Client(server.url, api_key=KEY) as client:
            a = client.add(FLOOD, "c-a", title="Flood", url="https://example.org/a")
            b = client.add(FLOOD_REPOST, "c-b")
            assert isinstance(a, AddResult) and a.doc_id == "c-a" and not a.duplicate
            assert b.similar_id == a.similar_id and b.duplicate and not b.replayed
            assert client.add("other words entirely", "c-a") == AddResult(
                a.similar_id, False, (), (), "c-a", True
            )
            assert client.query(FLOOD_REPOST) == a.similar_id
            assert client.query("A text nobody ever sent to this service before.") is None
            record = client.document("c-b")
            assert record is not None and record.similar_id == a.similar_id
            assert record.fingerprints and all(isinstance(f, int) for f in record.fingerprints)
            group = client.group(a.similar_id)
            assert group is not None and group.size == 2
            assert [(m.doc_id, m.title) for m in group.members] == [("c-a", "Flood"), ("c-b", None)]
            assert a.similar_id in [g.similar_id for g in client.groups(min_size=2, limit=50)]
            assert client.document("no/such/../id?x=1") is None
            assert client.group(10**12) is None
            client.ping()

    def test_hot_stories(self, server: UvicornServer) -> None:
        """url, site and published_at reach the service, and hot() ranks the window's stories
        with their sites and times, as NSHash.hot does; both clients alike."""
        story = "The harbour bridge will close for repairs in May, the city said today. " * 3
        now = int(time.time())
        with Client(server.url, api_key=KEY) as client:
            first = client.add(story, "h-1", url="https://one.example/a", published_at=now - 90)
            aware = datetime.fromtimestamp(now - 30, timezone.utc)
            client.add("Update: " + story, "h-2", site="two.example", published_at=aware)
            naive = datetime.fromtimestamp(now - 45, timezone.utc).replace(tzinfo=None)
            client.add("Later: " + story, "h-3", published_at=naive)  # naive means UTC
            hot = {h.similar_id: h for h in client.hot("1h", limit=100)}
            story_hot = hot[first.similar_id]
            assert story_hot.recent == 3 and story_hot.size == 3
            assert story_hot.sites == ("one.example", "two.example")
            assert story_hot.first_seen == now - 90 and story_hot.last_seen == now - 30
            assert all(h.recent >= 2 for h in client.hot("1h", min_count=2))
            with pytest.raises(ServiceError, match="since"):
                client.hot("yesterday")

        async def run() -> list[Any]:
            async with AsyncClient(server.url, api_key=KEY) as aclient:
                return await aclient.hot("1h", limit=100)

        assert first.similar_id in [h.similar_id for h in asyncio.run(run())]

    def test_ids_with_slashes_and_dots(self, server: UvicornServer) -> None:
        """An id is one path segment whatever it holds (slashes, dots, ? and %)."""
        with Client(server.url, api_key=KEY) as client:
            for doc_id in ("https://example.org/a/../b?x=1%", "..", "a b"):
                result = client.add(f"{ORCHARD} Copy {doc_id}.", doc_id)
                record = client.document(doc_id)
                assert record is not None and record.doc_id == doc_id
                assert record.similar_id == result.similar_id

    def test_errors(self, server: UvicornServer) -> None:
        """An empty text, a wrong key and a bad argument are typed errors, never retried."""
        with Client(server.url, api_key=KEY) as client:
            with pytest.raises(EmptyDocumentError):
                client.add(" ... ", "c-empty")
            with pytest.raises(ServiceError) as info:
                client.add(FLOOD, "c-late", published_at=-5.0)  # the service's own check
            assert info.value.status == 422 and info.value.code == "invalid_request"
            # What the library refuses is refused before it is sent, with the same error.
            with pytest.raises(ConfigError, match="doc_id has 2000 characters"):
                client.add(FLOOD, "x" * 2000)
            with pytest.raises(ConfigError, match="lone surrogate"):
                client.add("A text \ud800 with a lone surrogate.", "c-sur")
            for bad in (1.5, True, None, "2"):
                with pytest.raises(ConfigError, match="positive integer"):
                    client.group(bad)  # type: ignore[arg-type]
                with pytest.raises(ConfigError, match="positive integer"):
                    client.undo(bad)  # type: ignore[arg-type]
        with Client(server.url, api_key="wrong") as client:
            with pytest.raises(ServiceError) as info:
                client.add(FLOOD, "c-key")
            assert info.value.status == 401 and info.value.code == "unauthorized"
        with pytest.raises(ConfigError):
            Client("ftp://host")
        with pytest.raises(ConfigError):
            Client(server.url, retries=-1)

    def test_add_many(self, server: UvicornServer) -> None:
        """Batches of batch_size; a bad item comes back as its error, in place."""
        with Client(server.url, api_key=KEY, batch_size=2) as client:
            docs: list[Any] = [
                {"text": FLOOD, "id": "m-1"},
                "  ",
                {"text": FLOOD_REPOST, "id": "m-2", "title": "Again"},
                {"title": "no text"},
                ORCHARD + " Batch.",
            ]
            out = client.add_many(docs)
        assert [type(o) for o in out] == [
            AddResult, EmptyDocumentError, AddResult, ConfigError, AddResult,
        ]  # fmt: skip  (the one without text is refused before it is sent, in its place)
        assert isinstance(out[0], AddResult) and isinstance(out[2], AddResult)
        assert out[2].similar_id == out[0].similar_id and out[2].doc_id == "m-2"

    def test_unreachable_after_retries(self) -> None:
        """A closed port: retries, then StoreUnavailableError (no hang, no traceback)."""
        transport = Faulty()
        client = Client(
            f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01, transport=transport
        )
        with client, pytest.raises(StoreUnavailableError, match="cannot be reached"):
            client.add(FLOOD)  # a connection never made is safe to retry, id or not
        assert transport.sent == 3

    def test_lost_answer_resent_only_with_an_id(self, server: UvicornServer) -> None:
        """With an id a lost answer is resent and applied once; without one, not resent."""
        added = counter(server, "nshash_documents_added_total")
        transport = Faulty(lose={1})
        with Client(server.url, api_key=KEY, backoff=0.01, transport=transport) as client:
            result = client.add(ORCHARD + " Lost once.", "c-lost")
        assert transport.sent == 2 and result.replayed  # the resend found the first write
        assert counter(server, "nshash_documents_added_total") == added + 1

        transport = Faulty(lose={1})
        with Client(server.url, api_key=KEY, backoff=0.01, transport=transport) as client:
            with pytest.raises(StoreUnavailableError):
                client.add(ORCHARD + " Lost, no id.")
        assert transport.sent == 1
        assert counter(server, "nshash_documents_added_total") == added + 2

    def test_503_retried_when_safe(self, server: UvicornServer) -> None:
        """503 is retried for an add with an id and for reads, not for an add without one."""
        transport = Faulty(unavailable={1, 2})
        with Client(server.url, api_key=KEY, backoff=0.01, transport=transport) as client:
            assert not client.add(ORCHARD + " After an outage.", "c-503").replayed
            assert transport.sent == 3
            transport.unavailable = {4}
            assert client.query(ORCHARD + " After an outage.") is not None
            assert transport.sent == 5
            transport.unavailable = {6}
            with pytest.raises(StoreUnavailableError, match="answered 503 store_unavailable"):
                client.add(ORCHARD + " No id, no retry.")
            assert transport.sent == 6


class TestExample:
    """``example/http_client.py`` runs on the client."""

    def test_sends_and_lists(self, server: UvicornServer) -> None:
        """With the key it prints each article's group and the hot stories; with a wrong key
        one ``Error:`` line and exit 1."""
        script = [sys.executable, str(EXAMPLE), "--url", server.url, "--batch", "--top", "3"]
        env = {"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}
        done = subprocess.run(
            [*script, "--api-key", KEY], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr
        assert "zh-metro-2       repost of" in done.stdout
        assert "Hot stories (30 articles sent):" in done.stdout
        assert "5 copies: 江城地铁5号线今日开通运营" in done.stdout
        wrong = subprocess.run(
            [*script, "--api-key", "wrong"], capture_output=True, text=True, timeout=120, env=env
        )
        assert wrong.returncode == 1 and wrong.stdout == ""
        assert wrong.stderr.startswith("Error: the service answered HTTP 401 unauthorized")
        assert len(wrong.stderr.splitlines()) == 1


def corpus(stories: int = 16, seed: int = 7) -> list[dict[str, str]]:
    """Stories of four long sentences, each in six lightly edited copies, with ids."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
        for _ in range(3000)
    ]
    docs = []
    for s in range(stories):
        sentences = [
            " ".join(rng.choice(words) for _ in range(rng.randint(12, 18))).capitalize() + "."
            for _ in range(4)
        ]
        for c in range(6):
            body = list(sentences)
            if c % 3 == 1:
                body[c % 4] = body[c % 4].replace(" ", "  ", 2).upper()
            if c % 3 == 2:
                del body[c % 4]
            header = ["", f"By staff reporter {c}\n", f"Site {c} news desk\n"][c % 3]
            docs.append({"id": f"s{s}-c{c}", "text": header + " ".join(body)})
    rng.shuffle(docs)
    return docs


def partition(groups: dict[str, int]) -> set[frozenset[str]]:
    """The sets of ids that share a group."""
    by_group: dict[int, set[str]] = {}
    for doc_id, similar_id in groups.items():
        by_group.setdefault(similar_id, set()).add(doc_id)
    return {frozenset(ids) for ids in by_group.values()}


class LosingAsync(httpx.AsyncBaseTransport):
    """Passes requests to a real async transport; loses the answer of every *every*-th new
    request (a resend of it goes through)."""

    def __init__(self, every: int) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.every = every
        self.seen: set[bytes] = set()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.content
        first = body not in self.seen
        self.seen.add(body)
        response = await self.real.handle_async_request(request)
        if first and len(self.seen) % self.every == 0:
            await response.aread()
            await response.aclose()
            self.lost += 1
            raise httpx.ReadError("injected: the answer was lost", request=request)
        return response

    async def aclose(self) -> None:
        await self.real.aclose()


@pytest.mark.slow
class TestAsyncClient:
    """The asyncio client under concurrency against a real service."""

    def test_16_tasks_apply_each_document_once(self, server: UvicornServer, tmp_path: Path) -> None:
        """16 tasks send every document twice, answers get lost: each is applied once, and
        the groups are those of sequential calls (made to the module's service)."""
        docs = corpus()
        concurrent_server = serve(tmp_path / "concurrent")
        try:
            transport = LosingAsync(every=7)
            answers: dict[str, list[AddResult]] = {d["id"]: [] for d in docs}
            sends = docs + docs[::-1]  # every document twice, from different tasks

            async def crawl() -> None:
                client = AsyncClient(concurrent_server.url, backoff=0.01, transport=transport)
                async with client:

                    async def task(k: int) -> None:
                        for doc in sends[k::16]:
                            result = await client.add(doc["text"], doc["id"])
                            answers[doc["id"]].append(result)

                    await asyncio.gather(*(task(k) for k in range(16)))

            asyncio.run(crawl())
            assert transport.lost > 10  # the retries were exercised
            assert counter(concurrent_server, "nshash_documents_added_total") == len(docs)
            assert counter(concurrent_server, "nshash_store_documents") == len(docs)
            for got in answers.values():
                assert len(got) == 2 and got[0].similar_id == got[1].similar_id
                assert sum(not r.replayed for r in got) <= 1

            with Client(concurrent_server.url) as client:
                again = {d["id"]: client.add(d["text"], d["id"]) for d in docs}
                concurrent = {
                    d["id"]: client.document(d["id"]).similar_id  # type: ignore[union-attr]
                    for d in docs
                }
            assert all(r.replayed for r in again.values())
            assert {k: r.similar_id for k, r in again.items()} == {
                k: got[0].similar_id for k, got in answers.items()
            }
            with Client(server.url, api_key=KEY) as client:
                for doc in docs:
                    client.add(doc["text"], "seq-" + doc["id"])
                sequential = {
                    d["id"]: client.document("seq-" + d["id"]).similar_id  # type: ignore[union-attr]
                    for d in docs
                }
            assert partition(concurrent) == partition(sequential)
            assert len(partition(sequential)) == 16
        finally:
            concurrent_server.stop()


class TestAnswersOfAnotherService:
    """A base URL pointing at another JSON API answers 2xx in shapes nshash never sends: each
    call says so (ServiceError ``invalid_response``), where it raised a KeyError or TypeError
    from inside, and ``ping`` no longer takes any 2xx for nshash's readiness."""

    @pytest.mark.parametrize("body", [{}, [1, 2], {"similar_id": "abc"}, {"groups": 7}])
    def test_every_call(self, body: Any) -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json=body))
        with Client("http://other.example", transport=transport, retries=0) as client:
            calls = [
                lambda: client.add("A text about the harbour bridge.", "a"),
                lambda: client.add_many(["A text about the harbour bridge."]),
                lambda: client.query("A text about the harbour bridge."),
                lambda: client.group(1),
                lambda: client.groups(),
                lambda: client.corrections(),
                lambda: client.undo(1),
                lambda: client.hot(),
                lambda: client.find("bridge"),
                client.ping,
            ]
            for call in calls:
                with pytest.raises(ServiceError) as info:
                    call()
                assert info.value.code == "invalid_response"

    def test_async_too(self) -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json={}))

        async def run() -> None:
            async with AsyncClient("http://other.example", transport=transport) as client:
                with pytest.raises(ServiceError, match="not one nshash sends"):
                    await client.add("A text about the harbour bridge.")
                with pytest.raises(ServiceError, match="not one nshash sends"):
                    await client.ping()

        asyncio.run(run())
