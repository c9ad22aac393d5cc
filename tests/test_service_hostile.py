"""The service against hostile clients and failing stores (issue 34's probes, kept as tests).

* idle and half-header connections against a real ``nshash serve`` with a small connection
  cap: they lose their slot at the header deadline, so ``/healthz`` answers again;
* the access log of a real ``nshash serve``, scanned for the key, a wrong key and the
  session token: one line per request, secrets redacted;
* page sessions: the cookie holds no key, logout ends it on the server, wrong keys are
  limited;
* ``/readyz`` against Redis out of memory and a full disk (SQLite, LevelDB, journaled memory),
  and what it tells a caller without the key; a wrong Redis password stops ``nshash serve``;
* the two 500s (a huge ``min_size``, a non-ASCII digit in a story address);
* a compare at the size limit timed in CPU, lone surrogates, and the compare processes when
  the server is stopped or killed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service import Settings, create_app
from service.pages import COOKIE
from service.sessions import MAX_ATTEMPTS, Sessions
from tests.redis_server import RedisServer, redis_server_available
from tests.test_disk_faults import fill, small_disk  # noqa: F401 - a fixture
from tests.test_service_uvicorn import FLOOD, REPO, UvicornServer
from tests.test_store_contract import synthetic_story

SERVE = "import sys; from nshash.cli import main; sys.exit(main(sys.argv[1:]))"
KEY = "k3y-Zebra-88412"
AUTH = {"Authorization": f"Bearer {KEY}"}


def serve(tmp_path: Path, env: dict[str, str], *args: str) -> UvicornServer:
    """A real ``nshash serve`` with *env*, started (stop it when done)."""
    srv = UvicornServer(
        env,
        cwd=tmp_path,
        command=[sys.executable, "-c", SERVE, "serve", "--port", "{port}", *args],
    )
    srv.start()
    return srv


def children(pid: int) -> set[int]:
    """The ids of the live processes whose parent is *pid* (read from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != b"Z":
            found.add(int(entry))
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of *pids* still running (not gone, not zombies)."""
    left = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            left.add(pid)
    return left


def read_all(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """What *sock* receives until the peer closes or *timeout* passes; and whether it closed."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except TimeoutError:
        return data, False
    except ConnectionResetError:
        return data, True
    return data, True


# -- 1. idle connections ---------------------------------------------------------------------


@pytest.mark.slow
class TestIdleClients:
    """Connections that send nothing or half a header hold a slot for the header deadline only."""

    HEADER_TIMEOUT = 1.5

    @pytest.fixture
    def capped(self, tmp_path: Path) -> Iterator[UvicornServer]:
        """``nshash serve`` holding at most 5 connections, headers due within 1.5 s."""
        env = {
            "NSHASH_STORE_URL": "memory://",
            "NSHASH_MAX_CONNECTIONS": "5",
            "NSHASH_HEADER_TIMEOUT": str(self.HEADER_TIMEOUT),
        }
        srv = serve(tmp_path, env)
        yield srv
        srv.stop()

    def test_idle_sockets_at_the_cap_block_healthz_only_until_the_header_deadline(
        self, capped: UvicornServer
    ) -> None:
        """Five idle or half-sent connections fill the cap; /healthz answers 200 again within
        the header deadline (plus a second), and the stalled connections are closed, those
        that sent part of a request with a 408."""
        socks = [socket.create_connection(("127.0.0.1", capped.port)) for _ in range(5)]
        try:
            socks[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line
            socks[1].sendall(b"GE")
            opened = time.monotonic()
            time.sleep(0.3)
            first = httpx.get(capped.url + "/healthz", timeout=5)
            assert first.status_code == 503, "the idle connections did not fill the cap"
            ok_after = None
            while time.monotonic() - opened < 10:
                try:
                    if httpx.get(capped.url + "/healthz", timeout=5).status_code == 200:
                        ok_after = time.monotonic() - opened
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            assert ok_after is not None, "/healthz stayed 503 for 10 s"
            assert ok_after <= self.HEADER_TIMEOUT + 1.0, ok_after
            for i, sock in enumerate(socks):
                data, closed = read_all(sock, 3)
                assert closed, f"idle connection {i} is still open"
                if i < 2:
                    assert data.startswith(b"HTTP/1.1 408"), data
                else:
                    assert data == b""
        finally:
            for sock in socks:
                sock.close()

    def test_a_dripping_client_is_cut_at_the_deadline(self, capped: UvicornServer) -> None:
        """A request line sent a byte every 0.2 s is cut at the header deadline, with 408."""
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100
        with socket.create_connection(("127.0.0.1", capped.port)) as sock:
            start = time.monotonic()
            closed_after = None
            for byte in request:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed_after = time.monotonic() - start
                    break
                time.sleep(0.2)
                if time.monotonic() - start > self.HEADER_TIMEOUT + 2:
                    break
            data, closed = read_all(sock, 3)
            closed_after = closed_after or time.monotonic() - start
        assert closed and data.startswith(b"HTTP/1.1 408"), data
        assert closed_after <= self.HEADER_TIMEOUT + 3.5

    def test_kept_alive_clients_still_work(self, capped: UvicornServer) -> None:
        """A client that sends whole requests on one connection is not cut."""
        with httpx.Client(base_url=capped.url, timeout=5) as client:
            for _ in range(3):
                assert client.get("/healthz").status_code == 200
                time.sleep(self.HEADER_TIMEOUT / 2)
            added = client.post("/v1/documents", json={"text": FLOOD})
            assert added.status_code == 200


# -- 2. the key in the logs, sessions --------------------------------------------------------

_LINE = re.compile(r'"(GET|POST|HEAD|PUT) (\S+) HTTP/1\.1" (\d{3}) \d+\.\d ms$')


@pytest.mark.slow
class TestAccessLog:
    """The access log of ``nshash serve``: one line a request, no secret in it."""

    def test_no_key_or_token_in_the_log(self, tmp_path: Path) -> None:
        """The key in ``?key=``, a wrong key, the login form and the session token never
        reach the log; each request is one line with its method, address, status and ms."""
        wrong = "wr0ng-Guess-5531"
        srv = serve(tmp_path, {"NSHASH_STORE_URL": "memory://", "NSHASH_API_KEY": KEY})
        try:
            base = srv.url
            linked = httpx.get(f"{base}/stories/1?key={KEY}&x=1", follow_redirects=False)
            assert linked.status_code == 303
            assert httpx.get(f"{base}/?key={wrong}").status_code == 401
            assert httpx.get(f"{base}/?api_key={KEY}").status_code == 401
            login = httpx.post(f"{base}/login", data={"key": KEY, "next": "/check"})
            assert login.status_code == 303
            token = login.cookies[COOKIE]
            assert httpx.get(f"{base}/check", cookies={COOKIE: token}).status_code == 200
            assert httpx.get(f"{base}/v1/groups", headers=AUTH).status_code == 200
        finally:
            srv.stop()
        log = srv.log.read_text("utf-8")
        secrets = [KEY, wrong, token, Sessions(KEY)._secret.hex(), token.rsplit(".", 1)[1]]
        for secret in secrets:
            assert secret not in log
        lines = [m.groups() for m in map(_LINE.search, log.splitlines()) if m]
        seen = [(method, path, int(status)) for method, path, status in lines]
        assert ("GET", "/stories/1?key=[redacted]&x=1", 303) in seen
        assert ("GET", "/?key=[redacted]", 401) in seen
        assert ("GET", "/?api_key=[redacted]", 401) in seen
        assert ("POST", "/login", 303) in seen
        assert ("GET", "/check", 200) in seen
        assert ("GET", "/v1/groups", 200) in seen
        # One line per request: the six above, each once.
        assert sum(1 for m, p, _s in seen if m == "POST" and p == "/login") == 1
        assert sum(1 for _m, p, _s in seen if p == "/check") == 1

    def test_access_log_can_be_turned_off(self, tmp_path: Path) -> None:
        """``NSHASH_ACCESS_LOG=false`` writes no request lines."""
        env = {"NSHASH_STORE_URL": "memory://", "NSHASH_ACCESS_LOG": "false"}
        srv = serve(tmp_path, env)
        try:
            assert httpx.get(srv.url + "/v1/groups?x=1").status_code == 200
        finally:
            srv.stop()
        assert "/v1/groups" not in srv.log.read_text("utf-8")


class TestAccessLogInProcess:
    """The app's access lines, caught in-process."""

    def test_one_redacted_line_per_request(self, caplog: pytest.LogCaptureFixture) -> None:
        """Each request logs one ``nshash.access`` line; ``key=`` values are redacted."""
        caplog.set_level("INFO", logger="nshash.access")
        settings = Settings(store_url="memory://", api_key=KEY)
        with TestClient(create_app(settings)) as client:
            client.get(f"/stories/7?since=1h&key={KEY}", follow_redirects=False)
            client.get("/v1/groups?min_size=3", headers=AUTH)
            client.get("/nope%0AINFO:%20forged")
        lines = [r.getMessage() for r in caplog.records if r.name == "nshash.access"]
        assert len(lines) == 3, lines
        assert '"GET /nope%0AINFO:%20forged HTTP/1.1" 404' in lines[2]
        assert '"GET /stories/7?since=1h&key=[redacted] HTTP/1.1" 303' in lines[0]
        assert '"GET /v1/groups?min_size=3 HTTP/1.1" 200' in lines[1]
        assert all(KEY not in r.getMessage() for r in caplog.records)


class TestSessions:
    """The pages' login: a session token, revoked at logout; wrong keys limited."""

    @pytest.fixture
    def client(self) -> Iterator[TestClient]:
        """An app with an API key."""
        with TestClient(create_app(Settings(store_url="memory://", api_key=KEY))) as c:
            yield c

    def test_cookie_is_not_the_key(self, client: TestClient) -> None:
        """The cookie holds neither the key nor anything that works as the API's Bearer."""
        login = client.post("/login", data={"key": KEY, "next": "/"}, follow_redirects=False)
        assert login.status_code == 303
        token = login.cookies[COOKIE]
        assert KEY not in token and token != KEY
        bearer = {"Authorization": f"Bearer {token}"}
        assert client.get("/v1/groups", headers=bearer).status_code == 401
        assert client.get("/check").status_code == 200

    def test_logout_ends_the_session_on_the_server(self, client: TestClient) -> None:
        """A token replayed after logout opens nothing."""
        login = client.post("/login", data={"key": KEY, "next": "/"}, follow_redirects=False)
        token = login.cookies[COOKIE]
        client.get("/logout", follow_redirects=False)
        client.cookies.clear()
        client.cookies.set(COOKIE, token)
        replay = client.get("/check")
        assert replay.status_code == 401 and 'name="key"' in replay.text
        client.cookies.set(COOKIE, token.rsplit(".", 1)[0] + ".00")
        assert client.get("/check").status_code == 401

    def test_wrong_keys_are_rate_limited(self, client: TestClient) -> None:
        """Past the allowed wrong keys, the form (and ``?key=``) answers 429 without checking,
        even for the right key."""
        for i in range(MAX_ATTEMPTS):
            response = client.post("/login", data={"key": f"guess-{i}"})
            assert response.status_code == 401
        limited = client.post("/login", data={"key": KEY}, follow_redirects=False)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert client.get(f"/?key={KEY}", follow_redirects=False).status_code == 429


# -- 3. /readyz -------------------------------------------------------------------------------


def _add_until_refused(client: TestClient, limit: int = 400) -> int:
    """Add distinct stories until one is refused (503); return how many went in."""
    for i in range(limit):
        text = "\n".join(synthetic_story(5000 + i))
        response = client.post("/v1/documents", json={"text": text, "id": f"d{i}"})
        if response.status_code == 503:
            return i
        assert response.status_code == 200, response.text
    raise AssertionError(f"{limit} adds all went in: the store never refused a write")


def _ready_within(client: TestClient, status: int, seconds: float = 2.0) -> float:
    """Seconds until /readyz answers *status* (fails past *seconds*)."""
    start = time.monotonic()
    while True:
        got = client.get("/readyz").status_code
        took = time.monotonic() - start
        if got == status:
            return took
        assert took <= seconds, f"/readyz still {got} after {took:.1f} s"
        time.sleep(0.05)


@pytest.mark.skipif(not redis_server_available(), reason="redis-server is not installed")
class TestReadyRedis:
    """Redis out of memory (``maxmemory`` with ``noeviction``) and a wrong password."""

    @pytest.mark.parametrize("method", ["nshash", "simhash"])
    def test_out_of_memory_is_not_ready(self, tmp_path: Path, method: str) -> None:
        """/readyz is 503 within 2 s of Redis refusing writes (before any add fails), adds
        are 503, lookups still answer; /readyz is 200 again once Redis has room."""
        server = RedisServer(tmp_path / "redis", extra_args=["--maxmemory-policy", "noeviction"])
        server.start()
        try:
            import redis

            admin = redis.Redis.from_url(server.url)
            url = f"{server.url}?prefix=oom"
            settings = Settings(store_url=url, method=method)
            with TestClient(create_app(settings)) as client:
                added = client.post("/v1/documents", json={"text": FLOOD})
                assert added.status_code == 200
                assert client.get("/readyz").status_code == 200
                admin.config_set("maxmemory", "1")
                _ready_within(client, 503)
                body = client.get("/readyz").json()
                assert body["error"]["code"] == "store_unavailable"
                more = "\n".join(synthetic_story(77))
                assert client.post("/v1/documents", json={"text": more}).status_code == 503
                assert client.post("/v1/query", json={"text": FLOOD}).status_code == 200
                admin.config_set("maxmemory", "0")
                _ready_within(client, 200)
                assert client.post("/v1/documents", json={"text": more}).status_code == 200
            admin.close()
        finally:
            server.stop()

    @pytest.mark.slow
    def test_wrong_password_stops_serve(self, tmp_path: Path) -> None:
        """``nshash serve`` with a wrong Redis password exits 1 with one ``Error:`` line."""
        server = RedisServer(tmp_path / "redis", extra_args=["--requirepass", "right-pw"])
        server.start()
        try:
            url = f"redis://:wrong-pw@127.0.0.1:{server.port}/0"
            env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            done = subprocess.run(
                [sys.executable, "-c", SERVE, "serve", "--store", url, "--port", "0"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        finally:
            server.stop()
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
        assert "refused the credentials" in done.stderr and "wrong-pw" not in done.stderr


@pytest.mark.slow
class TestReadyFullDisk:
    """A store on a full 2 MB tmpfs: /readyz 503 while it refuses writes, 200 once freed."""

    @pytest.mark.parametrize("backend", ["sqlite", "leveldb", "memory"])
    def test_full_disk_is_not_ready(self, small_disk: Path, backend: str) -> None:  # noqa: F811
        """Adds fail on the full disk; /readyz then answers 503 within 2 s, and 200 within 2 s
        of the space coming back."""
        if backend == "leveldb":
            pytest.importorskip("plyvel")
        url = {
            "sqlite": f"sqlite://{small_disk}/store.db",
            "leveldb": f"leveldb://{small_disk}/store.ldb?fsync=always",
            "memory": f"memory://{small_disk}/store.pkl?fsync=always",
        }[backend]
        with TestClient(create_app(Settings(store_url=url))) as client:
            assert client.get("/readyz").status_code == 200
            filler = fill(small_disk, leave=48 * 1024)
            _add_until_refused(client)
            _ready_within(client, 503)
            filler.unlink()
            _ready_within(client, 200, seconds=4.0)


class TestReadyWithKey:
    """/readyz stays open with a key set, but tells only ready or not without it."""

    def test_no_url_without_the_key(self, tmp_path: Path) -> None:
        """Without the key: status only, and a 503 names no URL or path; with it: the URL."""
        url = f"memory://{tmp_path}/secret-place/store.pkl"
        with TestClient(create_app(Settings(store_url=url, api_key=KEY))) as client:
            assert client.get("/readyz").json() == {"status": "ready"}
            assert client.get("/readyz", headers=AUTH).json()["store"] == url
            wrong = {"Authorization": "Bearer nope"}
            assert client.get("/readyz", headers=wrong).json() == {"status": "ready"}
        with TestClient(create_app(Settings(store_url="redis://127.0.0.1:1/0?prefix=hidden",
                                            api_key=KEY))) as down:  # fmt: skip
            response = down.get("/readyz")
            assert response.status_code == 503
            assert response.json() == {
                "error": {"code": "store_unavailable", "message": "The store is not ready"}
            }


# -- 4. the two 500s -----------------------------------------------------------------------------


class TestNo500:
    """Inputs that used to answer 500."""

    def test_huge_min_size_on_every_store(self, store_url: str) -> None:
        """A min_size past 64 bits is 422; the largest 64-bit one lists nothing."""
        with TestClient(create_app(Settings(store_url=store_url))) as client:
            client.post("/v1/documents", json={"text": FLOOD})
            huge = client.get("/v1/groups", params={"min_size": "99999999999999999999999"})
            assert huge.status_code == 422 and huge.json()["error"]["code"] == "invalid_request"
            top = client.get("/v1/groups", params={"min_size": str(2**63 - 1)})
            assert top.status_code == 200 and top.json()["groups"] == []
            hot = client.get("/v1/groups", params={"min_size": str(2**63 - 1), "since": "1h"})
            assert hot.status_code == 200 and hot.json()["groups"] == []

    def test_non_ascii_digits_in_a_story_address(self) -> None:
        """``/stories/²`` (a digit to ``str.isdigit`` but not to ``int``) is a 404 page."""
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            for raw in ("%C2%B2", "%D9%A3", "%EF%BC%91"):  # superscript 2, Arabic 3, full-width 1
                response = client.get(f"/stories/{raw}")
                assert response.status_code == 404, (raw, response.text)
                assert "No such story" in response.text


    def test_ids_of_thousands_of_digits_on_the_pages(self) -> None:
        """A story or correction id past int()'s 4,300 digits is a 404 or 422 page, not a 500."""
        form = {"content-type": "application/x-www-form-urlencoded"}
        big = "1" * 4301
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            client.post("/v1/documents", json={"text": FLOOD, "id": "a"})
            answers = [
                client.get(f"/stories/{big}"),
                client.get("/check", params={"story": big}),
                client.post("/check", content=f"text=hi&story={big}".encode(), headers=form),
                client.post("/stories/1/join", content=f"other={big}".encode(), headers=form),
                client.post(f"/stories/{big}/detach", content=b"doc=a", headers=form),
                client.post(f"/corrections/{big}/undo", content=b"", headers=form),
            ]
            for r in answers:
                assert r.status_code in (404, 422), (r.request.url, r.status_code, r.text[:200])
                assert r.headers["content-type"].startswith("text/html")

    def test_explain_under_the_keyed_method_is_not_supported(self) -> None:
        """The keyed method's own explain has another shape: the route says 501, not 500."""
        with TestClient(create_app(Settings(store_url="memory://", method="keyed"))) as client:
            client.post("/v1/documents", json={"text": FLOOD})
            for text in (FLOOD, "Another story about the football results of the league."):
                r = client.post("/v1/query", json={"text": text, "explain": True})
                assert r.status_code == 501 and r.json()["error"]["code"] == "not_supported"
            assert client.post("/v1/query", json={"text": FLOOD}).status_code == 200


class TestSites:
    """A document's site is checked by the rule searches match sites by."""

    @pytest.mark.parametrize(
        ("given", "status"),
        [({"site": " "}, 422), ({"site": "b" * 254}, 422),
         ({"url": "http://" + "a" * 300 + ".com/"}, 200)],
        ids=["blank", "long", "long-host"],
    )  # fmt: skip
    def test_a_site_no_search_could_match_is_never_kept(
        self, given: dict[str, str], status: int
    ) -> None:
        """A blank or over-long site is refused (422); a url whose host is longer than a host
        name can be gives no site. Either way, searches by site keep working."""
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            client.post("/v1/documents", json={"text": FLOOD, "id": "a", "url": "https://ex.com/1"})
            r = client.post("/v1/documents", json={"text": "Another story.", "id": "b", **given})
            assert r.status_code == status, r.text
            found = client.get("/v1/groups", params={"site": "ex.com"})
            assert found.status_code == 200 and found.json()["total"] == 1
            assert client.get("/", params={"site": "ex.com"}).status_code == 200

    def test_a_bad_site_kept_earlier_leaves_searches_working(self) -> None:
        """A store may hold a site added before the check (add_prepared takes a DocMeta as
        given): a search by site skips it instead of refusing every query."""
        from nshash import NSHash
        from nshash.results import DocMeta

        nsh = NSHash.open("memory://", track=True)
        nsh.add(FLOOD, "a", url="https://ex.com/1")
        other = nsh.prepare("A different story about the weekend's football results.")
        nsh.add_prepared(other, "b", meta=DocMeta(int(time.time()), None, " "))
        assert [h.similar_id for h in nsh.find(site="ex.com").stories] == [1]
        assert nsh.find(site="other.com").total == 0


class TestPageCorrections:
    """The story pages' correction forms."""

    def test_detach_checks_the_story_in_the_address(self) -> None:
        form = {"content-type": "application/x-www-form-urlencoded"}
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            client.post("/v1/documents", json={"text": FLOOD, "id": "a1"})
            joined = client.post("/v1/documents", json={"text": "Repost: " + FLOOD, "id": "a2"})
            story = joined.json()["similar_id"]
            client.post("/v1/documents", json={"text": "Unrelated: the weather will be fine."})
            for where, status in ((999999, 409), ("abc", 404)):
                r = client.post(f"/stories/{where}/detach", content=b"doc=a2", headers=form)
                assert r.status_code == status, r.text[:200]
            assert client.get("/v1/corrections").json()["corrections"] == []
            r = client.post(
                f"/stories/{story}/detach", content=b"doc=a2", headers=form,
                follow_redirects=False,
            )  # fmt: skip
            assert r.status_code == 303 and r.headers["location"] == f"/stories/{story}"
            assert client.get("/v1/corrections").json()["corrections"][0]["source"] == story

    def test_ids_are_digits_only(self) -> None:
        """``1_0`` or ``+1`` in an address, and ``true`` or ``"2"`` in a join, are refused:
        they would name a story the client did not mean."""
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            for i in range(3):
                client.post("/v1/documents", json={"text": f"Story {i}: " + "words " * (i + 2)})
            for path in ("/v1/groups/1_0", "/v1/groups/+1"):
                assert client.get(path).status_code == 422, path
            assert client.get("/v1/groups/1").status_code == 200
            bad = client.post("/v1/corrections/join", json={"stories": [True, "2"]})
            assert bad.status_code == 422
            assert client.post("/v1/corrections/1_0/undo", json={}).status_code == 422
            assert client.post("/v1/corrections/join", json={"stories": [1, 2]}).status_code == 201

    def test_undo_of_a_join_joined_again_is_refused_on_every_store(self, store_url: str) -> None:
        """Story 3 joined into 2, then 2 into 1: undoing the first join answered 500 (its
        story is no longer joined directly) on the file stores. It is refused with 409 on
        the API and the pages, and works once the later join is undone."""
        form = {"content-type": "application/x-www-form-urlencoded"}
        with TestClient(create_app(Settings(store_url=store_url))) as client:
            for k in (1, 2, 3):
                for i in range(2):
                    text = " ".join(synthetic_story(k)) + f" Copy {i}."
                    client.post("/v1/documents", json={"text": text, "id": f"s{k}-{i}"})
            assert client.post("/v1/corrections/join", json={"stories": [2, 3]}).status_code == 201
            assert client.post("/v1/corrections/join", json={"stories": [1, 2]}).status_code == 201
            api = client.post("/v1/corrections/1/undo", json={})
            assert api.status_code == 409 and "undo that later join first" in api.text
            page = client.post("/corrections/1/undo", content=b"", headers=form)
            assert page.status_code == 409 and page.headers["content-type"].startswith("text/html")
            assert client.post("/v1/corrections/2/undo", json={}).status_code == 200
            assert client.post("/v1/corrections/1/undo", json={}).status_code == 200
            assert [client.get(f"/v1/groups/{g}").json()["size"] for g in (1, 2, 3)] == [2, 2, 2]

    def test_a_login_link_never_leaves_the_site(self) -> None:
        """A browser drops a tab from a link: ``/<TAB>/evil.example`` would be ``//evil...``."""
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            for bad in ("/\t/evil.example", "/\n/evil.example", "//evil.example"):
                page = client.get("/login", params={"next": bad})
                assert page.status_code == 200 and "evil.example" not in page.text

    def test_to_takes_the_form_from_takes(self) -> None:
        """``to=20260308`` was read as the start of that day (``from`` refused it)."""
        with TestClient(create_app(Settings(store_url="memory://", track=True))) as client:
            for bad in ("20260308", "2026-W10"):
                assert client.get("/v1/groups", params={"to": bad}).status_code == 422
            assert client.get("/v1/groups", params={"to": "2026-03-08"}).status_code == 200

    def test_a_page_form_over_the_body_limit_gets_a_page(self) -> None:
        form = {"content-type": "application/x-www-form-urlencoded"}
        with TestClient(create_app(Settings(store_url="memory://", max_body_bytes=1024))) as c:
            page = c.post("/check", content=b"text=" + b"a" * 2000, headers=form)
            assert page.status_code == 413 and page.headers["content-type"].startswith("text/html")
            assert "over the limit of 1024 bytes" in page.text
            api = c.post("/v1/documents", json={"text": "a" * 2000})
            assert api.status_code == 413 and api.json()["error"]["code"] == "payload_too_large"


# -- 7. compare ---------------------------------------------------------------------------------


class TestCompare:
    """Compares at the size limit, lone surrogates, and the compare processes."""

    def test_degenerate_texts_at_the_limit_cost_under_two_cpu_seconds(self) -> None:
        """50,000 times one character against 50,000 times another: at most 2 s of CPU."""
        similarity = pytest.importorskip("nshash.toolkit.similarity")
        similarity.compare("热门新闻", "新闻热门")  # jieba's dictionary loads once per process
        start = time.process_time()
        scores = similarity.compare("的" * 50_000, "是" * 50_000)
        spent = time.process_time() - start
        assert spent <= 2.0, f"{spent:.2f} s of CPU"
        assert scores["cosine"] == 0.0 and scores["levenshtein"] == 0.0

    def test_lone_surrogates_are_refused(self) -> None:
        """A lone surrogate in ``a`` or ``b`` is 422, as the schema says."""
        pytest.importorskip("nshash.toolkit.similarity")
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            for body in (b'{"a": "x\\ud800y", "b": "xy"}', b'{"a": "xy", "b": "\\udfff"}'):
                response = client.post(
                    "/v1/compare", content=body, headers={"content-type": "application/json"}
                )
                assert response.status_code == 422, response.text
                assert "surrogate" in response.json()["error"]["message"]

    @pytest.mark.slow
    @pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
    def test_stopping_serve_ends_busy_compare_processes(self, tmp_path: Path, how: str) -> None:
        """Stopped (SIGTERM) or killed (SIGKILL) while both compare processes work on long
        texts, ``nshash serve`` leaves no process behind."""
        pytest.importorskip("nshash.toolkit.similarity")
        # At the default limits (50,000 characters a text): a compare process runs Python
        # between calls only, so it notices the server gone when its current compare ends
        # (rapidfuzz holds the interpreter meanwhile); at these limits that is about a
        # second, so several are queued to keep both processes busy when the signal comes.
        env = {"NSHASH_STORE_URL": "memory://", "NSHASH_SHUTDOWN_TIMEOUT": "2"}
        srv = serve(tmp_path, env)
        assert srv.process is not None
        pid = srv.process.pid
        text = ("abcdefghij " * 5_000)[:50_000]
        body = json.dumps({"a": text, "b": text[::-1], "metrics": ["levenshtein"]})
        senders = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys, httpx; httpx.post(sys.argv[1], content="
                    "sys.stdin.buffer.read(), headers={'content-type': 'application/json'},"
                    " timeout=120)",
                    srv.url + "/v1/compare",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(8)
        ]
        workers: set[int] = set()
        try:
            for sender in senders:
                assert sender.stdin is not None
                sender.stdin.write(body.encode())
                sender.stdin.close()
            deadline = time.monotonic() + 30
            while len(workers) < 2 and time.monotonic() < deadline:
                workers = children(pid)
                time.sleep(0.2)
            assert len(workers) >= 2, "the compare processes did not start"
            time.sleep(1.0)  # both are busy now
            srv.process.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
            srv.process.wait(timeout=30)
            deadline = time.monotonic() + 15
            while alive(workers) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not alive(workers), f"orphaned compare processes: {alive(workers)}"
        finally:
            for sender in senders:
                sender.kill()
                sender.wait()
            for left in alive(children(pid) | workers):
                os.kill(left, signal.SIGKILL)
            srv.process = None
