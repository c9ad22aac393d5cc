"""The HTTP service on a real uvicorn server in a subprocess, driven over loopback with httpx.

The server is started the way production starts it: ``uvicorn --factory`` with the settings
in ``NSHASH_*`` environment variables (and once through ``nshash serve``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.redis_server import free_port

REPO = Path(__file__).resolve().parents[1]
KEY = "uvicorn-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}

FLOOD = (
    "The river flooded the lower town after three days of heavy rain. "
    "Rescue teams evacuated more than two hundred families by boat. "
    "The mayor said the damage would take months to repair completely."
)
BATTERY = (
    "Scientists announced a new battery chemistry with double the capacity. "
    "The prototype cell survived ten thousand charge cycles in the lab. "
    "Manufacturers expect the first phones with the cells next spring season."
)
ORCHARD = "The old orchard on the hill produced a record harvest of apples this autumn."
FLOOD_REPOST = "Breaking news!\n" + FLOOD.upper() + "\nShare this story."


class UvicornServer:
    """One uvicorn process serving the app on a free loopback port.

    Args:
        env: ``NSHASH_*`` settings for the app.
        cwd: the working directory of the server.
        command: the command line; ``{port}`` is replaced by the chosen port. By default
            ``python -m uvicorn --factory service.app:create_app``.
    """

    def __init__(
        self, env: dict[str, str], cwd: Path = REPO, command: list[str] | None = None
    ) -> None:
        self.env = env
        self.cwd = cwd
        self.command = command or [
            sys.executable, "-m", "uvicorn", "--factory", "service.app:create_app",
            "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning",
        ]  # fmt: skip
        self.port = 0
        #: Put the repository on PYTHONPATH (so ``service`` imports from the source tree).
        self.repo_on_path = True
        self.process: subprocess.Popen[bytes] | None = None
        self.log: Path = cwd / f"uvicorn-{id(self)}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until /healthz answers."""
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
        env.update(self.env)
        if self.repo_on_path:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        args = [a.replace("{port}", str(self.port)) for a in self.command]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(args, cwd=self.cwd, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"uvicorn exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"uvicorn did not answer within {timeout}s:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        """Stop the server with SIGTERM (a graceful shutdown) and return its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        code = self.process.returncode
        self.process = None
        return code


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    """One server for the module: a journaled memory store, an API key, small limits."""
    directory = tmp_path_factory.mktemp("uvicorn")
    srv = UvicornServer(
        {
            "NSHASH_STORE_URL": f"memory://{directory}/nshash.pkl",
            "NSHASH_API_KEY": KEY,
            "NSHASH_MAX_BODY_BYTES": "4096",
            "NSHASH_MAX_BATCH": "3",
        },
        cwd=directory,
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def http(server: UvicornServer) -> Iterator[httpx.Client]:
    """An httpx client of the module's server, sending the API key."""
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as client:
        yield client


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    """Check *response* is an error in the one JSON shape; return its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    return str(body["error"]["message"])


class TestRoutes:
    """Every route over real HTTP."""

    def test_health(self, http: httpx.Client) -> None:
        """healthz and readyz answer 200 on a working store."""
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json()["status"] == "ready"

    def test_documents_groups_query(self, http: httpx.Client) -> None:
        """Add, repost, replay, look up and list through the server; a digest merges nothing."""
        a = http.post("/v1/documents", json={"text": FLOOD, "id": "r-a", "title": "Flood"}).json()
        b = http.post("/v1/documents", json={"text": FLOOD_REPOST, "id": "r-b"}).json()
        assert b["similar_id"] == a["similar_id"] and b["duplicate"] is True
        again = http.post("/v1/documents", json={"text": "other words here", "id": "r-a"}).json()
        assert again == {**a, "replayed": True}
        assert http.post("/v1/query", json={"text": FLOOD_REPOST}).json() == {
            "similar_id": a["similar_id"]
        }
        doc = http.get("/v1/documents/r-b").json()
        assert doc["similar_id"] == a["similar_id"] and doc["id"] == "r-b"
        groups = http.get("/v1/groups", params={"min_size": 2}).json()["groups"]
        flood = next(g for g in groups if g["similar_id"] == a["similar_id"])
        got = [(m["id"], m["title"], m["verdict"]) for m in flood["members"]]
        assert got == [("r-a", "Flood", "new story"), ("r-b", None, "joined")]

        batt = http.post("/v1/documents", json={"text": BATTERY, "id": "r-c"}).json()
        digest = http.post("/v1/documents", json={"text": FLOOD + " " + BATTERY}).json()
        assert digest["merged_from"] == []
        assert digest["similar_id"] in (a["similar_id"], batt["similar_id"])
        kept = http.get(f"/v1/groups/{batt['similar_id']}").json()
        assert kept["similar_id"] == batt["similar_id"]

    def test_batch(self, http: httpx.Client) -> None:
        """A batch answers in order; a bad item errs alone; over the count limit is 413."""
        docs: list[Any] = [{"text": ORCHARD, "id": "bt-1"}, {"text": "  "}, {"title": "x"}]
        body = http.post("/v1/documents/batch", json={"documents": docs}).json()
        assert [r["index"] for r in body["results"]] == [0, 1, 2]
        assert body["results"][0]["id"] == "bt-1"
        assert body["results"][1]["error"]["code"] == "empty_document"
        assert body["results"][2]["error"]["code"] == "invalid_request"
        four = {"documents": [{"text": f"{i} apples"} for i in range(4)]}
        assert_error(http.post("/v1/documents/batch", json=four), 413, "batch_too_large")

    def test_compare(self, http: httpx.Client) -> None:
        """Compare scores two texts (or says the extra is missing)."""
        response = http.post("/v1/compare", json={"a": FLOOD, "b": FLOOD_REPOST})
        if response.status_code == 501:
            pytest.skip("nshash.toolkit.similarity is not importable in the server")
        scores = response.json()["scores"]
        assert scores and all(0.0 <= v <= 1.0 for v in scores.values())
        assert_error(
            http.post("/v1/compare", json={"a": "x", "b": "y", "metrics": ["nope"]}),
            422,
            "invalid_argument",
        )

    def test_metrics(self, http: httpx.Client) -> None:
        """/metrics is Prometheus text with request counts and document counters."""
        http.post("/v1/documents", json={"text": "A short unrelated note about tea prices."})
        text = http.get("/metrics").text
        assert "# TYPE nshash_http_requests_total counter" in text
        assert 'route="/v1/documents",status="200"' in text
        assert "nshash_documents_added_total" in text
        assert "nshash_duplicates_found_total" in text
        assert "nshash_store_groups" in text
        assert "nshash_http_request_duration_seconds_bucket" in text

    def test_openapi(self, server: UvicornServer) -> None:
        """The schema and the docs page are served without a key."""
        schema = httpx.get(server.url + "/openapi.json").json()
        assert "/v1/documents/batch" in schema["paths"]
        assert httpx.get(server.url + "/docs").status_code == 200


class TestErrorCodes:
    """Every error code over real HTTP, in the one JSON shape."""

    def test_401(self, server: UvicornServer) -> None:
        """No key or a wrong key is 401."""
        assert_error(httpx.get(server.url + "/v1/groups"), 401, "unauthorized")
        wrong = {"Authorization": "Bearer nope"}
        assert_error(httpx.get(server.url + "/v1/groups", headers=wrong), 401, "unauthorized")

    def test_404(self, http: httpx.Client) -> None:
        """Unknown route, document and group are 404 with their own codes."""
        assert_error(http.get("/nope"), 404, "not_found")
        assert_error(http.get("/v1/documents/never-added"), 404, "document_not_found")
        assert_error(http.get("/v1/groups/123456"), 404, "group_not_found")

    def test_405(self, http: httpx.Client) -> None:
        """A wrong method is 405."""
        assert_error(http.put("/v1/documents", json={}), 405, "method_not_allowed")

    def test_413_content_length(self, http: httpx.Client) -> None:
        """A body over NSHASH_MAX_BODY_BYTES (4096 here) is 413."""
        message = assert_error(
            http.post("/v1/documents", json={"text": "word " * 2000}), 413, "payload_too_large"
        )
        assert "4096" in message

    def test_413_streamed(self, http: httpx.Client) -> None:
        """A chunked body without Content-Length is counted as it arrives and cut at 413."""
        body = json.dumps({"text": "word " * 2000}).encode()

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 1024):
                yield body[i : i + 1024]

        response = http.post(
            "/v1/documents", content=chunks(), headers={"content-type": "application/json"}
        )
        assert_error(response, 413, "payload_too_large")

    def test_422(self, http: httpx.Client) -> None:
        """Malformed JSON, wrong types and empty text are 422 with what was wrong."""
        bad_json = http.post(
            "/v1/documents", content=b"{oops", headers={"content-type": "application/json"}
        )
        assert_error(bad_json, 422, "invalid_json")
        assert "'text'" in assert_error(
            http.post("/v1/documents", json={"text": 3}), 422, "invalid_request"
        )
        assert_error(http.post("/v1/documents", json={"text": "…  —"}), 422, "empty_document")
        assert_error(http.get("/v1/groups", params={"limit": -1}), 422, "invalid_request")

    def test_503(self, tmp_path: Path) -> None:
        """With Redis unreachable (a closed port): readyz and store routes 503, healthz 200."""
        pytest.importorskip("redis")
        closed = f"redis://127.0.0.1:{free_port()}/0?socket_connect_timeout=0.5"
        srv = UvicornServer({"NSHASH_STORE_URL": closed}, cwd=tmp_path)
        srv.start()
        try:
            assert httpx.get(srv.url + "/healthz").status_code == 200
            assert_error(httpx.get(srv.url + "/readyz"), 503, "store_unavailable")
            response = httpx.post(srv.url + "/v1/documents", json={"text": FLOOD}, timeout=10)
            assert_error(response, 503, "store_unavailable")
            assert_error(httpx.get(srv.url + "/v1/groups/1"), 503, "store_unavailable")
        finally:
            srv.stop()


class TestProcess:
    """The server process: graceful shutdown, restart, and the ``nshash serve`` entry."""

    def test_restart_keeps_state(self, tmp_path: Path) -> None:
        """SIGTERM runs the lifespan's close; a new server on the same store finds the groups."""
        env = {"NSHASH_STORE_URL": f"memory://{tmp_path}/store.pkl"}
        first = UvicornServer(env, cwd=tmp_path)
        first.start()
        try:
            added = httpx.post(first.url + "/v1/documents", json={"text": FLOOD, "id": "k"})
            assert added.json()["similar_id"] == 1
        finally:
            # uvicorn shuts down gracefully, then re-raises the signal it caught.
            assert first.stop() in (0, -signal.SIGTERM)
        # The journal holds the write; the lifespan's close released the lock file, or the
        # second server below could not open the store.
        assert (tmp_path / "store.pkl.journal").stat().st_size > 0
        second = UvicornServer(env, cwd=tmp_path)
        second.start()
        try:
            assert httpx.get(second.url + "/v1/documents/k").json()["similar_id"] == 1
            repost = httpx.post(second.url + "/v1/documents", json={"text": FLOOD_REPOST})
            assert repost.json() == {
                "similar_id": 1,
                "duplicate": True,
                "merged_from": [],
                "id": None,
                "replayed": False,
            }
        finally:
            second.stop()

    def test_wheel_installs_nshash_service(self, tmp_path: Path) -> None:
        """The wheel holds the app as nshash_service (no top-level service) and it serves."""
        setuptools = pytest.importorskip("setuptools", reason="building the wheel needs it")
        if int(setuptools.__version__.split(".")[0]) < 77:
            pytest.skip("building the wheel needs setuptools>=77 (the test extra installs it)")
        import zipfile

        build = subprocess.run(
            [
                sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "-q", "-w", str(tmp_path / "dist"), str(REPO),
            ],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert build.returncode == 0, build.stderr
        (wheel,) = (tmp_path / "dist").glob("nshash-*.whl")
        names = zipfile.ZipFile(wheel).namelist()
        assert "nshash_service/app.py" in names and "nshash/methods/nshash/core.py" in names
        assert not [n for n in names if n.startswith("service/")]
        site = tmp_path / "site"
        install = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
             str(wheel)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert install.returncode == 0, install.stderr
        # Only the installed copy is importable: no repository on the path, run from elsewhere.
        env = {"PYTHONPATH": str(site), "NSHASH_STORE_URL": "memory://"}
        srv = UvicornServer(
            env,
            cwd=tmp_path,
            command=[
                sys.executable, "-c",
                "import sys, nshash_service.app as m;"
                " assert m.__file__.startswith(sys.argv[1]), m.__file__;"
                " import uvicorn; uvicorn.run('nshash_service.app:create_app', factory=True,"
                " host='127.0.0.1', port=int(sys.argv[2]), log_level='warning')",
                str(site), "{port}",
            ],
        )  # fmt: skip
        srv.repo_on_path = False
        srv.start()
        try:
            added = httpx.post(srv.url + "/v1/documents", json={"text": FLOOD})
            assert added.json()["similar_id"] == 1
        finally:
            srv.stop()

    def test_nshash_serve(self, tmp_path: Path) -> None:
        """``nshash serve --store URL`` runs this app on uvicorn from any directory."""
        code = "import sys; from nshash.cli import main; sys.exit(main(sys.argv[1:]))"
        store = f"memory://{tmp_path}/served.pkl"
        srv = UvicornServer(
            {},
            cwd=tmp_path,
            command=[
                sys.executable, "-c", code, "serve", "--store", store,
                "--host", "127.0.0.1", "--port", "{port}",
            ],
        )  # fmt: skip
        srv.start()
        try:
            assert httpx.get(srv.url + "/readyz").json() == {"status": "ready", "store": store}
            added = httpx.post(srv.url + "/v1/documents", json={"text": BATTERY})
            assert added.json()["similar_id"] == 1
        finally:
            srv.stop()
