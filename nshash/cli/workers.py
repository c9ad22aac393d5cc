"""The worker processes of ``nshash dedup --jobs N``: records go out in batches, fingerprints come
back in order.
"""

from __future__ import annotations

import array
import json
import os
import pickle
import queue
import signal
import threading
import traceback
from collections import deque
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import NSHashError
from ..methods.nshash.core import NSHash
from .io import (
    BadRecord,
    Item,
    Prepared,
    Preparer,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

#: Records per batch sent to a worker: large enough that the trip between processes costs
#: little next to fingerprinting, small enough to keep the output streaming (256 measured
#: best of 64-512 on zh_news with --jobs 2).
BATCH_SIZE = 256

#: Batches sent to a worker and not yet answered: keeps it busy while bounding memory.
BATCHES_IN_FLIGHT = 4


# -- workers -----------------------------------------------------------------------------
#
# Fingerprinting is most of the work, so it runs in worker processes while the parent reads
# the input, assigns groups in input order and writes. The parent talks to each worker over
# two plain pipes and deals batches out round-robin, so batch k always comes back from worker
# k % N and order needs no bookkeeping. (multiprocessing.Pool was measured first: its task
# and result threads in the parent cost about a fifth more parent CPU, and the parent's CPU
# is what limits the speed-up.)


class WorkerError(NSHashError):
    """A worker process failed (a bug, or it was killed)."""


def _worker_main(inbox: Connection, outbox: Connection, preparer: Preparer, parent: int) -> None:
    """Run one worker: prepare each batch that arrives on *inbox*, answer on *outbox*.

    A reader thread takes batches off the pipe and a sender thread puts answers on it while
    the main thread prepares, so a full pipe never stops the work and the two sides can never
    wait on each other. An empty message (or a parent that went away) ends the worker.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    batches: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def read() -> None:
        try:
            while True:
                while not inbox.poll(1.0):
                    if os.getppid() != parent:
                        return
                data = inbox.recv_bytes()
                if not data:
                    return
                batches.put(data)
        except (EOFError, OSError):
            return
        finally:
            batches.put(None)

    answers: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def send() -> None:
        try:
            while (blob := answers.get()) is not None:
                outbox.send_bytes(blob)
        except OSError:  # the parent is gone; nobody is left to tell
            pass

    threading.Thread(target=read, daemon=True).start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    while (data := batches.get()) is not None:
        try:
            answer: tuple[bool, Any] = (True, _pack(preparer.run(pickle.loads(data), packed=True)))
        except Exception:
            answer = (False, traceback.format_exc())
        answers.put(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    answers.put(None)
    sender.join()


def _pack(results: list[Prepared | BadRecord]) -> tuple[Any, ...]:
    """Return a batch's results in a form that is quicker to pickle.

    The nshash method's results come packed (:meth:`Preparer.run`): their words are one
    bytes object a record already, and go as they are, into the parent's DocPrints. The
    other methods' fingerprints (64-bit unsigned ints) go as one array of raw bytes, which
    the worker pickles about twice as fast as tuples of large ints; each record keeps its
    other fields and how many fingerprints are its own. Results whose fingerprints do not
    fit (the keyed method's keys and vectors) go as they are. :func:`_unpack` reverses it.
    """
    flat = array.array("Q")
    meta: list[tuple[Any, ...] | BadRecord] = []
    try:
        for r in results:
            if isinstance(r, BadRecord):
                meta.append(r)
                continue
            if r[3] is None:  # packed words: nothing to gain
                return ("plain", results)
            flat.extend(r[2])
            flat.extend(r[3])
            meta.append((r[0], r[1], len(r[2]), len(r[3]), r[4], r[5], r[6]))
    except (TypeError, OverflowError):
        return ("plain", results)
    return ("packed", meta, flat.tobytes())


def _unpack(packed: tuple[Any, ...]) -> list[Prepared | BadRecord]:
    """Return the results that :func:`_pack` packed."""
    if packed[0] == "plain":
        plain: list[Prepared | BadRecord] = packed[1]
        return plain
    _, meta, raw = packed
    flat = array.array("Q")
    flat.frombytes(raw)
    ints = flat.tolist()
    out: list[Prepared | BadRecord] = []
    pos = 0
    for m in meta:
        if isinstance(m, BadRecord):
            out.append(m)
            continue
        doc_id, title, sentences, sketch, exact, head, tracked = m
        mid = pos + sentences
        end = mid + sketch
        out.append(
            (doc_id, title, tuple(ints[pos:mid]), tuple(ints[mid:end]), exact, head, tracked)
        )
        pos = end
    return out


#: Pipe capacity asked for on Linux (the unprivileged maximum by default). With the default
#: 64 KiB a 256-record batch does not fit, so each side would wait for the other mid-message
#: and the worker could not run ahead of the parent.
PIPE_SIZE = 1 << 20


def _widen(conn: Connection) -> None:
    """Grow a pipe's buffer to :data:`PIPE_SIZE` where the OS allows it (Linux); else no-op."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setsize is None:
        return
    try:
        fcntl.fcntl(conn.fileno(), setsize, PIPE_SIZE)
    except OSError:  # above /proc/sys/fs/pipe-max-size: keep the default
        pass


def _mp_context() -> Any:
    """Return the cheapest safe way to start workers: fork, unless threads are running."""
    import multiprocessing  # only --jobs N needs it: keep `nshash --help` quick

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


class Workers:
    """Fingerprints batches in order, in this process (``jobs=1``) or in worker processes.

    Create it before opening the store, so that forked workers inherit no store threads or
    file locks.

    Args:
        jobs: how many worker processes; 1 prepares in this process.
        preparer: the parsing and fingerprinting step.
    """

    def __init__(self, jobs: int, preparer: Preparer) -> None:
        self.jobs = jobs
        self.preparer = preparer
        self._procs: list[Any] = []
        self._inboxes: list[Connection] = []
        self._outboxes: list[Connection] = []

    def __enter__(self) -> Workers:
        if self.jobs > 1:
            ctx = _mp_context()
            if ctx.get_start_method() == "fork":
                # Fill the fingerprinter's lazy tables and patterns once, here, rather than
                # in every forked worker (about 0.02 s of CPU each).
                warm = {self.preparer.fields.text[0]: "预热一下，繁體字。Warm up: 1, 2."}
                self.preparer.run([json.dumps(warm).encode("ascii")])
            try:
                for _ in range(self.jobs):
                    inbox_r, inbox_w = ctx.Pipe(duplex=False)
                    outbox_r, outbox_w = ctx.Pipe(duplex=False)
                    _widen(inbox_w)
                    _widen(outbox_w)
                    proc = ctx.Process(
                        target=_worker_main,
                        args=(inbox_r, outbox_w, self.preparer, os.getpid()),
                        name="nshash-worker",
                        daemon=True,
                    )
                    proc.start()
                    inbox_r.close()
                    outbox_w.close()
                    self._procs.append(proc)
                    self._inboxes.append(inbox_w)
                    self._outboxes.append(outbox_r)
            except BaseException:
                self._stop(graceful=False)
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop(graceful=exc_type is None)

    def _stop(self, graceful: bool) -> None:
        for inbox in self._inboxes:
            try:
                if graceful:
                    inbox.send_bytes(b"")
                inbox.close()
            except OSError:
                pass
        for proc in self._procs:
            if graceful:
                proc.join(5)
            if proc.is_alive():
                proc.terminate()
            proc.join()
        for outbox in self._outboxes:
            outbox.close()
        self._procs, self._inboxes, self._outboxes = [], [], []

    def _receive(self, worker: int) -> list[Prepared | BadRecord]:
        try:
            ok, answer = pickle.loads(self._outboxes[worker].recv_bytes())
        except (EOFError, OSError):
            code = self._procs[worker].exitcode
            raise WorkerError(f"A worker process exited unexpectedly (exit code {code})") from None
        if not ok:
            raise WorkerError(f"A worker process failed:\n{answer}")
        return _unpack(answer)

    def map(
        self, batches: Iterator[list[Item]]
    ) -> Iterator[tuple[list[Item], list[Prepared | BadRecord]]]:
        """Yield each batch with its results, in input order."""
        if not self._procs:
            for batch in batches:
                yield batch, self.preparer.run([item.payload for item in batch], packed=True)
            return
        n = len(self._procs)
        pending: deque[list[Item]] = deque()  # sent, not yet received, in input order
        in_flight = [0] * n
        sent = received = 0
        for batch in batches:
            worker = sent % n
            while in_flight[worker] >= BATCHES_IN_FLIGHT:
                head = received % n
                results = self._receive(head)
                in_flight[head] -= 1
                received += 1
                yield pending.popleft(), results
            payloads = [item.payload for item in batch]
            try:
                self._inboxes[worker].send_bytes(
                    pickle.dumps(payloads, protocol=pickle.HIGHEST_PROTOCOL)
                )
            except OSError:
                code = self._procs[worker].exitcode
                raise WorkerError(
                    f"A worker process exited unexpectedly (exit code {code})"
                ) from None
            in_flight[worker] += 1
            pending.append(batch)
            sent += 1
        while pending:
            head = received % n
            results = self._receive(head)
            in_flight[head] -= 1
            received += 1
            yield pending.popleft(), results
