"""Boilerplate learned from frequency: every placed page votes its last values, in page order,
for the group it joins (assign.tail_of), so a site's end matter that lands in three groups is
common though no page was ever compared with another on it; a story's own end, carried by all
its copies, lands in one group and stays. On every store, and in the Spark job's reading."""

from __future__ import annotations

from array import array

import pytest

from nshash import NSHash
from nshash.methods.nshash import assign
from nshash.text.fingerprint import NO_LIMIT, PLACES, DocPrint, narrow
from tests.test_store_contract import EN_BAKERY, EN_CHESS, EN_ORCHARD, EN_RAIL, EN_TURTLES

#: A site's footer, the same under every page of the site.
FOOTER = (
    "Copyright 2024 Harbor Wire. All rights reserved. This material may not be published,"
    " broadcast, rewritten or redistributed without permission."
)

#: Three stories of the site, none of whose anchors (with n=2) falls in the footer: no page
#: is ever compared with another, so no refusal votes on the footer.
STORIES = [f"{EN_RAIL}\n{EN_TURTLES}", f"{EN_BAKERY}\n{EN_CHESS}", f"{EN_ORCHARD}\n{EN_CHESS}"]


def doc_of(values: list[int], places: list[int], limit: int = NO_LIMIT) -> DocPrint:
    return DocPrint((), tuple(values), 0, limit, array(PLACES, places).tobytes())


class TestTailOf:
    def test_the_last_values_in_page_order(self) -> None:
        """The page's last TAIL_VOTES values by place (not by value), ascending."""
        n = assign.TAIL_VOTES
        values = list(range(100, 100 + 3 * n))
        places = [3 * n - i for i in range(3 * n)]  # the smallest values end the page
        assert assign.tail_of(doc_of(values, places), set(), set()) == values[:n]

    def test_common_values_are_skipped_and_the_next_ones_taken(self) -> None:
        n = assign.TAIL_VOTES
        values = list(range(10, 10 + 2 * n))
        places = list(range(2 * n))
        common = {values[-1], values[-3]}
        got = assign.tail_of(doc_of(values, places), common, set())
        assert got == [v for v in values if v not in common][-n:]
        assert assign.tail_of(doc_of(values, places), set(), {values[-1]}) == values[-n - 1 : -1]

    def test_ties_by_value_and_the_limit(self) -> None:
        """Values at one place order by value; values past the limit are not compared."""
        n = assign.TAIL_VOTES
        values = list(range(1, 2 * n + 1))
        places = [0] * n + [5] * n
        assert assign.tail_of(doc_of(values, places), set(), set()) == values[n:]
        limited = doc_of(values, places, limit=values[-2])
        assert assign.tail_of(limited, set(), set()) == values[n - 2 : -2]

    def test_no_places_no_tail(self) -> None:
        assert assign.tail_of(DocPrint((), (1, 2, 3), 0, NO_LIMIT, b""), set(), set()) == []


def tail(nsh: NSHash, text: str) -> list[int]:
    """The values a placement of *text* would vote for its group, as the store compares them."""
    doc = nsh.prepare(text)
    if nsh.store.narrow_sketches():
        doc = narrow(doc)
    return assign.tail_of(doc, nsh.store.common(), set())


class TestOnEveryStore:
    def test_a_footer_in_three_groups_is_common_without_a_refusal(self, store_url: str) -> None:
        """Three stories of one site under its footer, none compared with another: the
        footer ends each page, each page votes it for its own group, and at the third group
        it is common. Before, no refusal ever voted on it: it stayed a story's text."""
        with NSHash.open(store_url, n=2) as nsh:
            pages = [f"{story}\n\n{FOOTER}" for story in STORIES]
            for i, page in enumerate(pages):
                assert nsh.explain(page).candidates == []  # no refusal, no vote of one
                nsh.add(page, doc_id=f"p{i}")
                if i == 0:  # (a store's first group settles how it compares sketches)
                    ends = [tail(nsh, page) for page in pages]
                    assert ends[0] == ends[1] == ends[2] and len(ends[0]) == assign.TAIL_VOTES
                learned = set(ends[0]) <= nsh.store.common()
                assert learned == (i == 2)
            assert nsh.stats().groups == 3

    def test_a_story_s_own_end_stays_its_own(self, store_url: str) -> None:
        """Four copies of one story, each under its own source line, join its group; the
        story's last values, which every copy ends with, vote for that one group only and
        never become common."""
        story = f"{EN_RAIL}\n{EN_TURTLES}"
        with NSHash.open(store_url, n=2) as nsh:
            first = nsh.add(story, doc_id="s0")
            end = tail(nsh, story)
            assert len(end) == assign.TAIL_VOTES
            for i in range(4):
                copy = nsh.add(f"Source: agency {i}.\n\n{story}", doc_id=f"s{i + 1}")
                assert copy.similar_id == first.similar_id
            assert not set(end) & nsh.store.common()


def test_the_spark_job_reads_each_node_s_tail() -> None:
    """The Spark job's boilerplate stage counts each node's tail with the refusals' votes:
    the rows its Arrow function writes are tail_values of each node, none for a node without
    places."""
    pa = pytest.importorskip("pyarrow")
    pytest.importorskip("pyspark")
    from nshash.spark import _tail_batches

    n = assign.TAIL_VOTES
    values = list(range(7, 7 + 2 * n))
    places = array(PLACES, range(2 * n)).tobytes()
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([1, 2, 3], pa.int64()),
            pa.array([values, values, None], pa.list_(pa.int64())),
            pa.array([NO_LIMIT, values[-2], None], pa.int64()),
            pa.array([places, b"", None], pa.binary()),
        ],
        names=["node", "sketch", "limit", "places"],
    )
    (out,) = list(_tail_batches([batch]))
    assert out.column(0).to_pylist() == [1] * n
    assert out.column(1).to_pylist() == values[-n:]
