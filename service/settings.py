"""Settings: the service's configuration, read from ``NSHASH_*`` environment variables.

Every field maps to one variable: ``store_url`` to ``NSHASH_STORE_URL``, ``api_key`` to
``NSHASH_API_KEY`` and so on. A ``.env`` file in the working directory is read too; the
environment wins over it. Nothing is read at import time: :func:`~.app.create_app` builds a
:class:`Settings` when it is called without one, so tests can pass their own.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from nshash.errors import ConfigError
from nshash.methods.nshash.find import zone
from nshash.stores.url import retention_option

__all__ = ["DEFAULT_STORE_URL", "Settings"]

#: The embedded, durable default: a journaled memory store under ``./data``. It needs no
#: server, survives restarts, and admits one process (one uvicorn worker).
DEFAULT_STORE_URL = "memory://./data/nshash.pkl"


class Settings(BaseSettings):
    """The configuration of one service process.

    Build it explicitly in tests (``Settings(store_url="memory://")``); in production it comes
    from the environment (``NSHASH_STORE_URL=redis://cache:6379/0 nshash serve``).

    Example:
        >>> Settings(store_url="memory://", max_batch=10).max_batch
        10
    """

    model_config = SettingsConfigDict(
        env_prefix="NSHASH_",
        env_file=".env",
        env_ignore_empty=True,
        extra="ignore",
    )

    #: Where the groups live: ``memory://`` (gone on exit), ``memory:///path/file.pkl``
    #: (journaled), ``leveldb:///path/dir``, ``sqlite:///path/news.db`` or
    #: ``redis://host:6379/0?prefix=news``.
    store_url: str = DEFAULT_STORE_URL
    #: The dedup method: ``nshash`` (default; anchor sentences, groups that merge) or
    #: ``keyed`` (:class:`nshash.KeyedDedup`: content, head, tail and title keys behind Bloom
    #: filters, confirmed by cosine) or ``simhash`` (:class:`nshash.SimhashDedup`: seed 002's
    #: 64-bit simhash, Hamming distance <= 3). All answer the document and query routes alike;
    #: the keyed and simhash methods keep no group listings, so ``GET /v1/groups`` and
    #: ``GET /v1/groups/{similar_id}`` answer 501 ``not_supported``. It ignores ``n`` and
    #: ``min_length``. Documents added under one method are not seen by the other: give each
    #: method its own store URL (a memory snapshot of the other method is refused).
    method: Literal["nshash", "keyed", "simhash"] = "nshash"
    #: When set, every ``/v1`` route needs ``Authorization: Bearer <api_key>`` (else 401).
    #: ``/healthz``, ``/readyz``, ``/metrics`` and the docs stay open.
    api_key: SecretStr | None = None
    #: The name an editor's correction made with the API key (through ``/v1`` or the pages)
    #: is kept under, unless the request names who made it.
    api_key_name: str = Field(default="api", min_length=1, max_length=100)
    #: The largest request body accepted, in bytes; larger bodies get 413.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    #: Seconds a client has to send a request body, from its first byte to its last; a
    #: client that declares a body and sends it slower (or never) gets 408 and is closed.
    body_timeout: float = Field(default=30.0, gt=0, le=30.0)
    #: Seconds a kept-alive connection may stay idle between requests (``nshash serve``).
    idle_timeout: float = Field(default=5.0, gt=0, le=300.0)
    #: Seconds a connection has to send its request headers, from its first byte (or from
    #: connecting, for one that sends nothing); a slower one is closed (``nshash serve``), so
    #: idle or stalled clients hold one of ``max_connections`` for at most this long.
    header_timeout: float = Field(default=10.0, gt=0, le=300.0)
    #: Seconds a stopping server (SIGTERM) lets requests in progress finish before it cancels
    #: them, stops the compare processes and closes the store (``nshash serve``).
    shutdown_timeout: float = Field(default=20.0, gt=0, le=3600.0)
    #: Write one line per request to the ``nshash.access`` logger: client, method, address
    #: (with the value of ``key=`` and other secret-named parameters replaced by ``[redacted]``),
    #: status and milliseconds. ``false`` turns it off.
    access_log: bool = True
    #: The most connections (and requests in progress) one worker process holds at once,
    #: counting the one just accepted; past it new requests get 503 at once (``nshash
    #: serve`` passes it to uvicorn's ``limit_concurrency``).
    max_connections: int = Field(default=1000, ge=1)
    #: Processes that run ``POST /v1/compare`` (CPU-heavy), so the event loop keeps
    #: answering other routes while comparisons run.
    compare_workers: int = Field(default=2, ge=1, le=64)
    #: The most documents one ``POST /v1/documents/batch`` may carry; more get 413.
    max_batch: int = Field(default=1000, ge=1)
    #: The longest text ``POST /v1/compare`` accepts, in characters; longer gets 413 (some
    #: measures, such as Levenshtein, grow with the product of both lengths: two texts of
    #: 50,000 characters take about a second of CPU, Chinese news or one character repeated
    #: alike; ``python3 bench/bench_similarity.py --limits``).
    max_compare_chars: int = Field(default=50_000, ge=1)
    #: The largest ``limit`` accepted by ``GET /v1/groups``.
    max_groups_limit: int = Field(default=1000, ge=1)
    #: Anchors per document (shingles of the smallest hashes).
    n: int = Field(default=16, ge=1)
    #: The shortest sentence key the first release's sentence fingerprints consider.
    min_length: int = Field(default=10, ge=1)
    #: The fingerprint function: ``farmhash`` (default) or ``md5`` (the original release's).
    hashfunc: Literal["farmhash", "md5"] = "farmhash"
    #: How routes call the store: ``thread`` hands each call to the thread pool, so the event
    #: loop stays free while the store waits on a network or a disk; ``inline`` calls it on
    #: the event loop, which saves the hand-off (a large share of a request's cost) when the
    #: call is pure CPU work in this process; ``auto`` (default) is ``inline`` for
    #: ``memory://`` stores unless they fsync on every write, ``thread`` for the others.
    #: Batches and ``/v1/compare`` always run in the thread pool.
    store_calls: Literal["auto", "thread", "inline"] = "auto"
    #: Keep each document's time, url and site and count each story's copies per hour, for
    #: ``GET /v1/groups?since=24h`` and the hot-stories page at ``/`` (``nshash`` method only).
    track: bool = True
    #: Seconds between attempts to reach a store that was down when the service started.
    reconnect_interval: float = Field(default=1.0, ge=0)
    #: Forget the stories that got no new copy for this long (``30d``, ``12h``, ``90m``,
    #: ``3600s``), and reclaim their space: the store's ``retention`` (``nshash`` method only;
    #: see :mod:`nshash.methods.nshash.retention`). Unset: the store keeps the window it
    #: was made with, if any.
    retention: str | None = None
    #: The time zone the pages show times in and read dates in, and ``GET /v1/groups``
    #: reads ``from``/``to`` in (an IANA name such as ``Asia/Hong_Kong``; default UTC).
    #: Each request may ask for another with ``?tz=``.
    timezone: str | None = None

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                zone(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("retention")
    @classmethod
    def _window(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                retention_option({"retention": value}, "NSHASH_RETENTION")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    def inline_store_calls(self) -> bool:
        """Whether store calls run on the event loop (see :attr:`store_calls`)."""
        if self.store_calls != "auto":
            return self.store_calls == "inline"
        parts = urlsplit(self.store_url)
        fsync = dict(parse_qsl(parts.query)).get("fsync", "everysec")
        return parts.scheme.lower() == "memory" and fsync != "always"
