"""The LevelDB and SQLite stores' filter of the keys they hold (kvstore._KeyFilter).

A writer answers most reads of its anchor, exact-text, vote and document tables (a new
document's anchors are new, most hashes have no votes) from a Bloom filter instead of the
store. The filter must never say "absent" of a key the store holds: these tests reopen
stores part-way through the scan that fills it, and count the reads it saves.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nshash import NSHash
from nshash.methods.nshash import kvstore, tables
from tests.test_store_contract import story_versions

pytestmark = pytest.mark.skipif(
    tables.key_filter() is None, reason="the compiled assignment is not built"
)


@pytest.fixture(params=["leveldb", "sqlite"])
def kv_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "leveldb":
        pytest.importorskip("plyvel")
        return f"leveldb://{tmp_path}/db"
    return f"sqlite://{tmp_path}/news.db"


def test_the_key_filter_never_forgets_a_key() -> None:
    """Every key added is "in" however far the filter has grown; few keys never added are;
    a key that is not an int in [0, 2**64) is in no filter and cannot be added."""
    rng = random.Random(5)
    keys = tables.key_filter()
    added = [rng.getrandbits(64) for _ in range(300_000)] + [0, 2**64 - 1]
    for k in added:
        keys.add(k)
    assert len(keys) == len(added) and all(k in keys for k in added)
    others = [rng.getrandbits(64) for _ in range(100_000)]
    assert sum(k in keys for k in others) < 0.03 * len(others)
    assert sys.getsizeof(keys) < 6 * len(added)
    for bad in (-1, 2**64, "1", 1.0, None):
        assert bad not in keys
        with pytest.raises((ValueError, TypeError)):
            keys.add(bad)


def test_keys_are_found_while_the_filter_fills_and_after(
    kv_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store reopened with keys in it fills its filter a few keys a write: during the scan
    and after it, every repost finds its original (anchors), an exact repeat is a duplicate
    (exact texts), a doc id sent again gets its first answer (records); and the anchor count
    stays exact (a repair finds nothing to fix)."""
    monkeypatch.setattr(kvstore._KeyFilter, "STEP", 24)  # ~720 keys: ~30 writes
    stories = [story_versions(seed) for seed in range(40)]
    with NSHash.open(kv_url) as nsh:
        first = [nsh.add(v[0], doc_id=f"o{i}").similar_id for i, v in enumerate(stories)]
    with NSHash.open(kv_url) as nsh:
        filt = nsh.store._held  # type: ignore[attr-defined]
        assert filt is not None and filt.ready() is None  # nothing scanned on open
        found, during = [], 0
        for i, ((original, repost_a, _), sid) in enumerate(zip(stories, first, strict=True)):
            during += filt.ready() is None
            found.append(nsh.add(repost_a).similar_id == sid)
            again = nsh.add(original)
            found.append(again.similar_id == sid and again.duplicate)
            retry = nsh.add("another text altogether, sent with the same id", doc_id=f"o{i}")
            found.append(retry.similar_id == sid)
        assert filt.ready() is not None and 0 < during < len(stories)  # both phases seen
        assert all(found)
        counted = nsh.stats().fingerprints
    with NSHash.open(f"{kv_url}{'&' if '?' in kv_url else '?'}repair=1") as fixed:
        assert fixed.store.repaired is None  # type: ignore[attr-defined]
        assert fixed.stats().fingerprints == counted


class _Counting:
    """The store's backend, counting its reads of anchor keys (table ``f``), found or not."""

    def __init__(self, kv: Any) -> None:
        self._kv = kv
        self.reads: Counter[bool] = Counter()

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._kv.get(key)
        if key[:1] == kvstore._FP:
            self.reads[value is not None] += 1
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


@pytest.fixture
def counting(kv_url: str) -> Iterator[tuple[NSHash, _Counting]]:
    with NSHash.open(kv_url) as nsh:
        store = nsh.store
        wrapped = _Counting(store._kv)  # type: ignore[attr-defined]
        store._kv = wrapped  # type: ignore[attr-defined]
        yield nsh, wrapped


def test_new_anchors_are_not_read_from_the_store(counting: tuple[NSHash, _Counting]) -> None:
    """With the filter full, the anchors a new story brings are known new without a read: the
    store is asked about anchors that it holds (and about few others), where without the
    filter it was asked about every one."""
    nsh, kv = counting
    for seed in range(60):
        original, repost, _ = story_versions(1000 + seed)
        nsh.add(original)
        nsh.add(repost)
    assert kv.reads[True] > 0  # the reposts' anchors, found
    assert kv.reads[False] <= 2 + kv.reads[True] // 10  # misses: the filter's few mistakes
    store: Any = nsh.store
    store._held = None  # as on the pure path: every key read
    kv.reads.clear()
    for seed in range(20):
        nsh.add(story_versions(2000 + seed)[0])
    assert kv.reads[False] >= 20


def test_a_windowed_store_keeps_about_one_window_in_its_filter(
    kv_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys forgotten with their groups leave the filter when the store reclaims their space
    (it is filled again from what is left): a stream many windows long keeps the filter about
    one window's size, and every story still inside the window is found."""
    monkeypatch.setattr(kvstore, "RECLAIM_AFTER", 20)
    window, per_window = 1000, 30
    now = [1_000_000.0]
    url = f"{kv_url}{'&' if '?' in kv_url else '?'}retention={window}s"
    with NSHash.open(url, clock=lambda: now[0]) as nsh:
        store: Any = nsh.store
        sizes, rebuilt = [], 0
        for i in range(8 * per_window):
            now[0] += window / per_window
            held = store._held
            original, repost, _ = story_versions(3000 + i)
            sid = nsh.add(original).similar_id
            assert nsh.add(repost).similar_id == sid
            rebuilt += store._held is not held
            sizes.append(len(store._held.keys))
        assert rebuilt >= 3
        assert max(sizes[-2 * per_window :]) < 3 * max(sizes[per_window : 2 * per_window])
        live = sum(1 for key, _ in store._kv.items() if key[:1] in kvstore._FILTERED)
        assert len(store._held.keys) < 3 * live  # what was written since the last reclaim
