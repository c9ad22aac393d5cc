"""The service when inputs are hostile and the disk or the client fails.

* a lone surrogate or NUL in a batch item fails that item alone, on every store, and nothing
  unreadable is stored (the read routes keep answering 200, across a restart);
* ``/readyz`` answers 503 while the store cannot write, 200 once it can again;
* error bodies carry no server paths, store URLs no secrets;
* a body that never arrives gets 408, a client that goes away is not counted as a 500;
* compares are size-limited (route and command) and the OpenAPI document states the limits;
* ``nshash serve`` turns Nagle's algorithm off for every worker count.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from nshash import ConfigError, NSHash, open_store
from nshash.cli import main
from nshash.stores import durable
from service import Settings, create_app
from tests.test_disk_faults import _FailingBatchDB
from tests.test_service_uvicorn import FLOOD, FLOOD_REPOST, ORCHARD, UvicornServer

#: A batch whose middle items cannot be stored (JSON escapes: a lone surrogate, NUL).
HOSTILE_BATCH = (
    b'{"documents": ['
    b'{"text": "' + FLOOD.encode() + b'", "id": "good-1", "title": "Flood"},'
    b'{"text": "' + ORCHARD.encode() + b'", "id": "bad-title", "title": "x\\ud800y"},'
    b'{"text": "' + ORCHARD.encode() + b'", "id": "bad-\\udfff-id"},'
    b'{"text": "' + ORCHARD.encode() + b'", "id": "nul-title", "title": "a\\u0000b"},'
    b'{"text": "' + ORCHARD.encode() + b'", "id": "nul\\u0000id"},'
    b'{"text": "bad text \\ud800 ' + ORCHARD.encode() + b'", "id": "bad-text"},'
    b'{"text": "' + FLOOD_REPOST.encode().replace(b"\n", b"\\n") + b'", "id": "good-2"}'
    b"]}"
)


def _post_batch(client: TestClient) -> dict[str, Any]:
    response = client.post(
        "/v1/documents/batch",
        content=HOSTILE_BATCH,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def _reads_answer(client: TestClient, similar_id: int) -> None:
    for path in ("/v1/groups?min_size=1", f"/v1/groups/{similar_id}", "/v1/documents/good-1"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
    assert client.get("/v1/documents/bad-title").status_code == 404


class TestHostileBatch:
    """One bad item of a batch fails alone, and no store keeps what cannot be read back."""

    def test_bad_items_fail_alone_on_every_store(self, store_url: str) -> None:
        """Surrogates and NUL in ids, titles and texts get 422 entries; the good items go in
        and every read route still answers, also after a restart."""
        settings = Settings(store_url=store_url)
        with TestClient(create_app(settings)) as client:
            body = _post_batch(client)
            assert body["added"] == 2 and body["failed"] == 5
            codes = [r.get("error", {}).get("code") for r in body["results"]]
            assert codes[0] is None and codes[6] is None
            assert set(codes[1:6]) <= {"invalid_argument", "invalid_request"}, codes
            good = body["results"][0]
            assert body["results"][6]["similar_id"] == good["similar_id"]
            _reads_answer(client, good["similar_id"])
        if store_url != "memory://":
            with TestClient(create_app(settings)) as client:
                _reads_answer(client, good["similar_id"])

    @pytest.mark.parametrize("backend", ["memory-file", "leveldb"])
    def test_a_title_stored_before_the_check_still_reads(
        self, tmp_path: Path, backend: str
    ) -> None:
        """A lone surrogate that an older version let into a store is shown as U+FFFD: the
        read routes answer 200, never 500."""
        if backend == "leveldb":
            pytest.importorskip("plyvel")
            url = f"leveldb://{tmp_path}/db"
        else:
            url = f"memory://{tmp_path}/s.pkl"
        with NSHash.open(url) as nsh:  # the store itself, under the library's check
            sid = nsh.store.assign(nsh.prepare(FLOOD), nsh.policy, "legacy", "x\ud800y")[0]
        with TestClient(create_app(Settings(store_url=url))) as client:
            group = client.get(f"/v1/groups/{sid.similar_id}")
            assert group.status_code == 200 and group.json()["members"][0]["title"] == "x\ufffdy"
            assert client.get("/v1/groups?min_size=1").status_code == 200
            assert client.get("/v1/documents/legacy").json()["title"] == "x\ufffdy"

    def test_single_route_refuses_them(self) -> None:
        """The single-document route answers 422 for the same values."""
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            for raw in (
                b'{"text": "' + ORCHARD.encode() + b'", "title": "x\\ud800y"}',
                b'{"text": "' + ORCHARD.encode() + b'", "id": "a\\u0000b"}',
                b'{"text": "' + ORCHARD.encode() + b'", "title": "a\\u0000b"}',
            ):
                response = client.post(
                    "/v1/documents", content=raw, headers={"Content-Type": "application/json"}
                )
                assert response.status_code == 422, response.text
                assert response.json()["error"]["code"] in ("invalid_request", "invalid_json")

    def test_library_refuses_them(self) -> None:
        """NSHash.add, add_many and query refuse them with ConfigError (add_many per item)."""
        with NSHash.open("memory://") as nsh:
            for kwargs in ({"doc_id": "a\x00"}, {"title": "t\ud800"}, {"doc_id": "x" * 1025}):
                with pytest.raises(ConfigError):
                    nsh.add(ORCHARD, **kwargs)
            with pytest.raises(ConfigError, match="surrogate"):
                nsh.query("text \udc00 " + ORCHARD)
            results = nsh.add_many(
                [{"text": ORCHARD, "title": "\ud800"}, {"text": FLOOD, "id": "ok"}]
            )
            assert isinstance(results[0], ConfigError) and results[1].doc_id == "ok"
            assert nsh.stats().documents == 1


class _FlakyWrite:
    def __init__(self) -> None:
        self.failing = False
        self.real = os.write

    def __call__(self, fd: int, data: Any) -> int:
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real(fd, data)


class TestReadiness:
    """/readyz answers 503 while the store cannot write, and error bodies show no paths."""

    def test_memory_store_on_a_full_disk(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A failed journal write: the add answers 503 without a path, /readyz 503 until
        the disk takes writes again."""
        flaky = _FlakyWrite()
        monkeypatch.setattr(durable, "_write", flaky)
        path = tmp_path / "secret-dir" / "n.pkl"
        with TestClient(create_app(Settings(store_url=f"memory://{path}"))) as client:
            assert client.get("/readyz").status_code == 200
            flaky.failing = True
            response = client.post("/v1/documents", json={"text": FLOOD, "id": "f"})
            assert response.status_code == 503
            assert "secret-dir" not in response.text and str(tmp_path) not in response.text
            assert "No space left" in response.json()["error"]["message"]
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "secret-dir" not in ready.text
            flaky.failing = False
            assert client.get("/readyz").status_code == 200
            assert (
                client.post("/v1/documents", json={"text": FLOOD, "id": "f"}).json()["replayed"]
                is False
            )

    def test_leveldb_after_a_write_error(self, tmp_path: Path) -> None:
        """LevelDB refuses writes after an error: /readyz 503 until it reopened and verified."""
        pytest.importorskip("plyvel")
        settings = Settings(store_url=f"leveldb://{tmp_path}/db")
        with TestClient(create_app(settings)) as client:
            client.post("/v1/documents", json={"text": FLOOD})
            store: Any = client.app.state.service.store.current.store  # type: ignore[attr-defined]
            store._kv.db = _FailingBatchDB(store._kv.db)
            assert client.post("/v1/documents", json={"text": ORCHARD}).status_code == 503
            store._kv.db.failing = False
            assert client.get("/readyz").status_code == 503
            time.sleep(1.1)
            assert client.get("/readyz").status_code == 200
            assert client.post("/v1/documents", json={"text": ORCHARD}).status_code == 200


class TestSecrets:
    """No URL form puts a secret into a message; a bad port is a ConfigError."""

    @pytest.mark.parametrize(
        "url",
        [
            "redis://127.0.0.1:6379/0?password=S3cret&bogus=1",
            "redis://:S3cret@127.0.0.1:99999/0",
            "redis://user:S3cret@[::1/0",
            "unix://:S3cret@/run/x.sock?bogus=1",
            "redis:S3cret@127.0.0.1:6379",
            "memory://?token=S3cret",
        ],
    )
    def test_messages_mask_secrets(self, url: str) -> None:
        """The error names the problem and never the secret."""
        pytest.importorskip("redis")
        with pytest.raises(ConfigError) as info:
            open_store(url)
        assert "S3cret" not in str(info.value)

    def test_bad_port_on_the_command_line(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``nshash stats`` on port 99999 is bad usage (exit 2) with the reason; no
        traceback, no password."""
        pytest.importorskip("redis")
        assert main(["stats", "--store", "redis://:pw-S3cret@localhost:99999/0"]) == 2
        err = capsys.readouterr().err
        assert "Port out of range" in err and "redis://:***@localhost:99999/0" in err
        assert "S3cret" not in err and "Traceback" not in err


class TestCompareLimits:
    """Compares are bounded in size, on the route and on the command line."""

    def test_route_413(self) -> None:
        """A text over NSHASH_MAX_COMPARE_CHARS answers 413 at once."""
        pytest.importorskip("jieba")
        settings = Settings(store_url="memory://", max_compare_chars=1000)
        with TestClient(create_app(settings)) as client:
            response = client.post("/v1/compare", json={"a": "x " * 600, "b": "y"})
            assert response.status_code == 413
            assert response.json()["error"]["code"] == "payload_too_large"
            response = client.post("/v1/compare", json={"a": "a cat", "b": "a cat"})
            assert response.status_code == 200 and response.json()["scores"]["cosine"] == 1.0

    def test_command_refuses_a_long_text(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``nshash compare`` stops at --max-chars (default 200,000) with one Error line."""
        pytest.importorskip("jieba")
        big, small = tmp_path / "big.txt", tmp_path / "small.txt"
        big.write_text("word " * 50_000)  # 250,000 characters
        small.write_text("word word")
        assert main(["compare", str(big), str(small)]) == 1
        assert "over 200,000 characters" in capsys.readouterr().err
        assert main(["compare", str(big), str(small), "--max-chars", "300000", "--json"]) == 0
        assert "cosine" in json.loads(capsys.readouterr().out)


class TestOpenAPILimits:
    """The OpenAPI document states what the app enforces."""

    def test_limits_in_the_schema(self) -> None:
        """limit's maximum, the batch size, text lengths and the metric names are there."""
        settings = Settings(
            store_url="memory://", max_batch=7, max_groups_limit=50, max_compare_chars=999
        )
        with TestClient(create_app(settings)) as client:
            schema = client.get("/openapi.json").json()
        params = schema["paths"]["/v1/groups"]["get"]["parameters"]
        limit = next(p for p in params if p["name"] == "limit")
        assert limit["schema"]["maximum"] == 50
        components = schema["components"]["schemas"]
        assert components["BatchRequest"]["properties"]["documents"]["maxItems"] == 7
        compare = components["CompareRequest"]["properties"]
        assert compare["a"]["maxLength"] == compare["b"]["maxLength"] == 999
        array = next(o for o in compare["metrics"]["anyOf"] if o.get("type") == "array")
        assert "levenshtein" in array["items"]["enum"]
        doc = components["DocumentIn"]["properties"]
        assert doc["text"]["maxLength"] and doc["id"]["anyOf"][0]["maxLength"] == 1024
        assert schema["info"]["x-limits"]["max_body_bytes"] == settings.max_body_bytes
        assert "408" in schema["paths"]["/v1/documents"]["post"]["responses"]


@pytest.mark.slow
class TestSlowClients:
    """A real uvicorn server against clients that stall or go away."""

    def test_body_never_sent_gets_408_and_disconnect_is_not_500(self, tmp_path: Path) -> None:
        """A declared body that never comes is answered 408 after NSHASH_BODY_TIMEOUT and
        the connection closed; a client gone mid-body is counted as 499, not 500."""
        server = UvicornServer(
            {"NSHASH_STORE_URL": "memory://", "NSHASH_BODY_TIMEOUT": "1"}, cwd=tmp_path
        )
        server.start()
        try:
            head = (
                b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(head + b'{"text": ')
                start = time.monotonic()
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
                waited = time.monotonic() - start
            assert data.startswith(b"HTTP/1.1 408"), data[:200]
            assert b"request_timeout" in data and 0.8 < waited < 8
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(head + b'{"text": "half')
                time.sleep(0.2)
            time.sleep(0.5)
            metrics = httpx.get(f"{server.url}/metrics").text
            posts = [
                line
                for line in metrics.splitlines()
                if line.startswith("nshash_http_requests_total") and 'method="POST"' in line
            ]
            assert any('status="408"' in line for line in posts), posts
            assert any('status="499"' in line for line in posts), posts
            assert not any('status="500"' in line for line in posts), posts
        finally:
            server.stop()

    def test_nshash_serve_caps_connections_and_idle_time(self, tmp_path: Path) -> None:
        """Under ``nshash serve``, stalled connections past NSHASH_MAX_CONNECTIONS get 503 at
        once, they are cut at the body timeout, and an idle kept-alive connection is closed
        after NSHASH_IDLE_TIMEOUT."""
        code = "import sys; from nshash.cli import main; sys.exit(main(sys.argv[1:]))"
        server = UvicornServer(
            {
                "NSHASH_STORE_URL": "memory://",
                "NSHASH_MAX_CONNECTIONS": "3",
                "NSHASH_BODY_TIMEOUT": "2",
                "NSHASH_IDLE_TIMEOUT": "1",
            },
            cwd=tmp_path,
            command=[sys.executable, "-c", code, "serve", "--port", "{port}"],
        )
        server.start()
        stalled: list[socket.socket] = []
        try:
            head = (
                b"POST /v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n"
            )
            for _ in range(2):  # with the next one, three connections: the cap
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                sock.sendall(head)
                stalled.append(sock)
            time.sleep(0.3)
            assert httpx.get(f"{server.url}/healthz").status_code == 503
            for sock in stalled:
                assert sock.recv(4096).startswith(b"HTTP/1.1 408")
            assert httpx.get(f"{server.url}/healthz").status_code == 200
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as idle:
                idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = b""
                while not answer.endswith(b'{"status":"ok"}'):
                    answer += idle.recv(4096)
                assert answer.startswith(b"HTTP/1.1 200")
                start = time.monotonic()
                assert idle.recv(4096) == b""  # closed by the server
                assert time.monotonic() - start < 5
        finally:
            for sock in stalled:
                sock.close()
            server.stop()


class TestNoDelay:
    """``nshash serve`` sets TCP_NODELAY on its listening socket, which accepted connections
    inherit (uvicorn's own shared socket of ``--workers N`` lacks it: 40 ms per answer)."""

    def test_accepted_connections_inherit_no_delay(self) -> None:
        """A connection accepted on a socket prepared like ``nshash serve``'s has Nagle off."""
        from nshash.cli.serve import _no_delay

        listener = socket.socket(socket.AF_INET)  # as uvicorn's bind_socket makes it
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        _no_delay(listener)
        with listener, socket.create_connection(listener.getsockname()) as client:
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert client  # the client side is not ours to set
