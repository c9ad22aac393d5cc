"""The evaluation harness: pairwise scoring, the seed algorithm, the baselines and the CLI."""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Hashable, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from bench import evaluate
from bench.baselines import MinHashBaseline, SimhashBaseline, char_shingles, simhash_features
from bench.evaluate import (
    NSHashSystem,
    identical_text_violations,
    largest_group,
    main,
    pairwise_scores,
)
from bench.seed_nshash import SeedNSHash, md5_hex

# Sentences of more than 30 characters, so the release variant keeps them.
LONG = [
    "中国国家博物馆承担着为国护史为国藏史为国弘史的重要使命今天带你走进这座历史文化艺术殿堂",
    "在国家博物馆古代中国基本陈列有北京周口店出土的古人类用火遗迹这是世界直立人遗址中发现最丰富的",
    "这件良渚碧玉玉琮共十九节为目前国内所见最高上面雕刻的日月纹图案在大汶口文化大口陶尊上常见",
    "后母戊大方鼎素有青铜之王的美誉是目前已知的中国古代最重的单体青铜礼器展现着青铜铸造工艺的奇迹",
    "一件件珍贵文物见证了中华优秀传统文化历久弥新薪火相传的历史进程也见证了文明交流互鉴的成果",
    "今年夏天北方多地出现持续高温天气气象部门提醒公众注意防暑降温合理安排户外活动时间并多喝水",
    "农业农村部门组织专家深入田间地头指导农民抗旱保苗确保秋粮生产稳定和农民收入持续增长的目标",
]
OWN = [
    "山区学校的孩子们第一次在新建的天文台里用望远镜观察月球表面的环形山和阴影变化",
    "志愿者们利用周末时间为村里的老人修缮房屋并教他们使用手机视频和远方的家人通话",
]
FOOTER = (
    "凡本网注明来源人民网的所有作品版权均属于人民网"
    "未经本网授权不得转载摘编或利用其它方式使用上述作品"
)


def brute_force(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> tuple[float, float]:
    """Precision and recall by enumerating every pair (the definition, slowly)."""
    pairs = list(combinations(range(len(truth)), 2))
    claimed = {p for p in pairs if predicted[p[0]] == predicted[p[1]]}
    real = {p for p in pairs if truth[p[0]] == truth[p[1]]}
    precision = len(claimed & real) / len(claimed) if claimed else 1.0
    recall = len(claimed & real) / len(real) if real else 1.0
    return precision, recall


class TestPairwiseScores:
    def test_perfect_grouping(self) -> None:
        """Groups equal to the stories score 1 on every measure."""
        score = pairwise_scores(["x", "x", "y", "z", "z"], [1, 1, 2, 3, 3])
        assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)
        assert (score.true_pairs, score.predicted_pairs, score.correct_pairs) == (2, 2, 2)

    def test_everything_in_one_group(self) -> None:
        """One giant group finds every true pair but claims all six pairs of four documents."""
        score = pairwise_scores([7, 7, 7, 7], ["a", "a", "b", "b"])
        assert score.predicted_pairs == 6 and score.correct_pairs == 2
        assert score.precision == pytest.approx(1 / 3)
        assert score.recall == 1.0
        assert score.f1 == pytest.approx(0.5)

    def test_all_singletons(self) -> None:
        """Claiming no pairs is vacuously precise and finds nothing."""
        score = pairwise_scores([1, 2, 3, 4], ["a", "a", "b", "b"])
        assert (score.precision, score.recall, score.f1) == (1.0, 0.0, 0.0)

    def test_hand_computed_example(self) -> None:
        """A split story and a wrongly joined document give precision and recall of 1/2."""
        # truth pairs: (0,1) (0,2) (1,2) (3,4); predicted pairs: (0,1) (2,3) (2,4) (3,4)
        score = pairwise_scores(["x", "x", "y", "y", "y"], [1, 1, 1, 2, 2])
        assert (score.true_pairs, score.predicted_pairs, score.correct_pairs) == (4, 4, 2)
        assert score.precision == pytest.approx(0.5)
        assert score.recall == pytest.approx(0.5)
        assert score.f1 == pytest.approx(0.5)

    def test_label_names_do_not_matter(self) -> None:
        """Renaming groups, even to names used as story labels, leaves the score unchanged."""
        truth = [1, 1, 2, 2, 3]
        a = pairwise_scores([1, 1, 1, 2, 3], truth)
        b = pairwise_scores([3, 3, 3, 1, 2], truth)
        assert a == b

    def test_no_pairs_anywhere(self) -> None:
        """With no true and no predicted pairs the grouping is perfect."""
        score = pairwise_scores([1, 2, 3], ["a", "b", "c"])
        assert (score.precision, score.recall, score.f1) == (1.0, 1.0, 1.0)

    def test_length_mismatch(self) -> None:
        """Label sequences of different lengths are refused."""
        with pytest.raises(ValueError, match="predicted has 2 labels but truth has 3"):
            pairwise_scores([1, 2], [1, 2, 3])

    def test_matches_pair_enumeration(self) -> None:
        """On random groupings the counting shortcut agrees with enumerating every pair."""
        rng = random.Random(20240601)
        for _ in range(50):
            size = rng.randint(2, 40)
            truth = [rng.randint(0, 8) for _ in range(size)]
            predicted = [rng.randint(0, 8) for _ in range(size)]
            score = pairwise_scores(predicted, truth)
            precision, recall = brute_force(predicted, truth)
            assert score.precision == pytest.approx(precision)
            assert score.recall == pytest.approx(recall)


class TestGroupSummaries:
    def test_largest_group(self) -> None:
        """The most common label and its count; nothing for no labels."""
        assert largest_group([3, 1, 3, 2, 3]) == (3, 3)
        assert largest_group([]) == (None, 0)

    def test_identical_texts_split(self) -> None:
        """Texts equal up to whitespace in different groups are a violation, with their indexes."""
        texts = ["甲乙 丙丁", "甲乙丙丁\n", "戊己", "戊 己", "庚辛"]
        labels = [1, 2, 3, 3, 1]
        assert identical_text_violations(texts, labels) == [[0, 1]]

    def test_identical_texts_together(self) -> None:
        """Identical texts in one group, and different texts apart, are no violation."""
        texts = ["same text", "same  text", "other text"]
        assert identical_text_violations(texts, [5, 5, 6]) == []


class TestSeedNSHash:
    def test_release_split_and_length_filter(self) -> None:
        """The release splits at : ： ； ？ 。 ！ 】 and line breaks, keeps sentences over 30."""
        seed = SeedNSHash()
        seps = ["：", ":", "；", "？", "！", "】", "\n"]
        doc = "短句。" + "".join(s + sep for s, sep in zip(LONG, seps, strict=True))
        assert seed.sentences(doc) == sorted(LONG, key=len, reverse=True)[:5]
        assert "短句" not in seed.sentences(doc)

    def test_short_document_keeps_all_sentences(self) -> None:
        """With no sentence over 30 characters the release hashes all pieces, empty ones too."""
        seed = SeedNSHash()
        assert seed.sentences("一二三。一二。一二三四！") == ["一二三四", "一二三", "一二", ""]

    def test_n_longest_ties_keep_order(self) -> None:
        """The n longest sentences are chosen, ties in document order."""
        seed = SeedNSHash(n=2, variant="article")
        assert seed.sentences("aa。bbb。ccc。d") == ["bbb", "ccc"]

    def test_article_split(self) -> None:
        """The article variant splits only at 。 ！ ？ and line breaks, with no length filter."""
        seed = SeedNSHash(variant="article")
        assert seed.sentences("甲：乙。丙！丁？戊\n己") == ["甲：乙", "丙", "丁", "戊", "己"]

    def test_copies_share_and_strangers_count_up(self) -> None:
        """A copy gets the original's id; unrelated documents get 1, 2, 3 in turn."""
        seed = SeedNSHash()
        a = "。".join(LONG[:3])
        b = "。".join(LONG[3:5])
        c = LONG[5]
        assert [seed.get_similar(t) for t in (a, b, c, a)] == [1, 2, 3, 1]

    def test_one_shared_long_sentence_merges(self) -> None:
        """A shared footer joins unrelated articles: the seed's boilerplate flaw."""
        seed = SeedNSHash()
        first = seed.get_similar("。".join(LONG[:2]) + "。" + FOOTER)
        second = seed.get_similar("。".join(LONG[5:7]) + "。" + FOOTER)
        assert first == second == 1

    def test_release_takes_smallest_hit_article_first_hit(self) -> None:
        """On hits to two ids the release returns the smallest, the article the first found."""
        # id 1 owns LONG[0]; id 2 owns LONG[1], which is longer, so it is looked up first.
        doc = LONG[1] + "。" + LONG[0]
        assert len(LONG[1]) > len(LONG[0])
        answers = {}
        for variant in ("release", "article"):
            seed = SeedNSHash(variant=variant)
            assert seed.get_similar(LONG[0]) == 1
            assert seed.get_similar(LONG[1]) == 2
            answers[variant] = seed.get_similar(doc)
        assert answers == {"release": 1, "article": 2}

    def test_all_hashes_rewritten(self) -> None:
        """Every hash of a document is (re)written to its id, overwriting older entries."""
        seed = SeedNSHash(variant="article")
        seed.get_similar(LONG[0])
        seed.get_similar(LONG[1])
        seed.get_similar(LONG[1] + "。" + LONG[0])  # first hit: id 2; LONG[0] now -> 2
        assert seed.get_similar(LONG[0]) == 2
        assert seed.max_similar_id == 2

    def test_hash_functions(self) -> None:
        """farmhash gives 64-bit ints, md5 hex digests; both group the same way."""
        farm, md5 = SeedNSHash(), SeedNSHash(hashfunc="md5")
        prints = farm.fingerprints(LONG[0])
        assert all(isinstance(h, int) and 0 <= h < 2**64 for h in prints)
        assert md5.fingerprints(LONG[0]) == [md5_hex(LONG[0])]
        docs = ["。".join(LONG[:2]), LONG[3], LONG[1], LONG[4] + "。" + LONG[3]]
        assert [farm.get_similar(d) for d in docs] == [md5.get_similar(d) for d in docs]

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"hashfunc": "sha1"}, "Unknown hashfunc 'sha1'"),
            ({"variant": "v2"}, "Unknown variant 'v2'"),
            ({"n": 0}, "n must be an int of at least 1, not 0"),
        ],
    )
    def test_bad_arguments(self, kwargs: dict[str, Any], match: str) -> None:
        """Unknown hash functions or variants and a non-positive n are refused."""
        with pytest.raises(ValueError, match=match):
            SeedNSHash(**kwargs)


class TestBaselines:
    def test_features(self) -> None:
        """Shingles are a set of character n-grams; simhash features drop non-word characters."""
        assert char_shingles("abcdef", 5) == {"abcde", "bcdef"}
        assert char_shingles("abc", 5) == {"abc"}
        assert simhash_features("Ab, c!", 3) == ["abc"]

    @pytest.mark.parametrize("factory", [MinHashBaseline, SimhashBaseline])
    def test_copies_group_strangers_do_not(self, factory: type[MinHashBaseline]) -> None:
        """A copy with changed line breaks joins its original; an unrelated text does not."""
        system = factory()
        original = "\n".join(LONG[:5])
        copy = "".join(LONG[:5])
        other = "\n".join(LONG[5:])
        labels = system.finish([system.add(t) for t in (original, other, copy)])
        assert labels[0] == labels[2] != labels[1]

    def test_minhash_near_duplicate(self) -> None:
        """MinHash puts a copy with one changed character in its original's group."""
        system = MinHashBaseline()
        text = "\n".join(LONG[:5])
        labels = [system.add(text), system.add(text.replace("博", "搏"))]
        assert system.finish(labels) == [0, 0]

    def test_union_bridges_first_does_not(self) -> None:
        """A document near two groups links them under union-find, joins the earliest otherwise."""
        a, b = "。".join(LONG[:3]), "。".join(LONG[4:7])
        bridge = "。".join(LONG[:3] + LONG[4:7])
        union, first = (
            MinHashBaseline(threshold=0.3),
            MinHashBaseline(threshold=0.3, grouping="first"),
        )
        u = union.finish([union.add(t) for t in (a, b, bridge)])
        f = first.finish([first.add(t) for t in (a, b, bridge)])
        assert u[0] == u[1] == u[2]
        assert f == [0, 1, 0]

    def test_unknown_grouping(self) -> None:
        """An unknown grouping rule is refused."""
        with pytest.raises(ValueError, match="Unknown grouping 'all'"):
            SimhashBaseline(grouping="all")


class TestNSHashSystem:
    def test_groups_and_resolves(self) -> None:
        """Copies share a final label, and every label is resolved to a canonical id."""
        system = NSHashSystem()
        texts = ["\n".join(LONG[:5]), "\n".join(LONG[5:]), "".join(LONG[:5])]
        labels = system.finish([system.add(t) for t in texts])
        assert labels[0] == labels[2] != labels[1]

    def test_empty_document_is_alone(self) -> None:
        """A document nshash refuses as empty gets a label of its own."""
        system = NSHashSystem()
        labels = system.finish([system.add("!!!"), system.add("？？"), system.add(LONG[0])])
        assert len(set(labels)) == 3
        assert system.empty == 2


def write_set(path: Path, rows: list[dict[str, Any]]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory with a tiny labelled zh set and a tiny hk set."""
    stories = [
        ("s1", "\n".join(LONG[:5])),
        ("s2", "\n".join(LONG[5:])),
        ("s1", "".join(LONG[:5])),
        # s3 quotes one sentence of s1 among two of its own: a third of it, not a repost.
        ("s3", LONG[2] + "。" + OWN[0] + "。" + OWN[1]),
    ]
    write_set(
        tmp_path / "zh_reposts_dev.jsonl.gz",
        [{"id": f"d{i}", "story": s, "text": t} for i, (s, t) in enumerate(stories)],
    )
    hk = ["\n".join(LONG[:3]), "\n\n".join(LONG[:3]), LONG[4], "\n".join(LONG[5:])]
    write_set(
        tmp_path / "zh_hk_news.jsonl.gz",
        [{"id": f"h{i}", "title": f"title {i}", "content": t} for i, t in enumerate(hk)],
    )
    return tmp_path


class TestMain:
    def test_missing_data_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A missing data file exits 2 and names the file."""
        assert main(["--sets", "zh,en", "--data-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "zh_reposts_dev.jsonl.gz" in err and "en_reposts_dev.jsonl.gz" in err
        assert "not found" in err

    def test_unknown_system(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown system name is a usage error."""
        with pytest.raises(SystemExit) as exc:
            main(["--systems", "nshash,lsh"])
        assert exc.value.code == 2
        assert "unknown system 'lsh'" in capsys.readouterr().err

    def test_json_report(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--json reports every system's scores on zh and the hk checks, with seed ratios."""
        code = main(["--sets", "zh,hk", "--data-dir", str(data_dir), "--repeat", "2", "--json"])
        assert code == 0
        report = json.loads(capsys.readouterr().out)
        zh = {row["system"]: row for row in report["sets"]["zh"]["rows"]}
        assert set(zh) == {"nshash", "keyed", "simhash-method", "seed", "minhash", "simhash"}
        assert zh["seed"]["ratio_vs_seed"] == 1.0
        assert zh["nshash"]["true_pairs"] == 1
        assert zh["nshash"]["f1"] == 1.0
        hk = {row["system"]: row for row in report["sets"]["hk"]["rows"]}
        assert set(hk) == {"nshash", "seed"}
        assert hk["nshash"]["identical_sets"] == 1
        assert hk["nshash"]["identical_violations"] == 0
        assert hk["nshash"]["largest_group"] == 2
        assert hk["nshash"]["largest_ids"] == ["h0", "h1"]

    def test_table_and_limit(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The table lists the chosen systems over the first --limit documents."""
        code = main(["--sets", "zh", "--systems", "seed,nshash", "--limit", "2",
                     "--repeat", "1", "--data-dir", str(data_dir)])  # fmt: skip
        assert code == 0
        out = capsys.readouterr().out
        assert "2 docs, 2 stories" in out
        lines = {line.split()[0]: line.split() for line in out.splitlines() if line}
        assert lines["seed"][-1] == "1.000"
        assert "nshash" in lines and "minhash" not in lines

    def test_pluggable_system(
        self,
        data_dir: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A system added to SYSTEMS is run and scored like the built-in ones."""

        class OneGroup:
            def add(self, text: str) -> Hashable:
                return 0

            def finish(self, labels: list[Hashable]) -> list[Hashable]:
                return labels

        monkeypatch.setitem(evaluate.SYSTEMS, "onegroup", OneGroup)
        code = main(["--sets", "zh", "--systems", "onegroup", "--repeat", "1", "--json",
                     "--data-dir", str(data_dir)])  # fmt: skip
        assert code == 0
        (row,) = json.loads(capsys.readouterr().out)["sets"]["zh"]["rows"]
        assert row["system"] == "onegroup" and row["largest_group"] == 4
        assert row["precision"] == pytest.approx(1 / 6)
        assert row["ratio_vs_seed"] is None

    def test_orders(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--orders K scores file order and K-1 shuffles, with the F1 spread over them."""
        code = main(["--sets", "zh", "--systems", "nshash", "--repeat", "1", "--orders", "3",
                     "--json", "--data-dir", str(data_dir)])  # fmt: skip
        assert code == 0
        rows = json.loads(capsys.readouterr().out)["sets"]["zh"]["orders"]
        assert [r["order"] for r in rows] == [0, 1, 2, "spread"]
        assert all(r["f1"] == 1.0 for r in rows[:3]) and rows[3]["f1"] == 0.0

    def test_shuffles_are_fixed(self) -> None:
        """An order is a fixed permutation: seed 0 is file order, others repeat exactly."""
        assert evaluate.shuffled(5, 0) == [0, 1, 2, 3, 4]
        assert evaluate.shuffled(50, 1) == evaluate.shuffled(50, 1) != list(range(50))
        assert sorted(evaluate.shuffled(50, 2)) == list(range(50))
