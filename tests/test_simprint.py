"""The simhash method: fingerprints, index keys and grouping on the reference tables."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nshash.errors import ConfigError, EmptyDocumentError
from nshash.methods.simhash import SimhashDedup
from nshash.text.normalize import strip_key, strip_words
from nshash.text.simprint import (
    DEFAULT_K,
    TOP,
    features,
    hamming,
    index_keys,
    index_layout,
    simprint,
)

# Written for these tests: a short news item in Chinese and one in English, and unrelated texts.
ZH = (
    "本市今天召开城市绿化工作会议，会议提出，今年将新建公园十座，改造街心花园三十处。"
    "城市绿化工作要坚持以人为本，公园建设要方便居民就近休闲。会议要求各区加快公园建设进度，"
    "确保年底前全部开放。绿化部门负责人表示，新建公园将优先安排在老城区。"
)
EN = (
    "The city council approved a plan on Monday to build ten new parks and renovate thirty "
    "small gardens this year. Council members said the parks would be placed first in the "
    "old districts, where residents have the fewest green spaces. The parks department "
    "expects every new park to open before the end of the year, the council said."
)
UNRELATED = [
    ZH,
    EN,
    "The football club signed a young striker from Brazil for a record fee after a long "
    "summer of negotiations with his former team and several rival bidders.",
    "A new study of sleep finds that teenagers who keep their phones out of the bedroom fall "
    "asleep forty minutes earlier on school nights than those who do not.",
    "气象台发布寒潮预警，预计未来三天气温将下降十度以上，北部山区有大雪，请市民注意防寒保暖。",
    "国家队在昨晚的比赛中以二比一战胜对手，主教练赛后表示，球队的防守还有很多需要改进的地方。",
]


class TestStripWords:
    """The word runs the fingerprints start from."""

    @given(st.text())
    def test_is_strip_key_split(self, text: str) -> None:
        """Joined, the runs are what strip_key keeps; no run is empty or holds a space."""
        runs = strip_words(text)
        assert "".join(runs) == strip_key(text)
        assert all(run and not any(c.isspace() for c in run) for run in runs)

    def test_example(self) -> None:
        """Words split where anything but a letter or digit was."""
        assert strip_words("Ｈello, wörld! 你好2024年") == ["ｈello", "wörld", "你好2024年"]


class TestSimprint:
    """Fingerprints of texts."""

    def test_is_a_64_bit_int(self) -> None:
        """A fingerprint is an int in [0, 2**64)."""
        for text in UNRELATED:
            fp = simprint(text)
            assert isinstance(fp, int)
            assert 0 <= fp < 1 << 64

    def test_known_values(self) -> None:
        """Fingerprints are pinned: a change of features, hash or weights shows here."""
        assert simprint("Alpha, BETA; gamma!") == PINNED_LATIN
        assert simprint("alpha beta gamma") == PINNED_LATIN
        assert simprint("城市绿化工作会议") == PINNED_CJK

    def test_same_in_another_process(self) -> None:
        """The fingerprint does not depend on the process (no salted hash())."""
        code = "from nshash.text.simprint import simprint; import sys; print(simprint(sys.argv[1]))"
        env = {**os.environ, "PYTHONHASHSEED": "12345"}
        for text in (ZH, EN):
            out = subprocess.run(
                [sys.executable, "-c", code, text], env=env, capture_output=True, text=True
            )
            assert out.returncode == 0, out.stderr
            assert int(out.stdout) == simprint(text)

    def test_folding(self) -> None:
        """Full-width forms, case, punctuation, spacing and traditional script do not count."""
        assert simprint("ＣＩＴＹ Council，approved") == simprint("city council approved")
        assert simprint("城市綠化工作會議") == simprint("城市绿化工作会议")
        assert simprint(EN.replace(". ", ".\n\n")) == simprint(EN)

    def test_html_reduced_to_text(self) -> None:
        """Markup is not part of the text."""
        assert simprint(f"<div><p>{EN}</p></div>") == simprint(EN)

    @given(st.permutations(["parks", "council", "garden", "river", "bridge", "school", "road"]))
    def test_word_order_of_equal_counts(self, order: list[str]) -> None:
        """Ties among equally frequent words are broken by hash, not by position."""
        words = ["market", "market", "market", *order, *order]
        assert simprint(" ".join(words), top=4) == simprint(" ".join(sorted(words)), top=4)

    def test_near_copies_within_k(self) -> None:
        """A repost with an attribution line, a changed figure or a dropped stop word stays
        within k (on a short text a typo in one of its few words may not: see the benchmark)."""
        for text, edited in (
            (ZH, "来源：本报\n" + ZH),
            (ZH, ZH.replace("三十处", "三十多处")),
            (EN, EN.replace("The parks", "Parks")),
            (EN, "Editor: J. Smith\n" + EN.replace("Monday", "Tuesday")),
        ):
            assert hamming(simprint(text), simprint(edited)) <= DEFAULT_K

    def test_unrelated_texts_far(self) -> None:
        """Unrelated texts are more than k bits apart."""
        fps = [simprint(t) for t in UNRELATED]
        for i, a in enumerate(fps):
            for b in fps[i + 1 :]:
                assert hamming(a, b) > DEFAULT_K

    def test_top_selects_features(self) -> None:
        """top=0 takes every feature; a text with fewer features than top ignores it."""
        assert simprint("one two three", top=0) == simprint("one two three", top=TOP)
        assert simprint(EN, top=0) != simprint(EN, top=3)

    def test_features_count_words_and_bigrams(self) -> None:
        """Words (without stop words) and CJK bigrams are the features, with their counts."""
        ids, counts = features("the park the park 公园公园")
        # park x2; bigrams 公园 x2 and 园公 x1
        assert sorted(counts.tolist()) == [1, 2, 2]
        assert len(ids) == 3

    def test_stop_words_only(self) -> None:
        """A text of stop words alone still has a fingerprint (the whole text)."""
        assert simprint("the and of") != simprint("the or of")

    @pytest.mark.parametrize("text", ["", "   ", "!!! ...", "\n\t"])
    def test_empty(self, text: str) -> None:
        """A text without letters or digits has no fingerprint."""
        with pytest.raises(EmptyDocumentError):
            simprint(text)

    @pytest.mark.parametrize("bad", [None, b"bytes", 3])
    def test_not_a_str(self, bad: object) -> None:
        """Only a str can be fingerprinted."""
        with pytest.raises(ConfigError, match="must be a str"):
            simprint(bad)  # type: ignore[arg-type]

    @pytest.mark.parametrize("top", [-1, 1.5, True])
    def test_bad_top(self, top: object) -> None:
        """top must be a non-negative int."""
        with pytest.raises(ConfigError, match="top must be"):
            simprint(EN, top=top)  # type: ignore[arg-type]


#: Values of this version; a change of features, hash or weights must change them on purpose
#: (the stores keep fingerprints, so old ones would stop matching new documents).
PINNED_LATIN = 0x263E76070A230658
PINNED_CJK = 0x06B175163AF30D5B


class TestHamming:
    """The distance of two fingerprints."""

    def test_values(self) -> None:
        """Bits that differ are counted."""
        assert hamming(0, 0) == 0
        assert hamming(0b1011, 0) == 3
        assert hamming((1 << 64) - 1, 0) == 64

    @pytest.mark.parametrize("bad", [-1, 1 << 64, "1", 1.0, True])
    def test_bad(self, bad: object) -> None:
        """Anything but an int in [0, 2**64) is refused."""
        with pytest.raises(ConfigError, match="fingerprint"):
            hamming(bad, 0)  # type: ignore[arg-type]


def _flip(fp: int, bits: list[int]) -> int:
    for b in bits:
        fp ^= 1 << b
    return fp


fingerprints = st.integers(min_value=0, max_value=(1 << 64) - 1)


class TestIndexKeys:
    """Manku's block scheme: keys shared by every pair within k bits."""

    @pytest.mark.parametrize(("k", "blocks"), [(3, None), (3, 4), (3, 6), (1, 2), (2, 5), (4, 6)])
    def test_layout(self, k: int, blocks: int | None) -> None:
        """C(blocks, k) keys, one per table, each below 2**64 and unique to its table."""
        b = blocks or k + 2
        keys = index_keys(0x0123456789ABCDEF, k, blocks)
        assert len(keys) == comb(b, k) == len(index_layout(k, blocks))
        assert all(0 <= key < 1 << 64 for key in keys)
        assert [key >> 56 for key in keys] == list(range(len(keys)))

    @settings(max_examples=300)
    @given(
        fingerprints,
        st.lists(st.integers(0, 63), max_size=DEFAULT_K, unique=True),
        st.sampled_from([None, 4, 5, 6]),
    )
    def test_within_k_share_a_key(self, fp: int, bits: list[int], blocks: int | None) -> None:
        """Two fingerprints at most k bits apart share at least one key."""
        other = _flip(fp, bits)
        assert set(index_keys(fp, DEFAULT_K, blocks)) & set(index_keys(other, DEFAULT_K, blocks))

    @settings(max_examples=60, deadline=None)
    @given(st.integers(0, 2**32), st.integers(1, 4), st.integers(0, 3))
    def test_matches_brute_force(self, seed: int, k: int, extra: int) -> None:
        """Looking up the keys finds exactly the filed fingerprints a full scan finds."""
        blocks = k + 1 + extra
        rng = random.Random(seed)
        base = [rng.getrandbits(64) for _ in range(5)]
        filed = base + [
            _flip(rng.choice(base), rng.sample(range(64), rng.randint(1, k + 2))) for _ in range(60)
        ]
        index: dict[int, set[int]] = {}
        for fp in filed:
            for key in index_keys(fp, k, blocks):
                index.setdefault(key, set()).add(fp)
        for query in [*filed[:20], _flip(base[0], rng.sample(range(64), k))]:
            found = {
                fp
                for key in index_keys(query, k, blocks)
                for fp in index.get(key, ())
                if hamming(fp, query) <= k
            }
            assert found == {fp for fp in filed if hamming(fp, query) <= k}

    @pytest.mark.parametrize(
        ("k", "blocks"), [(0, None), (17, None), (3, 3), (3, 65), (3, 20), ("3", None), (3, True)]
    )
    def test_bad_layout(self, k: object, blocks: object) -> None:
        """k and blocks out of range (or keys that would not fit 64 bits) are refused."""
        with pytest.raises(ConfigError):
            index_keys(0, k, blocks)  # type: ignore[arg-type]

    def test_bad_fingerprint(self) -> None:
        """Only a 64-bit unsigned int has keys."""
        with pytest.raises(ConfigError, match="fingerprint"):
            index_keys(1 << 64)


A = 0x0123456789ABCDEF
B = _flip(A, [0, 1, 2, 3, 4, 5])  # 6 bits from A
C = _flip(A, [0, 1, 2])  # 3 from A, 3 from B
FAR = A ^ ((1 << 64) - 1)


class TestWithTheMethod:
    """The fingerprints through :class:`nshash.SimhashDedup` (its groups are tested in
    ``test_simhash_dedup`` and ``test_method_contract``)."""

    def test_texts_end_to_end(self) -> None:
        """Reposts of a story share a group; unrelated texts each get their own."""
        with SimhashDedup.open("memory://") as sd:
            ids = [sd.add(text).similar_id for text in UNRELATED]
            assert ids == list(range(1, len(UNRELATED) + 1))
            assert sd.add("来源：本报\n" + ZH).similar_id == 1
            assert sd.add(EN.upper()).similar_id == 2
