"""The access log: one line per request, with secrets taken out of the address.

A page link may carry the API key as ``?key=...`` (see :mod:`.pages`), and a wrong key is as
secret as a right one (it may be the right one mistyped), so no address is logged as sent:
:func:`redact_query` replaces the value of every parameter whose name says it holds a secret
(``key``, ``api_key``, ``token``, ``password``...) with ``[redacted]``. Headers and cookies are
never logged. This is the one access log of the service: ``nshash serve`` turns uvicorn's own
off, and :func:`install_uvicorn_filter` redacts uvicorn's lines for a server started with
plain ``uvicorn`` that keeps its own.

A line reads::

    127.0.0.1:50912 "GET /stories/1?key=[redacted]&since=24h HTTP/1.1" 303 0.8 ms
"""

from __future__ import annotations

import logging
import time
from urllib.parse import unquote_plus

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "REDACTED",
    "AccessLogMiddleware",
    "install_uvicorn_filter",
    "logger",
    "redact_query",
    "target",
]

#: The logger of the access lines (INFO).
logger = logging.getLogger("nshash.access")

#: What a secret's value is replaced with.
REDACTED = "[redacted]"

#: A query parameter whose name (lower case, ``-`` as ``_``) contains one of these holds a
#: secret.
_SECRET_NAMES = ("key", "token", "secret", "password", "passwd", "auth", "session")


def _secret(name: str) -> bool:
    folded = unquote_plus(name).lower().replace("-", "_")
    return any(word in folded for word in _SECRET_NAMES)


def redact_query(query: str) -> str:
    """*query* (the part after ``?``, as sent) with the values of secret parameters replaced
    by :data:`REDACTED`; every other byte is kept as sent.

    Example:
        >>> redact_query("since=24h&key=s3cret&api%5Fkey=x")
        'since=24h&key=[redacted]&api%5Fkey=[redacted]'
    """
    if not query:
        return query
    parts = query.split("&")
    for i, part in enumerate(parts):
        name, eq, _value = part.partition("=")
        if _secret(name):
            parts[i] = name + (eq or "=") + REDACTED
    return "&".join(parts)


def target(path: str, query: bytes | str) -> str:
    """The address to log for *path* and its raw *query*: secrets redacted."""
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    return path + ("?" + redact_query(query) if query else "")


def _path(scope: Scope) -> str:
    """The path as sent (still percent-encoded, so a ``%0A`` in it cannot forge a line)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw.decode("latin-1")
    return str(scope.get("root_path", "")) + str(scope["path"]).encode(
        "unicode_escape"
    ).decode("ascii")


class AccessLogMiddleware:
    """Pure ASGI middleware writing one :data:`logger` line per HTTP request when it ends.

    The status is the one sent (500 when the app failed before answering, 499 when nothing
    was answered otherwise: the client left); the time runs from the request's start to its
    end. Nothing is done while :data:`logger` is not enabled for INFO.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        status = 0
        start = time.perf_counter()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        failed = False
        try:
            await self.app(scope, receive, send_status)
        except BaseException:
            failed = True
            raise
        finally:
            client = scope.get("client")
            who = f"{client[0]}:{client[1]}" if client else "-"
            logger.info(
                '%s "%s %s HTTP/%s" %d %.1f ms',
                who,
                scope["method"],
                target(_path(scope), scope.get("query_string", b"")),
                scope.get("http_version", "1.1"),
                status or (500 if failed else 499),
                (time.perf_counter() - start) * 1000,
            )


class _UvicornRedaction(logging.Filter):
    """Redacts the address in uvicorn's access records (args: client, method, path with
    query, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            path, _, query = args[2].partition("?")
            record.args = (args[0], args[1], target(path, query), args[3], args[4])
        return True


def install_uvicorn_filter() -> None:
    """Redact secrets from uvicorn's own access log too (once per process)."""
    uvicorn_access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _UvicornRedaction) for f in uvicorn_access.filters):
        uvicorn_access.addFilter(_UvicornRedaction())
