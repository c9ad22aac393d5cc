"""Scan a site for soft 404s: which paths are real pages, which the site's "not found" page?

Usage::

    python example/soft404_scan.py BASE_URL [PATH ...]

The script asks the site for two random paths that cannot exist, keeps the answer as the
site's not-found page, then fetches each PATH (default: a few common ones) and prints one
tab-separated line per path::

    not-found  1.000  /admin       redirected to http://.../error like missing pages
    found      0.412  /contact     text differs from the not-found page (...)

It exits 0 when every path was fetched, 1 when some could not be, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from nshash import ConfigError
from nshash.toolkit.soft404 import FetchError, SiteProbe, Soft404Detector

#: What is probed when no path is given.
DEFAULT_PATHS = ["/", "/index.html", "/admin", "/login", "/robots.txt", "/backup.zip"]


def main(argv: Sequence[str] | None = None) -> int:
    """Probe the paths given on the command line and print a verdict for each."""
    parser = argparse.ArgumentParser(description="Tell a site's real pages from its soft 404s.")
    parser.add_argument("base_url", help="the site's root, such as https://example.org")
    parser.add_argument("paths", nargs="*", help="paths to classify (default: common ones)")
    parser.add_argument("--threshold", type=float, default=0.9,
                        help="least text similarity of a not-found page (default 0.9)")
    parser.add_argument("--tolerance", type=int, default=5,
                        help="most words a not-found page may change (default 5)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    args = parser.parse_args(argv)
    try:
        detector = Soft404Detector(threshold=args.threshold, tolerance=args.tolerance)
        probe = SiteProbe(args.base_url, detector=detector, timeout=args.timeout)
    except ConfigError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    failed = False
    for path in args.paths or DEFAULT_PATHS:
        try:
            verdict = probe.check(path)
        except (FetchError, ConfigError) as error:
            failed = True
            print(f"error    \t-    \t{path}\t{error}")
            continue
        label = "not-found" if verdict.is_404 else "found"
        print(f"{label:<9}\t{verdict.score:.3f}\t{path}\t{verdict.reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
