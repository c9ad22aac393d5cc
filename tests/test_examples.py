"""The scripts in ``example/`` run as their docstrings say, on the inputs people give them."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.redis_server import free_port

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example"


def script(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python example/NAME ARGS`` from the repository root."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE / name), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class TestHotStories:
    """example/hot_stories.py groups a JSONL file and prints the largest stories."""

    def test_gzipped_input(self, tmp_path: Path) -> None:
        """A .jsonl.gz file gives the same stories as the plain file."""
        packed = tmp_path / "articles.jsonl.gz"
        packed.write_bytes(gzip.compress((EXAMPLE / "articles.jsonl").read_bytes()))
        plain, gz = script("hot_stories.py"), script("hot_stories.py", str(packed))
        assert plain.returncode == 0 and gz.returncode == 0, gz.stderr
        assert gz.stdout == plain.stdout
        assert plain.stdout.startswith("30 articles, 11 stories\n")


@pytest.mark.slow
class TestHttpClient:
    """example/http_client.py against a service that wants an API key."""

    def test_missing_key_is_one_error(self, tmp_path: Path) -> None:
        """Without --api-key the script stops with one line naming the fix, exit 1."""
        port = free_port()
        env = {**os.environ, "NSHASH_API_KEY": "s3cret", "NSHASH_STORE_URL": "memory://"}
        server = subprocess.Popen(
            [sys.executable, "-m", "nshash", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.1)
            done = script("http_client.py", "--url", url)
            assert done.returncode == 1
            assert done.stdout == ""
            assert done.stderr == (
                "Error: the service answered HTTP 401 unauthorized: This API needs a key: send"
                " the header 'Authorization: Bearer <key>' (pass the service's key with"
                " --api-key)\n"
            )
            done = script("http_client.py", "--url", url, "--api-key", "s3cret")
            assert done.returncode == 0, done.stderr
            assert "Hot stories (30 articles sent):" in done.stdout
        finally:
            server.terminate()
            server.wait(timeout=30)
