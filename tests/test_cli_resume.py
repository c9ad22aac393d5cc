"""A ``dedup`` killed with SIGKILL and run again writes exactly what an uninterrupted run writes.

Every document of the corpus has an id, so the rerun replays the documents the killed run had
stored (each answers what it answered the first time) and adds the rest as the first run would
have. Uses ``../shared/data/zh_hk_news.jsonl.gz`` (12,060 Hong Kong articles; skipped when the
shared data is absent; ``NSHASH_DATA_DIR`` points elsewhere).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("NSHASH_DATA_DIR", REPO.parent / "shared" / "data"))
CORPUS = DATA_DIR / "zh_hk_news.jsonl.gz"


def dedup(store: str, out: Path) -> subprocess.Popen[bytes]:
    """Start ``nshash dedup CORPUS --store STORE -o OUT``."""
    cmd = [sys.executable, "-m", "nshash", "dedup", str(CORPUS), "--store", store, "-q"]
    return subprocess.Popen([*cmd, "-o", str(out)], stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["memory", "leveldb"])
def test_killed_and_resumed_equals_uninterrupted(scheme: str, tmp_path: Path) -> None:
    """SIGKILL mid-run, then the same command again: the output is byte-identical."""
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS} is missing (the shared evaluation data is not checked out)")
    if scheme == "leveldb":
        pytest.importorskip("plyvel")

    def url(name: str) -> str:
        return (
            f"memory://{tmp_path}/{name}.pkl"
            if scheme == "memory"
            else (f"leveldb://{tmp_path}/{name}.ldb")
        )

    fresh = tmp_path / "fresh.jsonl"
    proc = dedup(url("fresh"), fresh)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    lines = fresh.read_bytes().count(b"\n")
    assert lines == 12_060

    partial = tmp_path / "partial.jsonl"
    proc = dedup(url("resumed"), partial)
    deadline = time.monotonic() + 120
    # Kill once about a third of the output is out (the output trails the store by a batch).
    while partial.stat().st_size < fresh.stat().st_size // 3 if partial.exists() else True:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert 0 < partial.stat().st_size < fresh.stat().st_size

    resumed = tmp_path / "resumed.jsonl"
    proc = dedup(url("resumed"), resumed)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert resumed.read_bytes() == fresh.read_bytes()
