"""The uvicorn server of ``nshash serve``: its options, and a request-header deadline.

uvicorn times out a kept-alive connection that stays idle *between* requests
(``timeout_keep_alive``), but not a connection that sends nothing at all after connecting,
nor one that sends half a request line and stops. Each such connection counts against
``limit_concurrency`` until the client lets go: a few of them (the cap's worth) and every
request, ``/healthz`` included, is refused with 503. :class:`HeaderTimeoutProtocol` closes a
connection whose request headers are not complete within ``NSHASH_HEADER_TIMEOUT`` seconds of
its first byte (or of the connection, for one that sends nothing), so such clients hold a slot
for at most that long. The body has its own deadline (:class:`~.limits.BodyLimitMiddleware`).

:func:`server_config` is the one place that turns the settings into uvicorn's options, for
one worker and for ``--workers N`` alike.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from .settings import Settings

__all__ = ["HeaderTimeoutProtocol", "ServerConfig", "log_config", "server_config"]

#: What a client that sent part of a request, and not its headers in time, is told.
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 42\r\n\r\nThe request headers did not arrive in time"
)


class ServerConfig(uvicorn.Config):
    """uvicorn's configuration plus the request-header deadline :class:`HeaderTimeoutProtocol`
    reads (it pickles by reference to this module, so ``--workers N`` hands it on).

    Args:
        app: the app, or a ``module:factory`` string with ``factory=True``.
        header_timeout: seconds a connection has to send its request headers.
        **options: uvicorn's other options.
    """

    def __init__(self, app: Any, header_timeout: float, **options: Any) -> None:
        super().__init__(app, http=HeaderTimeoutProtocol, **options)
        #: Seconds a connection has to complete its request headers.
        self.header_timeout = header_timeout


class HeaderTimeoutProtocol(AutoHTTPProtocol):  # type: ignore[valid-type, misc]
    """uvicorn's HTTP protocol (httptools or h11), closing a connection whose request headers
    do not arrive within ``config.header_timeout`` seconds.

    The deadline starts when the connection opens and again at the first byte of each later
    request; it ends when the request's headers are complete (uvicorn then starts the request,
    and the body deadline takes over). Between requests uvicorn's keep-alive timeout applies.
    """

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout = float(getattr(config, "header_timeout", 10.0))
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = False

    def _awaiting_headers(self) -> bool:
        cycle = self.cycle
        return cycle is None or bool(cycle.response_complete)

    def _arm(self) -> None:
        if self._header_timer is None:
            loop = asyncio.get_running_loop()
            self._header_timer = loop.call_later(self._header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._header_bytes = False

    def _headers_late(self) -> None:
        self._header_timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or not self._awaiting_headers():
            return
        if self._header_bytes:
            # Part of a request came: say why the connection ends (nothing was answered yet).
            transport.write(_TIMED_OUT)
        transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle or not self._awaiting_headers():
            # A request started: its headers are complete.
            self._disarm()
        elif data:
            self._header_bytes = True
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration, plus the app's access log (:mod:`.access`) to stdout
    at INFO, formatted as uvicorn formats its own lines."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["nshash_access"] = {
        "formatter": "default",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stdout",
    }
    config["loggers"]["nshash.access"] = {
        "handlers": ["nshash_access"],
        "level": "INFO",
        "propagate": False,
    }
    return config


def server_config(
    settings: Settings, app: Any, *, host: str, port: int, workers: int = 1, factory: bool = False
) -> ServerConfig:
    """The uvicorn configuration ``nshash serve`` runs *app* with, from *settings*.

    uvicorn's own access log is off: the app writes one line per request, with secrets taken
    out of the address (:mod:`.access`), unless ``NSHASH_ACCESS_LOG=false``.
    """
    return ServerConfig(
        app,
        header_timeout=settings.header_timeout,
        factory=factory,
        host=host,
        port=port,
        workers=workers,
        timeout_keep_alive=settings.idle_timeout,
        limit_concurrency=settings.max_connections,
        timeout_graceful_shutdown=settings.shutdown_timeout,
        # A request head may be up to 256 KiB (h11's default is 16 KiB): a search of 10,000
        # Chinese characters is a 90 KB address, which then gets the pages' readable 422
        # instead of a bare 400.
        h11_max_incomplete_event_size=256 * 1024,
        access_log=False,
        log_config=log_config(),
    )
