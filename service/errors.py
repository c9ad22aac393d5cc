"""Errors: every failure the service reports, as one JSON shape, mapped in one place.

Every error response has the body ``{"error": {"code": "...", "message": "..."}}``; the
``code`` is stable and meant for programs, the ``message`` is one sentence for people.

=======  ======================  =========================================================
status   code                    when
=======  ======================  =========================================================
401      ``unauthorized``        an API key is configured and the request lacks it
404      ``not_found``           no such route
404      ``document_not_found``  ``GET /v1/documents/{id}`` for an id never added
404      ``group_not_found``     ``GET /v1/groups/{similar_id}`` for an id never handed out, or
                                a join naming one
404      ``correction_not_found``  an undo of a correction that does not exist
409      ``correction_refused``  a detach of a story's only copy, a join of a story with
                                itself, an undo of a correction undone already
405      ``method_not_allowed``  a known path with the wrong method
413      ``payload_too_large``   the body is over ``NSHASH_MAX_BODY_BYTES``
413      ``batch_too_large``     a batch holds more than ``NSHASH_MAX_BATCH`` documents
422      ``invalid_json``        the body is not valid JSON
422      ``invalid_request``     a field is missing, has the wrong type or is out of range
422      ``empty_document``      a text has no letter or digit, so it has no fingerprint
422      ``invalid_argument``    the library refused an argument (e.g. an unknown metric)
501      ``not_installed``       an optional part is missing (``pip install 'nshash[...]'``)
408      ``request_timeout``     the body did not arrive within ``NSHASH_BODY_TIMEOUT`` seconds
501      ``not_supported``       a group route under ``NSHASH_METHOD=keyed|simhash``
503      ``store_unavailable``   the store cannot be reached or failed
500      ``internal_error``      a bug; never caused by bad input
=======  ======================  =========================================================

:func:`classify` is the one place that turns an exception into (status, code, message); the
handlers installed by :func:`install_error_handlers` and the per-item errors of the batch
route both use it.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from nshash.errors import (
    ConfigError,
    CorrectionError,
    EmptyDocumentError,
    NSHashError,
    StoreError,
)

__all__ = [
    "ApiError",
    "classify",
    "error_body",
    "error_response",
    "error_response_for",
    "content_type_message",
    "install_error_handlers",
    "is_json",
    "scrub_paths",
    "validation_message",
]

logger = logging.getLogger("nshash.service")

#: Status -> code for errors raised by Starlette/FastAPI themselves.
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
}


class ApiError(Exception):
    """An error the service answers on purpose, with its HTTP status and code.

    Args:
        status: the HTTP status code.
        code: the stable error code (see the module docstring).
        message: one sentence for people.
        headers: extra response headers (``WWW-Authenticate`` for 401).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        #: The HTTP status code.
        self.status = status
        #: The stable error code.
        self.code = code
        #: The message for people.
        self.message = message
        #: Extra response headers.
        self.headers = dict(headers or {})


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    """Return the JSON error body ``{"error": {"code": code, "message": message}}``."""
    return {"error": {"code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """Return a JSON response in the one error shape."""
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def error_response_for(
    path: str, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse | HTMLResponse:
    """:func:`error_response` for a request to the API (``/v1/...``); a short readable page
    with the same status and message for one to the pages (a browser's form)."""
    if path.startswith("/v1/") or path == "/v1":
        return error_response(status, code, message, headers)
    text = html.escape(message)
    page = (
        "<!doctype html><meta charset=utf-8><title>Not done</title><h1>Not done</h1>"
        f"<p>{text}</p><p><a href=/>Back to the stories</a></p>"
    )
    return HTMLResponse(page, status_code=status, headers=headers)


def _location(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts)


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """Turn pydantic's error list into one sentence naming each bad field and what was wrong.

    Example:
        >>> validation_message([{"loc": ("body", "text"), "msg": "Field required"}])
        "'text': Field required"
    """
    parts = []
    for err in errors:
        where = _location(err.get("loc", ()))
        what = str(err.get("msg", "invalid value"))
        if not where and err.get("type") == "missing":
            what = "A JSON body is required"
        parts.append(f"{where!r}: {what}" if where else what)
    return "; ".join(parts) or "The request is invalid"


#: A file store's URL, whose path is the server's business.
_FILE_URL = re.compile(r"\b(memory|leveldb)://[^\s'\"]+")
#: An absolute or relative file path standing on its own (not the path of an http URL).
_PATH = re.compile(r"(^|[\s'\"(=\[])(\.{0,2}/[^\s'\"),;:\]]*)")


def scrub_paths(message: str) -> str:
    """Return *message* with server file paths replaced by ``<path>``.

    Example:
        >>> scrub_paths("Cannot write to '/data/n.ldb': IO error: /data/n.ldb/5.log: full")
        "Cannot write to '<path>': IO error: <path>: full"
    """
    return _PATH.sub(r"\1<path>", _FILE_URL.sub(r"\1://<path>", message))


def classify(exc: BaseException) -> tuple[int, str, str]:
    """Map an exception to (HTTP status, error code, message): the one mapping of the service.

    Args:
        exc: anything raised while handling a request.

    Returns:
        The status, the stable code and the message to send.
    """
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message
    if isinstance(exc, RequestValidationError | ValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            detail = next(e for e in errors if e.get("type") == "json_invalid")
            reason = (detail.get("ctx") or {}).get("error", "JSON decode error")
            position = (detail.get("loc") or ("body",))[-1]
            where = f" at byte {position}" if isinstance(position, int) else ""
            return 422, "invalid_json", f"The body is not valid JSON: {reason}{where}"
        return 422, "invalid_request", validation_message(errors)
    if isinstance(exc, EmptyDocumentError):
        return 422, "empty_document", str(exc)
    if isinstance(exc, CorrectionError):
        status = 409 if exc.code == "correction_refused" else 404
        return status, exc.code, scrub_paths(str(exc))
    if isinstance(exc, ConfigError):
        if isinstance(exc.__cause__, ImportError):
            # The library's way of saying an optional package is missing (with the pip line).
            return 501, "not_installed", scrub_paths(str(exc))
        return 422, "invalid_argument", scrub_paths(str(exc))
    if isinstance(exc, StoreError):
        # The full message, paths and all, goes to the log (see _handle), not to clients.
        return 503, "store_unavailable", f"The store is unavailable: {scrub_paths(str(exc))}"
    if isinstance(exc, NSHashError):
        return 422, "invalid_argument", scrub_paths(str(exc))
    if isinstance(exc, ClientDisconnect):
        return 499, "client_closed_request", "The client closed the connection"
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 400 and exc.__cause__ is not None:
            # FastAPI's answer to a body that json.loads cannot even start on: not UTF-8,
            # or nested deeper than the parser's recursion limit.
            return 422, "invalid_json", f"The body cannot be read as JSON: {exc.__cause__}"
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = "No such route"
        elif exc.status_code == 405 and message == "Method Not Allowed":
            message = "This method is not allowed on this path"
        return exc.status_code, code, message
    return 500, "internal_error", "An internal error occurred; it has been logged"


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type header names JSON (``application/json`` or ``...+json``)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def content_type_message(content_type: str | None) -> str:
    """The message for a body sent without a JSON content type."""
    return f"The body must be JSON sent with 'Content-Type: application/json', not {content_type!r}"


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    status, code, message = classify(exc)
    if (
        isinstance(exc, RequestValidationError)
        and code == "invalid_request"
        and not is_json(request.headers.get("content-type"))
        and any(
            tuple(e.get("loc", ())) == ("body",) and e.get("type") != "missing"
            for e in exc.errors()
        )
    ):
        # FastAPI reads a body as JSON only when the request says it is JSON.
        message = content_type_message(request.headers.get("content-type"))
    headers: dict[str, str] = {}
    if isinstance(exc, ApiError):
        headers.update(exc.headers)
    elif isinstance(exc, StarletteHTTPException) and exc.headers:
        headers.update(exc.headers)
    if status == 499:
        logger.info("Client went away on %s %s", request.method, request.url.path)
    elif status == 500:
        logger.error("Unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    elif status == 503:
        logger.warning("Store unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_response(status, code, message, headers or None)


def install_error_handlers(app: FastAPI) -> None:
    """Send every error of *app*, FastAPI's own included, through :func:`classify`."""
    for exc_class in (
        ApiError,
        RequestValidationError,
        StarletteHTTPException,
        NSHashError,
        Exception,
    ):
        app.add_exception_handler(exc_class, _handle)
