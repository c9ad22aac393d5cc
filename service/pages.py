"""The hot-stories pages: server-rendered HTML for the people who watch a crawl.

=====================  ==========================================================================
page                   shows
=====================  ==========================================================================
``GET /``              the stories with the most copies in a window (``?since=24h``, ``1h``,
                       ``7d``, ``all``...) or found by headline, site and dates (``?q=``,
                       ``site=``, ``from=``, ``to=``, ``tz=``), a page at a time
                       (``offset=``, with Previous/Next links): headline, copies in the range
                       and in all, sites, first and last seen, and a small chart of copies
``GET /stories/{id}``  one story: its chart over its whole life and every copy, with links
``GET /check``         a form to paste a text; ``POST /check`` says which story it belongs to and
                       why (the store's explanation), with the matched passages highlighted
``GET /login``         the API key form (only when ``NSHASH_API_KEY`` is set)
=====================  ==========================================================================

Everything is rendered here (Jinja2 templates in ``templates/``, charts as inline SVG); the
pages load nothing from anywhere else, and the only script is the optional auto-refresh.
Times are shown in the display time zone (``NSHASH_TIMEZONE``, else UTC; ``?tz=`` per
request). A store failure is answered as a page (503 while the store cannot be reached),
never as the API's JSON; bad input as the form with a sentence (422).

**The API key.** When ``NSHASH_API_KEY`` is set, the pages need it as the API does. A browser
cannot send an ``Authorization`` header by itself, so the login form (``/login``) trades the
key for a session (:mod:`.sessions`) in the ``nshash_session`` cookie (HttpOnly,
SameSite=Strict, so other sites can neither read it nor make the browser send it with their
forms); the cookie never holds the key, and ``/logout`` ends the session on the server. A
link may carry the key once as ``?key=...``: the page then starts a session and redirects to
the same address without it, so the key does not stay in the address bar or the history (nor
in the access log, which redacts it). Wrong keys are limited per client address (429). The
``/v1`` API still takes only the header.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timezone, tzinfo
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup

from nshash import EmptyDocumentError, NSHash, NSHashError
from nshash.methods.nshash.find import local_time, zone
from nshash.results import HOUR, Activity, Candidate, Explanation
from nshash.stores.url import mask_url
from nshash.text.fingerprint import HASHFUNCS, shingle_hashes, split_sentences

from .deps import Service, ServiceDep
from .errors import classify
from .sessions import SESSION_SECONDS

__all__ = ["COOKIE", "WINDOWS", "highlight", "pages"]

#: The cookie that carries a login session of the pages (never the key itself).
COOKIE = "nshash_session"

#: The windows offered on the front page.
WINDOWS = ("1h", "6h", "24h", "7d", "30d", "365d")

#: The longest text the check form takes, in characters.
MAX_CHECK_CHARS = 200_000

pages = APIRouter(include_in_schema=False)

#: A page route: ``request`` and ``service`` by name, maybe more.
PageHandler = Callable[..., Awaitable[Response]]

_TEMPLATES = Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = when
    env.tests["web"] = is_web_url
    return env


def is_web_url(url: object) -> bool:
    """Whether *url* may be a link: http or https only (a crawler's ``javascript:`` url is
    shown as text, never made clickable)."""
    return isinstance(url, str) and url.lower().startswith(("http://", "https://"))


def when(seconds: int | None, tz: tzinfo = timezone.utc) -> str:
    """Epoch seconds as ``2024-05-03 12:30 UTC`` in *tz* (``2024-05-03 20:30 HKT``; an
    empty string for None)."""
    if seconds is None:
        return ""
    moment = local_time(seconds, tz)
    label = moment.tzname() or ""
    if label[:1] in "+-":  # a zone with no abbreviation: its offset
        label = "UTC" + label
    return moment.strftime("%Y-%m-%d %H:%M ") + label


def _render(name: str, status: int = 200, *, service: Service, **context: Any) -> HTMLResponse:
    """Render a page; ``keyed`` (whether the pages need the API key) is set for every page."""
    keyed = service.settings.api_key is not None
    html = _env().get_template(name).render(keyed=keyed, **context)
    return HTMLResponse(html, status_code=status)


def _readable(handler: PageHandler) -> PageHandler:
    """Answer a store failure on a page as a page (503 while the store cannot be reached),
    never as the API's JSON."""

    @functools.wraps(handler)
    async def page(request: Request, service: Service, **kwargs: Any) -> Response:
        try:
            return await handler(request=request, service=service, **kwargs)
        except NSHashError as exc:
            status, _code, message = classify(exc)
            title = "The store cannot be reached" if status == 503 else "Something went wrong"
            return _render(
                "message.html",
                status,
                title=title,
                message=message,
                retry=status == 503,
                store=mask_url(service.settings.store_url),
                nav=True,
                service=service,
            )

    return page


# -- the API key -----------------------------------------------------------------------------
def _set_cookie(response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE, token, max_age=SESSION_SECONDS, httponly=True, samesite="strict", path="/"
    )


def _client(request: Request) -> str:
    return request.client.host if request.client is not None else "-"


def _try_key(request: Request, service: Service, given: str) -> bool | Response:
    """Check a key a person typed or linked: True/False, or the 429 page while this client
    sent too many wrong ones (the key is then not checked at all)."""
    wait = service.attempts.wait(_client(request))
    if wait:
        message = f"Too many wrong keys from this address: try again in {wait:.0f} s."
        response = _render(
            "message.html",
            429,
            title="Too many attempts",
            message=message,
            nav=False,
            service=service,
        )
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    if service.key_matches(given):
        return True
    service.attempts.failed(_client(request))
    return False


def _logged_in(response: Response, service: Service) -> Response:
    """*response* with a new session's cookie."""
    if service.sessions is not None:
        _set_cookie(response, service.sessions.issue())
    return response


def _guard(request: Request, service: Service) -> Response | None:
    """None when the request may see the pages; else the response to send instead (the login
    form, or a redirect that trades ``?key=`` for a session cookie)."""
    sessions = service.sessions
    if sessions is None:
        return None
    given = request.query_params.get("key")
    target = _local(request.url.path, request.query_params.items())
    if given is not None:
        matched = _try_key(request, service, given)
        if isinstance(matched, Response):
            return matched
        if matched:
            # Trade the key in the address for a session, and take it out of the address.
            return _logged_in(RedirectResponse(target, status_code=303), service)
    if service.bearer_ok(request) or sessions.valid(request.cookies.get(COOKIE)):
        return None
    wrong = given is not None
    return _render("login.html", 401, next=target, wrong=wrong, nav=False, service=service)


def _local(path: str, query: Any = ()) -> str:
    """A same-site address: *path* with *query* less any ``key``."""
    rest = [(k, v) for k, v in query if k != "key"]
    return path + ("?" + urlencode(rest) if rest else "")


def _safe_next(value: str | None) -> str:
    """*value* if it is an address on this site, else ``/`` (no open redirects). Browsers
    drop tabs and line breaks from a link (``/<TAB>/evil.example`` is ``//evil.example``),
    so an address holding a control character is refused too."""
    if (
        value
        and value.startswith("/")
        and not value.startswith("//")
        and "\\" not in value
        and not any(c < " " or c == "\x7f" for c in value)
    ):
        return value
    return "/"


async def _form(request: Request) -> dict[str, str]:
    """The fields of a url-encoded form body (the first value of each)."""
    body = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


@pages.get("/login")
async def login_form(request: Request, service: ServiceDep) -> Response:
    """The API key form."""
    target = _safe_next(request.query_params.get("next"))
    return _render("login.html", next=target, wrong=False, nav=False, service=service)


@pages.post("/login")
async def login(request: Request, service: ServiceDep) -> Response:
    """Check the key; on success start a session and go where the user was going."""
    form = await _form(request)
    target = _safe_next(form.get("next"))
    if service.sessions is None:
        return _render("login.html", next=target, wrong=False, nav=False, service=service)
    matched = _try_key(request, service, form.get("key", ""))
    if isinstance(matched, Response):
        return matched
    if not matched:
        return _render("login.html", 401, next=target, wrong=True, nav=False, service=service)
    return _logged_in(RedirectResponse(target, status_code=303), service)


@pages.get("/logout")
async def logout(request: Request, service: ServiceDep) -> Response:
    """End the session on the server and forget its cookie."""
    if service.sessions is not None:
        service.sessions.revoke(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# -- charts ----------------------------------------------------------------------------------
def spark(counts: list[int], width: int = 144, height: int = 28) -> Markup:
    """A bar per count, as a small inline SVG (the front page's per-story chart)."""
    top = max(counts, default=0) or 1
    n = max(len(counts), 1)
    bar = width / n
    rects = []
    for i, c in enumerate(counts):
        if c:
            h = max(1.0, height * c / top)
            rects.append(
                f'<rect x="{i * bar:.2f}" y="{height - h:.2f}" width="{max(bar - 0.5, 0.5):.2f}"'
                f' height="{h:.2f}"/>'
            )
    return Markup(
        f'<svg class="spark" role="img" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}"><title>copies per hour</title>{"".join(rects)}</svg>'
    )


#: The widths a bar of a story's chart may cover, in hours: the smallest that keeps the chart
#: within :data:`CHART_BARS` bars.
CHART_STEPS = (1, 2, 3, 6, 12, 24, 48, 7 * 24, 14 * 24, 28 * 24, 91 * 24, 365 * 24)
#: The most bars a story's chart draws (on a phone a bar stays a few pixels wide).
CHART_BARS = 84


def chart(
    activity: Activity | None, width: int = 900, height: int = 160, tz: tzinfo = timezone.utc
) -> Markup:
    """Copies over a story's life as an inline SVG, with its scale written on it: per hour
    for a young story, per 2, 3, 6 or 12 hours, day, week... for older ones, so that there are
    at most :data:`CHART_BARS` bars (at least a day's worth), each wide enough to see."""
    if activity is None or not activity.hours:
        return Markup('<p class="muted">No times recorded for this story.</p>')
    first = activity.hours[0][0] // HOUR
    last = activity.hours[-1][0] // HOUR
    hours = last - first + 1
    step = next((s for s in CHART_STEPS if -(-hours // s) <= CHART_BARS), CHART_STEPS[-1])
    start = first - first % step
    # At least a day (or CHART_BARS bars) up to the last copy, so a young story keeps a scale.
    least = max(24 // step, 1) if step < 24 else 30
    start = max(0, min(start, last - last % step - (least - 1) * step))
    slots = (last - start) // step + 1
    counts = [0] * slots
    for hour, n in activity.hours:
        counts[(hour // HOUR - start) // step] += n
    top = max(counts)
    inner_h = height - 4
    bar = width / slots
    gap = min(2.0, bar * 0.2)
    parts = []
    for i, c in enumerate(counts):
        if c:
            h = max(2.0, inner_h * c / top)
            parts.append(
                f'<rect x="{i * bar:.2f}" y="{4 + inner_h - h:.2f}"'
                f' width="{max(bar - gap, 1):.2f}" height="{h:.2f}"><title>'
                f"{Markup.escape(when((start + i * step) * HOUR, tz))}: {c}</title></rect>"
            )
    unit = _unit(step)
    # The scale is HTML beside the drawing, so it keeps its size when the drawing is
    # stretched to the page's width (a phone's, too).
    axis = f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" class="axis"/>'
    first_label = Markup.escape(when(start * HOUR, tz))
    last_label = Markup.escape(when((start + (slots - 1) * step) * HOUR, tz))
    return Markup(
        f'<div class="chart-box"><span class="chart-top">{top}</span>'
        f'<svg class="chart" role="img" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" preserveAspectRatio="none"><title>copies per {unit}'
        f"</title>{axis}{''.join(parts)}</svg>"
        f'<div class="chart-axis"><span>{first_label}</span><span>{last_label}</span></div>'
        f'</div><p class="muted" id="chart-unit">copies per {unit}, a bar each ({slots} bars;'
        f" the tallest {top})</p>"
    )


def _unit(step: int) -> str:
    """A bar's width in words: ``hour``, ``6 hours``, ``day``, ``week``..."""
    if step % (7 * 24) == 0:
        weeks = step // (7 * 24)
        return "week" if weeks == 1 else f"{weeks} weeks"
    if step % 24 == 0:
        days = step // 24
        return "day" if days == 1 else f"{days} days"
    return "hour" if step == 1 else f"{step} hours"


# -- the front page --------------------------------------------------------------------------
_OTHER_METHOD = (
    "The hot-stories pages need NSHASH_METHOD=nshash: the {method} method keeps no stories"
    " and no activity."
)


async def _nshash(request: Request, service: Service) -> NSHash | Response:
    """What every page needs first: the caller let in (see :func:`_guard`) and the nshash
    method; else the page to answer instead (the login form, or 501 for another method)."""
    denied = _guard(request, service)
    if denied is not None:
        return denied
    nsh = await service.nshash()
    if isinstance(nsh, NSHash):
        return nsh
    message = _OTHER_METHOD.format(method=service.settings.method)
    return _render(
        "message.html", 501, title="Not available", message=message, nav=True, service=service
    )


def _int(value: str | None, default: int, least: int, most: int) -> int:
    try:
        return min(max(int(value or default), least), most)
    except ValueError:
        return default


#: The most bars a small per-story chart of the front page draws.
SPARK_BARS = 48


def _spark_counts(activity: Activity | None, first_hour: int, last_hour: int) -> list[int]:
    """A story's copies from *first_hour* to *last_hour*, in at most :data:`SPARK_BARS`
    bars of whole hours each."""
    hours = last_hour - first_hour + 1
    step = max(1, -(-hours // SPARK_BARS))
    counts = [0] * (-(-hours // step))
    if activity is not None:
        for hour, n in activity.hours:
            h = hour // HOUR
            if first_hour <= h <= last_hour:
                counts[(h - first_hour) // step] += n
    return counts


def _page_zone(request: Request, service: Service) -> tuple[str | None, tzinfo]:
    """The display time zone's name and zone: ``?tz=``, else ``NSHASH_TIMEZONE``, else UTC.

    Raises:
        ConfigError: an unknown zone.
    """
    name = request.query_params.get("tz") or service.settings.timezone
    return name, zone(name)


def _address(params: dict[str, str], **changes: str | int | None) -> str:
    """The front page's address with *params* changed (None or "" drops one)."""
    merged: dict[str, str | int | None] = {**params, **changes}
    kept = [(k, str(v)) for k, v in merged.items() if v not in (None, "")]
    return "/" + ("?" + urlencode(kept) if kept else "")


#: The front page's query parameters, as its form names them.
_FIND_FIELDS = ("q", "site", "from", "to", "since", "tz", "min", "limit", "refresh")


@pages.get("/")
@_readable
async def hot_page(request: Request, service: ServiceDep) -> Response:
    """The hot stories of a window, or the stories found by headline, site and range."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    params = {k: request.query_params.get(k, "").strip() for k in _FIND_FIELDS}
    q, site = params["q"] or None, params["site"] or None
    start, end_at = params["from"] or None, params["to"] or None
    ranged = start is not None or end_at is not None
    since = None if ranged else params["since"] or ("24h" if not (q or site) else None)
    finding = bool(q or site or ranged or since == "all")
    if since == "all":  # all time
        since = None
    limit = _int(params["limit"], 30, 1, service.settings.max_groups_limit)
    least = _int(params["min"], 1 if finding else 2, 1, 1 << 30)
    offset = _int(request.query_params.get("offset"), 0, 0, 1 << 30)
    refresh = _int(params["refresh"], 0, 0, 3600)
    view: dict[str, Any] = {
        "finding": finding,
        "params": params,
        "windows": WINDOWS,
        "since": since,
        "least": least,
        "refresh": refresh,
        "tracking": nsh.track,
        "address": lambda **changes: _address(params, **changes),
        "prev_offset": max(0, offset - limit),
        "nav": True,
    }
    try:
        tz_name, tz = _page_zone(request, service)
        end = nsh.clock()
        page = await service.call(
            nsh.find,
            q,
            site=site,
            start=start,
            end=end_at,
            since=since,
            tz=tz_name,
            limit=limit,
            offset=offset,
            min_count=least,
            now=end,
        )
    except NSHashError as exc:
        status, _code, message = classify(exc)
        tz_name = params["tz"]
        return _render(
            "hot.html",
            status,
            rows=[],
            page=None,
            error=message,
            tz=timezone.utc,
            tz_name=tz_name,
            start=None,
            end=None,
            service=service,
            **view,
        )
    if page.range is not None:
        first_hour, last_hour = page.range.first_hour, page.range.last_hour
        if since is not None:
            last_hour = int(end // HOUR)
    rows = []
    for rank, story in enumerate(page.stories, page.offset + 1):
        activity = await service.call(nsh.activity, story.similar_id)
        if page.range is None:  # all time: the story's own life
            lo = (activity.first_seen // HOUR) if activity else 0
            hi = (activity.last_seen // HOUR) if activity else 0
        else:  # the range; at most its last year
            lo, hi = max(first_hour, last_hour - 366 * 24), last_hour
        rows.append({"rank": rank, "story": story, "spark": spark(_spark_counts(activity, lo, hi))})
    return _render(
        "hot.html",
        rows=rows,
        page=page,
        error=None,
        tz=tz,
        tz_name=tz_name,
        start=None if page.range is None else page.range.start,
        end=None if page.range is None else int(end) if since else page.range.end,
        service=service,
        **view,
    )


@pages.get("/stories/{similar_id}")
@_readable
async def story_page(similar_id: str, request: Request, service: ServiceDep) -> Response:
    """One story and its copies."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    if _story_id(similar_id) is None or similar_id != similar_id.strip():
        return _render(
            "message.html",
            404,
            title="No such story",
            message=f"No story {similar_id!r}",
            nav=True,
            service=service,
        )
    group = await service.call(nsh.group, int(similar_id))
    if group is None:
        return _render(
            "message.html",
            404,
            title="No such story",
            message=f"No story {similar_id}",
            nav=True,
            service=service,
        )
    if group.similar_id != int(similar_id):
        return RedirectResponse(
            _local(f"/stories/{group.similar_id}", request.query_params.items()), status_code=307
        )
    try:
        tz_name, tz = _page_zone(request, service)
    except NSHashError as exc:
        return _render(
            "message.html", 422, title="Bad time zone", message=str(exc), nav=True, service=service
        )
    activity = await service.call(nsh.activity, group.similar_id)
    metas = await service.call(nsh.store.doc_meta, group.doc_ids)
    copies = [{"member": m, "meta": meta} for m, meta in zip(group.members, metas, strict=True)]
    title = next((m.title for m in group.members if m.title), None)
    sites = list(dict.fromkeys(meta.site for meta in metas if meta is not None and meta.site))
    made = await service.call(nsh.corrections)
    mine = [c for c in made if group.similar_id in (c.source, c.target)]
    return _render(
        "story.html",
        group=group,
        title=title,
        copies=copies,
        sites=sites,
        activity=activity,
        chart=chart(activity, tz=tz),
        corrections=mine,
        tz=tz,
        tz_name=tz_name,
        nav=True,
        service=service,
    )


# -- corrections -----------------------------------------------------------------------------
def _editor(service: Service) -> str:
    """Who a correction made on the pages is kept as made by."""
    if service.settings.api_key is not None:
        return f"{service.settings.api_key_name} (pages)"
    return "pages"


def _story_id(value: str | None) -> int | None:
    """A story id typed or sent by a form, or None when it is not one."""
    value = (value or "").strip()
    # (19 digits at most: 2**63 has 19; int() refuses a str of over 4,300 digits)
    if value.isascii() and value.isdigit() and len(value) <= 19 and 0 < int(value) < 2**63:
        return int(value)
    return None


def _refused(service: Service, message: str, status: int = 422) -> Response:
    return _render(
        "message.html", status, title="Not done", message=message, nav=True, service=service
    )


@pages.post("/stories/{similar_id}/detach")
@_readable
async def detach_copy(similar_id: str, request: Request, service: ServiceDep) -> Response:
    """Take a copy out of the story (the form's ``doc``); back to the story."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    here = _story_id(similar_id)
    if here is None:
        return _refused(service, f"No story {similar_id!r:.40}", 404)
    doc = (await _form(request)).get("doc", "")
    if not doc:
        return _refused(service, "Say which copy to detach")
    record = await service.call(nsh.document, doc)
    if record is not None:  # (an unknown copy: detach says so)
        story = await service.call(nsh.resolve, record.similar_id)
        if story != await service.call(nsh.resolve, here):
            return _refused(
                service, f"Copy {doc!r:.60} is not in story {here} (it is in story {story})", 409
            )
    done = await service.call(nsh.detach, doc, by=_editor(service))
    return RedirectResponse(f"/stories/{done.source}", status_code=303)


@pages.post("/stories/{similar_id}/join")
@_readable
async def join_story(similar_id: str, request: Request, service: ServiceDep) -> Response:
    """Join the story with another (the form's ``other``); on to the story kept."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    other = (await _form(request)).get("other")
    here, there = _story_id(similar_id), _story_id(other)
    if here is None:
        return _refused(service, f"No story {similar_id!r:.40}", 404)
    if there is None:
        return _refused(service, f"A story id is a positive whole number, not {other or ''!r:.40}")
    done = await service.call(nsh.join, here, there, by=_editor(service))
    return RedirectResponse(f"/stories/{done.target}", status_code=303)


@pages.get("/corrections")
@_readable
async def corrections_page(request: Request, service: ServiceDep) -> Response:
    """Every correction, newest first, with an undo button for those that hold."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    try:
        tz_name, tz = _page_zone(request, service)
    except NSHashError as exc:
        return _refused(service, str(exc))
    made = await service.call(nsh.corrections)
    return _render(
        "corrections.html",
        corrections=list(reversed(made)),
        tz=tz,
        tz_name=tz_name,
        nav=True,
        service=service,
    )


@pages.post("/corrections/{correction_id}/undo")
@_readable
async def undo_correction(correction_id: str, request: Request, service: ServiceDep) -> Response:
    """Undo a correction; back to where the form was (its ``next``), else the list."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    target = _safe_next((await _form(request)).get("next") or "/corrections")
    cid = _story_id(correction_id)
    if cid is None:
        return _refused(service, f"No correction {correction_id!r:.40}", 404)
    await service.call(nsh.undo, cid, by=_editor(service))
    return RedirectResponse(target, status_code=303)


# -- the check form --------------------------------------------------------------------------
def highlight(
    nsh: NSHash, text: str, hits: set[int], boilerplate: set[int]
) -> list[tuple[str, str]]:
    """Cut *text* into pieces, each marked ``"hit"`` (a sentence holding an anchor that found
    the story), ``"boilerplate"`` (one holding an anchor known to be boilerplate) or ``""``.

    Anchors are hashes of short windows of the text's letters and digits (see
    :mod:`nshash.text.fingerprint`); this recomputes every window's hash, sentence by sentence, to
    find where each anchor is. A window that spans two sentences marks both.
    """
    fp = nsh.fingerprinter
    sentences = split_sentences(text, fp.delimiters)
    keys = []
    for s in sentences:
        try:
            keys.append("".join(fp.sentence_keys(s)))
        except (EmptyDocumentError, NSHashError):
            keys.append("")
    stream = "".join(keys)
    marks = [""] * len(sentences)
    found = shingle_hashes(stream, fp.shingle, fp.letter_units) if stream else None
    if found is not None and (hits or boilerplate):
        hash_ = HASHFUNCS[fp.hashfunc]
        owner = []
        for i, k in enumerate(keys):
            owner.extend([i] * len(k))
        for start, end in enumerate(found[1].tolist()):
            h = hash_(stream[start:end])
            mark = "hit" if h in hits else "boilerplate" if h in boilerplate else ""
            if mark:
                for i in range(owner[start], owner[end - 1] + 1):
                    if marks[i] != "hit":
                        marks[i] = mark
    pieces: list[tuple[str, str]] = []
    at = 0
    for sentence, mark in zip(sentences, marks, strict=True):
        where = text.find(sentence, at)
        if where < 0:  # cannot happen: the sentences are slices of the text, in order
            continue
        if where > at:
            pieces.append((text[at:where], ""))
        pieces.append((sentence, mark))
        at = where + len(sentence)
    if at < len(text):
        pieces.append((text[at:], ""))
    return pieces


def _reason(why: Explanation) -> str:
    if why.reason == "exact":
        return "The same text (its letters and digits) was added before, so it is that story."
    if why.reason == "matched":
        best = why.candidates[0]
        return (
            f"It shares {best.shared} of the {min(best.document_values, best.group_values)}"
            f" sampled passages compared with the story (score {best.score:.2f}, at least"
            f" {why.theta:.2f} is needed), found through {len(best.anchors)} of its anchors."
            + _framed(best.frame)
            + _edited(best.edits)
            + _long_page(best)
        )
    if why.reason == "new":
        framed = max((c.frame for c in why.candidates), default=0)
        return (
            "Some of its passages were seen before, but no story shares enough of the text"
            f" (every score is below {why.theta:.2f}): it would start a new story."
            + _framed(framed)
            + next((_long_page(c) for c in why.candidates if c.long_page), "")
        )
    return "None of its passages was seen before: it would start a new story."


async def _against(
    nsh: NSHash, service: Service, story: str | None, doc: str | None
) -> dict[str, Any] | Response | None:
    """The copy a check explains against its story (``?story=&doc=``, from a story page):
    the story, the copy's record and its metadata; None for a plain check; a page when one
    names nothing."""
    if not story and not doc:
        return None
    sid = _story_id(story)
    group = None if sid is None else await service.call(nsh.group, sid)
    if group is None:
        return _refused(service, f"No story {story!r:.40}", 404)
    record = await service.call(nsh.document, doc) if doc else None
    if doc and (record is None or record.similar_id != group.similar_id):
        return _refused(service, f"No copy {doc!r:.80} in story {group.similar_id}", 404)
    meta = (await service.call(nsh.store.doc_meta, [doc]))[0] if doc else None
    title = next((m.title for m in group.members if m.title), None)
    return {"group": group, "record": record, "meta": meta, "title": title}


def _against_reason(why: Explanation, found: Candidate | None, story: Any) -> str:
    """Why a copy belongs, or not, to the story it is explained against."""
    sid = story.similar_id
    if found is None:
        return (
            f"None of its anchors leads to story {sid}: judged now, it shares no sampled"
            " passage with it that is not boilerplate."
        )
    return (
        f"Against story {sid} it shares {found.shared} of the"
        f" {min(found.document_values, found.group_values)} sampled passages compared (score"
        f" {found.score:.2f}; at least {why.theta:.2f} is needed), found through"
        f" {len(found.anchors)} of its anchors."
        + _framed(found.frame)
        + _edited(found.edits)
        + _long_page(found)
    )


def _long_page(found: Candidate) -> str:
    """How a long page was judged on its top against a story (nothing for another page)."""
    if not found.long_page:
        return ""
    if found.score > 0:
        return (
            " It is a long page, judged on its top, where its own story is: the story holds"
            f" {found.score:.0%} of its top, though what lies further down differs (comments,"
            " its site's scroll)."
        )
    return (
        " It is a long page whose top, where its own story is, shares nothing with a story it"
        " otherwise matches: what they share lies further down (its site's scroll, comments),"
        " so that story was refused (score 0)."
    )


def _edited(edits: int) -> str:
    """What a copy's scattered edits left out, in words (nothing for none)."""
    if not edits:
        return ""
    return (
        f" {edits} of its passages, changed here and there all through a text it otherwise"
        " shares (typos, a word changed), were read as edits of the story and left out."
    )


def _framed(frame: int) -> str:
    """What a page's frame set aside, in words (nothing for none)."""
    if not frame:
        return ""
    return (
        f" {frame} passages it shares only at its edges (its top and bottom, or its end after"
        " text of its own), around or after text the story does not hold, were set aside as"
        " its site's frame (a header, a footer, a bio), not its story."
    )


@pages.get("/check")
@_readable
async def check_form(request: Request, service: ServiceDep) -> Response:
    """The paste form; with ``story`` (and ``doc``), to explain a copy against a story."""
    denied = _guard(request, service)
    if denied is not None:
        return denied
    against = None
    if request.query_params.get("story") or request.query_params.get("doc"):
        nsh = await _nshash(request, service)
        if not isinstance(nsh, NSHash):
            return nsh
        found = await _against(
            nsh, service, request.query_params.get("story"), request.query_params.get("doc")
        )
        if isinstance(found, Response):
            return found
        against = found
    return _render(
        "check.html",
        text="",
        result=None,
        error=None,
        against=against,
        tz=_page_zone(request, service)[1],
        nav=True,
        service=service,
    )


@pages.post("/check")
@_readable
async def check(request: Request, service: ServiceDep) -> Response:
    """Which story a pasted text belongs to, and why; writes nothing."""
    nsh = await _nshash(request, service)
    if not isinstance(nsh, NSHash):
        return nsh
    form = await _form(request)
    text = form.get("text", "")
    against = await _against(nsh, service, form.get("story"), form.get("doc"))
    if isinstance(against, Response):
        return against
    if len(text) > MAX_CHECK_CHARS:
        message = f"The text has {len(text)} characters; this form takes {MAX_CHECK_CHARS}"
        return _render(
            "message.html", 413, title="Too long", message=message, nav=True, service=service
        )
    tz = _page_zone(request, service)[1]
    try:
        why = await service.caller_for(text)(nsh.explain, text, as_copy=against is not None)
    except NSHashError as exc:
        status, _code, message = classify(exc)
        return _render(
            "check.html",
            status,
            text=text,
            result=None,
            error=message,
            against=against,
            tz=tz,
            nav=True,
            service=service,
        )
    story = None
    if against is not None:
        story = against["group"]
        joined = next((c for c in why.candidates if c.similar_id == story.similar_id), None)
    else:
        if why.similar_id is not None:
            story = await service.call(nsh.group, why.similar_id)
        joined = next((c for c in why.candidates if c.verdict == "joined"), None)
    hits = set(joined.anchors) if joined is not None else set()
    if why.reason == "exact":
        pieces = [(text, "hit")]
    else:
        pieces = highlight(nsh, text, hits, set(why.boilerplate))
    title = None
    if story is not None:
        title = next((m.title for m in story.members if m.title), None)
    result = {
        "why": why,
        "story": story,
        "title": title,
        "reason": _reason(why) if against is None else _against_reason(why, joined, story),
        "pieces": pieces,
        "matched": sum(1 for _p, mark in pieces if mark == "hit"),
    }
    return _render(
        "check.html",
        text=text,
        result=result,
        error=None,
        against=against,
        tz=tz,
        nav=True,
        service=service,
    )
