"""Finding stories by headline, site and time range, a page at a time: the library's
:meth:`NSHash.find` on every store, ``GET /v1/groups`` with ``q``/``site``/``from``/``to``/
``tz``/``offset``, ``nshash groups --search ...`` and :meth:`Client.find` against a real
``nshash serve``.

The browser tests of the same options are in ``test_pages_find_browser.py``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nshash import ConfigError, NSHash
from nshash.cli import main
from nshash.client import AsyncClient, Client, ServiceError
from nshash.methods.nshash.find import StoryCards, StoryPage, parse_moment, time_range, zone
from service.app import create_app
from service.settings import Settings
from tests.test_service_uvicorn import UvicornServer

HKT = timezone(timedelta(hours=8))


def _text(seed: int) -> str:
    """A distinct article of three sentences (no two seeds share a sentence)."""
    words = [f"w{seed}x{i}" for i in range(40)]
    return "\n".join(" ".join(words[j : j + 12]) + "." for j in range(0, 36, 12))


#: (story, title, site, published_at) per document, in the order they are added.
STRIKE = "Harbour ferry strike enters its third day"
DOCS = [
    ("ferry", STRIKE, "a.com", datetime(2019, 3, 1, 0, 30, tzinfo=HKT)),
    ("ferry", None, "b.com", datetime(2019, 3, 2, 12, 0, tzinfo=timezone.utc)),
    ("ferry", None, "c.com", datetime(2019, 6, 1, 9, 0, tzinfo=timezone.utc)),
    ("weather", "香港天氣報告：今晚有雷暴", "a.com", datetime(2019, 12, 31, 23, 30, tzinfo=HKT)),
    ("weather", None, "a.com", datetime(2020, 1, 2, 8, 0, tzinfo=timezone.utc)),
    ("timetable", "New ferry timetable", "www.B.com", datetime(2018, 5, 5, tzinfo=timezone.utc)),
    ("untitled", None, "d.com", datetime(2019, 7, 1, tzinfo=timezone.utc)),
]  # fmt: skip
SEEDS = {"ferry": 1, "weather": 2, "timetable": 3, "untitled": 4}


def _feed(nsh: NSHash) -> dict[str, int]:
    """Add :data:`DOCS`; return each story's similar_id."""
    ids: dict[str, int] = {}
    for i, (story, title, site, when) in enumerate(DOCS):
        res = nsh.add(
            _text(SEEDS[story]), f"{story}-{i}", title=title, site=site, published_at=when
        )
        ids.setdefault(story, res.similar_id)
        assert res.similar_id == ids[story]
    return ids


@pytest.fixture
def found(store_url: str) -> Iterator[tuple[NSHash, dict[str, int]]]:
    """A tracking NSHash on every backend, fed with :data:`DOCS`."""
    with NSHash.open(store_url, track=True) as nsh:
        yield nsh, _feed(nsh)


class TestFind:
    """:meth:`NSHash.find` answers the same on every store."""

    def test_term_matches_headlines_folded(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A term matches headlines whatever its case, width or Chinese script."""
        nsh, ids = found
        page = nsh.find("FERRY")
        assert [(s.similar_id, s.recent) for s in page.stories] == [
            (ids["ferry"], 3),
            (ids["timetable"], 1),
        ]
        assert page.total == 2 and page.next_offset is None and page.range is None
        assert [s.similar_id for s in nsh.find("天气").stories] == [ids["weather"]]
        assert [s.similar_id for s in nsh.find("ｆｅｒｒｙ ＳＴＲＩＫＥ").stories] == [ids["ferry"]]
        assert nsh.find("no such words").total == 0

    def test_site_filter(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A site keeps the stories one of whose copies it carried; case and www. do not count."""
        nsh, ids = found
        assert [s.similar_id for s in nsh.find(site="b.com").stories] == [
            ids["ferry"],
            ids["timetable"],
        ]
        assert nsh.find(site="WWW.b.com").total == 2
        assert [s.similar_id for s in nsh.find(site="d.com").stories] == [ids["untitled"]]
        assert nsh.find(site="nowhere.example").total == 0

    def test_range_counts_the_copies_in_it(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A from/to range over 2019 (Hong Kong time) ranks by the copies in it, ties by id."""
        nsh, ids = found
        page = nsh.find(start="2019-01-01", end="2019-12-31", tz="Asia/Hong_Kong")
        assert [(s.similar_id, s.recent) for s in page.stories] == [
            (ids["ferry"], 3),
            (ids["weather"], 1),
            (ids["untitled"], 1),
        ]
        assert page.range is not None
        assert page.range.start == int(datetime(2019, 1, 1, tzinfo=HKT).timestamp())
        assert page.range.end == int(datetime(2020, 1, 1, tzinfo=HKT).timestamp())

    def test_time_zone_moves_the_day(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """The same date is a different day in Hong Kong and in UTC."""
        nsh, ids = found
        hk = nsh.find(start="2019-03-01", end="2019-03-01", tz="Asia/Hong_Kong")
        assert [(s.similar_id, s.recent) for s in hk.stories] == [(ids["ferry"], 1)]
        assert nsh.find(start="2019-03-01", end="2019-03-01").total == 0
        assert nsh.find(start="2019-03-01T00:00:00+08:00", end="2019-03-01T01:00+08:00").total == 1

    def test_everything_at_once(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A term, a site and a range together keep only what all three allow."""
        nsh, ids = found
        page = nsh.find("ferry", site="c.com", start="2019-05-01", end="2019-06-30")
        assert [(s.similar_id, s.recent, s.size) for s in page.stories] == [(ids["ferry"], 1, 3)]
        assert page.stories[0].title == "Harbour ferry strike enters its third day"
        assert nsh.find("ferry", site="c.com", start="2019-07-01").total == 0

    def test_pages(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """Pages cut one ranking: together they are the whole of it, with no repeat."""
        nsh, _ids = found
        whole = [s.similar_id for s in nsh.find(limit=100).stories]
        assert len(whole) == 4
        first = nsh.find(limit=3)
        assert first.total == 4 and first.next_offset == 3
        second = nsh.find(limit=3, offset=first.next_offset)
        assert second.next_offset is None and second.offset == 3
        assert [s.similar_id for s in first.stories + second.stories] == whole
        assert nsh.find(limit=3, offset=10).stories == ()
        assert [s.recent for s in nsh.find(min_count=2).stories] == [3, 2]

    def test_active_and_counts_agree_with_hot(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A store's active ids and counts of a range are what its hot ranking says."""
        nsh, ids = found
        first = int(datetime(2019, 1, 1, tzinfo=timezone.utc).timestamp()) // 3600
        last = int(datetime(2020, 1, 3, tzinfo=timezone.utc).timestamp()) // 3600
        ranked = dict(nsh.store.hot(first, last, 100))
        assert (
            nsh.store.active(first, last)
            == set(ranked)
            == {
                ids["ferry"],
                ids["weather"],
                ids["untitled"],
            }
        )
        some = {ids["ferry"], ids["weather"], ids["timetable"]}
        assert nsh.store.counts(first, last, some) == {g: n for g, n in ranked.items() if g in some}
        assert nsh.store.active(0, 10) == set() and nsh.store.counts(0, 10, some) == {}

    def test_new_copies_show_at_once(self, found: tuple[NSHash, dict[str, int]]) -> None:
        """A copy added through the same NSHash changes the filter's answer at once."""
        nsh, ids = found
        assert nsh.find(site="e.com").total == 0
        nsh.add(_text(SEEDS["timetable"]), "timetable-e", site="e.com", published_at=0)
        assert [s.similar_id for s in nsh.find(site="e.com").stories] == [ids["timetable"]]


class TestBadInput:
    """Every bad option is a ConfigError naming it."""

    @pytest.mark.parametrize(
        ("options", "words"),
        [
            ({"start": "2019-03-02", "end": "2019-03-01"}, "after"),
            ({"start": "2019-13-45"}, "not a date"),
            ({"end": "yesterday"}, "not a date"),
            ({"start": "x" * 10_000}, "ISO 8601"),
            ({"text": "x" * 10_000}, "at most 200"),
            ({"text": "?!"}, "letter or digit"),
            ({"tz": "Mars/Olympus"}, "time zone"),
            ({"tz": "../../etc/passwd"}, "time zone"),
            ({"site": " "}, "host name"),
            ({"since": "24h", "start": "2019-01-01"}, "not both"),
            ({"since": "soon"}, "window"),
            ({"offset": -1}, "offset"),
            ({"limit": 0}, "limit"),
            ({"start": "0001-01-01"}, "1970"),
            ({"end": "9999-12-31"}, "1970"),
        ],
    )
    def test_refused(self, options: dict[str, object], words: str) -> None:
        """The option is refused with a message that says why."""
        with NSHash.open("memory://", track=True) as nsh, pytest.raises(ConfigError, match=words):
            nsh.find(**options)  # type: ignore[arg-type]

    def test_parse_moment(self) -> None:
        """Dates are read in the zone given; a date as an end means the next midnight."""
        hk = zone("Asia/Hong_Kong")
        assert parse_moment("2019-03-01", hk) == int(datetime(2019, 3, 1, tzinfo=HKT).timestamp())
        assert parse_moment("2019-03-01", hk, end=True) == int(
            datetime(2019, 3, 2, tzinfo=HKT).timestamp()
        )
        assert parse_moment("2019-03-01T08:00Z", hk) == int(
            datetime(2019, 3, 1, 8, tzinfo=timezone.utc).timestamp()
        )
        assert time_range(None, None, hk) is None


class TestStaleCards:
    """What another writer adds shows once the cards are older than their max age."""

    def test_other_writer(self, tmp_path: Path) -> None:
        """A copy added by another NSHash on the same store shows after ``max_age``."""
        now = [0.0]
        with NSHash.open("memory://", track=True) as writer:
            ids = _feed(writer)
            reader = NSHash(store=writer.store, track=True)
            reader.cards = StoryCards(max_age=60, clock=lambda: now[0])
            assert reader.find(site="e.com").total == 0
            writer.add(_text(SEEDS["ferry"]), "ferry-e", site="e.com", published_at=0)
            assert reader.find(site="e.com").total == 0  # its card is fresh: not read again
            now[0] = 61.0
            assert [s.similar_id for s in reader.find(site="e.com").stories] == [ids["ferry"]]


# -- HTTP -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """The app on a memory store (Hong Kong time by default), fed with :data:`DOCS`."""
    app = create_app(Settings(store_url="memory://", timezone="Asia/Hong_Kong"))
    with TestClient(app) as c:
        for i, (story, title, site, when) in enumerate(DOCS):
            body = {
                "text": _text(SEEDS[story]),
                "id": f"{story}-{i}",
                "title": title,
                "site": site,
                "published_at": when.isoformat(),
            }
            assert c.post("/v1/documents", json=body).status_code == 200
        yield c


class TestApi:
    """``GET /v1/groups`` with the find options."""

    def test_search_site_range(self, client: TestClient) -> None:
        """A term, a site and a range answer the matching stories with their counts."""
        r = client.get(
            "/v1/groups",
            params={"q": "ferry", "site": "b.com", "from": "2019-01-01", "to": "2019-12-31"},
        )
        assert r.status_code == 200
        body = r.json()
        assert body["total"] == 1 and body["next_offset"] is None and body["tz"] == "Asia/Hong_Kong"
        assert body["start"] == "2019-01-01T00:00:00+08:00"
        assert body["end"] == "2020-01-01T00:00:00+08:00"
        (story,) = body["groups"]
        assert (story["recent"], story["size"]) == (3, 3)
        assert story["first_seen"] == "2019-03-01T00:30:00+08:00"

    def test_tz_per_request(self, client: TestClient) -> None:
        """``tz`` overrides the setting for the range and the times shown."""
        body = client.get(
            "/v1/groups", params={"from": "2019-03-01", "to": "2019-03-01", "tz": "UTC"}
        ).json()
        assert body["total"] == 0 and body["start"] == "2019-03-01T00:00:00Z"
        body = client.get("/v1/groups", params={"from": "2019-03-01", "to": "2019-03-01"}).json()
        assert body["total"] == 1

    def test_offset_pages(self, client: TestClient) -> None:
        """``offset`` walks the pages, ``next_offset`` says where the next one starts."""
        first = client.get("/v1/groups", params={"limit": 3, "from": "1970-01-01"}).json()
        assert first["total"] == 4 and first["next_offset"] == 3
        rest = client.get("/v1/groups", params={"limit": 3, "offset": 3, "from": "1970-01-01"})
        assert rest.json()["next_offset"] is None and len(rest.json()["groups"]) == 1

    def test_legacy_answers_unchanged(self, client: TestClient) -> None:
        """Without any find option the largest groups are listed as before."""
        body = client.get("/v1/groups").json()
        assert set(body) == {"groups"} and [g["size"] for g in body["groups"]] == [3, 2]

    @pytest.mark.parametrize(
        "params",
        [
            {"from": "2019-03-02", "to": "2019-03-01"},
            {"from": "2019-02-30"},
            {"to": "not-a-date"},
            {"q": "x" * 10_000},
            {"q": "!!!"},
            {"tz": "Nowhere/Land"},
            {"since": "24h", "from": "2019-01-01"},
            {"offset": "-1"},
            {"offset": "many"},
            {"site": "x" * 300},
        ],
    )
    def test_bad_input_is_422(self, client: TestClient, params: dict[str, str]) -> None:
        """Bad input is a 422 with a JSON error, never a 500."""
        r = client.get("/v1/groups", params=params)
        assert r.status_code == 422, r.text
        assert set(r.json()["error"]) == {"code", "message"}


# -- the command line -------------------------------------------------------------------------
class TestCli:
    """``nshash groups`` with ``--search``, ``--site``, ``--from``, ``--to``, ``--tz`` and
    ``--offset``."""

    def test_find(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The options find what the library finds; a bad date is one Error line."""
        url = f"memory://{tmp_path}/store.pkl"
        with NSHash.open(url, track=True) as nsh:
            ids = _feed(nsh)
        args = ["groups", "--store", url, "--search", "ferry", "--site", "c.com"]
        assert (
            main([*args, "--from", "2019-01-01", "--to", "2019-12-31", "--tz", "Asia/Hong_Kong"])
            == 0
        )
        captured = capsys.readouterr()
        assert "Harbour ferry strike" in captured.out and "2019-06-01 17:00" in captured.out
        assert "of 1" in captured.err
        assert main(["groups", "--store", url, "--from", "1970-01-01", "--top", "2", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["total"] == 4 and data["next_offset"] == 2
        assert data["groups"][0]["similar_id"] == ids["ferry"]
        assert (
            main(["groups", "--store", url, "--from", "1970-01-01", "--offset", "2", "--json"]) == 0
        )
        assert json.loads(capsys.readouterr().out)["next_offset"] is None
        for bad in (
            ["--from", "2019-31-01"],
            ["--from", "2020-01-01", "--to", "2019-01-01"],
            ["--tz", "X/Y"],
        ):
            assert main(["groups", "--store", url, *bad]) == 1
            err = capsys.readouterr().err
            assert err.startswith("Error:") and err.count("\n") == 1


# -- the Python client against a real server ---------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UvicornServer]:
    """A real ``nshash serve`` (uvicorn in a subprocess) fed with :data:`DOCS`."""
    directory = tmp_path_factory.mktemp("find-serve")
    srv = UvicornServer(
        {"NSHASH_STORE_URL": "memory://"},
        cwd=directory,
        command=[
            sys.executable,
            "-m",
            "nshash",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ],
    )
    srv.start(timeout=60)
    try:
        with Client(srv.url) as c:
            for i, (story, title, site, when) in enumerate(DOCS):
                c.add(
                    _text(SEEDS[story]), f"{story}-{i}", title=title, site=site, published_at=when
                )
        yield srv
    finally:
        srv.stop()


class TestClientFind:
    """:meth:`Client.find` over HTTP answers what :meth:`NSHash.find` answers."""

    def test_same_as_library(self, server: UvicornServer) -> None:
        """The same options give the same stories, counts and pages."""
        with NSHash.open("memory://", track=True) as nsh, Client(server.url) as client:
            _feed(nsh)
            cases = [
                {"text": "ferry"},
                {"site": "a.com"},
                {"start": "2019-01-01", "end": "2019-12-31", "tz": "Asia/Hong_Kong"},
                {"start": datetime(2019, 1, 1, tzinfo=timezone.utc), "end": 1577836800},
                {"start": "1970-01-01", "limit": 2, "offset": 2},
            ]
            for options in cases:
                mine, theirs = nsh.find(**options), client.find(**options)  # type: ignore[arg-type]
                assert theirs.stories == mine.stories, options
                assert (theirs.total, theirs.offset, theirs.next_offset) == (
                    mine.total,
                    mine.offset,
                    mine.next_offset,
                )
            with pytest.raises(ServiceError) as info:
                client.find(start="2019-02-01", end="2019-01-01")
            assert info.value.status == 422

    def test_async_client(self, server: UvicornServer) -> None:
        """AsyncClient.find answers what Client.find answers."""

        async def both() -> tuple[StoryPage, StoryPage]:
            async with AsyncClient(server.url) as client:
                return (
                    await client.find("ferry", site="c.com", start="2019-01-01"),
                    await client.find(start="1970-01-01", limit=2, offset=2),
                )

        found, rest = asyncio.run(both())
        with Client(server.url) as client:
            assert found == client.find("ferry", site="c.com", start="2019-01-01")
            assert rest == client.find(start="1970-01-01", limit=2, offset=2)
        assert found.total == 1 and rest.offset == 2 and rest.next_offset is None
