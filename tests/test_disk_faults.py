"""A full disk and failed writes: an add is durable and returns, or raises and leaves no trace.

Two ways to fill a disk:

* a real one: a 2 MB tmpfs mounted for the test (only as root, as under CI; skipped when
  the mount is refused), filled by a file, with a writer process that is SIGKILLed at the end;
* an injected one, everywhere: the journal's ``write`` comes up short or fails with ENOSPC,
  its ``fsync`` fails, or LevelDB's batch write fails.

After each, every acknowledged add is present after a reopen, no id is handed out twice, and
the store opens.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import struct
import subprocess
import textwrap
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nshash import NSHash, StoreError
from nshash.methods.nshash.memory import MemoryStore
from nshash.stores import durable
from tests.test_durability import kill, read_line, spawn
from tests.test_store_contract import story_versions, synthetic_story

# -- a real full disk --------------------------------------------------------------------------

#: Adds documents until three adds have failed (the disk is full), then frees the space,
#: resends the failed documents (as the README advises) and adds thirty more. Every answer is
#: printed once ``add`` returned; then it waits to be killed.
FULL_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from nshash import NSHash, StoreError
    from tests.test_store_contract import story_versions

    url, filler = sys.argv[1], os.environ["FILLER"]
    nsh = NSHash.open(url)
    print("ready", flush=True)

    def add(i):
        story, version = divmod(i, 3)
        r = nsh.add(story_versions(story)[version], doc_id=f"d{i}")
        print(json.dumps(["ok", f"d{i}", r.similar_id, r.duplicate, r.replayed]), flush=True)

    failed, i = [], 0
    while len(failed) < 3 and i < 20000:
        try:
            add(i)
        except StoreError as exc:
            failed.append(i)
            print(json.dumps(["err", f"d{i}", str(exc)[:300]]), flush=True)
        i += 1
    os.unlink(filler)
    print("freed", flush=True)
    for j in failed:
        deadline = time.monotonic() + 15
        while True:
            try:
                add(j)
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    for k in range(i, i + 30):
        add(k)
    print("done", flush=True)
    time.sleep(120)
    """
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, mounted for this test only (root only; skipped if the mount is refused)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the injected-failure tests run instead)")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill *disk* with one file until about *leave* bytes stay free; return the file."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


@pytest.mark.slow
class TestRealFullDisk:
    """A store on a 2 MB tmpfs that fills up, empties again, and whose writer is SIGKILLed."""

    @pytest.mark.parametrize(
        "backend,fsync",
        [
            ("memory", "always"),
            ("memory", "everysec"),
            ("leveldb", "always"),
            ("leveldb", "no"),
            ("sqlite", "everysec"),
        ],
    )
    def test_full_disk_then_sigkill_loses_nothing_acknowledged(
        self, small_disk: Path, backend: str, fsync: str
    ) -> None:
        """Failed adds raise and leave no trace; resent, they are new (not replays); after
        SIGKILL every acknowledged add is there, no id was handed out twice, the store opens."""
        if backend == "leveldb":
            pytest.importorskip("plyvel")
            url = f"leveldb://{small_disk}/store.ldb?fsync={fsync}"
        elif backend == "sqlite":
            url = f"sqlite://{small_disk}/store.db?fsync={fsync}"
        else:
            url = f"memory://{small_disk}/store.pkl?fsync={fsync}"
        filler = fill(small_disk, leave=96 * 1024)
        os.environ["FILLER"] = str(filler)
        try:
            proc = spawn(FULL_WRITER, url)
        finally:
            del os.environ["FILLER"]
        watchdog = threading.Timer(90, proc.kill)
        watchdog.start()
        lines: list[Any] = []
        try:
            assert read_line(proc) == "ready"
            while True:
                line = read_line(proc)
                if line == "done":
                    break
                if line != "freed":
                    lines.append(json.loads(line))
        finally:
            kill(proc)
            watchdog.cancel()
        errors = [entry for entry in lines if entry[0] == "err"]
        acked = [entry for entry in lines if entry[0] == "ok"]
        assert len(errors) == 3, "a full disk must make add raise"
        assert "No space left" in errors[0][2] or "short write" in errors[0][2]
        failed = {doc_id for _err, doc_id, _msg in errors}
        resent = [a for a in acked if a[1] in failed]
        assert len(resent) == 3 and not any(a[4] for a in resent), (
            "a failed add left a trace: resending it answered replayed"
        )
        if backend == "memory":
            journal = (small_disk / "store.pkl.journal").read_bytes()
            assert journal.endswith(b"\n"), "a torn fragment stayed in the journal"
            assert all(durable.parse_line(line)[2] for line in journal.split(b"\n")[:-1])

        with NSHash.open(url) as nsh:
            for _ok, doc_id, similar_id, _dup, _replayed in acked:
                record = nsh.document(doc_id)
                assert record is not None, f"acknowledged {doc_id} was lost"
                assert record.similar_id == nsh.resolve(similar_id)
            new_ids = [a[2] for a in acked if not a[3] and not a[4]]
            assert len(new_ids) == len(set(new_ids)), "an id was handed out twice"
            by_story: dict[int, set[int]] = {}
            for _ok, doc_id, similar_id, _dup, _replayed in acked:
                by_story.setdefault(int(doc_id[1:]) // 3, set()).add(nsh.resolve(similar_id))
            assert all(len(ids) == 1 for ids in by_story.values())
            newest = max(a[2] for a in acked)
            fresh = nsh.add("\n".join(synthetic_story(90_000)))
            assert not fresh.duplicate and fresh.similar_id > newest


#: Adds distinct documents to the store named by argv[1] (LevelDB keeps them in its log until
#: its write buffer fills), says "done" and waits to be killed.
_LOG_WRITER = textwrap.dedent(
    """
    import random, sys, time
    from nshash import NSHash
    nsh = NSHash.open(sys.argv[1])
    rnd = random.Random(3)
    words = ["river", "bridge", "council", "harbour", "budget", "school", "storm", "market"]
    for i in range(300):
        text = " ".join(rnd.choice(words) + str(rnd.randrange(10**6)) for _ in range(60))
        nsh.add(text + ".", doc_id=f"d{i}", title=f"title {i}")
    print("done", flush=True)
    time.sleep(120)
    """
)


class TestLevelDBLogOnSmallDisk:
    """A LevelDB directory whose log does not fit the free space says so when it will not open."""

    def test_the_error_says_how_much_to_free(self, small_disk: Path) -> None:
        """After a SIGKILL, an open on a disk with less free space than the log is refused
        with a StoreError that names the log's size and the space to free; once that is
        freed, the open finds every acknowledged document."""
        url = f"leveldb://{small_disk}/store.ldb"
        proc = spawn(_LOG_WRITER, url)
        try:
            assert read_line(proc) == "done"
        finally:
            kill(proc)
        folder = small_disk / "store.ldb"
        log = sum(f.stat().st_size for f in folder.iterdir() if f.name.endswith(".log"))
        assert log > 200_000
        filler = fill(small_disk, leave=log // 4)
        with pytest.raises(StoreError) as refused:
            NSHash.open(url)
        message = str(refused.value)
        assert "No space left on device" in message
        assert f"the log of the last writes, {log / 1e6:.1f} MB here" in message
        assert f"free at least {log / 1e6:.1f} MB on it and open again" in message
        filler.unlink()
        with NSHash.open(url) as nsh:
            assert nsh.stats().documents == 300 and nsh.document("d299") is not None


# -- injected failures -------------------------------------------------------------------------


class FlakyDisk:
    """Stands in for the journal's ``write`` and ``fsync`` calls (see ``nshash.stores.durable``).

    ``mode`` is ``"ok"`` (the real calls), ``"short"`` (write takes half, then ENOSPC),
    ``"enospc"`` (write fails at once) or ``"fsync"`` (fsync fails with EIO).
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.mode = "ok"
        self.real_write, self.real_fsync = os.write, os.fsync
        monkeypatch.setattr(durable, "_write", self.write)
        monkeypatch.setattr(durable, "_fsync", self.fsync)

    def write(self, fd: int, data: Any) -> int:
        if self.mode == "short":
            half = max(1, len(data) // 2)
            self.mode = "enospc"
            return self.real_write(fd, bytes(data[:half]))
        if self.mode == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.real_write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.mode == "fsync":
            raise OSError(errno.EIO, "Input/output error")
        self.real_fsync(fd)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> FlakyDisk:
    return FlakyDisk(monkeypatch)


def crash_image(path: Path, into: Path) -> Path:
    """Copy a memory store's files as a crash would leave them (no close, no snapshot)."""
    into.mkdir()
    for suffix in ("", ".journal"):
        src = Path(str(path) + suffix)
        if src.exists():
            shutil.copy(src, str(into / path.name) + suffix)
    return into / path.name


def doc(i: int) -> str:
    story, version = divmod(i, 3)
    return story_versions(story)[version]


class TestMemoryStoreShortWrites:
    """The journal of a memory store with a path, on a disk that refuses writes."""

    @pytest.mark.parametrize("mode", ["short", "enospc"])
    @pytest.mark.parametrize("fsync", ["always", "everysec"])
    def test_failed_add_leaves_no_trace(
        self, tmp_path: Path, disk: FlakyDisk, mode: str, fsync: str
    ) -> None:
        """A short or failed write raises StoreError, the journal is as it was, the tables
        too; resending the document later adds it afresh (not a replay)."""
        path = tmp_path / "s.pkl"
        nsh = NSHash.open(f"memory://{path}?fsync={fsync}")
        acked = {f"d{i}": nsh.add(doc(i), doc_id=f"d{i}").similar_id for i in range(4)}
        journal = Path(str(path) + ".journal")
        before, stats = journal.read_bytes(), nsh.stats()
        disk.mode = mode
        with pytest.raises(StoreError, match="No space left"):
            nsh.add(doc(4), doc_id="d4")
        assert journal.read_bytes() == before, "half a line stayed in the journal"
        assert nsh.document("d4") is None and nsh.stats() == stats
        with pytest.raises(StoreError):
            nsh.add(doc(6), doc_id="d6")  # a new story: its id must not be used up
        disk.mode = "ok"
        retry = nsh.add(doc(4), doc_id="d4")
        assert not retry.replayed
        acked["d4"] = retry.similar_id
        fresh = nsh.add(doc(6), doc_id="d6")
        assert fresh.similar_id == stats.last_id + 1, "a failed add used up an id"
        acked["d6"] = fresh.similar_id
        image = crash_image(path, tmp_path / "crash")
        with NSHash.open(f"memory://{image}") as again:
            for doc_id, sid in acked.items():
                record = again.document(doc_id)
                assert record is not None and record.similar_id == again.resolve(sid)
        nsh.close()

    def test_failed_fsync_leaves_no_trace(self, tmp_path: Path, disk: FlakyDisk) -> None:
        """Under fsync=always a failed fsync is an error, and the line is taken back."""
        path = tmp_path / "f.pkl"
        with NSHash.open(f"memory://{path}?fsync=always") as nsh:
            nsh.add(doc(0), doc_id="d0")
            journal = Path(str(path) + ".journal")
            before = journal.read_bytes()
            disk.mode = "fsync"
            with pytest.raises(StoreError, match="Input/output error"):
                nsh.add(doc(3), doc_id="d3")
            assert journal.read_bytes() == before
            assert nsh.document("d3") is None
            disk.mode = "ok"
            assert not nsh.add(doc(3), doc_id="d3").replayed

    def test_failed_merge_is_rolled_back(self, tmp_path: Path, disk: FlakyDisk) -> None:
        """An add that would merge two groups, failing, leaves both groups as they were."""
        path = tmp_path / "m.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            a = synthetic_story(1)
            b = synthetic_story(2)
            first = nsh.add("\n".join(a), doc_id="a")
            second = nsh.add("\n".join(b), doc_id="b")
            both = "\n".join(a + b)
            groups_before = nsh.groups(min_size=1)
            disk.mode = "enospc"
            with pytest.raises(StoreError):
                nsh.add(both, doc_id="ab")
            disk.mode = "ok"
            assert nsh.groups(min_size=1) == groups_before
            assert nsh.resolve(second.similar_id) == second.similar_id
            assert nsh.resolve(first.similar_id) == first.similar_id
            assert nsh.stats().documents == 2

    def test_uncut_fragment_stops_writes_and_is_dropped_on_open(
        self, tmp_path: Path, disk: FlakyDisk, monkeypatch: pytest.MonkeyPatch, caplog: Any
    ) -> None:
        """If the torn fragment cannot even be cut off, the journal refuses later writes (so
        nothing follows the fragment); reopening drops it as a torn last line, with a warning."""
        path = tmp_path / "t.pkl"
        nsh = NSHash.open(f"memory://{path}")
        nsh.add(doc(0), doc_id="d0")

        def no_truncate(fd: int, size: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        disk.mode = "short"
        monkeypatch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(StoreError):
            nsh.add(doc(1), doc_id="d1")
        monkeypatch.undo()  # the disk works again; the journal still refuses
        with pytest.raises(StoreError, match="refuses writes until the store is reopened"):
            nsh.add(doc(2), doc_id="d2")
        with pytest.raises(StoreError):
            nsh.store.ping()
        image = crash_image(path, tmp_path / "crash")
        assert not Path(str(image) + ".journal").read_bytes().endswith(b"\n")
        with caplog.at_level(logging.WARNING, logger="nshash"):
            again = MemoryStore(image)
        assert "torn line" in caplog.text
        assert again.document("d0") is not None and again.document("d1") is None
        again.close()
        nsh.store._file.journal.broken = None  # type: ignore[attr-defined]
        nsh.close()

    def test_readiness_follows_the_disk(self, tmp_path: Path, disk: FlakyDisk) -> None:
        """ping() raises after a failed write while the disk still refuses, and passes once
        it takes writes again (``/readyz`` answers from it)."""
        with NSHash.open(f"memory://{tmp_path}/r.pkl") as nsh:
            nsh.store.ping()
            disk.mode = "enospc"
            with pytest.raises(StoreError):
                nsh.add(doc(0))
            with pytest.raises(StoreError, match="cannot write"):
                nsh.store.ping()
            disk.mode = "ok"
            nsh.store.ping()
            nsh.add(doc(0))

    def test_keyed_journal_short_write(self, tmp_path: Path, disk: FlakyDisk) -> None:
        """The keyed method's memory journal also cuts a short record off and raises."""
        pytest.importorskip("rbloom")
        from nshash import KeyedDedup

        path = tmp_path / "k.db"
        kd = KeyedDedup.open(f"memory://{path}")
        kd.add(doc(0), doc_id="d0")
        journal = Path(str(path) + ".journal")
        before = journal.read_bytes()
        disk.mode = "short"
        with pytest.raises(StoreError):
            kd.add(doc(3), doc_id="d3")
        assert journal.read_bytes() == before
        disk.mode = "ok"
        kd.close()


class _FailingBatchDB:
    """Wraps a plyvel DB; while ``failing``, every batch write fails like a full disk."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.failing = True

    def write_batch(self, **kwargs: Any) -> Any:
        batch = self.db.write_batch(**kwargs)
        if not self.failing:
            return batch
        import plyvel

        class Batch:
            def put(self, key: bytes, value: bytes) -> None:
                batch.put(key, value)

            def delete(self, key: bytes) -> None:
                batch.delete(key)

            def write(self) -> None:
                raise plyvel.IOError(b"IO error: 000005.log: No space left on device")

        return Batch()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


class TestLevelDBWriteFailure:
    """After a write error a LevelDB store refuses writes until it has reopened and verified."""

    def test_refuses_writes_until_reopened_and_verified(self, tmp_path: Path) -> None:
        """The failed add raises; later adds are refused (not silently lost) until the store
        has reopened its directory; then ids go on from the counter, none twice."""
        pytest.importorskip("plyvel")
        url = f"leveldb://{tmp_path}/db?fsync=always"
        with NSHash.open(url) as nsh:
            first = nsh.add(doc(0), doc_id="d0")
            store: Any = nsh.store
            store._kv.db = _FailingBatchDB(store._kv.db)
            with pytest.raises(StoreError, match="No space left"):
                nsh.add(doc(3), doc_id="d3")
            store._kv.db.failing = False  # space is back, but the log may hold half a record
            with pytest.raises(StoreError, match="refuses writes until it is reopened"):
                nsh.add(doc(3), doc_id="d3")
            with pytest.raises(StoreError):
                store.ping()
            assert nsh.document("d0") is not None  # reads still work
            time.sleep(1.1)
            store.ping()  # reopened and verified
            again = nsh.add(doc(3), doc_id="d3")
            assert not again.replayed and again.similar_id == first.similar_id + 1
        with NSHash.open(url) as nsh:
            assert nsh.document("d3") is not None and nsh.stats().last_id == 2


class TestKeyedLevelDBWriteFailure:
    """The keyed method's LevelDB tables refuse writes after a failed one, until reopened."""

    def test_refuses_writes_until_reopened(self, tmp_path: Path) -> None:
        """A failed batch raises StoreError; later writes are refused; a reopen accepts them."""
        plyvel = pytest.importorskip("plyvel")
        pytest.importorskip("rbloom")
        from nshash import KeyedDedup

        url = f"leveldb://{tmp_path}/k.ldb"
        kd = KeyedDedup.open(url)
        kd.add(doc(0), doc_id="d0")
        kv: Any = kd._backend._kv  # type: ignore[attr-defined]
        real = kv._host.db

        class Failing:
            def write_batch(self, **kwargs: Any) -> Any:
                raise plyvel.IOError(b"IO error: 000003.log: No space left on device")

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

        kv._host.db = Failing()
        with pytest.raises(StoreError, match="No space left"):
            kd.add(doc(3), doc_id="d3")
        kv._host.db = real
        with pytest.raises(StoreError, match="refuses writes until it is reopened"):
            kd.add(doc(3), doc_id="d3")
        kd.close()
        with KeyedDedup.open(url) as again:
            assert not again.add(doc(3), doc_id="d3").replayed
            assert again.document("d0") is not None


# -- damaged files ---------------------------------------------------------------------------

#: Journal lines that a store never writes; each must be StoreCorruptError, never a raw
#: TypeError, KeyError or RecursionError, and never accepted.
BAD_LINES = {
    "nan-seq": b"[NaN,[]]",
    "huge-seq": b"[1e999,[]]",
    "float-seq": b"[7.5,[]]",
    "negative-seq": b"[-3,[]]",
    "not-a-pair": b'{"seq":1}',
    "short": b"[9]",
    "ops-not-list": b"[9,7]",
    "negative-group": b'[9,[["n",-1,[]]]]',
    "float-group": b'[9,[["n",2.5,[]]]]',
    "bool-group": b'[9,[["n",true,[]]]]',
    "unknown-group": b'[9,[["f",12,999]]]',
    "sketch-of-nothing": b'[9,[["s",77,[1,2]]]]',
    "sketch-wider-than-narrow": b'[9,[["s",1,[4294967296],9007199254740992,256]]]',
    "other-sketch-width": b'[9,[["w",53]]]',
    "merge-upwards": b'[9,[["g",2,1]]]',
    "member-not-str": b'[9,[["m",1,5,true,[],null,[]]]]',
    "huge-fingerprint": b'[9,[["c",[18446744073709551616]]]]',
    "unknown-op": b'[9,[["zz",1]]]',
    "deep": b"[9,[" + b"[" * 100_000 + b"]" * 100_000 + b"]]",
    "not-utf8": b"[9,[\xff]]",
}

#: Ops of packed values (the str of their base64) that a store never writes, in lines with a
#: good checksum (so the op itself is refused): the reason each gives.
BAD_PACKED_OPS = {
    "anchors-not-base64": (b'["F",1,"not base64!"]', "is not base64"),
    "anchors-cut-short": (b'["F",1,"AQIDBAUGBw=="]', "7 bytes are not values of 8 bytes"),
    "anchors-not-str": (b'["F",1,7]', "is not a list of packed values"),
    "anchors-unknown-group": (b'["F",999,"AQIDBAUGBwg="]', "group 999 was never handed out"),
    "sketch-cut-short": (b'["n",5,"AQID",9007199254740992]', "3 bytes are not values of 4"),
    "sketch-wider-than-narrow": (b'["s",1,"/////w==",9007199254740992,256]', "wider than"),
}


def journal_with(tmp_path: Path, bad: bytes, *, at: int) -> Path:
    """A crash image of a store with three documents, *bad* inserted as journal line *at*."""
    path = tmp_path / "src" / "j.pkl"
    nsh = NSHash.open(f"memory://{path}")
    for i in range(4):
        nsh.add(doc(i), doc_id=f"d{i}")
    image = crash_image(path, tmp_path / "img")
    nsh.close()
    journal = Path(str(image) + ".journal")
    lines = journal.read_bytes().split(b"\n")[:-1]
    lines.insert(at - 1, bad)
    journal.write_bytes(b"\n".join(lines) + b"\n")
    return image


class TestDamagedJournal:
    """Damage in a journal is an error naming the file and line; repair keeps what is before."""

    @pytest.mark.parametrize("name", sorted(BAD_LINES))
    def test_bad_line_is_store_corrupt_error(self, tmp_path: Path, name: str) -> None:
        """Each crafted line gives StoreCorruptError naming the journal and its line."""
        from nshash import StoreCorruptError

        image = journal_with(tmp_path, BAD_LINES[name], at=3)
        with pytest.raises(StoreCorruptError, match=r"j\.pkl\.journal' line 3") as info:
            MemoryStore(image)
        assert "nshash repair" in str(info.value)

    @pytest.mark.parametrize("name", sorted(BAD_PACKED_OPS))
    def test_bad_packed_op_is_store_corrupt_error(self, tmp_path: Path, name: str) -> None:
        """An op of packed values that no store writes, in a line whose checksum holds, gives
        StoreCorruptError with the reason."""
        from nshash import StoreCorruptError

        op, why = BAD_PACKED_OPS[name]
        line = b"[5,[" + op + b"]]"  # (the next sequence number: only the op is wrong)
        image = journal_with(tmp_path, line + b"\t%08x" % zlib.crc32(line), at=5)
        with pytest.raises(StoreCorruptError, match=r"j\.pkl\.journal' line 5") as info:
            MemoryStore(image)
        assert why in str(info.value)

    def test_damaged_last_whole_line_is_not_a_torn_line(self, tmp_path: Path) -> None:
        """A complete last line (it ends in a newline) that is damaged is damage, not a crash."""
        from nshash import StoreCorruptError

        image = journal_with(tmp_path, b'[99,[["zz"]]]', at=5)
        with pytest.raises(StoreCorruptError, match="line 5"):
            MemoryStore(image)

    def test_torn_last_line_is_dropped_with_a_warning(self, tmp_path: Path, caplog: Any) -> None:
        """A last line without its newline (a write cut short) is dropped and cut off."""
        image = journal_with(tmp_path, b"", at=5)
        journal = Path(str(image) + ".journal")
        journal.write_bytes(journal.read_bytes()[:-1] + b'[5,[["f",1')
        with caplog.at_level(logging.WARNING, logger="nshash"):
            store = MemoryStore(image)
        assert "torn line" in caplog.text
        assert store.stats().documents == 4
        store.close()

    def test_repair_keeps_every_line_before_the_damage(self, tmp_path: Path) -> None:
        """repair=True keeps lines 1-2, drops line 3 and after, sets the damaged journal aside,
        and the store then opens normally with ids going on from what it kept."""
        image = journal_with(tmp_path, b"[NaN,[]]", at=3)
        store = MemoryStore(image, repair=True)
        assert store.repaired is not None and "line 3" in store.repaired
        assert "2 line(s) after" in store.repaired
        assert [store.document(f"d{i}") is not None for i in range(4)] == [
            True,
            True,
            False,
            False,
        ]
        store.close()
        assert Path(str(image) + ".journal.damaged").exists()
        with NSHash.open(f"memory://{image}") as nsh:
            assert nsh.stats().documents == 2
            assert nsh.add(doc(3), doc_id="d3").similar_id == nsh.stats().last_id

    def test_repair_command(self, tmp_path: Path, capsys: Any) -> None:
        """``nshash repair --store URL`` repairs, says what it dropped and exits 0; a store
        that needs nothing says so."""
        from nshash.cli import main

        image = journal_with(tmp_path, b"[1e999,[]]", at=4)
        url = f"memory://{image}"
        assert main(["stats", "--store", url]) == 1
        assert "line 4" in capsys.readouterr().err
        assert main(["repair", "--store", url]) == 0
        out = capsys.readouterr().out
        assert "line 4" in out and "3 documents" in out
        assert main(["repair", "--store", url]) == 0
        assert "nothing to repair" in capsys.readouterr().out
        assert main(["stats", "--store", url]) == 0


def tampered_snapshot(tmp_path: Path, change: Any, settings: str = "") -> Path:
    """A real snapshot of two documents, passed through *change* (which edits the dict: its
    parts merged in, as a reader sees it) and written back whole. *settings*: the store URL's
    query the documents are added with (``?letter_units=1``, as versions before the setting
    fingerprinted)."""
    import pickle

    from nshash.stores import durable

    path = tmp_path / "snap.pkl"
    with NSHash.open(f"memory://{path}{settings}") as nsh:
        nsh.add(doc(0), doc_id="d0")
        nsh.add(doc(3), doc_id="d3")
        nsh.store.save()  # type: ignore[attr-defined]  # close() leaves a small journal
    data = durable.read_snapshot(str(path))[0]
    change(data)
    path.write_bytes(pickle.dumps(data))
    return path


def _set(key: str, value: Any) -> Any:
    return lambda data: data.__setitem__(key, value)


def _first(table: str, value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        if type(data[table]) is bytes:  # a packed anchor table: as the dict it also reads
            data[table] = dict(struct.iter_unpack("<QI", data[table]))
        key = next(iter(data[table]))
        data[table][key] = value

    return change


def _packed_first(table: str, gid: int) -> Any:
    """Give the first entry of a packed anchor table the id *gid*."""

    def change(data: dict[str, Any]) -> None:
        packed = data[table]
        if type(packed) is dict:  # the pure path's table, packed as the compiled one's
            packed = b"".join(struct.pack("<QI", h, g) for h, g in packed.items())
        data[table] = packed[:8] + struct.pack("<I", gid) + packed[12:]

    return change


BAD_SNAPSHOTS = {
    "nan-counter": _set("counter", float("nan")),
    "inf-counter": _set("counter", float("inf")),
    "negative-counter": _set("counter", -4),
    "float-seq": _set("seq", 1.5),
    "negative-group": _first("fp", -5),
    "float-group": _first("fp", 2.5),
    "group-past-counter": _first("fp", 10**6),
    "parent-cycle": _set("parent", {1: 2, 2: 1}),
    "missing-table": lambda data: data.pop("docs"),
    "doc-record-short": _first("docs", (1, False)),
    "sketch-not-set": _first("sketch", [1, 2]),
    "sketch-torn-bytes": _first("sketch", b"\x01\x02\x03"),
    "sketch-set-in-narrow-snapshot": _first("sketch", {1, 2}),
    "narrow-in-format-2": _set("format", 2),
    "format-3-not-narrow": _set("narrow", False),
    "member-without-record": _first("members", ["nobody"]),
    "table-not-dict": _set("fp", [1, 2]),
    "anchors-torn-bytes": _set("fp", b"\x01" * 13),
    "anchors-packed-past-counter": _packed_first("fp", 10**6),
    "anchors-packed-id-zero": _packed_first("exact", 0),
    "doc-record-torn": _first("docs", struct.pack("<QBII", 1, 0, 2, 0) + b"\x00" * 12),
    "doc-record-past-counter": _first("docs", struct.pack("<QBII", 10**6, 0, 0, 0)),
    "doc-record-bad-flags": _first("docs", struct.pack("<QBII", 1, 9, 0, 0)),
    "doc-record-merged-past-counter": _first("docs", struct.pack("<QBIIQ", 1, 0, 0, 1, 10**6)),
    "doc-record-title-not-utf8": _first("docs", struct.pack("<QBII", 1, 2, 0, 0) + b"\xff"),
    "votes-torn-bytes": _set("votes", struct.pack("<I", 3) + b"\x01" * 13),
    "votes-packed-past-counter": _set("votes", struct.pack("<IQ3I", 3, 5, 10**6, 0, 0)),
    "votes-packed-id-after-zero": _set("votes", struct.pack("<IQ3I", 3, 5, 0, 1, 0)),
    "votes-not-tuple": _set("votes", {5: [1]}),
    "votes-past-counter": _set("votes", {5: (1, 10**6)}),
    "deep": _set("common", [[[[[[[[[[1]]]]]]]]]]),
}


class TestDamagedSnapshot:
    """A snapshot is checked table by table on open: shapes, ids, counts."""

    @pytest.mark.parametrize("name", sorted(BAD_SNAPSHOTS))
    def test_bad_snapshot_is_store_corrupt_error(self, tmp_path: Path, name: str) -> None:
        """Each crafted snapshot gives StoreCorruptError naming the file, nothing else."""
        from nshash import StoreCorruptError

        path = tampered_snapshot(tmp_path, BAD_SNAPSHOTS[name])
        with pytest.raises(StoreCorruptError, match="snap.pkl"):
            MemoryStore(path)

    def test_snapshot_with_sketch_sets_opens(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A snapshot written before sketches were packed (a set of ints a group, 53-bit
        values: before narrow sketches too) opens, and its groups take their reposts as
        before, now packed."""
        import struct

        from nshash.methods.nshash import memory

        def as_sets(data: dict[str, Any]) -> None:
            assert data["format"] == 2 and not data["narrow"]
            for gid, packed in data["sketch"].items():
                data["sketch"][gid] = set(struct.unpack(f"<{len(packed) // 8}Q", packed))
            del data["narrow"]

        # Written as a version before narrow sketches (and letter_units) wrote it, then
        # opened by this one.
        monkeypatch.setattr(memory, "_narrowing", lambda t, letters: t.narrow)
        path = tampered_snapshot(tmp_path, as_sets, "?letter_units=1")
        monkeypatch.undo()
        with NSHash.open(f"memory://{path}") as nsh:
            assert all(type(v) is bytes for v in nsh.store._t.sketch.values())  # type: ignore[attr-defined]
            again = nsh.add(doc(1), doc_id="d1")  # a version of the story of d0
            assert again.duplicate and again.similar_id == nsh.document("d0").similar_id

    def test_snapshot_with_record_tuples_opens(self, tmp_path: Path) -> None:
        """A snapshot written before records were packed (five fields a document) opens, its
        records packed, with the same answers."""
        from nshash.methods.nshash.records import unpack_record

        def as_tuples(data: dict[str, Any]) -> None:
            for doc_id, rec in data["docs"].items():
                gid, duplicate, merged, title, anchors = unpack_record(rec)
                data["docs"][doc_id] = (gid, duplicate, merged, title, tuple(anchors))

        path = tampered_snapshot(tmp_path, as_tuples)
        with NSHash.open(f"memory://{path}") as nsh:
            assert all(type(v) is bytes for v in nsh.store._t.docs.values())  # type: ignore[attr-defined]
            first = nsh.document("d0")
            assert first is not None and first.fingerprints and not first.duplicate
            again = nsh.add(doc(1), doc_id="d1")
            assert again.duplicate and again.similar_id == first.similar_id

    def test_deeply_nested_pickle(self, tmp_path: Path) -> None:
        """A pickle nested past the recursion limit is StoreCorruptError, not RecursionError."""
        from nshash import StoreCorruptError

        path = tmp_path / "deep.pkl"
        path.write_bytes(b"\x80\x04" + b"]" * 200_000 + b".")
        with pytest.raises(StoreCorruptError):
            MemoryStore(path)


class TestLevelDBReads:
    """LevelDB values are checked when read."""

    def test_bad_document_record(self, tmp_path: Path) -> None:
        """A packed record that is torn, has unknown flags, names group 0, merges id 0 or has
        a title that is not UTF-8 is StoreCorruptError."""
        pytest.importorskip("plyvel")
        import struct

        from nshash import StoreCorruptError
        from nshash.methods.nshash.records import pack_record

        with NSHash.open(f"leveldb://{tmp_path}/db") as nsh:
            nsh.add(doc(0), doc_id="d0", title="t")
            db: Any = nsh.store._kv.db  # type: ignore[attr-defined]
            good = db.get(b"dd0")
            member = nsh.document("d0")
            assert good == pack_record(
                1, False, (), "t", member.fingerprints, member.score, member.verdict
            )
            for bad in (
                good[:10],  # torn in the header
                pack_record(1, False, (), None, (5, 6))[:-3],  # torn in the anchors
                good[:8] + b"\x0f" + good[9:],  # flags this store never writes
                pack_record(0, False, (), None, (5,)),  # group 0
                pack_record(1, False, (0,), None, (5,)),  # merged from id 0
                pack_record(1, False, (), None, (5,)) + b"x",  # a tail with no title flag
                struct.pack("<QBII", 1, 2, 0, 0) + b"\xff\xfe",  # a title not UTF-8
            ):
                db.put(b"dd0", bad)
                with pytest.raises(StoreCorruptError, match="d0"):
                    nsh.document("d0")

    def test_a_writer_holds_the_merges_in_memory(self, tmp_path: Path) -> None:
        """A writer keeps the ``p`` table (merged id -> root) in memory, as it stands after each
        write and after a reopen, and reads none of it from LevelDB; a reader reads it."""
        pytest.importorskip("plyvel")
        from tests.test_store_contract import FRAGMENT_A, FRAGMENT_B, WHOLE

        url = f"leveldb://{tmp_path}/db"
        with NSHash.open(url) as nsh:
            a = nsh.add(FRAGMENT_A, doc_id="a").similar_id
            b = nsh.add(FRAGMENT_B, doc_id="b").similar_id
            store: Any = nsh.store
            assert store._parents == {}
            reads: list[bytes] = []
            db = store._kv.db
            real = db.get
            store._kv.db = type("Counting", (), {
                "get": lambda _self, key, *args: reads.append(key) or real(key, *args),
                "__getattr__": lambda _self, name: getattr(db, name),
            })()  # fmt: skip
            bridge = nsh.add(WHOLE, doc_id="bridge")
            store._kv.db = db
            assert bridge.merged_from == (b,) and store._parents == {b: a}
            assert not [k for k in reads if k[:1] == b"p"] and reads  # read, but no p key
            assert nsh.resolve(b) == a
        with NSHash.open(url) as nsh:
            assert nsh.store._parents == {b: a}  # type: ignore[attr-defined]
            assert nsh.resolve(b) == a and nsh.add(FRAGMENT_B, doc_id="b3").similar_id == a
        with NSHash.open(url, readonly=True) as nsh:
            assert nsh.store._parents is None and nsh.resolve(b) == a  # type: ignore[attr-defined]

    def test_a_format_2_store_keeps_json_records(self, tmp_path: Path) -> None:
        """A store made before packed records (format 2) opens, reads and writes its records as
        JSON, as older versions read them; one of a format this version does not know is
        refused with the formats it reads."""
        plyvel = pytest.importorskip("plyvel")
        from nshash import StoreCorruptError, open_store

        path = tmp_path / "db"
        db = plyvel.DB(str(path), create_if_missing=True)
        db.put(b"\x00format", (2).to_bytes(8, "big"))
        db.close()
        with NSHash.open(f"leveldb://{path}") as nsh:
            nsh.add(doc(0), doc_id="d0", title="first")
            nsh.add(doc(0), doc_id="d1")
            records = [nsh.document("d0"), nsh.document("d1")]
            raw: Any = nsh.store._kv.db  # type: ignore[attr-defined]
            assert raw.get(b"dd0").startswith(b"[1,false,[],") and b'"first"' in raw.get(b"dd0")
            # Records put behind the writer's back: its filter of the keys it holds knows only
            # its own writes, so it is set aside to read them.
            nsh.store._held = None  # type: ignore[attr-defined]
            for bad in (b"[-1,false,[],null,[]]", b"[1.5,false,[],null,[]]", b"[NaN,0,[],0,[]]"):
                raw.put(b"dd9", bad)
                with pytest.raises(StoreCorruptError, match="d9"):
                    nsh.document("d9")
        with NSHash.open(f"leveldb://{path}", readonly=True) as nsh:
            assert [nsh.document("d0"), nsh.document("d1")] == records
            assert records[1] is not None and records[1].duplicate and records[1].similar_id == 1
        db = plyvel.DB(str(path))
        db.put(b"\x00format", (5).to_bytes(8, "big"))
        db.close()
        known = "format 5; this version reads formats 2, 3 and 4"
        with pytest.raises(StoreCorruptError, match=known):
            open_store(f"leveldb://{path}")

    @pytest.mark.parametrize("old", [2, 3])
    def test_older_formats_keep_wide_sketches_and_new_stores_narrow_ones(
        self, tmp_path: Path, old: int
    ) -> None:
        """A store made before narrow sketches (format 2 or 3) keeps each group's sketch as
        53-bit values, 8 bytes each, and compares documents at that width; a new store
        (format 4) keeps 31-bit values in 4 bytes. Both take a story's repost."""
        plyvel = pytest.importorskip("plyvel")
        from nshash.text.fingerprint import NARROW_BITS, SKETCH_BITS

        sketches = {}
        for fmt in (old, 4):
            path = tmp_path / f"db{fmt}"
            if fmt != 4:
                db = plyvel.DB(str(path), create_if_missing=True)
                db.put(b"\x00format", fmt.to_bytes(8, "big"))
                db.close()
            with NSHash.open(f"leveldb://{path}") as nsh:
                first = nsh.add(doc(0), doc_id="d0")
                again = nsh.add(doc(1), doc_id="d1")  # a version of the same story
                assert again.similar_id == first.similar_id
                assert nsh.add(doc(3), doc_id="d3").similar_id != first.similar_id
                raw: Any = nsh.store._kv.db  # type: ignore[attr-defined]
                assert raw.get(b"\x00format") == fmt.to_bytes(8, "big")
                sketches[fmt] = raw.get(b"s" + first.similar_id.to_bytes(8, "big"))
        for fmt, size, bits in ((old, 8, SKETCH_BITS), (4, 4, NARROW_BITS)):
            stored = sketches[fmt]
            assert (len(stored) - 8) % size == 0
            ends = range(8, len(stored), size)
            values = [int.from_bytes(stored[i : i + size], "big") for i in ends]
            assert values == sorted(values) and max(values) < 1 << bits
            assert max(values) >= 1 << (bits - 4)  # the full width is used
        assert len(sketches[4]) - 8 == (len(sketches[old]) - 8) // 2

    def test_counter_behind_a_group_is_refused_then_repaired(self, tmp_path: Path) -> None:
        """An id counter behind the groups would hand ids out twice: refused on open, and
        repair counts the tables again."""
        plyvel = pytest.importorskip("plyvel")
        from nshash import StoreCorruptError, open_store

        path = tmp_path / "db"
        with NSHash.open(f"leveldb://{path}") as nsh:
            for i in (0, 3, 6):
                nsh.add(doc(i))
        db = plyvel.DB(str(path))
        db.put(b"\x00counter", (1).to_bytes(8, "big"))
        db.close()
        with pytest.raises(StoreCorruptError, match="id counter"):
            open_store(f"leveldb://{path}")
        with open_store(f"leveldb://{path}", repair=True) as store:
            assert store.stats().last_id == 3
            assert "counter 1 -> 3" in (store.repaired or "")  # type: ignore[attr-defined]
        with NSHash.open(f"leveldb://{path}") as nsh:
            assert nsh.add(doc(9)).similar_id == 4
