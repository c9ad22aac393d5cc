"""Metrics: Prometheus counters and histograms for one app, served at ``GET /metrics``.

Each app gets its own :class:`~prometheus_client.CollectorRegistry`, so several apps in one
process (tests) never share counts. Exposed series:

* ``nshash_http_requests_total{method,route,status}``: requests answered.
* ``nshash_http_request_duration_seconds{method,route}``: latency histogram.
* ``nshash_documents_added_total``: documents added (replays of a known ``id`` not counted).
* ``nshash_duplicates_found_total``: added documents that joined an existing group.
* ``nshash_groups_merged_total``: groups merged into another by a new document.
* ``nshash_store_documents``, ``nshash_store_groups``, ``nshash_store_fingerprints``: read
  from the store at scrape time (absent while the store is unreachable).

``route`` is the path template (``/v1/documents/{doc_id}``), never the raw path, so the
number of series stays bounded; requests that match no route count as ``unmatched``, and
methods other than the standard ones as ``other``.

With several uvicorn workers (Redis store), each worker counts its own requests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nshash import KeyedDedup, NSHash, NSHashError, SimhashDedup
from nshash.results import AddResult

__all__ = ["Metrics", "MetricsMiddleware"]

#: Methods counted by name; any other (a client may send any token) counts as ``other``, so
#: clients cannot grow the number of series.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: Latency buckets in seconds, from 0.5 ms to 10 s.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _StoreCollector(Collector):
    """Reads the store's counts at scrape time; yields nothing while the store is down."""

    def __init__(self, get_nshash: Callable[[], NSHash | KeyedDedup | SimhashDedup | None]) -> None:
        self._get_nshash = get_nshash

    def collect(self) -> Iterator[GaugeMetricFamily]:
        nsh = self._get_nshash()
        if nsh is None:
            return
        try:
            stats = nsh.stats()
        except NSHashError:
            return
        yield GaugeMetricFamily(
            "nshash_store_documents", "Documents in the store.", value=stats.documents
        )
        yield GaugeMetricFamily("nshash_store_groups", "Groups in the store.", value=stats.groups)
        yield GaugeMetricFamily(
            "nshash_store_fingerprints", "Fingerprints in the store.", value=stats.fingerprints
        )


class Metrics:
    """The metrics of one app, on a registry of its own.

    Args:
        get_nshash: returns the open NSHash or KeyedDedup (or None before the store could be
            opened); the store gauges are read through it at scrape time.
    """

    def __init__(self, get_nshash: Callable[[], NSHash | KeyedDedup | SimhashDedup | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "nshash_http_requests",
            "HTTP requests answered.",
            ("method", "route", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "nshash_http_request_duration_seconds",
            "HTTP request latency in seconds.",
            ("method", "route"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.documents_added = Counter(
            "nshash_documents_added",
            "Documents added (replays of a known id are not counted).",
            registry=self.registry,
        )
        self.duplicates_found = Counter(
            "nshash_duplicates_found",
            "Added documents that joined an existing group.",
            registry=self.registry,
        )
        self.groups_merged = Counter(
            "nshash_groups_merged",
            "Groups merged into another group by a new document.",
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(get_nshash))

    def record_add(self, result: AddResult) -> None:
        """Count one answer of ``NSHash.add`` (replays change nothing, so count nothing)."""
        if result.replayed:
            return
        self.documents_added.inc()
        if result.duplicate:
            self.duplicates_found.inc()
        if result.merged_from:
            self.groups_merged.inc(len(result.merged_from))


class MetricsMiddleware:
    """Pure ASGI middleware counting each HTTP request and timing it.

    Args:
        app: the wrapped ASGI app.
        metrics: where to count.
        templates: route object id -> full path template (with the router's prefix), since
            the route in the ASGI scope may carry only its path inside its router.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, templates: Mapping[int, str]) -> None:
        self.app = app
        self.metrics = metrics
        self.templates = templates
        self._latency_children: dict[tuple[str, str], Any] = {}
        self._request_children: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = gone = False
        start = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
            await send(message)

        async def receive_watch() -> Message:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        try:
            await self.app(scope, receive_watch, send_status)
        except OSError:
            # The client went away while the answer was being sent.
            if not started:
                gone = True
            raise
        finally:
            if gone and not started:
                # The client went away before an answer: not a server error (nginx's 499).
                status = 499
            route: Any = scope.get("route")
            template = self.templates.get(id(route)) or getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self._latency(method, template).observe(time.perf_counter() - start)
            self._requests(method, template, status).inc()

    # The labelled children are looked up once per label set and kept: ``labels()`` takes a
    # lock and builds keys on every call, which shows on a route that answers in 100 us.
    def _latency(self, method: str, template: str) -> Any:
        key = (method, template)
        child = self._latency_children.get(key)
        if child is None:
            child = self._latency_children[key] = self.metrics.latency.labels(method, template)
        return child

    def _requests(self, method: str, template: str, status: int) -> Any:
        key = (method, template, status)
        child = self._request_children.get(key)
        if child is None:
            child = self.metrics.requests.labels(method, template, str(status))
            self._request_children[key] = child
        return child
