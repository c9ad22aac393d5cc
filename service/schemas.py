"""Request and response bodies of the HTTP API, with the examples shown in ``/docs``."""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    field_validator,
)

from nshash.inputs import MAX_DOC_ID_CHARS, MAX_TEXT_CHARS, MAX_TITLE_CHARS
from nshash.methods.nshash.core import MAX_TIME
from nshash.methods.nshash.find import MAX_SITE_CHARS, local_time
from nshash.results import AddResult, Correction, DocumentRecord, Group, HotGroup

__all__ = [
    "AddResponse",
    "BatchItemError",
    "BatchItemResult",
    "BatchRequest",
    "BatchResponse",
    "CompareRequest",
    "CompareResponse",
    "CorrectionOut",
    "CorrectionsResponse",
    "DetachRequest",
    "DocumentIn",
    "DocumentResponse",
    "ErrorDetail",
    "ErrorResponse",
    "GroupResponse",
    "GroupsResponse",
    "HealthResponse",
    "HotGroupOut",
    "HotGroupsResponse",
    "JoinRequest",
    "MemberOut",
    "QueryRequest",
    "QueryResponse",
    "ReadyResponse",
    "UndoRequest",
]

_TEXT = "央视网消息：今天的《大国工匠》，我们来看航天三江江北公司数控车工阎敏。"
_TEXT_REPOST = "【新华网】央视网消息：今天的《大国工匠》，我们来看航天三江江北公司数控车工阎敏"

#: Longest accepted document id, in characters (the library's limit).
MAX_ID_LENGTH = MAX_DOC_ID_CHARS


_SURROGATE = re.compile("[\ud800-\udfff]")


def _readable(value: str | None) -> str | None:
    """*value* with any lone surrogate replaced by U+FFFD, so it can be sent as JSON.

    The library refuses them on the way in; a store written before it did may still hold
    one, and a read must not fail on it.
    """
    if value is None or value.isascii():
        return value
    return _SURROGATE.sub("\ufffd", value)


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(examples)})


#: A time as epoch seconds (from 1970 up to the end of the year 9999).
EpochSeconds = Annotated[float, Strict(), Field(ge=0, lt=MAX_TIME)]

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: The largest story id a JSON body may name: the largest integer every JSON reader keeps
#: exactly (a double's 53 bits). Past it a client's number may be rounded (2**63 - 1 is sent
#: as 9223372036854775808.0 by many), so a bound of 2**63 - 1 would refuse ids the schema
#: admits; a store's counter never comes near it.
MAX_JSON_ID = 2**53 - 1

#: No NUL character (``nshash.inputs`` refuses it in ids and titles).
NO_NUL = "^[^\\x00]*$"

#: A site: empty (none), or holding a character besides white space (and no NUL).
SITE = "^([^\\x00]*[^\\s\\x00][^\\x00]*)?$"

DocId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=NO_NUL)]


# -- errors --------------------------------------------------------------------------------
class ErrorDetail(BaseModel):
    """What went wrong: a stable code for programs and one sentence for people."""

    model_config = _examples(
        {"code": "empty_document", "message": "The text has no letter or digit: '  ...  '"}
    )

    code: str = Field(description="A stable error code, such as `invalid_request`.")
    message: str = Field(description="What was wrong, in one sentence.")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    model_config = _examples(
        {"error": {"code": "invalid_request", "message": "'text': Field required"}}
    )

    error: ErrorDetail


# -- documents -----------------------------------------------------------------------------
class DocumentIn(BaseModel):
    """One article to add."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "text": _TEXT,
                    "id": "https://news.example.com/2024/05/03/123.html",
                    "title": "大国工匠：阎敏",
                    "url": "https://news.example.com/2024/05/03/123.html",
                },
                {"text": _TEXT_REPOST},
            ]
        },
    )

    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="The article text; it needs a letter or digit (else 422 `empty_document`).",
    )
    id: DocId | None = Field(
        default=None,
        description=(
            "Your id for the document. Sending the same id again changes nothing and returns"
            " the first answer, so retries are safe; `GET /v1/documents/{id}` finds it."
        ),
    )
    title: str | None = Field(
        default=None,
        max_length=MAX_TITLE_CHARS,
        pattern=NO_NUL,
        description="Shown with the id in group listings (no NUL characters).",
    )
    url: str | None = Field(
        default=None,
        max_length=MAX_TITLE_CHARS,
        pattern=NO_NUL,
        description="Where the article was found; kept with the `id` (unless `NSHASH_TRACK` is"
        " off) and shown on the hot-stories page.",
    )
    site: str | None = Field(
        default=None,
        max_length=MAX_SITE_CHARS,
        pattern=SITE,
        description="The site that carried it (a host name; empty: none); by default the host"
        " of `url`.",
    )
    published_at: datetime | EpochSeconds | None = Field(
        default=None,
        description="When it was published: an RFC 3339 date-time (a time without an offset"
        " is UTC; times before 1970 count as 1970-01-01) or epoch seconds; by default the time"
        " it is added. It decides which hour the document counts in for"
        " `GET /v1/groups?since=`.",
    )

    @field_validator("published_at", mode="before")
    @classmethod
    def _date_time_text(cls, value: Any) -> Any:
        if isinstance(value, str) and not _DATE_TIME.match(value):
            raise ValueError("published_at is an RFC 3339 date-time such as 2024-05-03T12:30:00Z")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not 0 <= value < MAX_TIME:
                raise ValueError(f"published_at in epoch seconds is in [0, {MAX_TIME})")
            return float(value)
        return value

    @field_validator("published_at")
    @classmethod
    def _not_before_1970(cls, value: Any) -> Any:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            if value < _EPOCH:
                return _EPOCH
        return value

    def meta_kwargs(self) -> dict[str, Any]:
        """The activity arguments of ``NSHash.add`` that were given (none for a plain add)."""
        given = {"url": self.url, "site": self.site, "published_at": self.published_at}
        return {k: v for k, v in given.items() if v is not None}


class AddResponse(BaseModel):
    """The group a document joined."""

    model_config = _examples(
        {"similar_id": 42, "duplicate": True, "merged_from": [], "id": "a1", "replayed": False},
        {"similar_id": 7, "duplicate": True, "merged_from": [9, 12], "id": None, "replayed": False},
    )

    similar_id: int = Field(description="The group id; reposts of one story share it.", ge=1)
    duplicate: bool = Field(
        description="True when an earlier document of the same story was already there."
    )
    merged_from: list[int] = Field(
        description="Group ids this document merged into `similar_id`; they resolve to it now."
    )
    id: str | None = Field(default=None, description="The document id sent, if any.")
    replayed: bool = Field(
        default=False,
        description="True when the id had been added before: this is the stored answer and"
        " nothing changed.",
    )

    @classmethod
    def of(cls, result: AddResult) -> AddResponse:
        """Build the response from the library's answer."""
        return cls(
            similar_id=result.similar_id,
            duplicate=result.duplicate,
            merged_from=list(result.merged_from),
            id=result.doc_id,
            replayed=result.replayed,
        )


#: The batch request's items are validated one by one (see the batch route), so the
#: envelope takes any JSON value per item; the schema still shows them as DocumentIn.
_BatchItems = Annotated[
    list[Any],
    WithJsonSchema(
        {
            "type": "array",
            "items": {
                "anyOf": [
                    {"$ref": "#/components/schemas/DocumentIn"},
                    {
                        "description": "Any other value is refused alone: its entry in"
                        " `results` is an error, and the other documents still go in."
                    },
                ]
            },
            "description": "The documents (each a `DocumentIn`), at most `NSHASH_MAX_BATCH`"
            " (default 1000).",
        }
    ),
]


class BatchRequest(BaseModel):
    """Several articles to add in one request, in order."""

    model_config = _examples(
        {
            "documents": [
                {"text": _TEXT, "id": "a1", "title": "大国工匠：阎敏"},
                {"text": _TEXT_REPOST, "id": "a2"},
                {"text": "  ...  ", "id": "a3"},
            ]
        }
    )

    documents: _BatchItems


class BatchItemResult(AddResponse):
    """The answer for one document of a batch."""

    model_config = _examples(
        {
            "index": 0,
            "similar_id": 42,
            "duplicate": False,
            "merged_from": [],
            "id": "a1",
            "replayed": False,
        }
    )

    index: int = Field(description="The item's position in `documents`.", ge=0)


class BatchItemError(BaseModel):
    """The error for one invalid document of a batch; the other documents still went in."""

    model_config = _examples(
        {
            "index": 2,
            "error": {
                "code": "empty_document",
                "message": "The text has no letter or digit: '  ...  '",
            },
        }
    )

    index: int = Field(description="The item's position in `documents`.", ge=0)
    error: ErrorDetail


class BatchResponse(BaseModel):
    """One entry per document, in the order sent: an answer or an error."""

    model_config = _examples(
        {
            "results": [
                {
                    "index": 0,
                    "similar_id": 42,
                    "duplicate": False,
                    "merged_from": [],
                    "id": "a1",
                    "replayed": False,
                },
                {
                    "index": 1,
                    "similar_id": 42,
                    "duplicate": True,
                    "merged_from": [],
                    "id": "a2",
                    "replayed": False,
                },
                {
                    "index": 2,
                    "error": {
                        "code": "empty_document",
                        "message": "The text has no letter or digit: '  ...  '",
                    },
                },
            ],
            "added": 2,
            "failed": 1,
        }
    )

    results: list[BatchItemResult | BatchItemError]
    added: int = Field(description="How many documents got an answer.", ge=0)
    failed: int = Field(description="How many documents got an error.", ge=0)


class DocumentResponse(BaseModel):
    """What the store remembers about a document added with an id."""

    model_config = _examples(
        {
            "id": "a1",
            "similar_id": 42,
            "duplicate": False,
            "merged_from": [],
            "title": "大国工匠：阎敏",
            "fingerprints": ["9ae16a3b2f90404f", "0c6e8f1d2a3b4c5d"],
        }
    )

    id: str = Field(description="The document id.")
    similar_id: int = Field(description="Its group's current (canonical) id.", ge=1)
    duplicate: bool = Field(description="Whether it joined an existing group when added.")
    merged_from: list[int] = Field(description="Group ids it merged when added.")
    title: str | None = Field(default=None, description="The title sent with it.")
    fingerprints: list[str] = Field(
        description="Its anchor fingerprints, as 16 hex digits (64-bit unsigned)."
    )
    score: float | None = Field(
        default=None, description="The score it had when placed (see the group's members)."
    )
    verdict: str | None = Field(
        default=None, description="How it was placed (see the group's members)."
    )

    @classmethod
    def of(cls, record: DocumentRecord) -> DocumentResponse:
        """Build the response from the store's record."""
        return cls(
            id=record.doc_id,
            similar_id=record.similar_id,
            duplicate=record.duplicate,
            merged_from=list(record.merged_from),
            title=_readable(record.title),
            fingerprints=[f"{fp:016x}" for fp in record.fingerprints],
            score=record.score,
            verdict=record.verdict,
        )


# -- query ---------------------------------------------------------------------------------
class QueryRequest(BaseModel):
    """A text to look up without adding it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"text": _TEXT}]})

    text: str = Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="The article text; it needs a letter or digit (else 422 `empty_document`).",
    )
    explain: bool = Field(
        default=False,
        strict=True,
        description="Also say why: the anchors, boilerplate and candidates.",
    )


_CANDIDATE = {
    "similar_id": 42,
    "anchors": ["21d29d1315c26835", "4170ee074865873d"],
    "shared": 31,
    "document_values": 40,
    "group_values": 57,
    "score": 0.775,
    "verdict": "joined",
    "frame": 0,
}


class CandidateOut(BaseModel):
    """A group one of the text's anchors hit, and how the boilerplate guard judged it."""

    model_config = _examples(_CANDIDATE)

    similar_id: int = Field(description="The group's canonical id.")
    anchors: list[str] = Field(description="The text's anchors that hit it (16 hex digits).")
    shared: int = Field(description="Sketch values the text and the group share.")
    document_values: int = Field(description="The text's sketch values compared.")
    group_values: int = Field(description="The group's sketch values compared.")
    score: float = Field(description="shared / the smaller of the two (0 under min_overlap).")
    verdict: str = Field(description="joined, merged, not best or refused.")
    frame: int = Field(
        default=0,
        description="Shared values set aside as the page's frame (a site's header and footer"
        " around other text, or a shared end after an unshared page), left out of the counts.",
    )


class ExplanationOut(BaseModel):
    """Why a text gets its answer."""

    model_config = _examples(
        {
            "similar_id": 42,
            "reason": "matched",
            "theta": 0.5,
            "anchors": ["21d29d1315c26835", "4170ee074865873d", "f457fb7c6a1b36e0"],
            "boilerplate": ["c2d8474cb7715616"],
            "candidates": [_CANDIDATE],
        }
    )

    similar_id: int | None = Field(description="The answer: a group id, or null.")
    reason: str = Field(description="exact, matched, new (every candidate refused) or nothing.")
    theta: float = Field(description="The score a candidate must reach.")
    anchors: list[str] = Field(description="The anchors looked up (16 hex digits).")
    boilerplate: list[str] = Field(description="Anchor candidates set aside as boilerplate.")
    candidates: list[CandidateOut] = Field(description="Every group an anchor hit, best first.")


class QueryResponse(BaseModel):
    """The group the text would join, or null if it would start a new one."""

    model_config = _examples({"similar_id": 42}, {"similar_id": None})

    similar_id: int | None = Field(description="The group id, or null for a new story.")
    explanation: ExplanationOut | None = Field(
        default=None, description="Only with explain: why (see ExplanationOut)."
    )


# -- groups --------------------------------------------------------------------------------
class MemberOut(BaseModel):
    """A document of a group that was added with an id."""

    model_config = _examples(
        {"id": "a1", "title": "大国工匠：阎敏", "score": 0.82, "verdict": "joined"}
    )

    id: str = Field(description="The document id.")
    title: str | None = Field(default=None, description="Its title, if one was sent.")
    score: float | None = Field(
        default=None,
        description="The guard's score it had against the story when it was placed (1 for"
        " an identical text; for a new story the best refused score); null in a record"
        " written before evidence was kept.",
    )
    verdict: str | None = Field(
        default=None,
        description="How it was placed: new story, refused, identical, joined, merged or"
        " moved (an editor's correction); null where score is.",
    )


class GroupResponse(BaseModel):
    """A group of near-duplicate documents: one story and its reposts."""

    model_config = _examples(
        {
            "similar_id": 42,
            "size": 3,
            "members": [{"id": "a1", "title": "大国工匠：阎敏"}, {"id": "a2", "title": None}],
        }
    )

    similar_id: int = Field(description="The group's canonical id.", ge=1)
    size: int = Field(description="Documents in the group, with or without an id.", ge=0)
    members: list[MemberOut] = Field(
        description="The documents added with an id, in arrival order."
    )

    @classmethod
    def of(cls, group: Group) -> GroupResponse:
        """Build the response from the library's group."""
        return cls(
            similar_id=group.similar_id,
            size=group.size,
            members=[
                MemberOut(
                    id=_readable(m.doc_id) or "",
                    title=_readable(m.title),
                    score=m.score,
                    verdict=m.verdict,
                )
                for m in group.members
            ],
        )


class GroupsResponse(BaseModel):
    """The largest groups first: the hot stories."""

    model_config = _examples(
        {
            "groups": [
                {"similar_id": 42, "size": 3, "members": [{"id": "a1", "title": None}]},
                {"similar_id": 7, "size": 2, "members": []},
            ]
        }
    )

    groups: list[GroupResponse]


def iso(seconds: int | None, tz: tzinfo = timezone.utc) -> str | None:
    """Epoch seconds as an ISO 8601 time: in UTC ``2024-05-03T12:30:00Z``, elsewhere with
    the zone's offset (``2024-05-03T20:30:00+08:00``)."""
    if seconds is None:
        return None
    moment = local_time(seconds, tz)
    if moment.tzinfo is timezone.utc:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.isoformat()


class HotGroupOut(BaseModel):
    """A story ranked by its copies in the window."""

    model_config = _examples(
        {
            "similar_id": 42,
            "recent": 12,
            "size": 15,
            "first_seen": "2024-05-02T09:00:00Z",
            "last_seen": "2024-05-03T11:58:00Z",
            "title": "大国工匠：阎敏",
            "sites": ["news.example.com", "portal.example.net"],
        }
    )

    similar_id: int = Field(description="The group's canonical id.", ge=1)
    recent: int = Field(description="Its documents added in the window.", ge=0)
    size: int = Field(description="All its documents.", ge=0)
    first_seen: str | None = Field(
        description="Its first document's time (UTC, or with the offset of `tz`)."
    )
    last_seen: str | None = Field(description="Its latest document's time.")
    title: str | None = Field(description="The first title among its members.")
    sites: list[str] = Field(description="The distinct sites of its members, first seen first.")

    @classmethod
    def of(cls, hot: HotGroup, tz: tzinfo = timezone.utc) -> HotGroupOut:
        """Build the response from the library's hot group, times shown in *tz*."""
        return cls(
            similar_id=hot.similar_id,
            recent=hot.recent,
            size=hot.size,
            first_seen=iso(hot.first_seen, tz),
            last_seen=iso(hot.last_seen, tz),
            title=_readable(hot.title),
            sites=[_readable(s) or "" for s in hot.sites],
        )


class HotGroupsResponse(BaseModel):
    """The stories with the most copies in a time window or range, most first; a page of
    them when searched or filtered (``total``, ``offset``, ``next_offset``)."""

    model_config = _examples(
        {
            "since": "24h",
            "start": "2024-05-02T12:00:00Z",
            "end": "2024-05-03T12:30:00Z",
            "groups": [HotGroupOut.model_config["json_schema_extra"]["examples"][0]],  # type: ignore[index]
        }
    )

    since: str | None = Field(description="The window asked for (None with a range).")
    start: str | None = Field(
        description="The range's start, widened to a whole hour (None: all time)."
    )
    end: str | None = Field(
        description="The range's end: now for a window, else the hour after `to`."
    )
    q: str | None = Field(default=None, description="The search term asked for.")
    site: str | None = Field(default=None, description="The site asked for.")
    tz: str = Field(default="UTC", description="The time zone the times are shown in.")
    total: int | None = Field(
        default=None, description="How many stories match in all (None: not counted).", ge=0
    )
    offset: int = Field(default=0, description="Stories before this page.", ge=0)
    next_offset: int | None = Field(
        default=None, description="The `offset` of the next page (None after the last)."
    )
    groups: list[HotGroupOut]


# -- compare -------------------------------------------------------------------------------
class CompareRequest(BaseModel):
    """Two texts to compare with the similarity measures."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"a": _TEXT, "b": _TEXT_REPOST, "metrics": ["cosine", "levenshtein"]},
                {"a": "The quick brown fox.", "b": "The quick brown dog."},
            ]
        },
    )

    a: str = Field(description="The first text.")
    b: str = Field(description="The second text.")
    metrics: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Which measures to compute (see `nshash.toolkit.similarity.METRICS`); all by"
        " default.",
    )


class CompareResponse(BaseModel):
    """Each requested measure, mapped to a similarity in [0, 1]."""

    model_config = _examples({"scores": {"cosine": 0.93, "levenshtein": 0.88}})

    scores: dict[str, float] = Field(description="Measure name -> similarity in [0, 1].")


# -- health --------------------------------------------------------------------------------
class HealthResponse(BaseModel):
    """The process is up."""

    model_config = _examples({"status": "ok"})

    status: Literal["ok"]


class ReadyResponse(BaseModel):
    """The process is up and its store answers."""

    model_config = _examples({"status": "ready", "store": "redis://:***@cache:6379/0"})

    status: Literal["ready"]
    store: str | None = Field(
        default=None,
        description="The store URL, with any password masked; left out when an API key is"
        " set and the request does not carry it.",
    )


#: Who made a correction: a short name (an editor, a desk).
_BY = Field(
    default=None,
    min_length=1,
    max_length=100,
    description="Who makes the correction (kept with it); by default the API key's name"
    " (`NSHASH_API_KEY_NAME`), or `api` when no key is set.",
)


class DetachRequest(BaseModel):
    """A copy to take out of its story."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"id": "a2", "by": "night desk"}]}
    )

    id: DocId = Field(description="The copy, by the id it was added with.")
    by: str | None = _BY


def _json_int(value: object) -> object:
    """A story id as JSON gives it: a number (``true`` or ``"2"`` would name a story the
    client did not mean; ``2.0`` is the integer 2, as JSON Schema reads it)."""
    if isinstance(value, bool | str):
        raise ValueError("a story id is a JSON integer, not a boolean or a string")
    return value


class JoinRequest(BaseModel):
    """Two stories that are one."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"stories": [42, 57], "by": "ed"}]}
    )

    stories: list[Annotated[int, Field(ge=1, le=MAX_JSON_ID), BeforeValidator(_json_int)]] = Field(
        min_length=2, max_length=2, description="The two story ids (the smaller one survives)."
    )
    by: str | None = _BY


class UndoRequest(BaseModel):
    """Who undoes a correction (the body may be left out)."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"by": "night desk"}]}
    )

    by: str | None = _BY


class CorrectionOut(BaseModel):
    """An editor's correction of a grouping."""

    model_config = _examples(
        {
            "id": 1,
            "kind": "detach",
            "at": "2024-05-03T12:30:00Z",
            "by": "night desk",
            "doc_id": "a2",
            "source": 42,
            "target": 58,
            "undone_at": None,
            "undone_by": None,
        }
    )

    id: int = Field(description="Its number (1, 2, ... in the order made).", ge=1)
    kind: Literal["detach", "join"] = Field(
        description="`detach`: a copy taken out of its story into a story of its own;"
        " `join`: two stories made one."
    )
    at: str = Field(description="When it was made (ISO 8601).")
    by: str = Field(description="Who made it.")
    doc_id: str | None = Field(default=None, description="The copy detached (a detach only).")
    source: int = Field(
        description="A detach: the story the copy left; a join: the story joined into the other."
    )
    target: int = Field(description="A detach: the copy's new story; a join: the story kept.")
    undone_at: str | None = Field(default=None, description="When it was undone, if it was.")
    undone_by: str | None = Field(default=None, description="Who undid it.")

    @classmethod
    def of(cls, c: Correction) -> CorrectionOut:
        """Build the response from the library's correction."""
        return cls(
            id=c.id,
            kind=c.kind,  # type: ignore[arg-type]
            at=iso(c.at) or "",
            by=_readable(c.by) or "",
            doc_id=_readable(c.doc_id),
            source=c.source,
            target=c.target,
            undone_at=iso(c.undone_at),
            undone_by=_readable(c.undone_by),
        )


class CorrectionsResponse(BaseModel):
    """Every correction, oldest first."""

    model_config = _examples(
        {
            "corrections": [
                {
                    "id": 1,
                    "kind": "join",
                    "at": "2024-05-03T12:30:00Z",
                    "by": "night desk",
                    "doc_id": None,
                    "source": 57,
                    "target": 42,
                    "undone_at": None,
                    "undone_by": None,
                }
            ]
        }
    )

    corrections: list[CorrectionOut]
