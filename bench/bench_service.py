"""Benchmark: the HTTP service against a bare FastAPI endpoint, both on uvicorn, same run.

Starts two uvicorn servers (one worker each, on loopback, access log off):

* the real app (``service.app:create_app``) on ``memory://``;
* a bare FastAPI app whose one endpoint takes the same POST and returns a constant.

A load generator in a separate process (this script; the servers are their own processes)
keeps N keep-alive HTTP/1.1 connections busy with raw asyncio sockets, so the client costs
far less than the server per request. Each phase warms up, then runs for a bounded time and
count. Documents come from ``../shared/data/zh_reposts_dev.jsonl.gz``, in file order, each
with a unique ``id``.

Reported: bare requests/s, single-document ``POST /v1/documents`` requests/s and its ratio to
the bare endpoint, and batch ``POST /v1/documents/batch`` documents/s, with latency
percentiles. Bare and single phases alternate for ``--rounds`` rounds and the best of each
counts, since the machine is shared. Each phase also reports the server's CPU time per
request (user + system, from ``/proc``), which other load on the machine disturbs less
than wall-clock rates; the ratio of those is printed too. Target (issue 4): the
single-document route reaches at least 0.6x the bare endpoint's requests/s.

Usage::

    python bench/bench_service.py [--seconds 4] [--rounds 3] [--connections 16] [--batch 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "zh_reposts_dev.jsonl.gz"

#: The baseline: a FastAPI app whose endpoint returns a constant (served by uvicorn from
#: this module, ``bench_service:bare_app``).
bare_app = FastAPI()


@bare_app.post("/bare")
async def bare() -> dict[str, int]:
    """Return a constant without reading the body."""
    return {"similar_id": 1}


# -- servers ---------------------------------------------------------------------------------
def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One uvicorn process (one worker) on a free loopback port."""

    def __init__(self, target: str, app_dir: Path, env: dict[str, str], factory: bool) -> None:
        self.port = free_port()
        args = [
            sys.executable, "-m", "uvicorn", target, "--app-dir", str(app_dir),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--workers", "1", "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        if factory:
            args.insert(3, "--factory")
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
        full_env.update(env)
        self.process = subprocess.Popen(args, env=full_env, cwd=app_dir)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"uvicorn {target} exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/openapi.json", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"uvicorn {target} did not start within 30 s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- load generator --------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float | None:
    """Return the user + system CPU seconds process *pid* has used (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    """What one phase measured."""

    requests: int = 0
    documents: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    #: Server CPU seconds over the whole phase (warm-up included) and the requests answered.
    cpu: float | None = None
    answered: int = 0

    def cpu_per_request(self) -> float | None:
        """Server CPU microseconds per request, or None where /proc is missing."""
        if self.cpu is None or not self.answered:
            return None
        return self.cpu / self.answered * 1e6

    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def doc_rate(self) -> float:
        return self.documents / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def http_post(path: str, body: bytes, port: int) -> bytes:
    """Return the bytes of one keep-alive HTTP/1.1 POST of a JSON body."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Read one HTTP/1.1 response with a Content-Length; return the status and the body."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def run_phase(
    port: int,
    requests: list[tuple[bytes, int]],
    connections: int,
    seconds: float,
    warmup: float,
    pid: int | None = None,
) -> Phase:
    """Send *requests* (raw bytes, documents carried) round-robin until time runs out.

    Each connection sends one request and waits for its answer (no pipelining), like a
    crawler's HTTP client pool. Requests are handed out in order across connections, so
    every document is sent at most once until the list runs out.
    """
    phase = Phase()
    cursor = 0
    cpu_before = cpu_seconds(pid) if pid is not None else None
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + seconds

    async def worker() -> None:
        nonlocal cursor
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                now = time.perf_counter()
                if now >= stop_at or cursor >= len(requests):
                    return
                raw, docs = requests[cursor]
                cursor += 1
                writer.write(raw)
                sent = time.perf_counter()
                status, _ = await read_response(reader)
                done = time.perf_counter()
                phase.answered += 1
                if sent >= measure_from and done <= stop_at:
                    phase.requests += 1
                    phase.documents += docs
                    phase.latencies.append(done - sent)
                    if status != 200:
                        phase.errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    phase.seconds = min(time.perf_counter(), stop_at) - measure_from
    if cpu_before is not None and pid is not None:
        cpu_after = cpu_seconds(pid)
        phase.cpu = None if cpu_after is None else cpu_after - cpu_before
    return phase


# -- the benchmark ---------------------------------------------------------------------------
def load_documents(limit: int | None = None) -> list[dict[str, Any]]:
    """Read the repost set, in file order."""
    if not DATA.exists():
        raise SystemExit(
            f"{DATA} is missing: the benchmark reads ../shared/data/ beside the repository"
        )
    docs: list[dict[str, Any]] = []
    with gzip.open(DATA, "rt", encoding="utf-8") as fh:
        for line in fh:
            docs.append(json.loads(line))
            if limit is not None and len(docs) >= limit:
                break
    return docs


def document_stream(docs: list[dict[str, Any]], count: int, tag: str) -> list[dict[str, str]]:
    """Return *count* documents cycling over *docs*, each with an id unique in this run."""
    return [
        {"text": docs[i % len(docs)]["text"], "id": f"{tag}-{i}-{docs[i % len(docs)]['id']}"}
        for i in range(count)
    ]


def report(name: str, phase: Phase, unit: str = "req/s") -> None:
    rate = phase.doc_rate() if unit == "docs/s" else phase.rate()
    cpu = phase.cpu_per_request()
    cpu_text = f"  server CPU {cpu:5.0f} us/req" if cpu is not None else ""
    print(
        f"{name:<36} {rate:>7.0f} {unit:<6} n={phase.requests:<6} errors {phase.errors}"
        f"  p50 {phase.percentile(0.5):6.2f} ms  p99 {phase.percentile(0.99):6.2f} ms{cpu_text}"
    )


def best(phases: list[Phase]) -> Phase:
    """The least disturbed phase: the highest rate."""
    return max(phases, key=lambda p: p.rate())


def least_cpu(phases: list[Phase]) -> float | None:
    """The lowest server CPU per request among *phases*, or None without /proc."""
    values = [v for v in (p.cpu_per_request() for p in phases) if v is not None]
    return min(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per phase")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections")
    parser.add_argument("--batch", type=int, default=100, help="documents per batch request")
    parser.add_argument("--rounds", type=int, default=3, help="alternating bare/single rounds")
    args = parser.parse_args(argv)

    docs = load_documents()
    # Enough requests that no phase runs out before its time: a generous upper bound.
    per_phase = int(15_000 * (args.seconds + args.warmup))
    print(
        f"{len(docs)} documents from {DATA.name}; {args.connections} connections, "
        f"{args.seconds:g} s per phase after {args.warmup:g} s warm-up, 1 uvicorn worker each, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )

    bare_server = Server("bench_service:bare_app", REPO / "bench", {}, factory=False)
    app_server = Server(
        "service.app:create_app", REPO, {"NSHASH_STORE_URL": "memory://"}, factory=True
    )
    bare_phases: list[Phase] = []
    single_phases: list[Phase] = []
    try:
        for rnd in range(args.rounds):
            stream = document_stream(docs, per_phase, f"r{rnd}")
            bare_reqs = [
                (http_post("/bare", json.dumps(d).encode(), bare_server.port), 1) for d in stream
            ]
            single_reqs = [
                (http_post("/v1/documents", json.dumps(d).encode(), app_server.port), 1)
                for d in stream
            ]
            for name, server, reqs, phases in (
                ("bare FastAPI endpoint", bare_server, bare_reqs, bare_phases),
                ("POST /v1/documents", app_server, single_reqs, single_phases),
            ):
                phase = asyncio.run(
                    run_phase(
                        server.port,
                        reqs,
                        args.connections,
                        args.seconds,
                        args.warmup,
                        server.process.pid,
                    )
                )
                report(f"round {rnd + 1}: {name}", phase)
                phases.append(phase)

        batches = document_stream(docs, per_phase // 5, "batch")
        batch_reqs = [
            (
                http_post(
                    "/v1/documents/batch",
                    json.dumps({"documents": batches[i : i + args.batch]}).encode(),
                    app_server.port,
                ),
                len(batches[i : i + args.batch]),
            )
            for i in range(0, len(batches), args.batch)
        ]
        batch_phase = asyncio.run(
            run_phase(
                app_server.port,
                batch_reqs,
                max(1, min(args.connections, 4)),
                args.seconds,
                args.warmup,
                app_server.process.pid,
            )
        )
        report(f"POST /v1/documents/batch ({args.batch}/req)", batch_phase, "docs/s")
    finally:
        bare_server.stop()
        app_server.stop()

    bare_best, single_best = best(bare_phases), best(single_phases)
    ratio = single_best.rate() / bare_best.rate()
    print()
    print(f"bare endpoint            {bare_best.rate():8.0f} req/s  (best of {args.rounds})")
    print(f"single-document route    {single_best.rate():8.0f} req/s  (best of {args.rounds})")
    print(f"batch route              {batch_phase.doc_rate():8.0f} docs/s")
    print(f"ratio single/bare        {ratio:8.2f}x  (target >= 0.60x)")
    print(f"ratio batch docs/bare    {batch_phase.doc_rate() / bare_best.rate():8.2f}x")
    bare_cpu, single_cpu = least_cpu(bare_phases), least_cpu(single_phases)
    if bare_cpu is not None and single_cpu is not None:
        print(
            f"server CPU per request   bare {bare_cpu:.0f} us, single {single_cpu:.0f} us:"
            f" ratio {bare_cpu / single_cpu:.2f}x"
        )
    median_single = statistics.median(single_best.latencies) * 1000
    print(f"single-document median latency {median_single:.2f} ms")
    errors = sum(p.errors for p in bare_phases + single_phases) + batch_phase.errors
    if errors:
        print(f"WARNING: {errors} non-200 answers")
        return 1
    return 0 if ratio >= 0.6 else 2


if __name__ == "__main__":
    raise SystemExit(main())
