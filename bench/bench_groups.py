"""How fast ``GET /v1/groups`` ranks the hot stories, and finds stories by headline, site and
range, on a store of a million documents.

Builds a synthetic store (default 1,000,000 documents over 30 days), then times the ranking at
three levels: the store's ``hot()`` (the per-hour counts summed over the window), the library's
``NSHash.hot()`` (plus each top story's group, activity and members' sites), and the HTTP route
on a real ``nshash serve`` (uvicorn in a subprocess) over loopback. Then the same for a search:
``NSHash.find()`` and ``GET /v1/groups?q=TERM&site=SITE&from=...&to=...`` (a headline word, one
of the 200 sites, a range of ``--find-days`` days ending a day ago), the first call (the story
cards read from the store) apart from the median of the next ones.

**The synthetic store.** Stories arrive at random times over ``--days``; a story's size follows
a heavy-tailed (Pareto) law, from one copy to ``--max-size``, and its copies come in over about
half a day after it breaks. Documents are fed in time order, as a crawler sees them, each with a
doc id, a title (the first copy), a url and one of 200 sites. They go in through the public
bulk path: :meth:`nshash.NSHash.add_prepared` with a ready :class:`nshash.DocPrint` per document
(one per story, so copies join by the exact-text table) and a :class:`nshash.DocMeta`, which
skips fingerprinting only: the store does the same assignment and the same activity writes as
for a real article.

Usage::

    python3 bench/bench_groups.py                       # 1M documents, memory store
    python3 bench/bench_groups.py --docs 200000 --repeat 20
    python3 bench/bench_groups.py --store leveldb:///tmp/bench.ldb

Wall-clock figures on a shared machine are noisy: each is the median (and the 95th percentile)
of ``--repeat`` requests.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nshash import DocMeta, DocPrint, NSHash  # noqa: E402
from nshash.methods.nshash.core import parse_window  # noqa: E402
from nshash.results import HOUR  # noqa: E402


def synthetic(docs: int, days: float, max_size: int, now: float, seed: int) -> list[tuple]:
    """(time, story, copy number) for *docs* documents, in time order."""
    rng = random.Random(seed)
    span = days * 86400
    out: list[tuple[float, int, int]] = []
    story = 0
    while len(out) < docs:
        story += 1
        size = min(max_size, int(rng.paretovariate(1.1)), docs - len(out))
        start = now - span * rng.random()
        for copy in range(size):
            t = start + (rng.expovariate(1 / 43200) if copy else 0.0)
            out.append((min(t, now), story, copy))
    out.sort()
    return out


#: The words of the synthetic headlines: each story's title has three of them.
TOPICS = [f"topic{i:03d}" for i in range(300)]


def headline(story: int) -> str:
    """The title of a story's first copy."""
    rng = random.Random(story)
    return f"Story {story}: " + " ".join(rng.sample(TOPICS, 3))


def build(url: str, docs: int, days: float, max_size: int, now: float, seed: int) -> float:
    """Fill the store at *url*; returns the seconds it took."""
    plan = synthetic(docs, days, max_size, now, seed)
    began = time.perf_counter()
    mask = (1 << 64) - 1
    with NSHash.open(url, track=True) as nsh:
        for i, (t, story, copy) in enumerate(plan):
            h = (story * 0x9E3779B97F4A7C15) & mask
            doc = DocPrint((h,), (h >> 11,), h ^ 1)
            site = f"site{(story * 7 + copy) % 200}.example"
            meta = DocMeta(int(t), f"https://{site}/{story}/{copy}", site)
            title = headline(story) if copy == 0 else None
            nsh.add_prepared(doc, f"d{i}", title=title, meta=meta)
            if i and i % 200_000 == 0:
                print(f"  {i:,} documents, {time.perf_counter() - began:.0f} s", file=sys.stderr)
        if hasattr(nsh.store, "save"):
            nsh.store.save()
        stats = nsh.stats()
    print(
        f"built {stats.documents:,} documents in {stats.groups:,} stories over {days:g} days"
        f" in {time.perf_counter() - began:.1f} s ({url})"
    )
    return time.perf_counter() - began


def timed(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median and 95th percentile of *repeat* calls of *fn*, in milliseconds."""
    fn()  # warm up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


def serve(url: str, port: int, directory: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
    path = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update({"NSHASH_STORE_URL": url, "PYTHONPATH": path})
    log = open(Path(directory) / "serve.log", "wb")  # noqa: SIM115 - kept open for the child
    cmd = [sys.executable, "-m", "nshash", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--max-size", type=int, default=3000, help="largest story (copies)")
    parser.add_argument("--window", default="24h")
    parser.add_argument("--limit", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--store", help="store URL (default: a memory snapshot in a temp dir)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--no-http", action="store_true", help="skip the real-server timing")
    parser.add_argument(
        "--no-build",
        action="store_true",
        help="time the store at --store as it is (one this bench built within the last hours)",
    )
    parser.add_argument("--term", default="topic042", help="the search term timed")
    parser.add_argument("--site", default="site7.example", help="the site filter timed")
    parser.add_argument(
        "--find-days",
        type=float,
        default=3.0,
        help="the searched range, in days (ending a day ago)",
    )
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="bench-groups-")
    url = args.store or f"memory://{directory}/bench.pkl"
    now = time.time()
    if args.no_build:
        if not args.store:
            parser.error("--no-build needs --store")
    else:
        build(url, args.docs, args.days, args.max_size, now, args.seed)

    seconds = parse_window(args.window)
    end_at = datetime.fromtimestamp(now - 86400, timezone.utc).strftime("%Y-%m-%dT%H:%M")
    start_at = datetime.fromtimestamp(now - 86400 * (1 + args.find_days), timezone.utc).strftime(
        "%Y-%m-%dT%H:%M"
    )
    start_hour = int((now - 86400 * (1 + args.find_days)) // 60) * 60 // HOUR
    end_hour = (int((now - 86400) // 60) * 60 - 1) // HOUR
    with NSHash.open(url, readonly=url.startswith("memory"), track=True) as nsh:
        documents = nsh.stats().documents
        first, last = int((now - seconds) // HOUR), int(now // HOUR)
        ranked = nsh.store.hot(first, last, args.limit)
        active = len(nsh.store.hot(first, last, 10**9))
        in_window = sum(n for _, n in nsh.store.hot(first, last, 10**9))
        print(
            f"window {args.window}: {in_window:,} documents of {active:,} stories;"
            f" top {args.limit} from {ranked[0][1]} copies down to {ranked[-1][1]}"
        )
        store_ms = timed(lambda: nsh.store.hot(first, last, args.limit), args.repeat)
        lib_ms = timed(lambda: nsh.hot(args.window, args.limit, now=now), args.repeat)
        find = {"site": args.site, "start": start_at, "end": end_at, "limit": args.limit}
        in_range = nsh.store.hot(start_hour, end_hour, 10**9)
        t0 = time.perf_counter()
        found = nsh.find(args.term, **find)
        cold_ms = (time.perf_counter() - t0) * 1000
        find_ms = timed(lambda: nsh.find(args.term, **find), args.repeat)
        term_ms = timed(lambda: nsh.find(args.term, **{**find, "site": None}), args.repeat)
    print(
        f"search {args.term!r} on {args.site} from {start_at} to {end_at}: {len(in_range):,}"
        f" stories in the range, {found.total} match"
    )
    print(f"{'level':<42} {'median ms':>10} {'p95 ms':>8}")
    print(f"{'store.hot (sum of hourly counts)':<42} {store_ms[0]:>10.2f} {store_ms[1]:>8.2f}")
    print(f"{'NSHash.hot (+ groups, activity, sites)':<42} {lib_ms[0]:>10.2f} {lib_ms[1]:>8.2f}")
    print(f"{'NSHash.find, first call (cards read)':<42} {cold_ms:>10.2f} {'':>8}")
    print(f"{'NSHash.find (term, site, range)':<42} {find_ms[0]:>10.2f} {find_ms[1]:>8.2f}")
    print(f"{'NSHash.find (term, range)':<42} {term_ms[0]:>10.2f} {term_ms[1]:>8.2f}")
    if args.no_http:
        return 0

    port = 18000 + os.getpid() % 2000
    proc = serve(url, port, directory)
    base = f"http://127.0.0.1:{port}"
    try:
        began = time.perf_counter()
        while True:
            if proc.poll() is not None:
                print((Path(directory) / "serve.log").read_text(), file=sys.stderr)
                return 1
            try:
                if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        print(f"nshash serve loaded the store in {time.perf_counter() - began:.1f} s")
        path = f"/v1/groups?since={args.window}&limit={args.limit}"
        with httpx.Client(base_url=base, timeout=30) as http:
            body = http.get(path).json()
            assert len(body["groups"]) == min(args.limit, active), body
            http_ms = timed(lambda: http.get(path).raise_for_status(), args.repeat)
            query = {"q": args.term, "site": args.site, "from": start_at, "to": end_at}
            query["limit"] = str(args.limit)
            t0 = time.perf_counter()
            body = http.get("/v1/groups", params=query).json()
            cold_http = (time.perf_counter() - t0) * 1000
            assert body["total"] == found.total, body
            find_http = timed(
                lambda: http.get("/v1/groups", params=query).raise_for_status(), args.repeat
            )
        label = f"GET {path} (loopback)"
        print(f"{label:<42} {http_ms[0]:>10.2f} {http_ms[1]:>8.2f}")
        print(f"{'GET /v1/groups?q&site&from&to, first call':<42} {cold_http:>10.2f} {'':>8}")
        print(f"{'GET /v1/groups?q&site&from&to':<42} {find_http[0]:>10.2f} {find_http[1]:>8.2f}")
        print(f"search / since=24h, same run: {find_http[0] / http_ms[0]:.2f}")
        for name, ms in (("since", http_ms[0]), ("search", find_http[0])):
            verdict = "under" if ms < 50 else "OVER"
            print(f"target ({name}): median under 50 ms on {documents:,} documents: {verdict}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
