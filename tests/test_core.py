"""NSHash end to end on the memory store: reposts share an id, distinct stories do not."""

from __future__ import annotations

from typing import Any

import pytest

from nshash import ConfigError, EmptyDocumentError, NSHash, open_store

STORY = (
    "The city council approved a new budget for public libraries on Tuesday evening.\n"
    "Opening hours will grow by ten hours a week at every branch, the mayor said.\n"
    "The plan also funds two mobile libraries that will visit outlying villages.\n"
    "Critics argued that the money should have gone to road repairs instead."
)
REPOST = (
    "Source: Morning Post\n"
    "The city council approved a new budget for public libraries on Tuesday evening. "
    "Opening hours will grow by ten hours a week at every branch, the mayor said. "
    "The plan also funds two mobile libraries that will visit outlying villages.\n"
    "(Editor: J. Smith)"
)
OTHER = (
    "A late frost damaged apple orchards across the northern valley this week.\n"
    "Growers expect the harvest to fall by almost a third compared with last year.\n"
    "Some farms are asking the regional government for emergency support payments."
)


class TestNSHash:
    def test_repost_shares_id(self) -> None:
        """A lightly edited repost gets the original's similar_id and is a duplicate."""
        with NSHash.open("memory://") as nsh:
            first = nsh.add(STORY)
            second = nsh.add(REPOST)
            assert second.similar_id == first.similar_id
            assert second.duplicate and not first.duplicate

    def test_distinct_stories_differ(self) -> None:
        """Unrelated stories get different ids."""
        with NSHash.open("memory://") as nsh:
            assert nsh.add(STORY).similar_id != nsh.add(OTHER).similar_id

    def test_get_similar_returns_int(self) -> None:
        """get_similar keeps the original contract: an int."""
        with NSHash.open("memory://") as nsh:
            sid = nsh.get_similar(STORY)
            assert type(sid) is int and sid == 1

    def test_get_similar_is_add_of_the_text(self) -> None:
        """get_similar places a text as add does (the same groups; tracked, the same time),
        refuses what add refuses, and goes through a subclass's own add."""

        def clock() -> float:
            return 1_700_000_000.0

        with (
            NSHash(store=open_store("memory://"), track=True, clock=clock) as nsh,
            NSHash(store=open_store("memory://"), track=True, clock=clock) as ref,
        ):
            for text in (STORY, REPOST, OTHER, STORY):
                assert nsh.get_similar(text) == ref.add(text).similar_id
            assert nsh.stats() == ref.stats()
            assert nsh.groups(min_size=1) == ref.groups(min_size=1)
            hot = nsh.hot(now=clock())
            assert hot == ref.hot(now=clock()) and hot[0].recent == 3
            with pytest.raises(EmptyDocumentError):
                nsh.get_similar(" ，。！ \n\t")
            with pytest.raises(ConfigError, match="text must be a str"):
                nsh.get_similar(b"bytes")  # type: ignore[arg-type]

        class Counting(NSHash):
            added = 0

            def add(self, text: str, *args: Any, **kwargs: Any) -> Any:
                self.added += 1
                return super().add(text, *args, **kwargs)

        with Counting(store=open_store("memory://")) as nsh:
            assert nsh.get_similar(STORY) == 1 and nsh.added == 1

    def test_empty_document(self) -> None:
        """A text with no letters or digits raises EmptyDocumentError."""
        with NSHash.open("memory://") as nsh, pytest.raises(EmptyDocumentError):
            nsh.add(" ，。！ \n\t")

    @pytest.mark.parametrize("doc_id", ["", "\ud800x", 7])
    def test_bad_doc_id(self, doc_id: object) -> None:
        """An empty, non-str or unencodable doc_id is a ConfigError, never a store error."""
        with NSHash.open("memory://") as nsh, pytest.raises(ConfigError, match="doc_id"):
            nsh.add(STORY, doc_id=doc_id)  # type: ignore[arg-type]

    def test_unknown_hashdb_and_hashfunc(self, tmp_path, monkeypatch) -> None:
        """The original constructor refuses unknown hashdb and hashfunc values."""
        monkeypatch.chdir(tmp_path)
        with pytest.raises(ConfigError, match="hashdb"):
            NSHash("news", hashdb="sqlite")
        with pytest.raises(ConfigError, match="hashfunc"):
            NSHash("news", hashfunc="sha1")

    def test_a_store_url_as_the_name_is_refused(self, tmp_path, monkeypatch) -> None:
        """NSHash("memory://") would make a file named after the URL (memory:/.pkl); it is
        refused, pointing at NSHash.open, and nothing is made."""
        monkeypatch.chdir(tmp_path)
        for url in ("memory://", "leveldb:///tmp/x"):
            with pytest.raises(ConfigError, match=r"NSHash\.open"):
                NSHash(url)
        assert list(tmp_path.iterdir()) == []


BYLINE = "By Staff Reporter"
FOOTER = (
    "Copyright Daily Examiner. All rights reserved; this material may not be republished, "
    "broadcast or redistributed without written permission."
)
SHORT_STORIES = [
    "A small family bakery on Elm Street has won first prize at the national bread championship "
    "held in Lakeport this weekend. Owner Grace Mensah entered a sourdough rye that took her "
    "more than a year of experiments to perfect.",
    "Marine biologists have fitted satellite tags to twelve humpback whales to follow their "
    "migration along the western coast. The tags record depth and water temperature and send "
    "their position whenever a whale surfaces.",
    "Volunteers opened a community garden on a former parking lot behind the central library "
    "on Saturday. Forty raised beds have already been claimed by families from the "
    "neighbourhood.",
]


class TestShortArticlesWithSiteText:
    def test_byline_and_footer_do_not_join_stories(self) -> None:
        """Short unrelated articles sharing a byline and a long footer keep their own ids."""
        with NSHash.open("memory://") as nsh:
            ids = [nsh.add(f"{BYLINE}\n{body}\n{FOOTER}").similar_id for body in SHORT_STORIES]
            assert len(set(ids)) == len(SHORT_STORIES)
            repost = nsh.add(f"Source: Metro Daily\n{SHORT_STORIES[1]}\n(Editing by Mark Hale)")
            assert repost.similar_id == ids[1] and repost.duplicate


class TestLookupArguments:
    """Lookups given what is not an id (or ids) say so: they gave an AssertionError, a bare
    TypeError, or walked a str's characters as ids."""

    def test_document_needs_an_id(self) -> None:
        nsh = NSHash.open("memory://")
        with pytest.raises(ConfigError, match="needs a doc_id"):
            nsh.document(None)  # type: ignore[arg-type]

    @pytest.mark.parametrize("ids", [None, 5, "abc", [None], ["a", 3]])
    def test_doc_meta_takes_ids(self, ids: Any) -> None:
        nsh = NSHash.open("memory://", track=True)
        nsh.add("The harbour bridge reopened after two years of repairs.", "a", url="https://e.com/1")
        with pytest.raises(ConfigError):
            nsh.doc_meta(ids)
        found = nsh.doc_meta(["a", "nope"])
        assert [m.site if m else None for m in found] == ["e.com", None]

    @pytest.mark.parametrize(
        "url", ["memory:///tmp/x\x00y.pkl", "sqlite:///tmp/x\x00y.db", "leveldb:///tmp/x\x00y"]
    )
    def test_a_nul_in_a_store_path(self, url: str) -> None:
        with pytest.raises(ConfigError, match="must not contain a NUL"):
            NSHash.open(url)

    def test_a_nul_in_the_original_api_s_name(self) -> None:
        with pytest.raises(ConfigError, match="must not contain a NUL"):
            NSHash("x\x00y", hashdb="memory")

    def test_readonly_is_a_bool(self, tmp_path: Any) -> None:
        """readonly="no" is truthy: it opened the store read-only."""
        url = f"memory://{tmp_path}/s.pkl"
        with NSHash.open(url) as nsh:
            nsh.add("The harbour bridge reopened after two years of repairs.")
        with pytest.raises(ConfigError, match="readonly must be True or False"):
            NSHash.open(url, readonly="no")  # type: ignore[arg-type]
