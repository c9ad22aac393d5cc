"""Dependencies of the routes: the open NSHash, the settings, the API key check.

Routes declare what they need with the ``Annotated`` aliases (``nsh: NSHashDep``); tests can
swap any of them with ``app.dependency_overrides``.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from nshash import NSHash, StoreUnavailableError

from .errors import ApiError
from .metrics import Metrics
from .settings import Settings

__all__ = [
    "MetricsDep",
    "NSHashDep",
    "SettingsDep",
    "StoreHolder",
    "get_metrics",
    "get_nshash",
    "get_settings",
    "require_api_key",
]

logger = logging.getLogger("nshash.service")


class StoreHolder:
    """Holds the app's NSHash; opens it, and retries opening while the store is unreachable.

    A server store (Redis) may be down when the service starts, for instance when both start
    together under docker compose. Rather than refuse to start, the service starts, answers
    503 and ``/readyz`` 503, and tries again at most once per ``reconnect_interval`` seconds.
    Any other failure to open (a bad URL, a locked or corrupt file) is a configuration error
    and stops the start-up.

    Args:
        settings: where the store is and how NSHash is tuned.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._nsh: NSHash | None = None
        self._lock = threading.Lock()
        self._next_try = 0.0
        self._last_error: StoreUnavailableError | None = None
        self._closed = False

    def _open(self) -> NSHash:
        s = self.settings
        return NSHash.open(s.store_url, n=s.n, min_length=s.min_length, hashfunc=s.hashfunc)

    def open(self) -> None:
        """Open the store now; an unreachable server store is retried later, not fatal."""
        try:
            self._nsh = self._open()
        except StoreUnavailableError as exc:
            self._last_error = exc
            self._next_try = time.monotonic() + self.settings.reconnect_interval
            logger.warning("The store is unreachable; will retry: %s", exc)

    @property
    def current(self) -> NSHash | None:
        """The open NSHash, or None while the store could not be opened yet."""
        return self._nsh

    def get(self) -> NSHash:
        """Return the open NSHash, opening it if a previous attempt failed.

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


def get_settings(request: Request) -> Settings:
    """Return the settings the app was created with."""
    settings: Settings = request.app.state.settings
    return settings


def get_nshash(request: Request) -> NSHash:
    """Return the app's open NSHash (503 ``store_unavailable`` while it cannot be opened)."""
    holder: StoreHolder = request.app.state.store
    return holder.get()


def get_metrics(request: Request) -> Metrics:
    """Return the app's metrics."""
    metrics: Metrics = request.app.state.metrics
    return metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
NSHashDep = Annotated[NSHash, Depends(get_nshash)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

_bearer = HTTPBearer(
    auto_error=False,
    description="The API key set in `NSHASH_API_KEY`, sent as `Authorization: Bearer <key>`.",
)


def require_api_key(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse the request with 401 unless it carries the configured API key.

    Raises:
        ApiError: 401 ``unauthorized`` when the key is missing or wrong.
    """
    if settings.api_key is None:
        return
    challenge = {"WWW-Authenticate": "Bearer"}
    if credentials is None:
        raise ApiError(
            401,
            "unauthorized",
            "This API needs a key: send the header 'Authorization: Bearer <key>'",
            challenge,
        )
    expected = settings.api_key.get_secret_value().encode()
    if not secrets.compare_digest(credentials.credentials.encode(), expected):
        raise ApiError(401, "unauthorized", "The API key is wrong", challenge)
