"""SimhashDedup: merges, the bucket cap and settings on every store; four processes on Redis.

The behaviour every method shares is in ``test_method_contract``; the fingerprints and index
keys in ``test_simprint``. Here fingerprints are chosen by hand through ``add_prepared``, so
the distances are exact.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from nshash import AddResult, ConfigError, SimhashDedup
from nshash.methods.simhash import SimhashDoc
from nshash.text.simprint import index_keys

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "en_reposts_dev.jsonl.gz"


def doc(fp: int, k: int = 3) -> SimhashDoc:
    return SimhashDoc(fp, tuple(index_keys(fp, k)))


class TestGroups:
    def test_within_k_joins_and_beyond_k_does_not(self, store_url: str) -> None:
        with SimhashDedup.open(store_url) as sd:
            base = 0x0F0F_F0F0_1234_8765
            assert sd.add_prepared(doc(base), "a").similar_id == 1
            near = sd.add_prepared(doc(base ^ 0b10000000_00000001_00000000_1), "b")
            assert (near.similar_id, near.duplicate) == (1, True)
            far = sd.add_prepared(doc(base ^ 0xF000_0000_0000_0001), "c")  # 5 bits away
            assert (far.similar_id, far.duplicate) == (2, False)

    def test_a_bridge_merges_two_groups_into_the_smaller_id(self, store_url: str) -> None:
        with SimhashDedup.open(store_url) as sd:
            a = sd.add_prepared(doc(0), "a")
            b = sd.add_prepared(doc(0b111111 << 20), "b")  # 6 bits from a: its own group
            assert (a.similar_id, b.similar_id) == (1, 2)
            bridge = sd.add_prepared(doc(0b111 << 20), "m")  # 3 bits from each
            assert (bridge.similar_id, bridge.merged_from, bridge.duplicate) == (1, (2,), True)
            assert sd.resolve(2) == 1
            record = sd.document("b")
            assert record is not None and record.similar_id == 1  # the canonical id now
            replay = sd.add_prepared(doc(0b111111 << 20), "b")
            assert replay.replayed and replay.similar_id == 2 and replay.canonical_id == 1
            assert sd.stats().groups == 1 and sd.stats().last_id == 2
            later = sd.add_prepared(doc(0b111110 << 20), "z")  # near b's fingerprint only
            assert later.similar_id == 1

    def test_the_same_fingerprint_is_filed_once(self, store_url: str) -> None:
        with SimhashDedup.open(store_url, max_bucket=2) as sd:
            for n in range(5):
                assert sd.add_prepared(doc(42), f"d{n}").similar_id == 1
            # The buckets hold one entry, so a near fingerprint still finds the group.
            assert sd.add_prepared(doc(42 ^ 0b101), "x").similar_id == 1
            assert sd.stats().documents == 6

    def test_other_settings_are_refused(self, store_url: str) -> None:
        if store_url == "memory://":
            pytest.skip("memory:// lives in one process only")
        with SimhashDedup.open(store_url) as sd:
            sd.add("The council approved the new park plan on Thursday evening.")
        with pytest.raises(ConfigError, match="were built with"):
            SimhashDedup.open(store_url, k=4)

    @pytest.mark.parametrize(
        "options",
        [{"k": 0}, {"k": 9}, {"k": True}, {"top": -1}, {"blocks": 3}, {"max_bucket": 0}],
    )
    def test_bad_options(self, options: dict[str, Any]) -> None:
        with pytest.raises(ConfigError):
            SimhashDedup.open("memory://", **options)


def _writer(url: str, rows: list[dict[str, str]], out: str, barrier: Any) -> None:
    answers = []
    with SimhashDedup.open(url) as sd:
        barrier.wait(timeout=60)
        for r in rows:
            got = sd.add(r["text"], r["id"])
            answers.append([r["id"], got.similar_id, got.duplicate, list(got.merged_from)])
    Path(out).write_text(json.dumps(answers))


@pytest.mark.slow
def test_four_processes_on_redis_match_a_serial_replay(redis_base_url: str, tmp_path: Path) -> None:
    """Four writers at once get exactly what a serial run in Redis's order gives."""
    if not DATA.exists():
        pytest.skip(f"{DATA} is missing (the shared evaluation data is not checked out)")
    with gzip.open(DATA, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    url = f"{redis_base_url}?prefix=simconc-{os.getpid()}-{tmp_path.name}"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(5)
    outs = [tmp_path / f"w{i}.json" for i in range(4)]
    procs = [
        ctx.Process(target=_writer, args=(url, rows[i::4], str(outs[i]), barrier)) for i in range(4)
    ]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)
    finally:
        for p in procs:
            p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 4
    answers = {a[0]: a[1:] for out in outs for a in json.loads(out.read_text())}
    with SimhashDedup.open(url) as shared:
        order = {r["id"]: shared.sequence(r["id"]) for r in rows}
        final = {r["id"]: shared.document(r["id"]).similar_id for r in rows}  # type: ignore[union-attr]
        merged = shared.stats().last_id - shared.stats().groups
    applied = sorted(order, key=lambda d: order[d] or 0)
    assert sorted(order.values()) == list(range(1, len(rows) + 1))
    writer = {r["id"]: i % 4 for i, r in enumerate(rows)}
    assert sum(writer[a] != writer[b] for a, b in zip(applied, applied[1:], strict=False)) > 80
    text = {r["id"]: r["text"] for r in rows}
    with SimhashDedup.open("memory://") as replay:
        for doc_id in applied:
            got: AddResult = replay.add(text[doc_id], doc_id)
            assert [got.similar_id, got.duplicate, list(got.merged_from)] == answers[doc_id]
        for doc_id in text:
            record = replay.document(doc_id)
            assert record is not None and record.similar_id == final[doc_id]
        assert replay.stats().last_id - replay.stats().groups == merged
