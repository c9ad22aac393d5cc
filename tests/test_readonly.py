"""Read-only opens: they change no byte of a store, need it to exist, and watch a live writer."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nshash import NSHash, StoreNotFoundError, StoreReadOnlyError
from nshash.cli import main

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"


def _needs(scheme: str) -> None:
    if scheme == "leveldb":
        pytest.importorskip("plyvel")


def store_url(scheme: str, root: Path) -> str:
    """The URL of a store under *root*: a snapshot file, a LevelDB directory, a SQLite file."""
    path = {"memory": "news.pkl", "leveldb": "news.ldb", "sqlite": "news.db"}[scheme]
    return f"{scheme}://{root}/{path}"


def fingerprint_tree(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under *root*: its SHA-256 and mode, so any change, creation or deletion shows."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                path.stat().st_mode,
            )
    return out


def fill(url: str) -> None:
    """Put the example articles in the store at *url*, as ``nshash dedup`` does."""
    assert main(["dedup", str(ARTICLES), "--store", url, "-q", "-o", os.devnull]) == 0


@pytest.mark.parametrize("scheme", ["memory", "leveldb", "sqlite"])
class TestNothingChanges:
    """A read-only open leaves every file of the store byte-identical."""

    def test_library_and_commands(
        self, scheme: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """NSHash.open(readonly=True), groups, stats and query change no file (hashed)."""
        _needs(scheme)
        url = store_url(scheme, tmp_path)
        fill(url)
        before = fingerprint_tree(tmp_path)
        with NSHash.open(url, readonly=True) as nsh:
            assert nsh.stats().documents == 30
            assert nsh.groups(min_size=2)[0].size == 5
            assert nsh.query(json.loads(ARTICLES.read_text("utf-8").splitlines()[0])["content"])
            with pytest.raises(StoreReadOnlyError):
                nsh.add("A new story about a lighthouse keeper who retired early.")
        for args in (["groups"], ["stats", "--json"], ["query", str(ARTICLES)]):
            assert main([*args, "--store", url]) == 0
        capsys.readouterr()
        assert fingerprint_tree(tmp_path) == before

    def test_missing_store(self, scheme: str, tmp_path: Path) -> None:
        """A read-only open of a store that does not exist raises and creates nothing."""
        _needs(scheme)
        with pytest.raises(StoreNotFoundError, match="reading never creates one"):
            NSHash.open(store_url(scheme, tmp_path / "nowhere"), readonly=True)
        assert list(tmp_path.iterdir()) == []


def test_plain_open_and_close_rewrite_nothing(tmp_path: Path) -> None:
    """A writer's open and close of a memory store with no write leaves its files as they were."""
    url = store_url("memory", tmp_path)
    fill(url)
    with NSHash.open(url) as nsh:
        nsh.store.save()  # type: ignore[attr-defined]
    before = fingerprint_tree(tmp_path)
    NSHash.open(url).close()
    assert fingerprint_tree(tmp_path) == before


def test_memory_store_compacts_past_its_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot is rewritten once the journal outgrows its share, and nothing is lost."""
    from nshash.stores import durable

    monkeypatch.setattr(durable, "JOURNAL_MIN_BYTES", 2000)
    monkeypatch.setattr(durable, "CLOSE_MIN_BYTES", 2000)
    url = store_url("memory", tmp_path)
    fill(url)
    assert (tmp_path / "news.pkl").stat().st_size > 0
    journal = (tmp_path / "news.pkl.journal").stat().st_size
    assert journal <= max(2000, (tmp_path / "news.pkl").stat().st_size) + 20_000
    with NSHash.open(url, readonly=True) as nsh:
        assert nsh.stats().documents == 30


# The writer: adds the repost set's documents one by one, printing each doc id once add()
# has returned (acknowledged), compacting the memory journal often to race the readers.
WRITER = textwrap.dedent(
    """
    import json, sys
    from nshash import NSHash
    from nshash.stores import durable
    durable.JOURNAL_MIN_BYTES = 20_000
    url, path = sys.argv[1], sys.argv[2]
    docs = [json.loads(line) for line in open(path, encoding="utf-8")]
    with NSHash.open(url, fsync="no") as nsh:
        for round in range(1000):
            for doc in docs:
                r = nsh.add(doc["content"] + f" 第{round}轮。", doc_id=f"{doc['id']}-{round}")
                print(f"{r.doc_id} {r.similar_id}", flush=True)
            if sys.stdin.readline() != "more\\n":
                break
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["memory", "leveldb", "sqlite"])
def test_reader_sees_live_writer(scheme: str, tmp_path: Path) -> None:
    """While a writer process holds the store, a read-only open sees every acknowledged add."""
    _needs(scheme)
    url = store_url(scheme, tmp_path)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(ARTICLES)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    acked: dict[str, int] = {}
    try:
        for round in range(6):
            for _ in range(30):
                doc_id, sid = writer.stdout.readline().split()
                acked[doc_id] = int(sid)
            # The writer goes on with the next round while this one reads.
            writer.stdin.write("more\n")
            writer.stdin.flush()
            seen = len(acked)
            with NSHash.open(url, readonly=True) as nsh:
                assert nsh.stats().documents >= seen
                for doc_id, sid in acked.items():
                    record = nsh.document(doc_id)
                    assert record is not None, (round, doc_id)
                    assert nsh.resolve(sid) == record.similar_id
        writer.stdin.write("stop\n")
        writer.stdin.flush()
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
        writer.wait()
