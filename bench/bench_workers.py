"""Benchmark: ``nshash serve --workers 2`` latency, and ``/healthz`` while compares run.

Starts its own ``redis-server`` (several workers need a shared store) and two servers on
loopback, each with two worker processes on the same Redis:

* ``nshash serve --workers 2`` (the command under test);
* the baseline: plain ``uvicorn --factory --workers 2`` on the same app, which binds its
  shared socket without TCP_NODELAY (what ``nshash serve`` did before).

Phases, each against both servers in turn:

1. **kept-alive requests**: one HTTP/1.1 connection sends ``--requests`` ``POST
   /v1/documents`` one after another; median and p99 latency. Target: median < 10 ms.
2. **healthz under compares**: eight clients each post a compare of two texts of about
   512 KB each (a 1 MB body; word measures, which are CPU-bound pure Python) while
   one kept-alive connection polls ``GET /healthz``; its p99 latency. Target: p99 < 50 ms.
   The same poll with no compares running is the baseline of this phase. The machine may
   be shared, so the phase runs ``--rounds`` times and the best p99 counts (as in
   ``bench_service.py``); every round is printed, with the load average.

Usage::

    python bench/bench_workers.py [--requests 300] [--compares 8] [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.redis_server import RedisServer, free_port, redis_server_available  # noqa: E402

#: Compared texts this long (in characters) make a body of about 1 MB.
COMPARE_CHARS = 512 * 1024
WORDS = "river flood town bridge mayor council rain storm road school market harbour".split()


class Server:
    """A service process (group) on a free port, stopped with SIGTERM to its group."""

    def __init__(self, argv: list[str], port: int, env: dict[str, str]) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server on port {port} did not become ready: {argv}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def kept_alive_latencies(port: int, requests: int, tag: str) -> list[float]:
    """Seconds per ``POST /v1/documents`` on one kept-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for i in range(requests + 20):
        words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(12))
        body = json.dumps({"text": f"{words} {tag} {i}. Second sentence of story {i} here."})
        start = time.perf_counter()
        conn.request("POST", "/v1/documents", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        elapsed = time.perf_counter() - start
        if response.status != 200:
            raise RuntimeError(f"POST /v1/documents answered {response.status}")
        if i >= 20:  # warm-up
            times.append(elapsed)
    conn.close()
    return times


def poll_healthz(port: int, stop: threading.Event, out: list[float]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop.is_set():
        start = time.perf_counter()
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        out.append(time.perf_counter() - start)
        time.sleep(0.01)
    conn.close()


def compare_body(seed: int) -> bytes:
    import random

    rng = random.Random(seed)
    a = " ".join(rng.choice(WORDS) for _ in range(COMPARE_CHARS // 6))[:COMPARE_CHARS]
    b = " ".join(rng.choice(WORDS) for _ in range(COMPARE_CHARS // 6))[:COMPARE_CHARS]
    return json.dumps({"a": a, "b": b, "metrics": ["cosine", "common_words"]}).encode()


def healthz_during_compares(port: int, compares: int, seconds: float) -> tuple[list[float], int]:
    """/healthz latencies while *compares* clients keep a compare running; compares done."""
    bodies = [compare_body(i) for i in range(compares)]
    stop = threading.Event()
    done = [0]

    def comparer(body: bytes) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while not stop.is_set():
            conn.request("POST", "/v1/compare", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"POST /v1/compare answered {response.status}")
            done[0] += 1
        conn.close()

    threads = [threading.Thread(target=comparer, args=(b,), daemon=True) for b in bodies]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let every compare start
    latencies: list[float] = []
    poller = threading.Thread(target=poll_healthz, args=(port, stop, latencies))
    poller.start()
    time.sleep(seconds)
    stop.set()
    poller.join()
    for t in threads:
        t.join(timeout=300)
    return latencies, done[0]


def idle_healthz(port: int, seconds: float) -> list[float]:
    stop = threading.Event()
    latencies: list[float] = []
    poller = threading.Thread(target=poll_healthz, args=(port, stop, latencies))
    poller.start()
    time.sleep(seconds)
    stop.set()
    poller.join()
    return latencies


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="kept-alive requests")
    parser.add_argument("--compares", type=int, default=8, help="concurrent 1 MB compares")
    parser.add_argument("--seconds", type=float, default=8.0, help="healthz polling time")
    parser.add_argument(
        "--rounds", type=int, default=3, help="compare rounds; the best p99 counts (shared CPUs)"
    )
    args = parser.parse_args(argv)
    if not redis_server_available():
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisServer(Path(tmp) / "redis")
        redis.start()
        servers: dict[str, Server] = {}
        try:
            env = {
                **os.environ,
                "PYTHONPATH": str(REPO),
                "NSHASH_MAX_COMPARE_CHARS": str(COMPARE_CHARS),
                "NSHASH_COMPARE_WORKERS": "1",
            }
            port = free_port()
            servers["nshash serve"] = Server(
                [
                    sys.executable,
                    "-m",
                    "nshash",
                    "serve",
                    "--workers",
                    "2",
                    "--port",
                    str(port),
                    "--store",
                    f"{redis.url}?prefix=bench-serve",
                ],
                port,
                env,
            )
            port = free_port()
            servers["plain uvicorn"] = Server(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "service.app:create_app",
                    "--workers",
                    "2",
                    "--port",
                    str(port),
                    "--no-access-log",
                ],
                port,
                {**env, "NSHASH_STORE_URL": f"{redis.url}?prefix=bench-uvicorn"},
            )
            print(f"kept-alive POST /v1/documents, {args.requests} requests, 2 workers, Redis")
            medians = {}
            for name, server in servers.items():
                times = kept_alive_latencies(server.port, args.requests, name.replace(" ", "-"))
                medians[name] = statistics.median(times)
                print(f"  {name:<14} median {ms(medians[name])}  p99 {ms(percentile(times, 0.99))}")
            ratio = medians["plain uvicorn"] / medians["nshash serve"]
            verdict = "PASS" if medians["nshash serve"] < 0.010 else "FAIL"
            print(f"  nshash serve is {ratio:.1f}x faster; target median < 10 ms: {verdict}")

            port = servers["nshash serve"].port
            print(f"GET /healthz on nshash serve --workers 2, {args.rounds} rounds")
            best_idle = best_busy = float("inf")
            for round_ in range(1, args.rounds + 1):
                idle = idle_healthz(port, 3.0)
                busy, done = healthz_during_compares(port, args.compares, args.seconds)
                p99_idle, p99_busy = percentile(idle, 0.99), percentile(busy, 0.99)
                best_idle, best_busy = min(best_idle, p99_idle), min(best_busy, p99_busy)
                print(
                    f"  round {round_}: idle median {ms(statistics.median(idle))}"
                    f" p99 {ms(p99_idle)};  {args.compares} x 1 MB compares running"
                    f" ({len(busy)} polls, {done} compares finished) median"
                    f" {ms(statistics.median(busy))} p99 {ms(p99_busy)}"
                )
            verdict = "PASS" if best_busy < 0.050 else "FAIL"
            print(
                f"  best p99: idle {ms(best_idle)}, busy {ms(best_busy)}"
                f" ({best_busy / best_idle:.1f}x); target p99 < 50 ms: {verdict}"
            )
            load = os.getloadavg()[0]
            print(f"  load average during the run: {load:.1f} on {os.cpu_count()} CPUs")
        finally:
            for server in servers.values():
                server.stop()
            redis.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
