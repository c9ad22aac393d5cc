"""A client of the nshash HTTP service: :class:`Client` (sync) and :class:`AsyncClient`.

Both speak the ``/v1`` API of the service (``nshash serve``) and answer with the library's own
types (:class:`~nshash.AddResult`, :class:`~nshash.Group`, :class:`~nshash.DocumentRecord`),
so code written against :class:`~nshash.NSHash` reads the same against a shared service. Needs
``pip install 'nshash[client]'`` (httpx).

**Retries.** A request that fails on the way (connection refused or reset, a timeout, a lost
response) or that the service answers with 502, 503 or 504 is sent again, up to ``retries``
more times, after an exponential, jittered pause. That is safe only where a resend changes
nothing: reads (``query``, ``document``, ``groups``, ``hot``) always; an add only when the document
has an id, since the service answers a known id with its first answer and stores nothing new.
An add without an id is resent only when the first attempt certainly never reached the
service (the connection could not be made). Give ids and every failure is retried.

Errors, all under :class:`~nshash.NSHashError`::

    NSHashError
    ├── EmptyDocumentError         the service refused a text with no letter or digit
    ├── ServiceError               any other error answer: its status, code and message
    └── StoreError
        └── StoreUnavailableError  unreachable, or 502/503/504, after the last retry

Example:
    >>> from nshash.client import Client
    >>> with Client("http://127.0.0.1:8000") as client:  # doctest: +SKIP
    ...     client.add("The river flooded the lower town...", doc_id="a1").similar_id
    1
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

from .errors import install_hint

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the extra is installed under test
    raise ImportError(
        f"nshash.client needs httpx, which cannot be imported ({exc}): {install_hint('client')}"
    ) from exc

from .errors import (
    ConfigError,
    CorrectionError,
    EmptyDocumentError,
    NSHashError,
    StoreUnavailableError,
)
from .inputs import check_doc_id, check_documents, check_text, check_title, either_id
from .methods.nshash.core import Document
from .methods.nshash.find import MAX_TIME, StoryPage, TimeRange
from .results import HOUR, AddResult, Correction, DocumentRecord, Group, HotGroup, Member
from .stores.url import mask_url

__all__ = ["AsyncClient", "Client", "ServiceError"]

#: Statuses that mean "try again later": the service (or a proxy before it) could not reach
#: its store or is restarting.
RETRY_STATUSES = frozenset({502, 503, 504})

#: Documents per ``POST /v1/documents/batch`` request (the service's default limit is 1000).
DEFAULT_BATCH_SIZE = 500


class ServiceError(NSHashError):
    """The service answered with an error (other than an empty document or an outage).

    Attributes:
        status: the HTTP status.
        code: the service's stable error code (``invalid_request``, ``unauthorized``, ...).
        message: the service's one-sentence message.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"The nshash service answered {status} {code}: {message}")
        #: The HTTP status.
        self.status = status
        #: The stable error code.
        self.code = code
        #: The message, for people.
        self.message = message


@dataclass(frozen=True, slots=True)
class _Call:
    """One API request: what to send, whether a resend is harmless, and what 404 means."""

    method: str
    path: str
    body: Any = None
    params: dict[str, Any] | None = None
    #: A resend changes nothing (a read, or an add with an id).
    safe: bool = True
    #: A 404 with one of these codes answers None instead of raising.
    missing: tuple[str, ...] = ()
    #: A correction: its refusals raise :class:`~nshash.CorrectionError`, as the library's.
    corrects: bool = False


_T = TypeVar("_T")


def _read(parse: Callable[[Any], _T], data: Any) -> _T:
    """*parse* of a 2xx answer: one the service never sends (another JSON API at that URL,
    a proxy's page) is a :class:`ServiceError`, not a KeyError from deep inside."""
    try:
        return parse(data)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError) as exc:
        raise ServiceError(
            200, "invalid_response", f"the answer is not one nshash sends ({exc!r:.120})"
        ) from None


def _similar_id(data: Any) -> int | None:
    """The ``similar_id`` of a query's answer (null: a new story)."""
    value = data["similar_id"]
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"similar_id {value!r}")
    return value


def _ready(data: Any) -> None:
    """Check that ``/readyz`` answered as nshash does (another service would answer too)."""
    if data.get("status") != "ready":
        raise ValueError(f"not nshash's readiness answer: {data!r:.80}")


def _positive_id(value: object, name: str) -> int:
    """A story or correction id the client sends: a positive int (1.5 or True would name
    another one)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**63:
        raise ConfigError(f"{name} must be a positive integer, not {value!r:.80}")
    return value


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"A service URL is http://host:port or https://..., not {url!r}")
    return url.rstrip("/")


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "nshash-client"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _quote_id(doc_id: str) -> str:
    # A "/" or a dot segment in an id must not change the path httpx sends.
    return quote(doc_id, safe="").replace(".", "%2E")


def _document_body(doc: Document) -> dict[str, Any]:
    """A document's JSON body, its fields checked as the library checks them (a lone
    surrogate cannot even be sent); fields the service does not know are sent for it to say so.

    Raises:
        ConfigError: the document, or a field of it, is refused (see :mod:`nshash.inputs`).
    """
    if isinstance(doc, str):
        return {"text": check_text(doc)}
    if not isinstance(doc, dict):
        raise ConfigError(f"A document is a str or a dict, not {type(doc).__name__}")
    body = {k: v for k, v in doc.items() if v is not None}
    body["text"] = check_text(body.get("text"))
    if "id" in body:
        body["id"] = check_doc_id(body["id"])
    for name in ("title", "url", "site"):
        if name in body:
            body[name] = check_title(body[name], name)
    if "published_at" in body:
        body["published_at"] = _moment(body["published_at"])
    return body


#: What a document may carry besides its text, as the service names it (``id`` for doc_id).
_DOC_FIELDS = ("id", "title", "url", "site", "published_at")


def _moment(value: float | datetime | None) -> Any:
    """A ``published_at`` as the service reads it: epoch seconds, or an RFC 3339 time (a
    naive datetime is UTC, as :meth:`nshash.NSHash.add` takes it).

    Raises:
        ConfigError: neither a finite number nor a datetime.
    """
    if value is None:
        return value
    if not isinstance(value, datetime):
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
        ):
            raise ConfigError(f"published_at is epoch seconds or a datetime, not {value!r:.80}")
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _add_call(text: str, doc_id: str | None, **fields: Any) -> _Call:
    fields["id"] = doc_id
    body: dict[str, Any] = {"text": text}
    body.update((k, fields[k]) for k in _DOC_FIELDS if fields.get(k) is not None)
    return _Call("POST", "/v1/documents", _document_body(body), safe=doc_id is not None)


def _epoch(value: str | None) -> int | None:
    """An RFC 3339 UTC time of the service as epoch seconds."""
    if value is None:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())


def _bound(value: str | float | datetime | None) -> Any:
    """A ``from``/``to`` as the service reads it: an ISO 8601 text as given, epoch seconds
    or a datetime as an RFC 3339 time (a naive datetime is left naive: read in ``tz``)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, timezone.utc).isoformat()
    return value


def _story_page(data: dict[str, Any]) -> StoryPage:
    start, end = _epoch(data.get("start")), _epoch(data.get("end"))
    if start is None:
        span = None
    elif end is None:
        span = TimeRange(start // HOUR, MAX_TIME // HOUR - 1, open_end=True)
    else:
        span = TimeRange(start // HOUR, (end - 1) // HOUR)
    stories = tuple(_hot_group(g) for g in data["groups"])
    total = data.get("total")
    counted = len(stories) if total is None else int(total)
    return StoryPage(stories, counted, int(data.get("offset") or 0), span)


def _hot_group(data: dict[str, Any]) -> HotGroup:
    return HotGroup(
        similar_id=int(data["similar_id"]),
        recent=int(data["recent"]),
        size=int(data["size"]),
        first_seen=_epoch(data.get("first_seen")),
        last_seen=_epoch(data.get("last_seen")),
        title=data.get("title"),
        sites=tuple(data.get("sites") or ()),
    )


def _batch_calls(
    documents: Iterable[Document], size: int
) -> tuple[list[_Call], list[NSHashError | None]]:
    """The batch requests of *documents*, and for each document the error that kept it from
    being sent (None for those sent, in order)."""
    bodies: list[dict[str, Any]] = []
    refused: list[NSHashError | None] = []
    for doc in check_documents(documents):
        try:
            bodies.append(_document_body(doc))
            refused.append(None)
        except ConfigError as exc:
            refused.append(exc)
    calls = []
    for start in range(0, len(bodies), size):
        chunk = bodies[start : start + size]
        safe = all(isinstance(b.get("id"), str) and b["id"] for b in chunk)
        calls.append(_Call("POST", "/v1/documents/batch", {"documents": chunk}, safe=safe))
    return calls, refused


def _in_place(
    refused: list[NSHashError | None], sent: list[AddResult | NSHashError]
) -> list[AddResult | NSHashError]:
    """The answers of a batch in the documents' order: each refused one's error in its place,
    the service's answers to the others between them."""
    answers = iter(sent)
    return [error if error is not None else next(answers) for error in refused]


def _add_result(data: dict[str, Any]) -> AddResult:
    return AddResult(
        similar_id=int(data["similar_id"]),
        duplicate=bool(data["duplicate"]),
        merged_from=tuple(int(i) for i in data.get("merged_from", ())),
        fingerprints=(),  # the service does not send them; GET /v1/documents/{id} does
        doc_id=data.get("id"),
        replayed=bool(data.get("replayed", False)),
    )


def _item_error(status: int, error: dict[str, Any]) -> NSHashError:
    code = str(error.get("code", "unknown"))
    message = str(error.get("message", ""))
    if code == "empty_document":
        return EmptyDocumentError(message)
    return ServiceError(status, code, message)


#: The service's error codes a correction answers, raised as the library raises them.
_CORRECTION_CODES = (
    "correction_refused",
    "correction_not_found",
    "document_not_found",
    "group_not_found",
)


def _correction(data: dict[str, Any]) -> Correction:
    return Correction(
        id=int(data["id"]),
        kind=data["kind"],
        at=_epoch(data["at"]) or 0,
        by=data["by"],
        source=int(data["source"]),
        target=int(data["target"]),
        doc_id=data.get("doc_id"),
        undone_at=_epoch(data.get("undone_at")),
        undone_by=data.get("undone_by"),
    )


def _batch_results(data: dict[str, Any]) -> list[AddResult | NSHashError]:
    out: list[AddResult | NSHashError] = []
    for entry in data["results"]:
        if "error" in entry:
            out.append(_item_error(422, entry["error"]))
        else:
            out.append(_add_result(entry))
    return out


def _group(data: dict[str, Any]) -> Group:
    members = tuple(
        Member(m["id"], m.get("title"), _score(m.get("score")), m.get("verdict"))
        for m in data.get("members", ())
    )
    return Group(int(data["similar_id"]), int(data["size"]), members)


def _groups(data: dict[str, Any]) -> list[Group]:
    """The groups of a listing's answer."""
    return [_group(g) for g in data["groups"]]


def _hot_groups(data: dict[str, Any]) -> list[HotGroup]:
    """The groups of a hot listing's answer."""
    return [_hot_group(g) for g in data["groups"]]


def _corrections(data: dict[str, Any]) -> list[Correction]:
    """The corrections of ``GET /v1/corrections``'s answer."""
    return [_correction(c) for c in data["corrections"]]


def _record(data: dict[str, Any]) -> DocumentRecord:
    return DocumentRecord(
        doc_id=data["id"],
        similar_id=int(data["similar_id"]),
        duplicate=bool(data["duplicate"]),
        merged_from=tuple(int(i) for i in data.get("merged_from", ())),
        title=data.get("title"),
        fingerprints=tuple(int(f, 16) for f in data.get("fingerprints", ())),
        score=_score(data.get("score")),
        verdict=data.get("verdict"),
    )


def _score(value: Any) -> float | None:
    return None if value is None else float(value)


class _Base:
    """What both clients share: settings, the retry schedule and the answer decoding."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
        batch_size: int,
    ) -> None:
        if retries < 0:
            raise ConfigError(f"retries must be 0 or more, not {retries!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be 1 or more, not {batch_size!r}")
        #: The service's base URL, without a trailing slash.
        self.url = _check_url(url)
        self.timeout = timeout
        #: How many times a failed request is sent again (when that is safe).
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_size = batch_size
        self._headers = _headers(api_key)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({mask_url(self.url)!r})"

    def _retry(self, call: _Call, attempt: int, error: httpx.TransportError | None) -> bool:
        """Whether to send *call* again after its *attempt*-th try failed."""
        if attempt >= self.retries:
            return False
        if call.safe:
            return True
        # Without an id a resend could add the document twice: only when it never left.
        return isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)

    def _pause(self, attempt: int, response: httpx.Response | None) -> float:
        """Seconds to wait before retry number *attempt* + 1 (full jitter, capped)."""
        delay: float = min(self.max_backoff, self.backoff * (2**attempt)) * random.uniform(0.5, 1)
        after: str | None = response.headers.get("Retry-After") if response is not None else None
        if after is not None and after.isdigit():
            delay = max(delay, min(float(after), self.max_backoff))
        return delay

    def _unreachable(self, error: httpx.TransportError) -> StoreUnavailableError:
        reason = str(error) or type(error).__name__
        return StoreUnavailableError(
            f"The nshash service at {mask_url(self.url)} cannot be reached"
            f" ({type(error).__name__}: {reason})",
            url=mask_url(self.url),
        )

    def _decode(self, call: _Call, response: httpx.Response) -> Any:
        """Return the JSON answer of *response*, None for a missing item, or raise."""
        status = response.status_code
        try:
            data = response.json()
        except ValueError:
            data = None
        if 200 <= status < 300:
            if data is None:
                raise ServiceError(status, "invalid_response", "the answer is not JSON")
            return data
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            error = {"code": f"http_{status}", "message": response.text[:200]}
        if status == 404 and error.get("code") in call.missing:
            return None
        if call.corrects and error.get("code") in _CORRECTION_CODES:
            raise CorrectionError(str(error.get("message", "")), code=str(error["code"]))
        if status in RETRY_STATUSES:
            raise StoreUnavailableError(
                f"The nshash service at {mask_url(self.url)} answered {status}"
                f" {error.get('code')}: {error.get('message')}",
                url=mask_url(self.url),
            )
        raise _item_error(status, error)

    # -- the calls, as data -------------------------------------------------------------
    @staticmethod
    def _query_call(text: str) -> _Call:
        return _Call("POST", "/v1/query", {"text": text})

    @staticmethod
    def _document_call(doc_id: str) -> _Call:
        if not isinstance(doc_id, str) or not doc_id:
            raise ConfigError(f"doc_id must be a non-empty str, not {doc_id!r}")
        return _Call("GET", f"/v1/documents/{_quote_id(doc_id)}", missing=("document_not_found",))

    @staticmethod
    def _group_call(similar_id: int) -> _Call:
        path = f"/v1/groups/{_positive_id(similar_id, 'similar_id')}"
        return _Call("GET", path, missing=("group_not_found",))

    @staticmethod
    def _detach_call(doc_id: str, by: str | None) -> _Call:
        if not isinstance(doc_id, str) or not doc_id:
            raise ConfigError(f"doc_id must be a non-empty str, not {doc_id!r}")
        body = {"id": doc_id, **({"by": by} if by else {})}
        return _Call("POST", "/v1/corrections/detach", body, safe=False, corrects=True)

    @staticmethod
    def _join_call(a: int, b: int, by: str | None) -> _Call:
        stories = [_positive_id(a, "a story id"), _positive_id(b, "a story id")]
        body = {"stories": stories, **({"by": by} if by else {})}
        return _Call("POST", "/v1/corrections/join", body, safe=False, corrects=True)

    @staticmethod
    def _undo_call(correction_id: int, by: str | None) -> _Call:
        body = {"by": by} if by else {}
        path = f"/v1/corrections/{_positive_id(correction_id, 'correction_id')}/undo"
        return _Call("POST", path, body, safe=False, corrects=True)

    @staticmethod
    def _groups_call(min_size: int, limit: int) -> _Call:
        return _Call("GET", "/v1/groups", params={"min_size": min_size, "limit": limit})

    @staticmethod
    def _hot_call(since: str, limit: int, min_count: int) -> _Call:
        if not isinstance(since, str) or not since:
            raise ConfigError(f"since must be a window such as '24h', not {since!r}")
        return _Call(
            "GET", "/v1/groups", params={"since": since, "limit": limit, "min_size": min_count}
        )

    @staticmethod
    def _find_call(
        text: str | None,
        site: str | None,
        start: str | float | datetime | None,
        end: str | float | datetime | None,
        since: str | None,
        tz: str | None,
        limit: int,
        offset: int,
        min_count: int,
    ) -> _Call:
        fields = {
            "q": text,
            "site": site,
            "from": _bound(start),
            "to": _bound(end),
            "since": since,
            "tz": tz,
            "limit": limit,
            "offset": offset,
            "min_size": min_count,
        }
        return _Call("GET", "/v1/groups", params={k: v for k, v in fields.items() if v is not None})


class Client(_Base):
    """A blocking client of the nshash HTTP service, safe to share between threads.

    Args:
        url: the service's base URL, such as ``http://127.0.0.1:8000``.
        api_key: the key, when the service sets ``NSHASH_API_KEY``.
        timeout: seconds for each attempt (connect, read and write alike).
        retries: how many times a failed request may be sent again (see the module docstring).
        backoff: the first pause between attempts, in seconds; it doubles each time.
        max_backoff: the longest pause, in seconds.
        batch_size: documents per batch request in :meth:`add_many`.
        transport: an httpx transport to send through (default: a real connection pool).

    Raises:
        ConfigError: the URL is not ``http(s)://host...``, or a number is out of range.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, api_key, timeout, retries, backoff, max_backoff, batch_size)
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
        )

    def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
            except httpx.TransportError as exc:
                if not self._retry(call, attempt, exc):
                    raise self._unreachable(exc) from exc
                time.sleep(self._pause(attempt, None))
                attempt += 1
                continue
            if response.status_code in RETRY_STATUSES and self._retry(call, attempt, None):
                time.sleep(self._pause(attempt, response))
                attempt += 1
                continue
            return self._decode(call, response)

    def add(
        self,
        text: str,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        url: str | None = None,
        site: str | None = None,
        published_at: float | datetime | None = None,
        id: str | None = None,  # the name every surface uses; doc_id is the older one
    ) -> AddResult:
        """Add one document and return its group (``fingerprints`` is empty: not sent).

        *url*, *site* (default: the host of *url*) and *published_at* (epoch seconds or a
        datetime, naive meaning UTC; default: when the service receives it) are kept for the
        hot stories when the service tracks activity (``NSHASH_TRACK``).

        Raises:
            EmptyDocumentError: the text has no letter or digit.
            ServiceError: the service refused the request (401, 413, 422).
            StoreUnavailableError: the service or its store cannot be reached.
        """
        doc_id = either_id(doc_id, id)
        call = _add_call(text, doc_id, title=title, url=url, site=site, published_at=published_at)
        return _read(_add_result, self._send(call))

    def add_many(self, documents: Iterable[Document]) -> list[AddResult | NSHashError]:
        """Add documents in order, ``batch_size`` per request; a bad item yields its error."""
        calls, refused = _batch_calls(documents, self.batch_size)
        out: list[AddResult | NSHashError] = []
        for call in calls:
            out.extend(_read(_batch_results, self._send(call)))
        return _in_place(refused, out)

    def query(self, text: str) -> int | None:
        """Return the ``similar_id`` the text would get, or None for a new story; adds nothing."""
        return _read(_similar_id, self._send(self._query_call(text)))

    def document(self, doc_id: str) -> DocumentRecord | None:
        """Return what the service keeps about a document added with *doc_id*, or None."""
        data = self._send(self._document_call(doc_id))
        return None if data is None else _read(_record, data)

    def group(self, similar_id: int) -> Group | None:
        """Return a group (merged ids answer with their canonical group), or None."""
        data = self._send(self._group_call(similar_id))
        return None if data is None else _read(_group, data)

    def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return the largest groups first."""
        data = self._send(self._groups_call(min_size, limit))
        return _read(_groups, data)

    def detach(self, doc_id: str, *, by: str | None = None) -> Correction:
        """Take a copy out of its story (see :meth:`nshash.NSHash.detach`).

        Raises:
            CorrectionError: no such document, or it is its story's only copy.
        """
        return _read(_correction, self._send(self._detach_call(doc_id, by)))

    def join(self, a: int, b: int, *, by: str | None = None) -> Correction:
        """Join two stories (see :meth:`nshash.NSHash.join`)."""
        return _read(_correction, self._send(self._join_call(a, b, by)))

    def undo(self, correction_id: int, *, by: str | None = None) -> Correction:
        """Undo a correction (see :meth:`nshash.NSHash.undo`)."""
        return _read(_correction, self._send(self._undo_call(correction_id, by)))

    def corrections(self) -> list[Correction]:
        """Every correction, oldest first."""
        data = self._send(_Call("GET", "/v1/corrections"))
        return _read(_corrections, data)

    def hot(self, since: str = "24h", limit: int = 30, min_count: int = 1) -> list[HotGroup]:
        """Return the hot stories: the groups with the most documents in the window *since*
        (``24h``, ``90m``, ``7d``), at least *min_count* there, most first, as
        :meth:`nshash.NSHash.hot` ranks them (``GET /v1/groups?since=``)."""
        data = self._send(self._hot_call(since, limit, min_count))
        return _read(_hot_groups, data)

    def find(
        self,
        text: str | None = None,
        *,
        site: str | None = None,
        start: str | float | datetime | None = None,
        end: str | float | datetime | None = None,
        since: str | None = None,
        tz: str | None = None,
        limit: int = 30,
        offset: int = 0,
        min_count: int = 1,
    ) -> StoryPage:
        """Find stories by headline, site and time range, a page at a time, as
        :meth:`nshash.NSHash.find` does (``GET /v1/groups?q=&site=&from=&to=&offset=``).

        Raises:
            ServiceError: the service refused an argument (422: a malformed date, an inverted
                range, an unknown zone, a term over 200 characters...).
        """
        call = self._find_call(text, site, start, end, since, tz, limit, offset, min_count)
        return _read(_story_page, self._send(call))

    def ping(self) -> None:
        """Check that the service and its store answer (``GET /readyz``).

        Raises:
            StoreUnavailableError: they do not, after the retries.
        """
        _read(_ready, self._send(_Call("GET", "/readyz")))

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient(_Base):
    """The asyncio client of the nshash HTTP service: :class:`Client`'s calls, awaited.

    Many tasks may share one client; each call is one request (or one per ``batch_size``
    documents), retried as the module docstring says. Takes the arguments of :class:`Client`,
    with an ``httpx.AsyncBaseTransport`` as ``transport``.

    Example:
        >>> async def main() -> None:  # doctest: +SKIP
        ...     async with AsyncClient("http://127.0.0.1:8000") as client:
        ...         results = await asyncio.gather(*(client.add(t, doc_id=i) for i, t in docs))
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        batch_size: int = DEFAULT_BATCH_SIZE,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, api_key, timeout, retries, backoff, max_backoff, batch_size)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
        )

    async def _send(self, call: _Call) -> Any:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
            except httpx.TransportError as exc:
                if not self._retry(call, attempt, exc):
                    raise self._unreachable(exc) from exc
                await asyncio.sleep(self._pause(attempt, None))
                attempt += 1
                continue
            if response.status_code in RETRY_STATUSES and self._retry(call, attempt, None):
                await asyncio.sleep(self._pause(attempt, response))
                attempt += 1
                continue
            return self._decode(call, response)

    async def add(
        self,
        text: str,
        doc_id: str | None = None,
        *,
        title: str | None = None,
        url: str | None = None,
        site: str | None = None,
        published_at: float | datetime | None = None,
        id: str | None = None,  # the name every surface uses; doc_id is the older one
    ) -> AddResult:
        """Add one document and return its group (see :meth:`Client.add`)."""
        doc_id = either_id(doc_id, id)
        call = _add_call(text, doc_id, title=title, url=url, site=site, published_at=published_at)
        return _read(_add_result, await self._send(call))

    async def add_many(self, documents: Iterable[Document]) -> list[AddResult | NSHashError]:
        """Add documents in order, ``batch_size`` per request; a bad item yields its error."""
        calls, refused = _batch_calls(documents, self.batch_size)
        out: list[AddResult | NSHashError] = []
        for call in calls:
            out.extend(_read(_batch_results, await self._send(call)))
        return _in_place(refused, out)

    async def query(self, text: str) -> int | None:
        """Return the ``similar_id`` the text would get, or None; adds nothing."""
        return _read(_similar_id, await self._send(self._query_call(text)))

    async def document(self, doc_id: str) -> DocumentRecord | None:
        """Return what the service keeps about a document added with *doc_id*, or None."""
        data = await self._send(self._document_call(doc_id))
        return None if data is None else _read(_record, data)

    async def group(self, similar_id: int) -> Group | None:
        """Return a group (merged ids answer with their canonical group), or None."""
        data = await self._send(self._group_call(similar_id))
        return None if data is None else _read(_group, data)

    async def detach(self, doc_id: str, *, by: str | None = None) -> Correction:
        """:meth:`Client.detach`, awaited."""
        return _read(_correction, await self._send(self._detach_call(doc_id, by)))

    async def join(self, a: int, b: int, *, by: str | None = None) -> Correction:
        """:meth:`Client.join`, awaited."""
        return _read(_correction, await self._send(self._join_call(a, b, by)))

    async def undo(self, correction_id: int, *, by: str | None = None) -> Correction:
        """:meth:`Client.undo`, awaited."""
        return _read(_correction, await self._send(self._undo_call(correction_id, by)))

    async def corrections(self) -> list[Correction]:
        """:meth:`Client.corrections`, awaited."""
        data = await self._send(_Call("GET", "/v1/corrections"))
        return _read(_corrections, data)

    async def groups(self, min_size: int = 2, limit: int = 30) -> list[Group]:
        """Return the largest groups first."""
        data = await self._send(self._groups_call(min_size, limit))
        return _read(_groups, data)

    async def hot(self, since: str = "24h", limit: int = 30, min_count: int = 1) -> list[HotGroup]:
        """Return the hot stories of the window *since* (see :meth:`Client.hot`)."""
        data = await self._send(self._hot_call(since, limit, min_count))
        return _read(_hot_groups, data)

    async def find(
        self,
        text: str | None = None,
        *,
        site: str | None = None,
        start: str | float | datetime | None = None,
        end: str | float | datetime | None = None,
        since: str | None = None,
        tz: str | None = None,
        limit: int = 30,
        offset: int = 0,
        min_count: int = 1,
    ) -> StoryPage:
        """Find stories by headline, site and time range (see :meth:`Client.find`)."""
        call = self._find_call(text, site, start, end, since, tz, limit, offset, min_count)
        return _read(_story_page, await self._send(call))

    async def ping(self) -> None:
        """Check that the service and its store answer (``GET /readyz``)."""
        _read(_ready, await self._send(_Call("GET", "/readyz")))

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
