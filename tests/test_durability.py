"""Durability under SIGKILL, for the stores that keep data on disk (memory with a path, LevelDB).

A child process adds documents in a loop and prints each answer once ``add`` has returned. The
parent reads some of those lines, kills the child with SIGKILL while it is still writing,
reopens the store and checks that every acknowledged document is there, in the same group,
and that the id counter moved past every acknowledged id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nshash import NSHash, StoreLockedError, open_store
from tests.test_store_contract import synthetic_story

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

#: The writer: adds an original and two reposts per synthetic story, forever, and prints each
#: acknowledged answer as a JSON line.
WRITER = textwrap.dedent(
    """
    import json, sys
    from nshash import NSHash
    from tests.test_store_contract import story_versions

    nsh = NSHash.open(sys.argv[1])
    print("ready", flush=True)
    i = 0
    while True:
        story, version = divmod(i, 3)
        result = nsh.add(story_versions(story)[version], doc_id=f"d{i}")
        print(json.dumps([f"d{i}", result.similar_id]), flush=True)
        i += 1
    """
)

#: Holds a store open and waits to be killed.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from nshash import open_store

    store = open_store(sys.argv[1])
    print("ready", flush=True)
    time.sleep(120)
    """
)


def spawn(code: str, url: str) -> subprocess.Popen[str]:
    """Start a Python snippet with *url* as its argument, stdout piped line by line."""
    return subprocess.Popen(
        [sys.executable, "-c", code, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def read_line(proc: subprocess.Popen[str]) -> str:
    """Read one line of the child's output, failing the test if the child has died."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        stderr = proc.stderr.read() if proc.stderr else ""
        pytest.fail(f"child exited with {proc.returncode}: {stderr}")
    return line.rstrip("\n")


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def url_for(backend: str, tmp_path: Path, fsync: str) -> str:
    """A store URL of *backend* in *tmp_path* with the given fsync policy."""
    if backend == "leveldb":
        pytest.importorskip("plyvel")
        return f"leveldb://{tmp_path}/store.ldb?fsync={fsync}"
    if backend == "sqlite":
        return f"sqlite://{tmp_path}/store.db?fsync={fsync}"
    return f"memory://{tmp_path}/store.pkl?fsync={fsync}"


class TestKilledWriter:
    """Every add that returned before a SIGKILL is there after reopening."""

    @pytest.mark.parametrize("fsync", ["always", "everysec", "no"])
    @pytest.mark.parametrize("backend", ["memory-file", "leveldb", "sqlite"])
    def test_acknowledged_writes_survive_sigkill(
        self, tmp_path: Path, backend: str, fsync: str
    ) -> None:
        """Acknowledged doc_ids keep their group, and new ids exceed every acknowledged one."""
        url = url_for(backend, tmp_path, fsync)
        proc = spawn(WRITER, url)
        # A hung child must not hang the test run.
        watchdog = threading.Timer(60, proc.kill)
        watchdog.start()
        try:
            assert read_line(proc) == "ready"
            acked = [json.loads(read_line(proc)) for _ in range(150)]
            assert proc.poll() is None, "the writer must still be running when it is killed"
        finally:
            kill(proc)
            watchdog.cancel()
        assert proc.returncode == -signal.SIGKILL

        with NSHash.open(url) as nsh:
            for doc_id, similar_id in acked:
                record = nsh.document(doc_id)
                assert record is not None, f"acknowledged {doc_id} was lost"
                assert record.similar_id == nsh.resolve(similar_id)
            # Versions of one story were acknowledged with one id.
            by_story: dict[int, set[int]] = {}
            for doc_id, similar_id in acked:
                by_story.setdefault(int(doc_id[1:]) // 3, set()).add(similar_id)
            assert all(len(ids) == 1 for ids in by_story.values())
            stats = nsh.stats()
            assert stats.documents >= len(acked)
            newest = max(similar_id for _doc, similar_id in acked)
            fresh = nsh.add("\n".join(synthetic_story(10_000)))
            assert not fresh.duplicate and fresh.similar_id > newest
            assert fresh.similar_id == stats.last_id + 1


class TestLevelDBLock:
    """A LevelDB directory admits one process."""

    def test_directory_held_by_live_process(self, tmp_path: Path) -> None:
        """Opening a directory another live process holds raises StoreLockedError naming it."""
        pytest.importorskip("plyvel")
        path = tmp_path / "held.ldb"
        proc = spawn(HOLDER, f"leveldb://{path}")
        try:
            assert read_line(proc) == "ready"
            with pytest.raises(StoreLockedError, match="held.ldb") as info:
                open_store(f"leveldb://{path}")
            assert info.value.url == f"leveldb://{path}"
        finally:
            kill(proc)
        # The holder died; its lock went with it.
        with open_store(f"leveldb://{path}") as store:
            assert store.stats().documents == 0


class _SyncSpy:
    """Wraps a plyvel DB and records the ``sync`` flag of every write that reaches it."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.syncs: list[bool] = []

    def write_batch(self, **kwargs: Any) -> Any:
        self.syncs.append(bool(kwargs.get("sync", False)))
        return self.db.write_batch(**kwargs)

    def put(self, key: bytes, value: bytes, sync: bool = False) -> None:
        self.syncs.append(sync)
        self.db.put(key, value, sync=sync)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


class TestLevelDBFsync:
    """The fsync policy decides which LevelDB writes are synced."""

    def _store(self, tmp_path: Path, fsync: str) -> tuple[NSHash, _SyncSpy]:
        pytest.importorskip("plyvel")
        nsh = NSHash.open(f"leveldb://{tmp_path}/db?fsync={fsync}")
        spy = _SyncSpy(nsh.store._kv.db)  # type: ignore[attr-defined]
        nsh.store._kv.db = spy  # type: ignore[attr-defined]
        if fsync == "everysec":
            # Opening a new directory synced its format marker: let that second pass, so the
            # first add is the first write of a new second.
            time.sleep(1.05)
        return nsh, spy

    def test_always_syncs_every_write(self, tmp_path: Path) -> None:
        """fsync=always syncs each document's batch before add returns."""
        nsh, spy = self._store(tmp_path, "always")
        for seed in range(5):
            nsh.add("\n".join(synthetic_story(seed)))
        assert spy.syncs == [True] * 5
        nsh.close()

    def test_no_never_syncs(self, tmp_path: Path) -> None:
        """fsync=no leaves every write, and close, to the operating system."""
        nsh, spy = self._store(tmp_path, "no")
        for seed in range(5):
            nsh.add("\n".join(synthetic_story(seed)))
        nsh.close()
        assert spy.syncs == [False] * 5

    def test_everysec_syncs_about_once_a_second(self, tmp_path: Path) -> None:
        """fsync=everysec syncs one write of a burst, then the background thread syncs the rest."""
        nsh, spy = self._store(tmp_path, "everysec")
        for seed in range(20):
            nsh.add("\n".join(synthetic_story(seed)))
        # A burst well inside a second: at most the first write (and one more if the burst
        # straddles a second on a slow machine) is synced.
        assert 1 <= spy.syncs.count(True) <= 2 and len(spy.syncs) == 20
        deadline = time.monotonic() + 10
        while len(spy.syncs) == 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spy.syncs[20:] == [True], "the background thread syncs the pending writes"
        nsh.close()
        assert spy.syncs[21:] == []  # nothing pending any more: close has nothing to sync

    def test_close_syncs_pending_writes(self, tmp_path: Path) -> None:
        """close() syncs a write that the everysec policy left pending."""
        nsh, spy = self._store(tmp_path, "everysec")
        nsh.add("\n".join(synthetic_story(1)))
        nsh.add("\n".join(synthetic_story(2)))
        assert spy.syncs == [True, False]
        nsh.close()
        assert spy.syncs == [True, False, True]
