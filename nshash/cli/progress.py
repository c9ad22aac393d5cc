"""Progress and reports on stderr: the progress bar, bad-record lines, the tally and the summary of
a run.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..methods.nshash.core import NSHash
from ..stores.url import mask_url, parse_url
from .common import RecordError
from .io import (
    Item,
    Source,
)

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

#: Bad records reported one by one; past this many only the count is given.
MAX_REPORTED = 100


# -- the dedup / query run ---------------------------------------------------------------


class _NoBar:
    """The progress bar of a run that shows none (tqdm takes a few hundredths of a second to
    import, a fixed cost of every run)."""

    def update(self, n: int) -> None:
        """Count nothing."""

    def close(self) -> None:
        """Close nothing."""


class _Progress:
    """The progress bar of a run: bytes of the input read (with a total and an ETA) when the
    input is a file, else records (with a total for a folder of ``.txt`` files)."""

    #: Seconds between redraws at the least (a quick run may end before the first one).
    MININTERVAL = 0.25

    def __init__(self, source: Source, show: bool) -> None:
        self.source = source
        self.docs = 0
        self.done = 0
        self.bar: Any = _NoBar()
        if not show:
            return
        from tqdm import tqdm  # imported here: most runs draw no bar

        class _Bar(tqdm):  # type: ignore[misc]
            """A bar without tqdm's monitor thread (workers are forked; no stray threads)."""

            monitor_interval = 0

        common = {
            "file": sys.stderr,
            "dynamic_ncols": True,
            "leave": False,
            "mininterval": self.MININTERVAL,
        }
        self.by_bytes = source.size is not None and source.bytes_read() is not None
        if self.by_bytes:
            self.bar = _Bar(
                total=source.size, unit="B", unit_scale=True, unit_divisor=1024, **common
            )
        else:
            self.bar = _Bar(total=source.total, unit="doc", **common)

    def update(self, records: int) -> None:
        """Count *records* more done."""
        if isinstance(self.bar, _NoBar):
            return
        self.docs += records
        if not self.by_bytes:
            self.bar.update(records)
            return
        now = self.source.bytes_read() or 0
        self.bar.set_postfix_str(f"{self.docs:,} docs", refresh=False)
        self.bar.update(max(0, now - self.done))
        self.done = max(now, self.done)

    def close(self) -> None:
        """Take the bar off the terminal."""
        self.bar.close()


def _say(text: str) -> None:
    """Print a line on stderr without tearing a progress bar."""
    if "tqdm" not in sys.modules:  # no bar was drawn, so none can be torn
        print(text, file=sys.stderr)
        return
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr)


@dataclass
class Tally:
    """What a run saw, for the summary."""

    documents: int = 0
    bad: int = 0
    duplicates: int = 0
    merges: int = 0
    matched: int = 0
    sizes: Counter[int] = field(default_factory=Counter)
    titles: dict[int, str] = field(default_factory=dict)
    #: Ids merged away during the run -> the id they were merged into.
    aliases: dict[int, int] = field(default_factory=dict)

    def canonical(self, similar_id: int) -> int:
        """Return the id *similar_id* ended up in after the merges this run saw."""
        seen = set()
        while similar_id in self.aliases and similar_id not in seen:
            seen.add(similar_id)
            similar_id = self.aliases[similar_id]
        return similar_id

    def groups(self) -> list[tuple[int, int, str | None]]:
        """Return ``(similar_id, size, title)`` for every group of this run, largest first."""
        sizes: Counter[int] = Counter()
        for sid, size in self.sizes.items():
            sizes[self.canonical(sid)] += size
        titles: dict[int, str] = {}
        for sid in sorted(self.titles):  # ids grow over time: the earliest title wins
            titles.setdefault(self.canonical(sid), self.titles[sid])
        ordered = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(sid, size, titles.get(sid)) for sid, size in ordered]


class _Reporter:
    """Reports bad records on stderr (through the bar, so it is not torn).

    Args:
        source: the input, for the records' places.
        on_error: ``write`` (the record goes out with ``similar_id`` null and an ``error``),
            ``skip`` (it is left out) or ``fail`` (the run stops with exit 1).
    """

    def __init__(self, source: Source, on_error: str) -> None:
        self.source = source
        self.on_error = on_error
        self.reported = 0
        #: The first bad record's place and reason, for the error when none was good.
        self.first: str | None = None

    def bad(self, item: Item, message: str, tally: Tally) -> str:
        """Count and report one bad record; return the text for its ``error`` field."""
        where = item.where if self.source.format == "txt" else f"{self.source.name} {item.where}"
        text = f"{where}: {message}"
        if self.on_error == "fail":
            raise RecordError(f"{text} (--on-error fail)")
        tally.bad += 1
        self.reported += 1
        if self.first is None:
            self.first = text
        verb = "skipped" if self.on_error == "skip" else "bad record"
        if self.reported <= MAX_REPORTED:
            _say(f"{verb} {text}")
        elif self.reported == MAX_REPORTED + 1:
            _say(f"(more than {MAX_REPORTED} bad records; the rest are only counted)")
        return f"{item.where}: {message}"


def _print_summary(
    command: str,
    tally: Tally,
    elapsed: float,
    store_url: str,
    source: Source,
    on_error: str = "write",
    top: int = 10,
) -> None:
    err = sys.stderr
    rate = tally.documents / elapsed if elapsed > 0 else 0.0
    bad = "skipped" if on_error == "skip" else "written with an error" if tally.bad else ""
    line = (
        f"nshash {command}: {_count(tally.documents, 'document')} from {source.name}"
        f" in {elapsed:.2f} s ({rate:,.0f} docs/s); {_count(tally.bad, 'bad record')} {bad}"
    )
    print(line.rstrip(), file=err)
    if command == "query":
        new = tally.documents - tally.matched
        print(f"  {tally.matched:,} match a stored group, {new:,} are new", file=err)
        return
    groups = tally.groups()
    multi = sum(1 for _, size, _ in groups if size > 1)
    print(
        f"  {_count(len(groups), 'group')} ({multi:,} with more than one document),"
        f" {_count(tally.duplicates, 'duplicate')}, {_count(tally.merges, 'merge')}",
        file=err,
    )
    scheme, path, _ = parse_url(store_url)
    if scheme == "memory" and not path:
        where = "memory:// (in this process only; nothing was saved: use --store to keep it)"
    else:
        where = mask_url(store_url)
    print(f"  store: {where}", file=err)
    largest = [g for g in groups if g[1] > 1][:top]
    if largest:
        print(f"  largest groups:\n  {'size':>6}  {'similar_id':>10}  title", file=err)
        for sid, size, title in largest:
            print(f"  {size:>6}  {sid:>10}  {title or '-'}", file=err)
    if tally.merges:
        print(
            "  note: merged ids were written as answered at the time; "
            "`nshash groups` shows the final groups of a saved store",
            file=err,
        )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
