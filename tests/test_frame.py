"""The page's frame is not its story: the guard sets aside shared text at both edges of a page
around an unshared run, or at its end after its own text (assign.frame_of, assign.set_aside),
on every store.
"""

from __future__ import annotations

import random
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import stress
from nshash import NSHash
from nshash.methods.nshash import assign
from nshash.methods.nshash.compiled import compiled
from nshash.results import Candidate
from nshash.text.fingerprint import NO_LIMIT, PLACES, Fingerprinter, narrow, narrow_pure
from tests.test_store_contract import EN_BAKERY, EN_CHESS, EN_ORCHARD, EN_RAIL, EN_TURTLES


def flags(pattern: str) -> list[bool]:
    """``"SS..S"`` -> shared flags in page order."""
    return [c == "S" for c in pattern]


class TestFrameOf:
    """The rule on flags in page order (the reference; the compiled one is held to it below)."""

    def test_header_and_footer_around_another_story_are_the_frame(self) -> None:
        assert assign.frame_of(flags("SS" + "." * 20 + "S" * 25), 60) == 27

    def test_a_copy_that_shares_its_beginning_keeps_it(self) -> None:
        """Its unshared run (new text after the story) is shorter than its shared beginning:
        the trailing shared value is its site's footer, not a frame around another story."""
        assert assign.frame_of(flags("S" * 80 + "." * 44 + "S"), 200) == 0

    def test_no_frame_without_a_shared_end(self) -> None:
        assert assign.frame_of(flags("..." + "S" * 30 + "..."), 60) == 0  # a repost, rewrapped
        assert assign.frame_of(flags("S" * 20 + "." * 20), 60) == 0  # a shared start only
        assert assign.frame_of(flags("S" * 40), 60) == 0  # all of it

    def test_a_shared_end_after_the_page_s_own_text_is_the_frame(self) -> None:
        """A columnist's bio, a series blurb, a site's related block and footer after text
        the group does not hold: set aside when that text is a quarter of the page or more."""
        assert assign.frame_of(flags("." * 20 + "S" * 20), 60) == 20  # the group: 40 more
        assert assign.frame_of(flags("." * 4 + "S" * 12), 60) == 12  # a quarter exactly
        assert assign.frame_of(flags("." * 3 + "S" * 3), 60) == 3  # the fewest values read

    def test_the_end_matter_may_hold_text_of_the_page_s_own(self) -> None:
        """A related block's headlines, a bio and a footer, with a line of the page's own
        between them: all the shared text below the page's own head is its end matter (one
        value more or less in the middle of it does not decide)."""
        assert assign.frame_of(flags("." * 20 + "S" * 9 + "." + "S" * 10), 60) == 19
        assert assign.frame_of(flags("." * 8 + "S" * 4 + ".." + "S" * 17), 60) == 21

    def test_a_group_that_is_the_shared_end_is_this_page_s_later_part(self) -> None:
        """When the shared end is most of what the group holds, the group is this page's
        second half or overlaps it (a fragment of the story that this whole copy bridges; a
        copy that dropped the first sentence against one cut after the fourth), not a bio
        under another story: kept."""
        assert assign.frame_of(flags("." * 20 + "S" * 20), 39) == 0
        assert assign.frame_of(flags("." * 20 + "S" * 20), 40) == 20

    def test_a_short_end_is_set_aside_whatever_the_group_holds(self) -> None:
        """A bio under an article: a shared end of at most a quarter of the page is its end
        matter even where the group is little but that end (a cartoonist's strips under the
        same bio); a longer shared end against such a group, broken by an edit, is the
        page's later part."""
        assert assign.frame_of(flags("." * 30 + "S" * 10), 12) == 10
        assert assign.frame_of(flags("." * 30 + "S" * 4 + "." + "S" * 6), 12) == 10
        assert assign.frame_of(flags("." * 29 + "S" * 5 + "." + "S" * 6), 12) == 0
        assert assign.frame_of(flags("." * 29 + "S" * 5 + "." + "S" * 6), 22) == 11

    def test_an_unbroken_end_under_half_the_page_is_set_aside_whatever_the_group_holds(
        self,
    ) -> None:
        """The same words on every page that carries them (a series blurb under a caption,
        a site's related block and footer under a short story): one unbroken shared run
        below the page's own text, under half of the page, is its end matter even where the
        group is little but that run; from half of the page on, it is the page's later
        part."""
        assert assign.frame_of(flags("." * 29 + "S" * 11), 12) == 11
        assert assign.frame_of(flags("." * 21 + "S" * 19), 19) == 19
        assert assign.frame_of(flags("." * 20 + "S" * 20), 20) == 0
        assert assign.frame_of(flags("." * 21 + "S" * 9 + "." + "S" * 9), 19) == 0

    def test_a_copy_under_a_short_new_intro_keeps_its_match(self) -> None:
        """ "Source: ...", a reporter's line, an editor's note: an unshared head under a
        quarter of the page is an intro to the shared story, not the page's own story."""
        assert assign.frame_of(flags("." * 4 + "S" * 13), 60) == 0
        assert assign.frame_of(flags("." * 6 + "S" * 30), 60) == 0
        assert assign.frame_of(flags("." * 6 + "S" * 9 + "." + "S" * 20), 60) == 0

    def test_a_page_that_shares_its_top_is_judged_as_it_is(self) -> None:
        """A shared value in the page's first few values (or its first quarter): the page
        shares more than its end (a copy with edits, a rewrapped repost)."""
        assert assign.frame_of(flags("..S" + "." * 17 + "S" * 20), 60) == 0
        assert assign.frame_of(flags("." * 4 + "S" + "." * 35 + "S" * 20), 60) == 0

    def test_a_short_gap_is_an_edit_not_a_story(self) -> None:
        """Promotional lines between paragraphs: unshared runs under a quarter of the page."""
        assert assign.frame_of(flags("S" * 10 + "..." + "S" * 10 + ".." + "S" * 10), 60) == 0

    def test_edits_here_and_there_are_no_frame(self) -> None:
        """Figures changed in several places (the rest of the text common, so few values are
        compared): the unshared runs are short and broken by shared values, no one block."""
        assert assign.frame_of(flags("S..S....S.SSSSSS"), 16) == 0
        assert assign.frame_of(flags("S.........SSSSSS"), 16) == 7

    def test_too_few_values_say_nothing(self) -> None:
        few = "S" + "." * (assign.FRAME_LEAST - 3) + "S"
        assert len(few) < assign.FRAME_LEAST
        assert assign.frame_of(flags(few), 60) == 0
        assert assign.frame_of(flags("S" + "." * (assign.FRAME_LEAST - 2) + "S"), 60) == 2
        end = "." * (assign.END_LEAST - 2) + "SS"
        assert len(end) == assign.END_LEAST
        assert assign.frame_of(flags(end), 60) == 2
        assert assign.frame_of(flags(end[1:]), 60) == 0

    def test_a_short_text_reordered_keeps_its_match(self) -> None:
        """Two sentences swapped: the second, the seam, the first (shared, unshared, shared)
        on a few values is not a frame around another story."""
        assert assign.frame_of(flags("SSS...SS"), 10) == 0

    def test_a_group_that_is_the_frame_is_a_short_copy(self) -> None:
        """When the edges are most of what the group holds, the group is an abridged copy of
        this page (first and last paragraphs), not a wrapper around another story."""
        pattern = flags("S" * 23 + "." * 34 + "S" * 20)
        assert assign.frame_of(pattern, 46) == 0
        assert assign.frame_of(pattern, 200) == 43


class TestEditsOf:
    """Scattered edits (assign.edits_of): a copy with typos all through it keeps values all
    along the text; another story's text is one long unshared run."""

    def test_typos_all_through_are_edits(self) -> None:
        pattern = "S.S..SS.S." * 6 + "SS"  # 62 values, 32 shared, gaps of 2 at most
        assert assign.edits_of(flags(pattern)) == 30
        # under a site's own wrapper (unshared edges), the span is what counts
        assert assign.edits_of(flags("...." + pattern + "......")) == 30

    def test_own_text_in_one_run_is_not(self) -> None:
        # a quarter of the span unshared in one run: the page's own text
        assert assign.edits_of(flags("S.S." * 10 + "." * 16 + "S.S." * 10)) == 0

    def test_edges(self) -> None:
        span = "S." * (assign.EDIT_LEAST // 2 - 1) + "SS"  # EDIT_LEAST values, 13 shared
        assert len(span) == assign.EDIT_LEAST
        assert assign.edits_of(flags(span)) == span.count(".")
        assert assign.edits_of(flags(span[2:])) == 0  # too few values in the span
        # the span covers at least EDIT_COVER of the values compared
        outside = int(len(span) / assign.EDIT_COVER) - len(span)
        assert assign.edits_of(flags(span + "." * outside)) == span.count(".")
        assert assign.edits_of(flags(span + "." * (outside + 1))) == 0
        # at least EDIT_DENSITY of the span is shared: 9 of 33 is enough, 9 of 41 too few
        assert assign.edits_of(flags("S..." * 8 + "S")) == 24
        assert assign.edits_of(flags("S...." * 8 + "S")) == 0
        # no unshared run longer than 1/EDIT_GAP of the span: 5 in 45, not 6 in 46 (the
        # side of it with fewer shared values is then cut off, and the rest is too short)
        assert assign.edits_of(flags("S." * 10 + "...." + "S." * 10 + "S")) == 24
        assert assign.edits_of(flags("S." * 10 + "....." + "S." * 10 + "S")) == 0

    def test_sentences_quoted_whole_are_not_edits(self) -> None:
        """Another article on the same event quoting some of the story's sentences whole:
        long shared runs between long unshared ones, each within the span's bounds; but
        its unshared runs are longer than EDIT_RUN on average, a typo's are short."""
        assert assign.EDIT_RUN == 6
        assert assign.edits_of(flags(("S" * 8 + "." * 6) * 6 + "S" * 8)) == 36
        assert assign.edits_of(flags(("S" * 8 + "." * 7) * 6 + "S" * 8)) == 0
        # one longer run among short ones: the average decides, not the longest
        assert assign.edits_of(flags("S." * 20 + "." * 9 + "S." * 20 + "S")) == 49

    def test_stray_ends_are_cut_off(self) -> None:
        """A shared value or two past a long unshared run (a related block's heading that
        two sites word alike, under the copy's own related block and footer) does not
        stretch the span over the page's own wrapper: that side is cut off."""
        pattern = "S.S..SS.S." * 6 + "SS"  # 62 values, 30 of them edits
        assert assign.edits_of(flags("...." + pattern + "." * 20 + "SS")) == 30
        assert assign.edits_of(flags("SS" + "." * 20 + pattern + "....")) == 30
        # the longer side stays whichever end it is at: the two strays are what goes
        assert assign.edits_of(flags("S" + "." * 15 + pattern + "." * 15 + "S")) == 30
        # EDIT_TRIMS ends at most: a third stray leaves a run too long in the span
        body = pattern * 3
        assert assign.EDIT_TRIMS == 2
        assert assign.edits_of(flags(("S" + "." * 40) * 2 + body)) == 90
        assert assign.edits_of(flags(("S" + "." * 40) * 3 + body)) == 0

    def test_nothing_shared(self) -> None:
        assert assign.edits_of(flags("." * 40)) == 0


class TestMissesTop:
    """A long page whose top shares (next to) nothing with a group that has text of its own
    is refused (assign.misses_top); the rule reads the page's values in page order."""

    @staticmethod
    def found(shared: int, theirs: int) -> Candidate:
        return Candidate(1, (), shared, 64, theirs, 0.9)

    def test_long_page_sharing_only_below_its_top(self) -> None:
        sketch = list(range(64))
        places = array(PLACES, [i * 200 for i in range(64)]).tobytes()  # reaching 12,600
        below = sketch[8:40]  # its first eighth (8 values) shares nothing
        assert assign.misses_top(self.found(32, 64), sketch, places, NO_LIMIT, set(), set(), below)
        stray = sketch[7:40]  # ... one value in eight of it is shared (a stray phrase)
        assert assign.misses_top(self.found(33, 64), sketch, places, NO_LIMIT, set(), set(), stray)
        top = sketch[6:40]  # ... two values of it are shared
        assert not assign.misses_top(
            self.found(34, 64), sketch, places, NO_LIMIT, set(), set(), top
        )

    def test_short_page_or_a_group_that_is_part_of_it(self) -> None:
        sketch, below = list(range(64)), list(range(8, 40))
        short = array(PLACES, [i * 100 for i in range(64)]).tobytes()  # reaching 6,300
        assert not assign.misses_top(
            self.found(32, 64), sketch, short, NO_LIMIT, set(), set(), below
        )
        long = array(PLACES, [i * 200 for i in range(64)]).tobytes()
        # a group of 36 values, 32 of them the page's: under an eighth its own
        assert not assign.misses_top(
            self.found(32, 36), sketch, long, NO_LIMIT, set(), set(), below
        )
        assert assign.misses_top(self.found(32, 37), sketch, long, NO_LIMIT, set(), set(), below)
        assert not assign.misses_top(self.found(32, 64), sketch, b"", NO_LIMIT, set(), set(), below)


class TestTopShare:
    """A long page a little short of theta against a group is scored by the share of its top
    that the group holds (assign.top_share), where its top holds enough values."""

    LONG = array(PLACES, [i * 200 for i in range(64)]).tobytes()  # reaching 12,600

    def test_the_share_of_the_top(self) -> None:
        sketch = list(range(64))
        held = sketch[:6] + sketch[40:50]  # 6 of its first eighth (8 values), 16 in all
        assert assign.top_share(sketch, self.LONG, NO_LIMIT, set(), set(), held) == 0.75
        assert assign.top_share(sketch, self.LONG, NO_LIMIT, set(), set(), sketch[8:]) == 0.0
        short = array(PLACES, [i * 100 for i in range(64)]).tobytes()  # reaching 6,300
        assert assign.top_share(sketch, short, NO_LIMIT, set(), set(), held) == 0.0
        few = list(range(40))  # a top of five values: too few to judge by
        places = array(PLACES, [i * 300 for i in range(40)]).tobytes()
        assert assign.top_share(few, places, NO_LIMIT, set(), set(), few[:5]) == 0.0

    def test_a_long_page_short_of_theta_is_judged_by_its_top(self) -> None:
        sketch = list(range(64))
        policy = assign.MatchPolicy()
        held = sketch[:6] + sketch[40:56]  # 22 of 64: score 0.34
        found = assign.judged(1, (), len(held), 64, 64, policy)
        again = assign.unframed(found, sketch, self.LONG, NO_LIMIT, set(), set(), held, policy)
        assert again.long_page and again.score == 0.75 and again.shared == len(held)
        low = sketch[:6] + sketch[40:46]  # 12 of 64: under TOP_LOW, left as it was
        found = assign.judged(1, (), len(low), 64, 64, policy)
        assert (
            assign.unframed(found, sketch, self.LONG, NO_LIMIT, set(), set(), low, policy) == found
        )
        below = sketch[4:6] + sketch[40:60]  # its top mostly not the group's
        found = assign.judged(1, (), len(below), 64, 64, policy)
        again = assign.unframed(found, sketch, self.LONG, NO_LIMIT, set(), set(), below, policy)
        assert again == found and not again.long_page


SETS = st.lists(st.integers(0, 60), unique=True, max_size=40).map(sorted)


@pytest.mark.skipif(compiled("set_aside") is None, reason="the compiled assignment is not built")
class TestCompiledEqualsReference:
    @settings(max_examples=300, deadline=None)
    @given(
        sketch=SETS,
        data=st.data(),
        limit=st.integers(0, 70),
        theirs=st.integers(0, 80),
    )
    def test_set_aside(
        self, sketch: list[int], data: st.DataObject, limit: int, theirs: int
    ) -> None:
        """Any sketch, places, limit, common values and shared values: the same count."""
        places = data.draw(
            st.lists(st.integers(0, 2**32 - 1), min_size=len(sketch), max_size=len(sketch))
        )
        packed = array(PLACES, places).tobytes()
        common = set(data.draw(st.lists(st.sampled_from(sketch), max_size=5))) if sketch else set()
        shared = data.draw(st.lists(st.sampled_from(sketch), unique=True)) if sketch else []
        fast = compiled("set_aside")(sketch, packed, limit, common, set(), shared, theirs)
        pure = assign.set_aside_pure(sketch, packed, limit, common, set(), shared, theirs)
        assert fast == pure

    @settings(max_examples=300, deadline=None)
    @given(
        sketch=st.lists(st.integers(0, 300), unique=True, min_size=20, max_size=120).map(sorted),
        data=st.data(),
        limit=st.integers(0, 320),
    )
    def test_edits_in(self, sketch: list[int], data: st.DataObject, limit: int) -> None:
        """Any sketch, places, limit, common values and shared values: the same count (the
        shared values drawn as runs, so that some pages are edited copies)."""
        places = data.draw(
            st.lists(st.integers(0, 999), min_size=len(sketch), max_size=len(sketch))
        )
        packed = array(PLACES, places).tobytes()
        common = set(data.draw(st.lists(st.sampled_from(sketch), max_size=3)))
        keep = data.draw(st.sampled_from([2, 3, 5]))
        shared = [v for i, v in enumerate(sketch) if i % keep != 1]
        edits = compiled("edits_in")
        fast = edits(sketch, packed, limit, common, set(), shared)
        assert fast == assign.edits_in_pure(sketch, packed, limit, common, set(), shared)

    @settings(max_examples=300, deadline=None)
    @given(
        runs=st.lists(st.tuples(st.booleans(), st.integers(1, 25)), min_size=1, max_size=30)
    )
    def test_edits_of(self, runs: list[tuple[bool, int]]) -> None:
        """Any page drawn as runs of shared and unshared values (long runs, stray ends, the
        trims): the compiled rule counts the edits the reference counts."""
        pattern = [shared for shared, length in runs for _ in range(length)]
        sketch = list(range(len(pattern)))
        places = array(PLACES, sketch).tobytes()
        shared = [v for v, s in zip(sketch, pattern, strict=True) if s]
        fast = compiled("edits_in")(sketch, places, NO_LIMIT, set(), set(), shared)
        pure = assign.edits_in_pure(sketch, places, NO_LIMIT, set(), set(), shared)
        assert fast == pure == assign.edits_of(pattern)

    @settings(max_examples=300, deadline=None)
    @given(
        runs=st.lists(st.tuples(st.booleans(), st.integers(1, 25)), min_size=1, max_size=12),
        theirs=st.integers(0, 120),
    )
    def test_frame_of(self, runs: list[tuple[bool, int]], theirs: int) -> None:
        """Any page drawn as runs of shared and unshared values (two edges, an end matter
        unbroken or not, under or over half of the page): the compiled rule sets aside what
        the reference sets aside."""
        pattern = [shared for shared, length in runs for _ in range(length)]
        sketch = list(range(len(pattern)))
        places = array(PLACES, sketch).tobytes()
        shared = [v for v, s in zip(sketch, pattern, strict=True) if s]
        fast = compiled("set_aside")(sketch, places, NO_LIMIT, set(), set(), shared, theirs)
        pure = assign.set_aside_pure(sketch, places, NO_LIMIT, set(), set(), shared, theirs)
        assert fast == pure == assign.frame_of(pattern, theirs)

    def test_edits_in_reads_page_order(self) -> None:
        """Values shared every other one in page order are edits; the same values with the
        shared ones all first in the page are one shared run and one unshared: none."""
        sketch = list(range(60))
        shared = sketch[::2]
        spread = array(PLACES, range(60)).tobytes()
        apart = array(PLACES, [i // 2 if i % 2 == 0 else 100 + i for i in range(60)]).tobytes()
        for edits_in in (compiled("edits_in"), assign.edits_in_pure):
            assert edits_in(sketch, spread, NO_LIMIT, set(), set(), shared) == 29
            assert edits_in(sketch, apart, NO_LIMIT, set(), set(), shared) == 0
            assert edits_in(sketch, b"", NO_LIMIT, set(), set(), shared) == 0

    def test_no_places_no_frame(self) -> None:
        sketch = list(range(20))
        shared = sketch[:2] + sketch[-6:]
        for places in (b"", b"\0" * 12):  # none, or not one a value
            assert compiled("set_aside")(sketch, places, NO_LIMIT, set(), set(), shared, 99) == 0
            assert assign.set_aside_pure(sketch, places, NO_LIMIT, set(), set(), shared, 99) == 0


#: The Redis scripts' frame and edit rules, run on pages given as ARGV: a count, the group's
#: values compared and the flags ("1" shared) of each, after the base name; the answers are
#: the two counts of each page.
_LUA_RULES = """
local out = {}
local i = 2
while i <= #ARGV do
  local n, theirs = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local f = {}
  for j = 1, n do f[j] = tonumber(string.sub(ARGV[i + 2], j, j)) end
  out[#out + 1] = frame_of(f, n, theirs)
  out[#out + 1] = edits_of(f, n)
  i = i + 3
end
return out
"""


def test_the_redis_scripts_judge_as_the_reference(redis_base_url: str) -> None:
    """The Redis scripts' copy of the frame and edit rules (nshash_common.lua), run by a real
    Redis on 2,000 pages drawn as runs of shared and unshared values, count what
    assign.frame_of and assign.edits_of count."""
    redis = pytest.importorskip("redis")
    from nshash.stores.scripts import lua_script

    rng = random.Random(30)
    pages = []
    for _ in range(2000):
        runs = [(rng.random() < 0.5, rng.randint(1, 25)) for _ in range(rng.randint(1, 12))]
        pages.append(([s for s, length in runs for _ in range(length)], rng.randint(0, 120)))
    args: list[str] = ["base"]
    for pattern, theirs in pages:
        args += [str(len(pattern)), str(theirs), "".join("1" if s else "0" for s in pattern)]
    client = redis.Redis.from_url(redis_base_url)
    try:
        keys = [f"rules-{i}" for i in range(10)]  # the tables the scripts name (none is read)
        got = client.eval(lua_script("nshash_common") + _LUA_RULES, len(keys), *keys, *args)
    finally:
        client.close()
    want = [n for p, theirs in pages for n in (assign.frame_of(p, theirs), assign.edits_of(p))]
    assert got == want
    unbroken = [
        p for p, theirs in pages
        if p and not p[0] and assign.frame_of(p, theirs) and sum(p) * assign.END_PART > len(p)
        and sum(p) * 2 > theirs
    ]  # fmt: skip
    assert unbroken  # the unbroken end rule was drawn


class TestPlaces:
    """Each sketch value's place is where its first shingle starts, on both paths."""

    def test_places_follow_the_text(self) -> None:
        fp = Fingerprinter()
        head, tail = EN_RAIL, EN_CHESS
        doc = fp.prepare(f"{head}\n{tail}")
        alone = fp.prepare(tail)
        at = dict(zip(doc.sketch, array(PLACES, doc.places), strict=True))
        start = len("".join(fp.sentence_keys(head)))
        # A value of the second part alone lies past the first part in the whole text.
        later = [at[v] for v in alone.sketch if v in at and v not in fp.prepare(head).sketch]
        assert later and min(later) >= start - fp.shingle
        assert doc == fp.prepare_pure(f"{head}\n{tail}")

    def test_narrow_keeps_the_first_place(self) -> None:
        fp = Fingerprinter()
        doc = fp.prepare(EN_ORCHARD * 3)
        for narrowed in (narrow(doc), narrow_pure(doc)):
            assert len(array(PLACES, narrowed.places)) == len(narrowed.sketch)
        assert narrow(doc) == narrow_pure(doc)


def page(site: str, body: str, related: str) -> str:
    """A page as a small site publishes it: its header, the body, its related block and its
    footer."""
    header = f"{site} | Home > World | Subscribe | Sign in | Newsletters | Podcasts | Video"
    footer = (
        f"Copyright 2024 {site}. All rights reserved. This material may not be published,"
        " broadcast, rewritten or redistributed without permission. Follow us on social media"
        " and sign up for our newsletter to get the day's top stories in your inbox."
    )
    return f"{header}\n\n{body}\n\nRelated articles\n{related}\n\n{footer}"


RELATED = (
    "City council approves the new budget after a long night of debate\n"
    "Storm leaves thousands without power across the northern valleys\n"
    "Local team wins the regional final in extra time before a record crowd\n"
    "Museum reopens its east wing after two years of careful restoration work"
)


def lead(text: str) -> str:
    """A brief: the first two sentences of a story."""
    return ". ".join(text.split(". ")[:2]) + "."


def refused_on_its_frame(nsh: NSHash, text: str, first: int, doc_id: str) -> None:
    """Adding *text* starts a story of its own, refused by group *first* only because of the
    frame set aside: counted whole, what the two share would have passed."""
    why = nsh.explain(text)
    added = nsh.add(text, doc_id=doc_id)
    assert added.similar_id != first and not added.duplicate
    (cand,) = [c for c in why.candidates if c.similar_id == first]
    assert cand.verdict == "refused" and cand.frame > 0
    whole = (cand.shared + cand.frame) / min(
        cand.document_values + cand.frame, cand.group_values + cand.frame
    )
    assert whole >= nsh.policy.theta > cand.score
    assert why.to_dict()["candidates"][0]["frame"] >= 0


class TestOnEveryStore:
    def test_a_new_site_s_briefs_do_not_glue_on_its_wrapper(self, store_url: str) -> None:
        """Two short pages of one new site share its header, related block and footer, more
        than half of each page: without the frame rule the second joined the first. Now it is
        a story of its own, and the evidence says what was set aside."""
        with NSHash.open(store_url) as nsh:
            first = nsh.add(page("Harbor Wire", lead(EN_TURTLES), RELATED), doc_id="b1")
            text = page("Harbor Wire", lead(EN_BAKERY), RELATED)
            refused_on_its_frame(nsh, text, first.similar_id, "b2")

    def test_reposts_with_another_wrapper_still_join(self, store_url: str) -> None:
        """A full copy on another site, and one on the same site: both join the story."""
        with NSHash.open(store_url) as nsh:
            story = f"{EN_TURTLES}\n{EN_ORCHARD}"
            original = nsh.add(page("Harbor Wire", story, RELATED))
            repost = nsh.add(page("Valley Post", story, RELATED.upper()))
            again = nsh.add(page("Harbor Wire", story.replace("turtles", "sea turtles"), RELATED))
            assert repost.similar_id == again.similar_id == original.similar_id
            assert repost.duplicate and again.duplicate

    def test_pages_that_share_only_a_columnist_s_bio_stay_apart(self, store_url: str) -> None:
        """A short column whose bio is more than half of it, after a longer one with the
        same bio: the bio ends the page, after text the other does not hold, and the other
        holds more text of its own, so the bio is set aside and the second column is its own
        story. A copy of the first under a one-line intro still joins it."""
        bio = (
            "About the author: Mara Quinlan has covered coastal towns, fisheries and the"
            " weather that shapes them for two decades, first at a county weekly and later as"
            " a correspondent for regional radio. She lives by the harbor with two dogs and a"
            " boat that rarely starts, and writes this column every other Sunday. Her books"
            " include a history of the lighthouse keepers of the northern cape and a guide to"
            " the tide pools of the bay; readers can reach her through the letters page."
            # (one sentence more since letters weigh 2 units: the bio as it was made just
            # under half of the second column's sketch, refused then without the frame)
            " She once rowed across the bay in a storm to deliver the weekly paper, and the"
            " story is told in every pub along the coast."
        )
        with NSHash.open(store_url) as nsh:
            first = nsh.add(f"{EN_TURTLES}\n{EN_RAIL}\n\n{bio}", doc_id="c1")
            refused_on_its_frame(nsh, f"{EN_BAKERY}\n\n{bio}", first.similar_id, "c2")
            copy = nsh.add(f"Source: agencies.\n\n{EN_TURTLES}\n{EN_RAIL}\n\n{bio}", doc_id="c3")
            assert copy.similar_id == first.similar_id

    def test_a_caption_above_its_site_s_end_matter_is_its_own_story(self, store_url: str) -> None:
        """A few lines of a page's own (a cartoon's caption, a video's summary) above its
        site's related block, its date line and its footer, whose block and footer a long
        story of that site holds too: the shared text is most of the short page, in two runs
        around the date, yet it is the site's end matter, below the page's own text and a
        small part of the story's: set aside, and the page is its own story. An excerpt of
        the story under a one-line intro, above the same end, still joins."""
        footer = page("Harbor Wire", "", "").rsplit("\n\n", 1)[1]
        block = f"Related articles\n{RELATED}"
        story = f"{EN_TURTLES}\n{EN_ORCHARD}\n{EN_RAIL}"
        end = f"{block}\n\nPublished on the third of May at twenty to eleven\n\n{footer}"
        caption = "\n".join(EN_BAKERY.splitlines()[:2])
        with NSHash.open(store_url) as nsh:
            first = nsh.add(f"{story}\n\n{block}\n\n{footer}", doc_id="s1")
            refused_on_its_frame(nsh, f"{caption}\n\n{end}", first.similar_id, "s2")
            excerpt = f"Source: agencies.\n\n{EN_RAIL.splitlines()[0]}\n\n{end}"
            assert nsh.add(excerpt, doc_id="s3").similar_id == first.similar_id

    def test_a_story_under_its_site_s_end_matter_is_not_a_brief_of_that_site(
        self, store_url: str
    ) -> None:
        """A brief of one story above its site's related block and footer makes a group that
        is mostly that end; a longer story of the same site above the same end shares it
        unbroken, under half of the page: the site's end matter, set aside whatever the group
        holds, and the story is its own. The brief again under a one-line intro still
        joins."""
        footer = page("Harbor Wire", "", "").rsplit("\n\n", 1)[1]
        end = f"Related articles\n{RELATED}\n\n{footer}"
        with NSHash.open(store_url) as nsh:
            brief = nsh.add(f"{lead(EN_TURTLES)}\n\n{end}", doc_id="b1")
            story = f"{EN_BAKERY}\n{EN_CHESS}\n\n{end}"
            refused_on_its_frame(nsh, story, brief.similar_id, "s1")
            again = nsh.add(f"Source: agencies.\n\n{lead(EN_TURTLES)}\n\n{end}", doc_id="b2")
            assert again.similar_id == brief.similar_id

    def test_an_article_under_the_bio_of_strips_is_its_own_story(self, store_url: str) -> None:
        """A cartoonist's strips, each a caption line above the bio and the site's footer, make
        a group that is little but the bio; the cartoonist's article, a story under the same
        bio, shares the bio with it: more than half of the group's values, but a small end of
        the article. It is set aside, and the article is its own story."""
        footer = page("Harbor Wire", "", "").rsplit("\n\n", 1)[1]
        bio = (
            "About the author: Vera Tan draws a strip about city life every week for the Harbor "
            "Wire, teaches art at a secondary school and has published two collections of her "
            "cartoons, the latest on the ferries and the people who ride them every morning."
        )
        article = f"{EN_TURTLES}\n{EN_ORCHARD}\n{EN_RAIL}\n{EN_CHESS}\n{EN_BAKERY}"
        with NSHash.open(store_url) as nsh:
            strip = nsh.add(f"The ferry at dawn.\n\n{bio}\n\n{footer}", doc_id="c1")
            nsh.add(f"Rain on the harbor.\n\n{bio}\n\n{footer}", doc_id="c2")
            refused_on_its_frame(nsh, f"{article}\n\n{bio}\n\n{footer}", strip.similar_id, "a1")


#: Stress scenarios whose pages the frame rule decides (a site's wrapper around short pages,
#: bios after columns, a new site's briefs), built from a made-up corpus.
FRAMED = [("big_short", "en"), ("bio", "zh"), ("briefs", "zh")]


@pytest.fixture(scope="module")
def framed_set() -> tuple[list[str], list[int]]:
    """The scenarios' texts one after the other, and the groups ``memory://`` gives them."""
    from tests.test_stress_sets import _source

    sources = {lang: _source(lang) for _, lang in FRAMED}
    texts = [
        d.text
        for scenario, lang in FRAMED
        for d in stress.build(scenario, lang, source=sources[lang])
    ]
    with NSHash.open("memory://") as nsh:
        ids = [nsh.add(t).similar_id for t in texts]
        return texts, [nsh.resolve(g) for g in ids]


def test_every_store_groups_the_framed_sets_alike(
    store_url: str, framed_set: tuple[list[str], list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same pages, the same groups on every store (the compiled core, the Python
    reference and the Redis scripts each judge frames), and frames were set aside on the
    way."""
    found: list[int] = []
    real = assign.set_aside

    def counting(*args: object) -> int:
        frame = real(*args)  # type: ignore[arg-type]
        found.append(frame)
        return frame

    monkeypatch.setattr(assign, "set_aside", counting)
    texts, expected = framed_set
    with NSHash.open(store_url) as nsh:
        ids = [nsh.add(t).similar_id for t in texts]
        assert [nsh.resolve(g) for g in ids] == expected
    if store_url.startswith(("leveldb", "sqlite")):  # judged through the Python reference
        assert sum(1 for f in found if f) >= 10


def test_extends_counts_what_both_sketches_hold() -> None:
    """A joining page adds its sketch unless it holds more than LONGER times the group's
    values below its own limit; a page whose limit is not below the group's always adds."""
    extends, LONGER, FROM = assign.extends, assign.LONGER, assign.LONGER_FROM
    group = (tuple(range(0, 10 * FROM, 10)), NO_LIMIT)  # FROM values, complete
    assert extends(group, tuple(range(5)), NO_LIMIT)  # a short page
    wide = tuple(range(0, 10 * FROM, 3))  # 3.3 values for each of the group's
    assert extends(group, wide, 10 * FROM)
    page = tuple(range(2 * LONGER + 1))  # below 20: the group holds 0 and 10
    assert not extends(group, page, 20)
    assert extends(group, page[:-1], 20)  # exactly LONGER times: it adds
    assert extends((group[0][1:], NO_LIMIT), page, 20)  # a group under FROM values: a brief
    assert extends((tuple(range(FROM)), FROM), tuple(range(10 * FROM)), FROM)  # the same limit
