"""``nshash serve`` start-up problems: one ``Error: ...`` line on stderr and exit status 1.

Each case runs the real command in a child process; a missing optional package is simulated
by making its import fail in that child (``sys.modules[name] = None``), as on a machine
without the extra.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import sys
    for name in sys.argv[1].split(","):
        if name:
            sys.modules[name] = None  # this package is "not installed"
    from nshash.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


def serve(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, blocked: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run ``nshash serve ARGS`` in a child with *env* added and *blocked* packages missing."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
    child_env.update(env or {})
    # This checkout's code, not whatever an editable install elsewhere points at.
    paths = [str(REPO), os.environ.get("PYTHONPATH")]
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return subprocess.run(
        [sys.executable, "-c", CHILD, blocked, "serve", *args],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


CASES = {
    "unknown scheme": ({"NSHASH_STORE_URL": "mysql:///x"}, "", [], "Unknown store scheme 'mysql'"),
    "bad --store option": ({}, "", ["--store", "memory://?fsync=weekly"], "fsync must be one"),
    "leveldb without plyvel": ({}, "plyvel", ["--store", "leveldb:///{tmp}/db"], "[leveldb]'"),
    "redis without redis": ({}, "redis", ["--store", "redis://localhost/0"], "[redis]'"),
    "NSHASH_N not a number": ({"NSHASH_N": "abc"}, "", [], "NSHASH_N='abc'"),
    "NSHASH_METHOD unknown": ({"NSHASH_METHOD": "fuzzy"}, "", [], "NSHASH_METHOD='fuzzy'"),
    "keyed without rbloom": (
        {"NSHASH_METHOD": "keyed", "NSHASH_STORE_URL": "memory://"},
        "rbloom",
        [],
        "[keyed]'",
    ),
    "corrupt snapshot": ({}, "", ["--store", "memory:///{tmp}/bad.pkl"], "Cannot read snapshot"),
}


@pytest.mark.slow
class TestStartupErrors:
    """Every bad configuration stops ``nshash serve`` with one line and exit 1."""

    @pytest.mark.parametrize("case", list(CASES))
    def test_one_line_exit_1(self, tmp_path: Path, case: str) -> None:
        """The configuration problem is one ``Error:`` line naming it; no traceback."""
        env, blocked, args, expected = CASES[case]
        (tmp_path / "bad.pkl").write_bytes(b"not a pickle")
        args = [a.replace("{tmp}", str(tmp_path)) for a in args]
        done = serve(tmp_path, "--port", str(free_port()), *args, env=env, blocked=blocked)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
        assert expected in done.stderr
        assert done.stdout == ""

    def test_port_in_use(self, tmp_path: Path) -> None:
        """An address already in use is one line too."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            done = serve(tmp_path, "--store", "memory://", "--port", str(port))
        assert done.returncode == 1
        assert done.stderr.startswith(f"Error: Cannot listen on 127.0.0.1:{port}")
        assert done.stderr.count("\n") == 1


class TestDockerfile:
    """The image installs every extra that a documented setting needs."""

    def test_extras(self) -> None:
        """leveldb, redis, service, similarity and keyed (NSHASH_METHOD=keyed) are installed."""
        dockerfile = (REPO / "Dockerfile").read_text("utf-8")
        for extra in ("leveldb", "redis", "service", "similarity", "keyed"):
            assert f"x['{extra}']" in dockerfile, extra
