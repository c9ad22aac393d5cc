"""The app factory: :func:`create_app` builds the FastAPI app around one NSHash store.

Run it with uvicorn's factory mode, which calls :func:`create_app` with no argument, so the
settings come from the ``NSHASH_*`` environment::

    NSHASH_STORE_URL=memory:///data/nshash.pkl uvicorn --factory nshash_service.app:create_app

(``nshash serve`` does the same.) The import name is ``nshash_service`` once installed from a
wheel and ``service`` in a source checkout; this package uses only relative imports, so both
work.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from nshash import __version__
from nshash.errors import install_hint
from nshash.inputs import MAX_DOC_ID_CHARS, MAX_TEXT_CHARS, MAX_TITLE_CHARS

from .access import AccessLogMiddleware, install_uvicorn_filter
from .deps import Service, require_api_key
from .errors import install_error_handlers
from .fastpath import FastAddMiddleware
from .limits import BodyLimitMiddleware
from .metrics import MetricsMiddleware
from .pages import pages
from .routes import BODY_MODELS, add_document, api, error_responses, ops
from .settings import Settings

__all__ = ["DOCS_ASSETS", "create_app", "install_docs"]

#: Where Swagger UI and ReDoc come from: the files shipped in the ``fastapi-offline`` package
#: (``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``, ``favicon.png``),
#: served by this app at ``/docs-assets``, so ``/docs`` works on a machine with no internet.
DOCS_ASSETS = "/docs-assets"

_DESCRIPTION = """\
Near-duplicate detection for crawled articles: every document gets a `similar_id`, and
reposts of one story share it.

* `POST /v1/documents` adds one article; `POST /v1/documents/batch` adds many in one call.
* `POST /v1/query` looks a text up without adding it.
* `GET /v1/groups` lists the largest groups; `GET /v1/groups?since=24h` the hot stories of
  a window (most copies added in it first); `GET /v1/groups/{similar_id}` shows one, even by
  an id that was merged into another.
* `POST /v1/compare` scores two texts with the similarity measures.

`NSHASH_METHOD` picks the method: `nshash` (default, anchor sentences), `keyed` (the
four-key method: content, head, tail and title keys behind Bloom filters, confirmed by
cosine) or `simhash` (seed 002: one 64-bit simhash a document, Hamming distance <= 3). Under
`keyed` and `simhash` the document, batch and query routes answer alike, and the group
routes answer 501 `not_supported`, since those methods keep no group listings.

The same server has pages for people at `/`: the hot stories of a window, each story's
copies, and a form that says which story a pasted text belongs to and why.

Every error answers `{"error": {"code": "...", "message": "..."}}` with a 4xx status, or 503
while the store cannot be reached. Settings come from `NSHASH_*` environment variables.
"""


def _template(path: str) -> str:
    """Return a route path without converter names: ``{doc_id:path}`` -> ``{doc_id}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def state_limits(schema: dict[str, Any], settings: Settings) -> None:
    """Write the limits this app enforces into its OpenAPI *schema*, so clients can read them.

    The models are shared by every app, the limits are per app (``NSHASH_*``): the batch size,
    the ``limit`` of ``GET /v1/groups``, the length of compared texts and the metric names.
    The body size and body time limits apply to every request and are stated in the
    description and on each route's 413 and 408.
    """
    schemas = schema["components"]["schemas"]
    documents = schemas["BatchRequest"]["properties"]["documents"]
    documents["maxItems"] = settings.max_batch
    compare = schemas["CompareRequest"]["properties"]
    for name in ("a", "b"):
        compare[name]["maxLength"] = settings.max_compare_chars
    try:
        from nshash.toolkit.similarity import METRICS
    except ImportError:  # pragma: no cover - the similarity extra is missing: 501 anyway
        pass
    else:
        for option in compare["metrics"].get("anyOf", []):
            if option.get("type") == "array":
                option["items"] = {"type": "string", "enum": list(METRICS)}
    for parameter in schema["paths"]["/v1/groups"]["get"]["parameters"]:
        if parameter["name"] == "limit":
            parameter["schema"]["maximum"] = settings.max_groups_limit
    limits = (
        f"\n\n**Limits** (this server): bodies up to {settings.max_body_bytes} bytes (else 413"
        f" `payload_too_large`), sent within {settings.body_timeout:g} s (else 408"
        f" `request_timeout`); at most {settings.max_batch} documents per batch, compared texts"
        f" of at most {settings.max_compare_chars} characters, `limit` up to"
        f" {settings.max_groups_limit}; ids up to {MAX_DOC_ID_CHARS} characters, titles up to"
        f" {MAX_TITLE_CHARS}, texts up to {MAX_TEXT_CHARS}; no NUL in ids or titles, no lone"
        " surrogates anywhere (422)."
    )
    schema["info"]["description"] = schema["info"].get("description", "") + limits
    schema["info"]["x-limits"] = {
        "max_body_bytes": settings.max_body_bytes,
        "body_timeout_seconds": settings.body_timeout,
        "max_batch": settings.max_batch,
        "max_compare_chars": settings.max_compare_chars,
        "max_groups_limit": settings.max_groups_limit,
        "max_id_chars": MAX_DOC_ID_CHARS,
        "max_title_chars": MAX_TITLE_CHARS,
        "max_text_chars": MAX_TEXT_CHARS,
    }


def _docs_files() -> str | None:
    try:
        spec = importlib.util.find_spec("fastapi_offline")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    static = Path(spec.origin).parent / "static"
    return str(static) if (static / "swagger-ui-bundle.js").is_file() else None


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` from local files, as the FastAPI docs on
    self-hosting the docs' static files describe. Without the files (``fastapi-offline``,
    part of the ``service`` extra) both pages answer 501 saying what to install."""
    static = _docs_files()
    title = f"{app.title} - API docs"
    if static is not None:
        app.mount(DOCS_ASSETS, StaticFiles(directory=static), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        if static is None:
            return HTMLResponse(_NO_DOCS, status_code=501)
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=title,
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        if static is None:
            return HTMLResponse(_NO_DOCS, status_code=501)
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=title,
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


_NO_DOCS = (
    "<!doctype html><title>nshash</title><p>The API docs need the Swagger UI files:"
    f" {install_hint('service')} (the fastapi-offline package)."
)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the HTTP service around the store that *settings* names.

    The store is opened when the app starts (its lifespan) and closed when it stops; a
    journaled memory store writes its snapshot then.

    Args:
        settings: the configuration; None reads it from the ``NSHASH_*`` environment (and a
            ``.env`` file), which is what ``uvicorn --factory`` and ``nshash serve`` do.

    Returns:
        The app, ready for uvicorn or ``TestClient`` (use ``with TestClient(app)`` so the
        lifespan runs).

    Example:
        >>> from fastapi.testclient import TestClient
        >>> with TestClient(create_app(Settings(store_url="memory://"))) as client:
        ...     client.get("/healthz").json()
        {'status': 'ok'}
    """
    if settings is None:
        settings = Settings()
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(service.store.open)
        try:
            yield
        finally:
            service.close_workers()
            await run_in_threadpool(service.store.close)

    app = FastAPI(
        title="nshash",
        version=__version__,
        summary="Near-duplicate detection for crawled articles.",
        description=_DESCRIPTION,
        lifespan=lifespan,
        # Served below from local files: the defaults load Swagger UI from a public CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    install_docs(app)

    install_error_handlers(app)
    secured = settings.api_key is not None
    app.include_router(
        api,
        prefix="/v1",
        dependencies=[Depends(require_api_key)] if secured else [],
        responses=error_responses(401) if secured else {},
    )
    app.include_router(ops)
    app.include_router(pages)

    # Each add_middleware wraps the ones before it: the last added runs first. So a request
    # is counted and timed, then its body is limited, then the hot route may answer it.
    hot_route = next(r for r in api.routes if getattr(r, "endpoint", None) is add_document)
    app.add_middleware(FastAddMiddleware, service=service, route=hot_route, path="/v1/documents")
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout
    )
    templates = {id(r): _template("/v1" + r.path) for r in api.routes if hasattr(r, "path")}
    templates.update({id(r): _template(r.path) for r in ops.routes if hasattr(r, "path")})
    app.add_middleware(MetricsMiddleware, metrics=service.metrics, templates=templates)
    install_uvicorn_filter()
    if settings.access_log:
        app.add_middleware(AccessLogMiddleware)

    def openapi() -> dict[str, object]:
        # FastAPI documents its own validation error shape for 422; this service answers
        # every error with ErrorResponse, so drop the unused schemas from the manual.
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=app.description,
                routes=app.routes,
            )
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in BODY_MODELS:
                schemas.setdefault(
                    model.__name__,
                    model.model_json_schema(ref_template="#/components/schemas/{model}"),
                )
            if "#/components/schemas/HTTPValidationError" not in json.dumps(schema["paths"]):
                for unused in ("HTTPValidationError", "ValidationError"):
                    schemas.pop(unused, None)
            state_limits(schema, settings)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
