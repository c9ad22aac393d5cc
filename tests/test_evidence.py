"""Evidence per copy: the score and verdict a document had when it was placed, kept with its
record on every store (memory, journaled memory, LevelDB, SQLite, Redis), equal across them,
through restarts, and readable from records written before evidence was kept.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from nshash import NSHash
from nshash.methods.nshash.records import VERDICTS, pack_record, unpack_full, unpack_record
from tests.test_store_contract import EN_BAKERY, EN_RAIL, EN_RAIL_REPOST, EN_TURTLES

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("NSHASH_DATA_DIR", ROOT.parent / "shared" / "data"))
HOT = DATA / "en_hot_dev.jsonl.gz"


def _hot(limit: int) -> list[tuple[str, str]]:
    with gzip.open(HOT, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(limit), f, strict=False)]
    return [(r["id"], r["text"]) for r in rows]


def _evidence(nsh: NSHash, ids: list[str]) -> dict[str, tuple[int, float | None, str | None]]:
    out = {}
    for doc_id in ids:
        rec = nsh.document(doc_id)
        assert rec is not None
        out[doc_id] = (rec.similar_id, rec.score, rec.verdict)
    return out


class TestPlacementEvidence:
    def test_each_verdict_is_kept_with_its_score(self, store_url: str) -> None:
        """A new story, a copy that joins it and an identical text keep their own verdicts."""
        with NSHash.open(store_url) as nsh:
            first = nsh.add(EN_RAIL, doc_id="rail", title="Night trains")
            copy = nsh.add(EN_RAIL_REPOST, doc_id="rail-copy")
            same = nsh.add(EN_RAIL, doc_id="rail-again")
            other = nsh.add(EN_TURTLES, doc_id="turtles")
            assert copy.similar_id == first.similar_id == same.similar_id != other.similar_id
            rail = nsh.document("rail")
            assert rail is not None and (rail.score, rail.verdict) == (0.0, "new story")
            joined = nsh.document("rail-copy")
            assert joined is not None and joined.verdict == "joined"
            assert joined.score is not None and 0.5 <= joined.score <= 1.0
            again = nsh.document("rail-again")
            assert again is not None and (again.score, again.verdict) == (1.0, "identical")
            group = nsh.group(first.similar_id)
            assert group is not None
            got = [(m.doc_id, m.title, m.score, m.verdict) for m in group.members]
            assert got == [
                ("rail", "Night trains", 0.0, "new story"),
                ("rail-copy", None, joined.score, "joined"),
                ("rail-again", None, 1.0, "identical"),
            ]

    def test_a_retry_keeps_the_first_evidence(self, store_url: str) -> None:
        """Sending a document again changes neither its answer nor its evidence."""
        with NSHash.open(store_url) as nsh:
            nsh.add(EN_BAKERY, doc_id="b")
            before = nsh.document("b")
            nsh.add(EN_BAKERY, doc_id="b")
            assert nsh.document("b") == before

    def test_evidence_survives_a_restart(self, store_url: str) -> None:
        """A reopened store answers the same evidence (stores that keep state)."""
        if store_url == "memory://":
            pytest.skip("memory:// without a path keeps nothing across a reopen")
        with NSHash.open(store_url) as nsh:
            nsh.add(EN_RAIL, doc_id="r1")
            nsh.add(EN_RAIL_REPOST, doc_id="r2")
            before = _evidence(nsh, ["r1", "r2"])
        with NSHash.open(store_url) as nsh:
            assert _evidence(nsh, ["r1", "r2"]) == before
            assert before["r2"][2] == "joined"

    @pytest.mark.skipif(not HOT.exists(), reason=f"{HOT} is not available")
    def test_every_store_keeps_the_same_evidence(self, store_url: str) -> None:
        """On 300 hot-story documents every store keeps the evidence memory:// keeps."""
        docs = _hot(300)
        ids = [d for d, _ in docs]
        with NSHash.open("memory://") as ref:
            for doc_id, text in docs:
                ref.add(text, doc_id=doc_id)
            expected = _evidence(ref, ids)
        with NSHash.open(store_url) as nsh:
            for doc_id, text in docs:
                nsh.add(text, doc_id=doc_id)
            assert _evidence(nsh, ids) == expected
        verdicts = {v for _, _, v in expected.values()}
        assert {"new story", "joined", "refused"} <= verdicts <= set(VERDICTS)


class TestOriginalAPI:
    def test_the_original_constructor_keeps_evidence(self, tmp_path: Path) -> None:
        """``NSHash(name, hashdb="memory")`` keeps evidence as NSHash.open does."""
        nsh = NSHash(str(tmp_path / "news"), hashdb="memory")
        try:
            nsh.add(EN_RAIL, doc_id="a")
            nsh.add(EN_RAIL_REPOST, doc_id="b")
            rec = nsh.document("b")
            assert rec is not None and rec.verdict == "joined"
        finally:
            nsh.close()


class TestOldRecords:
    def test_a_packed_record_without_evidence_loads(self) -> None:
        """A record packed before evidence was kept reads back with none."""
        rec = pack_record(7, True, (3,), "t", (1, 2))
        assert unpack_full(rec) == (7, True, (3,), "t", (1, 2), None, None)
        with_it = pack_record(7, True, (3,), "t", (1, 2), 0.75, "merged")
        assert unpack_full(with_it) == (7, True, (3,), "t", (1, 2), 0.75, "merged")
        assert unpack_record(with_it) == unpack_record(rec)

    def test_a_torn_evidence_part_is_refused(self) -> None:
        """A record cut inside its evidence is an error, not a wrong answer."""
        rec = pack_record(7, False, (), None, (1,), 0.5, "joined")
        with pytest.raises(ValueError):
            unpack_full(rec[:-3])

    def test_redis_records_from_before_evidence_load(self) -> None:
        """A Redis record header that ends at ``#count`` has no evidence."""
        pytest.importorskip("redis")
        from nshash.methods.nshash.redis import _parse_record

        old = _parse_record("d", b"5 1 9 0  #0\n")
        assert (old.similar_id, old.score, old.verdict) == (5, None, None)
        new = _parse_record("d", b"5 1 9 0  #0 0.5 4\n")
        assert (new.score, new.verdict) == (0.5, "joined")
