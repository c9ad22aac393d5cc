"""Edges of the store contract that every backend must answer alike: counts under retention,
ids that are not strings, and counts past a 64-bit integer.

Each test runs once per backend (``store_url`` of ``conftest.py``: memory, memory-file,
LevelDB, SQLite and a real ``redis-server``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nshash import ConfigError, NSHash
from tests.test_disk_faults import small_disk  # noqa: F401 - a fixture
from tests.test_retention import WINDOW, Clock, _url, repost, story


class TestRetentionCounts:
    """stats().documents counts the documents the store still holds, not forgotten ones."""

    def test_forgotten_documents_are_not_counted(self, store_url: str) -> None:
        """Three documents of a story forgotten past the window leave stats().documents at
        the documents of the groups that remain, on every backend, and after a reopen."""
        clock = Clock()
        url = _url(store_url, f"{WINDOW}s")
        with NSHash.open(url, clock=clock) as nsh:
            nsh.add(story(1), doc_id="a1")
            nsh.add(repost(1, "Courier"), doc_id="a2")
            nsh.add(repost(1, "Herald"))  # no doc id: counted all the same
            clock.now += WINDOW + 1
            kept = nsh.add(story(2), doc_id="b1")
            nsh.add(repost(2, "Gazette"), doc_id="b2")
            stats = nsh.stats()
            assert stats.extra["forgotten"] == 1
            assert stats.documents == 2 == sum(g.size for g in nsh.groups(min_size=1))
            assert nsh.group(kept.similar_id) is not None
        if store_url != "memory://":
            with NSHash.open(url, clock=clock) as nsh:
                assert nsh.stats().documents == 2


class TestArguments:
    """Store calls given values past their types answer alike: typed errors or the answer."""

    def test_doc_meta_of_a_non_str_id_is_a_config_error(self, store_url: str) -> None:
        """store.doc_meta([5]) raises ConfigError on every backend (no AttributeError)."""
        with NSHash.open(store_url) as nsh:
            nsh.add(story(1), doc_id="a1")
            for bad in (5, None, b"a1", ""):
                with pytest.raises(ConfigError, match="doc_id must be a non-empty str"):
                    nsh.store.doc_meta([bad])  # type: ignore[list-item]
            assert nsh.store.doc_meta(["a1", "nope"]) == [None, None]

    def test_groups_with_a_limit_past_64_bits(self, store_url: str) -> None:
        """groups(limit=2**63) answers as a limit past the store's size does: every group."""
        with NSHash.open(store_url) as nsh:
            nsh.add(story(1), doc_id="a1")
            nsh.add(repost(1, "Courier"), doc_id="a2")
            nsh.add(story(2), doc_id="b1")
            every = nsh.groups(min_size=1, limit=1000)
            assert len(every) == 2
            assert nsh.groups(min_size=1, limit=2**63) == every
            assert nsh.store.groups(1, 2**64) == every


class TestLevelDBReadOnlyFileSystem:
    def test_error_names_the_read_only_file_system(self, small_disk: Path) -> None:  # noqa: F811
        """A LevelDB store on a file system remounted read-only says so, and how to read it,
        not only LevelDB's 'LOCK: ...' line."""
        pytest.importorskip("plyvel")
        import subprocess

        from nshash import StoreError

        url = f"leveldb://{small_disk}/news"
        with NSHash.open(url) as nsh:
            nsh.add("The council approved the repair of the Old Mill Bridge on Monday.")
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
        with pytest.raises(StoreError, match="read-only") as info:
            NSHash.open(url)
        assert "?readonly=true" in str(info.value)
        with NSHash.open(url, readonly=True) as nsh:  # the hint works
            assert nsh.stats().documents == 1
