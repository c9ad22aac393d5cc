"""Shared fixtures: a ``store_url`` parametrized over every backend, real servers only.

* ``memory``: ``memory://`` in this process.
* ``memory-file``: ``memory:///tmp/.../store.pkl``, journaled.
* ``leveldb``: real LevelDB through plyvel in a temp directory.
* ``sqlite``: a real SQLite file (the standard library's ``sqlite3``) in a temp directory.
* ``redis``: a real ``redis-server``. ``--redis-url`` or ``NSHASH_TEST_REDIS_URL`` names one;
  otherwise a session fixture starts its own on a free port in a temp dir. Without the binary
  the Redis cases are skipped locally (with the install hint) and fail under CI (``CI`` set).
  Each test gets its own key prefix.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.redis_server import RedisServer, redis_server_available

# Under CI the property tests replay one fixed sequence of examples, so a run passes or fails
# for the code, not for the draw; local runs keep exploring new examples.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: Backend -> (URL of a fresh store under the test's temp dir, the module it needs). A new
#: backend is one row here; "redis" is filled in from the session's server.
_URLS: dict[str, tuple[str, str | None]] = {
    "memory": ("memory://", None),
    "memory-file": ("memory://{tmp}/store.pkl", None),
    "leveldb": ("leveldb://{tmp}/store.ldb", "plyvel"),
    "sqlite": ("sqlite://{tmp}/store.db", None),
}
BACKENDS = [*_URLS, "redis"]


@pytest.fixture(scope="session", autouse=True)
def _own_cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The user's cache folder is the session's own (``XDG_CACHE_HOME`` in a temp dir, for
    this process and the ones it starts): the Spark job's class archive, which nshash.spark
    writes there, never lands in the real ``~/.cache``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-url",
        default=os.environ.get("NSHASH_TEST_REDIS_URL"),
        help="use this Redis for the redis backend instead of starting redis-server",
    )


@pytest.fixture(scope="session")
def redis_base_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of a real Redis for this test session (``redis://127.0.0.1:PORT/0``)."""
    given = request.config.getoption("--redis-url")
    if given:
        yield given
        return
    if not redis_server_available():
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _with_prefix(url: str, prefix: str) -> str:
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}prefix={prefix}"


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store URL for each backend."""
    backend = request.param
    if backend in _URLS:
        template, needs = _URLS[backend]
        if needs is not None:
            pytest.importorskip(needs)
        return template.format(tmp=tmp_path)
    pytest.importorskip("nshash.methods.nshash.redis", reason="the Redis store needs redis-py")
    base = request.getfixturevalue("redis_base_url")
    return _with_prefix(base, f"test-{uuid.uuid4().hex[:12]}")


#: What the ``run`` fixture returns: ``run(*args)`` -> (exit code, stdout, stderr).
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """Call the command line's ``main`` with arguments; return the exit code, stdout and
    stderr."""
    from nshash.cli import main

    def _run(*args: str | Path) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def no_store_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test starts without NSHASH_STORE_URL, whatever the shell has (command-line
    modules use it for every test: ``pytestmark = pytest.mark.usefixtures(...)``)."""
    monkeypatch.delenv("NSHASH_STORE_URL", raising=False)
