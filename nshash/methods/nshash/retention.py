"""Retention: a store that forgets the stories nobody reposts any more.

A store opened with a window (``?retention=30d`` on its URL) records when each group last got
a new document. A group whose last document is older than the window is **expired**: its
anchors and its exact text no longer match (a new copy of it starts a new group), and it is
then **forgotten**: its anchors, exact texts, votes, merge links, sketch, members, document
records and activity are deleted and the space reclaimed. Ids are never reused: the counter
only grows, and a forgotten id resolves to nothing (:meth:`~nshash.Store.group` answers None).

Forgetting is spread over the writes: before each document, at most :data:`FORGET_PER_WRITE`
expired groups are forgotten, oldest first, so no write pauses for long even when many
groups expire at once (a stream resumed after a month); the ones left wait for the next
writes, and cannot match meanwhile. The time is the store's clock (``clock=``, default
:func:`time.time`), not a document's ``published_at``: a window is about what the store was
fed, and a clock that tests control.

The window is a property of the store, kept with it: a store made with a window keeps it
(a URL without ``retention`` opens it with the window it has, one with another value
changes it), and a store made without one cannot take one later (its groups were never
tracked), which is refused with a :class:`~nshash.ConfigError`.

Every Python store keeps it through :func:`retained_assign`, on tables that add the calls of
:class:`Retaining`; the Redis script mirrors it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ...errors import ConfigError
from ...results import Assignment, DocMeta
from ...text.fingerprint import DocPrint
from .assign import MatchPolicy, Tables, assign

__all__ = [
    "FORGET_PER_WRITE",
    "Retaining",
    "clock_option",
    "retained_assign",
    "settle_window",
]

#: The most expired groups one write forgets (one write makes at most one group, so a steady
#: stream is always caught up; a burst of expiries is worked off over the following writes).
FORGET_PER_WRITE = 16


class Retaining(Tables, Protocol):
    """The calls a store's tables add for a retention window."""

    def purge(self, cutoff: int, most: int) -> int:
        """Hide every group last seen before *cutoff* from matching, and forget at most
        *most* of them, oldest first; returns how many were forgotten."""
        ...

    def touch(self, gid: int, now: int) -> None:
        """Record that canonical group *gid* got a new document at *now*."""
        ...


def retained_assign(
    tables: Retaining,
    doc: DocPrint,
    policy: MatchPolicy,
    doc_id: str | None,
    title: str | None,
    meta: DocMeta | None,
    window: int,
    now: int,
    faster: Callable[[], tuple[Assignment, tuple[int, ...]] | None] | None = None,
) -> tuple[Assignment, tuple[int, ...]]:
    """:func:`~nshash.methods.nshash.assign.assign` on a store with a retention *window*:
    expired groups are purged first, and the group the document joined is touched after
    (a replayed ``doc_id`` is no new document, so it touches nothing).

    *faster*, when given, is tried after the purge: a placement that answers as assign would
    for the documents it takes, and None (having written nothing) for the others."""
    tables.purge(now - window, FORGET_PER_WRITE)
    placed = faster() if faster is not None else None
    answer, anchors = placed or assign(tables, doc, policy, doc_id, title, meta)
    if not answer.replayed:
        tables.touch(answer.similar_id, now)
    return answer, anchors


def settle_window(stored: int | None, requested: int | None, empty: bool, url: str) -> int | None:
    """The window a store opens with: the *requested* one, else the one it has.

    Raises:
        ConfigError: a window is requested for a store that holds groups made without one.
    """
    if requested is None or requested == stored:
        return stored
    if stored is None and not empty:
        raise ConfigError(
            f"{url} was made without a retention window, so its groups were never dated;"
            " a window can only be set on a new store (start one with ?retention=...)"
        )
    return requested


def clock_option(options: dict[str, Any]) -> Callable[[], float]:
    """Pop the ``clock`` option (a callable returning epoch seconds; default
    :func:`time.time`): what time a retention window counts from."""
    clock = options.pop("clock", time.time)
    if not callable(clock):
        raise ConfigError(f"clock must be a callable returning epoch seconds, not {clock!r}")
    return clock  # type: ignore[no-any-return]
