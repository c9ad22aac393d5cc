"""The similarity toolkit: words, known values, edge cases and properties of every measure."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator

import farmhash
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nshash import ConfigError
from nshash.text.tokenize import STOP_WORDS, words
from nshash.toolkit import similarity
from nshash.toolkit.similarity import (
    METRICS,
    common_words,
    compare,
    cosine,
    euclidean,
    hamming_distance,
    levenshtein,
    simhash,
    simhash_fingerprint,
    tfidf_cosine,
    tfidf_weights,
)

# Seed 000's sentences as word lists whose count vectors over the vocabulary
# (I, like, watch, TV, movies, not, also) are [1, 2, 2, 1, 1, 1, 0] and [1, 2, 2, 1, 1, 2, 1].
SEED_A = "I like watch TV, not like watch movies"
SEED_B = "I not like watch TV, also not like watch movies"
SEED_VOCABULARY = ["i", "like", "watch", "tv", "movies", "not", "also"]
# The same in Chinese, segmented by spaces as the seed segments it: 我/喜欢/看/电视 ...
SEED_ZH_A = "我 喜欢 看 电视，不 喜欢 看 电影"
SEED_ZH_B = "我 不 喜欢 看 电视，也 不 喜欢 看 电影"
SEED_ZH_VOCABULARY = ["我", "喜欢", "看", "电视", "电影", "不", "也"]

ENGLISH = (
    "The city council approved a new budget for public libraries on Tuesday evening. "
    "Opening hours will grow by ten hours a week at every branch, the mayor said."
)
CHINESE = "市议会周二晚间批准了公共图书馆的新预算。市长表示，每个分馆的开放时间每周将增加十小时。"
SAMPLES = [ENGLISH, CHINESE, ENGLISH + "\n" + CHINESE, "iPhone手机 3.14 don't", "a"]

FUNCTIONS: dict[str, Callable[[str, str], float]] = {
    "cosine": cosine,
    "tfidf_cosine": tfidf_cosine,
    "simhash": simhash,
    "euclidean": euclidean,
    "common_words": common_words,
    "levenshtein": levenshtein,
}


@pytest.fixture(scope="module", autouse=True)
def _warm() -> Iterator[None]:
    """Load jieba and its IDF table once, so that no hypothesis example pays for it."""
    compare(CHINESE, ENGLISH)
    yield


class TestWords:
    def test_normalized_like_fingerprints(self) -> None:
        """Full-width letters, traditional script and case fold to the same words."""
        assert words("ＮＥＷＳ 資訊新聞") == words("news 资讯新闻")

    def test_chinese_cut_by_jieba(self) -> None:
        """Chinese runs are cut into jieba's words, Latin runs stay whole beside them."""
        assert words("iPhone手机降价了") == ["iphone", "手机", "降价", "了"]

    def test_latin_words(self) -> None:
        """Apostrophes stay inside a word; hyphens, periods and underscores split."""
        expected = ["don't", "e", "mail", "me", "now", "3", "14"]
        assert words("Don\u2019t e-mail me_now 3.14") == expected

    def test_stop_words_optional(self) -> None:
        """stop_words=True drops the built-in list in both languages; by default all stay."""
        assert words("the cat 的 电视", stop_words=True) == ["cat", "电视"]
        assert words("the cat 的 电视") == ["the", "cat", "的", "电视"]
        assert {"the", "of", "的", "了"} <= STOP_WORDS

    def test_not_a_str(self) -> None:
        """A text that is not a str raises ConfigError naming its type."""
        with pytest.raises(ConfigError, match="'bytes'") as info:
            words(b"bytes")  # type: ignore[arg-type]
        assert info.type is ConfigError

    def test_jieba_lazy_and_silent(self) -> None:
        """Latin text never imports jieba; Chinese text loads it without a word on stderr."""
        code = (
            "import sys\n"
            "from nshash.toolkit.similarity import compare\n"
            "compare('latin only', 'words here', ['cosine', 'common_words', 'levenshtein'])\n"
            "assert 'jieba' not in sys.modules, 'jieba imported for Latin text'\n"
            "compare('我喜欢看电视', '我不喜欢看电影')\n"
            "assert 'jieba' in sys.modules\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""


class TestKnownValues:
    def test_seed_vectors(self) -> None:
        """Seed 000's count vectors give a cosine of 0.938, an angle of about 20.3 degrees."""
        counts_a, counts_b = Counter(words(SEED_A)), Counter(words(SEED_B))
        assert [counts_a[w] for w in SEED_VOCABULARY] == [1, 2, 2, 1, 1, 1, 0]
        assert [counts_b[w] for w in SEED_VOCABULARY] == [1, 2, 2, 1, 1, 2, 1]
        score = cosine(SEED_A, SEED_B, stop_words=False)
        assert score == pytest.approx(13 / math.sqrt(12 * 16))
        assert round(score, 3) == 0.938
        # The seed rounds 20.25 degrees to "about 20.3".
        assert math.degrees(math.acos(score)) == pytest.approx(20.25, abs=0.005)

    def test_seed_vectors_chinese(self) -> None:
        """The seed's Chinese sentences, segmented as the seed does, give the same cosine."""
        counts_a, counts_b = Counter(words(SEED_ZH_A)), Counter(words(SEED_ZH_B))
        assert [counts_a[w] for w in SEED_ZH_VOCABULARY] == [1, 2, 2, 1, 1, 1, 0]
        assert [counts_b[w] for w in SEED_ZH_VOCABULARY] == [1, 2, 2, 1, 1, 2, 1]
        assert round(cosine(SEED_ZH_A, SEED_ZH_B, stop_words=False), 3) == 0.938

    def test_stop_words_change_cosine(self) -> None:
        """By default stop words do not count: without 'I' and 'not' the vectors change."""
        default = cosine(SEED_A, SEED_B)
        # left: like 2, watch 2, tv 1, movies 1; right: the same plus also 1
        assert default == pytest.approx(10 / math.sqrt(10 * 11))

    def test_common_words_counts_occurrences(self) -> None:
        """Shared occurrences over the longer text's words: 2 of 3, where distinct would say 1."""
        assert common_words("cat cat dog", "cat dog dog") == pytest.approx(2 / 3)
        assert common_words("cat dog", "cat dog dog bird") == pytest.approx(2 / 4)

    def test_euclidean_on_unit_vectors(self) -> None:
        """A text and itself repeated score 1.0; texts without common words 1/(1+sqrt 2)."""
        assert euclidean("red fish blue", "red fish blue red fish blue") == pytest.approx(1.0)
        assert euclidean("red fish", "green bird") == pytest.approx(1 / (1 + math.sqrt(2)))

    def test_levenshtein_ratio(self) -> None:
        """1 - d/max(len): kitten and sitting are 3 edits apart over 7 characters."""
        assert levenshtein("kitten", "sitting") == pytest.approx(1 - 3 / 7)
        assert levenshtein("ＫＩＴＴＥＮ", "kitten") == 1.0

    def test_levenshtein_folds_white_space(self) -> None:
        """Line wrapping and repeated spaces are no edit."""
        assert levenshtein("one two\nthree", "one  two three\n") == 1.0

    def test_tfidf_weights_from_jieba_table(self) -> None:
        """A Chinese word weighs count times jieba's IDF; Latin and unknown words the median."""
        import jieba.analyse

        table = jieba.analyse.default_tfidf.idf_freq
        median = jieba.analyse.default_tfidf.median_idf
        weights = tfidf_weights("电视 电视 的 news 龘")
        assert weights == pytest.approx({"电视": 2 * table["电视"], "news": median, "龘": median})
        assert "龘" not in table

    def test_tfidf_cosine_discounts_common_words(self) -> None:
        """Sharing a rare word counts more under TF-IDF than sharing a frequent one."""
        shared_rare = tfidf_cosine("电视 中国", "电视 发展")
        shared_common = tfidf_cosine("电视 中国", "电影 中国")
        assert shared_rare > shared_common

    def test_simhash_single_word_is_its_hash(self) -> None:
        """A one-word text's simhash is the word's farmhash.fingerprint64."""
        assert simhash_fingerprint("nshash") == farmhash.fingerprint64("nshash")

    def test_simhash_weighted_vote(self) -> None:
        """Each bit follows the heavier word: 'apple' twice outvotes 'pear' once on every bit."""
        assert simhash_fingerprint("apple pear apple") == farmhash.fingerprint64("apple")

    def test_simhash_score_is_hamming(self) -> None:
        """simhash(a, b) is 1 - d/64 with d the Hamming distance of the fingerprints."""
        a, b = ENGLISH, ENGLISH.replace("libraries", "museums")
        d = hamming_distance(simhash_fingerprint(a), simhash_fingerprint(b))
        assert simhash(a, b) == 1 - d / 64

    def test_simhash_stable_across_processes(self) -> None:
        """A fingerprint does not depend on the process's hash seed."""
        code = (
            "import sys\n"
            "from nshash.toolkit.similarity import simhash_fingerprint\n"
            "print(simhash_fingerprint(sys.argv[1]))\n"
        )
        seed = "1" if os.environ.get("PYTHONHASHSEED") != "1" else "2"
        done = subprocess.run(
            [sys.executable, "-c", code, CHINESE + ENGLISH],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert done.returncode == 0, done.stderr
        assert int(done.stdout) == simhash_fingerprint(CHINESE + ENGLISH)

    def test_hamming_distance(self) -> None:
        """The number of differing bits of two 64-bit integers."""
        assert hamming_distance(0, 2**64 - 1) == 64
        assert hamming_distance(0b1011, 0b0110) == 3
        assert hamming_distance(12345, 12345) == 0

    @pytest.mark.parametrize("bad", [-1, 2**64, "1", 1.0, True])
    def test_hamming_distance_rejects(self, bad: object) -> None:
        """A value that is not a 64-bit unsigned int raises ConfigError quoting it."""
        with pytest.raises(ConfigError, match=r"\[0, 2\*\*64\)") as info:
            hamming_distance(bad, 0)  # type: ignore[arg-type]
        assert info.type is ConfigError
        assert repr(bad) in str(info.value)


class TestEdges:
    @pytest.mark.parametrize("text", SAMPLES)
    def test_identical_score_one(self, text: str) -> None:
        """Identical texts score exactly 1.0 on every measure and share a simhash."""
        assert compare(text, text) == dict.fromkeys(METRICS, 1.0)
        assert simhash_fingerprint(text) == simhash_fingerprint(str(text))

    def test_equal_after_normalization_score_one(self) -> None:
        """Texts equal after normalization (width, case, script) score 1.0 everywhere."""
        assert compare("ＮＥＷＳ：資訊新聞。", "news:资讯新闻。") == dict.fromkeys(METRICS, 1.0)

    @pytest.mark.parametrize(
        ("a", "b"),
        [("red fish swims", "green bird flies"), ("我喜欢看电视", "下雨天出门带伞")],
    )
    def test_disjoint_score_zero(self, a: str, b: str) -> None:
        """Texts without a common word score 0 on cosine, TF-IDF cosine and common words."""
        scores = compare(a, b)
        assert scores["cosine"] == 0.0
        assert scores["tfidf_cosine"] == 0.0
        assert scores["common_words"] == 0.0
        assert scores["euclidean"] == pytest.approx(1 / (1 + math.sqrt(2)))

    def test_both_empty(self) -> None:
        """Two empty (or blank) texts are equal: 1.0 on every measure."""
        assert compare("", "") == dict.fromkeys(METRICS, 1.0)
        assert compare(" \n", "\t") == dict.fromkeys(METRICS, 1.0)

    def test_one_empty(self) -> None:
        """A text without words against one with words scores 0.0 on every word measure."""
        assert compare("", ENGLISH) == dict.fromkeys(METRICS, 0.0)
        scores = compare(ENGLISH, "!!! ...")
        assert 0.0 < scores.pop("levenshtein") < 0.05  # characters: the periods match
        assert scores == dict.fromkeys(scores, 0.0)

    def test_wordless_texts(self) -> None:
        """Texts without words score 1.0 when equal after normalization, else 0.0."""
        assert compare("!!!", "！！！") == dict.fromkeys(METRICS, 1.0)
        assert compare("!!!", "???") == dict.fromkeys(METRICS, 0.0)

    def test_only_stop_words(self) -> None:
        """Texts of stop words only keep them, so they still compare word by word."""
        scores = compare("To be, or not to be", "to be or not to be!")
        assert scores["cosine"] == 1.0
        assert scores["common_words"] == 1.0
        assert scores["tfidf_cosine"] == 1.0
        assert simhash_fingerprint("to be or not") != 0

    def test_stop_words_off(self) -> None:
        """stop_words=False counts function words, so sharing only them scores above 0."""
        assert cosine("the cat", "the dog") == 0.0
        assert cosine("the cat", "the dog", stop_words=False) == pytest.approx(0.5)

    def test_functions_match_compare(self) -> None:
        """Each measure's function gives what compare reports for it."""
        a, b = ENGLISH, ENGLISH[:80] + CHINESE
        scores = compare(a, b)
        for name, function in FUNCTIONS.items():
            assert function(a, b) == scores[name]

    @pytest.mark.parametrize("name", METRICS)
    @pytest.mark.parametrize("bad", [None, b"text", 42])
    def test_not_a_str(self, name: str, bad: object) -> None:
        """A text that is not a str raises ConfigError, in either position."""
        for a, b in ((bad, "text"), ("text", bad)):
            with pytest.raises(ConfigError, match="must be a str") as info:
                FUNCTIONS[name](a, b)  # type: ignore[arg-type]
            assert info.type is ConfigError
            with pytest.raises(ConfigError, match=type(bad).__name__):
                compare(a, b, [name])  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            simhash_fingerprint(bad)  # type: ignore[arg-type]


class TestMetrics:
    def test_all_by_default(self) -> None:
        """Without metrics, compare reports every measure in METRICS order."""
        assert list(compare("a b", "b c")) == list(METRICS)
        assert METRICS == (
            "cosine",
            "tfidf_cosine",
            "simhash",
            "euclidean",
            "common_words",
            "levenshtein",
        )

    def test_subset_in_order(self) -> None:
        """compare reports the asked measures in the asked order, once each."""
        scores = compare("a b", "b c", ["levenshtein", "cosine", "levenshtein"])
        assert list(scores) == ["levenshtein", "cosine"]

    def test_single_name(self) -> None:
        """A single metric name given as a str means that metric."""
        assert list(compare("a b", "b c", "simhash")) == ["simhash"]

    def test_unknown_metric(self) -> None:
        """An unknown name raises ConfigError quoting it and listing the valid names."""
        with pytest.raises(ConfigError) as info:
            compare("a", "b", ["cosine", "jaccard"])
        assert info.type is ConfigError
        message = str(info.value)
        assert "'jaccard'" in message
        assert all(name in message for name in METRICS)

    @pytest.mark.parametrize("bad", [[], (), 7, [None]])
    def test_bad_metrics(self, bad: object) -> None:
        """No metric, a non-list, or a name that is not a str raises ConfigError."""
        with pytest.raises(ConfigError) as info:
            compare("a", "b", bad)  # type: ignore[arg-type]
        assert info.type is ConfigError


_TEXT = st.text(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from("我喜欢看电视不也电影的了资訊 ab cd  .,!\n"),
    ),
    max_size=40,
)


class TestProperties:
    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(a=_TEXT, b=_TEXT)
    def test_symmetric_and_in_range(self, a: str, b: str) -> None:
        """Every measure is symmetric and lies in [0, 1] for arbitrary text."""
        forward, backward = compare(a, b), compare(b, a)
        assert forward == backward
        assert all(0.0 <= score <= 1.0 for score in forward.values())

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(a=_TEXT)
    def test_identical(self, a: str) -> None:
        """Any text compared with itself scores 1.0 on every measure."""
        assert compare(a, a) == dict.fromkeys(METRICS, 1.0)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(a=_TEXT, b=_TEXT)
    def test_stop_words_off_in_range(self, a: str, b: str) -> None:
        """With every word counted the measures stay symmetric and in [0, 1]."""
        forward = compare(a, b, stop_words=False)
        assert forward == compare(b, a, stop_words=False)
        assert all(0.0 <= score <= 1.0 for score in forward.values())


def test_module_exports() -> None:
    """Every name the module exports exists."""
    assert all(hasattr(similarity, name) for name in similarity.__all__)
