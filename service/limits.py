"""BodyLimitMiddleware: refuses request bodies over a size limit with 413, before any parsing.

The limit is checked twice: against ``Content-Length`` before reading anything, and against
the bytes actually received, since a chunked request has no length and a client may lie.
The body is read here, up to the limit, and handed on in one piece; every JSON route reads
its whole body anyway, so this costs no extra copy worth measuring.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response_for

__all__ = ["BodyLimitMiddleware", "replay_body"]


class BodyLimitMiddleware:
    """Pure ASGI middleware answering 413 ``payload_too_large`` for bodies over *max_bytes*
    (JSON to the API, a short page to the pages: :func:`~service.errors.error_response_for`).

    It also bounds the time a body may take: a client that declares a body and sends it
    slower than *timeout* seconds (or never) gets 408 ``request_timeout`` and the connection
    is closed, so slow or stalled clients cannot hold connections open forever.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the largest body accepted, in bytes.
        timeout: seconds from the start of the request to the last byte of its body.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        response = error_response_for(
            str(scope.get("path", "")),
            413,
            "payload_too_large",
            f"The request body ({size}) is over the limit of {self.max_bytes} bytes",
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: int | None = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
                break
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"{declared} bytes declared")
            return

        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                response = error_response_for(
                    str(scope.get("path", "")),
                    408,
                    "request_timeout",
                    f"The request body did not arrive within {self.timeout:g} seconds",
                    headers={"Connection": "close"},
                )
                await response(scope, receive, send)
                return
            if message["type"] != "http.request":
                # The client went away before sending its whole body: nothing to answer.
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes sent")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break

        await self.app(scope, replay_body(b"".join(chunks), receive), send)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """Return a ``receive`` that hands *body* over once, then defers to *receive*."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
