"""FastAddMiddleware: the hot route, ``POST /v1/documents``, answered without the router.

A crawler posts one document per request, and on a memory store the library answers in
about 100 us, less than FastAPI spends routing, resolving dependencies and serializing. So
this pure ASGI middleware answers the ordinary case itself: a JSON ``POST /v1/documents``,
with the API key if one is set, whose body is a valid :class:`~.schemas.DocumentIn`. It sits
inside the metrics and body-limit middlewares, so those still count, time and limit it.

Everything else goes on to the FastAPI route (``routes.add_document``), which is the
reference: it documents the route in OpenAPI and produces every error (401, 422...) with
the same body. Errors raised by the library go through :func:`~.errors.classify`, the one
mapping. Tests check both paths give the same answers.
"""

from __future__ import annotations

import logging
import secrets

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from nshash import NSHash, NSHashError

from .deps import Service
from .errors import classify, error_response
from .limits import replay_body
from .schemas import AddResponse, DocumentIn

__all__ = ["FastAddMiddleware"]

logger = logging.getLogger("nshash.service")

_JSON = [(b"content-type", b"application/json")]


class FastAddMiddleware:
    """Pure ASGI middleware answering valid ``POST /v1/documents`` requests directly.

    Args:
        app: the wrapped ASGI app (the FastAPI router and its handlers).
        service: the app's store, settings and metrics.
        route: the FastAPI route object of ``POST /v1/documents``, put in the scope so the
            metrics label the request with its template as usual.
        path: the path it answers, ``/v1/documents``.
    """

    def __init__(self, app: ASGIApp, service: Service, route: object, path: str) -> None:
        self.app = app
        self.service = service
        self.route = route
        self.path = path
        key = service.settings.api_key
        self._authorization = None if key is None else key.get_secret_value().encode()
        #: Requests answered here rather than by the FastAPI route (for tests).
        self.handled = 0

    def _accepts(self, scope: Scope) -> bool:
        """Whether the headers are the ordinary case: exactly JSON, and the key if one is set."""
        content_type = authorization = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                if content_type is not None:  # (two: the route reads the first; it decides)
                    return False
                content_type = value
            elif name == b"authorization":
                if authorization is not None:
                    return False
                authorization = value
        if content_type != b"application/json":
            return False
        if self._authorization is None:
            return True
        if authorization is None:
            return False
        scheme, _, credentials = authorization.partition(b" ")
        return scheme.lower() == b"bearer" and secrets.compare_digest(
            credentials, self._authorization
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] != self.path
            or self.service.store.current is None
            or not self._accepts(scope)
        ):
            await self.app(scope, receive, send)
            return

        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            doc = DocumentIn.model_validate_json(body)
        except ValidationError:
            # The FastAPI route reads it again and answers with the error.
            await self.app(scope, replay_body(body, receive), send)
            return

        scope["route"] = self.route
        nsh = self.service.store.current
        self.handled += 1
        more = doc.meta_kwargs() if isinstance(nsh, NSHash) else {}
        try:
            result = await self.service.caller_for(doc.text)(
                nsh.add, doc.text, doc.id, title=doc.title, **more
            )
        except NSHashError as exc:
            status, code, text = classify(exc)
            if status == 503:
                logger.warning("Store unavailable on POST %s: %s", self.path, exc)
            await error_response(status, code, text)(scope, receive, send)
            return
        self.service.metrics.record_add(result)
        payload = AddResponse.of(result).model_dump_json().encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_JSON, (b"content-length", str(len(payload)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})
