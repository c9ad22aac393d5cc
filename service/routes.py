"""The routes: the ``/v1`` API (:data:`api`) and the operational endpoints (:data:`ops`).

Handlers are ``async def`` and call the library through :meth:`~.deps.Service.call`, which
runs each call in the thread pool when the store waits on I/O (Redis, LevelDB) and on the
event loop when the call is pure CPU work on an in-process store. Batches and comparisons,
which can take milliseconds, always go to the thread pool so other requests keep flowing.

Ordinary ``POST /v1/documents`` requests are answered before they reach this router, by
:class:`~.fastpath.FastAddMiddleware`; :func:`add_document` here documents the route and
answers everything else (every error included).
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, BeforeValidator, ValidationError
from starlette.concurrency import run_in_threadpool

from nshash import ConfigError, NSHash, NSHashError, StoreError
from nshash.errors import install_hint
from nshash.inputs import check_text
from nshash.methods.nshash.find import MAX_TERM_CHARS, zone

from .deps import Dedup, Service, ServiceDep, ping_target
from .errors import ApiError, classify, content_type_message, is_json
from .metrics import Metrics
from .schemas import (
    AddResponse,
    BatchItemError,
    BatchItemResult,
    BatchRequest,
    BatchResponse,
    CompareRequest,
    CompareResponse,
    CorrectionOut,
    CorrectionsResponse,
    DetachRequest,
    DocumentIn,
    DocumentResponse,
    ErrorDetail,
    ErrorResponse,
    GroupResponse,
    GroupsResponse,
    HealthResponse,
    HotGroupOut,
    HotGroupsResponse,
    JoinRequest,
    QueryRequest,
    QueryResponse,
    ReadyResponse,
    UndoRequest,
    iso,
)

__all__ = ["BODY_MODELS", "api", "editor", "error_responses", "json_body", "ops"]

_DESCRIPTIONS = {
    401: "The API key is missing or wrong (only when `NSHASH_API_KEY` is set).",
    404: "Not found.",
    409: "The correction cannot be made (`correction_refused`): a detach of a story's only"
    " copy, a join of a story with itself, an undo of a correction undone already.",
    408: "The body did not arrive within `NSHASH_BODY_TIMEOUT` seconds.",
    413: "The body is over `NSHASH_MAX_BODY_BYTES`, the batch over `NSHASH_MAX_BATCH`, or a"
    " compared text over `NSHASH_MAX_COMPARE_CHARS`.",
    422: "The body is not valid JSON, a field is missing or has the wrong type, or the text"
    " has no letter or digit; on `GET /v1/groups`, `invalid_query`: a range that ends before"
    " it starts, a date not in the calendar, a search term with no letter or digit, an"
    " unknown time zone, or both a window and a range.",
    501: "An optional part is not installed (`not_installed`), or the configured method does"
    " not offer the route (`not_supported`: `NSHASH_METHOD=keyed` and `simhash` keep no group"
    " listings).",
    503: "The store cannot be reached.",
}

#: The shape of ``from``/``to``: an ISO 8601 date, or a date and time with an optional offset.
_MOMENT = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:?\d{2})?)?$"

#: The largest similar_id accepted in a path: ids are 64-bit signed integers in every store.
MAX_SIMILAR_ID = 2**63 - 1


def _digits(value: object) -> object:
    """A path id as its digits alone (pydantic would read ``1_0`` or ``+5`` as an int)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("an id is a positive whole number written in digits")
    return value


#: Digits only for an id in a path (after its Path(...), which the schema shows).
DIGITS = BeforeValidator(_digits)


def _json(model: BaseModel, exclude_unset: bool = False) -> Response:
    """Answer *model* as JSON, serialized once by pydantic (the route's response_model
    documents it; FastAPI would otherwise validate it a second time). With *exclude_unset*,
    optional fields left at their default are left out."""
    return Response(
        model.model_dump_json(exclude_unset=exclude_unset), media_type="application/json"
    )


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Document *statuses* as answered with :class:`ErrorResponse` in the OpenAPI schema."""
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS[s]} for s in statuses}


M = TypeVar("M", bound=BaseModel)


async def json_body(request: Request, model: type[M]) -> M:
    """Parse and validate a JSON request body in one pass, with pydantic's JSON parser.

    The hot routes (``POST /v1/documents`` and ``/v1/query``) read their body with this
    instead of a FastAPI body parameter: parsing and validating in one step saves a good
    share of the framework's cost per request. Errors are raised as FastAPI's own, so they
    read exactly as on every other route.

    Raises:
        RequestValidationError: no body, or a body that is not valid JSON or not a *model*.
        ApiError: the body is not declared as JSON (422 ``invalid_request``).
    """
    body = await request.body()
    if not body:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    content_type = request.headers.get("content-type")
    if not is_json(content_type):
        raise ApiError(422, "invalid_request", content_type_message(content_type))
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None


def json_body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of a route that reads *model* with :func:`json_body`."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


#: Models read by :func:`json_body`, which FastAPI cannot see: added to the schema's components.
BODY_MODELS: tuple[type[BaseModel], ...] = (DocumentIn, QueryRequest)


api = APIRouter(tags=["documents"])
ops = APIRouter(tags=["operations"])


@api.post(
    "/documents",
    response_model=AddResponse,
    responses=error_responses(408, 413, 422, 503),
    summary="Add a document",
    openapi_extra=json_body_schema(DocumentIn),
)
async def add_document(request: Request, service: ServiceDep) -> Response:
    """Add one article and return its group.

    Reposts of one story get the same `similar_id`. With an `id` seen before, the answer is
    the first one (`replayed: true`) and nothing changes, so a crawler may retry freely.
    With `NSHASH_TRACK` on (the default) the `url`, `site` and time (`published_at`, else
    now) are kept and the story's copies are counted per hour (`GET /v1/groups?since=24h`).
    """
    doc = await json_body(request, DocumentIn)
    nsh = await service.nshash()
    more = doc.meta_kwargs() if isinstance(nsh, NSHash) else {}
    result = await service.caller_for(doc.text)(nsh.add, doc.text, doc.id, title=doc.title, **more)
    service.metrics.record_add(result)
    return _json(AddResponse.of(result))


@api.post(
    "/documents/batch",
    response_model=BatchResponse,
    responses=error_responses(408, 413, 422, 503),
    summary="Add several documents",
)
async def add_batch(batch: BatchRequest, service: ServiceDep) -> BatchResponse:
    """Add documents in order and return one entry per document, in the same order.

    Each item is checked on its own: an invalid one (empty text, a wrong type, no `text`)
    gets an error entry at its index and the others still go in. A batch larger than
    `NSHASH_MAX_BATCH` (default 1000) is refused whole with 413 `batch_too_large`. If the
    store fails, the whole request answers 503; documents sent with an `id` can be resent
    safely, since a known id returns its first answer.
    """
    limit = service.settings.max_batch
    if len(batch.documents) > limit:
        raise ApiError(
            413,
            "batch_too_large",
            f"A batch holds at most {limit} documents, not {len(batch.documents)}",
        )
    nsh = await service.nshash()
    # Validating and adding many documents takes milliseconds: keep it off the event loop.
    return await run_in_threadpool(_add_batch, batch.documents, nsh, service.metrics)


def _add_batch(documents: list[Any], nsh: Dedup, metrics: Metrics) -> BatchResponse:
    """Validate each item on its own, add the valid ones in order, answer one entry each."""
    entries: list[BatchItemResult | BatchItemError | None] = [None] * len(documents)
    valid: list[dict[str, Any]] = []
    slots: list[int] = []
    for index, raw in enumerate(documents):
        try:
            doc = DocumentIn.model_validate(raw)
        except ValidationError as exc:
            _, code, message = classify(exc)
            entries[index] = BatchItemError(
                index=index, error=ErrorDetail(code=code, message=message)
            )
            continue
        item = {"text": doc.text, "id": doc.id, "title": doc.title}
        if isinstance(nsh, NSHash):
            item.update(doc.meta_kwargs())
        valid.append(item)
        slots.append(index)
    outcomes = nsh.add_many(valid) if valid else []
    for outcome in outcomes:
        if isinstance(outcome, StoreError):
            raise outcome
    for index, outcome in zip(slots, outcomes, strict=True):
        if isinstance(outcome, NSHashError):
            _, code, message = classify(outcome)
            entries[index] = BatchItemError(
                index=index, error=ErrorDetail(code=code, message=message)
            )
        else:
            metrics.record_add(outcome)
            entries[index] = BatchItemResult(index=index, **AddResponse.of(outcome).model_dump())
    results = [e for e in entries if e is not None]
    failed = sum(isinstance(e, BatchItemError) for e in results)
    return BatchResponse(results=results, added=len(results) - failed, failed=failed)


@api.post(
    "/query",
    response_model=QueryResponse,
    responses=error_responses(408, 413, 422, 501, 503),
    summary="Look a text up without adding it",
    openapi_extra=json_body_schema(QueryRequest),
)
async def query(request: Request, service: ServiceDep) -> Response:
    """Return the group the text would join, or `null` for a new story; writes nothing."""
    body = await json_body(request, QueryRequest)
    nsh = await service.nshash()
    if body.explain:
        if not isinstance(nsh, NSHash):  # (keyed has an explain of its own, of another shape)
            raise ApiError(501, "not_supported", "explain needs NSHASH_METHOD=nshash")
        why = await service.caller_for(body.text)(nsh.explain, body.text)
        out = QueryResponse(similar_id=why.similar_id, explanation=why.to_dict())
        return _json(out)
    similar_id = await service.caller_for(body.text)(nsh.query, body.text)
    return _json(QueryResponse(similar_id=similar_id), exclude_unset=True)


@api.get(
    "/documents/{doc_id:path}",
    response_model=DocumentResponse,
    responses=error_responses(404, 422, 503),
    summary="Get a document by id",
)
async def get_document(doc_id: str, service: ServiceDep) -> DocumentResponse:
    """Return what was answered for a document added with this `id`, with its current group.

    After a merge, `similar_id` is the canonical id of the merged group.
    """
    nsh = await service.nshash()
    record = await service.call(nsh.document, doc_id)
    if record is None:
        raise ApiError(404, "document_not_found", f"No document with id {doc_id!r}")
    return DocumentResponse.of(record)


async def _grouping(service: Service) -> NSHash:
    """Return the open NSHash, or refuse a group route when the method keeps no groups.

    Raises:
        ApiError: 501 ``not_supported`` under ``NSHASH_METHOD=keyed`` or ``simhash``.
        StoreUnavailableError: the store could not be opened yet (503).
    """
    method = service.settings.method
    nsh = None if method != "nshash" else await service.nshash()
    if not isinstance(nsh, NSHash):
        raise ApiError(
            501,
            "not_supported",
            f"The {method!r} method keeps no group listings; group routes need"
            " NSHASH_METHOD=nshash",
        )
    return nsh


@api.get(
    "/groups",
    response_model=GroupsResponse | HotGroupsResponse,
    responses=error_responses(422, 501, 503),
    summary="List the largest groups, or find the stories of a time range",
)
async def list_groups(
    service: ServiceDep,
    min_size: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_SIMILAR_ID,
            description="The smallest group size listed (default 2); with `since`, the fewest"
            " documents in the window (default 2); with a search, a site or a range, the fewest"
            " in the range (default 1).",
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(ge=1, description="How many groups at most (up to `NSHASH_MAX_GROUPS_LIMIT`)."),
    ] = 30,
    since: Annotated[
        str | None,
        Query(
            pattern=r"^[1-9][0-9]{0,5}[smhdw]?$",
            description="A window such as `24h`, `90m` or `7d` (a number of seconds, minutes,"
            " hours, days or weeks): rank the groups by their documents added (or published)"
            " in it, counted by whole hours.",
        ),
    ] = None,
    q: Annotated[
        str | None,
        Query(
            max_length=MAX_TERM_CHARS,
            description="Only stories whose headline holds this term (letters and digits"
            " count; case, width and traditional or simplified script do not; at most 200"
            " characters).",
        ),
    ] = None,
    site: Annotated[
        str | None,
        Query(max_length=253, description="Only stories carried by this site (`example.com`)."),
    ] = None,
    from_: Annotated[
        str | None,
        Query(
            alias="from",
            pattern=_MOMENT,
            description="The range's start: an ISO 8601 date or time (`2019-01-01`,"
            " `2019-01-01T08:00+08:00`); one without an offset is in `tz`. Not with `since`.",
        ),
    ] = None,
    to: Annotated[
        str | None,
        Query(
            pattern=_MOMENT,
            description="The range's end, exclusive; a bare date means the end of that day.",
        ),
    ] = None,
    tz: Annotated[
        str | None,
        Query(
            pattern=r"^[A-Za-z0-9_+\-/]{0,64}$",
            description="The time zone of `from`/`to` and of the times answered (an IANA"
            " name such as `Asia/Hong_Kong`; default `NSHASH_TIMEZONE`, else UTC).",
        ),
    ] = None,
    offset: Annotated[
        int, Query(ge=0, description="Matching stories to skip: the `next_offset` of a page.")
    ] = 0,
) -> Response:
    """Return the largest groups first, with their members' ids and titles; or, with `since`,
    a range (`from`/`to`), a search term (`q`), a `site` or an `offset`, the stories of
    that range (all time without one) ranked by their copies in it, with their copy counts,
    first and last seen, headline and sites, a page at a time (a `HotGroupsResponse` with
    `total` and `next_offset`).

    The ranking reads per-hour counts, never every document, so it stays fast on large
    stores; documents added while `NSHASH_TRACK` was off do not count. Under
    `NSHASH_METHOD=keyed` or `simhash` this answers 501 `not_supported`: those methods keep
    no groups.
    """
    most = service.settings.max_groups_limit
    if limit > most:
        raise ApiError(422, "invalid_request", f"'limit' must be at most {most}, not {limit!r}")
    nsh = await _grouping(service)
    finding = any(v is not None for v in (q, site, from_, to, tz)) or offset > 0
    least = min_size if min_size is not None else 1 if finding else 2
    if since is None and not finding:
        groups = await service.call(nsh.groups, least, limit)
        return _json(GroupsResponse(groups=[GroupResponse.of(g) for g in groups]))
    zone_name = tz or service.settings.timezone
    end = nsh.clock()
    try:
        display = zone(zone_name)
        page = await service.call(
            nsh.find,
            q,
            site=site,
            start=from_,
            end=to,
            since=since,
            tz=zone_name,
            limit=limit,
            offset=offset,
            min_count=least,
            now=end,
        )
    except ConfigError as exc:
        # What no schema can say: a range that ends before it starts, a date not in the
        # calendar, a term with no letter or digit, an unknown zone, a window and a range.
        raise ApiError(422, "invalid_query", str(exc)) from None
    span = page.range
    start_s = None if span is None else span.start
    end_s = None if span is None else int(end) if since is not None else span.end
    return _json(
        HotGroupsResponse(
            since=since,
            start=iso(start_s, display),
            end=iso(end_s, display),
            q=q,
            site=site,
            tz=zone_name or "UTC",
            total=page.total,
            offset=page.offset,
            next_offset=page.next_offset,
            groups=[HotGroupOut.of(h, display) for h in page.stories],
        )
    )


@api.get(
    "/groups/{similar_id}",
    response_model=GroupResponse,
    responses=error_responses(404, 422, 501, 503),
    summary="Get a group",
)
async def get_group(
    similar_id: Annotated[int, Path(ge=1, le=MAX_SIMILAR_ID, description="A group id."), DIGITS],
    service: ServiceDep,
) -> GroupResponse:
    """Return a group and its members.

    An id that was merged into another group answers with the group it was merged into: the
    response's `similar_id` is the canonical one. Under `NSHASH_METHOD=keyed` this answers
    501 `not_supported`: that method keeps no groups.
    """
    nsh = await _grouping(service)
    group = await service.call(nsh.group, similar_id)
    if group is None:
        raise ApiError(404, "group_not_found", f"No group with similar_id {similar_id!r}")
    return GroupResponse.of(group)


def editor(service: Service, by: str | None) -> str:
    """Who a correction is kept as made by: the name the request gives, else the API key's
    name (``NSHASH_API_KEY_NAME``), else ``api``."""
    if by:
        return by
    return service.settings.api_key_name if service.settings.api_key is not None else "api"


@api.post(
    "/corrections/detach",
    tags=["corrections"],
    response_model=CorrectionOut,
    status_code=201,
    responses=error_responses(404, 409, 422, 501, 503),
    summary="Detach a copy from its story",
)
async def detach(body: DetachRequest, service: ServiceDep) -> CorrectionOut:
    """Take a copy out of its story: it becomes a story of its own, and the store remembers
    that it is not that story (later copies like it go with it)."""
    nsh = await _grouping(service)
    done = await service.call(nsh.detach, body.id, by=editor(service, body.by))
    return CorrectionOut.of(done)


@api.post(
    "/corrections/join",
    tags=["corrections"],
    response_model=CorrectionOut,
    status_code=201,
    responses=error_responses(404, 409, 422, 501, 503),
    summary="Join two stories",
)
async def join(body: JoinRequest, service: ServiceDep) -> CorrectionOut:
    """Join two stories that are one: the smaller id survives, and the other resolves to it
    (`GET /v1/groups/{other}` answers the joined story)."""
    nsh = await _grouping(service)
    a, b = body.stories
    done = await service.call(nsh.join, a, b, by=editor(service, body.by))
    return CorrectionOut.of(done)


@api.post(
    "/corrections/{correction_id}/undo",
    tags=["corrections"],
    response_model=CorrectionOut,
    responses=error_responses(404, 409, 422, 501, 503),
    summary="Undo a correction",
)
async def undo(
    correction_id: Annotated[
        int, Path(ge=1, le=MAX_SIMILAR_ID, description="A correction id."), DIGITS
    ],
    service: ServiceDep,
    body: UndoRequest | None = None,
) -> CorrectionOut:
    """Undo a detach (the two stories are joined again) or a join (the joined story gets
    its id, members and sketch back)."""
    nsh = await _grouping(service)
    by = editor(service, body.by if body is not None else None)
    done = await service.call(nsh.undo, correction_id, by=by)
    return CorrectionOut.of(done)


@api.get(
    "/corrections",
    tags=["corrections"],
    response_model=CorrectionsResponse,
    responses=error_responses(501, 503),
    summary="List the corrections",
)
async def list_corrections(service: ServiceDep) -> CorrectionsResponse:
    """Every correction made on the store, oldest first, with who made it and when."""
    nsh = await _grouping(service)
    done = await service.call(nsh.corrections)
    return CorrectionsResponse(corrections=[CorrectionOut.of(c) for c in done])


@api.post(
    "/compare",
    response_model=CompareResponse,
    responses=error_responses(408, 413, 422, 501),
    summary="Compare two texts",
)
async def compare(body: CompareRequest, service: ServiceDep) -> CompareResponse:
    """Score two texts with the similarity measures (cosine, TF-IDF, simhash, Levenshtein...).

    Each score is in [0, 1]; `metrics` picks some (an unknown name gives 422). Needs
    `pip install 'nshash[similarity]'` (else 501). Each text is at most
    `NSHASH_MAX_COMPARE_CHARS` characters (else 413).
    """
    most = service.settings.max_compare_chars
    for name, text in (("a", body.a), ("b", body.b)):
        if len(text) > most:
            raise ApiError(
                413,
                "payload_too_large",
                f"{name!r} has {len(text)} characters; the limit is {most}",
            )
        try:
            check_text(text)
        except ConfigError as exc:
            raise ApiError(422, "invalid_argument", f"{name!r}: {exc}") from None
    try:
        similarity = importlib.import_module("nshash.toolkit.similarity")
    except ImportError as exc:
        raise ApiError(
            501,
            "not_installed",
            f"The similarity measures need: {install_hint('similarity')} ({exc})",
        ) from exc
    if body.metrics is not None:
        # Checked here, so a bad name costs no trip to a worker process.
        unknown = [m for m in body.metrics if m not in similarity.METRICS]
        if unknown:
            raise ApiError(
                422,
                "invalid_argument",
                f"Unknown metric(s) {unknown!r:.200}; choose from {', '.join(similarity.METRICS)}",
            )
    # CPU-heavy, seconds for long texts: in other processes, so this one keeps answering.
    scores = await service.run_cpu(similarity.compare, body.a, body.b, metrics=body.metrics)
    return CompareResponse(scores=scores)


@ops.get("/healthz", response_model=HealthResponse, summary="Liveness")
async def healthz() -> HealthResponse:
    """Answer 200 while the process runs; says nothing about the store."""
    return HealthResponse(status="ok")


@ops.get(
    "/readyz",
    response_model=ReadyResponse,
    responses=error_responses(503),
    summary="Readiness",
)
async def readyz(request: Request, service: ServiceDep) -> Response:
    """Answer 200 when the store answers and takes writes, 503 `store_unavailable` while it
    cannot be reached or refuses writes (a full disk, Redis out of memory).

    With `NSHASH_API_KEY` set this stays open, but only a request with the key learns the
    store URL and why it is not ready; others read just ready or not.
    """
    told = service.bearer_ok(request)
    try:
        nsh = await service.nshash()
        store = ping_target(nsh)
        await service.call(store.ping)
    except StoreError:
        if told:
            raise
        raise ApiError(503, "store_unavailable", "The store is not ready") from None
    if not told:
        return _json(ReadyResponse(status="ready"), exclude_unset=True)
    return _json(ReadyResponse(status="ready", store=store.url))


@ops.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
    summary="Prometheus metrics",
)
async def metrics(service: ServiceDep) -> Response:
    """Request counts and latencies, documents added, duplicates found, store counts."""
    text = await service.call(generate_latest, service.metrics.registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
