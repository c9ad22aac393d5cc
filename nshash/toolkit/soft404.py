"""Soft-404 detection: is this page a site's custom "not found" page served with status 200?

Many sites answer a request for a page that does not exist with status 200 and a friendly
error page, so a scanner or crawler that trusts the status sees a page everywhere. The cure
(seed 000) is to ask the site for a path that cannot exist, keep what it serves as the
*baseline*, and call a page "not found" when it looks like the baseline.

"Looks like" is measured on the visible words, after what changes from request to request is
masked:

* HTML is reduced to its visible text with selectolax (``script``, ``style``, ``noscript`` and
  ``template`` dropped; the title kept), then normalized and cut into words as the similarity
  toolkit does (:mod:`nshash.text.tokenize`);
* the requested path echoed in the page (raw, URL-decoded, without its leading slash, or its
  last segment) is removed;
* every word holding a digit (times, dates, request ids, counters) becomes ``0``.

A candidate is the not-found page when its words match the baseline's in order (similarity
``1 - changed / (len(a) + len(b))``, with *changed* the words inserted or deleted, at least
``threshold``) **and** no more than ``tolerance`` words changed. The ratio alone would call a
short real page inside a long site template a not-found page (the template dominates both);
the count alone would fail on short pages, where a few words are everything.

:class:`SiteProbe` does the fetching (``urllib``, loopback or any HTTP server): it fetches two
random paths, calibrates the detector with the difference between the two (a site that puts a
clock or a "popular pages" list on its error page earns the slack it needs), then classifies
paths: status 404 or 410 is not found outright; a redirect to the same place the random paths
were redirected to is a soft 404; a status different from the random paths' is a real answer;
otherwise the text decides.

Example:
    >>> detector = Soft404Detector()
    >>> missing = "<h1>Oops</h1><p>/no-such-page was not found (ref 7f3a).</p>"
    >>> other = "<h1>Oops</h1><p>/about-us was not found (ref 0c21).</p>"
    >>> detector.is_soft404(missing, other, baseline_path="/no-such-page",
    ...                     candidate_path="/about-us").is_404
    True
"""

from __future__ import annotations

import http.client
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from email.message import Message
from functools import lru_cache
from typing import Any

from ..errors import ConfigError, NSHashError, install_hint
from ..text.normalize import normalize_text
from ..text.tokenize import split_words

__all__ = [
    "Baseline",
    "FetchError",
    "Response",
    "SiteProbe",
    "Soft404Detector",
    "Verdict",
    "fetch",
    "page_words",
    "visible_text",
]

#: Elements whose content a browser does not show.
HIDDEN_TAGS = ("script", "style", "noscript", "template")

#: Statuses that mean "not found" whatever the page says.
NOT_FOUND_STATUSES = frozenset({404, 410})

_LOOKS_LIKE_HTML = re.compile(r"<(?:!doctype|!--|/?[a-zA-Z][a-zA-Z0-9-]*[\s/>])", re.IGNORECASE)
_HAS_DIGIT = re.compile(r"\d")
_MASKED = "0"
_MIN_SEGMENT = 3
#: Characters :meth:`SiteProbe.url_for` leaves alone: reserved ones and ``%`` (already quoted).
_URL_SAFE = "/%?=&#:;@+!$'()*,~"


class FetchError(NSHashError):
    """A page could not be fetched: connection refused, timeout, DNS failure."""

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        #: The URL that failed.
        self.url = url


@dataclass(frozen=True)
class Verdict:
    """Whether a page is the site's not-found page, how sure, and why."""

    #: True when the page is a not-found page (a real 404/410 or a soft 404).
    is_404: bool
    #: The candidate's text similarity to the not-found page in [0, 1]; 1.0 when a 404 status
    #: or a redirect decided, 0.0 when a status different from the not-found page's decided.
    score: float
    #: One sentence saying what decided.
    reason: str


@lru_cache(maxsize=1)
def _html_parser() -> Any:
    try:
        from selectolax.lexbor import LexborHTMLParser
    except ImportError as exc:  # pragma: no cover - selectolax is in the similarity extra
        raise ConfigError(
            f"HTML pages need selectolax, which is missing: {install_hint('similarity')}."
        ) from exc
    return LexborHTMLParser


#: The deepest nesting of elements a page is parsed with (Chromium's parser stops nesting at
#: 512 too): the HTML parser's time grows with the square of the depth, so 200,000 nested
#: ``<div>`` took it minutes. Tags past this depth are dropped before parsing; their text stays.
MAX_DEPTH = 512

#: An opening or closing tag: whether it closes, and its name.
_TAG = re.compile(r"<(/?)([A-Za-z][^\s/>]*)[^>]*>")

#: Elements without content (never closed), and those a page may leave open (the parser
#: closes them at the next of their kind): neither is counted as depth.
_VOID = frozenset(
    "area base br col embed hr img input link meta param source track wbr"
    " p li dt dd tr td th option".split()
)


def _shallow(page: str) -> str:
    """*page* with every tag that would open an element deeper than :data:`MAX_DEPTH` (and
    the closing tags past that depth) made a space: a linear scan, only for a page with that
    many tags."""
    if page.count("<") <= MAX_DEPTH:
        return page
    depth = 0
    kept: list[str] = []
    last = 0
    for match in _TAG.finditer(page):
        closing, name = match.group(1), match.group(2).lower()
        if name in _VOID or match.group(0).endswith("/>"):
            continue
        if closing:
            depth -= 1
            drop = depth >= MAX_DEPTH
            depth = max(depth, 0)
        else:
            drop = depth >= MAX_DEPTH
            depth += 1
        if drop:  # (a space where it was: its text stays apart from its neighbours')
            kept.append(page[last : match.start()])
            kept.append(" ")
            last = match.end()
    if not kept:
        return page
    kept.append(page[last:])
    return "".join(kept)


def visible_text(page: str) -> str:
    """The text a browser shows for *page* (HTML or plain text), title included.

    Plain text (no tag in it) is returned as it is.

    Raises:
        ConfigError: *page* is not a str.

    Example:
        >>> visible_text("<title>Hi</title><script>x()</script><p>there &amp; back</p>")
        'Hi there & back'
    """
    if not isinstance(page, str):
        raise ConfigError(f"A page must be a str, not {type(page).__name__!r}.")
    if not _LOOKS_LIKE_HTML.search(page):
        return page
    tree = _html_parser()(_shallow(page))
    tree.strip_tags(list(HIDDEN_TAGS))
    root = tree.root
    if root is None:
        return ""
    return " ".join(str(root.text(separator=" ")).split())


def _path_variants(path: str) -> set[str]:
    """The forms in which a page may echo its requested path, normalized.

    The path as asked for and URL-decoded, with and without its query, with and without its
    slashes, and its last segment; forms without a slash must be at least 3 characters long
    (``/a`` may be echoed, but removing every ``a`` would remove too much).
    """
    forms = {path, path.split("?", 1)[0].split("#", 1)[0]}
    for form in list(forms):
        forms.add(urllib.parse.unquote(form))
        forms.add(urllib.parse.unquote_plus(form))
    for form in list(forms):
        forms.add(form.strip("/"))
        forms.add(form.rstrip("/").rsplit("/", 1)[-1])
    normalized = {normalize_text(form).strip() for form in forms}
    return {f for f in normalized if "/" in f or len(f) >= _MIN_SEGMENT}


def _echo_pattern(form: str) -> str:
    """A regex for *form* standing alone: not glued to letters or digits on either side."""
    head = r"(?<![^\W_])" if form[0].isalnum() else ""
    tail = r"(?![^\W_])" if form[-1].isalnum() else ""
    return head + re.escape(form) + tail


def page_words(page: str, *paths: str | None) -> list[str]:
    """The words of a page as the detector compares them: visible, paths removed, digits masked.

    Args:
        page: HTML or plain text.
        paths: the paths the page was served for (the one asked for, the one redirected to);
            their echoes are removed where they stand alone (``/new`` does not eat ``news``).

    Returns:
        The words in page order, each word holding a digit replaced by ``"0"``.

    Example:
        >>> page_words("<p>Sorry, /old-news is gone (12:03:55).</p>", "/old-news")
        ['sorry', 'is', 'gone', '0', '0', '0']
    """
    for path in paths:
        if path is not None:
            _check_path(path)
    text = normalize_text(visible_text(page))
    forms = {form for path in paths if path for form in _path_variants(path)}
    if forms:
        # Longest first, so that "/a/b" goes before its segment "b" can split it.
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        text = re.sub("|".join(_echo_pattern(f) for f in ordered), " ", text)
    return [_MASKED if _HAS_DIGIT.search(w) else w for w in split_words(text)]


def _check_path(path: object) -> None:
    """Refuse a path that is not a str."""
    if not isinstance(path, str):
        raise ConfigError(f"A path is a str, not {type(path).__name__!r}.")


def _check_words(*lists: object) -> None:
    """Refuse what is not a list of words (as :func:`page_words` gives them)."""
    for words in lists:
        if not isinstance(words, list | tuple) or not all(isinstance(w, str) for w in words):
            raise ConfigError(f"Words are a list of str, not {words!r:.60}.")


def _check_timeout(timeout: object) -> None:
    """Refuse a timeout that is not a positive number of seconds."""
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not number or not 0 < timeout < float("inf"):  # type: ignore[operator]
        raise ConfigError(f"A timeout is a positive number of seconds, not {timeout!r}.")


def _compare_words(a: list[str], b: list[str]) -> tuple[float, int]:
    """(similarity, changed words) of two word sequences by insertions and deletions."""
    from rapidfuzz.distance import Indel

    if a == b:
        return 1.0, 0
    changed = int(Indel.distance(a, b))
    return max(0.0, min(1.0, 1.0 - changed / (len(a) + len(b)))), changed


class Soft404Detector:
    """Tells whether a page is a site's not-found page, given the site's baseline.

    Use :meth:`is_soft404` with pages you fetched yourself, or :class:`SiteProbe` to fetch,
    calibrate and classify in one go.

    Args:
        threshold: the least similarity (in [0, 1]) of a not-found page to the baseline.
        tolerance: the most words in which a not-found page may differ from the baseline.

    Raises:
        ConfigError: a bound is out of range.
    """

    def __init__(self, threshold: float = 0.9, tolerance: int = 5) -> None:
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not (0.0 < threshold <= 1.0)
        ):
            raise ConfigError(f"The threshold must be a number in (0, 1], not {threshold!r}.")
        if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
            raise ConfigError(f"The tolerance must be an int >= 0, not {tolerance!r}.")
        #: The least similarity of a not-found page to the baseline.
        self.threshold = float(threshold)
        #: The most words a not-found page may change.
        self.tolerance = tolerance

    def __repr__(self) -> str:
        return f"Soft404Detector(threshold={self.threshold!r}, tolerance={self.tolerance!r})"

    def is_soft404(
        self,
        baseline: str,
        candidate: str,
        *,
        baseline_path: str | None = None,
        candidate_path: str | None = None,
    ) -> Verdict:
        """Whether *candidate* is the not-found page that *baseline* shows.

        Args:
            baseline: what the site serves for a path that cannot exist (HTML or text).
            candidate: the page to classify (HTML or text).
            baseline_path: the path *baseline* was served for, so its echo is ignored.
            candidate_path: the path *candidate* was served for, likewise.

        Returns:
            The verdict, with the text similarity as its score.
        """
        return self.compare_words(
            page_words(baseline, baseline_path), page_words(candidate, candidate_path)
        )

    def compare_words(self, baseline: list[str], candidate: list[str]) -> Verdict:
        """:meth:`is_soft404` on the output of :func:`page_words` (to reuse a baseline).

        Raises:
            ConfigError: either is not a list of words.
        """
        _check_words(baseline, candidate)
        score, changed = _compare_words(baseline, candidate)
        detail = f"similarity {score:.3f}, {changed} words changed"
        if score < self.threshold:
            return Verdict(
                False,
                score,
                f"text differs from the not-found page ({detail}; "
                f"a match needs {self.threshold:.3f})",
            )
        if changed > self.tolerance:
            return Verdict(
                False,
                score,
                f"text differs from the not-found page ({detail}; a match allows {self.tolerance})",
            )
        return Verdict(True, score, f"text matches the not-found page ({detail})")

    def calibrated(self, first: list[str], second: list[str]) -> Soft404Detector:
        """A detector with the slack two not-found pages of one site show between them.

        The threshold drops by how far the two fall short of similarity 1, the tolerance
        grows by the words they change.

        Args:
            first: :func:`page_words` of the not-found page for one random path.
            second: the same for another random path.
        """
        score, changed = _compare_words(first, second)
        threshold = max(self.threshold - (1.0 - score), 1e-9)
        return Soft404Detector(threshold=threshold, tolerance=self.tolerance + changed)


@dataclass(frozen=True)
class Response:
    """A fetched page: where it was asked for, where it ended after redirects, what it said."""

    url: str
    final_url: str
    status: int
    text: str

    @property
    def redirected(self) -> bool:
        """Whether the server sent the request somewhere else."""
        return _place(self.final_url) != _place(self.url)


def _place(url: str) -> tuple[str, str, str]:
    """Scheme, host and path of *url*: where a redirect lands, whatever its query says."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower(), parts.path or "/"


def _decode(body: bytes, headers: Message | None) -> str:
    charset = (headers.get_content_charset() if headers is not None else None) or "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


#: The User-Agent :func:`fetch` sends unless told otherwise.
USER_AGENT = "nshash-soft404/1 (+https://pypi.org/project/nshash/)"


def fetch(
    url: str,
    *,
    timeout: float = 10.0,
    max_bytes: int = 2_000_000,
    user_agent: str = USER_AGENT,
) -> Response:
    """Fetch *url* with ``urllib``, following redirects; error statuses are responses too.

    Args:
        url: an ``http`` or ``https`` URL.
        timeout: seconds to wait for the connection and for each read.
        max_bytes: read at most this much of the body.
        user_agent: the User-Agent header.

    Raises:
        ConfigError: *url* is not an http(s) URL.
        FetchError: the server could not be reached or did not answer in time.
    """
    if not isinstance(url, str):
        raise ConfigError(f"A URL is a str, not {type(url).__name__!r}.")
    _check_timeout(timeout)
    try:
        scheme = urllib.parse.urlsplit(url).scheme
    except ValueError as exc:  # an unclosed [ipv6 host
        raise ConfigError(f"Cannot fetch the malformed URL {url!r}: {exc}.") from None
    if scheme not in ("http", "https"):
        raise ConfigError(f"Only http and https URLs can be fetched, not {url!r}.")
    request = urllib.request.Request(url, headers={"User-Agent": user_agent})
    try:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                body = answer.read(max_bytes)
                return Response(url, answer.geturl(), answer.status, _decode(body, answer.headers))
        except urllib.error.HTTPError as error:
            with error:
                body = error.read(max_bytes)
            return Response(url, error.geturl() or url, error.code, _decode(body, error.headers))
    except ValueError as exc:  # http.client.InvalidURL and urllib's "unknown url type"
        raise ConfigError(f"Cannot fetch the malformed URL {url!r}: {exc}.") from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(f"Could not fetch {url!r}: {reason}.", url=url) from exc


@dataclass(frozen=True)
class Baseline:
    """A site's answer for a path that cannot exist, and the detector calibrated on it."""

    #: The answer for the first random path.
    response: Response
    #: Its words as :func:`page_words` gives them.
    words: list[str]
    #: The detector with the slack seen between two random paths.
    detector: Soft404Detector


class SiteProbe:
    """Probes a site for soft 404s: random paths give the baseline, then paths are classified.

    Baselines are fetched once per file extension (``/x.php`` may be served by another
    handler than ``/x``), two random paths each, under *base_url*.

    Args:
        base_url: the site's root, such as ``"https://example.org"`` (a path prefix is kept).
        detector: the text detector to calibrate (default: ``Soft404Detector()``).
        timeout: seconds per request.
        max_bytes: the most of a body that is read.

    Raises:
        ConfigError: *base_url* is not an http(s) URL.

    Example:
        ``SiteProbe("http://127.0.0.1:8000").check("/admin")`` gives a :class:`Verdict`.
    """

    def __init__(
        self,
        base_url: str,
        *,
        detector: Soft404Detector | None = None,
        timeout: float = 10.0,
        max_bytes: int = 2_000_000,
    ) -> None:
        try:
            parts = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
        except ValueError:  # an unclosed [ipv6 host
            parts = None
        _check_timeout(timeout)
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"The base URL must be an http(s) URL with a host, not {base_url!r}.")
        self.base_url = base_url.rstrip("/")
        self.detector = detector if detector is not None else Soft404Detector()
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._baselines: dict[str, Baseline] = {}

    def url_for(self, path: str) -> str:
        """The URL of *path* on the site; characters a URL cannot hold are percent-encoded.

        Raises:
            ConfigError: *path* is not a str.
        """
        _check_path(path)
        return self.base_url + "/" + urllib.parse.quote(path.lstrip("/"), safe=_URL_SAFE)

    def _fetch(self, path: str) -> Response:
        return fetch(self.url_for(path), timeout=self.timeout, max_bytes=self.max_bytes)

    @staticmethod
    def _extension(path: str) -> str:
        name = path.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        return name[name.rfind(".") :].lower() if "." in name.strip(".") else ""

    def baseline(self, path: str = "/") -> Baseline:
        """The not-found answer for paths like *path* (same extension), fetched once."""
        extension = self._extension(path)
        if extension not in self._baselines:
            paths = [f"/{secrets.token_hex(10)}{extension}" for _ in range(2)]
            first, second = (self._fetch(p) for p in paths)
            words = [page_words(r.text, p) for r, p in zip((first, second), paths, strict=True)]
            detector = self.detector
            if (first.status, _place(first.final_url)) == (second.status, _place(second.final_url)):
                detector = detector.calibrated(words[0], words[1])
            self._baselines[extension] = Baseline(first, words[0], detector)
        return self._baselines[extension]

    def check(self, path: str) -> Verdict:
        """Fetch *path* and tell whether it is a not-found page.

        Raises:
            FetchError: the site could not be reached.
        """
        answer = self._fetch(path)
        if answer.status in NOT_FOUND_STATUSES:
            return Verdict(True, 1.0, f"status {answer.status}")
        base = self.baseline(path)
        missing = base.response
        if missing.status in NOT_FOUND_STATUSES:
            return Verdict(
                False, 0.0, f"status {answer.status}; missing pages answer {missing.status}"
            )
        if (
            answer.redirected
            and missing.redirected
            and (_place(answer.final_url) == _place(missing.final_url))
        ):
            return Verdict(True, 1.0, f"redirected to {answer.final_url} like missing pages")
        if answer.status != missing.status:
            return Verdict(
                False, 0.0, f"status {answer.status}; missing pages answer {missing.status}"
            )
        # After a redirect the page may echo the path it landed on rather than the one asked.
        landed = urllib.parse.urlsplit(answer.final_url)._replace(scheme="", netloc="")
        words = page_words(answer.text, path, landed.geturl())
        return base.detector.compare_words(base.words, words)

    def scan(self, paths: list[str]) -> dict[str, Verdict | FetchError]:
        """:meth:`check` every path; a path that cannot be fetched maps to its error."""
        if isinstance(paths, str) or not isinstance(paths, Iterable):  # ("abc": a, b and c)
            raise ConfigError(f"scan takes a list of paths, not a {type(paths).__name__!r}.")
        results: dict[str, Verdict | FetchError] = {}
        for path in paths:
            try:
                results[path] = self.check(path)
            except FetchError as error:
                results[path] = error
        return results
