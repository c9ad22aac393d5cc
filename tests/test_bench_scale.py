"""The scale bench: its corpus generator and a tiny run of its stores, so the bench cannot rot."""

from __future__ import annotations

import gzip
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from bench import bench_scale
from bench.bench_scale import Corpus, main, run_worker
from tests.redis_server import RedisServer, redis_server_available

ALPHABET = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可也你"


@pytest.fixture
def news(tmp_path: Path) -> Path:
    """A small stand-in for ``zh_news.jsonl.gz``: 60 items of random Chinese clauses."""
    rng = random.Random(1)
    path = tmp_path / bench_scale.DATA_FILE
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i in range(60):
            paragraphs = []
            for _ in range(rng.randint(2, 5)):
                sentences = [
                    "，".join(
                        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(8, 16)))
                        for _ in range(rng.randint(2, 4))
                    )
                    + "。"
                    for _ in range(rng.randint(2, 4))
                ]
                paragraphs.append("".join(sentences))
            row = {"id": str(i), "title": f"t{i}", "content": "\n".join(paragraphs)}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


class TestCorpus:
    def test_deterministic(self, news: Path) -> None:
        """The same seed gives the same stream; another seed another one."""
        first = [d.text for d in Corpus(news, seed=3).stream(200)]
        assert first == [d.text for d in Corpus(news, seed=3).stream(200)]
        assert first != [d.text for d in Corpus(news, seed=4).stream(200)]

    def test_originals_distinct_and_reposts_of_earlier_ones(self, news: Path) -> None:
        """Originals are distinct texts with ids of their own; about 10 % of the stream are
        light or heavy reposts of an earlier original that share some of its text."""
        corpus = Corpus(news, seed=5)
        docs = list(corpus.stream(2000))
        assert len({d.doc_id for d in docs}) == 2000
        originals = [d for d in docs if d.kind == "original"]
        assert len({d.text for d in originals}) == len(originals)
        assert [d.doc_id for d in originals] == [f"o{i}" for i in range(len(originals))]
        reposts = [d for d in docs if d.kind != "original"]
        assert 150 <= len(reposts) <= 250
        assert {d.kind for d in reposts} == {"light", "heavy"}
        seen: set[int] = set()
        kept = 0
        for d in docs:
            if d.kind == "original":
                seen.add(d.original)
                continue
            assert d.original in seen
            source = corpus.original(d.original)
            assert d.text != source
            sentences = [s for s in source.replace("\n", "").split("。") if len(s) > 20]
            kept += any(s in d.text for s in sentences)
        # Nearly every repost keeps a sentence of its original whole (typos may hit them all).
        assert kept >= 0.9 * len(reposts)

    def test_lengths_follow_the_source(self, news: Path) -> None:
        """Originals take the shape of source items: their mean length is the source's."""
        with gzip.open(news, "rt", encoding="utf-8") as fh:
            source = [len(json.loads(line)["content"]) for line in fh]
        docs = [d.text for d in Corpus(news).stream(1000) if d.kind == "original"]
        mean_src = sum(source) / len(source)
        assert 0.8 * mean_src < sum(map(len, docs)) / len(docs) < 1.2 * mean_src


class TestRun:
    @pytest.mark.parametrize("store", ["seed", "memory", "memfile", "leveldb"])
    def test_worker_figures(self, news: Path, store: str) -> None:
        """A tiny run gives every figure, and the store finds most reposts."""
        out = run_worker(store, 300, 14, 50, None, store == "leveldb", news)
        assert out["docs"] == 300 and out["docs_per_s"] > 0
        assert len(out["fifths_docs_per_s"]) == 5 and out["longest_add_ms"] > 0
        assert out["originals_new_group"] > 0.9
        if store != "seed":
            assert out["reposts_joined"] > 0.6
            assert out["originals_new_group"] == 1.0
        if store in ("memfile", "leveldb"):
            assert out["bytes_per_doc"] > 0 and out["reopen_s"] >= 0
            assert out["documents_after_reopen"] == 300
        if store == "leveldb":
            assert out["gets_per_doc"]["fingerprint"] > 1
            # per-document averages: the same counts divided, summed in another order
            hits = sum(out["hits_per_doc"].values())
            total = out["gets_per_doc_total"]
            assert total >= hits or math.isclose(total, hits)

    @pytest.mark.parametrize("store", ["memory", "sqlite"])
    def test_worker_with_a_window(self, news: Path, store: str) -> None:
        """With --retention the stores forget: what they hold is measured at every fifth, and
        the reposts of originals older than the window no longer join them."""
        out = run_worker(store, 400, 14, 50, None, False, news, retention=5)
        assert out["retention_docs"] == 5 and len(out["bytes_per_fifth"]) == 5
        whole = run_worker(store, 400, 14, 50, None, False, news)
        assert whole["reposts_joined"] > out["reposts_joined"]

    @pytest.mark.skipif(not redis_server_available(), reason="redis-server is not installed")
    def test_redis_worker(self, news: Path, tmp_path: Path) -> None:
        """Against a redis-server of its own, the bench reports memory and server CPU."""
        server = RedisServer(tmp_path / "redis")
        server.start()
        try:
            out = run_worker("redis", 200, 14, 50, server.url, False, news)
        finally:
            server.stop()
        assert out["bytes_per_doc"] > 0 and out["server_cpu_us_per_doc"] > 0
        assert out["evalsha_calls"] >= 4
        assert out["reposts_joined"] > 0.6

    def test_main_json(self, news: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The whole path: one subprocess per store, one JSON object out."""
        assert main(["--docs", "40", "--stores", "seed,memory", "--json",
                     "--data-dir", str(news.parent)]) == 0  # fmt: skip
        report = json.loads(capsys.readouterr().out)
        assert [r["store"] for r in report["results"]] == ["seed", "memory"]

    def test_bad_options(self, news: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Unknown stores, bad sizes or plyvel options, missing data: one Error: line, status 2."""
        base = ["--data-dir", str(news.parent)]
        assert main(["--stores", "mongo", *base]) == 2
        assert main(["--sizes", "1k", *base]) == 2
        assert main(["--docs", "3", *base]) == 2
        assert main(["--data-dir", str(news.parent / "nowhere")]) == 2
        assert main(["--leveldb-options", "[10]", *base]) == 2
        assert main(["--retention", "0", *base]) == 2
        errors = capsys.readouterr().err.strip().splitlines()
        assert len(errors) == 6 and all(e.startswith("Error: ") for e in errors)


@pytest.mark.slow
@pytest.mark.skipif(
    not redis_server_available() or shutil.which("valgrind") is None,
    reason="needs redis-server and valgrind",
)
def test_redis_cpu_bench_counts_the_servers_instructions(
    news: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench_redis_cpu runs redis-server under callgrind: a positive count per document for
    nshash and simhash, nshash the costlier script, and this checkout compared with itself
    (--before) within a few per cent (Redis seeds its hash tables at random each start)."""
    from bench import bench_redis_cpu

    root = Path(bench_redis_cpu.__file__).resolve().parents[1]
    args = ["--warm", "30", "--docs", "20", "--batch", "10", "--data-dir", str(news.parent)]
    assert bench_redis_cpu.main([*args, "--before", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(next(line for line in out if line.startswith("system"))) + 1 :]
    nshash, simhash, before = (line.split() for line in table)
    assert (nshash[0], simhash[0], before[:2]) == (
        "nshash",
        "simhash",
        ["nshash", f"({root.name})"],
    )
    before = before[1:]

    def count(cells: list[str]) -> float:
        return float(cells[1].replace(",", ""))

    assert count(simhash) > 0 and count(nshash) > count(simhash)
    assert float(nshash[3]) > float(simhash[3]) > 0  # commands a document
    assert 0.95 < float(nshash[-1]) < 1.05  # before/now, the same code
    assert abs(count(before) / count(nshash) - 1) < 0.05


def test_redis_cpu_bench_refuses_bad_options(
    news: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown systems, bad counts, a --before that is no checkout, missing data: one Error:
    line and status 1, before any server starts."""
    from bench import bench_redis_cpu

    if shutil.which("valgrind") is None or not redis_server_available():
        pytest.skip("needs redis-server and valgrind")
    base = ["--data-dir", str(news.parent)]
    assert bench_redis_cpu.main(["--systems", "minhash", *base]) == 1
    assert bench_redis_cpu.main(["--docs", "0", *base]) == 1
    assert bench_redis_cpu.main(["--before", str(tmp_path), *base]) == 1
    assert bench_redis_cpu.main(["--data-dir", str(tmp_path / "nowhere")]) == 1
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 4 and all(e.startswith("Error: ") for e in errors)
