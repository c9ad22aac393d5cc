"""The text pipeline: normalization, sentence splitting, keys, anchors, sketches, hashes."""

from __future__ import annotations

import hashlib
import unicodedata

import farmhash
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nshash import ConfigError, EmptyDocumentError, Fingerprinter, normalize_key, normalize_text
from nshash.text.fingerprint import split_sentences
from nshash.text.normalize import fold_keys, strip_key, to_simplified

#: Text that mixes what crawled articles hold: CJK, Latin, full-width forms, punctuation of both
#: widths, zero-width and control characters, line breaks of every kind, and any code point.
texts = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from("。！？；，、：.!?;,\n\r\u2028\u200b\u3000 ＡＢ１２資訊國發ßİ㎒⑴가"),
    ),
    max_size=200,
)


class TestNormalizeKey:
    def test_folds_width_script_case_and_punctuation(self) -> None:
        """Full-width, traditional, upper-case and punctuated forms give one key."""
        assert normalize_key("２０２４年，資訊 Ｎｅｗｓ！") == "2024年资讯news"
        assert normalize_key("2024年资讯NEWS") == "2024年资讯news"

    def test_casefolds_beyond_ascii(self) -> None:
        """Casefolding, not lowercasing: ß and SS meet."""
        assert normalize_key("Straße") == normalize_key("STRASSE") == "strasse"

    def test_drops_invisible_and_control_characters(self) -> None:
        """Zero-width spaces and controls never change a key."""
        assert normalize_key("新\u200b闻\x00报\ufeff道") == "新闻报道"

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(texts)
    def test_idempotent(self, text: str) -> None:
        """A key is its own key."""
        key = normalize_key(text)
        assert normalize_key(key) == key
        assert key == "" or key.isalnum()

    def test_a_supplementary_traditional_character_folds_alone_too(self) -> None:
        """U+25F56 (OpenCC: U+25E87) was converted only in a text holding another traditional
        character, so its key depended on the rest of the text (hypothesis found it)."""
        assert normalize_key("\U00025f56") == "\U00025e87"
        assert fold_keys("\U00025f56\n\u8cc7").split("\n") == ["\U00025e87", "\u8d44"]
        assert to_simplified("abc \U00025f56") == "abc \U00025e87"
        assert to_simplified("abc \U0001f600") == "abc \U0001f600"  # past the BMP, not one

    def test_the_character_classes_list_no_supplementary_character(self) -> None:
        """CPython's regex engine reads a class that lists characters past the BMP one by one
        in a slow path on every character scanned: with the 900 supplementary ideographs
        listed, the scans for traditional characters and for work to do took about a hundred
        times as long, and the text path of a Chinese document twice as long (callgrind,
        bench_instructions.py). They are found apart, in the same answers."""
        from nshash.text import normalize

        bmp_only, beyond = normalize._traditional()
        assert max(bmp_only.pattern) <= "\uffff" and "\U00025f56" in beyond
        work = normalize._needs_work().pattern
        assert work.endswith("\U00010000-\U0010ffff]")
        assert max(work[: -len("\U00010000-\U0010ffff]")]) <= "\uffff"

    @settings(max_examples=200, deadline=None)
    @given(st.lists(texts, min_size=1, max_size=6))
    def test_fold_keys_equals_per_key(self, parts: list[str]) -> None:
        """Folding many stripped keys at once equals folding each one."""
        stripped = [strip_key(p.replace("\n", " ")) for p in parts]
        assert fold_keys("\n".join(stripped)).split("\n") == [
            normalize_key(p.replace("\n", " ")) for p in parts
        ]


class TestNormalizeText:
    def test_keeps_layout_folds_the_rest(self) -> None:
        """Line breaks unify, widths fold, zero-width characters go."""
        assert normalize_text("ＡＢＣ\r\n資訊\u200b！") == "abc\n资讯!"

    @settings(max_examples=300, deadline=None)
    @given(texts)
    def test_idempotent(self, text: str) -> None:
        """Normalizing normalized text changes nothing."""
        once = normalize_text(text)
        assert normalize_text(once) == once
        assert unicodedata.is_normalized("NFKC", once)


class TestSplitSentences:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("第一句。第二句！第三句？", ["第一句", "第二句", "第三句"]),
            ("Pi is 3.14. Next one", ["Pi is 3.14", " Next one"]),
            ("See example.com now.", ["See example.com now"]),
            ("甲；乙\n丙\r\n丁", ["甲", "乙", "丙", "丁"]),
            ('He said "stop." Then left', ['He said "stop', '" Then left']),
            ("第一句.第二句约3.5米.", ["第一句", "第二句约3.5米"]),
        ],
    )
    def test_split(self, text: str, expected: list[str]) -> None:
        """Sentence ends split; a period inside a number or a name does not."""
        assert split_sentences(text) == expected

    def test_empty_delimiters_refused(self) -> None:
        """An empty delimiter set is a configuration error."""
        with pytest.raises(ConfigError):
            split_sentences("x", delimiters="")


LONG = [
    "江城地铁五号线今天上午正式开通运营全长二十八公里共设二十二座车站",
    "首班列车早上六点从南湖站发车沿途连接老城区高新区和江北火车站",
    "市交通局介绍开通后通勤时间将由一个多小时缩短到四十分钟",
    "开通首日不少市民专程赶来体验",
    "短句",
]


#: A long article to cut and copy (written for these tests).
ZH_ARTICLE = (
    "江城地铁五号线今天上午正式开通运营，线路全长二十八公里，共设车站二十二座。"
    "首班列车早上六点从南湖站发车，沿途经过老城区、高新区和江北新区。"
    "市交通部门介绍，新线开通后，江北居民进城的时间将从一个多小时缩短到四十分钟。"
    "为方便市民出行，开通首月全线实行半价优惠，老人和学生凭证件免费乘车。"
    "运营公司表示，高峰时段列车间隔为四分钟，平峰时段为七分钟，末班车晚上十一点发出。"
    "开通首日，不少市民专程赶来体验，车站内秩序井然，志愿者在各个出入口引导乘客。"
    "据悉，五号线二期工程已经开工建设，预计三年后通车，届时将与机场快线实现换乘。"
)


class TestFingerprinter:
    def test_keys_longest_first(self) -> None:
        """Keys come longest first, short sentences dropped, ties in text order."""
        keys = Fingerprinter(min_length=10).keys("。".join(LONG))
        assert keys == sorted(LONG[:4], key=len, reverse=True)

    def test_punctuation_and_width_do_not_change_fingerprints(self) -> None:
        """A repost with other punctuation, widths, spacing and script hashes the same."""
        f = Fingerprinter()
        a = f.prepare("江城地铁5号线今天上午正式开通运营，全长二十八公里。首班列车早上六点发车！")
        b = f.prepare("江城地铁５号线 今天上午正式開通運營,全長二十八公里.\n首班列車早上六點發車!")
        assert a == b

    def test_anchors_are_farmhash_of_shingles(self) -> None:
        """Anchors are farmhash.fingerprint64 of shingles of the stream (stable across versions)."""
        text = "。".join(LONG) + "。"
        doc = Fingerprinter().prepare(text)
        stream = "".join(LONG)
        shingles = {stream[i:j] for i in range(len(stream)) for j in (i + 8,)}
        by_hash = {farmhash.fingerprint64(s): s for s in shingles if len(s) == 8}
        assert len(doc.sentences) == 16 + 8
        assert all(h in by_hash for h in doc.sentences)
        assert doc.exact == farmhash.fingerprint64(stream)

    def test_short_text_is_its_own_anchor(self) -> None:
        """A text lighter than one shingle has its whole key as the one anchor."""
        doc = Fingerprinter().prepare("短句。")
        assert doc.sentences == (farmhash.fingerprint64("短句"),) == (doc.exact,)
        assert len(doc.sketch) == 1

    def test_md5(self) -> None:
        """md5 stays available: the first 8 bytes of the digest, big-endian."""
        doc = Fingerprinter(hashfunc="md5").prepare("短句。")
        digest = hashlib.md5("短句".encode()).digest()[:8]
        assert doc.sentences == (int.from_bytes(digest, "big"),)

    def test_line_breaks_do_not_change_fingerprints(self) -> None:
        """A copy re-wrapped at any width fingerprints like the original."""
        text = "".join(LONG)
        f = Fingerprinter()
        for width in (7, 13, 30):
            wrapped = "\n".join(text[i : i + width] for i in range(0, len(text), width))
            assert f.prepare(wrapped) == f.prepare(text)

    def test_truncated_copy_keeps_anchors(self) -> None:
        """A third of the text still holds some of the whole text's anchors and its sketch."""
        f = Fingerprinter()
        whole = f.prepare(ZH_ARTICLE)
        part = f.prepare(ZH_ARTICLE[: len(ZH_ARTICLE) // 3])
        assert set(part.sentences) & set(whole.sentences)
        assert set(part.sketch) <= set(whole.sketch)

    def test_sketch_is_sorted_and_cut(self) -> None:
        """The sketch is ascending; past sketch_size values the limit is the first dropped."""
        f = Fingerprinter(sketch_size=4)
        whole = Fingerprinter().prepare(ZH_ARTICLE)
        cut = f.prepare(ZH_ARTICLE)
        assert list(whole.sketch) == sorted(whole.sketch) and len(whole.sketch) > 4
        assert cut.sketch == whole.sketch[:4] and cut.limit == whole.sketch[4]
        assert all(v < 2**53 for v in whole.sketch)

    def test_short_text_keyed_whole(self) -> None:
        """With no sentence long enough, the whole text is the one key."""
        f = Fingerprinter(min_length=10)
        assert f.keys("你好。世界！") == ["你好世界"]

    def test_whole_text_key_is_normalized(self) -> None:
        """Joining short sentences into one key folds again (jamo across a break compose)."""
        assert Fingerprinter().keys("\u1100。\u1161") == ["\uac00"]

    def test_n_limits_fingerprints(self) -> None:
        """fingerprints() gives at most n anchors."""
        assert len(Fingerprinter(n=2).fingerprints("。".join(LONG))) == 2

    @pytest.mark.parametrize("text", ["", "   \n\t", "，。！？…", "\u200b\u200b"])
    def test_empty_document(self, text: str) -> None:
        """No letters or digits: EmptyDocumentError, never a fingerprint."""
        with pytest.raises(EmptyDocumentError):
            Fingerprinter().prepare(text)

    def test_not_a_string(self) -> None:
        """Bytes or None are a ConfigError, not a crash."""
        with pytest.raises(ConfigError, match="str"):
            Fingerprinter().prepare(b"bytes")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"n": 0},
            {"min_length": -1},
            {"hashfunc": "sha1"},
            {"n": True},
            {"delimiters": ""},
            {"html": "yes"},
            {"sketch_rate": 6},
            {"shingle": 0},
        ],
    )
    def test_bad_configuration(self, kwargs: dict[str, object]) -> None:
        """Out-of-range or unknown settings raise ConfigError."""
        with pytest.raises(ConfigError):
            Fingerprinter(**kwargs)  # type: ignore[arg-type]

    def test_sketch_follows_length(self) -> None:
        """A text four times as long has about four times the sketch values."""
        f = Fingerprinter()
        quarter = f.prepare(ZH_ARTICLE[: len(ZH_ARTICLE) // 4])
        whole = f.prepare(ZH_ARTICLE)
        assert 2 * len(quarter.sketch) < len(whole.sketch)

    def test_html_keys_like_plain_text(self) -> None:
        """A copy stored with its markup and entities fingerprints like the plain text."""
        plain = "。".join(LONG[:3]) + "。"
        marked = "<div><p>" + "。</p><p>".join(LONG[:3]) + "。</p><script>var x=1;</script></div>"
        f = Fingerprinter()
        assert f.prepare(marked.replace("五号线", "五&#21495;线")) == f.prepare(plain)
        assert Fingerprinter(html=False).prepare(marked) != f.prepare(plain)

    def test_angle_brackets_are_not_markup(self) -> None:
        """Text with '<' that holds no tag is left alone."""
        f = Fingerprinter()
        assert f.keys("如果 a<b 且 b>c 那么 a 与 c 的关系还需要另外判断。") == [
            "如果ab且bc那么a与c的关系还需要另外判断"
        ]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(texts)
    def test_any_unicode(self, text: str) -> None:
        """Arbitrary Unicode either fingerprints or raises EmptyDocumentError, nothing else."""
        f = Fingerprinter()
        try:
            doc = f.prepare(text)
        except EmptyDocumentError:
            # U+A66E stands for sentence ends while keying (documented): it counts as a break.
            assert normalize_key(text.replace("\ua66e", "")) == ""
            return
        assert doc.sentences and doc.sketch
        assert all(0 <= h < 2**64 for h in (*doc.sentences, *doc.sketch, doc.exact))
        # Every key is already normalized, and the text's normalized form keys the same, except
        # where a symbol that is not a letter or digit becomes one under NFKC ("㎒" -> "MHz"):
        # keys keep letters and digits as written, so such symbols drop out before folding.
        assert all(normalize_key(k) == k for k in f.keys(text))
        if all(_alnum_stable(c) for c in text):
            assert f.prepare(normalize_text(text)).exact == doc.exact


def _alnum_stable(char: str) -> bool:
    folded = unicodedata.normalize("NFKC", char)
    return char.isalnum() == any(c.isalnum() for c in folded)
