"""MemoryStore on disk: snapshots, journal replay after a crash, refusal of unsafe files, locking.

Crashes are real: a child process adds documents and leaves with ``os._exit`` (no close, no
snapshot), so only the journal can bring its writes back.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from nshash import (
    ConfigError,
    NSHash,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreStats,
    open_store,
)
from nshash.methods.nshash import memory, tables
from nshash.methods.nshash.memory import MemoryStore
from nshash.stores import durable
from tests.test_store_contract import (
    EN_FOOTER,
    EN_RAIL,
    EN_RAIL_REPOST,
    EN_STORIES,
    FRAGMENT_A,
    FRAGMENT_B,
    WHOLE,
    ZH_LIBRARY,
    ZH_MARATHON,
    ZH_STORIES,
    ZH_WATER,
    ZH_WATER_REPOST,
)

REPO = Path(__file__).resolve().parents[1]


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a Python snippet in a fresh interpreter that imports this checkout's nshash."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def counts(stats: StoreStats) -> tuple[int, int, int, int, int]:
    """The comparable part of a stats snapshot."""
    return (
        stats.documents,
        stats.groups,
        stats.fingerprints,
        stats.common_fingerprints,
        stats.last_id,
    )


def crash_after_adds(path: Path, texts: list[str], fsync: str = "everysec") -> list[dict[str, Any]]:
    """Add *texts* (doc_ids ``doc0``, ``doc1``, ...) in a child that dies without closing."""
    child = run_child(
        f"""
        import json, os
        from nshash import NSHash
        nsh = NSHash.open({f"memory://{path}"!r}, fsync={fsync!r})
        for i, text in enumerate(json.loads({json.dumps(texts)!r})):
            r = nsh.add(text, doc_id=f"doc{{i}}")
            print(json.dumps({{"doc": f"doc{{i}}", "sid": r.similar_id}}), flush=True)
        os._exit(0)
        """
    )
    assert child.returncode == 0, child.stderr
    return [json.loads(line) for line in child.stdout.splitlines()]


class TestSnapshot:
    """save() writes a snapshot, close() leaves the journal; a reopen loads both in full."""

    @pytest.mark.parametrize("save", [True, False], ids=["saved", "journal-only"])
    def test_round_trip(self, tmp_path: Path, save: bool) -> None:
        """Groups, merges, doc records, titles and counters come back after close and reopen."""
        url = f"memory://{tmp_path}/news.pkl"
        with NSHash.open(url) as nsh:
            for i, text in enumerate(EN_STORIES):
                nsh.add(f"{text}\n{EN_FOOTER}", doc_id=f"en{i}", title=f"title {i}")
            nsh.add(FRAGMENT_A, doc_id="fragment-a")
            nsh.add(FRAGMENT_B, doc_id="fragment-b")
            nsh.add(WHOLE, doc_id="bridge")
            nsh.add(ZH_WATER, doc_id="zh")
            before = (counts(nsh.stats()), nsh.groups(min_size=1, limit=100))
            records = [nsh.document(f"en{i}") for i in range(len(EN_STORIES))]
            if save:
                nsh.store.save()  # type: ignore[attr-defined]
        if save:
            assert (tmp_path / "news.pkl").stat().st_size > 0
            assert (tmp_path / "news.pkl.journal").stat().st_size == 0
        else:  # a small journal is not worth a snapshot: close() leaves it for the next open
            assert not (tmp_path / "news.pkl").exists()
            assert (tmp_path / "news.pkl.journal").stat().st_size > 0
        assert not (tmp_path / "news.pkl.tmp").exists()
        with NSHash.open(url) as nsh:
            assert (counts(nsh.stats()), nsh.groups(min_size=1, limit=100)) == before
            assert [nsh.document(f"en{i}") for i in range(len(EN_STORIES))] == records
            a, b = nsh.document("fragment-a"), nsh.document("fragment-b")
            assert a is not None and b is not None and a.similar_id == b.similar_id
            assert nsh.stats().common_fingerprints > 0
            zh = nsh.document("zh")
            assert zh is not None and nsh.add(ZH_WATER_REPOST).similar_id == zh.similar_id

    def test_save_compacts_journal(self, tmp_path: Path) -> None:
        """save() folds the journal into the snapshot and empties it, and nothing is lost."""
        path = tmp_path / "s.pkl"
        store = MemoryStore(path)
        nsh = NSHash(store=store)
        nsh.add(EN_RAIL, doc_id="a")
        journal = tmp_path / "s.pkl.journal"
        assert journal.stat().st_size > 0
        store.save()
        assert journal.stat().st_size == 0 and path.stat().st_size > 0
        nsh.add(EN_RAIL_REPOST, doc_id="b")
        assert journal.stat().st_size > 0
        store.close()
        with NSHash.open(f"memory://{path}") as again:
            group = again.group(1)
            assert group is not None and group.doc_ids == ["a", "b"]

    def test_close_after_writes_folds_a_large_journal(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A close that follows writes folds a journal past its share of the snapshot into a
        new snapshot (the next open reads no journal); a small journal stays as it is."""

        path, journal = tmp_path / "s.pkl", tmp_path / "s.pkl.journal"
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL, doc_id="a")
        assert not path.exists() and journal.stat().st_size > 0  # under CLOSE_MIN_BYTES
        monkeypatch.setattr(durable, "CLOSE_MIN_BYTES", 0)
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL_REPOST, doc_id="b")
        assert path.stat().st_size > 0 and journal.stat().st_size == 0
        with NSHash.open(f"memory://{path}") as again:
            group = again.group(1)
            assert group is not None and group.doc_ids == ["a", "b"]

    def test_open_and_close_without_writes_fold_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """However large the journal, an open and a close with no write rewrite nothing."""

        path = tmp_path / "crash.pkl"
        crash_after_adds(path, [*EN_STORIES, EN_RAIL_REPOST], "always")
        monkeypatch.setattr(durable, "JOURNAL_MIN_BYTES", 0)
        monkeypatch.setattr(durable, "CLOSE_MIN_BYTES", 0)
        before = (tmp_path / "crash.pkl.journal").read_bytes()
        with NSHash.open(f"memory://{path}") as nsh:
            assert nsh.stats().documents == len(EN_STORIES) + 1
        assert not path.exists() and (tmp_path / "crash.pkl.journal").read_bytes() == before

    @pytest.mark.parametrize("where", [40, -3], ids=["in-the-tables", "in-the-checksum"])
    def test_a_flipped_byte_is_refused(self, tmp_path: Path, where: int) -> None:
        """The snapshot carries a CRC32 of its tables: a damaged byte anywhere is found."""
        path = tmp_path / "s.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL, doc_id="a")
            nsh.store.save()  # type: ignore[attr-defined]
        data = bytearray(path.read_bytes())
        data[where] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(StoreCorruptError, match="checksum"):
            MemoryStore(path)

    def test_a_snapshot_without_a_checksum_still_loads(self, tmp_path: Path) -> None:
        """Snapshots written before the checksum existed (a bare pickle) are read as before."""
        path = tmp_path / "s.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            sid = nsh.add(EN_RAIL, doc_id="a").similar_id
            nsh.store.save()  # type: ignore[attr-defined]
        raw = path.read_bytes()
        path.write_bytes(raw[: raw.rindex(b"\nnshash-crc32:")])
        with NSHash.open(f"memory://{path}") as again:
            assert again.add(EN_RAIL_REPOST).similar_id == sid

    @pytest.mark.parametrize("tail", [b"x", b"\nnshash-crc32:1234", b"\nnshash-crc32:0000000g\n"])
    def test_anything_but_a_checksum_after_the_tables_is_refused(
        self, tmp_path: Path, tail: bytes
    ) -> None:
        """After the pickle comes its checksum or nothing: other bytes (a cut or a damaged
        trailer, or something appended) are damage, found without reading the file whole."""
        path = tmp_path / "s.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL, doc_id="a")
            nsh.store.save()  # type: ignore[attr-defined]
        raw = path.read_bytes()
        path.write_bytes(raw[: raw.rindex(b"\nnshash-crc32:")] + tail)
        with pytest.raises(StoreCorruptError, match="checksum"):
            MemoryStore(path)
        path.write_bytes(b"\x80")  # shorter than a trailer
        with pytest.raises(StoreCorruptError, match="Cannot read snapshot"):
            MemoryStore(path)

    def test_a_snapshot_is_read_a_piece_at_a_time(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A reopen reads the snapshot as the unpickler goes, never the whole file in one read
        (the file is about as large as the tables it then builds), and gets every document.
        The largest read is then one packed table (the anchors: about a quarter of it)."""

        path = tmp_path / "s.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            for i in range(3000):
                text = f"Story {i} of the harbour desk. " * 3 + f"Filed as number {i}."
                nsh.add(text, doc_id=f"d{i}")
            nsh.store.save()  # type: ignore[attr-defined]
        size = path.stat().st_size
        asked: list[int] = []

        class Counted:
            def __init__(self, fh: Any) -> None:
                self.fh = fh

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self.fh.close()

            def read(self, n: int = -1) -> bytes:
                data = self.fh.read(n)
                asked.append(len(data))
                return bytes(data)

            def readinto(self, buf: Any) -> int:
                n = int(self.fh.readinto(buf))
                asked.append(n)
                return n

            def readline(self) -> bytes:
                return bytes(self.fh.readline())

            def __getattr__(self, name: str) -> Any:
                return getattr(self.fh, name)

        real_open = open
        monkeypatch.setattr(durable, "_CRC_CHUNK", 1 << 16)
        monkeypatch.setattr(
            durable, "open", lambda p, mode="r", *a, **k: Counted(real_open(p, mode, *a, **k)),
            raising=False,
        )  # fmt: skip
        store = MemoryStore(path)
        try:
            assert store.stats().documents == 3000
        finally:
            store.close()
        assert asked and sum(asked) >= size and max(asked) < size // 2

    def test_no_path_writes_nothing(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """memory:// without a path leaves no file behind."""
        monkeypatch.chdir(tmp_path)
        with NSHash.open("memory://") as nsh:
            nsh.add(EN_RAIL)
            nsh.store.save()  # type: ignore[attr-defined]
        assert list(tmp_path.iterdir()) == []


class TestJournal:
    """The journal brings back every acknowledged write after a crash."""

    @pytest.mark.parametrize("fsync", ["always", "everysec", "no"])
    def test_replay_after_crash(self, tmp_path: Path, fsync: str) -> None:
        """A child that dies without closing loses nothing it had answered."""
        path = tmp_path / "crash.pkl"
        texts = [*EN_STORIES, EN_RAIL_REPOST, *ZH_STORIES, ZH_WATER_REPOST]
        acked = crash_after_adds(path, texts, fsync)
        assert len(acked) == len(texts)
        assert not path.exists()  # no snapshot: only the journal holds the writes
        with NSHash.open(f"memory://{path}") as nsh:
            for row in acked:
                record = nsh.document(row["doc"])
                assert record is not None and record.similar_id == row["sid"]
            stats = nsh.stats()
            assert stats.documents == len(texts)
            assert stats.last_id == max(row["sid"] for row in acked)
            assert nsh.add("A new story about a lighthouse keeper who retired.").similar_id == (
                stats.last_id + 1
            )
        # Replaying is not a reason to rewrite the snapshot: the journal stays the record.
        assert not path.exists()

    def test_torn_last_line_is_ignored(self, tmp_path: Path) -> None:
        """A last journal line cut short by a crash was never acknowledged and is dropped."""
        path = tmp_path / "torn.pkl"
        acked = crash_after_adds(path, [EN_RAIL, ZH_WATER])
        journal = tmp_path / "torn.pkl.journal"
        with journal.open("ab") as fh:
            fh.write(b'[3,[["n",3,[1,2,3]],["m",3,"doc2",fal')
        complete = journal.read_bytes().rsplit(b"\n", 1)[0] + b"\n"
        with NSHash.open(f"memory://{path}") as nsh:
            assert journal.read_bytes() == complete  # the torn tail is cut off, nothing else
            stats = nsh.stats()
            assert (stats.documents, stats.last_id) == (2, 2)
            assert nsh.document("doc2") is None
            for row in acked:
                record = nsh.document(row["doc"])
                assert record is not None and record.similar_id == row["sid"]
            assert nsh.add(ZH_LIBRARY, doc_id="doc2").similar_id == 3
        with NSHash.open(f"memory://{path}") as nsh:
            assert nsh.stats().documents == 3

    def test_corrupt_middle_line_is_refused(self, tmp_path: Path) -> None:
        """An unreadable line before the end means damage, not a crash: StoreCorruptError."""
        path = tmp_path / "bad.pkl"
        crash_after_adds(path, [EN_RAIL, ZH_WATER, ZH_MARATHON])
        journal = tmp_path / "bad.pkl.journal"
        lines = journal.read_bytes().split(b"\n")
        assert len(lines) == 4 and lines[-1] == b""
        lines[1] = b"\x00garbage{"
        journal.write_bytes(b"\n".join(lines))
        for _attempt in range(2):  # a failed open releases the lock: the second try says the same
            with pytest.raises(StoreCorruptError, match="line 2"):
                MemoryStore(path)

    def test_journal_written_before_answer(self, tmp_path: Path) -> None:
        """Each add appends one journal line before it returns."""
        store = MemoryStore(tmp_path / "j.pkl", fsync="always")
        journal = tmp_path / "j.pkl.journal"
        nsh = NSHash(store=store)
        sizes = []
        for text in ZH_STORIES:
            nsh.add(text)
            sizes.append(journal.read_bytes().count(b"\n"))
        assert sizes == [1, 2, 3, 4]
        nsh.query(EN_RAIL)
        assert journal.read_bytes().count(b"\n") == 4
        store.close()


class _Boom:
    """Pickles as a call to os.system: what a tampered snapshot would try."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


class TestUnsafeSnapshot:
    """Snapshots are read with an unpickler that admits only plain data."""

    def test_pickled_global_is_refused(self, tmp_path: Path) -> None:
        """A snapshot that refers to os.system raises StoreCorruptError and never runs it."""
        marker = tmp_path / "pwned"
        path = tmp_path / "evil.pkl"
        path.write_bytes(pickle.dumps({"format": 1, "fp": _Boom(marker)}))
        with pytest.raises(StoreCorruptError, match="system"):
            MemoryStore(path)
        assert not marker.exists()
        # The refusal released the lock file.
        with pytest.raises(StoreCorruptError):
            open_store(f"memory://{path}")

    @pytest.mark.parametrize(
        "content",
        [b"not a pickle at all", pickle.dumps([1, 2, 3]), pickle.dumps({"format": 99}), b""],
        ids=["garbage", "list", "wrong-format", "empty"],
    )
    def test_other_bad_snapshots(self, tmp_path: Path, content: bytes) -> None:
        """Garbage, a foreign pickle or a wrong format raise StoreCorruptError."""
        path = tmp_path / "bad.pkl"
        path.write_bytes(content)
        with pytest.raises(StoreCorruptError):
            MemoryStore(path)


class TestLock:
    """One process at a time opens a memory store's path."""

    def test_second_process_is_refused(self, tmp_path: Path) -> None:
        """A second process opening the same path gets StoreLockedError naming the path."""
        path = tmp_path / "held.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL)
            child = run_child(
                f"""
                from nshash import StoreLockedError, open_store
                try:
                    open_store({f"memory://{path}"!r})
                except StoreLockedError as exc:
                    print("locked:", exc)
                """
            )
        assert child.returncode == 0, child.stderr
        assert child.stdout.startswith("locked:") and str(path) in child.stdout
        # Closed: now another opener is welcome.
        with NSHash.open(f"memory://{path}") as nsh:
            assert nsh.stats().documents == 1

    def test_second_opener_in_process_is_refused(self, tmp_path: Path) -> None:
        """Two stores on one path in one process would corrupt the journal: refused too."""
        path = tmp_path / "twice.pkl"
        with MemoryStore(path), pytest.raises(StoreLockedError):
            MemoryStore(path)


class TestFsyncPolicy:
    """fsync is always, everysec or no; anything else is a ConfigError."""

    @pytest.mark.parametrize("fsync", ["always", "everysec", "no"])
    def test_policies_accepted(self, tmp_path: Path, fsync: str) -> None:
        """Each policy opens from the URL and keeps data across a reopen."""
        url = f"memory://{tmp_path}/f.pkl?fsync={fsync}"
        with NSHash.open(url) as nsh:
            nsh.add(ZH_WATER, doc_id="w")
        with NSHash.open(url) as nsh:
            assert nsh.document("w") is not None

    def test_bad_policy(self, tmp_path: Path) -> None:
        """An unknown policy is refused with the value quoted, by URL and by argument."""
        with pytest.raises(ConfigError, match="'sometimes'"):
            open_store(f"memory://{tmp_path}/f.pkl?fsync=sometimes")
        with pytest.raises(ConfigError, match="'ALWAYS'"):
            MemoryStore(tmp_path / "g.pkl", fsync="ALWAYS")
        assert list(tmp_path.iterdir()) == []


class TestActivitySnapshot:
    """The activity tables (issue 16) in snapshots and rollbacks."""

    def test_snapshot_without_activity_loads(self, tmp_path: Path) -> None:
        """A format-2 snapshot written before the activity tables opens, with no activity."""
        path = tmp_path / "old.pkl"
        with NSHash.open(f"memory://{path}", track=True) as nsh:
            sid = nsh.add(EN_RAIL, doc_id="r1", url="https://a.example/").similar_id
            nsh.store.save()  # type: ignore[attr-defined]
        data = durable.read_snapshot(str(path))[0]
        assert data["format"] == 5 and data["narrow"] and data["hours"]
        for key in ("seen", "hours", "meta"):
            del data[key]
        with open(path, "wb") as fh:
            pickle.dump(data, fh)
        with NSHash.open(f"memory://{path}", track=True) as again:
            assert again.group(sid) is not None and again.document("r1") is not None
            assert again.activity(sid) is None and again.hot("24h") == []
            again.add(EN_RAIL_REPOST, doc_id="r2")
            assert [h.recent for h in again.hot("1h")] == [1]

    def test_saved_activity_round_trips(self, tmp_path: Path) -> None:
        """Hours, first/last seen and metadata survive a snapshot, not only the journal."""
        url = f"memory://{tmp_path}/s.pkl"
        with NSHash.open(url, track=True) as nsh:
            for text, t in ((EN_RAIL, 1_700_000_000), (EN_RAIL_REPOST, 1_700_009_000)):
                nsh.add(text, doc_id=str(t), site="s", published_at=t)
            nsh.store.save()  # type: ignore[attr-defined]
            ids = ["1700000000"]
            before = (nsh.hot("7d", now=1_700_010_000), nsh.activity(1), nsh.doc_meta(ids))
        with NSHash.open(url, track=True) as again:
            after = (again.hot("7d", now=1_700_010_000), again.activity(1), again.doc_meta(ids))
        assert after == before and before[1] is not None and len(before[1].hours) == 2

    def test_failed_write_takes_activity_back(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A document whose journal line cannot be written leaves no count, no first/last
        seen and no metadata behind, also when it merged two groups."""
        with NSHash.open(f"memory://{tmp_path}/f.pkl", track=True) as nsh:
            a = nsh.add(FRAGMENT_A, doc_id="a", published_at=1_700_000_000).similar_id
            nsh.add(FRAGMENT_B, doc_id="b", published_at=1_700_090_000)
            t = nsh.store._t  # type: ignore[attr-defined]
            state = (dict(t.seen), {g: dict(h) for g, h in t.hours.items()},
                     {h: dict(b) for h, b in t.buckets.items()}, dict(t.meta))  # fmt: skip

            def fail() -> None:
                raise StoreError("disk full")

            monkeypatch.setattr(nsh.store._file, "_write_journal", fail)  # type: ignore[attr-defined]
            with pytest.raises(StoreError):
                nsh.add(WHOLE, doc_id="bridge", published_at=1_700_200_000)
            assert (t.seen, t.hours, t.buckets, t.meta) == state
            monkeypatch.undo()
            merged = nsh.add(WHOLE, doc_id="bridge", published_at=1_700_200_000)
            assert merged.similar_id == a and merged.merged_from
            act = nsh.activity(a)
            assert act is not None and act.documents == 3


@pytest.mark.parametrize("fast", [True, False], ids=["compiled", "pure"])
def test_document_records_keep_every_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    """A document record is packed in one bytes object (records.pack_record), on the compiled
    path as on the pure one: every field comes back, through a snapshot too, whatever the title
    (none, empty, non-ASCII)."""
    if not fast:
        monkeypatch.setattr(memory, "_FAST", None)
    titles = [None, "", "江城地铁5号线开通", "tram 🚋 title"]
    url = f"memory://{tmp_path}/r.pkl"
    with NSHash.open(url) as nsh:
        for i, title in enumerate(titles):
            nsh.add(f"Story {i} of the harbour, the council and the tram line, told at length.",
                    doc_id=f"d{i}", title=title)  # fmt: skip
        nsh.add("Story 0 of the harbour, the council and the tram line, told at length.",
                doc_id="again", title="again")  # fmt: skip
        before = [nsh.document(d) for d in ("d0", "d1", "d2", "d3", "again")]
        assert all(type(r) is bytes for r in nsh.store._t.docs.values())  # type: ignore[attr-defined]
        nsh.store.save()  # type: ignore[attr-defined]
    assert [r.title for r in before[:4] if r] == titles
    assert before[4] is not None and before[4].duplicate and before[4].fingerprints
    with NSHash.open(url, readonly=True) as nsh:
        assert [nsh.document(d) for d in ("d0", "d1", "d2", "d3", "again")] == before


def test_vote_table_packs_alike_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The votes table: a dict of tuples on the pure path, a VoteMap compiled. Both read the
    packed form (a width, then 8 bytes of key and that many ids an entry), the VoteMap widens
    its slots for a longer tuple and keeps each tuple's order, and bad packings are refused."""
    import struct

    entries = {7: (3,), 2**64 - 1: (1, 5, 9), 11: (2, 4), 12: (8, 6, 5, 4, 1)}
    packed = struct.pack("<I", 5) + b"".join(
        struct.pack("<Q5I", h, *gids, *(0,) * (5 - len(gids)))
        for h, gids in sorted(entries.items())
    )
    kinds = [tables.vote_table(packed)]
    if tables._VOTE_MAP is not None:
        votes = tables.vote_table()
        for h, gids in entries.items():
            votes[h] = gids
        assert votes.pack() == packed and votes == kinds[0]  # type: ignore[attr-defined]
        assert votes.bounds() == (1, 9) and len(votes) == 4  # type: ignore[attr-defined]
        del votes[12]
        votes[11] = (4, 2)
        assert votes[11] == (4, 2) and 12 not in votes and votes.get(12) is None
        assert votes != kinds[0]
        with pytest.raises(ValueError):
            votes[1] = ()
        with pytest.raises(ValueError):
            votes[1] = (0,)
        monkeypatch.setattr(tables, "_VOTE_MAP", None)
        kinds.append(tables.vote_table(packed))
    for table in kinds:
        assert dict(table.items()) == entries
    bad = [
        packed[:-1],  # torn
        struct.pack("<I", 0),  # no width
        struct.pack("<IQI", 1, 5, 0),  # an entry of no id
        struct.pack("<IQ2I", 2, 5, 0, 3),  # an id after a 0
        struct.pack("<IQIQI", 1, 5, 1, 5, 2),  # a repeated key
    ]
    for packing in bad:
        for path in {tables._VOTE_MAP, None} if kinds[1:] else {None}:
            monkeypatch.setattr(tables, "_VOTE_MAP", path)
            with pytest.raises(ValueError):
                tables.vote_table(packing)
    monkeypatch.undo()


def _random_run(
    table: Any, mirror: dict[Any, Any], steps: int, key: Any, value: Any, rng: Any
) -> None:
    """Apply one random run of writes, rewrites, pops, deletions and reads (of the keys
    *key()* draws, the values *value(step)* makes) to *table* and the dict *mirror*: every
    read answers as the dict's does."""
    for step in range(steps):
        k = key()
        op = rng.random()
        if op < 0.5:
            table[k] = mirror[k] = value(step)
        elif op < 0.7:
            assert table.pop(k, None) == mirror.pop(k, None)
        elif op < 0.8 and k in mirror:
            del table[k], mirror[k]
        else:
            assert table.get(k) == mirror.get(k) and (k in table) == (k in mirror)
        if step % 10_000 == 0:
            assert len(table) == len(mirror) and all(table[k] == v for k, v in mirror.items())


def test_group_table_acts_as_a_dict_keyed_by_group_id() -> None:
    """The per-group tables (sketch, size, members): a GroupTable compiled, a dict on the pure
    path. A random run of writes, deletions and reads answers as a dict does; keys come in id
    order; a page whose last entry goes is given back; a bad id is refused on a write and is
    simply absent on a read."""
    import gc
    import random
    import sys

    if tables._GROUP_TABLE is None:
        pytest.skip("the compiled assignment is not built")
    rng = random.Random(5)
    table, mirror = tables.group_table(), {}
    _random_run(
        table,
        mirror,
        20_000,
        lambda: rng.choice((rng.randrange(1, 300), rng.randrange(1, 50_000), 2**32 - 2)),
        lambda step: rng.choice((step, f"d{step}", [f"d{step}"], b"x" * 8)),
        rng,
    )
    assert len(table) == len(mirror) and table == mirror and mirror == table
    assert list(table) == table.keys() == sorted(mirror)  # type: ignore[comparison-overlap]
    assert table.items() == sorted(mirror.items())  # type: ignore[comparison-overlap]
    assert tables.plain(table) == mirror and type(tables.plain(table)) is dict
    counts = tables.group_table({g: g % 7 for g in range(1, 3000)} | {5000: 2**70, 6000: "x"})
    at_least = counts.at_least  # type: ignore[attr-defined]
    assert at_least(5) == [g for g in range(1, 3000) if g % 7 >= 5] + [5000]
    assert tables.group_table(mirror) == mirror
    for bad in (0, -1, 2**32 - 1, 2**64, 1.0, "1", True):
        assert bad not in table and table.get(bad, "none") == "none"
        with pytest.raises(KeyError):
            table[bad]
        with pytest.raises((ValueError, TypeError)):
            table[bad] = 1
    with pytest.raises(KeyError):
        del table[299_999]
    full = sys.getsizeof(table)
    for gid in list(table):
        del table[gid]
    assert len(table) == 0 and sys.getsizeof(table) < full - 3 * 4096 * 8  # pages given back
    loop: list[object] = []
    loop.append(loop)
    table[1] = loop  # a cycle through the table is the collector's to break
    del loop, table
    gc.collect()


def test_a_group_table_of_blobs_holds_bytes_as_a_dict_does() -> None:
    """The sketch table: a GroupTable that keeps each value (bytes only) as a raw block. A
    random run of writes, rewrites, deletions and reads answers as a dict does; every read
    makes a bytes object equal to what was stored; anything but bytes is refused."""
    import random

    if tables._GROUP_TABLE is None:
        pytest.skip("the compiled assignment is not built")
    rng = random.Random(11)
    table, mirror = tables.group_table(blobs=True), {}
    _random_run(
        table,
        mirror,
        20_000,
        lambda: rng.choice((rng.randrange(1, 300), rng.randrange(1, 50_000))),
        lambda step: rng.randbytes(rng.choice((0, 4, 220, 1100))),
        rng,
    )
    assert table == mirror and mirror == table and len(table) == len(mirror)
    assert table.items() == sorted(mirror.items())  # type: ignore[comparison-overlap]
    assert all(type(v) is bytes for v in table.values())
    assert tables.plain(table) == mirror and tables.group_table(mirror, blobs=True) == table
    assert table.at_least(0) == []  # type: ignore[attr-defined]
    for bad in ("x", 5, bytearray(b"x"), None):
        with pytest.raises(TypeError):
            table[1] = bad  # type: ignore[assignment]
    with pytest.raises(TypeError):
        tables.group_table({1: "not bytes"}, blobs=True)
    for gid in list(table):
        del table[gid]
    assert len(table) == 0 and table == {}


def test_group_table_survives_values_that_change_it() -> None:
    """Reads of a GroupTable hold their own references: a value whose ``__eq__`` grows the
    table while it is compared, or a finalizer that empties it while ``items()`` is built,
    changes the answer at most, never the interpreter. A dict is compared as a dict reads:
    a defaultdict gains no key."""
    import collections
    import gc

    if tables._GROUP_TABLE is None:
        pytest.skip("the compiled assignment is not built")
    table = tables.group_table()

    class Grows:
        def __eq__(self, other: object) -> bool:
            for i in range(100, 20_000):
                table[i] = 0
            return True

    table[1] = Grows()
    assert table == {1: 0} and len(table) == 19_901
    plain = collections.defaultdict(list, {2: []})
    assert tables.group_table({1: []}) != plain and 1 not in plain

    class Empties:
        def __init__(self) -> None:
            self.me = self  # garbage only the collector frees

        def __del__(self) -> None:
            for gid in list(table):
                table.pop(gid, None)

    for gid in range(1, 5000):
        table[gid] = f"d{gid}"
    Empties()
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        items = table.items()
        copied = table.to_dict()  # type: ignore[attr-defined]
    finally:
        gc.set_threshold(*threshold)
    assert all(type(k) is int and v is not None for k, v in items)
    assert all(type(k) is int for k in copied)


def test_doc_table_acts_as_a_dict_of_records() -> None:
    """The ``docs`` table: a DocTable compiled, a dict on the pure path. A random run of
    writes, rewrites, deletions and reads over many short runs of slots (so deletions move
    entries back across a shard's end) answers as a dict does; only str keys and bytes
    records are taken, and anything else is simply absent on a read."""
    import random

    if tables._DOC_TABLE is None:
        pytest.skip("the compiled assignment is not built")
    rng = random.Random(7)
    keys = [f"d{i}" for i in range(4000)] + ["", "é", "\ud800 lone", "新闻-1", "x" * 300]
    table, mirror = tables.doc_table(), {}
    _random_run(
        table,
        mirror,
        60_000,
        lambda: rng.choice(keys),
        lambda step: rng.randbytes(rng.choice((0, 17, 140, 600))),
        rng,
    )
    assert table == mirror and mirror == table and not table != mirror
    assert sorted(table) == sorted(table.keys()) == sorted(mirror)
    assert sorted(table.items()) == sorted(mirror.items())
    assert sorted(table.values()) == sorted(mirror.values())
    assert tables.plain(table) == mirror and type(tables.plain(table)) is dict
    assert tables.doc_table(mirror) == table
    for bad in (1, b"d1", None, ("d1",)):
        assert bad not in table and table.get(bad, "none") == "none"
        with pytest.raises(KeyError):
            table[bad]
        with pytest.raises(TypeError):
            table[bad] = b""
    with pytest.raises(TypeError):
        table["d1"] = "not bytes"  # type: ignore[assignment]
    with pytest.raises(KeyError):
        del table["never added"]
    for key in list(table):
        del table[key]
    assert len(table) == 0 and table == {}


@pytest.mark.parametrize("change", ["grows", "empties"])
@pytest.mark.parametrize("kind", ["anchors", "votes"])
@pytest.mark.parametrize("listing", ["items", "values", "keys"])
def test_anchor_and_vote_maps_list_what_they_held_whatever_a_finalizer_does(
    kind: str, change: str, listing: str
) -> None:
    """keys(), values() and items() of an AnchorMap or a VoteMap make many objects, and so may
    start a collection whose finalizers change the map: they answer with the entries the map
    held when called, never with a torn or a longer list (nor crash the interpreter)."""
    import gc

    if tables._MAP is None:
        pytest.skip("the compiled assignment is not built")
    table: Any = tables.anchor_table() if kind == "anchors" else tables.vote_table()
    value = 1 if kind == "anchors" else (1, 2)
    held = {h: value for h in range(1, 2000)}
    for h, v in held.items():
        table[h] = v

    class Changes:
        def __init__(self) -> None:
            self.me = self  # garbage only the collector frees

        def __del__(self) -> None:
            if change == "empties":
                for h in range(1, 2000):
                    table.pop(h, None)
            else:
                for h in range(10**6, 10**6 + 5000):
                    table[h] = value

    method = getattr(table, listing)  # made first: the call itself then makes no object
    Changes()
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        got = method()
    finally:
        gc.set_threshold(*threshold)
    want = {"items": sorted(held.items()), "values": list(held.values()), "keys": sorted(held)}
    assert got == want[listing]


@pytest.mark.parametrize("read", ["subscript", "get", "pop"])
def test_a_vote_read_answers_what_was_stored_whatever_a_finalizer_does(read: str) -> None:
    """Reading one hash of a VoteMap makes a tuple, which may start a collection whose
    finalizers change the map: storing a longer tuple widens every slot (the old slots are
    freed) and new allocations reuse the memory. The answer is the tuple stored, read before
    the collection, never ids from freed memory."""
    import gc

    if tables._MAP is None:
        pytest.skip("the compiled assignment is not built")
    table: Any = tables.vote_table()
    wide = tuple(range(1, 26))  # a tuple past the free lists: its allocation may collect
    junk: list[bytes] = []

    class Widens:
        def __init__(self) -> None:
            self.me = self  # garbage only the collector frees

        def __del__(self) -> None:
            table[8] = tuple(range(1, 40))
            junk.extend(b"\x09" * n for n in range(1500, 1650))

    threshold = gc.get_threshold()
    try:
        for _ in range(20):
            table[7] = wide
            gc.collect()
            Widens()
            gc.set_threshold(1)
            if read == "subscript":
                got = table[7]
            elif read == "get":
                got = table.get(7)
            else:
                got = table.pop(7)
            gc.set_threshold(*threshold)
            assert got == wide
            table.pop(8, None)
            junk.clear()
    finally:
        gc.set_threshold(*threshold)


def test_a_vote_table_refuses_what_it_could_not_pack_back() -> None:
    """A VoteMap packs at most 65,536 ids a hash (what its constructor reads back), so a longer
    tuple is refused when stored, and a policy cannot ask for more votes than that."""
    from nshash.methods.nshash.assign import MOST_VOTES, MatchPolicy

    assert MatchPolicy(votes=MOST_VOTES).votes == MOST_VOTES
    with pytest.raises(ConfigError, match="from 2 to 65536"):
        MatchPolicy(votes=MOST_VOTES + 1)
    if tables._MAP is None:
        return  # the pure path keeps a dict, which a snapshot keeps as it is
    table: Any = tables.vote_table()
    table[1] = tuple(range(1, MOST_VOTES + 1))
    assert tables.vote_table(table.pack()) == table
    with pytest.raises(ValueError, match="at most 65536"):
        table[2] = tuple(range(1, MOST_VOTES + 2))
    assert 2 not in table


def test_snapshots_cross_between_the_compiled_and_the_pure_path(tmp_path: Path) -> None:
    """The compiled path keeps its anchor, common and vote tables as AnchorMaps and a VoteMap
    and packs them into the snapshot, its per-group tables as GroupTables and its documents in
    a DocTable; the pure path keeps dicts. Each reads the other's snapshot, with the same
    answers."""
    import subprocess
    import sys

    script = (
        "import sys, zlib, nshash\n"
        "from nshash.methods.nshash import memory\n"
        "url, write = sys.argv[1], sys.argv[2] == 'write'\n"
        "with nshash.NSHash.open(url) as nsh:\n"
        "    if write:\n"
        "        for i in range(40):\n"
        "            k = i % 25\n"
        "            nsh.add(f'Story {k} about the harbour, the council and the new tram line. '\n"
        "                    f'It was reported on day {k} by the city desk of the paper.',\n"
        "                    doc_id=f'd{i}')\n"
        "        nsh.store._t.add_common([3, 1 << 62])\n"
        "        nsh.store.save()\n"
        "    s = nsh.stats()\n"
        "    probe = nsh.query('Story 7 about the harbour, the council and the new tram line. '\n"
        "                      'It was reported on day 7 by the city desk of the paper.')\n"
        "    t = nsh.store._t\n"
        "    votes = hash(tuple(sorted(t.votes.items())))\n"
        "    groups = repr([sorted(g.items()) for g in (t.sketch, t.size, t.members)])\n"
        "    groups = zlib.crc32(groups.encode())\n"
        "    common = sorted(t.common)\n"
        "    print(type(t.fp).__name__, type(t.votes).__name__, type(t.sketch).__name__,\n"
        "          type(t.common).__name__, type(t.docs).__name__, len(t.votes), votes, groups,\n"
        "          len(common), zlib.crc32(repr(sorted(t.docs.items())).encode()),\n"
        "          zlib.crc32(repr(common).encode()),\n"
        "          s.documents, s.groups, s.fingerprints, probe)\n"
    )

    def run(url: str, write: bool, pure: bool) -> list[str]:
        env = {**os.environ, "NSHASH_PURE": "1" if pure else ""}
        if not pure:
            env.pop("NSHASH_PURE")
        out = subprocess.run(
            [sys.executable, "-c", script, url, "write" if write else "read"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.split()

    compiled = run(f"memory://{tmp_path}/c.pkl", True, pure=False)
    if compiled[0] != "AnchorMap":
        pytest.skip("the compiled assignment is not built")
    assert compiled[1:5] == ["VoteMap", "GroupTable", "AnchorMap", "DocTable"]
    assert int(compiled[5]) > 0 and int(compiled[8]) >= 2  # votes cast, hashes common
    dicts = ["dict", "dict", "dict", "dict", "dict", *compiled[5:]]
    assert run(f"memory://{tmp_path}/c.pkl", False, pure=True) == dicts
    pure = run(f"memory://{tmp_path}/p.pkl", True, pure=True)
    assert pure == dicts
    assert run(f"memory://{tmp_path}/p.pkl", False, pure=False) == compiled


_COMMON = {5, 1 << 63}


@pytest.mark.parametrize(
    ("kept", "good", "fmt"),
    [
        (None, True, 4),  # as this version writes it: packed where compiled, a dict where pure
        (_COMMON, True, 3),  # a set, as every snapshot before the table was an AnchorMap wrote it
        (_COMMON, True, 4),
        (dict.fromkeys(_COMMON, 1), True, 4),
        ({5, -1}, False, 4),
        ({5: 2}, False, 4),
        (struct.pack("<QI", 5, 2), False, 4),  # packed, but not mapped to 1
        (b"\x01\x02\x03", False, 4),
        ([5], False, 4),
    ],
    ids=[
        "written", "format-3-set", "set", "dict", "negative", "not-one", "packed-not-one",
        "torn", "list",
    ],  # fmt: skip
)
def test_the_common_table_reads_every_form_it_was_written_in(
    tmp_path: Path, kept: Any, good: bool, fmt: int
) -> None:
    """The common hashes load from a snapshot as this version packs them, and as a set (every
    snapshot before) or a dict (the pure path's) of hashes mapped to 1; anything else is a
    damaged snapshot. Loaded, they are what the store has (and what the guard leaves out)."""
    path = tmp_path / "s.pkl"
    with NSHash.open(f"memory://{path}") as nsh:
        sid = nsh.add(EN_RAIL, doc_id="a").similar_id
        nsh.store._t.add_common(sorted(_COMMON))  # type: ignore[attr-defined]
        nsh.store.save()  # type: ignore[attr-defined]
    if kept is not None:
        data = durable.read_snapshot(str(path))[0]
        assert data["format"] == 5
        data["common"], data["format"] = kept, fmt
        path.write_bytes(pickle.dumps(data))
    if not good:
        with pytest.raises(StoreCorruptError, match="damaged: table 'common': "):
            MemoryStore(path)
        return
    with NSHash.open(f"memory://{path}") as again:
        t = again.store._t  # type: ignore[attr-defined]
        assert sorted(t.common) == sorted(_COMMON) and 7 not in t.common
        assert type(t.common) is type(tables.anchor_table())
        assert again.stats().common_fingerprints == 2
        assert again.add(EN_RAIL_REPOST).similar_id == sid


@pytest.mark.parametrize("save", [True, False], ids=["saved", "journal-only"])
def test_new_stores_keep_narrow_sketches_and_older_ones_stay_wide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save: bool
) -> None:
    """A new store keeps sketch values narrow (31 bits, 4 bytes each; snapshot format 3, or
    the journal's first line when there is no snapshot yet). A store begun before narrow
    sketches (53-bit values, 8 bytes, snapshot format 2) stays wide through writes and
    reopens, so its groups keep matching, and its snapshot stays readable by older versions."""
    from nshash.text.fingerprint import NARROW_BITS, SKETCH_BITS

    def widest(nsh: NSHash) -> int:
        t = nsh.store._t  # type: ignore[attr-defined]
        return max(max(memory.unpack_sketch(v, t.narrow)) for v in t.sketch.values())

    for wide in (False, True):
        path = tmp_path / f"{wide}.pkl"
        with pytest.MonkeyPatch.context() as old:
            if wide:  # written as a version before narrow sketches (and letter_units) wrote it
                old.setattr(memory, "_narrowing", lambda t, letters: t.narrow)
            with NSHash.open(f"memory://{path}") as nsh:
                first = nsh.add(ZH_WATER, doc_id="w")
                if save:
                    nsh.store.save()  # type: ignore[attr-defined]
        if not save:
            journal = path.with_name(path.name + ".journal").read_text().splitlines()
            assert ('"w",31' in journal[0].replace(" ", "")) is not wide
        with NSHash.open(f"memory://{path}") as nsh:
            assert nsh.store._t.narrow is not wide  # type: ignore[attr-defined]
            bits = SKETCH_BITS if wide else NARROW_BITS
            assert 1 << (bits - 4) <= widest(nsh) < 1 << bits
            assert nsh.add(ZH_WATER_REPOST, doc_id="r").similar_id == first.similar_id
            assert nsh.add(ZH_LIBRARY, doc_id="l").similar_id != first.similar_id
            nsh.store.save()  # type: ignore[attr-defined]
        data = durable.read_snapshot(str(path))[0]
        assert (data["format"], data["narrow"]) == ((2, False) if wide else (5, True))
        # A wide store's common hashes stay a set, as the versions before kept them.
        assert type(data["common"]) is (set if wide else type(tables.packed(tables.anchor_table())))


# -- background snapshots ------------------------------------------------------------------
#: Makes the forked child of a background snapshot wait until the file GATE names exists (so
#: a test sees writes go on while it runs), or fail when FAIL is set; the parent is unchanged.
HELD_CHILD = """
import os, time
from nshash.stores import durable
_real, _parent = durable.JournaledFile._write_snapshot_file, os.getpid()
def _held(self, seq, journal=None, keep_journal=True):
    if os.getpid() != _parent:
        open(os.environ["GATE"] + ".reached", "w").close()
        while not os.path.exists(os.environ["GATE"]):
            time.sleep(0.01)
        if os.environ.get("FAIL"):
            raise OSError(28, "No space left on device (made by the test)")
    return _real(self, seq, journal, keep_journal)
durable.JournaledFile._write_snapshot_file = _held
durable.JOURNAL_MIN_BYTES = 0
"""


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Any:
    """held(gate, fail=False): HELD_CHILD in this process, taken back after the test."""
    from nshash.stores import durable

    # Set to what they are, so the test's end puts them back after HELD_CHILD changed them.
    monkeypatch.setattr(durable, "JOURNAL_MIN_BYTES", durable.JOURNAL_MIN_BYTES)
    monkeypatch.setattr(durable.JournaledFile, "_write_snapshot_file",
                        durable.JournaledFile._write_snapshot_file)  # fmt: skip

    def hold(gate: Path, fail: bool = False) -> None:
        monkeypatch.setenv("GATE", str(gate))
        if fail:
            monkeypatch.setenv("FAIL", "1")
        exec(HELD_CHILD, {})  # noqa: S102 - the test's own snippet

    return hold


@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_a_background_snapshot_lets_writes_go_on(tmp_path: Path, held: Any) -> None:
    """The write that makes a compaction due starts it in a child and returns: the journal
    moves to PATH.journal.old, later writes go to a new journal, a read-only open meanwhile
    sees all of them, and once the child is done the snapshot holds what the old journal
    held and the old journal is gone."""
    path, gate = tmp_path / "s.pkl", tmp_path / "gate"
    old = tmp_path / "s.pkl.journal.old"
    held(gate)
    nsh = NSHash.open(f"memory://{path}")
    file = nsh.store._file  # type: ignore[attr-defined]
    nsh.add(EN_RAIL, doc_id="a")  # due at once: JOURNAL_MIN_BYTES is 0
    assert file._snapshots.busy() and old.exists() and not path.exists()
    for i, text in enumerate(EN_STORIES):
        nsh.add(text, doc_id=f"s{i}")  # written while the child waits
    assert file._snapshots.busy() and old.stat().st_size > 0
    with NSHash.open(f"memory://{path}", readonly=True) as reader:
        assert reader.stats().documents == len(EN_STORIES) + 1
    gate.touch()
    nsh.add(EN_RAIL_REPOST, doc_id="b")  # finds the child done, or waits at close
    nsh.close()
    assert not old.exists() and path.exists()
    assert durable.read_snapshot(str(path))[0]["seq"] >= 1
    with NSHash.open(f"memory://{path}") as again:
        assert again.stats().documents == len(EN_STORIES) + 2
        assert again.document("b").similar_id == again.document("a").similar_id  # type: ignore[union-attr]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_a_failed_background_snapshot_loses_nothing(
    tmp_path: Path, held: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A child that cannot write the snapshot (a full disk) is logged; both journals keep
    everything, and the next compaction is written by the write that makes it due, which
    deletes the old journal."""
    path, gate = tmp_path / "s.pkl", tmp_path / "gate"
    old = tmp_path / "s.pkl.journal.old"
    gate.touch()
    held(gate, fail=True)
    nsh = NSHash.open(f"memory://{path}")
    file = nsh.store._file  # type: ignore[attr-defined]
    nsh.add(EN_RAIL, doc_id="a")
    file._snapshots.settle(cancel=False)  # the child has failed by now, or while this waits
    assert "background snapshot" in caplog.text and "No space left" in caplog.text
    assert old.exists() and not path.exists()
    nsh.add(EN_RAIL_REPOST, doc_id="b")  # due again, with an old journal: in the foreground
    assert not file._snapshots.busy() and not old.exists() and path.exists()
    nsh.close()
    with NSHash.open(f"memory://{path}") as again:
        assert again.stats().documents == 2


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_a_crash_during_a_background_snapshot_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL of the writer while its child is about to write the snapshot: the child dies
    with it (so no snapshot lands later), and the next open replays both journals (every
    acknowledged add is there) and folds them into a snapshot."""
    import signal

    path, gate = tmp_path / "s.pkl", tmp_path / "gate"
    texts = [*EN_STORIES, EN_RAIL, EN_RAIL_REPOST]
    script = HELD_CHILD + textwrap.dedent(
        f"""
        import json, sys
        from nshash import NSHash
        nsh = NSHash.open({f"memory://{path}"!r}, fsync="no")
        for i, text in enumerate(json.loads(sys.argv[1])):
            r = nsh.add(text, doc_id=f"doc{{i}}")
            print(r.similar_id, flush=True)
        snapshots = nsh.store._file._snapshots
        while not snapshots.pid:  # forked by its thread soon after the first add
            time.sleep(0.01)
        print(snapshots.pid, flush=True)
        sys.stdin.readline()
        """
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script, json.dumps(texts)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "GATE": str(gate)},
    )
    assert writer.stdout is not None
    acknowledged = [int(writer.stdout.readline()) for _ in texts]
    snapshotter = int(writer.stdout.readline())  # the child, still waiting at the gate
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    for _ in range(500):  # it dies with the writer (PR_SET_PDEATHSIG)
        try:
            os.kill(snapshotter, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the snapshot's child outlived the writer")
    gate.touch()
    assert not path.exists() and (tmp_path / "s.pkl.journal.old").exists()
    with NSHash.open(f"memory://{path}") as again:
        assert again.stats().documents == len(texts)
        for i, sid in enumerate(acknowledged):
            assert again.document(f"doc{i}").similar_id == sid  # type: ignore[union-attr]
    assert path.exists() and not (tmp_path / "s.pkl.journal.old").exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_the_snapshot_of_a_thread_that_ends_still_lands(tmp_path: Path) -> None:
    """A server's worker thread may end right after the write that made a compaction due;
    the child is forked by the store's own snapshot thread, so it still finishes."""
    import threading

    from nshash.stores import durable

    path = tmp_path / "s.pkl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(durable, "JOURNAL_MIN_BYTES", 0)
        nsh = NSHash.open(f"memory://{path}")
        worker = threading.Thread(target=lambda: nsh.add(EN_RAIL, doc_id="a"))
        worker.start()
        worker.join()
        nsh.store._file._snapshots.settle(cancel=False)  # type: ignore[attr-defined]
        assert path.exists() and not (tmp_path / "s.pkl.journal.old").exists()
        nsh.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_the_snapshot_child_holds_no_other_file(tmp_path: Path, held: Any) -> None:
    """Once running, the child keeps the store's lock and its pipe only: another store
    closed meanwhile opens again at once, in this process too. (Between the fork and that
    moment, a few milliseconds, it holds what the process held.)"""
    gate = tmp_path / "gate"
    held(gate)
    a = NSHash.open(f"memory://{tmp_path}/a.pkl")
    b = NSHash.open(f"memory://{tmp_path}/b.pkl")
    a.add(EN_RAIL, doc_id="a")
    for _ in range(1000):  # a's child is at the gate: its files are closed
        if (tmp_path / "gate.reached").exists():
            break
        time.sleep(0.01)
    b.close()
    with NSHash.open(f"memory://{tmp_path}/b.pkl") as again:
        assert again.stats().documents == 0
    with pytest.raises(StoreLockedError):
        NSHash.open(f"memory://{tmp_path}/a.pkl")  # a is open: its lock is held
    gate.touch()
    a.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="background snapshots need fork")
def test_a_fork_that_fails_is_a_warning_not_a_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No process to fork (EAGAIN) fails no write and leaks no descriptor; the next
    compaction is written in the foreground and folds both journals."""
    from nshash.stores import durable

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(durable, "JOURNAL_MIN_BYTES", 0)
    path, old = tmp_path / "s.pkl", tmp_path / "s.pkl.journal.old"
    nsh = NSHash.open(f"memory://{path}")
    fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    monkeypatch.setattr(os, "fork", no_fork)
    assert nsh.add(EN_RAIL, doc_id="a").similar_id == 1
    nsh.store._file._snapshots.settle(cancel=False)  # type: ignore[attr-defined]
    assert "Cannot begin a background snapshot" in caplog.text and old.exists()
    if fds is not None:
        assert len(os.listdir("/proc/self/fd")) == fds  # the pipe's ends were closed
    nsh.add(EN_RAIL_REPOST, doc_id="b")
    assert path.exists() and not old.exists()
    nsh.close()
    with NSHash.open(f"memory://{path}") as again:
        assert again.stats().documents == 2


def test_repairing_a_damaged_journal_keeps_the_old_one_and_later_writes(tmp_path: Path) -> None:
    """After a crash during a background snapshot, the journal after PATH.journal.old has a
    damaged line: repair keeps both journals' lines before it, moves the damaged journal
    aside, and the writes that follow survive a plain reopen."""
    path = tmp_path / "s.pkl"
    with NSHash.open(f"memory://{path}") as nsh:
        nsh.add(EN_RAIL, doc_id="a")
        nsh.add(EN_RAIL_REPOST, doc_id="b")
    journal = tmp_path / "s.pkl.journal"
    journal.rename(tmp_path / "s.pkl.journal.old")
    journal.write_bytes(b'[3,[["zz"]]]\n')
    with NSHash.open(f"memory://{path}", repair=True) as nsh:
        assert nsh.store.repaired is not None  # type: ignore[attr-defined]
        assert nsh.stats().documents == 2
        nsh.add(ZH_WATER, doc_id="c")
    assert (tmp_path / "s.pkl.journal.damaged").read_bytes() == b'[3,[["zz"]]]\n'
    assert not (tmp_path / "s.pkl.journal.old").exists()
    with NSHash.open(f"memory://{path}") as again:
        assert again.stats().documents == 3
