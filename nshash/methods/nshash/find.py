"""Finding stories: by headline, by site, in a time range, a page at a time.

:meth:`nshash.NSHash.find` answers "which stories of this range carried this headline on
this site": every store ranks the groups active in a range of hours (:meth:`Store.hot`, the
per-hour counts each backend already keeps, so the work follows the range, never the store);
this module then keeps the groups whose headline contains the search term and whose sites
include the site asked for, and cuts the page. The filter is one implementation over the
store contract, so every backend answers the same.

**Story cards.** Filtering needs each candidate's headline and sites; reading them is a few
store reads a group. :class:`StoryCards` keeps them per group, read once and dropped when
this process adds a copy to the group (or merges it). On a store other processes write to
(Redis), or one opened read-only, every card is read again after ``max_age`` (60) seconds,
so what they write shows within that long. A story's headline and sites are those of its
first :data:`CARD_MEMBERS` copies, as the hot list shows them.

**Matching.** The term and the headlines are compared as search keys (:func:`search_key`):
letters and digits only, NFKC, casefolded, traditional Chinese folded to simplified; the
term must appear in the headline's key. Sites compare case-insensitively, a leading ``www.``
ignored.

**Times.** ``from``/``to`` take ISO 8601 dates or times (:func:`parse_moment`); a date, or a
time without an offset, is read in the display time zone (:func:`zone`). A range counts
whole hours, like the hot list: ``from`` is widened down to its hour, ``to`` (exclusive; a
bare date means the end of that day) up to its hour.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ...errors import ConfigError
from ...results import HOUR, HotGroup
from ...text.normalize import normalize_key
from .base import Store

__all__ = [
    "CARD_MEMBERS",
    "MAX_SITE_CHARS",
    "MAX_TERM_CHARS",
    "MAX_TIME",
    "StoryCards",
    "StoryPage",
    "TimeRange",
    "local_time",
    "parse_moment",
    "search_key",
    "site_key",
    "time_range",
    "zone",
]

#: The longest search term, in characters; a longer one is refused.
MAX_TERM_CHARS = 200
#: The latest time a document may carry: the end of the year 9999 (epoch seconds, exclusive).
MAX_TIME = 253_402_300_800
#: How many of a story's first copies give its headline and sites.
CARD_MEMBERS = 100
#: The longest time string taken (a longer one is no ISO 8601 time).
_MAX_TIME_CHARS = 40
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ALL = 1 << 62


def zone(name: str | None) -> tzinfo:
    """The time zone *name* names (IANA, such as ``Asia/Hong_Kong``; ``UTC`` or None: UTC).

    Raises:
        ConfigError: no such time zone.
    """
    unknown = f"Unknown time zone {name!r:.80}; use an IANA name such as 'Asia/Hong_Kong'"
    if not isinstance(name, str) and name is not None:
        raise ConfigError(unknown)
    if name is None or name.strip().upper() in ("", "UTC", "Z"):
        return timezone.utc
    if len(name) > 64 or ".." in name or name.startswith("/"):
        raise ConfigError(unknown)
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(unknown) from None


def parse_moment(value: str | int | float | datetime, tz: tzinfo, *, end: bool = False) -> int:
    """Epoch seconds of *value*: epoch seconds, a datetime, or an ISO 8601 date or time.

    A date (``2019-03-01``), or a time without an offset, is read in *tz*. With *end*, a
    date means the end of that day (the next midnight), so ``to=2019-12-31`` takes the
    whole of that day.

    Raises:
        ConfigError: not a time, or outside the years 1970 to 9999.
    """
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=tz)
        seconds = moment.timestamp()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= _MAX_TIME_CHARS:
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(
                f"{value!r} is not a date or time; use ISO 8601 such as 2019-03-01 or"
                " 2019-03-01T08:00"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=tz)
        try:
            if end and _DATE.match(text):
                moment = moment + timedelta(days=1)
            seconds = moment.timestamp()
        except (OverflowError, ValueError):
            seconds = math.inf
    else:
        raise ConfigError(f"A time is an ISO 8601 date or time, not {value!r:.60}")
    if -86400 < seconds < 0:  # 1970-01-01 east of Greenwich: the epoch
        seconds = 0.0
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TIME:
        raise ConfigError(f"A time must be in the years 1970 to 9999, not {value!r:.60}")
    return int(seconds)


def local_time(seconds: int, tz: tzinfo) -> datetime:
    """Epoch seconds as a time in *tz*; a time past the year 9999 there (the open end of a
    range, or a far zone) is the last second of 9999 in UTC."""
    try:
        return datetime.fromtimestamp(seconds, tz)
    except (OverflowError, ValueError, OSError):
        return datetime.fromtimestamp(min(max(seconds, 0), MAX_TIME - 1), timezone.utc)


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A range of whole hours: the copies counted are those of hours *first_hour* to
    *last_hour* (``time // 3600``, both included); *start* and *end* are its bounds in epoch
    seconds (the end exclusive; None when the range was given no end)."""

    first_hour: int
    last_hour: int
    open_end: bool = False

    @property
    def start(self) -> int:
        """The range's first second."""
        return self.first_hour * HOUR

    @property
    def end(self) -> int | None:
        """The second after the range (None: no end was given)."""
        return None if self.open_end else (self.last_hour + 1) * HOUR


def time_range(
    start: str | int | float | datetime | None,
    end: str | int | float | datetime | None,
    tz: tzinfo,
) -> TimeRange | None:
    """The hours from *start* to *end* (either may be None: open), or None when both are.

    Raises:
        ConfigError: a bound is not a time, or *end* is not after *start*.
    """
    if start is None and end is None:
        return None
    first = 0 if start is None else parse_moment(start, tz)
    last = MAX_TIME if end is None else parse_moment(end, tz, end=True)
    if last <= first:
        raise ConfigError(f"'to' ({end}) must be after 'from' ({start})")
    return TimeRange(first // HOUR, (last - 1) // HOUR, end is None)


def search_key(term: str) -> str:
    """*term* as headlines are matched: letters and digits, folded (see the module doc).

    Raises:
        ConfigError: not a str, longer than :data:`MAX_TERM_CHARS`, or no letter or digit.
    """
    if not isinstance(term, str):
        raise ConfigError(f"A search term is a str, not {type(term).__name__}")
    if len(term) > MAX_TERM_CHARS:
        raise ConfigError(f"A search term has at most {MAX_TERM_CHARS} characters, not {len(term)}")
    key = normalize_key(term)
    if not key:
        raise ConfigError(f"A search term needs a letter or digit, not {term!r}")
    return key


#: The longest site (a host name) a document may carry or a search may ask for.
MAX_SITE_CHARS = 253


def site_key(site: str) -> str:
    """*site* as sites are matched: lower case, no leading ``www.``, no surrounding space.

    Raises:
        ConfigError: not a short, non-empty str.
    """
    if not isinstance(site, str) or not site.strip() or len(site) > MAX_SITE_CHARS:
        raise ConfigError(f"A site is a host name such as example.com, not {site!r:.80}")
    key = site.strip().lower()
    return key[4:] if key.startswith("www.") else key


@dataclass(frozen=True, slots=True)
class StoryPage:
    """One page of :meth:`nshash.NSHash.find`.

    Attributes:
        stories: the page's stories, most copies in the range first (ties: smaller id).
        total: how many stories match in all.
        offset: how many matching stories come before this page.
        range: the hours counted (None: all of them).
    """

    stories: tuple[HotGroup, ...]
    total: int
    offset: int
    range: TimeRange | None

    @property
    def next_offset(self) -> int | None:
        """Where the next page starts, or None after the last one."""
        after = self.offset + len(self.stories)
        return after if after < self.total else None


class StoryCards:
    """Each story's headline and sites, read from the store when a search first needs them
    and kept (see the module doc). Thread-safe: two searches may read one card at once, and
    both write the same.

    Args:
        max_age: seconds after which every card is read again (for the writes of other
            processes); None: never (this process makes every write, and :meth:`forget`
            drops what they change).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, max_age: float | None = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_age = max_age
        self.clock = clock
        self._titles: dict[int, str] = {}
        self._sites: dict[int, frozenset[str]] = {}
        self._made = clock()

    def __len__(self) -> int:
        return len(self._titles.keys() | self._sites.keys())

    def forget(self, gid: int, merged: Sequence[int] = ()) -> None:
        """Drop the cards of *gid* and of the ids merged into it (they changed)."""
        for table in (self._titles, self._sites):
            if table:
                table.pop(gid, None)
                for m in merged:
                    table.pop(m, None)

    @staticmethod
    def _title(store: Store, gid: int) -> str:
        """The search key of the story's headline: its first title among its first copies."""
        group = store.group_head(gid, 1)
        if group is None:
            return ""
        if not (group.members and group.members[0].title) and group.size > 1:
            group = store.group_head(gid, CARD_MEMBERS) or group
        title = next((m.title for m in group.members if m.title), None)
        return normalize_key(title) if title else ""

    @staticmethod
    def _site_keys(store: Store, gid: int) -> frozenset[str]:
        """The keys of the sites of the story's first copies."""
        group = store.group_head(gid, CARD_MEMBERS)
        if group is None or not group.members:
            return frozenset()
        keys = set()
        for m in store.doc_meta(group.doc_ids):
            if m is not None and m.site:
                try:
                    keys.add(site_key(m.site))
                except ConfigError:  # a site kept before documents were checked: never found
                    continue
        return frozenset(keys)

    def keep(
        self, store: Store, gids: Iterable[int], term: str | None, site: str | None
    ) -> list[int]:
        """The ids among *gids* whose story's headline key holds *term* and whose sites
        include *site* (None: any). The headline is checked first: a story it rules out
        never has its sites read."""
        now = self.clock()
        if self.max_age is not None and now - self._made > self.max_age:
            self._titles, self._sites, self._made = {}, {}, now
        kept = list(gids)
        if term is not None:
            titles = self._titles
            for gid in [g for g in kept if g not in titles]:
                titles[gid] = self._title(store, gid)
            kept = [g for g in kept if term in titles.get(g, "")]
        if site is not None:
            sites = self._sites
            for gid in [g for g in kept if g not in sites]:
                sites[gid] = self._site_keys(store, gid)
            none: frozenset[str] = frozenset()
            kept = [g for g in kept if site in sites.get(g, none)]
        return kept


def rank(
    store: Store,
    cards: StoryCards,
    hours: TimeRange | None,
    term: str | None,
    site: str | None,
    min_count: int,
    stop: int,
) -> tuple[list[tuple[int, int]], int]:
    """The ``(id, count)`` pairs of the stories that match, up to *stop* of them, most
    copies in *hours* first (ties: smaller id); and how many match in all.

    Without a term or a site the store ranks (:meth:`Store.hot`). With one, the groups
    active in the hours (:meth:`Store.active`) are filtered by their cards first, and only
    those kept are counted (:meth:`Store.counts`) and ranked, so the work follows the
    groups of the range, and the counting the matches."""
    first, last = (0, MAX_TIME // HOUR) if hours is None else (hours.first_hour, hours.last_hour)
    if term is None and site is None:
        ranked = store.hot(first, last, _ALL if min_count > 1 else stop)
        if min_count > 1:  # most copies first: cut at the first story with too few
            cut = next((i for i, e in enumerate(ranked) if e[1] < min_count), len(ranked))
            ranked = ranked[:cut]
            return ranked[:stop], len(ranked)
        total = len(ranked) if len(ranked) < stop else len(store.active(first, last))
        return ranked, total
    kept = cards.keep(store, store.active(first, last), term, site)
    counted = store.counts(first, last, kept)
    ranked = sorted(
        ((g, n) for g, n in counted.items() if n >= min_count), key=lambda e: (-e[1], e[0])
    )
    return ranked[:stop], len(ranked)
