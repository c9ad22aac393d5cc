"""Silent damage and a second writer, with real processes: a changed byte in a journal is
named, and a store whose ``.lock`` file was deleted still refuses a second writer."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nshash import NSHash
from nshash.errors import StoreCorruptError, StoreLockedError

REPO = Path(__file__).resolve().parents[1]

STORIES = [
    ("Wind turbines were installed on the northern ridge. Power flows from May.", "Ridge turbines"),
    ("The harbour bridge reopened after two years of repairs to its steel deck.", "Bridge reopens"),
    ("A new library opened downtown with forty thousand books and a rooftop garden.", "Library"),
    ("Farmers report the best apple harvest in a decade after a mild, wet spring.", "Apples"),
    ("The city council approved a budget that doubles spending on bus lanes.", "Bus lanes"),
]


def child(code: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -c CODE ARGS`` with this checkout first on the path."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def write_and_die(url: str) -> None:
    """Add the five stories in a child process (fsync always), then SIGKILL it."""
    proc = child(
        """
        import sys
        from nshash import NSHash
        from tests.test_store_integrity import STORIES
        nsh = NSHash.open(sys.argv[1])
        for i, (text, title) in enumerate(STORIES, 1):
            nsh.add(text, doc_id=f"d{i}", title=title)
        print("done", flush=True)
        sys.stdin.read()
        """,
        url,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "done\n", proc.stderr.read() if proc.stderr else ""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def repair(url: str) -> subprocess.CompletedProcess[str]:
    """``nshash repair --store URL`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "nshash", "repair", "--store", url],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip


class TestJournalChecksum:
    """Each journal line carries a CRC32: a changed byte is named, older journals still open."""

    def test_changed_byte_is_named_and_repair_keeps_what_precedes(self, tmp_path: Path) -> None:
        """A letter changed in a title on line 3 is a StoreCorruptError naming line 3, and
        ``nshash repair`` keeps lines 1 and 2."""
        path = tmp_path / "s.pkl"
        url = f"memory://{path}?fsync=always"
        write_and_die(url)
        journal = tmp_path / "s.pkl.journal"
        lines = journal.read_bytes().split(b"\n")
        assert b'"Library"' in lines[2]
        lines[2] = lines[2].replace(b'"Library"', b'"Librery"')
        journal.write_bytes(b"\n".join(lines))
        with pytest.raises(StoreCorruptError, match=r"line 3 is damaged \(it fails its checksum"):
            NSHash.open(url)
        done = repair(url)
        assert done.returncode == 0, done.stderr
        assert "line 3 is damaged" in done.stdout and "kept 2 documents" in done.stdout
        with NSHash.open(url) as nsh:
            assert nsh.document("d2") is not None and nsh.document("d3") is None
        assert (tmp_path / "s.pkl.journal.damaged").exists()

    def test_journal_without_checksums_still_opens(self, tmp_path: Path) -> None:
        """A journal written before lines had checksums opens with every document; lines
        appended to it are checked, and an unchecked line after a checked one is damage."""
        path = tmp_path / "s.pkl"
        url = f"memory://{path}?fsync=always"
        write_and_die(url)
        journal = tmp_path / "s.pkl.journal"
        lines = journal.read_bytes().split(b"\n")
        old = [re.sub(rb"\t[0-9a-f]{8}$", b"", line) for line in lines]
        assert all(not line.endswith(b"]") for line in lines[:-1])  # each had a checksum
        journal.write_bytes(b"\n".join(old[:3]) + b"\n")
        with NSHash.open(url) as nsh:
            assert [nsh.document(f"d{i}") is not None for i in (1, 2, 3)] == [True] * 3
            nsh.add(STORIES[3][0], doc_id="d4", title=STORIES[3][1])
        appended = journal.read_bytes().split(b"\n")[3]
        assert re.search(rb"\t[0-9a-f]{8}$", appended)
        with NSHash.open(url) as nsh:
            assert nsh.document("d4") is not None
        journal.write_bytes(journal.read_bytes() + old[4] + b"\n")
        with pytest.raises(StoreCorruptError, match=r"line 5 is damaged \(it has no checksum"):
            NSHash.open(url)


class TestLostWrites:
    """Damage that used to open silently, without the documents it held."""

    def test_a_missing_journal_line_is_named(self, tmp_path: Path) -> None:
        """A journal line deleted from the middle is a gap in the sequence numbers: a
        StoreCorruptError naming the line after it, and repair keeps the lines before."""
        path = tmp_path / "s.pkl"
        url = f"memory://{path}?fsync=always"
        write_and_die(url)
        journal = tmp_path / "s.pkl.journal"
        lines = journal.read_bytes().split(b"\n")
        del lines[2]  # the third write's line
        journal.write_bytes(b"\n".join(lines))
        with pytest.raises(StoreCorruptError, match=r"line 3 is damaged .*1 write\(s\)"):
            NSHash.open(url)
        done = repair(url)
        assert done.returncode == 0, done.stderr
        with NSHash.open(url) as nsh:
            assert nsh.document("d2") is not None and nsh.document("d4") is None

    def test_a_changed_byte_in_a_leveldb_log_is_named(self, tmp_path: Path) -> None:
        """LevelDB skips a log record that fails its checksum, and the documents in it, unless
        asked to check: the store asks, so the open is a StoreCorruptError, not a store
        missing documents that hands their ids out again."""
        pytest.importorskip("plyvel")
        url = f"leveldb://{tmp_path / 's.ldb'}"
        with NSHash.open(url) as nsh:
            for i in range(60):
                nsh.add(f"Story {i}: the river, the bridge and the town of {i * 7919}.", f"d{i}")
        log = max((tmp_path / "s.ldb").glob("*.log"), key=lambda p: p.stat().st_size)
        data = bytearray(log.read_bytes())
        data[len(data) * 9 // 10] ^= 0xFF
        log.write_bytes(bytes(data))
        with pytest.raises(StoreCorruptError, match="is damaged"):
            NSHash.open(url)
        done = repair(url)
        assert done.returncode == 0, done.stderr
        assert "repaired: LevelDB rebuilt its tables" in done.stdout
        with NSHash.open(url) as nsh:
            before = nsh.stats()
            assert 0 < before.documents <= 60
            fresh = nsh.add("A story no other page tells: the lighthouse keeper retires.", "new")
            assert fresh.similar_id == before.last_id + 1  # never an id handed out before


class TestJournalSwapCutShort:
    """What a crash in the middle of moving the journal aside leaves opens whole."""

    def test_old_journal_linked_to_the_journal(self, tmp_path: Path) -> None:
        """A crash after the journal was linked as ``.journal.old`` (one file, two names)
        and a ``.journal.new`` made: the open reads the lines once, read-only and writing,
        and drops the two leftovers."""
        path = tmp_path / "s.pkl"
        url = f"memory://{path}?fsync=always"
        write_and_die(url)
        journal = tmp_path / "s.pkl.journal"
        os.link(journal, tmp_path / "s.pkl.journal.old")
        (tmp_path / "s.pkl.journal.new").write_bytes(b"")
        with NSHash.open(url, readonly=True) as nsh:
            assert nsh.stats().documents == len(STORIES)
        with NSHash.open(url) as nsh:
            assert nsh.stats().documents == len(STORIES)
            assert nsh.document("d5") is not None
        assert not (tmp_path / "s.pkl.journal.old").exists()
        assert not (tmp_path / "s.pkl.journal.new").exists()


#: Opens a store for writing, says so, and holds it until its stdin closes; with a count,
#: adds that many documents first, one every few milliseconds, compacting in the background
#: at every write (the journal is swapped each time), saying "added N" after each.
_WRITER = """
import sys
from nshash import NSHash
from nshash.stores import durable
durable.JOURNAL_MIN_BYTES = 0
nsh = NSHash.open(sys.argv[1])
print("open", flush=True)
for i in range(int(sys.argv[2])):
    nsh.add(f"Story number {i} about the river, the bridge and the town {i * 7919}.",
            doc_id=f"w{i}")
    print(f"added {i}", flush=True)
print("done", flush=True)
sys.stdin.read()
nsh.close()
"""


def store_url(scheme: str, tmp_path: Path) -> str:
    name = "s.db" if scheme == "sqlite" else "s.pkl"
    return f"{scheme}://{tmp_path / name}"


@pytest.mark.parametrize("scheme", ["memory", "sqlite"])
class TestStolenLock:
    """A second writer cannot open a store whose ``.lock`` file was deleted meanwhile."""

    def test_deleted_lock_file(self, tmp_path: Path, scheme: str) -> None:
        """With the first writer's ``.lock`` deleted, a second process still gets
        StoreLockedError, and the store opens again once the first is gone."""
        url = store_url(scheme, tmp_path)
        first = child(_WRITER, url, "3")
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline() == "open\n", first.stderr and first.stderr.read()
        for _ in range(4):
            first.stdout.readline()
        lock = Path(url.split("://", 1)[1] + ".lock")
        lock.unlink()
        second = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys\nfrom nshash import NSHash\n"
                "try:\n    NSHash.open(sys.argv[1])\n"
                "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
                "else:\n    print('opened')\n",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
        assert second.stdout.startswith("StoreLockedError"), second.stdout + second.stderr
        first.stdin.close()
        assert first.wait(timeout=60) == 0
        with NSHash.open(url) as nsh:
            assert nsh.document("w2") is not None

    @pytest.mark.slow
    def test_deleted_lock_file_while_the_journal_is_swapped(
        self, tmp_path: Path, scheme: str
    ) -> None:
        """While the first writer compacts at every write (a memory file swaps its journal
        each time), every open attempted after its ``.lock`` was deleted is refused, and
        every document it acknowledged is there once, after it ends."""
        url = store_url(scheme, tmp_path)
        count = 150
        first = child(_WRITER, url, str(count))
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline() == "open\n", first.stderr and first.stderr.read()
        lock = Path(url.split("://", 1)[1] + ".lock")
        refused = 0
        while True:
            line = first.stdout.readline()
            if line == "done\n" or not line:
                break
            try:
                lock.unlink()
            except FileNotFoundError:
                pass
            with pytest.raises(StoreLockedError):
                NSHash.open(url)
            refused += 1
        assert line == "done\n", first.stderr and first.stderr.read()
        first.stdin.close()
        assert first.wait(timeout=120) == 0
        assert refused >= count // 2
        with NSHash.open(url) as nsh:
            found = [nsh.document(f"w{i}") for i in range(count)]
        assert all(doc is not None for doc in found)
