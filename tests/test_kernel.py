"""The compiled text kernel equals the pure-Python path, bit for bit, and either path can run."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nshash import ConfigError, EmptyDocumentError, Fingerprinter, NSHash, kernel_info
from nshash.methods.nshash.compiled import assign_info
from nshash.text.kernel import PURE_ENV

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("NSHASH_DATA_DIR", ROOT.parent / "shared" / "data"))
PURE = os.environ.get(PURE_ENV, "") not in ("", "0")

compiled = pytest.mark.skipif(
    kernel_info()["path"] != "compiled",
    reason=f"the compiled kernel is not active: {kernel_info()}",
)

#: Configurations the lead may tune: every parameter is passed to the kernel, none is fixed.
CONFIGS = [
    {},
    {"shingle": 3, "sketch_rate": 1, "sketch_size": 4, "n": 1, "max_sentences": 1},
    {"shingle": 40, "sketch_rate": 2, "sketch_size": 1000, "n": 4},
    {"shingle": 1, "sketch_rate": 16, "n": 30, "max_sentences": 64},
    {"hashfunc": "md5"},
    {"delimiters": "，,、:：\n", "html": False},
    {"delimiters": "。．a", "html": True},
    {"letter_units": 1},
    {"letter_units": 3, "shingle": 7},
    {"letter_units": 5, "shingle": 2, "sketch_rate": 1},
]

#: Characters that exercise every branch: sentence ends and the period rule, closing quotes,
#: white space, full-width forms, traditional script, combining marks, Hangul jamo that
#: compose across a break, characters past the BMP (kept and dropped), the sentinel letter,
#: roman numerals (NFKC lengthens them), and markup.
ALPHABET = st.one_of(
    st.sampled_from(list("。！？；!?;｡.．\n\r\u2028\u2029\x0b\x0c\x85 \t\u3000\"'”’)]")),
    st.sampled_from(list("ａｂＡＢ０１９＆＠中国资讯體資訊後臺乾隆里裏發髮〇々")),
    st.sampled_from(list("\u0301\u0308\u1100\u1161\u11a8가각\u3099か\u0b47\u0b3eéÉßİΣς")),
    st.sampled_from(list("\ua66e\U0001f600\U00020000\U0002f800\u2160\u2171ﬁ①㈱<>/p&;")),
    st.characters(),
    st.sampled_from(list("abcxyz0123 ABC")),
)
TEXTS = st.text(ALPHABET, max_size=300)


def _both(fp: Fingerprinter, text: str) -> tuple[object, object]:
    """The compiled and the pure answer (or the exception class each raised)."""
    answers = []
    for prepare in (fp.prepare, fp.prepare_pure):
        try:
            answers.append(prepare(text))
        except (EmptyDocumentError, UnicodeEncodeError) as exc:
            answers.append(type(exc))
    return answers[0], answers[1]


def _texts(name: str, limit: int) -> list[str]:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} is not available")
    out: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if len(out) >= limit:
                break
            record = json.loads(line)
            out.append(record.get("text") or record.get("content") or "")
    return out


class TestKernelInfo:
    def test_reports_a_path(self) -> None:
        """kernel_info names the active path and why."""
        info = kernel_info()
        assert info["path"] in ("compiled", "pure") and info["reason"]
        if PURE:
            assert info["path"] == "pure" and PURE_ENV in info["reason"]

    def test_ci_runs_the_compiled_kernel(self) -> None:
        """Under CI (a compiler is installed there) both extensions are built and active."""
        if not os.environ.get("CI") or PURE:
            pytest.skip("only under CI, without NSHASH_PURE")
        assert kernel_info()["path"] == "compiled", kernel_info()
        assert assign_info()["path"] == "compiled", assign_info()

    @pytest.mark.parametrize("pure", ["1", "0"])
    def test_env_var_and_version(self, pure: str) -> None:
        """NSHASH_PURE=1 forces the pure path, and ``nshash --version`` says which runs."""
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{PURE_ENV: pure})
        done = subprocess.run(
            [sys.executable, "-m", "nshash", "--version"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("nshash ") and "text path: " in done.stdout
        if pure == "1":
            assert "text path: pure" in done.stdout and "assignment: pure" in done.stdout
        elif not PURE:  # this process runs with the same build: it must agree
            assert f"text path: {kernel_info()['path']}" in done.stdout
            assert f"assignment: {assign_info()['path']}" in done.stdout

    def test_pure_env_gives_the_same_fingerprints(self) -> None:
        """A process on the pure path computes what this one computes."""
        texts = ["第一句。第二句！Pi is 3.14. End", "資訊 Ｎｅｗｓ２０２４年，很长的一句话在这里。"]
        code = (
            "import json, sys; from nshash import Fingerprinter, kernel_info;"
            " assert kernel_info()['path'] == 'pure';"
            " f = Fingerprinter();"
            " print(json.dumps([list(map(list, (d.sentences, d.sketch))) + [d.exact, d.limit]"
            " for d in map(f.prepare, json.loads(sys.argv[1]))]))"
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT), **{PURE_ENV: "1"})
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(texts)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        f = Fingerprinter()
        mine = [
            [list(d.sentences), list(d.sketch), d.exact, d.limit] for d in map(f.prepare, texts)
        ]
        assert json.loads(done.stdout) == mine


@compiled
class TestEquivalence:
    @pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(map(str, c.values())))
    @settings(max_examples=40, deadline=None)
    @given(text=TEXTS)
    def test_arbitrary_unicode(self, config: dict[str, object], text: str) -> None:
        """Any text gets the same DocPrint (or the same error) on both paths."""
        fp = Fingerprinter(**config)  # type: ignore[arg-type]
        assert fp.compiled
        compiled_answer, pure_answer = _both(fp, text)
        assert compiled_answer == pure_answer

    @settings(max_examples=30, deadline=None)
    @given(text=TEXTS, repeat=st.integers(2, 40))
    def test_repeated_text(self, text: str, repeat: int) -> None:
        """Repeated passages (equal shingle hashes, long sketches) agree too."""
        fp = Fingerprinter(sketch_rate=2, sketch_size=64)
        compiled_answer, pure_answer = _both(fp, (text + "。") * repeat)
        assert compiled_answer == pure_answer

    @pytest.mark.parametrize(
        "name",
        [
            "zh_reposts_dev.jsonl.gz",
            "en_reposts_dev.jsonl.gz",
            "zh_hk_news.jsonl.gz",
            "zh_hot_dev.jsonl.gz",
            "en_hot_dev.jsonl.gz",
        ],
    )
    def test_real_articles(self, name: str) -> None:
        """Real articles (simplified, traditional, English, HTML) agree on both paths."""
        fp = Fingerprinter()
        for text in _texts(name, 200):
            compiled_answer, pure_answer = _both(fp, text)
            assert compiled_answer == pure_answer, text[:200]

    @pytest.mark.parametrize("units", [1, 3])
    def test_real_articles_with_other_letter_units(self, units: int) -> None:
        """Letters of another weight (1: the stores begun before 2) agree on both paths."""
        fp = Fingerprinter(letter_units=units)
        for name in ("en_reposts_dev.jsonl.gz", "zh_hk_news.jsonl.gz"):
            for text in _texts(name, 60):
                compiled_answer, pure_answer = _both(fp, text)
                assert compiled_answer == pure_answer, text[:200]

    @pytest.mark.parametrize("chars", [7999, 8000, 8001, 12000, 30000])
    def test_long_streams(self, chars: int) -> None:
        """Long streams (the pages whose sketches are cut to their smallest values) agree on
        both paths, in Latin letters, in CJK characters and in both."""
        rng = random.Random(chars)
        fp = Fingerprinter()
        latin = "".join(rng.choice("abcdefghij ") for _ in range(chars * 11 // 10))
        cjk = "".join(chr(0x4E00 + rng.randrange(300)) for _ in range(chars))
        for text in (latin, cjk, cjk[: chars // 2] + latin):
            compiled_answer, pure_answer = _both(fp, text)
            assert compiled_answer == pure_answer

    def test_same_decisions(self) -> None:
        """The same documents get the same groups whichever path fingerprints them."""
        texts = _texts("zh_hot_dev.jsonl.gz", 300) + _texts("en_hot_dev.jsonl.gz", 200)
        fast, slow = NSHash.open("memory://"), NSHash.open("memory://")
        slow.fingerprinter._kernel = None  # this instance runs the pure path
        assert fast.fingerprinter.compiled and not slow.fingerprinter.compiled
        ids = [(fast.add(t).similar_id, slow.add(t).similar_id) for t in texts if t.strip()]
        assert [a for a, _ in ids] == [b for _, b in ids]
        assert len({a for a, _ in ids}) < len(ids)  # some reposts were grouped

    def test_errors_are_the_pure_paths(self) -> None:
        """A non-str and a text without letters or digits raise what the pure path raises."""
        fp = Fingerprinter()
        with pytest.raises(ConfigError):
            fp.prepare(b"bytes")  # type: ignore[arg-type]
        with pytest.raises(EmptyDocumentError):
            fp.prepare("。！？ \n --- \U0001f600")

    def test_pickles(self) -> None:
        """A Fingerprinter sent to a worker process compiles its own kernel."""
        fp = pickle.loads(pickle.dumps(Fingerprinter(shingle=12)))
        assert fp.compiled and fp.shingle == 12
        assert fp.prepare("一段足够长的中文文字用来测试。") == fp.prepare_pure(
            "一段足够长的中文文字用来测试。"
        )

    def test_packed_docprint_reads_as_one_made_by_init(self) -> None:
        """A DocPrint the kernel made (anchors and sketch packed until first read) compares,
        hashes, pickles, prints and is replaced like one made by its __init__."""
        import dataclasses

        from nshash import DocPrint

        fp = Fingerprinter()
        text = "一段足够长的中文文字用来测试。第二句话在这里，还有一些别的文字。" * 4
        made = fp.prepare(text)
        plain = DocPrint(made.sentences, made.sketch, made.exact, made.limit, made.places)
        for doc in (fp.prepare(text), pickle.loads(pickle.dumps(fp.prepare(text)))):
            assert doc == plain and hash(doc) == hash(plain) and repr(doc) == repr(plain)
            assert doc.sketch == plain.sketch and doc.sentences == plain.sentences
        assert dataclasses.replace(fp.prepare(text), exact=1) == dataclasses.replace(plain, exact=1)
        assert fp.prepare(text) == fp.prepare_pure(text)
        with pytest.raises(AttributeError):
            made.no_such_field  # type: ignore[attr-defined]  # noqa: B018

    def test_packed_words_round_trip(self) -> None:
        """packed_words gives the kernel's own words, or packs a DocPrint made by __init__
        alike; from_packed makes back a DocPrint equal to the original that places alike."""
        from nshash import DocPrint, NSHash
        from nshash.text.fingerprint import from_packed, packed_words

        fp = Fingerprinter()
        text = "一段足够长的中文文字用来测试。第二句话在这里，还有一些别的文字。" * 4
        made = fp.prepare(text)
        words = packed_words(made)
        assert words is object.__getattribute__(made, "_packed")
        plain = DocPrint(made.sentences, made.sketch, made.exact, made.limit, made.places)
        assert packed_words(plain) == words
        back = from_packed(words, made.exact, made.limit, made.places)
        assert back == plain and back.sketch == plain.sketch
        assert pickle.loads(pickle.dumps(back)) == plain
        answers = []
        for doc in (plain, from_packed(words, made.exact, made.limit, made.places)):
            nsh = NSHash.open("memory://")
            first = nsh.add_prepared(doc, "a")
            again = nsh.add_prepared(from_packed(words, made.exact, made.limit, made.places), "b")
            answers.append(
                (first.similar_id, first.fingerprints, again.similar_id, again.duplicate)
            )
        assert answers[0] == answers[1] and answers[0][3] is True

    def test_unknown_period_rule_falls_back(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A period rule the kernel does not implement leaves the pure path running."""
        import re

        from nshash.text import fingerprint

        monkeypatch.setattr(fingerprint, "_PERIOD", re.compile(r"[.]"))
        assert not Fingerprinter().compiled


#: Sketch values as stores hold them: 53-bit ints, with small ones so that sets overlap.
VALUES = st.one_of(st.integers(0, 40), st.integers(0, (1 << 53) - 1))
LIMITS = st.one_of(st.just(1 << 53), st.integers(0, 45))


@pytest.mark.skipif(
    assign_info()["path"] != "compiled",
    reason=f"the compiled assignment is not active: {assign_info()}",
)
class TestGuardHelpers:
    @settings(max_examples=200, deadline=None)
    @given(values=st.sets(VALUES, min_size=2, max_size=400), data=st.data())
    def test_cut_sketch(self, values: set[int], data: st.DataObject) -> None:
        """The compiled cut keeps the same values and gives the same limit as the Python one."""
        from nshash.methods.nshash.assign import _CUT, cut_sketch, cut_sketch_pure

        assert _CUT is not None
        cap = data.draw(st.integers(1, len(values) - 1))
        fast, slow = set(values), set(values)
        assert cut_sketch(fast, cap) == cut_sketch_pure(slow, cap)
        assert fast == slow and len(fast) == cap

    @settings(max_examples=300, deadline=None)
    @given(
        mine=st.integers(0, 400),
        theirs=st.integers(0, 400),
        data=st.data(),
        min_overlap=st.integers(1, 8),
    )
    def test_score(self, mine: int, theirs: int, data: st.DataObject, min_overlap: int) -> None:
        """The compiled core's score (the one fast_assign uses, and judged() and so the Spark
        job call) equals the reference, small sketches and min_overlap included."""
        from nshash.methods.nshash.assign import _SCORE, score_pure

        assert _SCORE is not None
        shared = data.draw(st.integers(0, min(mine, theirs)))
        assert _SCORE(shared, mine, theirs, min_overlap) == score_pure(
            shared, mine, theirs, min_overlap
        )

    def test_score_refuses_what_is_not_a_count(self) -> None:
        from nshash.methods.nshash.assign import _SCORE

        assert _SCORE is not None
        with pytest.raises(ValueError, match="counts"):
            _SCORE(-1, 2, 3, 3)
        with pytest.raises(TypeError):
            _SCORE(1, 2, 3)
        with pytest.raises(TypeError):
            _SCORE(1.5, 2, 3, 3)

    @settings(max_examples=300, deadline=None)
    @given(
        sketch=st.lists(VALUES, max_size=300),
        doc_limit=LIMITS,
        values=st.sets(VALUES, max_size=300),
        group_limit=LIMITS,
        common=st.sets(VALUES, max_size=30),
        more=st.sets(VALUES, max_size=5),
        as_list=st.booleans(),
        ascending=st.booleans(),
    )
    def test_sketch_guard(
        self,
        sketch: list[int],
        doc_limit: int,
        values: set[int],
        group_limit: int,
        common: set[int],
        more: set[int],
        as_list: bool,
        ascending: bool,
    ) -> None:
        """The compiled comparison counts what the Python one counts: for group sketches as
        sets and lists, document sketches ascending or not (with repeats), common values."""
        from nshash.methods.nshash.assign import _GUARD, sketch_guard, sketch_guard_pure

        assert _GUARD is not None
        doc = tuple(sorted(set(sketch))) if ascending else tuple(sketch)
        theirs = sorted(values) if as_list else values
        fast = sketch_guard(doc, doc_limit, theirs, group_limit, common, more)
        assert fast == sketch_guard_pure(doc, doc_limit, theirs, group_limit, common, more)
        shared, mine, compared = fast
        limit = min(doc_limit, group_limit)
        boiler = common | more
        assert set(shared) == {v for v in set(doc) & values if v < limit} - boiler
        assert mine == len({v for v in doc if v < limit} - boiler)
        assert compared == len({v for v in values if v < limit} - boiler)

    @settings(max_examples=60, deadline=None)
    @given(
        held=st.sets(VALUES, min_size=200, max_size=3000),
        gone=st.integers(0, 150),
        later=st.sets(VALUES, max_size=3000),
        filtered=st.booleans(),
        data=st.data(),
    )
    def test_sketch_guard_with_a_map_of_common_hashes(
        self, held: set[int], gone: int, later: set[int], filtered: bool, data: st.DataObject
    ) -> None:
        """Common hashes in an AnchorMap (the memory store's, with its Bloom filter: made from
        the start, or on the first question past 256 keys, and made anew as the map grows past
        it; deleted keys left in it) answer as the same hashes in a set."""
        from nshash.methods.nshash.assign import sketch_guard
        from nshash.methods.nshash.tables import anchor_table

        common = anchor_table(filtered=filtered)
        for h in held:
            common[h] = 1
        ordered = sorted(held)
        for h in ordered[:gone]:
            del common[h]
        kept = set(ordered[gone:])
        pool = sorted(held | later)
        for _ in range(2):  # before and after the map grows
            doc = tuple(sorted(data.draw(st.sets(st.sampled_from(pool), max_size=300))))
            values = data.draw(st.lists(st.sampled_from(pool), max_size=300))
            expect = sketch_guard(doc, 1 << 53, values, 1 << 53, kept, set())
            assert sketch_guard(doc, 1 << 53, values, 1 << 53, common, set()) == expect
            for h in later:
                common[h] = 1
            kept |= later

    @pytest.mark.parametrize("filtered", [False, True])
    def test_common_map_finds_every_key_as_it_grows(self, filtered: bool) -> None:
        """Every key of a map of common hashes is found through its filter after each add,
        across the sizes where the filter is made and made anew (a key added as the filter
        is remade is in the new one)."""
        import random

        from nshash.methods.nshash.assign import sketch_guard
        from nshash.methods.nshash.tables import anchor_table

        rng = random.Random(29)
        common = anchor_table(filtered=filtered)
        keys: list[int] = []
        for i in range(1, 4200):
            keys.append(rng.getrandbits(53))
            common[keys[-1]] = 1
            if i % 50 == 0 or (i & (i - 1)) == 0 or ((i - 1) & (i - 2)) == 0:
                doc = tuple(sorted(set(keys)))
                assert sketch_guard(doc, 1 << 53, [], 1 << 53, common, set())[1] == 0

    def test_odd_values_take_the_python_path(self) -> None:
        """Values that are not plain ints below 2**64 give the Python answer, not an error."""
        from nshash.methods.nshash.assign import cut_sketch, sketch_guard

        odd = {-1, 5, 1 << 70, 3}
        assert cut_sketch(set(odd), 2) == 5
        assert sketch_guard((True, 2), 1 << 53, [2, -5], 3, set(), set()) == ([2], 2, 2)
        assert sketch_guard((2, 1 << 70), 1 << 53, [2], 3, set(), set()) == ([2], 1, 1)


@compiled
class TestFarmhashInPlace:
    def test_found_and_checked(self) -> None:
        """pyfarmhash's own Fingerprint64 is found, and it hashes as farmhash.fingerprint64."""
        import ctypes

        import farmhash

        from nshash.text.kernel import _fingerprint64

        address = _fingerprint64()
        if not address:
            pytest.skip("this pyfarmhash build does not export util::Fingerprint64")
        fn = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t)(address)
        for text in ("", "a", "中文" * 50, "x" * 1000):
            data = text.encode()
            assert fn(data, len(data)) == farmhash.fingerprint64(data)

    @settings(max_examples=60, deadline=None)
    @given(text=TEXTS)
    def test_without_it_the_same(self, text: str) -> None:
        """A kernel that calls farmhash.fingerprint64 (no address) answers the same."""
        from nshash.text import kernel

        saved = kernel._fingerprint64
        try:
            kernel._fingerprint64 = lambda: 0  # type: ignore[assignment]
            plain = Fingerprinter(shingle=6)
        finally:
            kernel._fingerprint64 = saved
        assert plain.compiled
        answers: list[object] = []
        for fp in (Fingerprinter(shingle=6), plain):
            try:
                answers.append(fp.prepare(text))
            except (EmptyDocumentError, UnicodeEncodeError) as exc:
                answers.append(type(exc))
        assert answers[0] == answers[1]


#: Wide sketch values: anything below 2**53, with runs that share their top 31 bits.
WIDE = st.one_of(
    st.integers(0, (1 << 53) - 1),
    st.integers(0, 3).map(lambda top: (top << 22) | 5),
    st.integers(0, (1 << 23) - 1),
)
WIDE_LIMITS = st.one_of(st.just(1 << 53), st.integers(0, (1 << 53) - 1), st.integers(0, 1 << 24))


@compiled
class TestNarrow:
    @settings(max_examples=400, deadline=None)
    @given(values=st.lists(WIDE, max_size=300), limit=WIDE_LIMITS, ascending=st.booleans())
    def test_equals_the_pure_version(self, values: list[int], limit: int, ascending: bool) -> None:
        """The compiled narrow gives the DocPrint the Python one gives, for sketches ascending
        (as the text pipeline makes them) or not, cut by a limit or not."""
        from nshash.text.fingerprint import _NARROW, DocPrint, narrow, narrow_pure

        assert _NARROW is not None
        sketch = tuple(sorted(set(values))) if ascending else tuple(values)
        doc = DocPrint((7, 9), sketch, 11, limit)
        fast, slow = narrow(doc), narrow_pure(doc)
        assert fast == slow and type(fast) is DocPrint
        assert all(type(v) is int for v in fast.sketch) and type(fast.limit) is int
        if ascending:  # the compiled version answered itself, not its fallback
            assert _NARROW(doc, 22, 1 << 53) == slow

    def test_real_documents(self) -> None:
        """Real articles' sketches narrow alike on both paths."""
        from nshash.text.fingerprint import narrow, narrow_pure

        fp = Fingerprinter(sketch_size=64)
        for text in _texts("zh_reposts_dev.jsonl.gz", 200):
            doc = fp.prepare(text)
            assert narrow(doc) == narrow_pure(doc)

    def test_odd_values_take_the_python_path(self) -> None:
        """Values that are not plain ints below 2**64 give the Python answer, not an error."""
        from nshash.text.fingerprint import _NARROW, DocPrint, narrow, narrow_pure

        for sketch, limit in (((-1, 5), 1 << 53), ((1 << 70,), 9), ((True, 1 << 30), 1 << 53)):
            doc = DocPrint((1,), sketch, 2, limit)
            assert _NARROW(doc, 22, 1 << 53) is None
            assert narrow(doc) == narrow_pure(doc)
