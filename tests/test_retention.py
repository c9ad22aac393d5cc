"""Retention windows (``?retention=``) on every store backend, with a clock the tests control.

Each test runs once per backend (``store_url`` of ``conftest.py``: memory, memory-file,
LevelDB, SQLite and a real ``redis-server``). Stories are made of generated sentences, so a
stream can run for many windows.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from nshash import ConfigError, NSHash, open_store
from nshash.methods.nshash.memory import MemoryStore
from nshash.stores.url import retention_option

WINDOW = 1000

_WORDS = (
    "harbour council engineers bridge river market station school festival museum railway "
    "library hospital factory garden village airport stadium theatre orchestra farmers "
    "drought rainfall flood storm coast mountain valley forest island tunnel highway "
    "ferry tram budget taxes prices wages pensions housing rents tourists visitors students "
    "teachers doctors nurses police mayor minister court judge report survey study data "
    "results growth exports imports energy solar wind water power grid heat winter summer"
).split()


def story(seed: int, sentences: int = 6) -> str:
    """A distinct article: generated sentences, the same for the same seed."""
    rnd = random.Random(seed)
    return "\n".join(
        " ".join(rnd.choice(_WORDS) for _ in range(14)).capitalize() + "." for _ in range(sentences)
    )


def repost(seed: int, site: str) -> str:
    """A copy of story *seed* as another site carries it."""
    return f"From the {site} newsroom\n{story(seed)}\nShare this with your friends on {site}."


class Clock:
    def __init__(self, now: int = 1_700_000_000) -> None:
        self.now = now

    def __call__(self) -> float:
        return float(self.now)


def _url(store_url: str, window: str) -> str:
    sep = "&" if "?" in store_url else "?"
    return f"{store_url}{sep}retention={window}"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def nsh(store_url: str, clock: Clock) -> Iterator[NSHash]:
    n = NSHash.open(_url(store_url, f"{WINDOW}s"), clock=clock)
    yield n
    n.close()


def test_a_story_past_the_window_is_forgotten(nsh: NSHash, clock: Clock) -> None:
    first = nsh.add(story(1), doc_id="a1")
    assert nsh.add(repost(1, "Courier"), doc_id="a2").similar_id == first.similar_id
    other = nsh.add(story(2), doc_id="b1")
    clock.now += WINDOW // 2
    assert nsh.add(repost(2, "Herald"), doc_id="b2").similar_id == other.similar_id
    clock.now += WINDOW // 2 + 1  # story 1 is past the window, story 2 is not
    again = nsh.add(repost(1, "Gazette"), doc_id="a3")
    assert not again.duplicate and again.similar_id > other.similar_id  # ids never reused
    assert nsh.store.group(first.similar_id) is None
    assert nsh.store.document("a1") is None and nsh.store.document("a2") is None
    assert nsh.add(repost(2, "Tribune")).similar_id == other.similar_id
    stats = nsh.store.stats()
    assert stats.extra == {"retention": WINDOW, "forgotten": 1}
    assert stats.groups == 2 and stats.last_id == again.similar_id


def test_a_story_that_keeps_getting_copies_stays(nsh: NSHash, clock: Clock) -> None:
    first = nsh.add(story(7)).similar_id
    for i in range(6):  # three windows, a copy every half window
        clock.now += WINDOW // 2
        assert nsh.add(repost(7, f"site{i}")).similar_id == first
    assert nsh.store.group(first) is not None
    assert nsh.store.stats().extra["forgotten"] == 0


def test_an_expired_story_matches_nothing_before_it_is_forgotten(nsh: NSHash, clock: Clock) -> None:
    gid = nsh.add(story(3)).similar_id
    clock.now += WINDOW + 1
    # No write since: the group is still stored, but it is past the window.
    assert nsh.query(story(3)) is None
    assert nsh.query(repost(3, "Daily")) is None
    assert nsh.store.explain(nsh.prepare(story(3)), nsh.policy).similar_id is None
    assert nsh.store.group(gid) is not None  # not forgotten yet: nothing was written
    assert nsh.add(story(3)).similar_id != gid


def test_a_merged_story_is_forgotten_whole(nsh: NSHash, clock: Clock) -> None:
    text = story(11, sentences=10)
    lines = text.split("\n")
    head = nsh.add("\n".join(lines[:6]))
    tail = nsh.add("\n".join(lines[4:]))  # two lines in common: too few to join the head
    whole = nsh.add(text)
    assert head.similar_id != tail.similar_id and whole.merged_from == (tail.similar_id,)
    canonical = whole.similar_id
    clock.now += WINDOW + 1
    nsh.add(story(12))  # forgets what expired
    for gid in (head.similar_id, tail.similar_id, canonical):
        assert nsh.store.group(gid) is None
    assert not nsh.add(text).duplicate


def test_the_stored_state_stays_flat_past_the_window(nsh: NSHash, clock: Clock) -> None:
    """A stream four windows long keeps about one window of stories."""
    per_window = 40
    highest = (0, 0)
    for i in range(4 * per_window):
        clock.now += WINDOW // per_window
        nsh.add(story(1000 + i), doc_id=f"d{i}")
        if i % 3 == 0:
            nsh.add(repost(1000 + i, "Echo"), doc_id=f"r{i}")
        stats = nsh.store.stats()
        if i >= per_window:
            highest = max(highest, (stats.groups, stats.fingerprints))
    groups, fingerprints = highest
    assert groups <= per_window + 2
    assert fingerprints <= (per_window + 2) * 2 * nsh.policy.n
    assert nsh.store.stats().extra["forgotten"] >= 3 * per_window - 2
    assert nsh.store.document("d0") is None and nsh.store.document(f"d{4 * per_window - 1}")


def _footprint(nsh: NSHash) -> int:
    """Everything the store holds, counted in entries (keys, fields, members)."""
    store = nsh.store
    tables = getattr(store, "_t", None)
    if tables is not None:  # the memory store: every table, and the touch queue
        names = (
            "fp",
            "exact",
            "votes",
            "parent",
            "sketch",
            "limit",
            "size",
            "members",
            "docs",
            "seen",
            "hours",
            "buckets",
            "meta",
            "last",
            "owned",
            "absorbed",
            "order",
        )
        return sum(len(getattr(tables, name)) for name in names)
    kv = getattr(store, "_kv", None)
    if kv is not None:  # LevelDB, SQLite: every key
        return sum(1 for _ in kv.items())
    client = store._client  # Redis: every key of the namespace, and what each holds
    size = {
        b"hash": client.hlen,
        b"zset": client.zcard,
        b"set": client.scard,
        b"list": client.llen,
        b"string": lambda key: 1,
    }
    return sum(size[client.type(key)](key) for key in client.scan_iter(f"{{{store.prefix}}}:*"))


def test_the_space_is_reclaimed(nsh: NSHash, clock: Clock) -> None:
    """What one window of stories takes is what four windows take: the rest is deleted."""
    per_window = 30
    sizes = []
    for i in range(4 * per_window):
        clock.now += WINDOW // per_window
        nsh.add(story(5000 + i), doc_id=f"d{i}", site="example.org")
        nsh.add(repost(5000 + i, "Echo"), doc_id=f"r{i}")
        if i % per_window == per_window - 1:
            sizes.append(_footprint(nsh))
    assert sizes[3] <= sizes[1] * 1.15, sizes


def test_forgetting_survives_a_reopen(store_url: str, clock: Clock) -> None:
    if store_url == "memory://":
        pytest.skip("memory:// without a path keeps nothing across a reopen")
    nsh = NSHash.open(_url(store_url, f"{WINDOW}s"), clock=clock)
    for i in range(30):
        clock.now += WINDOW // 10
        nsh.add(story(6000 + i), doc_id=f"d{i}")
    if isinstance(nsh.store, MemoryStore):  # some forgetting in the snapshot, some after
        nsh.store.save()
        for i in range(30, 40):
            clock.now += WINDOW // 10
            nsh.add(story(6000 + i), doc_id=f"d{i}")
    before = nsh.store.stats()
    nsh.close()
    with NSHash.open(store_url, clock=clock) as again:
        assert again.store.stats() == before
        assert again.store.document("d0") is None
        assert again.query(story(6029)) == again.store.document("d29").similar_id
        clock.now += WINDOW + 1
        assert not again.add(story(6029)).duplicate
        assert again.store.stats().extra["forgotten"] > before.extra["forgotten"]


def test_the_window_is_kept_with_the_store(store_url: str, clock: Clock) -> None:
    if store_url == "memory://":
        pytest.skip("memory:// without a path keeps nothing across a reopen")
    with NSHash.open(_url(store_url, "2h"), clock=clock) as nsh:
        gid = nsh.add(story(21)).similar_id
    with NSHash.open(store_url, clock=clock) as nsh:  # no retention= in the URL
        assert nsh.store.stats().extra["retention"] == 7200
        clock.now += 7201
        assert nsh.add(story(21)).similar_id != gid
    with NSHash.open(_url(store_url, "1d"), clock=clock) as nsh:  # a new window
        nsh.add(story(22))  # (Redis takes it with the first write)
        assert nsh.store.stats().extra["retention"] == 86400


def test_a_store_made_without_a_window_refuses_one(store_url: str, clock: Clock) -> None:
    nsh = NSHash.open(store_url, clock=clock)
    nsh.add(story(31))
    if store_url != "memory://":
        nsh.close()
        with pytest.raises(ConfigError, match="without a retention window"):
            NSHash.open(_url(store_url, "30d"), clock=clock).add(story(32))
    else:
        nsh.close()


@pytest.mark.parametrize(
    "given, seconds",
    [("30d", 2592000), ("12h", 43200), ("90m", 5400), ("3600s", 3600), ("45", 45), ("2w", 1209600)],
)
def test_windows_are_read_in_their_units(given: str, seconds: int) -> None:
    assert retention_option({"retention": given}, "memory://") == seconds


@pytest.mark.parametrize("bad", ["0", "30x", "-5d", "", "1.5d", "d"])
def test_a_bad_window_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="retention"):
        open_store(f"memory://?retention={bad}")


def test_every_store_answers_alike(store_url: str) -> None:
    """One stream (stories coming back after the window, partial copies, merges, repeated
    doc ids) gets the same ids from this backend as from the plain memory store."""
    rnd = random.Random(5)
    clock, reference_clock = Clock(), Clock()
    events = []
    footers = [story(9900 + k, sentences=3) for k in range(3)]  # a site's long boilerplate
    for _ in range(200):
        lines = story(9000 + rnd.randrange(20), sentences=8).split("\n")
        kind = rnd.randrange(3)  # the first half, the second half (merged by a whole copy)
        text = "\n".join(lines[:5] if kind == 0 else lines[3:] if kind == 1 else lines)
        if rnd.random() < 0.5:
            text += "\n" + rnd.choice(footers)
        events.append((rnd.randrange(WINDOW // 6), text, f"d{rnd.randrange(250)}"))
    got, want = [], []
    with (
        NSHash.open(_url(store_url, f"{WINDOW}s"), clock=clock) as nsh,
        NSHash.open(f"memory://?retention={WINDOW}", clock=reference_clock) as reference,
    ):
        for step, text, doc_id in events:
            clock.now += step
            reference_clock.now += step
            got.append(nsh.add(text, doc_id=doc_id).similar_id)
            want.append(reference.add(text, doc_id=doc_id).similar_id)
        assert got == want
        assert nsh.store.stats() == reference.store.stats()
        assert reference.store.stats().extra["forgotten"] > 0


def test_a_failed_write_takes_back_its_forgetting() -> None:
    """The memory store applies a document's changes, then journals them; when the journal
    write fails they are taken back. With a window those changes include forgetting groups
    (and merges of dated groups): every one must be undone."""
    import copy

    from nshash.methods.nshash.retention import FORGET_PER_WRITE, retained_assign
    from nshash.text.fingerprint import narrow  # as the store compares documents

    clock = Clock()
    nsh = NSHash.open(f"memory://?retention={WINDOW}", clock=clock)
    tables = nsh.store._t
    lines = story(77, sentences=10).split("\n")
    nsh.add("\n".join(lines[:6]), doc_id="head", site="a.example")
    nsh.add("\n".join(lines[4:]), doc_id="tail")
    for i in range(20):
        nsh.add(story(7000 + i) + "\n" + story(7999, sentences=3), doc_id=f"s{i}")

    def taken_back(text: str) -> tuple[int, tuple[int, ...]]:
        before = copy.deepcopy(tables.dump()), list(tables.order)
        tables.undo = []
        answer, _ = retained_assign(
            tables, narrow(nsh.prepare(text)), nsh.policy, "new", None, None, WINDOW,
            int(clock.now),
        )
        forgotten = tables.forgotten - before[0]["forgotten"]
        tables.rollback()
        tables.undo = None
        assert (tables.dump(), list(tables.order)) == before
        return forgotten, answer.merged_from

    assert taken_back(story(77, sentences=10)) == (0, (2,))  # a merge of dated groups
    clock.now += WINDOW - 1
    nsh.add(story(7100), doc_id="fresh")
    clock.now += 2  # the first 22 documents' groups are due now
    assert taken_back(story(77, sentences=10))[0] == FORGET_PER_WRITE
    assert taken_back(story(7100))[0] == FORGET_PER_WRITE


def test_leveldb_gives_back_the_space_of_what_was_deleted(tmp_path: Path) -> None:
    """LevelDB keeps a deleted key (and the value it hides) until a compaction reaches it:
    reclaim compacts in a background thread, and the files shrink to what is left."""
    pytest.importorskip("plyvel")
    from nshash.stores.leveldb import LevelKV

    def disk() -> int:
        return sum(f.stat().st_size for f in (tmp_path / "db").iterdir())

    kv = LevelKV(str(tmp_path / "db"))
    try:
        rnd = random.Random(3)
        for i in range(0, 60_000, 1000):
            kv.write({b"k%08d" % j: rnd.randbytes(100) for j in range(i, i + 1000)})
        kv.reclaim()
        kv._join_compactor()
        for i in range(0, 50_000, 1000):
            kv.write({b"k%08d" % j: None for j in range(i, i + 1000)})
        full = disk()
        kv.reclaim()
        kv._join_compactor()
        assert disk() < full / 3
        # (the flusher's small synced write adds its own key when a write took over a second)
        assert sum(1 for k, _ in kv.items() if k.startswith(b"k")) == 10_000
    finally:
        kv.close()


def test_the_compiled_path_keeps_what_the_python_path_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """memory:// with a window places new stories through the compiled assignment: its
    tables (what each group owns, when each was last seen) are the pure path's."""
    import struct

    from nshash.methods.nshash import memory

    if memory._FAST is None:
        pytest.skip("the compiled assignment is not built")

    def run() -> dict[str, object]:
        clock = Clock()
        with NSHash.open(f"memory://?retention={WINDOW}", clock=clock) as nsh:
            for i in range(300):
                clock.now += 7
                text = story(i % 120) if i % 3 else repost(i % 97, "Post")
                nsh.add(text, doc_id=f"d{i}")
            t = nsh.store._t
            dump = t.dump()
            dump["owned"] = {g: sorted(struct.iter_unpack("<cQ", v)) for g, v in t.owned.items()}
            assert t.forgotten > 20
            return dump

    compiled = run()
    monkeypatch.setattr(memory, "_FAST", None)
    assert run() == compiled
