"""letter_units: what a letter weighs in a shingle, and the value each store keeps.

Every store begun before the setting holds fingerprints made with letters weighing 1; it is
opened with that value (adopted when none is given, refused when another is given), and a new
store records the value of the NSHash that writes to it first.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from nshash import ConfigError, NSHash
from nshash.stores import durable
from tests.conftest import Run
from tests.test_store_contract import EN_RAIL, EN_RAIL_REPOST, EN_STORIES, ZH_WATER
from tests.test_store_contract import with_typos as typos

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("NSHASH_DATA_DIR", ROOT.parent / "shared" / "data"))

#: The error's advice for a store begun with letter_units=1.
ADVICE = (
    "it was begun with letter_units=1; open it with letter_units=1 (URL ?letter_units=1,"
    " --letter-units 1, NSHASH_LETTER_UNITS=1) or start a new store"
)


def english_articles(count: int) -> list[str]:
    """The first *count* English articles of the shared evaluation set of reposts."""
    path = DATA / "en_reposts_dev.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} is not here (set NSHASH_DATA_DIR)")
    texts: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            texts.append(json.loads(line)["text"])
            if len(texts) == count:
                break
    return texts


@pytest.fixture
def old_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test's ``monkeypatch.undo()``, NSHash writes as the releases before
    letter_units did: it records nothing in the store (open it with letter_units=1 to
    fingerprint as they did)."""
    monkeypatch.setattr(
        NSHash, "_before_first_write", lambda self: setattr(self, "_first_write", False)
    )


def refused(url: str, **options: object) -> str:
    """The error that opening *url* (with *options*) and adding a text raises (a server
    store is read on first use, the others when opened)."""
    with pytest.raises(ConfigError) as info, NSHash.open(url, **options) as nsh:
        nsh.add(EN_RAIL)
    return str(info.value)


def with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


def persistent(store_url: str) -> None:
    if store_url == "memory://":
        pytest.skip("memory:// without a path keeps nothing across a reopen")


def close_saved(nsh: NSHash, save: bool) -> None:
    """Close *nsh*, with a snapshot first when *save* (a memory store with a path)."""
    if save:
        nsh.store.save()  # type: ignore[attr-defined]
    nsh.close()


class TestTypos:
    def test_english_copy_with_dense_typos_joins_its_original(self) -> None:
        """A copy with 4% of its letters substituted joins its original on its plain score
        with letters of 2 units (a shingle of 12 letters); with 1 (24 letters) it scores
        under theta, and joins, where it does, only as an edited copy (assign.edits_of)."""
        texts = english_articles(6)
        for units in (2, 1):
            for seed, text in enumerate(texts):
                with NSHash.open("memory://", letter_units=units) as nsh:
                    original = nsh.add(text).similar_id
                    copy = typos(text, 0.04, seed)
                    best = nsh.explain(copy).candidates[0]
                    joined = nsh.add(copy).similar_id == original
                    if units == 2:
                        assert joined and best.edits == 0, text[:80]
                    else:
                        assert joined == (best.edits > 0), text[:80]

    def test_letter_weighs_what_it_is_set_to(self) -> None:
        """A text of 12 letters is one shingle at 2 units and too light for one at 1."""
        with NSHash.open("memory://") as two, NSHash.open("memory://?letter_units=1") as one:
            assert two.fingerprinter.letter_units == 2 and one.fingerprinter.letter_units == 1
            assert len(two.prepare("abcdefghijklm").sentences) == 2  # two starts
            assert len(one.prepare("abcdefghijklm").sentences) == 1  # the whole text
            # CJK weighs 3 whatever letters weigh: 8 characters make a shingle either way.
            assert two.prepare("一二三四五六七八九") == one.prepare("一二三四五六七八九")


class TestStores:
    @pytest.mark.parametrize("save", [False, True], ids=["journal", "snapshot"])
    def test_new_store_keeps_the_value_it_was_begun_with(self, store_url: str, save: bool) -> None:
        """A new store records its first writer's letter_units: reopened without the
        setting it fingerprints with it, and another value is refused in one line."""
        persistent(store_url)
        if save and not store_url.startswith("memory://"):
            pytest.skip("a snapshot is the memory store's")
        with NSHash.open(store_url, letter_units=3) as nsh:
            assert nsh.store.letter_units() is None  # nothing written yet
            first = nsh.add(EN_RAIL, doc_id="r").similar_id
            assert nsh.store.letter_units() == 3
            close_saved(nsh, save)
        with NSHash.open(store_url) as again:
            assert again.fingerprinter.letter_units == 3
            assert again.add(EN_RAIL_REPOST).similar_id == first
        message = refused(store_url, letter_units=2)
        assert "begun with letter_units=3; open it with letter_units=3" in message
        with NSHash.open(with_option(store_url, "letter_units=3")) as same:
            assert same.fingerprinter.letter_units == 3

    @pytest.mark.parametrize("save", [False, True], ids=["journal", "snapshot"])
    def test_old_store_keeps_letters_of_one(
        self, store_url: str, save: bool, old_writer: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store begun before the setting (groups, no record) reads as letter_units=1:
        opened with no setting it adopts 1 and its copies still join; opened with 2 it is
        refused, saying how to open it."""
        persistent(store_url)
        if save and not store_url.startswith("memory://"):
            pytest.skip("a snapshot is the memory store's")
        with NSHash.open(store_url, letter_units=1) as nsh:
            first = {t: nsh.add(t, doc_id=f"d{i}").similar_id for i, t in enumerate(EN_STORIES)}
            close_saved(nsh, save)
        monkeypatch.undo()  # this version writes from here on
        if store_url.startswith("memory://"):  # nothing recorded, as the releases before
            path = store_url[len("memory://") :]
            journal = Path(path + ".journal")
            assert '"u"' not in (journal.read_text() if journal.exists() else "")
            if save:
                assert "letter_units" not in durable.read_snapshot(path)[0]
        with NSHash.open(store_url) as again:
            assert again.store.letter_units() == 1
            assert again.fingerprinter.letter_units == 1
            assert again.add(EN_RAIL_REPOST, doc_id="rr").similar_id == first[EN_RAIL]
            assert again.add(ZH_WATER).similar_id > max(first.values())
        with NSHash.open(store_url) as still:  # its writes recorded nothing else
            assert still.store.letter_units() == 1
        for message in (refused(store_url, letter_units=2),
                        refused(with_option(store_url, "letter_units=2"))):  # fmt: skip
            assert message.startswith("letter_units=2 is not this store's: ")
            assert ADVICE in message and "\n" not in message
        if not store_url.startswith("redis"):  # (refused on open, so it says where from)
            assert message.endswith(" (from the store URL)")

    def test_empty_store_takes_the_value_given(self, store_url: str) -> None:
        """A store that has made no group records nothing yet: any value opens it, and the
        first write records the writer's."""
        persistent(store_url)
        with NSHash.open(store_url, letter_units=1) as nsh:
            assert nsh.query(EN_RAIL) is None
        with NSHash.open(store_url) as nsh:
            assert nsh.fingerprinter.letter_units == 2
            nsh.add(EN_RAIL)
        with NSHash.open(store_url) as nsh:
            assert nsh.store.letter_units() == 2

    def test_two_writers_of_a_new_store(self, store_url: str) -> None:
        """Of two writers opened on one new store with different values, the first to write
        records its own; the other's first write is refused, and writes nothing."""
        if not store_url.startswith("redis"):
            pytest.skip("only a server store has two writers")
        with NSHash.open(store_url) as a, NSHash.open(store_url, letter_units=1) as b:
            a.add(EN_RAIL)
            with pytest.raises(ConfigError, match="begun with letter_units=2"):
                b.add(ZH_WATER)
            assert a.stats().documents == 1

    def test_read_only_open_adopts_the_stores_value(
        self, tmp_path: Path, old_writer: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A read-only open of an old store fingerprints with 1, and its queries find the
        stored groups."""
        url = f"memory://{tmp_path}/old.pkl"
        with NSHash.open(url, letter_units=1) as nsh:
            first = nsh.add(EN_RAIL).similar_id
        monkeypatch.undo()
        with NSHash.open(url, readonly=True) as reader:
            assert reader.fingerprinter.letter_units == 1
            assert reader.query(EN_RAIL_REPOST) == first

    def test_original_constructor_adopts_and_refuses(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_writer: None
    ) -> None:
        """NSHash(name, hashdb=...) reads the value of the files it opens, as open does."""
        monkeypatch.chdir(tmp_path)
        nsh = NSHash("news", letter_units=1)
        nsh.add(EN_RAIL)
        nsh.close()
        monkeypatch.undo()
        monkeypatch.chdir(tmp_path)
        again = NSHash("news")
        assert again.fingerprinter.letter_units == 1
        again.close()
        with pytest.raises(ConfigError, match="open it with letter_units=1"):
            NSHash("news", letter_units=2)
        NSHash("news").close()  # the refused open released the files


class TestService:
    def test_service_adopts_an_old_stores_value_and_refuses_another(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old_writer: None
    ) -> None:
        """The service opens an old store with its letter_units=1 when NSHASH_LETTER_UNITS
        is unset, and refuses to start on it with NSHASH_LETTER_UNITS=2."""
        from fastapi.testclient import TestClient

        from service import Settings, create_app

        url = f"memory://{tmp_path}/old.pkl"
        with NSHash.open(url, letter_units=1) as nsh:
            first = nsh.add(EN_RAIL).similar_id
        monkeypatch.undo()
        monkeypatch.delenv("NSHASH_LETTER_UNITS", raising=False)
        with TestClient(create_app(Settings(store_url=url))) as client:
            found = client.post("/v1/query", json={"text": EN_RAIL_REPOST})
            assert found.status_code == 200 and found.json()["similar_id"] == first
        monkeypatch.setenv("NSHASH_LETTER_UNITS", "2")
        with pytest.raises(ConfigError) as info, TestClient(create_app(Settings(store_url=url))):
            pass
        assert ADVICE in str(info.value)
        assert "(from the environment variable NSHASH_LETTER_UNITS)" in str(info.value)


class TestCommandLine:
    def test_jobs_fingerprint_with_an_old_stores_value(
        self, tmp_path: Path, run: Run, old_writer: None, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """dedup --jobs 2 on a LevelDB store begun before the setting gives what --jobs 1
        gives: the workers fingerprint with the store's letter_units, so reposts of its
        stories join them."""
        pytest.importorskip("plyvel")
        base = tmp_path / "old.ldb"
        with NSHash.open(f"leveldb://{base}", letter_units=1) as nsh:
            stored = {t: nsh.add(t, doc_id=f"s{i}").similar_id for i, t in enumerate(EN_STORIES)}
        monkeypatch.undo()
        monkeypatch.delenv("NSHASH_STORE_URL", raising=False)
        monkeypatch.delenv("NSHASH_LETTER_UNITS", raising=False)
        records = [{"id": "a", "text": EN_RAIL_REPOST}, {"id": "b", "text": ZH_WATER}]
        records += [{"id": f"c{i}", "text": t} for i, t in enumerate(EN_STORIES)]
        source = tmp_path / "in.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        outputs = []
        for jobs in (1, 2):
            copy = tmp_path / f"jobs{jobs}.ldb"
            shutil.copytree(base, copy)
            out = tmp_path / f"out{jobs}.jsonl"
            code, _out, err = run(
                "dedup", source, "--store", f"leveldb://{copy}", "--jobs", jobs, "-o", out, "-q"
            )
            assert code == 0, err
            outputs.append(out.read_text(encoding="utf-8"))
        assert outputs[0] == outputs[1]
        answers = {r["id"]: r["similar_id"] for r in map(json.loads, outputs[0].splitlines())}
        assert answers["a"] == stored[EN_RAIL]
        assert [answers[f"c{i}"] for i in range(len(EN_STORIES))] == list(stored.values())
        code, _out, err = run(
            "dedup", source, "--store", f"leveldb://{base}", "--letter-units", "2", "-q",
            "-o", tmp_path / "refused.jsonl",
        )  # fmt: skip
        assert code == 1 and ADVICE in err and "(from --letter-units)" in err
