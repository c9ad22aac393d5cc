"""The keyed (four-key, seed 001) method: keys, checks, Bloom filters, every store, the CLI.

The contract tests run once per backend through the ``store_url`` fixture of ``conftest.py``
(memory, journaled memory, real LevelDB, a real ``redis-server``). The sample articles are
written for this project.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nshash import (
    ConfigError,
    EmptyDocumentError,
    StoreClosedError,
    StoreCorruptError,
    StoreLockedError,
)
from nshash.cli import main
from nshash.methods.bloom import LocalBloom, RedisBloom, bit_positions, bloom_params
from nshash.methods.keyed import KeyedDedup, title_key

# -- sample articles (original text) -----------------------------------------------------

PARK = (
    "市园林局昨天宣布，城东湿地公园将在下月初正式对外开放，公园占地约两百公顷。"
    "园内保留了原有的芦苇荡和三处鸟类栖息地，新修的木栈道全长六公里，沿途设有观鸟平台。"
    "为了保护候鸟，每年冬季部分区域将实行限流，游客需要提前在网上预约。"
    "园林局负责人表示，湿地周边的五个村庄已经完成污水管网改造，水质明显好转。"
    "公园开放后将免费接待市民，停车场和公交接驳线路也会同步投入使用。"
)
TRAIN = (
    "铁路部门消息，连接两座港口城市的夜间列车将于明年春天恢复运行。"
    "这条线路三年前因山体滑坡被迫停运，沿海一段轨道受损严重。"
    "工程人员此后重建了路基，并增加了排水沟，以防暴雨冲刷。"
    "车票将于下个月开始发售，首趟列车计划在三月第二周发车，全程约需九个小时。"
    "沿线旅游部门希望借此吸引更多游客，带动海边小镇的餐饮和住宿生意。"
)
BAKERY = (
    "老城区一家百年面包店昨天迎来开业一百周年，店主向每位到访的顾客免费赠送面包。"
    "如今经营这家店的是创始人的曾孙女，她仍然使用一百年前砌成的砖窑烤制面包。"
    "店里最受欢迎的仍是黑麦面包，配方几乎没有改变，每天清晨五点开始出炉。"
    "街坊们说，这家店见证了老城几代人的生活，是大家共同的记忆。"
)
EN_TURTLES = (
    "Researchers at a university marine station have followed a group of young sea turtles "
    "for more than two thousand kilometres. The small satellite tags, glued to the shells, "
    "fall off on their own after about a year. The data show that the turtles spend far more "
    "time in cold offshore currents than scientists had assumed. The team hopes the findings "
    "will help fishing fleets avoid the areas where the animals feed."
)

SMALL = {"expected_items": 10_000}


def unrelated(seed: int, length: int = 160) -> str:
    """A text of random CJK characters: its cosine with any other such text is near 0."""
    rng = random.Random(seed)
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(length))


@pytest.fixture
def kd(store_url: str) -> Iterator[KeyedDedup]:
    """A fresh keyed method on each backend, closed after the test."""
    with KeyedDedup.open(store_url, **SMALL) as opened:
        yield opened


class TestKeys:
    """Keys and term vectors come from normalized text; titles lose their crawl noise."""

    def test_title_noise(self) -> None:
        """Tags in brackets and words such as 转载 and 原创 do not count in a title."""
        assert title_key("【独家】[原创] 城东湿地公园下月开放（转载）") == "城东湿地公园下月开放"
        assert title_key("置顶：城东湿地公园下月开放!") == "城东湿地公园下月开放"
        assert title_key("【转载】") == ""

    def test_keys_ignore_width_case_and_punctuation(self) -> None:
        """Full-width forms, case, punctuation and spacing do not change any key."""
        with KeyedDedup.open("memory://", **SMALL) as kd:
            plain = kd.prepare("Night trains resume in March, 2025. " * 6, "News")
            wide = kd.prepare("ＮＩＧＨＴ trains resume in march 2025 " * 6, "ＮＥＷＳ!")
        assert plain.keys == wide.keys
        assert all(plain.keys)

    def test_short_text_has_no_head_or_tail(self) -> None:
        """A text of at most 100 key characters has only the content key (and a title)."""
        with KeyedDedup.open("memory://", **SMALL) as kd:
            doc = kd.prepare("短消息：明天停水。")
        assert doc.keys[0] != 0
        assert doc.keys[1:] == (0, 0, 0)

    def test_md5_differs_from_farmhash(self) -> None:
        """``hashfunc="md5"`` hashes the same keys differently, as the seed's MD5 does."""
        with (
            KeyedDedup.open("memory://", **SMALL) as farm,
            KeyedDedup.open("memory://", hashfunc="md5", **SMALL) as md5,
        ):
            assert farm.prepare(PARK).keys != md5.prepare(PARK).keys

    def test_words_cosine_matches_similarity_toolkit(self) -> None:
        """With ``terms="words"`` the cosine is the toolkit's cosine with every word counted."""
        from nshash.toolkit.similarity import cosine

        with KeyedDedup.open("memory://", terms="words", **SMALL) as kd:
            score = kd.cosine(PARK, PARK[:120] + TRAIN)
        assert score == pytest.approx(cosine(PARK, PARK[:120] + TRAIN, stop_words=False))
        assert 0 < score < 1

    def test_chars_cosine_counts_characters(self) -> None:
        """The seed's terms: each CJK character is one term, each Latin or digit run one."""
        with KeyedDedup.open("memory://", **SMALL) as kd:
            assert kd.cosine("甲乙", "乙甲") == pytest.approx(1.0)
            assert kd.cosine("甲 abc", "甲 ab c") == pytest.approx(1 / 6**0.5)  # 甲 shared
            assert kd.cosine(PARK, TRAIN) < 0.9


class TestChecks:
    """Each of the four keys finds reposts, in the seed's order, confirmed by cosine."""

    def test_repost_of_same_content_is_duplicate(self, kd: KeyedDedup) -> None:
        """Reposts whose letters and digits are unchanged share the id, via the content key."""
        first = kd.add(PARK, "p1")
        again = kd.add(PARK.replace("，", ", ").replace("。", ".\n"), "p2")
        assert (first.similar_id, first.duplicate) == (1, False)
        assert (again.similar_id, again.duplicate) == (1, True)
        assert kd.counters["matched_content"] == 1

    def test_changed_title_only_is_duplicate_via_content(self, kd: KeyedDedup) -> None:
        """A new title on the same text is found by the content key before the title is asked."""
        kd.add(PARK, title="城东湿地公园下月开放")
        result = kd.add(PARK, title="市民期待：湿地公园即将迎客")
        assert result.duplicate and result.similar_id == 1
        assert kd.counters["matched_content"] == 1

    def test_head_hit(self, kd: KeyedDedup) -> None:
        """A repost with the same beginning and a changed ending is found by the head key."""
        kd.add(PARK)
        repost = PARK[:-25] + "记者会后，多家旅行社已开始咨询团体预约。"
        result = kd.add(repost)
        assert result.duplicate and result.similar_id == 1
        assert kd.counters["matched_head"] == 1

    def test_tail_hit(self, kd: KeyedDedup) -> None:
        """A repost with a new first line and the same ending is found by the tail key."""
        kd.add(TRAIN)
        result = kd.add("本文转自海滨日报客户端\n" + TRAIN)
        assert result.duplicate and result.similar_id == 1
        assert kd.counters["matched_tail"] == 1

    def test_title_hit(self, kd: KeyedDedup) -> None:
        """A repost with a new header and footer is found by its title, noise removed."""
        kd.add(BAKERY, title="百年面包店迎来一百周年")
        repost = "来源：老城晚报\n" + BAKERY + "\n（责任编辑：王五）"
        result = kd.add(repost, title="【转载】百年面包店迎来一百周年")
        assert result.duplicate and result.similar_id == 1
        assert kd.counters["matched_title"] == 1

    def test_unrelated_documents_get_new_ids(self, kd: KeyedDedup) -> None:
        """Different stories get ids 1, 2, 3, ... from the counter."""
        ids = [kd.add(text).similar_id for text in (PARK, TRAIN, BAKERY, EN_TURTLES)]
        assert ids == [1, 2, 3, 4]
        assert kd.stats().groups == 4

    def test_key_hit_below_threshold_is_rejected(self, kd: KeyedDedup) -> None:
        """The same first 100 characters over a different story is a new id: cosine decides."""
        kd.add(PARK)
        other = PARK[:110] + TRAIN + BAKERY
        result = kd.add(other)
        assert (result.similar_id, result.duplicate) == (2, False)
        assert kd.counters["rejected"] == 1

    @pytest.mark.parametrize("common_groups", [0, 8])
    def test_boilerplate_key_is_skipped(self, store_url: str, common_groups: int) -> None:
        """A tail that 8 different stories share is a footer: it is no longer compared."""
        notice = "本站所有文章版权归原作者所有，未经书面授权不得转载、摘编或以其他方式使用。"
        footer = "\n" + notice * 3
        with KeyedDedup.open(store_url, common_groups=common_groups, **SMALL) as kd:
            ids = [kd.add(unrelated(i) + footer).similar_id for i in range(10)]
            assert ids == list(range(1, 11))
            compared = kd.counters["compared"]
            assert kd.add(unrelated(99) + footer).similar_id == 11
            if common_groups:
                assert kd.counters["common_skipped"] >= 1
                assert kd.counters["compared"] == compared
            else:
                assert kd.counters["common_skipped"] == 0
                assert kd.counters["compared"] == compared + 10
            repost = kd.add(unrelated(3) + "（完）" + footer)  # head still finds the story
            assert (repost.similar_id, repost.duplicate) == (4, True)

    def test_threshold_is_configurable(self, store_url: str) -> None:
        """A lower threshold accepts the candidate a strict one rejects."""
        other = PARK[:110] + TRAIN
        with KeyedDedup.open(store_url, threshold=0.3, **SMALL) as kd:
            score = kd.cosine(PARK, other)
            assert 0.3 <= score < 0.9
            kd.add(PARK)
            assert kd.add(other).similar_id == 1

    def test_fingerprints_are_the_four_keys(self, kd: KeyedDedup) -> None:
        """The result's fingerprints are the content, head, tail and title key hashes."""
        result = kd.add(PARK, title="湿地公园")
        assert result.fingerprints == kd.prepare(PARK, "湿地公园").keys
        assert result.merged_from == ()

    def test_same_doc_id_twice_is_a_replay(self, kd: KeyedDedup) -> None:
        """Sending a doc_id again changes nothing and returns the first answer."""
        first = kd.add(PARK, "a", title="湿地")
        again = kd.add(TRAIN, "a")
        assert (again.similar_id, again.duplicate, again.replayed) == (1, False, True)
        assert again.fingerprints == first.fingerprints
        assert kd.stats().documents == 1
        record = kd.document("a")
        assert record is not None and (record.similar_id, record.title) == (1, "湿地")
        assert kd.document("missing") is None

    def test_query_writes_nothing(self, kd: KeyedDedup) -> None:
        """query and explain answer what add would, and change no count."""
        kd.add(TRAIN)
        before = kd.stats()
        assert kd.query("转载：" + TRAIN) == 1
        match = kd.explain("转载：" + TRAIN)
        assert match is not None and (match.kind, match.similar_id) == ("tail", 1)
        assert kd.query(PARK) is None
        after = kd.stats()
        assert (after.documents, after.groups, after.fingerprints) == (
            before.documents,
            before.groups,
            before.fingerprints,
        )

    def test_add_many_isolates_bad_items(self, kd: KeyedDedup) -> None:
        """A bad item yields its exception in place; the others are added."""
        items: list[Any] = [PARK, {"text": "。。。"}, {"text": PARK, "id": "x"}, 7]
        out = kd.add_many(items)
        assert [type(o).__name__ for o in out] == [
            "AddResult",
            "EmptyDocumentError",
            "AddResult",
            "ConfigError",
        ]
        assert out[2].similar_id == 1  # type: ignore[union-attr]


class TestBadInput:
    """Bad input gets a typed error, never a wrong answer."""

    @pytest.mark.parametrize("text", [None, 12, b"bytes"])
    def test_text_must_be_str(self, kd: KeyedDedup, text: object) -> None:
        """A text that is not a str is a ConfigError."""
        with pytest.raises(ConfigError):
            kd.add(text)  # type: ignore[arg-type]

    @pytest.mark.parametrize("text", ["", "   ", "。！？——"])
    def test_text_without_letters_is_empty(self, kd: KeyedDedup, text: str) -> None:
        """A text with no letter or digit is an EmptyDocumentError and gets no id."""
        with pytest.raises(EmptyDocumentError):
            kd.add(text)
        assert kd.stats().documents == 0

    @pytest.mark.parametrize("doc_id", ["", 5])
    def test_doc_id_must_be_nonempty_str(self, kd: KeyedDedup, doc_id: object) -> None:
        """A doc_id that is empty or not a str is a ConfigError."""
        with pytest.raises(ConfigError):
            kd.add(PARK, doc_id)  # type: ignore[arg-type]

    def test_title_must_be_str(self, kd: KeyedDedup) -> None:
        """A title that is not a str is a ConfigError."""
        with pytest.raises(ConfigError):
            kd.add(PARK, title=3)  # type: ignore[arg-type]

    def test_closed_store_refuses_calls(self, store_url: str) -> None:
        """After close, calls raise StoreClosedError; closing twice is harmless."""
        kd = KeyedDedup.open(store_url, **SMALL)
        kd.close()
        kd.close()
        with pytest.raises(StoreClosedError):
            kd.add(PARK)
        with pytest.raises(StoreClosedError):
            kd.stats()

    @pytest.mark.parametrize(
        ("options", "word"),
        [
            ({"threshold": 0}, "threshold"),
            ({"threshold": 1.5}, "threshold"),
            ({"head_chars": 0}, "head_chars"),
            ({"max_candidates": True}, "max_candidates"),
            ({"terms": "bigrams"}, "terms"),
            ({"common_groups": -1}, "common_groups"),
            ({"hashfunc": "sha1"}, "hashfunc"),
            ({"expected_items": 0}, "expected_items"),
            ({"fp_rate": 1.0}, "fp_rate"),
            ({"fsync": "sometimes"}, "fsync"),
            ({"colour": "red"}, "colour"),
        ],
    )
    def test_bad_options(self, options: dict[str, object], word: str) -> None:
        """An option out of range or unknown is a ConfigError that names it."""
        with pytest.raises(ConfigError, match=word):
            KeyedDedup.open("memory://", **options)

    def test_unknown_scheme(self) -> None:
        """An unknown store scheme is a ConfigError."""
        with pytest.raises(ConfigError, match="ftp"):
            KeyedDedup.open("ftp://host/x")

    def test_hashfunc_out_of_range(self) -> None:
        """A custom hash function must return a 64-bit unsigned int."""
        with (
            KeyedDedup.open("memory://", hashfunc=lambda key: -1, **SMALL) as kd,
            pytest.raises(ConfigError, match="hashfunc"),
        ):
            kd.add(PARK)


class TestPersistence:
    """Persistent stores keep ids, documents and filters across a reopen."""

    @pytest.fixture
    def url(self, store_url: str) -> str:
        """Only the stores that outlive their opener."""
        if store_url == "memory://":
            pytest.skip("memory:// lives in one process only")
        return store_url

    def test_reopen_keeps_everything(self, url: str) -> None:
        """After a reopen, old stories are found, records remain, and ids go on."""
        with KeyedDedup.open(url, **SMALL) as kd:
            kd.add(PARK, "p")
            kd.add(TRAIN, "t")
        with KeyedDedup.open(url, **SMALL) as kd:
            assert kd.add("转载：" + TRAIN).similar_id == 2
            assert kd.add(PARK).similar_id == 1
            assert kd.add(BAKERY).similar_id == 3
            record = kd.document("p")
            assert record is not None and record.similar_id == 1
            assert kd.stats().documents == 5

    def test_reopen_with_other_settings_is_refused(self, url: str) -> None:
        """Settings that define the keys (terms, hash, head and tail lengths) cannot change."""
        with KeyedDedup.open(url, **SMALL) as kd:
            kd.add(PARK)
        with pytest.raises(ConfigError, match="head_chars"):
            KeyedDedup.open(url, head_chars=50, **SMALL)
        with KeyedDedup.open(url, threshold=0.8, **SMALL) as kd:  # the threshold may change
            assert kd.query(PARK) == 1


class TestMemoryFile:
    """The journaled memory store survives crashes and refuses a second opener."""

    def test_unclosed_store_replays_its_journal(self, tmp_path: Path) -> None:
        """What was acknowledged before a crash (no close) is back after a reopen."""
        path = tmp_path / "k.db"
        kd = KeyedDedup.open(f"memory://{path}", **SMALL)
        kd.add(PARK, "p")
        kd._backend._kv._release()  # type: ignore[attr-defined]  # a crash: no snapshot
        with KeyedDedup.open(f"memory://{path}", **SMALL) as again:
            assert again.query(PARK) == 1
            assert again.add(TRAIN).similar_id == 2

    def test_torn_journal_tail_is_dropped(self, tmp_path: Path) -> None:
        """A record cut short by a crash was never acknowledged: it is dropped, not an error."""
        path = tmp_path / "k.db"
        kd = KeyedDedup.open(f"memory://{path}", **SMALL)
        kd.add(PARK)
        kd._backend._kv._release()  # type: ignore[attr-defined]
        with open(f"{path}.journal", "ab") as fh:
            fh.write(b'[2,[["keyed","bQ==","')  # a line cut short by the crash
        with KeyedDedup.open(f"memory://{path}", **SMALL) as again:
            assert again.stats().documents == 1

    def test_damaged_snapshot_is_corrupt(self, tmp_path: Path) -> None:
        """A damaged snapshot raises StoreCorruptError."""
        path = tmp_path / "k.db"
        with KeyedDedup.open(f"memory://{path}", **SMALL) as kd:
            kd.add(PARK)
            kd._backend._kv._file.save()  # type: ignore[attr-defined]  # as a compaction does
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(StoreCorruptError):
            KeyedDedup.open(f"memory://{path}", **SMALL)

    def test_foreign_file_is_corrupt(self, tmp_path: Path) -> None:
        """A file that is not a keyed snapshot is refused."""
        path = tmp_path / "k.db"
        path.write_bytes(b"not a snapshot")
        with pytest.raises(StoreCorruptError):
            KeyedDedup.open(f"memory://{path}", **SMALL)

    @pytest.mark.parametrize("scheme", ["memory", "leveldb"])
    def test_second_opener_is_locked_out(self, tmp_path: Path, scheme: str) -> None:
        """A path held by one opener gives the next a StoreLockedError."""
        url = f"{scheme}://{tmp_path}/k"
        with KeyedDedup.open(url, **SMALL), pytest.raises(StoreLockedError):
            KeyedDedup.open(url, **SMALL)

    def test_filters_are_rebuilt_when_not_saved(self, tmp_path: Path) -> None:
        """Without a saved filter (a crash), the filters are rebuilt from the key index."""
        path = tmp_path / "k.db"
        kd = KeyedDedup.open(f"memory://{path}", **SMALL)
        kd.add(TRAIN)
        kd._backend._kv._release()  # type: ignore[attr-defined]
        with KeyedDedup.open(f"memory://{path}", **SMALL) as again:
            match = again.explain("转载：" + TRAIN)
            assert match is not None and match.kind == "tail"


class TestBloomFilters:
    """Filters are sized from a count and a rate; a false positive never makes a duplicate."""

    def test_params(self) -> None:
        """Bits and hashes follow the textbook formulas."""
        assert bloom_params(1_000_000, 0.001) == (14_377_588, 10)
        assert bloom_params(1000, 0.01) == (9586, 7)

    @pytest.mark.parametrize(
        ("n", "p"), [(0, 0.1), (10, 0.0), (10, 1.0), (True, 0.1), (10, "x"), (10**12, 1e-9)]
    )
    def test_bad_params(self, n: object, p: object) -> None:
        """Sizes out of range (or beyond a Redis string) are a ConfigError."""
        with pytest.raises(ConfigError):
            bloom_params(n, p)  # type: ignore[arg-type]

    def test_positions_are_stable(self) -> None:
        """Bit positions depend only on the item and the sizes (many hosts must agree)."""
        assert bit_positions(12345, 1000, 3) == [345, 218, 91]
        assert all(0 <= p < 97 for p in bit_positions(2**64 - 1, 97, 8))

    def test_local_false_positive_rate(self) -> None:
        """The in-process filter has no false negative and about the configured rate."""
        bloom = LocalBloom(5000, 0.01)
        for i in range(5000):
            bloom.add(i * 0x9E3779B97F4A7C15 % 2**64)
        assert all(i * 0x9E3779B97F4A7C15 % 2**64 in bloom for i in range(5000))
        false = sum((i * 0xC2B2AE3D27D4EB4F + 7) % 2**64 in bloom for i in range(20000))
        assert false / 20000 < 0.02
        again = LocalBloom.from_bytes(bloom.to_bytes(), 5000, 0.01)
        assert all(i * 0x9E3779B97F4A7C15 % 2**64 in again for i in range(0, 5000, 7))

    def test_saved_filter_of_other_size_is_refused(self) -> None:
        """Bytes of a filter with other sizes do not load."""
        with pytest.raises(ConfigError):
            LocalBloom.from_bytes(LocalBloom(10, 0.1).to_bytes(), 5000, 0.01)

    def test_redis_false_positive_rate(self, redis_base_url: str) -> None:
        """The Redis filter (SETBIT/GETBIT in one string) has the configured rate too."""
        import redis

        client = redis.Redis.from_url(redis_base_url)
        key = f"test-bloom-{os.getpid()}-{threading.get_ident()}"
        try:
            bloom = RedisBloom(client, key, 1000, 0.01)
            assert all(bloom.add(i * 7919 + 1) for i in range(200))
            for i in range(200, 1000):
                bloom.add(i * 7919 + 1)
            assert all(i * 7919 + 1 in bloom for i in range(0, 1000, 3))
            false = sum(i * 104729 + 2 in bloom for i in range(2000))
            assert false / 2000 < 0.03
            assert client.strlen(key) == (bloom.bits + 7) // 8
        finally:
            client.delete(key)
            client.close()

    def test_false_positive_does_not_make_a_duplicate(self, store_url: str) -> None:
        """A saturated filter says "seen" to new keys; the index and cosine still answer new."""
        with KeyedDedup.open(store_url, expected_items=1, fp_rate=0.5) as kd:
            assert [kd.add(unrelated(i)).similar_id for i in range(20)] == list(range(1, 21))
            kd.add(TRAIN)
            before = kd.counters["bloom_false_positives"]
            result = kd.add(BAKERY)
            assert (result.similar_id, result.duplicate) == (22, False)
            assert kd.counters["bloom_false_positives"] > before
            assert kd.add("转载：" + TRAIN).similar_id == 21  # real reposts still match

    def test_collision_is_rejected_by_cosine(self, store_url: str) -> None:
        """When every key collides (filter and index agree), only the cosine check says no."""
        with KeyedDedup.open(store_url, hashfunc=lambda key: 42, **SMALL) as kd:
            ids = [kd.add(text).similar_id for text in (PARK, TRAIN, BAKERY, EN_TURTLES)]
            assert ids == [1, 2, 3, 4]
            assert kd.counters["rejected"] >= 6
            assert kd.counters["bloom_false_positives"] == 0
            repost = kd.add(PARK.replace("。", "！"))
            assert (repost.similar_id, repost.duplicate) == (1, True)


class TestConcurrency:
    """Concurrent writers get the answers of some serial order, on every store."""

    def test_simultaneous_copies_share_one_new_id(self, store_url: str) -> None:
        """Copies of one new story added at once by many threads all get the same id."""
        threads, results = 6, []
        barrier = threading.Barrier(threads)
        lock = threading.Lock()
        with KeyedDedup.open(store_url, **SMALL) as kd:

            def work(i: int) -> None:
                barrier.wait()
                result = kd.add(f"第{i}次转发\n" + TRAIN)
                with lock:
                    results.append(result)

            workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            assert {r.similar_id for r in results} == {1}
            assert sorted(r.duplicate for r in results) == [False] + [True] * (threads - 1)
            assert kd.stats().last_id == 1

    def test_ids_are_never_handed_out_twice(self, store_url: str) -> None:
        """Different stories from many threads get distinct ids from one counter."""
        results: list[int] = []
        lock = threading.Lock()
        stories = [f"第{i}号公告：" + "甲乙丙丁戊己庚辛壬癸"[i % 10] * (i + 3) for i in range(40)]
        with KeyedDedup.open(store_url, **SMALL) as kd:

            def work(part: list[str]) -> None:
                for text in part:
                    sid = kd.add(text).similar_id
                    with lock:
                        results.append(sid)

            workers = [threading.Thread(target=work, args=(stories[i::4],)) for i in range(4)]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            assert sorted(results) == list(range(1, 41))

    def test_same_doc_id_at_once_is_stored_once(self, store_url: str) -> None:
        """The same doc_id sent by several threads at once is filed once, answered alike."""
        results = []
        lock = threading.Lock()
        barrier = threading.Barrier(4)
        with KeyedDedup.open(store_url, **SMALL) as kd:

            def work() -> None:
                barrier.wait()
                result = kd.add(BAKERY, "same")
                with lock:
                    results.append(result)

            workers = [threading.Thread(target=work) for _ in range(4)]
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            assert {r.similar_id for r in results} == {1}
            assert sum(not r.replayed for r in results) == 1
            assert kd.stats().documents == 1


class TestCLI:
    """``nshash dedup --method keyed`` writes the keyed method's ids."""

    def test_dedup_with_keyed_method(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Each record gets the keyed similar_id; titles are used as the fourth key."""
        src = tmp_path / "in.jsonl"
        rows = [
            {"id": "1", "title": "湿地公园开放", "content": PARK},
            {"id": "2", "title": "夜车恢复", "content": TRAIN},
            {"id": "3", "title": "【转载】湿地公园开放", "content": "来源：晚报\n" + PARK + "\n完"},
        ]
        src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        code = main(["dedup", str(src), "--method", "keyed", "-q"])
        out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert code == 0
        assert [(r["similar_id"], r["duplicate"]) for r in out] == [
            (1, False),
            (2, False),
            (1, True),
        ]

    def test_dedup_keyed_saved_store(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A keyed run on a saved store continues from it in the next run."""
        src = tmp_path / "in.jsonl"
        src.write_text(json.dumps({"id": "1", "text": PARK}, ensure_ascii=False) + "\n")
        store = f"memory://{tmp_path}/keyed.db"
        assert main(["dedup", str(src), "--method", "keyed", "--store", store, "-q"]) == 0
        src.write_text(json.dumps({"id": "9", "text": "转载：" + PARK}, ensure_ascii=False) + "\n")
        capsys.readouterr()
        assert main(["dedup", str(src), "--method", "keyed", "--store", store, "-q"]) == 0
        assert json.loads(capsys.readouterr().out)["similar_id"] == 1

    def test_worker_processes_give_the_same_output(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With --jobs 2 the keyed keys are made in worker processes; the output is the same."""
        src = tmp_path / "in.jsonl"
        texts = [PARK, TRAIN, "转载：" + PARK, BAKERY, TRAIN + "（完）", "。。", EN_TURTLES] * 40
        src.write_text(
            "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
        )
        outputs = []
        for jobs in ("1", "2"):
            assert main(["dedup", str(src), "--method", "keyed", "-j", jobs, "-q"]) == 0
            outputs.append(capsys.readouterr().out)
        assert outputs[0] == outputs[1]
        ids = [json.loads(line).get("similar_id") for line in outputs[0].splitlines()]
        assert ids[:7] == [1, 2, 1, 3, 2, None, 4]  # the empty text is written with null
        assert len(ids) == 7 * 40 and set(ids) == {1, 2, 3, 4, None}

    def test_unknown_method_is_usage_error(self, tmp_path: Path) -> None:
        """An unknown --method is bad usage (exit 2)."""
        src = tmp_path / "in.jsonl"
        src.write_text("{}\n")
        assert main(["dedup", str(src), "--method", "bogus"]) == 2
