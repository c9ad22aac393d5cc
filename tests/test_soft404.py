"""Soft-404 detection: the text detector, fetching, and a scan of a real site on loopback."""

from __future__ import annotations

import html
import importlib.util
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from nshash import ConfigError, NSHashError
from nshash.toolkit.soft404 import (
    FetchError,
    SiteProbe,
    Soft404Detector,
    fetch,
    page_words,
    visible_text,
)

ROOT = Path(__file__).resolve().parents[1]

# A site template as wide as many real ones: navigation, a blurb, a long footer.
HEADER = (
    "<header><nav><a href='/'>Home</a> <a href='/articles'>Articles</a> "
    "<a href='/contact'>Contact</a> <a href='/about.php'>About</a></nav>"
    "<p>The Riverside Gazette: local news, opinion and events from the valley towns, "
    "written by volunteers since the spring of the flood year.</p></header>"
)
FOOTER = (
    "<footer><p>Subscribe to our weekly newsletter to get the stories of the week, the "
    "events calendar and the letters to the editor delivered to your inbox every Friday "
    "morning. You can unsubscribe at any time with one click.</p><p>The Riverside Gazette "
    "is a non-profit publication. All rights reserved. Reproduction of articles requires the "
    "written permission of the editors, except short quotations with a link to the "
    "original page.</p><p>Privacy policy | Terms of use | Accessibility | Advertise with "
    "us | Report a correction</p></footer>"
)
SIDEBAR = (
    "<aside><h2>Most read this month</h2><ul>"
    "<li>Flood defences: what the new embankment will and will not protect</li>"
    "<li>The last blacksmith of the valley hangs up his hammer after fifty years</li>"
    "<li>School bus timetable changes for the winter term, route by route</li>"
    "<li>Letters: readers argue about the parking charges at the market square</li>"
    "<li>Recipe corner: plum cake from the bakery on the bridge, step by step</li>"
    "<li>Football: the valley team wins the county cup in a penalty shoot-out</li>"
    "<li>Obituary: the librarian who catalogued every book in the old reading room</li>"
    "</ul><h2>Sections</h2><p>News, Opinion, Sport, Culture, Food, Nature, History, "
    "Events, Obituaries, Letters, Classifieds, Weather, Traffic, Schools, Health</p></aside>"
)
STYLE = "<style>body { font-family: serif } .nav a { color: #336 }</style>"
SCRIPT = "<script>window.analytics = {page: location.pathname, ts: Date.now()};</script>"

ARTICLE = (
    "The council voted on Tuesday to reopen the old ferry landing. The landing closed "
    "eleven years ago after a storm damaged the pier, and residents on both banks have "
    "campaigned for its return ever since. Repairs will start in the autumn."
)
LONG_READ = " ".join(
    f"Chapter {i}: the mill on the {side} bank kept its wheel turning through the winter, "
    f"and the miller's family recorded every flood in a ledger that the museum now keeps."
    for i, side in zip(range(1, 25), ["north", "south"] * 12, strict=True)
)
CHINESE_ARTICLE = "市议会周二投票决定重新开放旧渡口。渡口十一年前因风暴损坏码头而关闭。"


def page(title: str, body: str) -> bytes:
    """A full HTML page in the site's template."""
    return (
        f"<!doctype html><html><head><title>{html.escape(title)} - Riverside Gazette</title>"
        f"{STYLE}{SCRIPT}</head><body>{HEADER}<main>{body}</main>{SIDEBAR}"
        f"<noscript>Please enable JavaScript for comments.</noscript>"
        f"<template><p>Comment by {{name}}</p></template>{FOOTER}</body></html>"
    ).encode()


def not_found_page(path: str) -> bytes:
    """The site's custom not-found page: echoes the path, a request id and the time."""
    shown = html.escape(urllib.parse.unquote(path))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + f".{time.time_ns() % 10**6:06d}"
    return page(
        "Page not found",
        f"<h1>Page not found</h1><p>Sorry, we could not find <code>{shown}</code>. "
        f"It may have moved or never existed.</p><p>Request {uuid.uuid4().hex} served at "
        f"{stamp}.</p><p>Try the search box or go back to the front page.</p>",
    )


PAGES: dict[str, tuple[int, bytes]] = {
    "/": (200, page("Front page", f"<h1>Front page</h1><p>{ARTICLE}</p><p>{LONG_READ[:600]}</p>")),
    "/articles/ferry": (200, page("Ferry landing", f"<h1>Ferry to reopen</h1><p>{ARTICLE}</p>")),
    "/articles/mill": (200, page("The mill", f"<h1>The mill ledgers</h1><p>{LONG_READ}</p>")),
    "/contact": (200, page("Contact", "<p>Write to desk@gazette.example.</p>")),
    "/about.php": (200, page("About", "<p>About us: a small team of volunteers.</p>")),
    "/zh/news": (200, page("新闻", f"<h1>渡口</h1><p>{CHINESE_ARTICLE}</p>")),
    "/private": (404, page("Private", "<p>This area is private.</p>")),
    "/removed": (410, page("Removed", "<p>This article was withdrawn.</p>")),
    "/forbidden": (403, page("Forbidden", "<p>Staff only.</p>")),
}
REDIRECTS = {"/old-contact": "/contact"}

# What a correct scan says about each path.
EXPECTED = {
    "/": "found",
    "/articles/ferry": "found",
    "/articles/mill": "found",
    "/contact": "found",
    "/about.php": "found",
    "/zh/news": "found",
    "/old-contact": "found",
    "/forbidden": "found",
    "/private": "not-found",
    "/removed": "not-found",
    "/admin": "not-found",
    "/a": "not-found",
    "/articles/ferry-landing-reopening-date-2024": "not-found",
    "/no/such%20page": "not-found",
    "/backup.zip": "not-found",
    "/admin.php": "not-found",
    "/新闻/不存在": "not-found",
}


class SiteHandler(BaseHTTPRequestHandler):
    """The Riverside Gazette: real pages, real 404 and 410, soft 404 for everything else.

    Missing ``.php`` paths redirect to ``/error?from=PATH``, which answers 200 with the
    not-found page; every other missing path answers 200 with it directly.
    """

    # Headers and body go out in two writes; without this, Nagle's algorithm and the client's
    # delayed ACK add 40 ms to every request.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        """Keep the test output quiet."""

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        """Serve one request."""
        parts = urllib.parse.urlsplit(self.path)
        if parts.path in PAGES:
            self._send(*PAGES[parts.path])
        elif parts.path in REDIRECTS:
            self._send(301, b"", {"Location": REDIRECTS[parts.path]})
        elif parts.path == "/error":
            wanted = urllib.parse.parse_qs(parts.query).get("from", ["?"])[0]
            self._send(200, not_found_page(wanted))
        elif parts.path.endswith(".php"):
            self._send(302, b"", {"Location": "/error?from=" + urllib.parse.quote(self.path)})
        else:
            self._send(200, not_found_page(self.path))


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The test site on a free loopback port, served from a thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SiteHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            # urllib honours http_proxy; loopback must not go through one.
            patch.setenv("no_proxy", "127.0.0.1,localhost")
            patch.setenv("NO_PROXY", "127.0.0.1,localhost")
            yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def scan_example() -> ModuleType:
    """example/soft404_scan.py, imported as a module."""
    path = ROOT / "example" / "soft404_scan.py"
    spec = importlib.util.spec_from_file_location("soft404_scan", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_scan(output: str) -> dict[str, str]:
    """{path: label} from the example's tab-separated lines."""
    labels = {}
    for line in output.splitlines():
        label, _score, path, _reason = line.split("\t")
        labels[path] = label.strip()
    return labels


class TestVisibleText:
    def test_hidden_elements_dropped(self) -> None:
        """Scripts, styles, noscript and templates vanish; the title and body text stay."""
        text = visible_text(PAGES["/contact"][1].decode())
        assert "Contact - Riverside Gazette" in text
        assert "Write to desk@gazette.example." in text
        for hidden in ("font-family", "analytics", "enable JavaScript", "Comment by"):
            assert hidden not in text

    def test_entities_decoded(self) -> None:
        """Character references become the characters they stand for."""
        assert visible_text("<p>Fish &amp; chips &lt;3</p>") == "Fish & chips <3"

    def test_plain_text_kept(self) -> None:
        """Text without tags passes through, even with a lone angle bracket."""
        assert visible_text("if a < b then stop") == "if a < b then stop"

    def test_deep_nesting_is_read_in_linear_time(self) -> None:
        """200,000 nested ``<div>`` (1 MB, half what fetch reads) took the parser 104 s: tags
        past 512 deep are set aside, so the text comes in well under a second of CPU, and a
        page of paragraphs left open reads as before."""
        started = time.process_time()
        assert visible_text("<div>" * 200_000 + "deep text") == "deep text"
        assert time.process_time() - started < 5
        open_paragraphs = "".join(f"<p>para {i}" for i in range(2000))
        assert visible_text(open_paragraphs) == " ".join(f"para {i}" for i in range(2000))
        nested = "<div>" * 600 + "inner" + "</div>" * 600 + "<p>after</p>"
        assert visible_text(nested) == "inner after"

    def test_not_a_str(self) -> None:
        """A page that is not a str raises ConfigError."""
        with pytest.raises(ConfigError) as info:
            visible_text(b"<p>x</p>")  # type: ignore[arg-type]
        assert info.type is ConfigError


class TestPageWords:
    def test_echo_and_digits_masked(self) -> None:
        """Two not-found pages for different paths and times have the same words."""
        first = page_words(not_found_page("/some/missing-page").decode(), "/some/missing-page")
        time.sleep(0.002)
        second = page_words(not_found_page("/other%20thing").decode(), "/other%20thing")
        assert first == second
        assert "missing" not in first and "other" not in second

    def test_echo_only_where_it_stands_alone(self) -> None:
        """Removing the echo of /new leaves the word news alone."""
        assert page_words("news about /new and new", "/new") == ["news", "about", "and"]

    def test_short_bare_forms_kept(self) -> None:
        """A one-letter path is removed with its slash, not as every letter a."""
        assert page_words("see /a for a list", "/a") == ["see", "for", "a", "list"]


class TestDetector:
    def test_same_page_other_path(self) -> None:
        """The not-found page for another path and another moment is a soft 404."""
        verdict = Soft404Detector().is_soft404(
            not_found_page("/x1").decode(),
            not_found_page("/admin").decode(),
            baseline_path="/x1",
            candidate_path="/admin",
        )
        assert verdict.is_404
        assert verdict.score == 1.0
        assert "matches" in verdict.reason

    def test_echo_matters_without_paths(self) -> None:
        """Without the paths, a long echoed path makes the pages differ."""
        long_path = "/articles/ferry-landing-reopening-date-and-other-council-decisions"
        verdict = Soft404Detector().is_soft404(
            not_found_page("/x1").decode(), not_found_page(long_path).decode()
        )
        assert not verdict.is_404

    def test_short_page_in_long_template(self) -> None:
        """A short real page shares most words with the not-found page, yet is no 404."""
        verdict = Soft404Detector().is_soft404(
            not_found_page("/x1").decode(), PAGES["/contact"][1].decode(), baseline_path="/x1"
        )
        assert verdict.score >= 0.9  # the ratio alone would be fooled by the template
        assert not verdict.is_404
        assert "allows 5" in verdict.reason

    def test_short_pages(self) -> None:
        """On short plain-text pages a few words are everything: the ratio decides."""
        detector = Soft404Detector()
        assert not detector.is_soft404("Not found: /x1", "Hello there", baseline_path="/x1").is_404
        assert detector.is_soft404(
            "Not found: /x1", "Not found: /y2", baseline_path="/x1", candidate_path="/y2"
        ).is_404

    def test_long_real_page(self) -> None:
        """A long real page scores low against the not-found page."""
        verdict = Soft404Detector().is_soft404(
            not_found_page("/x1").decode(), PAGES["/articles/mill"][1].decode()
        )
        assert not verdict.is_404
        assert verdict.score < 0.6

    def test_both_blank(self) -> None:
        """A blank page is the blank not-found page."""
        assert Soft404Detector().is_soft404("", "<html><body> </body></html>").is_404

    def test_calibrated_adds_slack(self) -> None:
        """Calibration adds the difference of two not-found pages to the detector's slack."""
        detector = Soft404Detector(threshold=0.9, tolerance=5)
        first = page_words("sorry not found today is monday")
        second = page_words("sorry not found today is tuesday")
        calibrated = detector.calibrated(first, second)
        assert calibrated.tolerance == 7
        assert calibrated.threshold == pytest.approx(0.9 - 2 / 12)
        assert detector.calibrated(first, first).tolerance == 5

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"threshold": 0}, "threshold"),
            ({"threshold": 1.5}, "threshold"),
            ({"threshold": "high"}, "threshold"),
            ({"tolerance": -1}, "tolerance"),
            ({"tolerance": 2.5}, "tolerance"),
        ],
    )
    def test_bad_settings(self, kwargs: dict[str, object], match: str) -> None:
        """Out-of-range settings raise ConfigError quoting the value."""
        with pytest.raises(ConfigError, match=match) as info:
            Soft404Detector(**kwargs)  # type: ignore[arg-type]
        assert info.type is ConfigError
        assert repr(next(iter(kwargs.values()))) in str(info.value)


class TestFetch:
    def test_error_statuses_are_responses(self, site: str) -> None:
        """A 404 answer is a response with its status and body, not an exception."""
        answer = fetch(site + "/private")
        assert answer.status == 404
        assert "This area is private." in answer.text
        assert not answer.redirected

    def test_redirect_followed(self, site: str) -> None:
        """Redirects are followed and the final URL is kept."""
        answer = fetch(site + "/old-contact")
        assert answer.redirected
        assert answer.final_url == site + "/contact"
        assert answer.status == 200

    def test_connection_refused(self) -> None:
        """A port nobody listens on raises FetchError naming the URL."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        with pytest.raises(FetchError) as info:
            fetch(url, timeout=5)
        assert info.type is FetchError
        assert isinstance(info.value, NSHashError)
        assert info.value.url == url

    @pytest.mark.parametrize("url", ["ftp://example.org/", "file:///etc/passwd", "example.org"])
    def test_only_http(self, url: str) -> None:
        """Only http and https URLs are fetched."""
        with pytest.raises(ConfigError, match="http") as info:
            fetch(url)
        assert info.type is ConfigError

    @pytest.mark.parametrize("url", ["ftp://example.org", "127.0.0.1:8000", "http://", 42])
    def test_probe_needs_http_base(self, url: object) -> None:
        """SiteProbe refuses a base URL that is not http(s) with a host."""
        with pytest.raises(ConfigError, match="base URL") as info:
            SiteProbe(url)  # type: ignore[arg-type]
        assert info.type is ConfigError


class TestSiteProbe:
    def test_every_path_labelled(self, site: str) -> None:
        """Every probed path of the test site gets the right verdict."""
        probe = SiteProbe(site)
        got = {path: "not-found" if probe.check(path).is_404 else "found" for path in EXPECTED}
        assert got == EXPECTED

    def test_reasons(self, site: str) -> None:
        """Statuses, redirects and text each decide where they should."""
        probe = SiteProbe(site)
        assert probe.check("/private").reason == "status 404"
        assert probe.check("/removed").reason == "status 410"
        assert probe.check("/forbidden").reason == "status 403; missing pages answer 200"
        assert probe.check("/admin.php").reason.startswith("redirected to " + site + "/error")
        assert "matches" in probe.check("/admin").reason
        assert "differs" in probe.check("/old-contact").reason

    def test_baseline_per_extension(self, site: str) -> None:
        """Paths with another extension get their own baseline, fetched once."""
        probe = SiteProbe(site)
        assert probe.baseline("/x.php") is probe.baseline("/y.PHP")
        assert probe.baseline("/x.php").response.redirected
        assert not probe.baseline("/x").response.redirected

    def test_scan_keeps_errors(self) -> None:
        """scan maps a path that cannot be fetched to its FetchError and goes on."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        results = SiteProbe(f"http://127.0.0.1:{port}", timeout=5).scan(["/a", "/b"])
        assert set(results) == {"/a", "/b"}
        assert all(type(r) is FetchError for r in results.values())


class TestExample:
    def test_main_labels_every_path(
        self, site: str, scan_example: ModuleType, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The example script prints the right label for every probed path and exits 0."""
        assert scan_example.main([site, *EXPECTED]) == 0
        assert parse_scan(capsys.readouterr().out) == EXPECTED

    def test_runs_as_a_script(self, site: str) -> None:
        """Run as a program, the script labels the pages the same way."""
        paths = ["/contact", "/admin", "/private", "/admin.php", "/articles/mill"]
        done = subprocess.run(
            [sys.executable, str(ROOT / "example" / "soft404_scan.py"), site, *paths],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert parse_scan(done.stdout) == {p: EXPECTED[p] for p in paths}

    def test_bad_base_url(
        self, scan_example: ModuleType, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A base URL that is not http(s) exits 2 with an error on stderr."""
        assert scan_example.main(["ftp://example.org", "/x"]) == 2
        assert capsys.readouterr().err.startswith("Error: ")

    def test_unreachable_site(
        self, scan_example: ModuleType, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """When the site cannot be reached every path is reported as an error, exit 1."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        assert scan_example.main([f"http://127.0.0.1:{port}", "/a", "/b", "--timeout", "5"]) == 1
        assert parse_scan(capsys.readouterr().out) == {"/a": "error", "/b": "error"}


class TestArguments:
    """What is not a page, a path, a list of words or a timeout is a ConfigError: these were
    AttributeErrors, TypeErrors and ValueErrors from inside (and scan("abc") probed a, b, c)."""

    def test_each(self) -> None:
        from nshash.toolkit.soft404 import SiteProbe, Soft404Detector, fetch, page_words

        detector = Soft404Detector()
        probe = SiteProbe("http://127.0.0.1:1")
        calls = [
            lambda: page_words("<p>x</p>", 5),  # type: ignore[arg-type]
            lambda: detector.is_soft404("a", "b", baseline_path=5),  # type: ignore[arg-type]
            lambda: detector.compare_words(None, []),  # type: ignore[arg-type]
            lambda: fetch(5),  # type: ignore[arg-type]
            lambda: fetch("http://[::1"),
            lambda: fetch("http://127.0.0.1:1", timeout="x"),  # type: ignore[arg-type]
            lambda: fetch("http://127.0.0.1:1", timeout=-1),
            lambda: SiteProbe("http://[::1"),
            lambda: probe.check(None),  # type: ignore[arg-type]
            lambda: probe.url_for(None),  # type: ignore[arg-type]
            lambda: probe.scan(None),  # type: ignore[arg-type]
            lambda: probe.scan("abc"),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(ConfigError):
                call()
