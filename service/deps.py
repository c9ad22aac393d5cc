"""Dependencies of the routes: the app's :class:`Service` (store, settings, metrics) and the
API key check.

Routes declare ``service: ServiceDep``; tests can swap it with ``app.dependency_overrides``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import multiprocessing.connection
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Annotated, Any, ParamSpec, TypeVar

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from nshash import KeyedDedup, NSHash, SimhashDedup, StoreUnavailableError
from nshash.methods.nshash.base import Store
from nshash.options import SETTINGS, from_environ, settings_in_url

from .errors import ApiError
from .metrics import Metrics
from .sessions import Attempts, Sessions
from .settings import Settings

__all__ = [
    "INLINE_MAX_CHARS",
    "Dedup",
    "Service",
    "ServiceDep",
    "StoreHolder",
    "get_service",
    "ping_target",
    "require_api_key",
]

logger = logging.getLogger("nshash.service")

P = ParamSpec("P")
T = TypeVar("T")

#: The object the routes call: an :class:`~nshash.NSHash`, a :class:`~nshash.KeyedDedup`
#: (``NSHASH_METHOD=keyed``) or a :class:`~nshash.SimhashDedup` (``NSHASH_METHOD=simhash``).
#: All answer ``add``, ``add_many``, ``query``, ``document`` and ``stats`` alike; only NSHash
#: lists groups.
Dedup = NSHash | KeyedDedup | SimhashDedup


class StoreHolder:
    """Holds the app's NSHash or KeyedDedup (:data:`Dedup`); opens it, retrying while unreachable.

    A server store (Redis) may be down when the service starts, for instance when both start
    together under docker compose. Rather than refuse to start, the service starts, answers
    503 and ``/readyz`` 503, and tries again at most once per ``reconnect_interval`` seconds.
    Any other failure to open (a bad URL, a locked or corrupt file) is a configuration error
    and stops the start-up.

    Args:
        settings: where the store is, which method, and how NSHash is tuned.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._nsh: Dedup | None = None
        self._lock = threading.Lock()
        self._next_try = 0.0
        self._last_error: StoreUnavailableError | None = None
        self._closed = False

    def _open(self) -> Dedup:
        s = self.settings
        if s.method == "keyed":
            return KeyedDedup.open(s.store_url, hashfunc=s.hashfunc)
        if s.method == "simhash":
            return SimhashDedup.open(s.store_url)
        window: dict[str, Any] = {} if s.retention is None else {"retention": s.retention}
        # The tuning settings that Settings does not hold itself come from NSHASH_* variables
        # too (one schema, nshash.options); a store URL's own (?theta=0.6) win over both.
        in_url = settings_in_url(s.store_url)[1]
        given: dict[str, Any] = {"n": s.n, "min_length": s.min_length, "hashfunc": s.hashfunc}
        given.update((k, v) for k, v in from_environ(os.environ).items() if k not in given)
        tuning = {k: v for k, v in given.items() if k not in in_url}
        return NSHash.open(
            s.store_url,
            track=s.track,
            settings_from={k: f"the environment variable {SETTINGS[k].env}" for k in tuning},
            **tuning,
            **window,
        )

    def open(self) -> None:
        """Open the store now (no-op if open); an unreachable server store is retried later.

        The store is pinged once opened: a server store connects lazily, and refused
        credentials (a wrong Redis password) must stop the start-up, not fail every request.

        Raises:
            NSHashError: the store cannot be opened or refuses this client (not retried).
        """
        if self._nsh is not None:
            return
        try:
            nsh = self._open()
        except StoreUnavailableError as exc:
            self._last_error = exc
            self._next_try = time.monotonic() + self.settings.reconnect_interval
            logger.warning("The store is unreachable; will retry: %s", exc)
            return
        try:
            ping_target(nsh).ping()
        except StoreUnavailableError as exc:
            # Kept: each call answers 503 until the server is back, and then just works.
            logger.warning("The store is unreachable for now: %s", exc)
        except BaseException:
            nsh.close()
            raise
        self._nsh = nsh

    @property
    def current(self) -> Dedup | None:
        """The open NSHash (or KeyedDedup), or None while the store could not be opened yet."""
        return self._nsh

    def get(self) -> Dedup:
        """Return the open NSHash (or KeyedDedup), opening it if a previous attempt failed.

        Raises:
            StoreUnavailableError: the store still cannot be reached.
        """
        nsh = self._nsh
        if nsh is not None:
            return nsh
        with self._lock:
            if self._nsh is not None:
                return self._nsh
            if self._closed:
                raise StoreUnavailableError("The service is shutting down")
            if time.monotonic() >= self._next_try:
                self.open()
            if self._nsh is not None:
                return self._nsh
            raise self._last_error or StoreUnavailableError("The store is not open")

    def close(self) -> None:
        """Close the store (a journaled memory store writes its snapshot)."""
        with self._lock:
            self._closed = True
            nsh, self._nsh = self._nsh, None
        if nsh is not None:
            nsh.close()


def ping_target(nsh: Dedup) -> Store | KeyedDedup | SimhashDedup:
    """What answers ``ping()`` for *nsh*: an NSHash's store, or the method itself."""
    return nsh.store if isinstance(nsh, NSHash) else nsh


#: The longest text worked on inline (see :meth:`Service.caller_for`): about a millisecond
#: of fingerprinting.
INLINE_MAX_CHARS = 16_384


class Service:
    """What every request of one app needs: its settings, store, metrics and call policy.

    The routes reach it through one dependency (:data:`ServiceDep`): FastAPI resolves each
    dependency on every request, and on the hot routes one resolution instead of four is a
    measurable share of a request's cost.

    Calls into the library go through :meth:`call`. A call to an in-process memory store is
    pure CPU work: handing it to a thread costs more than the call and frees nothing, since
    the GIL serializes it anyway. A call to Redis, LevelDB or an fsync-on-every-write journal
    waits on I/O and must not stall the event loop.
    :meth:`~.settings.Settings.inline_store_calls` decides which applies.

    Args:
        settings: the app's configuration.
    """

    def __init__(self, settings: Settings) -> None:
        #: The app's configuration.
        self.settings = settings
        #: The store, opened by the app's lifespan.
        self.store = StoreHolder(settings)
        #: The app's Prometheus metrics.
        self.metrics = Metrics(lambda: self.store.current)
        #: Whether library calls run on the event loop rather than in the thread pool.
        self.inline = settings.inline_store_calls()
        self._compare_pool: ProcessPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        key = settings.api_key
        #: The pages' login sessions (None without an API key).
        self.sessions = None if key is None else Sessions(key.get_secret_value())
        #: Wrong keys per client address (the login form and ``?key=``).
        self.attempts = Attempts()

    def key_matches(self, given: str | None) -> bool:
        """Whether *given* is the API key (always true when none is set)."""
        key = self.settings.api_key
        if key is None:
            return True
        if not given:
            return False
        return secrets.compare_digest(given.encode(), key.get_secret_value().encode())

    def bearer_ok(self, request: Request) -> bool:
        """Whether *request* carries the API key as ``Authorization: Bearer`` (or none is set)."""
        if self.settings.api_key is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.key_matches(given.strip())

    def compare_pool(self) -> ProcessPoolExecutor:
        """The processes that run comparisons (made on first use).

        A comparison is pure-Python CPU work for up to seconds: in a thread it would hold the
        GIL and slow every other request of this process, so it runs in its own processes.
        """
        with self._pool_lock:
            if self._compare_pool is None:
                self._compare_pool = ProcessPoolExecutor(
                    max_workers=self.settings.compare_workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_background_priority,
                )
            return self._compare_pool

    async def run_cpu(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Return ``fn(*args, **kwargs)`` computed in :meth:`compare_pool` (off this process).

        *fn*, its arguments and its result must pickle.
        """
        loop = asyncio.get_running_loop()
        pool = self.compare_pool()
        try:
            return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))
        except BrokenProcessPool:
            # A worker died (killed, out of memory): start afresh for the next request.
            with self._pool_lock:
                if self._compare_pool is pool:
                    self._compare_pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def close_workers(self) -> None:
        """Stop the comparison processes (the app's shutdown), busy ones included: a
        comparison in progress has nobody left to answer."""
        with self._pool_lock:
            pool, self._compare_pool = self._compare_pool, None
        if pool is None:
            return
        processes = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)

    async def nshash(self) -> Dedup:
        """Return the open NSHash (or KeyedDedup when ``NSHASH_METHOD=keyed``).

        Raises:
            StoreUnavailableError: the store could not be opened yet (503).
        """
        nsh = self.store.current
        if nsh is not None:
            return nsh
        return await run_in_threadpool(self.store.get)

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Return ``fn(*args, **kwargs)``, run on the event loop or in the thread pool."""
        if self.inline:
            return fn(*args, **kwargs)
        return await run_in_threadpool(fn, *args, **kwargs)

    def caller_for(self, text: str) -> Callable[..., Awaitable[Any]]:
        """Return :meth:`call`, or the thread pool for a text too long to work on inline.

        Fingerprinting takes time in proportion to the text: past :data:`INLINE_MAX_CHARS`
        characters it would hold the event loop (and every other request) for milliseconds.
        """
        if len(text) <= INLINE_MAX_CHARS:
            return self.call
        return run_in_threadpool


def _background_priority() -> None:
    """Set up a comparison process: lower its priority (on a busy machine the processes that
    answer requests get the CPU first, so short routes stay fast while compares run), and
    have it exit when the server process is gone, however that ended (SIGKILL included)."""
    try:
        os.nice(10)
    except OSError:  # pragma: no cover - not permitted here: run at normal priority
        pass
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(
            target=_exit_with, args=(parent.sentinel,), name="parent-watch", daemon=True
        ).start()


def _exit_with(sentinel: int) -> None:
    """Wait until *sentinel* (the server process) is gone, then end this process at once."""
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


# ``async def`` on purpose: a plain ``def`` dependency is run in the thread pool, a hand-off
# that costs more than this attribute read.
async def get_service(request: Request) -> Service:
    """Return the service state of the app handling *request*."""
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]

_bearer = HTTPBearer(
    auto_error=False,
    description="The API key set in `NSHASH_API_KEY`, sent as `Authorization: Bearer <key>`.",
)


async def require_api_key(
    service: ServiceDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse the request with 401 unless it carries the configured API key.

    Raises:
        ApiError: 401 ``unauthorized`` when the key is missing or wrong.
    """
    if service.settings.api_key is None:
        return
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise ApiError(
            401,
            "unauthorized",
            "This API needs a key: send the header 'Authorization: Bearer <key>'",
            challenge,
        )
    if not service.key_matches(credentials.credentials):
        raise ApiError(401, "unauthorized", "The API key is wrong", challenge)
