"""The routes: the ``/v1`` API (:data:`api`) and the operational endpoints (:data:`ops`).

Handlers are plain ``def`` functions: the library's calls block (a disk journal, a Redis
round trip), so FastAPI runs them in its thread pool and the event loop stays free.
"""

from __future__ import annotations

import importlib
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from nshash import NSHashError, StoreError

from .deps import MetricsDep, NSHashDep, SettingsDep
from .errors import ApiError, classify
from .schemas import (
    AddResponse,
    BatchItemError,
    BatchItemResult,
    BatchRequest,
    BatchResponse,
    CompareRequest,
    CompareResponse,
    DocumentIn,
    DocumentResponse,
    ErrorDetail,
    ErrorResponse,
    GroupResponse,
    GroupsResponse,
    HealthResponse,
    QueryRequest,
    QueryResponse,
    ReadyResponse,
)

__all__ = ["api", "error_responses", "ops"]

_DESCRIPTIONS = {
    401: "The API key is missing or wrong (only when `NSHASH_API_KEY` is set).",
    404: "Not found.",
    413: "The body is over `NSHASH_MAX_BODY_BYTES`, or the batch over `NSHASH_MAX_BATCH`.",
    422: "The body is not valid JSON, a field is missing or has the wrong type, or the text"
    " has no letter or digit.",
    501: "An optional part is not installed.",
    503: "The store cannot be reached.",
}

#: The largest similar_id accepted in a path: ids are 64-bit signed integers in every store.
MAX_SIMILAR_ID = 2**63 - 1


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Document *statuses* as answered with :class:`ErrorResponse` in the OpenAPI schema."""
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS[s]} for s in statuses}


api = APIRouter(tags=["documents"])
ops = APIRouter(tags=["operations"])


@api.post(
    "/documents",
    response_model=AddResponse,
    responses=error_responses(413, 422, 503),
    summary="Add a document",
)
def add_document(doc: DocumentIn, nsh: NSHashDep, metrics: MetricsDep) -> AddResponse:
    """Add one article and return its group.

    Reposts of one story get the same `similar_id`. With an `id` seen before, the answer is
    the first one (`replayed: true`) and nothing changes, so a crawler may retry freely.
    The `url` is accepted but not stored.
    """
    result = nsh.add(doc.text, doc.id, title=doc.title)
    metrics.record_add(result)
    return AddResponse.of(result)


@api.post(
    "/documents/batch",
    response_model=BatchResponse,
    responses=error_responses(413, 422, 503),
    summary="Add several documents",
)
def add_batch(
    batch: BatchRequest, nsh: NSHashDep, settings: SettingsDep, metrics: MetricsDep
) -> BatchResponse:
    """Add documents in order and return one entry per document, in the same order.

    Each item is checked on its own: an invalid one (empty text, a wrong type, no `text`)
    gets an error entry at its index and the others still go in. A batch larger than
    `NSHASH_MAX_BATCH` (default 1000) is refused whole with 413 `batch_too_large`. If the
    store fails, the whole request answers 503; documents sent with an `id` can be resent
    safely, since a known id returns its first answer.
    """
    if len(batch.documents) > settings.max_batch:
        raise ApiError(
            413,
            "batch_too_large",
            f"A batch holds at most {settings.max_batch} documents, not {len(batch.documents)}",
        )
    entries: list[BatchItemResult | BatchItemError | None] = [None] * len(batch.documents)
    valid: list[dict[str, Any]] = []
    slots: list[int] = []
    for index, raw in enumerate(batch.documents):
        try:
            doc = DocumentIn.model_validate(raw)
        except ValidationError as exc:
            _, code, message = classify(exc)
            entries[index] = BatchItemError(
                index=index, error=ErrorDetail(code=code, message=message)
            )
            continue
        valid.append({"text": doc.text, "id": doc.id, "title": doc.title})
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
    responses=error_responses(413, 422, 503),
    summary="Look a text up without adding it",
)
def query(body: QueryRequest, nsh: NSHashDep) -> QueryResponse:
    """Return the group the text would join, or `null` for a new story; writes nothing."""
    return QueryResponse(similar_id=nsh.query(body.text))


@api.get(
    "/documents/{doc_id:path}",
    response_model=DocumentResponse,
    responses=error_responses(404, 422, 503),
    summary="Get a document by id",
)
def get_document(doc_id: str, nsh: NSHashDep) -> DocumentResponse:
    """Return what was answered for a document added with this `id`, with its current group.

    After a merge, `similar_id` is the canonical id of the merged group.
    """
    record = nsh.document(doc_id)
    if record is None:
        raise ApiError(404, "document_not_found", f"No document with id {doc_id!r}")
    return DocumentResponse.of(record)


@api.get(
    "/groups",
    response_model=GroupsResponse,
    responses=error_responses(422, 503),
    summary="List the largest groups",
)
def list_groups(
    nsh: NSHashDep,
    settings: SettingsDep,
    min_size: Annotated[int, Query(ge=1, description="The smallest group size listed.")] = 2,
    limit: Annotated[
        int,
        Query(ge=1, description="How many groups at most (up to `NSHASH_MAX_GROUPS_LIMIT`)."),
    ] = 30,
) -> GroupsResponse:
    """Return the largest groups first (the hot stories), with their members' ids and titles."""
    if limit > settings.max_groups_limit:
        raise ApiError(
            422,
            "invalid_request",
            f"'limit' must be at most {settings.max_groups_limit}, not {limit!r}",
        )
    return GroupsResponse(groups=[GroupResponse.of(g) for g in nsh.groups(min_size, limit)])


@api.get(
    "/groups/{similar_id}",
    response_model=GroupResponse,
    responses=error_responses(404, 422, 503),
    summary="Get a group",
)
def get_group(
    similar_id: Annotated[int, Path(ge=1, le=MAX_SIMILAR_ID, description="A group id.")],
    nsh: NSHashDep,
) -> GroupResponse:
    """Return a group and its members.

    An id that was merged into another group answers with the group it was merged into: the
    response's `similar_id` is the canonical one.
    """
    group = nsh.group(similar_id)
    if group is None:
        raise ApiError(404, "group_not_found", f"No group with similar_id {similar_id!r}")
    return GroupResponse.of(group)


@api.post(
    "/compare",
    response_model=CompareResponse,
    responses=error_responses(413, 422, 501),
    summary="Compare two texts",
)
def compare(body: CompareRequest, settings: SettingsDep) -> CompareResponse:
    """Score two texts with the similarity measures (cosine, TF-IDF, simhash, Levenshtein...).

    Each score is in [0, 1]; `metrics` picks some (an unknown name gives 422). Needs
    `pip install 'nshash[similarity]'` (else 501). Each text is at most
    `NSHASH_MAX_COMPARE_CHARS` characters (else 413).
    """
    for name, text in (("a", body.a), ("b", body.b)):
        if len(text) > settings.max_compare_chars:
            raise ApiError(
                413,
                "payload_too_large",
                f"{name!r} has {len(text)} characters; the limit is {settings.max_compare_chars}",
            )
    try:
        similarity = importlib.import_module("nshash.similarity")
    except ImportError as exc:
        raise ApiError(
            501,
            "not_installed",
            f"The similarity measures need: pip install 'nshash[similarity]' ({exc})",
        ) from exc
    scores = similarity.compare(body.a, body.b, metrics=body.metrics)
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
def readyz(nsh: NSHashDep) -> ReadyResponse:
    """Answer 200 when the store answers, 503 `store_unavailable` while it cannot be reached."""
    nsh.store.ping()
    return ReadyResponse(status="ready", store=nsh.store.url)


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
def metrics(metrics: MetricsDep) -> Response:
    """Request counts and latencies, documents added, duplicates found, store counts."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
