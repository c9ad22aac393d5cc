"""The SQLite backend's own promises: fsync policies, failed writes, namespaces, read-only views.

What every backend promises (the store and method contracts, kills, full disks, read-only
opens) is tested for SQLite by the suites parametrized over every backend; this file holds
what only a SQLite file shows.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from nshash import KeyedDedup, NSHash, StoreError, StoreReadOnlyError
from nshash.stores.sqlite import SQLiteKV

STORY = (
    "The river ferry between the two old towns will stop running next spring, the council said"
    " on Monday. Ridership has fallen for six years, and the boat needs a new engine that the"
    " budget cannot pay for. A bus link over the northern bridge will replace it."
)
OTHER = (
    "A small bakery on the harbour front has won the national prize for rye bread. Its owner"
    " starts the dough at three every morning and says the secret is patience, not flour."
    " Queues now reach the end of the pier on weekends."
)


class _SyncSpy:
    """Counts the store's fsyncs of its write-ahead log."""

    def __init__(self, kv: SQLiteKV, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = kv._sync_log

        def counted() -> None:
            self.calls += 1
            real()

        monkeypatch.setattr(kv, "_sync_log", counted)


def _kv(nsh: NSHash) -> Any:
    return nsh.store._kv  # type: ignore[attr-defined]


def test_everysec_syncs_within_about_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An everysec commit is left to the flusher, which syncs the log within about a second."""
    with NSHash.open(f"sqlite://{tmp_path}/s.db?fsync=everysec") as nsh:
        spy = _SyncSpy(_kv(nsh), monkeypatch)
        nsh.add(STORY, doc_id="a")
        assert _kv(nsh)._dirty
        deadline = time.monotonic() + 5
        while spy.calls == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spy.calls == 1 and not _kv(nsh)._dirty


def test_close_syncs_a_pending_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsh = NSHash.open(f"sqlite://{tmp_path}/s.db?fsync=everysec")
    kv = _kv(nsh)
    kv._stop.set()  # no flusher: only close may sync
    kv._flusher.join()
    spy = _SyncSpy(kv, monkeypatch)
    nsh.add(STORY, doc_id="a")
    assert spy.calls == 0
    nsh.close()
    assert spy.calls == 1


@pytest.mark.parametrize("fsync", ["always", "no"])
def test_always_and_no_need_no_flusher(tmp_path: Path, fsync: str) -> None:
    """always syncs in the commit (synchronous=FULL), no leaves it to the OS: no thread."""
    with NSHash.open(f"sqlite://{tmp_path}/s.db?fsync={fsync}") as nsh:
        nsh.add(STORY)
        assert _kv(nsh)._flusher is None and not _kv(nsh)._dirty
        mode = _kv(nsh)._db.execute("PRAGMA synchronous").fetchone()[0]
        assert mode == {"always": 2, "no": 0}[fsync]


class _FailingConnection:
    """The store's connection, whose next batch fails half-way (after the first statement)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.fail = True

    def execute(self, sql: str, *args: Any) -> Any:
        return self.db.execute(sql, *args)

    def executemany(self, sql: str, rows: Any) -> Any:
        if self.fail:
            self.db.executemany(sql, list(rows)[:1])  # part of the batch is in...
            self.fail = False
            full = sqlite3.OperationalError("database or disk is full")  # ...then the disk fills
            full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
            raise full
        return self.db.executemany(sql, rows)

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def close(self) -> None:
        self.db.close()


def test_failed_write_leaves_no_trace(tmp_path: Path) -> None:
    """A batch that fails half-way is rolled back: the add raises, the retry is new."""
    url = f"sqlite://{tmp_path}/s.db"
    with NSHash.open(url) as nsh:
        nsh.add(OTHER, doc_id="x")
        kv = _kv(nsh)
        real = kv._db
        kv._db = _FailingConnection(real)
        with pytest.raises(StoreError, match="No space left on device.*nothing of this call"):
            nsh.add(STORY, doc_id="a")
        assert nsh.document("a") is None and nsh.stats().documents == 1
        again = nsh.add(STORY, doc_id="a")
        assert not again.replayed and not again.duplicate and again.similar_id == 2
        kv._db = real
    with NSHash.open(url) as nsh:
        assert nsh.stats().documents == 2 and nsh.document("a") is not None


def test_methods_share_a_file_in_their_namespaces(tmp_path: Path) -> None:
    """The nshash and keyed tables sit in one file without reading each other's keys."""
    url = f"sqlite://{tmp_path}/s.db"
    with NSHash.open(url) as nsh:
        first = nsh.add(STORY, doc_id="a")
    with KeyedDedup.open(url) as keyed:
        assert keyed.add(STORY, "a").similar_id == 1
        assert keyed.add(OTHER, "b").similar_id == 2
    with NSHash.open(url) as nsh:
        assert nsh.add(STORY, doc_id="c").similar_id == first.similar_id
        assert nsh.stats().documents == 2
    rows = sqlite3.connect(tmp_path / "s.db").execute("SELECT k FROM kv").fetchall()
    assert any(bytes(k).startswith(b"keyed\x00") for (k,) in rows)


def test_reader_keeps_the_view_of_its_open(tmp_path: Path) -> None:
    """A read-only open beside a live writer sees what was acknowledged before it, consistently."""
    url = f"sqlite://{tmp_path}/s.db"
    with NSHash.open(url) as writer:
        writer.add(STORY, doc_id="a")
        with NSHash.open(url, readonly=True) as reader:
            writer.add(OTHER, doc_id="b")
            assert reader.document("a") is not None
            assert reader.document("b") is None and reader.stats().documents == 1
            with pytest.raises(StoreReadOnlyError):
                reader.add(OTHER, doc_id="c")
        with NSHash.open(url, readonly=True) as later:
            assert later.stats().documents == 2


def test_reader_of_a_closed_store_reads_a_copy(tmp_path: Path) -> None:
    """With no writer, the reader reads a temporary copy (deleted on close), not the file."""
    url = f"sqlite://{tmp_path}/s.db"
    with NSHash.open(url) as writer:
        writer.add(STORY, doc_id="a")
    before = sorted(p.name for p in tmp_path.iterdir())
    with NSHash.open(url, readonly=True) as reader:
        copy = _kv(reader)._copy
        assert copy is not None and Path(copy).is_dir()
        assert reader.document("a") is not None
    assert not Path(copy).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == before
