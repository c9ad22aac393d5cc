"""One behaviour suite for every store backend (memory, memory-file, LevelDB, Redis).

Each test runs once per backend through the ``store_url`` fixture of ``conftest.py``, against
the real thing: plyvel in a temp directory, a real ``redis-server``. The sample articles are
written for this project.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from nshash import ConfigError, DocMeta, DocPrint, NSHash, StoreClosedError, StoreStats

# -- sample articles (original text) -----------------------------------------------------

EN_RAIL = (
    "The regional rail operator announced on Monday that night trains between the two port "
    "cities will resume in early spring.\n"
    "Service was suspended three years ago, after a landslide damaged a long stretch of track "
    "along the coast.\n"
    "Engineers have since rebuilt the embankment and added drainage channels to protect it "
    "from heavy rain.\n"
    "Tickets go on sale next month, and the first departures are planned for the second week "
    "of March."
)
EN_RAIL_REPOST = (
    "Posted by the Harbour Courier travel desk\n"
    "The regional rail operator announced on Monday that night trains between the two port "
    "cities will resume in early spring. Service was suspended three years ago, after a "
    "landslide damaged a long stretch of track along the coast. Engineers have since rebuilt "
    "the embankment and added drainage channels to protect it from heavy rain.\n"
    "Share this story with your friends!"
)
EN_TURTLES = (
    "Researchers at a university marine station have followed a group of young sea turtles "
    "for more than two thousand kilometres.\n"
    "The small satellite tags, glued to the shells, fall off on their own after about a year.\n"
    "The data show that the turtles spend far more time in cold offshore currents than "
    "scientists had assumed.\n"
    "The team hopes the findings will help fishing fleets avoid the areas where the animals "
    "feed."
)
EN_TURTLES_REPOST = (
    "RESEARCHERS AT A UNIVERSITY MARINE STATION HAVE FOLLOWED A GROUP OF YOUNG SEA TURTLES "
    "FOR MORE THAN TWO THOUSAND KILOMETRES.\n"
    "The small satellite tags, glued to the shells, fall off on their own after about a year. "
    "The data show that the turtles spend far more time in cold offshore currents than "
    "scientists had assumed.\n"
    "The team hopes the findings will help fishing fleets avoid the areas where the animals "
    "feed.\n(Reporting by our science correspondent)"
)
EN_BAKERY = (
    "A family bakery in the old market district marked its hundredth anniversary by giving "
    "free bread to every visitor.\n"
    "The founder's great-granddaughter now runs the shop, and she still fires the original "
    "stone oven every morning.\n"
    "Customers queued around the block before sunrise, many of them carrying photographs of "
    "earlier generations.\n"
    "The city has promised to list the building as a protected heritage site later this year."
)
EN_CHESS = (
    "A twelve-year-old from a mountain village won the national junior chess championship "
    "after an eleven-hour final round.\n"
    "She learned the game from her grandfather, who carved the pieces himself from pine "
    "branches.\n"
    "Her coach said her calm play in long endgames sets her apart from older opponents.\n"
    "The prize includes a scholarship and a place on the team for next summer's world event."
)
EN_ORCHARD = (
    "A late frost damaged apple orchards across the northern valley, and growers fear the "
    "worst harvest in a decade.\n"
    "Temperatures fell well below freezing for two nights just as the trees were in full "
    "blossom.\n"
    "Some farmers lit small fires between the rows, but the effort saved only a fraction of "
    "the buds.\n"
    "The regional government will decide next week whether to offer emergency support "
    "payments."
)

ZH_WATER = (
    "市政府周三宣布，将在明年年底前完成老城区全部供水管道的更新改造。\n"
    "据介绍，部分管道已经使用超过四十年，漏损率明显高于全市平均水平。\n"
    "改造期间将分段施工，每一段的停水时间原则上不超过八个小时。\n"
    "相关部门提醒居民提前储水，并留意社区发布的停水通知。"
)
ZH_WATER_REPOST = (
    "来源：城市晚报\n"
    "市政府周三宣布，将在明年年底前完成老城区全部供水管道的更新改造。"
    "据介绍，部分管道已经使用超过四十年，漏损率明显高于全市平均水平。"
    "改造期间将分段施工，每一段的停水时间原则上不超过８个小时。\n"
    "（责任编辑：李明）"
)
ZH_ORCHID = (
    "一支高校科研团队近日在高山草甸发现了一种此前从未被记录的兰花。\n"
    "这种兰花的花瓣呈淡紫色，只在每年七月中旬短暂开放大约十天。\n"
    "研究人员表示，该物种分布范围极小，目前已知的野生植株不足两百株。\n"
    "团队建议当地尽快将其生长区域纳入自然保护地，并开展长期监测。"
)
ZH_LIBRARY = (
    "本市第一家无人值守的社区图书馆昨日正式开放，市民刷身份证即可借还图书。\n"
    "馆内藏书约一万册，涵盖文学、历史、科普和少儿读物等多个类别。\n"
    "图书馆全天二十四小时开放，还配有自助消毒柜和安静的阅读座位。\n"
    "管理方表示，将根据借阅数据每月调整书目，更好地满足周边居民的需求。"
)
ZH_MARATHON = (
    "第十届滨江马拉松赛周日鸣枪开跑，来自二十多个国家和地区的选手参加了比赛。\n"
    "男子组冠军由一名来自本省的业余跑者获得，成绩刷新了赛会纪录。\n"
    "赛道沿江而设，沿途设置了十二个补给站和六个医疗救护点。\n"
    "组委会表示，明年将增加半程马拉松和家庭欢乐跑两个项目。"
)

#: Long site boilerplate that unrelated articles share (a made-up site's footer).
EN_FOOTER = (
    "This article is provided for general information only and does not constitute "
    "professional advice of any kind, and no part of it may be reproduced without the "
    "written permission of the publisher."
)
ZH_FOOTER = (
    "本网站刊登的全部内容仅供读者参考而不构成任何投资建议，"
    "未经本网站书面授权任何单位和个人不得转载或摘编。"
)

EN_STORIES = [EN_RAIL, EN_TURTLES, EN_BAKERY, EN_CHESS, EN_ORCHARD]
ZH_STORIES = [ZH_WATER, ZH_ORCHID, ZH_LIBRARY, ZH_MARATHON]

# -- synthetic stories for the concurrency test -------------------------------------------

_WORDS = (
    "harbour council river festival museum teacher bridge village market winter summer "
    "engineer doctor farmer library station garden mountain island forest budget school "
    "hospital factory orchestra stadium airport ferry bakery theatre volunteer storm drought "
    "harvest election record century planet telescope glacier canal tunnel lantern"
).split()


def made_up(seed: int, lines: int) -> str:
    """*lines* lines of ten made-up words each, drawn with a fixed seed: text that shares no
    shingle with another seed's (the synthetic stories draw from a few hundred words)."""
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))
        for _ in range(10 * lines)
    ]
    return "\n".join(" ".join(words[i : i + 10]) + "." for i in range(0, 10 * lines, 10))


def synthetic_story(seed: int) -> list[str]:
    """Five distinct sentences of twelve words drawn with a fixed seed."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(12)) + f" {seed}-{i}." for i in range(5)]


def synthetic_text(seed: int, paragraphs: int) -> str:
    """*paragraphs* synthetic stories' sentences, one a line, drawn with a fixed seed."""
    return "\n".join(s for k in range(paragraphs) for s in synthetic_story(seed * 1000 + k))


def story_versions(seed: int) -> list[str]:
    """An original and two reposts of one synthetic story (a header, a dropped sentence)."""
    sentences = synthetic_story(seed)
    original = "\n".join(sentences)
    repost_a = "Reposted from the Daily Lantern\n" + " ".join(sentences[:4])
    repost_b = "\n".join(s.upper() for s in sentences[1:]) + "\nEditor: K. Oduya"
    return [original, repost_a, repost_b]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def nsh(store_url: str) -> Iterator[NSHash]:
    """An NSHash on a fresh, empty store of each backend."""
    with NSHash.open(store_url) as opened:
        yield opened


@pytest.fixture
def reopen(store_url: str) -> Callable[[], NSHash]:
    """Open the same store again (only the persistent backends keep anything)."""
    if store_url == "memory://":
        pytest.skip("memory:// without a path keeps nothing across a reopen")
    return lambda: NSHash.open(store_url)


def same_stats(a: StoreStats, b: StoreStats) -> bool:
    """Whether two stats snapshots show the same store contents."""
    return (a.documents, a.groups, a.fingerprints, a.common_fingerprints, a.last_id) == (
        b.documents,
        b.groups,
        b.fingerprints,
        b.common_fingerprints,
        b.last_id,
    )


# -- the contract ----------------------------------------------------------------------------


class TestIds:
    """Ids are positive integers from a persistent counter."""

    def test_new_stories_count_up_from_one(self, nsh: NSHash) -> None:
        """Unrelated stories get 1, 2, 3, ... in arrival order, as ints."""
        ids = [nsh.add(text).similar_id for text in EN_STORIES + ZH_STORIES]
        assert ids == list(range(1, len(ids) + 1))
        assert all(type(i) is int for i in ids)
        assert nsh.stats().last_id == len(ids)

    def test_get_similar_returns_int(self, nsh: NSHash) -> None:
        """The original call returns a plain int, the same for a repost."""
        first = nsh.get_similar(EN_RAIL)
        assert type(first) is int and first == 1
        assert nsh.get_similar(EN_RAIL_REPOST) == first

    def test_unknown_id_has_no_group(self, nsh: NSHash) -> None:
        """An id never handed out has no group and resolves to itself."""
        nsh.add(EN_RAIL)
        assert nsh.group(2) is None
        assert nsh.group(10**12) is None
        assert nsh.resolve(7) == 7

    def test_ids_survive_reopen(self, nsh: NSHash, reopen: Callable[[], NSHash]) -> None:
        """After close and reopen, old answers stand and new ids exceed every earlier one."""
        first = {
            text: nsh.add(text, doc_id=f"d{i}").similar_id for i, text in enumerate(EN_STORIES)
        }
        before = nsh.stats()
        nsh.close()
        with reopen() as again:
            assert same_stats(again.stats(), before)
            assert again.add(EN_RAIL_REPOST).similar_id == first[EN_RAIL]
            assert again.query(EN_TURTLES_REPOST) == first[EN_TURTLES]
            for i, text in enumerate(EN_STORIES):
                record = again.document(f"d{i}")
                assert record is not None and record.similar_id == first[text]
            new = again.add(ZH_WATER).similar_id
            assert new > max(first.values())
            assert again.stats().last_id == new

    def test_ids_never_reused_across_many_reopens(
        self, nsh: NSHash, reopen: Callable[[], NSHash]
    ) -> None:
        """Each session's new story gets an id greater than all before it."""
        seen = [nsh.add(ZH_WATER).similar_id]
        nsh.close()
        for text in (ZH_ORCHID, ZH_LIBRARY, ZH_MARATHON):
            with reopen() as again:
                sid = again.add(text).similar_id
                assert sid > max(seen)
                seen.append(sid)
        assert seen == [1, 2, 3, 4]


class TestGrouping:
    """Reposts share an id; unrelated documents don't."""

    @pytest.mark.parametrize(
        ("original", "repost"),
        [(EN_RAIL, EN_RAIL_REPOST), (EN_TURTLES, EN_TURTLES_REPOST), (ZH_WATER, ZH_WATER_REPOST)],
        ids=["en-rail", "en-turtles", "zh-water"],
    )
    def test_repost_shares_id(self, nsh: NSHash, original: str, repost: str) -> None:
        """An edited repost gets the original's id and is marked a duplicate."""
        first = nsh.add(original)
        nsh.add(EN_CHESS)
        second = nsh.add(repost)
        assert (first.duplicate, second.duplicate) == (False, True)
        assert second.similar_id == first.similar_id
        assert second.merged_from == ()
        assert nsh.stats().groups == 2

    def test_unrelated_stories_differ(self, nsh: NSHash) -> None:
        """Every unrelated story gets its own id and none is a duplicate."""
        results = [nsh.add(text) for text in EN_STORIES + ZH_STORIES]
        assert len({r.similar_id for r in results}) == len(results)
        assert not any(r.duplicate for r in results)

    def test_exact_repeat_is_duplicate(self, nsh: NSHash) -> None:
        """The same text twice (without a doc_id) joins one group, counted twice."""
        a, b = nsh.add(ZH_ORCHID), nsh.add(ZH_ORCHID)
        assert b.similar_id == a.similar_id and b.duplicate and not b.replayed
        group = nsh.group(a.similar_id)
        assert group is not None and group.size == 2
        assert nsh.stats().documents == 2

    def test_fingerprints_are_unsigned_64_bit(self, nsh: NSHash) -> None:
        """The anchors a store returns are 64-bit unsigned ints, the same on every backend."""
        result = nsh.add(EN_BAKERY, doc_id="bakery")
        assert result.fingerprints
        assert all(0 <= fp < 2**64 for fp in result.fingerprints)
        record = nsh.document("bakery")
        assert record is not None and record.fingerprints == result.fingerprints


#: One long article in five parts, and two overlapping fragments of it, each holding too little
#: of the other to join it: the whole text bridges them (a third of each is shared).
LONG_PARTS = [EN_RAIL, EN_TURTLES, EN_BAKERY, EN_CHESS, EN_ORCHARD]
FRAGMENT_A = "\n".join(LONG_PARTS[:3])
FRAGMENT_B = "\n".join(LONG_PARTS[2:])
WHOLE = "\n".join(LONG_PARTS)


class TestMerge:
    """A document that bridges two fragments of one story merges them; the smallest id stays
    canonical. A document quoting two unrelated stories in full merges nothing."""

    def test_bridge_merges_groups(self, nsh: NSHash) -> None:
        """The old id resolves to the canonical one and its members move there."""
        a = nsh.add(FRAGMENT_A, doc_id="a").similar_id
        b = nsh.add(FRAGMENT_B, doc_id="b").similar_id
        nsh.add(FRAGMENT_B + "\nShared by our readers.", doc_id="b-2")
        assert a < b
        bridge = nsh.add(WHOLE, doc_id="bridge")
        assert bridge.similar_id == a
        assert bridge.merged_from == (b,)
        assert bridge.duplicate
        assert nsh.resolve(b) == a and nsh.resolve(a) == a
        merged = nsh.group(b)
        assert merged is not None and merged.similar_id == a
        assert merged.size == 4
        assert sorted(merged.doc_ids) == ["a", "b", "b-2", "bridge"]
        assert nsh.group(a) == merged
        second = nsh.document("b")
        assert second is not None and second.similar_id == a
        stats = nsh.stats()
        assert (stats.groups, stats.documents, stats.last_id) == (1, 4, 2)
        assert [g.similar_id for g in nsh.groups(min_size=1)] == [a]

    def test_merged_group_keeps_growing(self, nsh: NSHash) -> None:
        """After a merge, copies of either fragment and of the bridge join the canonical id."""
        a = nsh.add(FRAGMENT_A).similar_id
        b = nsh.add(FRAGMENT_B).similar_id
        nsh.add(WHOLE)
        assert nsh.add(FRAGMENT_B.replace("turtles", "sea turtles")).similar_id == a
        assert nsh.add(FRAGMENT_A + "\nMore at eleven.").similar_id == a
        assert nsh.query(FRAGMENT_B) == a
        assert nsh.resolve(b) == a
        assert nsh.add(ZH_LIBRARY).similar_id == 3

    def test_digest_of_two_stories_merges_nothing(self, nsh: NSHash) -> None:
        """A page quoting two unrelated stories in full joins one of them; both stay apart."""
        a = nsh.add(EN_RAIL).similar_id
        b = nsh.add(EN_TURTLES).similar_id
        digest = nsh.add(EN_RAIL + "\n" + EN_TURTLES)
        assert digest.similar_id in (a, b) and digest.merged_from == ()
        assert nsh.resolve(b) == b and nsh.query(EN_TURTLES_REPOST) == b


class TestDocId:
    """The same doc_id twice is a no-op that returns the first answer."""

    def test_replay_returns_same_answer(self, nsh: NSHash) -> None:
        """A retried doc_id answers as before, flagged replayed, and the store is unchanged."""
        first = nsh.add(EN_BAKERY, doc_id="b-1", title="Bakery turns 100")
        nsh.add(EN_CHESS, doc_id="c-1")
        before = nsh.stats()
        again = nsh.add(EN_BAKERY, doc_id="b-1", title="Bakery turns 100")
        assert again.replayed and not first.replayed
        assert (again.similar_id, again.duplicate, again.merged_from, again.fingerprints) == (
            first.similar_id,
            first.duplicate,
            first.merged_from,
            first.fingerprints,
        )
        assert same_stats(nsh.stats(), before)
        group = nsh.group(first.similar_id)
        assert group is not None and group.size == 1 and group.doc_ids == ["b-1"]

    def test_replay_ignores_new_text(self, nsh: NSHash) -> None:
        """A known doc_id sent with other text still gets the stored answer and writes nothing."""
        first = nsh.add(ZH_WATER, doc_id="w")
        before = nsh.stats()
        again = nsh.add(ZH_MARATHON, doc_id="w")
        assert again.replayed and again.similar_id == first.similar_id
        assert same_stats(nsh.stats(), before)
        assert nsh.query(ZH_MARATHON) is None

    def test_replay_after_merge_answers_first_id(self, nsh: NSHash) -> None:
        """A doc_id replayed after its group merged answers its first id, the canonical beside."""
        nsh.add(FRAGMENT_A, doc_id="r")
        b = nsh.add(FRAGMENT_B, doc_id="t")
        nsh.add(WHOLE)
        again = nsh.add(FRAGMENT_B, doc_id="t")
        assert b.similar_id == 2 and b.canonical_id is None
        assert again.replayed and (again.similar_id, again.duplicate) == (2, b.duplicate)
        assert again.canonical_id == 1 == nsh.resolve(2)
        plain = nsh.add(FRAGMENT_A, doc_id="r")
        assert plain.replayed and plain.similar_id == 1 and plain.canonical_id is None

    def test_document_record(self, nsh: NSHash) -> None:
        """document(doc_id) returns the stored answer with its title, or None if unknown."""
        nsh.add(ZH_LIBRARY, doc_id="lib", title="无人图书馆开放")
        result = nsh.add(ZH_MARATHON, doc_id="run")
        record = nsh.document("run")
        assert record is not None
        assert (record.doc_id, record.similar_id, record.duplicate, record.title) == (
            "run",
            result.similar_id,
            False,
            None,
        )
        lib = nsh.document("lib")
        assert lib is not None and lib.title == "无人图书馆开放"
        assert nsh.document("missing") is None

    def test_unicode_doc_ids(self, nsh: NSHash) -> None:
        """doc_ids are arbitrary strings: non-ASCII, spaces, separators."""
        ids = ["新闻/2024:01", "a b|c", "x" * 300]
        for doc_id, text in zip(ids, ZH_STORIES, strict=False):
            nsh.add(text, doc_id=doc_id)
        for doc_id in ids:
            record = nsh.document(doc_id)
            assert record is not None and record.doc_id == doc_id
        assert sorted(m for g in nsh.groups(min_size=1) for m in g.doc_ids) == sorted(ids)

    def test_a_str_subclass_is_its_text(self, nsh: NSHash) -> None:
        """A doc_id of a str subclass (whatever its __str__ and __hash__) is kept as its text:
        the same document as that str, given back as a plain str."""

        class Odd(str):
            def __str__(self) -> str:
                return "other"

            def __hash__(self) -> int:
                return 1

            def __eq__(self, other: object) -> bool:
                return False

        first = nsh.add(EN_RAIL, doc_id=Odd("rail-1"))
        again = nsh.add(EN_TURTLES, doc_id="rail-1")  # the same document: its first answer
        assert again.similar_id == first.similar_id and nsh.stats().documents == 1
        record = nsh.document(Odd("rail-1"))
        assert record is not None and type(record.doc_id) is str and record.doc_id == "rail-1"
        (group,) = nsh.groups(min_size=1)
        assert list(group.doc_ids) == ["rail-1"] and type(group.doc_ids[0]) is str


class TestQuery:
    """A lookup-only query changes nothing."""

    def test_query_on_empty_store(self, nsh: NSHash) -> None:
        """Querying an empty store answers None and the first add still gets id 1."""
        assert nsh.query(EN_RAIL) is None
        assert nsh.stats().last_id == 0
        assert nsh.add(EN_ORCHARD).similar_id == 1

    def test_query_writes_nothing(self, nsh: NSHash) -> None:
        """Queries answer the group a text would join, and stats and later adds are unchanged."""
        rail = nsh.add(EN_RAIL).similar_id
        nsh.add(EN_TURTLES)
        before = nsh.stats()
        assert nsh.query(EN_RAIL_REPOST) == rail
        assert nsh.query(EN_BAKERY) is None
        assert nsh.query(EN_RAIL + "\n" + EN_TURTLES) == rail
        assert same_stats(nsh.stats(), before)
        assert nsh.resolve(2) == 2
        assert nsh.add(EN_BAKERY).similar_id == 3
        assert not nsh.add(EN_RAIL_REPOST).merged_from


class TestGroups:
    """groups() lists the largest groups first, with their doc ids and titles."""

    def _fill(self, nsh: NSHash) -> tuple[int, int, int]:
        big = nsh.add(ZH_WATER, doc_id="w1", title="供水改造").similar_id
        nsh.add(ZH_WATER_REPOST, doc_id="w2", title="供水改造（转载）")
        nsh.add(ZH_WATER)  # counted, but without a doc_id it is not listed
        mid = nsh.add(EN_RAIL, doc_id="r1", title="Night trains return").similar_id
        nsh.add(EN_RAIL_REPOST, doc_id="r2")
        small = nsh.add(EN_CHESS, doc_id="c1").similar_id
        return big, mid, small

    def test_largest_first(self, nsh: NSHash) -> None:
        """Groups come largest first, with sizes, doc ids in arrival order and titles."""
        big, mid, _small = self._fill(nsh)
        groups = nsh.groups()
        assert [(g.similar_id, g.size) for g in groups] == [(big, 3), (mid, 2)]
        assert groups[0].doc_ids == ["w1", "w2"]
        assert [m.title for m in groups[0].members] == ["供水改造", "供水改造（转载）"]
        assert [m.title for m in groups[1].members] == ["Night trains return", None]

    def test_min_size_and_limit(self, nsh: NSHash) -> None:
        """min_size admits smaller groups and limit cuts the list."""
        big, mid, small = self._fill(nsh)
        assert [g.similar_id for g in nsh.groups(min_size=1)] == [big, mid, small]
        assert [g.similar_id for g in nsh.groups(min_size=3)] == [big]
        assert [g.similar_id for g in nsh.groups(min_size=1, limit=2)] == [big, mid]
        assert nsh.groups(min_size=4) == []

    def test_empty_store_has_no_groups(self, nsh: NSHash) -> None:
        """A fresh store lists no groups and counts nothing."""
        assert nsh.groups(min_size=1) == []
        stats = nsh.stats()
        assert (stats.documents, stats.groups, stats.fingerprints, stats.last_id) == (0, 0, 0, 0)


class TestBoilerplateGuard:
    """A long footer shared by unrelated articles does not merge them."""

    @pytest.mark.parametrize(
        ("stories", "footer", "repost"),
        [
            (EN_STORIES, EN_FOOTER, EN_RAIL_REPOST),
            (ZH_STORIES, ZH_FOOTER, ZH_WATER_REPOST),
        ],
        ids=["en", "zh"],
    )
    def test_shared_footer_does_not_merge(
        self, nsh: NSHash, stories: list[str], footer: str, repost: str
    ) -> None:
        """Articles sharing only a footer get distinct ids; a true repost still matches."""
        results = [nsh.add(f"{text}\n{footer}") for text in stories]
        ids = [r.similar_id for r in results]
        assert ids == list(range(1, len(stories) + 1))
        assert not any(r.duplicate or r.merged_from for r in results)
        again = nsh.add(f"{repost}\n{footer}")
        assert again.similar_id == 1 and again.duplicate
        assert nsh.stats().groups == len(stories)
        # The footer alone is new content for nobody: it must not join a story either.
        assert nsh.query(footer) is None

    def test_learned_boilerplate_survives_reopen(
        self, nsh: NSHash, reopen: Callable[[], NSHash]
    ) -> None:
        """The hashes the guard learned to be boilerplate stay common after a reopen (every
        store keeps them in its own table, and the embedded ones hold them in memory too)."""
        for text in EN_STORIES:
            nsh.add(f"{text}\n{EN_FOOTER}")
        learned = nsh.stats().common_fingerprints
        assert learned > 0
        nsh.close()
        with reopen() as again:
            assert again.stats().common_fingerprints == learned
            assert again.query(EN_FOOTER) is None
            fresh = again.add(f"{ZH_STORIES[0]}\n{EN_FOOTER}")
            assert fresh.similar_id == len(EN_STORIES) + 1 and not fresh.merged_from
            assert again.stats().common_fingerprints >= learned

    def test_identical_texts_always_share(self, nsh: NSHash) -> None:
        """Two identical footer-only texts share one group whatever the guard learned."""
        for text in EN_STORIES:
            nsh.add(f"{text}\n{EN_FOOTER}")
        a = nsh.add(EN_FOOTER + " Contact the desk.")
        b = nsh.add(EN_FOOTER + " contact the desk")
        assert b.similar_id == a.similar_id and b.duplicate


class TestLongPage:
    """A page far longer than its story (the story, then ten times its length of other text:
    comments, a site's infinite scroll) joins the story's group without filling the group's
    sketch with that other text (assign.extends)."""

    def test_long_page_joins_and_leaves_the_sketch(self, nsh: NSHash) -> None:
        """The long page joins its story's group, whose sketch stays as it was; a second
        long page of the same site (its scroll) with another story joins that story, not
        the first; a plain copy of the first story still joins it."""
        story, other, scroll = synthetic_text(1, 4), synthetic_text(2, 4), synthetic_text(3, 40)
        first = nsh.add(story)
        before = nsh.store.sketch(first.similar_id)
        page = nsh.add(f"{story}\n{scroll}")
        assert page.similar_id == first.similar_id and page.duplicate
        assert nsh.store.sketch(first.similar_id) == before
        second = nsh.add(other)
        assert second.similar_id != first.similar_id
        assert nsh.add(f"{other}\n{scroll}").similar_id == second.similar_id
        assert nsh.add(story.upper()).similar_id == first.similar_id
        # A page as long as its group's text adds its values as before.
        grown = nsh.add(f"{story}\n{synthetic_text(4, 1)}")
        assert grown.similar_id == first.similar_id
        assert nsh.store.sketch(first.similar_id) != before

    def test_long_pages_meet_only_at_their_tops(self, nsh: NSHash) -> None:
        """Long pages of one site (a story, comments of its own, then the site's scroll) with
        no story group to join: the second does not join the first on the scroll, since its
        top shares nothing with it (assign.misses_top); a copy of the first joins it."""
        scroll = made_up(3, 300)

        def page(story: int) -> str:  # a story, comments of its own, the scroll
            return f"{made_up(story, 20)}\n{made_up(story + 100, 100)}\n{scroll}"

        first = nsh.add(page(21))
        second = nsh.add(page(22))
        assert second.similar_id != first.similar_id
        why = nsh.explain(page(23))
        assert any(c.long_page and c.score == 0 for c in why.candidates)
        assert nsh.add(page(21).upper()).similar_id == first.similar_id

    def test_long_pages_find_their_stories_through_their_tops(self, nsh: NSHash) -> None:
        """Stories of 2,000 characters, then a page of each ten times as long (the story,
        then comments of its own and its site's scroll): few of a page's smallest hashes lie
        in its story, but a long page takes twice the anchors, half from its top
        (fingerprint.anchors_wanted), so each finds its story. With n anchors from the whole
        page only, one of the eight missed its story and began a group of its own."""
        scroll = made_up(500, 150)
        stories = [synthetic_text(60 + k, 4) for k in range(8)]
        ids = [nsh.add(story).similar_id for story in stories]
        for k, story in enumerate(stories):
            page = f"{story}\n{made_up(600 + k, 130)}\n{scroll}"
            assert nsh.prepare(page).sentences and len(page) > 20_000
            assert nsh.add(page).similar_id == ids[k], k

    def test_long_pages_of_one_story_meet_at_their_tops(self, nsh: NSHash) -> None:
        """Two long pages of one story (its 2,000 characters, then comments of their own and
        their site's scroll), with no plain copy of it: they share under half of their
        sketches, but the second's top is the story, which the first's group holds, so it
        joins (assign.top_share; explain says it was judged on its top). A long page of another
        story of the site, sharing only the scroll, does not."""
        scroll, story = made_up(800, 100), synthetic_text(70, 4)
        first = nsh.add(f"{story}\n{made_up(700, 150)}\n{scroll}")
        second = f"{story}\n{made_up(701, 150)}\n{scroll}"
        why = nsh.explain(second)
        found = next(c for c in why.candidates if c.similar_id == first.similar_id)
        assert found.long_page and found.score >= 0.5
        assert found.shared < 0.5 * min(found.document_values, found.group_values)
        assert nsh.add(second).similar_id == first.similar_id
        other = nsh.add(f"{synthetic_text(71, 4)}\n{made_up(702, 150)}\n{scroll}")
        assert other.similar_id != first.similar_id

    def test_long_report_after_an_excerpt_of_its_middle_joins_it(self, nsh: NSHash) -> None:
        """An excerpt of a long report's middle, then the report: the report's top shares
        nothing with the excerpt's group, but the group is all part of the report, so the
        report joins it."""
        report = synthetic_text(40, 30)
        lines = report.split("\n")
        excerpt = nsh.add("\n".join(lines[70:80]))
        assert nsh.add(report).similar_id == excerpt.similar_id

    def test_full_story_after_its_flash_extends_it(self, nsh: NSHash) -> None:
        """A flash of three sentences, then its full story (twenty times as long), then a
        repost of the story's second half alone: the full story adds its values to the
        flash's small group, so the second half finds it."""
        full = synthetic_text(5, 8)
        lines = full.split("\n")
        flash = nsh.add("\n".join(lines[:3]))
        assert nsh.add(full).similar_id == flash.similar_id
        assert nsh.add("\n".join(lines[20:])).similar_id == flash.similar_id


class TestStorySpan:
    """A copy that joins a group of a story's text adds what lies between the first and the
    last value it shares with it, not its own site's wrapper (assign.story_span)."""

    @staticmethod
    def values(nsh: NSHash, text: str) -> set[int]:
        from nshash.text.fingerprint import narrow

        doc = nsh.prepare(text)
        return set((narrow(doc) if nsh.store.narrow_sketches() else doc).sketch)

    def test_copy_leaves_its_wrapper_out(self, nsh: NSHash) -> None:
        """The story's group (over 128 values) takes none of a copy's header and footer; a
        second copy with a paragraph of its own in the middle of the story adds it."""
        story = synthetic_text(11, 6)
        header, footer = made_up(12, 3), made_up(13, 3)
        first = nsh.add(story)
        values, _ = nsh.store.sketch(first.similar_id) or ((), 0)
        assert len(values) >= 128
        copy = nsh.add(f"{header}\n{story}\n{footer}")
        assert copy.similar_id == first.similar_id
        held, limit = nsh.store.sketch(first.similar_id) or ((), 0)
        wrapper = {v for v in self.values(nsh, f"{header}\n{footer}") if v < limit}
        wrapper -= self.values(nsh, story)
        assert wrapper and not wrapper & set(held)
        lines = story.split("\n")
        extra = synthetic_text(14, 1)
        longer = nsh.add("\n".join(lines[:15] + [extra] + lines[15:]))
        assert longer.similar_id == first.similar_id
        held, limit = nsh.store.sketch(first.similar_id) or ((), 0)
        added = {v for v in self.values(nsh, extra) if v < limit} - self.values(nsh, story)
        assert added and added <= set(held)


def with_typos(text: str, rate: float, seed: int) -> str:
    """*text* with *rate* of its letters changed to another letter, at random places."""
    rng = random.Random(seed)
    chars = list(text)
    spots = [i for i, c in enumerate(chars) if c.isalpha()]
    for i in rng.sample(spots, int(len(spots) * rate)):
        chars[i] = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != chars[i].lower()])
    return "".join(chars)


class TestEditedCopy:
    """A copy with typos all through it joins its story: its values lost to the edits,
    scattered between shared ones, are left out of the score (assign.edits_of); text of its
    own in one stretch is not."""

    def test_copy_with_typos_joins(self, nsh: NSHash) -> None:
        """A copy with 8 % of its letters changed shares under half of its values with the
        story, spread all through it: it joins, and explain counts its edits."""
        story = synthetic_text(7, 6)
        first = nsh.add(story)
        copy = with_typos(story, 0.08, 0)
        why = nsh.explain(copy)
        best = why.candidates[0]
        assert best.similar_id == first.similar_id and best.edits > 0
        assert best.shared < nsh.policy.theta * (best.document_values + best.edits)
        added = nsh.add(copy)
        assert added.similar_id == first.similar_id and added.duplicate

    def test_own_text_in_one_stretch_is_no_edit(self, nsh: NSHash) -> None:
        """A page of the story's first two paragraphs, then another story as long: what it
        does not share is one long run, not edits; it is a story of its own."""
        story = synthetic_text(7, 6)
        first = nsh.add(story)
        page = "\n".join(story.split("\n")[:12]) + "\n" + synthetic_text(8, 4)
        why = nsh.explain(page)
        best = why.candidates[0]
        assert best.similar_id == first.similar_id and best.edits == 0
        assert 0.3 <= best.score < nsh.policy.theta  # read for edits, and none found
        assert nsh.add(page).similar_id != first.similar_id


class TestExportReads:
    """What an export of the groups reads (see nshash.export): each group's sketch, as the
    store compares it, and the common hashes."""

    def test_sketch_of_a_group(self, nsh: NSHash) -> None:
        """A group's sketch holds what its documents sampled below its limit, in the store's
        width; a merged id answers its canonical group's; an unknown id answers None."""
        from nshash.text.fingerprint import narrow

        first = nsh.add(EN_RAIL, doc_id="a")
        nsh.add(EN_RAIL_REPOST, doc_id="b")
        values, limit = nsh.store.sketch(first.similar_id) or ((), 0)
        assert values == tuple(sorted(values)) and len(values) <= nsh.policy.sketch_cap
        docs = [nsh.prepare(t) for t in (EN_RAIL, EN_RAIL_REPOST)]
        if nsh.store.narrow_sketches():
            docs = [narrow(d) for d in docs]
        sampled = {v for d in docs for v in d.sketch if v < limit}
        assert set(values) == sampled
        assert nsh.store.sketch(999) is None

    def test_common_hashes(self, nsh: NSHash) -> None:
        """common() is the set stats() counts, as unsigned fingerprints."""
        assert nsh.store.common() == set()
        for text in EN_STORIES:
            nsh.add(f"{text}\n{EN_FOOTER}")
        common = nsh.store.common()
        assert len(common) == nsh.stats().common_fingerprints > 0
        assert all(0 <= h < 1 << 64 for h in common)


class TestThreads:
    """Concurrent writers lose nothing and group as a serial run does."""

    def test_concurrent_adds(self, nsh: NSHash) -> None:
        """8 threads adding originals and reposts: no lost write, no id twice, same grouping."""
        stories = 64
        docs = [(s, v, text) for s in range(stories) for v, text in enumerate(story_versions(s))]
        random.Random(7).shuffle(docs)
        # Serial reference run on a fresh in-process store.
        with NSHash.open("memory://") as serial:
            serial_groups = {(s, v): serial.add(text).similar_id for s, v, text in docs}
        expected = {
            frozenset(k for k, g in serial_groups.items() if g == gid)
            for gid in set(serial_groups.values())
        }
        assert expected == {frozenset((s, v) for v in range(3)) for s in range(stories)}

        threads = 8
        barrier = threading.Barrier(threads)
        answers: dict[tuple[int, int], tuple[int, bool]] = {}
        errors: list[BaseException] = []

        def work(part: list[tuple[int, int, str]]) -> None:
            try:
                barrier.wait()
                for s, v, text in part:
                    result = nsh.add(text, doc_id=f"{s}/{v}")
                    answers[(s, v)] = (result.similar_id, result.duplicate)
            except BaseException as exc:  # reported below, with the thread's failure
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(docs[t::threads],)) for t in range(threads)]
        # Switch threads as often as possible, so unguarded check-then-write races show up.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            for w in workers:
                w.start()
            for w in workers:
                w.join(timeout=60)
        finally:
            sys.setswitchinterval(interval)
        assert not errors, errors
        assert len(answers) == len(docs)

        stats = nsh.stats()
        assert stats.documents == len(docs)
        created = [sid for sid, duplicate in answers.values() if not duplicate]
        assert len(created) == len(set(created)) == stories == stats.groups == stats.last_id
        final = {key: nsh.resolve(sid) for key, (sid, _dup) in answers.items()}
        got = {frozenset(k for k, g in final.items() if g == gid) for gid in set(final.values())}
        assert got == expected
        for group in nsh.groups(min_size=1, limit=100):
            assert group.size == 3 and len(group.doc_ids) == 3


class TestClosed:
    """A closed store refuses every call."""

    def test_calls_after_close_raise(self, store_url: str) -> None:
        """Every call after close() fails with StoreClosedError; closing twice is harmless."""
        nsh = NSHash.open(store_url)
        nsh.add(EN_RAIL, doc_id="r")
        nsh.close()
        nsh.close()
        calls: list[Callable[[], object]] = [
            lambda: nsh.add(EN_TURTLES),
            lambda: nsh.add(EN_RAIL, doc_id="r"),
            lambda: nsh.get_similar(EN_TURTLES),
            lambda: nsh.query(EN_RAIL),
            lambda: nsh.resolve(1),
            lambda: nsh.document("r"),
            lambda: nsh.group(1),
            lambda: nsh.groups(),
            lambda: nsh.stats(),
        ]
        for call in calls:
            with pytest.raises(StoreClosedError):
                call()
        # A closed store is no item's failure: add_many raises rather than answering per item.
        with pytest.raises(StoreClosedError):
            nsh.add_many([EN_BAKERY, {"text": EN_RAIL, "id": "r"}])

    def test_context_manager_closes(self, store_url: str) -> None:
        """Leaving the with block closes the store."""
        with NSHash.open(store_url) as nsh:
            nsh.add(ZH_ORCHID)
        with pytest.raises(StoreClosedError):
            nsh.stats()


# -- activity: document metadata and hot stories over a time window (issue 16) -------------

#: A fixed "now" for the activity tests: 2024-05-03 12:30 UTC.
NOW = 1_714_739_400
HOUR = 3600


class Clock:
    """A settable clock: the time a document gets when added without ``published_at``."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tracked(store_url: str) -> Iterator[tuple[NSHash, Clock]]:
    """An NSHash that tracks activity on a fresh store of each backend, with its clock."""
    clock = Clock()
    with NSHash.open(store_url, track=True, clock=clock) as opened:
        yield opened, clock


class TestActivity:
    """With ``track=True`` a store keeps each document's time, url and site, each group's
    first and last seen and its documents per hour, and ranks groups over a window."""

    def test_metadata_is_kept(self, tracked: tuple[NSHash, Clock]) -> None:
        """url, site (the url's host unless given) and the added time come back per doc id."""
        nsh, clock = tracked
        nsh.add(EN_RAIL, doc_id="r1", url="https://www.Harbour.example/rail/1")
        clock.now = NOW + 60
        nsh.add(EN_RAIL_REPOST, doc_id="r2", url="https://b.example/x", site="Courier")
        nsh.add(EN_TURTLES, doc_id="t1", published_at=NOW - 2 * HOUR)
        nsh.add(EN_BAKERY)  # no doc id: counted, no metadata kept
        a, b, c, missing = nsh.doc_meta(["r1", "r2", "t1", "nope"])
        assert a == DocMeta(NOW, "https://www.Harbour.example/rail/1", "harbour.example")
        assert b == DocMeta(NOW + 60, "https://b.example/x", "Courier")
        assert c == DocMeta(NOW - 2 * HOUR, None, None)
        assert missing is None
        rail = nsh.activity(nsh.document("r1").similar_id)  # type: ignore[union-attr]
        assert rail is not None
        assert (rail.first_seen, rail.last_seen, rail.documents) == (NOW, NOW + 60, 2)
        assert rail.hours == ((NOW // HOUR * HOUR, 2),)

    def test_hot_ranks_by_documents_in_window(self, tracked: tuple[NSHash, Clock]) -> None:
        """Groups rank by their documents in the window, most first, ties by smaller id; a
        big old story does not outrank a small recent one."""
        nsh, _clock = tracked
        old = [nsh.add(t, published_at=NOW - 3 * 86400).similar_id for t in story_versions(1)]
        recent = [nsh.add(t, published_at=NOW - 3600).similar_id for t in story_versions(2)[:2]]
        one = nsh.add(EN_CHESS, doc_id="chess").similar_id
        tie = nsh.add(EN_ORCHARD).similar_id
        assert len(set(old)) == 1 and len(set(recent)) == 1
        hot = nsh.hot("24h", now=NOW)
        assert [(h.similar_id, h.recent) for h in hot] == [(recent[0], 2), (one, 1), (tie, 1)]
        assert hot[0].size == 2 and hot[0].first_seen == NOW - 3600
        week = nsh.hot("7d", now=NOW, limit=2)
        assert [(h.similar_id, h.recent) for h in week] == [(old[0], 3), (recent[0], 2)]
        assert [h.similar_id for h in nsh.hot("24h", now=NOW, min_count=2)] == [recent[0]]
        assert nsh.hot("1h", now=NOW - 10 * 86400) == []

    def test_hot_headline_and_sites(self, tracked: tuple[NSHash, Clock]) -> None:
        """A hot group carries its first title and the distinct sites of its members."""
        nsh, _clock = tracked
        nsh.add(EN_RAIL, doc_id="r1", url="https://a.example/1")
        nsh.add(EN_RAIL_REPOST, doc_id="r2", title="Night trains return", url="https://b.example/2")
        nsh.add(EN_RAIL, doc_id="r3", url="https://a.example/3")
        (top,) = nsh.hot("1h", now=NOW)
        assert (top.recent, top.size, top.title) == (3, 3, "Night trains return")
        assert top.sites == ("a.example", "b.example")

    def test_merge_moves_activity(self, tracked: tuple[NSHash, Clock]) -> None:
        """When groups merge, the merged group's hours and first/last seen move to the
        canonical id, so the window ranking counts them once, under it."""
        nsh, clock = tracked
        a = nsh.add(FRAGMENT_A, doc_id="a", published_at=NOW - 5 * HOUR).similar_id
        b = nsh.add(FRAGMENT_B, doc_id="b").similar_id
        clock.now = NOW + 10
        nsh.add(FRAGMENT_B + "\nShared by our readers.", doc_id="b-2")
        assert nsh.add(WHOLE, doc_id="bridge").merged_from == (b,)
        assert [(h.similar_id, h.recent) for h in nsh.hot("24h", now=NOW + 10)] == [(a, 4)]
        assert [(h.similar_id, h.recent) for h in nsh.hot("1h", now=NOW + 10)] == [(a, 3)]
        act = nsh.activity(b)
        assert act is not None and act.similar_id == a
        assert (act.first_seen, act.last_seen) == (NOW - 5 * HOUR, NOW + 10)
        assert act.hours == ((NOW // HOUR * HOUR - 5 * HOUR, 1), (NOW // HOUR * HOUR, 3))

    def test_replay_counts_once(self, tracked: tuple[NSHash, Clock]) -> None:
        """A doc id sent again changes neither its metadata nor the counts."""
        nsh, clock = tracked
        nsh.add(EN_RAIL, doc_id="r1", url="https://a.example/1")
        clock.now = NOW + 5
        assert nsh.add(EN_RAIL, doc_id="r1", url="https://other.example/").replayed
        assert nsh.doc_meta(["r1"]) == [DocMeta(NOW, "https://a.example/1", "a.example")]
        assert [h.recent for h in nsh.hot("1h", now=NOW + 5)] == [1]

    def test_batch_is_tracked(self, tracked: tuple[NSHash, Clock]) -> None:
        """add_many records each item's url, site and time like add."""
        nsh, _clock = tracked
        nsh.add_many(
            [
                {"text": EN_RAIL, "id": "r1", "url": "https://a.example/1"},
                {"text": EN_RAIL_REPOST, "id": "r2", "published_at": NOW - 30},
                EN_RAIL,
            ]
        )
        assert nsh.doc_meta(["r1", "r2"]) == [
            DocMeta(NOW, "https://a.example/1", "a.example"),
            DocMeta(NOW - 30, None, None),
        ]
        assert [h.recent for h in nsh.hot("1h", now=NOW)] == [3]

    def test_untracked_keeps_nothing(self, nsh: NSHash) -> None:
        """Without ``track`` nothing is recorded: no ranking, no metadata."""
        sid = nsh.add(EN_RAIL, doc_id="r1", url="https://a.example/1").similar_id
        assert nsh.hot("24h") == []
        assert nsh.activity(sid) is None
        assert nsh.doc_meta(["r1"]) == [None]

    def test_activity_survives_reopen(self, store_url: str) -> None:
        """Metadata, hours and first/last seen are durable like the rest of the store."""
        if store_url == "memory://":
            pytest.skip("memory:// without a path keeps nothing across a reopen")
        with NSHash.open(store_url, track=True, clock=Clock()) as nsh:
            for text in story_versions(3):
                nsh.add(text, doc_id=str(len(text)), url="https://a.example/x")
            before = nsh.hot("1h", now=NOW)
            sid = before[0].similar_id
            activity = nsh.activity(sid)
        with NSHash.open(store_url, track=True, clock=Clock()) as again:
            assert again.hot("1h", now=NOW) == before
            assert again.activity(sid) == activity

    def test_bad_arguments(self, tracked: tuple[NSHash, Clock]) -> None:
        """Bad windows, times and urls raise ConfigError."""
        nsh, _clock = tracked
        for window in ("", "24x", "-1h", 0, "0.5s", "1y"):
            with pytest.raises(ConfigError):
                nsh.hot(window)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="published_at"):
            nsh.add(EN_RAIL, published_at=-5)
        with pytest.raises(ConfigError, match="published_at"):
            nsh.add(EN_RAIL, published_at="yesterday")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="url"):
            nsh.add(EN_RAIL, url=42)  # type: ignore[arg-type]
        assert nsh.stats().documents == 0

    def test_group_head_lists_first_members(self, tracked: tuple[NSHash, Clock]) -> None:
        """group_head gives the whole size and only the first members, in arrival order."""
        nsh, _clock = tracked
        for i, text in enumerate(story_versions(4)):
            nsh.add(text, doc_id=f"s{i}")
        sid = nsh.document("s0").similar_id  # type: ignore[union-attr]
        head = nsh.store.group_head(sid, 2)
        assert head is not None and (head.size, head.doc_ids) == (3, ["s0", "s1"])
        assert nsh.store.group_head(sid, 10) == nsh.group(sid)
        assert nsh.store.group_head(10**6, 2) is None

    def test_hot_over_thousands_of_hours(self, tracked: tuple[NSHash, Clock]) -> None:
        """A window of more hours than one Redis call takes (4,000) still ranks exactly."""
        nsh, _clock = tracked
        docs = [DocPrint((h,), (h >> 11,), h ^ 1) for h in (11 << 40, 12 << 40, 13 << 40)]
        items, metas = [], []
        for i in range(4100):
            items.append((docs[0 if i % 3 else 1], None, None))
            metas.append(DocMeta(NOW - i * HOUR))
        items.append((docs[2], None, None))
        metas.append(DocMeta(NOW))
        outcomes = nsh.store.assign_many(items, nsh.policy, metas)
        assert all(not isinstance(o, Exception) for o in outcomes)
        top = nsh.hot(5000 * HOUR, now=NOW)
        assert [(h.similar_id, h.recent) for h in top] == [(2, 2733), (1, 1367), (3, 1)]
        assert [h.recent for h in nsh.hot("10h", now=NOW)] == [7, 4, 1]
