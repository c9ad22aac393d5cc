"""The ``nshash`` command line: group a stored corpus by story, inspect a store, serve HTTP.

Commands:

* ``nshash dedup INPUT``: read articles (JSONL, ``.jsonl.gz``, CSV, a folder of ``.txt``
  files, or ``-`` for JSONL on stdin) and write every record back with its ``similar_id``
  and ``duplicate`` flag. Fingerprinting can run in worker processes (``--jobs``); the
  store sees the documents in input order, so the output does not depend on ``--jobs``.
* ``nshash groups``, ``nshash query``, ``nshash stats``: read a saved store.
* ``nshash compare A B``: the similarity measures of :mod:`nshash.toolkit.similarity`.
* ``nshash serve``: the HTTP service on uvicorn.

Results go to stdout (or ``-o``); progress, bad-record reports and the summary go to stderr.
Exit status: 0 on success, 1 on an error (printed as ``Error: ...``), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import array
import importlib
import importlib.util
import json
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timezone, tzinfo
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, NSHashError, install_hint
from ..methods.nshash.core import NSHash
from ..methods.nshash.find import local_time, zone
from ..methods.nshash.store import file_schemes, open_store
from ..options import SETTINGS, from_environ, from_text, settings_in_url
from ..results import AddResult, DocMeta
from ..stores.url import mask_url, parse_url
from ..text.fingerprint import DocPrint
from .io import (
    FORMATS,
    BadRecord,
    CsvWriter,
    Fields,
    Item,
    JsonlWriter,
    Prepared,
    Preparer,
    Source,
    Tracker,
    detect_format,
    open_output,
    open_source,
)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup
    from .parquet import ParquetWriter

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup

__all__ = ["main"]

#: The environment variable that names the default store (shared with the HTTP service).
STORE_ENV = "NSHASH_STORE_URL"

#: Records per batch sent to a worker: large enough that the trip between processes costs
#: little next to fingerprinting, small enough to keep the output streaming (256 measured
#: best of 64-512 on zh_news with --jobs 2).
BATCH_SIZE = 256

#: Batches sent to a worker and not yet answered: keeps it busy while bounding memory.
BATCHES_IN_FLIGHT = 4

#: Bad records reported one by one; past this many only the count is given.
MAX_REPORTED = 100



#: What an output file's name says it holds, by its extension (after any .gz).
_OUTPUT_KINDS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def _check_output(name: str | None, input_format: str) -> None:
    """Refuse an output that would surprise: Parquet on a terminal, or a file whose extension
    names another format than the one the input writes (records are written back in their
    own format: CSV as CSV, Parquet as Parquet, JSONL and text files as JSONL).

    Raises:
        ConfigError: the output would be binary on a terminal, or its name says another format.
    """
    produced = input_format if input_format in ("csv", "parquet") else "jsonl"
    shown = {"jsonl": "JSONL", "csv": "CSV", "parquet": "Parquet", "txt": "Text"}
    if name is None or name == "-":
        if produced == "parquet" and sys.stdout.isatty():
            raise ConfigError(
                "Parquet output is binary and stdout is a terminal: name a file with"
                " -o OUT.parquet, or redirect stdout"
            )
        return
    stem = name[:-3] if name.lower().endswith(".gz") else name
    claimed = _OUTPUT_KINDS.get(os.path.splitext(stem)[1].lower())
    if claimed is not None and claimed != produced:
        raise ConfigError(
            f"{shown[input_format]} input is written back as {shown[produced]}, but -o"
            f" {name!r} names a {shown[claimed]} file: name it .{produced}, or convert the"
            f" input to {shown[claimed]} first"
        )


def _settings(args: argparse.Namespace, url: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The tuning settings of this run and where each came from: the flags (``--theta``),
    else the ``NSHASH_*`` variables for a setting that *url* does not give itself; one dict
    for both :class:`~nshash.NSHash` and the workers' fingerprinter, so the two never
    disagree.
    """
    in_url = settings_in_url(url)[1]
    values = {k: v for k, v in from_environ(os.environ).items() if k not in in_url}
    origins = {k: f"the environment variable {SETTINGS[k].env}" for k in values}
    for name, setting in SETTINGS.items():
        flagged = getattr(args, f"setting_{name}", None)
        if flagged is not None:
            values[name] = setting.cast(flagged, setting.flag)
            origins[name] = setting.flag
    return values, origins

#: The measures of ``nshash compare``, for its help
#: (:data:`nshash.toolkit.similarity.METRICS`, named here so that ``--help`` does not import
#: the toolkit; a test keeps the two equal).
METRIC_NAMES = ("cosine", "tfidf_cosine", "simhash", "euclidean", "common_words", "levenshtein")

#: Store schemes whose state is shared between processes (so ``serve --workers N`` is safe).
SHARED_SCHEMES = ("redis", "rediss", "unix")


class UsageError(Exception):
    """Bad usage found after parsing (exit 2, like argparse's own errors)."""


class RecordError(NSHashError):
    """A bad record met with ``--on-error fail``."""


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
            answer: tuple[bool, Any] = (True, _pack(preparer.run(pickle.loads(data))))
        except Exception:
            answer = (False, traceback.format_exc())
        answers.put(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    answers.put(None)
    sender.join()


def _pack(results: list[Prepared | BadRecord]) -> tuple[Any, ...]:
    """Return a batch's results in a form that is quicker to pickle.

    The fingerprints (64-bit unsigned ints, about 40 a document) go as one array of raw
    bytes, which the worker pickles about twice as fast as tuples of large ints; each record
    keeps its other fields and how many fingerprints are its own. Results whose fingerprints
    do not fit (the keyed method's keys and vectors) go as they are. :func:`_unpack` reverses
    it.
    """
    flat = array.array("Q")
    meta: list[tuple[Any, ...] | BadRecord] = []
    try:
        for r in results:
            if isinstance(r, BadRecord):
                meta.append(r)
                continue
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
                yield batch, self.preparer.run([item.payload for item in batch])
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


# -- the dedup / query run ---------------------------------------------------------------


class _NoBar:
    """The progress bar of a run that shows none (tqdm takes a few hundredths of a second to
    import, a fixed cost of every run)."""

    def update(self, n: int) -> None:
        """Count nothing."""

    def close(self) -> None:
        """Close nothing."""


class _Progress:
    """The progress bar of a run: bytes of the input read (with a total and an ETA) when the
    input is a file, else records (with a total for a folder of ``.txt`` files)."""

    #: Seconds between redraws at the least (a quick run may end before the first one).
    MININTERVAL = 0.25

    def __init__(self, source: Source, show: bool) -> None:
        self.source = source
        self.docs = 0
        self.done = 0
        self.bar: Any = _NoBar()
        if not show:
            return
        from tqdm import tqdm  # imported here: most runs draw no bar

        class _Bar(tqdm):  # type: ignore[misc]
            """A bar without tqdm's monitor thread (workers are forked; no stray threads)."""

            monitor_interval = 0

        common = {
            "file": sys.stderr,
            "dynamic_ncols": True,
            "leave": False,
            "mininterval": self.MININTERVAL,
        }
        self.by_bytes = source.size is not None and source.bytes_read() is not None
        if self.by_bytes:
            self.bar = _Bar(
                total=source.size, unit="B", unit_scale=True, unit_divisor=1024, **common
            )
        else:
            self.bar = _Bar(total=source.total, unit="doc", **common)

    def update(self, records: int) -> None:
        """Count *records* more done."""
        if isinstance(self.bar, _NoBar):
            return
        self.docs += records
        if not self.by_bytes:
            self.bar.update(records)
            return
        now = self.source.bytes_read() or 0
        self.bar.set_postfix_str(f"{self.docs:,} docs", refresh=False)
        self.bar.update(max(0, now - self.done))
        self.done = max(now, self.done)

    def close(self) -> None:
        """Take the bar off the terminal."""
        self.bar.close()


def _say(text: str) -> None:
    """Print a line on stderr without tearing a progress bar."""
    if "tqdm" not in sys.modules:  # no bar was drawn, so none can be torn
        print(text, file=sys.stderr)
        return
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr)


@dataclass
class Tally:
    """What a run saw, for the summary."""

    documents: int = 0
    bad: int = 0
    duplicates: int = 0
    merges: int = 0
    matched: int = 0
    sizes: Counter[int] = field(default_factory=Counter)
    titles: dict[int, str] = field(default_factory=dict)
    #: Ids merged away during the run -> the id they were merged into.
    aliases: dict[int, int] = field(default_factory=dict)

    def canonical(self, similar_id: int) -> int:
        """Return the id *similar_id* ended up in after the merges this run saw."""
        seen = set()
        while similar_id in self.aliases and similar_id not in seen:
            seen.add(similar_id)
            similar_id = self.aliases[similar_id]
        return similar_id

    def groups(self) -> list[tuple[int, int, str | None]]:
        """Return ``(similar_id, size, title)`` for every group of this run, largest first."""
        sizes: Counter[int] = Counter()
        for sid, size in self.sizes.items():
            sizes[self.canonical(sid)] += size
        titles: dict[int, str] = {}
        for sid in sorted(self.titles):  # ids grow over time: the earliest title wins
            titles.setdefault(self.canonical(sid), self.titles[sid])
        ordered = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))
        return [(sid, size, titles.get(sid)) for sid, size in ordered]


class _Reporter:
    """Reports bad records on stderr (through the bar, so it is not torn).

    Args:
        source: the input, for the records' places.
        on_error: ``write`` (the record goes out with ``similar_id`` null and an ``error``),
            ``skip`` (it is left out) or ``fail`` (the run stops with exit 1).
    """

    def __init__(self, source: Source, on_error: str) -> None:
        self.source = source
        self.on_error = on_error
        self.reported = 0
        #: The first bad record's place and reason, for the error when none was good.
        self.first: str | None = None

    def bad(self, item: Item, message: str, tally: Tally) -> str:
        """Count and report one bad record; return the text for its ``error`` field."""
        where = item.where if self.source.format == "txt" else f"{self.source.name} {item.where}"
        text = f"{where}: {message}"
        if self.on_error == "fail":
            raise RecordError(f"{text} (--on-error fail)")
        tally.bad += 1
        self.reported += 1
        if self.first is None:
            self.first = text
        verb = "skipped" if self.on_error == "skip" else "bad record"
        if self.reported <= MAX_REPORTED:
            _say(f"{verb} {text}")
        elif self.reported == MAX_REPORTED + 1:
            _say(f"(more than {MAX_REPORTED} bad records; the rest are only counted)")
        return f"{item.where}: {message}"


#: How many good records are looked at for the id and title fields before warning that a
#: field never appears (a misspelt --id-field would otherwise pass without a word).
FIELD_CHECK = 100


class _FieldCheck:
    """Warns once when no record of the first :data:`FIELD_CHECK` has an id or a title."""

    def __init__(self, source: Source, fields: Fields) -> None:
        self.fields = fields
        self.active = source.format != "txt"  # a .txt file's id is its path, always there
        self.seen = 0
        self.has_id = self.has_title = False

    def record(self, doc_id: str | None, title: str | None) -> None:
        """Note one good record's id and title."""
        if not self.active:
            return
        self.seen += 1
        self.has_id = self.has_id or doc_id is not None
        self.has_title = self.has_title or title is not None
        if self.seen >= FIELD_CHECK or (self.has_id and self.has_title):
            self.finish()

    def finish(self) -> None:
        """Warn about the fields not seen (once; nothing when no record was good)."""
        if not self.active or not self.seen:
            return
        self.active = False
        first = f"the first {self.seen:,} records" if self.seen > 1 else "the first record"
        if not self.has_id:
            _say(
                f"warning: {first} have no {self.fields.id!r} field (--id-field): documents"
                " are grouped but not kept by id, so groups list no members and a rerun"
                " cannot replay them"
            )
        if not self.has_title:
            _say(
                f"warning: {first} have no {self.fields.title!r} field (--title-field):"
                " groups are listed without titles"
            )


class _MethodPreparer(Preparer):
    """The preparer of ``dedup --method keyed|simhash``: what the method's ``prepare`` makes goes
    in the fingerprint slots of a :data:`~nshash.cli.io.Prepared` tuple: the keyed method's keys
    and term vector, or the simhash method's index keys and fingerprint, then ``(0, 0)``."""

    def __init__(
        self, fields: Fields, added: Sequence[str], encoding: str = "auto", method: str = "keyed"
    ) -> None:
        super().__init__(fields, added, encoding=encoding)
        self.method = method
        # Imported here, for these methods only: keep the usual startup quick.
        if method == "keyed":
            from ..methods.keyed import KeyMaker

            self._keymaker = KeyMaker()
        else:
            from ..methods.simhash import prepare

            self._simhash = prepare

    def _slots(self, text: str, title: str | None) -> tuple[Any, Any, Any]:
        if self.method == "keyed":
            keyed = self._keymaker.prepare(text, title)
            return keyed.keys, keyed.vector, (0, 0)
        doc = self._simhash(text)
        return doc.keys, (doc.fingerprint,), (0, 0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_MethodPreparer, (self.fields, self.added, self.encoding, self.method))


def _adder(nsh: Method) -> Callable[[Prepared, DocMeta | None], AddResult]:
    """The add call of the method, fed what its preparer made (and, tracking, the record's
    :class:`~nshash.DocMeta`)."""
    if isinstance(nsh, NSHash):
        plain = nsh
        return lambda r, m: plain.add_prepared(
            DocPrint(r[2], r[3], *r[4]), r[0], title=r[1], meta=m
        )
    from ..methods.keyed import KeyedDedup, KeyedDoc
    from ..methods.simhash import SimhashDoc

    if isinstance(nsh, KeyedDedup):
        keyed = nsh
        return lambda r, m: keyed.add_prepared(KeyedDoc(r[2], r[3]), r[0], title=r[1])
    sim = nsh
    return lambda r, m: sim.add_prepared(SimhashDoc(r[3][0], r[2]), r[0], title=r[1])


def _run(
    source: Source,
    workers: Workers,
    nsh: Method,
    writer: JsonlWriter | CsvWriter | ParquetWriter,
    mode: str,
    on_error: str,
    show_progress: bool,
    tracker: Tracker | None = None,
) -> Tally:
    """Feed every record to the store in input order and write it with its answer (with its
    url, site and time when *tracker* reads them: ``dedup --track``)."""
    tally = Tally()
    reporter = _Reporter(source, on_error)
    check = _FieldCheck(source, workers.preparer.fields)
    bar = _Progress(source, show_progress)
    add = _adder(nsh)
    nulls = (None,) if mode == "query" else (None, None)
    try:
        for batch, results in workers.map(source.batches(BATCH_SIZE)):
            for item, result in zip(batch, results, strict=True):
                message = item.bad
                if message is None and isinstance(result, BadRecord):
                    message = result.message
                meta = None
                if message is None and tracker is not None:
                    assert isinstance(nsh, NSHash)  # --track is the nshash method's
                    assert not isinstance(result, BadRecord)
                    kept = tracker.meta(item, result, nsh)
                    if isinstance(kept, str):
                        message = kept
                    else:
                        meta = kept
                if message is not None:
                    error = reporter.bad(item, message, tally)
                    if on_error == "write":
                        writer.write_bad(item, error, nulls)
                    if not tally.documents and tally.bad >= FIELD_CHECK:
                        break  # nothing good so far: the loop's end says why
                    continue
                assert not isinstance(result, BadRecord)
                tally.documents += 1
                check.record(result[0], result[1])
                if mode in ("query", "explain"):
                    assert isinstance(nsh, NSHash)  # only dedup has --method
                    doc = DocPrint(result[2], result[3], *result[4])
                    if mode == "explain":
                        why = nsh.store.explain(doc, nsh.policy)
                        tally.matched += why.similar_id is not None
                        writer.write(item, result, (why.similar_id, why.to_dict()))
                        continue
                    found = nsh.store.lookup(doc, nsh.policy)
                    tally.matched += found is not None
                    writer.write(item, result, (found,))
                    continue
                answer = add(result, meta)
                sid = answer.similar_id
                tally.sizes[sid] += 1
                tally.duplicates += answer.duplicate
                if sid not in tally.titles:
                    label = result[1] or result[0]
                    if label:
                        tally.titles[sid] = label
                if answer.merged_from:
                    tally.merges += len(answer.merged_from)
                    for old in answer.merged_from:
                        tally.aliases[old] = sid
                writer.write(item, result, (sid, answer.duplicate))
            writer.flush()
            bar.update(len(batch))
            if not tally.documents and tally.bad >= FIELD_CHECK:
                break
    finally:
        bar.close()
    check.finish()
    if not tally.documents and tally.bad:
        early = " (stopped there)" if tally.bad >= FIELD_CHECK else ""
        raise RecordError(
            f"none of the {_count(tally.bad, 'record')} read from {source.name} could be"
            f" used{early}; the first: {reporter.first}"
        )
    return tally


def _print_summary(
    command: str,
    tally: Tally,
    elapsed: float,
    store_url: str,
    source: Source,
    on_error: str = "write",
    top: int = 10,
) -> None:
    err = sys.stderr
    rate = tally.documents / elapsed if elapsed > 0 else 0.0
    bad = "skipped" if on_error == "skip" else "written with an error" if tally.bad else ""
    line = (
        f"nshash {command}: {_count(tally.documents, 'document')} from {source.name}"
        f" in {elapsed:.2f} s ({rate:,.0f} docs/s); {_count(tally.bad, 'bad record')} {bad}"
    )
    print(line.rstrip(), file=err)
    if command == "query":
        new = tally.documents - tally.matched
        print(f"  {tally.matched:,} match a stored group, {new:,} are new", file=err)
        return
    groups = tally.groups()
    multi = sum(1 for _, size, _ in groups if size > 1)
    print(
        f"  {_count(len(groups), 'group')} ({multi:,} with more than one document),"
        f" {_count(tally.duplicates, 'duplicate')}, {_count(tally.merges, 'merge')}",
        file=err,
    )
    scheme, path, _ = parse_url(store_url)
    if scheme == "memory" and not path:
        where = "memory:// (in this process only; nothing was saved: use --store to keep it)"
    else:
        where = mask_url(store_url)
    print(f"  store: {where}", file=err)
    largest = [g for g in groups if g[1] > 1][:top]
    if largest:
        print(f"  largest groups:\n  {'size':>6}  {'similar_id':>10}  title", file=err)
        for sid, size, title in largest:
            print(f"  {size:>6}  {sid:>10}  {title or '-'}", file=err)
    if tally.merges:
        print(
            "  note: merged ids were written as answered at the time; "
            "`nshash groups` shows the final groups of a saved store",
            file=err,
        )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _fields(args: argparse.Namespace) -> Fields:
    text = (args.text_field,) if args.text_field else Fields().text
    names = ("url", "site", "time")
    tracked = {k: getattr(args, f"{k}_field") for k in names if hasattr(args, f"{k}_field")}
    return Fields(text=text, id=args.id_field, title=args.title_field, **tracked)


def _show_progress(args: argparse.Namespace) -> bool:
    if args.quiet:
        return False
    if args.progress is not None:
        return bool(args.progress)
    return sys.stderr.isatty()


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (one per CPU) or more, not {value!r}")
    return jobs or (os.cpu_count() or 1)


def _same_file(a: str, b: str | None) -> bool:
    if b is None or b == "-" or a == "-":
        return False
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _records(args: argparse.Namespace, mode: str, store_url: str) -> int:
    """Run ``dedup`` (mode ``add``) or ``query`` over an input."""
    started = time.perf_counter()
    try:
        fmt = detect_format(args.input, args.format)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if _same_file(args.input, args.output):
        raise UsageError(f"-o {args.output!r} is the input file; write the output elsewhere")
    if mode == "query" and getattr(args, "explain", False):
        mode = "explain"
    added = {"query": ("similar_id",), "explain": ("similar_id", "explanation")}.get(
        mode, ("similar_id", "duplicate")
    )
    return _records_run(args, mode, store_url, started, fmt, added)


def _records_run(
    args: argparse.Namespace,
    mode: str,
    store_url: str,
    started: float,
    fmt: str,
    added: tuple[str, ...],
) -> int:
    """Run ``dedup`` or ``query`` once the input's format is known (see :func:`_records`)."""
    method = getattr(args, "method", "nshash")
    if getattr(args, "track", False) and method != "nshash":
        raise UsageError(f"--track keeps activity for the nshash method, not --method {method}")
    settings, origins = _settings(args, store_url) if method == "nshash" else ({}, {})
    # The workers fingerprint with the store URL's settings too (NSHash.open refuses a flag
    # that contradicts one). A bad value is refused before any worker starts, naming where it
    # came from.
    in_url = from_text(settings_in_url(store_url)[1], "the store URL")
    given = {**in_url, **settings}
    if given:
        checked = {**dict.fromkeys(in_url, "the store URL"), **origins}
        NSHash.open("memory://", settings_from=checked, **given).close()
    fingerprint = {k: v for k, v in given.items() if SETTINGS[k].text}
    preparer = (
        Preparer(_fields(args), added, fingerprint, args.encoding, getattr(args, "track", False))
        if method == "nshash"
        else _MethodPreparer(_fields(args), added, args.encoding, method)
    )
    with (
        _open_input(args.input, fmt, preparer.fields, args.encoding) as source,
        Workers(args.jobs, preparer) as workers,
        NSHash.open(
            store_url,
            readonly=mode == "query",
            track=getattr(args, "track", False),
            settings_from=origins,
            **settings,
        )
        if method == "nshash"
        else _open_method(store_url, method) as nsh,
    ):
        _check_output(args.output, source.format)
        out, must_close = open_output(args.output)
        writer: JsonlWriter | CsvWriter | ParquetWriter
        try:
            if source.format == "csv":
                assert source.header is not None
                writer = CsvWriter(out, source.header, added, source.newline)
            elif source.format == "parquet":
                from .parquet import ParquetSource, ParquetWriter

                assert isinstance(source, ParquetSource)
                writer = ParquetWriter(out, source, added)
            else:
                writer = JsonlWriter(out, added)
            tracker = Tracker(source, _fields(args)) if getattr(args, "track", False) else None
            try:
                tally = _run(
                    source,
                    workers,
                    nsh,
                    writer,
                    mode,
                    args.on_error,
                    _show_progress(args),
                    tracker,
                )
            except BaseException:
                if not isinstance(writer, (CsvWriter, JsonlWriter)):
                    writer.abandon()  # no footer after a failure (the reader may be gone)
                raise
            finally:
                if isinstance(writer, CsvWriter):
                    writer.detach()
                elif isinstance(writer, JsonlWriter):
                    writer.flush()
                else:
                    writer.close()
        finally:
            if must_close:
                out.close()
    if not args.quiet:
        name = "dedup" if mode == "add" else "query"
        elapsed = time.perf_counter() - started
        _print_summary(name, tally, elapsed, store_url, source, args.on_error)
    return 0


def _open_input(name: str, fmt: str, fields: Fields, encoding: str) -> Source:
    """The records of *name*: :func:`nshash.cli.io.open_source`, or the Parquet reader."""
    if fmt != "parquet":
        return open_source(name, fmt, fields, encoding)
    try:
        from .parquet import open_parquet  # pyarrow loads only for Parquet input
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    return open_parquet(name, fields)


def _open_method(store_url: str, method: str) -> KeyedDedup | SimhashDedup:
    """Open the keyed or simhash method's tables (imported here: only ``--method`` needs it)."""
    if method == "keyed":
        from ..methods.keyed import KeyedDedup

        return KeyedDedup.open(store_url)
    from ..methods.simhash import SimhashDedup

    return SimhashDedup.open(store_url)


def _store_url(args: argparse.Namespace, *, saved: bool) -> str:
    """Return the store URL from ``--store`` or the environment.

    Args:
        saved: the command reads what earlier runs stored, so ``memory://`` without a path
            (which starts empty) is refused.
    """
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if not url:
        if saved:
            raise UsageError(
                f"this command reads a saved store: give --store URL or set {STORE_ENV}"
                " (for example memory:///path/news.pkl or leveldb:///path/news.ldb)"
            )
        return "memory://"
    if saved:
        try:
            scheme, path, _ = parse_url(url)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        if scheme == "memory" and not path:
            raise UsageError(
                f"{url!r} starts empty in every process, so there is nothing to read;"
                " use a saved store such as memory:///path/news.pkl"
            )
    return url


# -- commands ----------------------------------------------------------------------------


def _cmd_dedup(args: argparse.Namespace) -> int:
    if args.engine == "spark":
        return _dedup_spark(args)
    return _records(args, "add", _store_url(args, saved=False))


def _dedup_spark(args: argparse.Namespace) -> int:
    """``dedup --engine spark``: the batch job of :mod:`nshash.spark` on a file Spark reads.

    Spark's master comes from ``spark-submit`` or ``spark.master`` when set, else
    ``local[N]`` with N from ``--jobs``. The output is a directory of part files.
    """
    from ..spark import SPARK_FORMATS, _format_of, _pyspark, dedup_file

    if args.method != "nshash":
        raise UsageError("--engine spark runs the nshash method only")
    if not args.output:
        raise UsageError("--engine spark writes a directory of part files: give -o OUT")
    if args.store:
        raise UsageError("--engine spark keeps no store: leave out --store")
    fmt = args.format
    if fmt is None:
        try:
            fmt = _format_of(args.input)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    if fmt not in SPARK_FORMATS:
        raise UsageError(f"--engine spark reads {' or '.join(SPARK_FORMATS)}, not {fmt!r}")
    if not os.path.exists(args.input):
        raise ConfigError(f"No such file: {args.input!r}")
    started = time.perf_counter()
    sql = _pyspark()
    had_session = sql.SparkSession.getActiveSession() is not None
    builder = sql.SparkSession.builder.appName("nshash dedup")
    from pyspark import SparkConf

    if not SparkConf().contains("spark.master"):
        builder = builder.master(f"local[{args.jobs}]")
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # no Java, or Spark would not start
        raise ConfigError(f"Spark did not start: {str(exc).splitlines()[0]}") from None
    try:
        if not args.quiet and not _show_progress(args):
            spark.sparkContext.setLogLevel("ERROR")
        try:
            counts = dedup_file(
                spark,
                args.input,
                args.output,
                fmt=fmt,
                text_col=args.text_field,
                id_col=args.id_field,
                **_settings(args, "")[0],
            )
        except ConfigError:
            raise
        except Exception as exc:  # Spark's own errors (a bad file, an output that exists)
            raise ConfigError(f"the Spark job failed: {str(exc).strip().splitlines()[0]}") from None
    finally:
        if not had_session:
            spark.stop()
    if not args.quiet:
        elapsed = time.perf_counter() - started
        print(
            f"dedup (spark): {counts['documents']:,} documents, {counts['groups']:,} groups"
            f" of 2+, {counts['duplicates']:,} duplicates, {counts['errors']:,} without a"
            f" group; {elapsed:.1f} s -> {args.output}",
            file=sys.stderr,
        )
    return 0


def _cmd_query(args: argparse.Namespace) -> int:
    return _records(args, "query", _store_url(args, saved=True))


def _group_label(members: Sequence[Any]) -> str:
    for member in members:
        if member.title:
            return f"{member.title} ({member.doc_id})"
    return members[0].doc_id if members else "-"


def _when(seconds: int | None, tz: tzinfo = timezone.utc) -> str:
    if seconds is None:
        return "-"
    return local_time(seconds, tz).strftime("%Y-%m-%d %H:%M")


def _cmd_hot(args: argparse.Namespace, url: str) -> int:
    """``nshash groups --since WINDOW``: the hot stories of the window."""
    with NSHash.open(url, readonly=True) as nsh:
        hot = nsh.hot(args.since, args.top, min_count=args.min_size)
    if args.json:
        data = [
            {
                "similar_id": h.similar_id,
                "recent": h.recent,
                "size": h.size,
                "first_seen": h.first_seen,
                "last_seen": h.last_seen,
                "title": h.title,
                "sites": list(h.sites),
            }
            for h in hot
        ]
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not hot:
        print(
            f"no group got {args.min_size} or more documents in the last {args.since}"
            f" in {mask_url(url)} (only documents added with tracking on count)",
            file=sys.stderr,
        )
        return 0
    print(f"{'recent':>6}  {'size':>6}  {'similar_id':>10}  {'last seen (UTC)':<16}  title")
    for h in hot:
        title = h.title or "-"
        print(f"{h.recent:>6}  {h.size:>6}  {h.similar_id:>10}  {_when(h.last_seen):<16}  {title}")
    return 0


def _finding(args: argparse.Namespace) -> bool:
    """Whether ``nshash groups`` was asked to search, filter or page (the time zone comes
    from ``--tz``, else ``$NSHASH_TIMEZONE`` as the service reads it)."""
    asked = args.tz is not None
    if not asked:
        args.tz = os.environ.get("NSHASH_TIMEZONE") or None
    named = (args.search, args.site, args.start, args.end)
    return asked or any(v is not None for v in named) or args.offset != 0


def _cmd_find(args: argparse.Namespace, url: str) -> int:
    """``nshash groups --search/--site/--from/--to``: a page of the matching stories."""
    tz = zone(args.tz)
    least = 1 if args.min_size is None else args.min_size
    with NSHash.open(url, readonly=True) as nsh:
        page = nsh.find(
            args.search,
            site=args.site,
            start=args.start,
            end=args.end,
            since=args.since,
            tz=args.tz,
            limit=args.top,
            offset=args.offset,
            min_count=least,
        )
    if args.json:
        data = {
            "total": page.total,
            "offset": page.offset,
            "next_offset": page.next_offset,
            "groups": [
                {
                    "similar_id": h.similar_id,
                    "recent": h.recent,
                    "size": h.size,
                    "first_seen": h.first_seen,
                    "last_seen": h.last_seen,
                    "title": h.title,
                    "sites": list(h.sites),
                }
                for h in page.stories
            ],
        }
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not page.stories:
        print(f"no story matches in {mask_url(url)} ({page.total} in all)", file=sys.stderr)
        return 0
    seen = f"last seen ({args.tz or 'UTC'})"
    print(f"{'copies':>6}  {'size':>6}  {'similar_id':>10}  {seen:<22}  title")
    for h in page.stories:
        print(
            f"{h.recent:>6}  {h.size:>6}  {h.similar_id:>10}  {_when(h.last_seen, tz):<22}"
            f"  {h.title or '-'}"
        )
    shown = f"{page.offset + 1}-{page.offset + len(page.stories)} of {page.total}"
    more = f"; next page: --offset {page.next_offset}" if page.next_offset is not None else ""
    print(f"stories {shown}{more}", file=sys.stderr)
    return 0


def _cmd_groups(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    if _finding(args):
        return _cmd_find(args, url)
    if args.min_size is None:
        args.min_size = 2
    if args.since is not None:
        return _cmd_hot(args, url)
    with NSHash.open(url, readonly=True) as nsh:
        groups = nsh.groups(min_size=args.min_size, limit=args.top)
    if args.json:
        data = [
            {
                "similar_id": g.similar_id,
                "size": g.size,
                # "doc_id" repeats "id" for scripts written before the names were made one
                # (deprecated; see the README's vocabulary table).
                "members": [
                    {"id": m.doc_id, "title": m.title, "doc_id": m.doc_id} for m in g.members
                ],
            }
            for g in groups
        ]
        print(json.dumps(data, ensure_ascii=False, indent=2))
        return 0
    if not groups:
        print(f"no group of {args.min_size} or more documents in {mask_url(url)}", file=sys.stderr)
        return 0
    print(f"{'size':>6}  {'similar_id':>10}  title")
    for g in groups:
        print(f"{g.size:>6}  {g.similar_id:>10}  {_group_label(g.members)}")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    with NSHash.open(url, readonly=True) as nsh:
        stats = nsh.stats()
    data: dict[str, Any] = {
        "store": mask_url(url),
        "documents": stats.documents,
        "groups": stats.groups,
        "fingerprints": stats.fingerprints,
        "common_fingerprints": stats.common_fingerprints,
        "last_id": stats.last_id,
        **{str(k): v for k, v in stats.extra.items()},
    }
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    else:
        for key, value in data.items():
            number = isinstance(value, int) and not isinstance(value, bool)
            shown = f"{value:,}" if number else value
            print(f"{key + ':':<21}{shown}")
    return 0


def _cmd_repair(args: argparse.Namespace) -> int:
    url = _store_url(args, saved=True)
    scheme = parse_url(url)[0]
    if scheme not in file_schemes():
        raise UsageError(
            f"repair works on {', '.join(file_schemes())} stores, not {mask_url(url)!r}"
        )
    with open_store(url, repair=True) as store:
        repaired: str | None = getattr(store, "repaired", None)
        stats = store.stats()
    kept = f"{stats.documents:,} documents, {stats.groups:,} groups, last id {stats.last_id:,}"
    if repaired is None:
        print(f"{mask_url(url)}: nothing to repair ({kept})")
    else:
        print(f"{mask_url(url)}: repaired: {repaired}")
        print(f"  kept {kept}")
    return 0


#: The longest text ``nshash compare`` reads by default, in characters: some measures grow
#: with the product of both lengths (two texts this long take seconds, not minutes).
COMPARE_MAX_CHARS = 200_000


def _read_text(name: str, max_chars: int | None = None) -> str:
    """Read a UTF-8 text file (``-``: stdin), refusing one over *max_chars* characters
    without reading much more than that (UTF-8 has at most 4 bytes a character)."""
    shown = "<stdin>" if name == "-" else name
    limit = None if max_chars is None else 4 * max_chars + 4
    if name == "-":
        data = sys.stdin.buffer.read(-1 if limit is None else limit)
    else:
        with open(name, "rb") as f:
            data = f.read(-1 if limit is None else limit)
    too_long = ConfigError(
        f"{shown!r} is over {max_chars:,} characters; give --max-chars N to compare longer"
        " texts (the time grows with the product of both lengths)"
    )
    if limit is not None and len(data) >= limit:
        raise too_long
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{shown!r} is not UTF-8 text") from None
    if max_chars is not None and len(text) > max_chars:
        raise too_long
    return text


def _cmd_compare(args: argparse.Namespace) -> int:
    if args.a == "-" and args.b == "-":
        raise UsageError("only one of A and B can be '-' (stdin)")
    try:
        similarity = importlib.import_module("nshash.toolkit.similarity")
    except ImportError as exc:
        raise ConfigError(
            f"nshash compare needs the similarity toolkit, which cannot be imported ({exc}):"
            f" {install_hint('similarity')}"
        ) from exc
    known = list(similarity.METRICS)
    metrics: list[str] | None = None
    if args.metrics:
        metrics = [m for part in args.metrics for m in part.split(",") if m]
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise UsageError(f"unknown metric(s) {unknown}; choose from {', '.join(known)}")
    if args.max_chars < 1:
        raise UsageError(f"--max-chars must be 1 or more, not {args.max_chars}")
    scores: dict[str, float] = similarity.compare(
        _read_text(args.a, args.max_chars), _read_text(args.b, args.max_chars), metrics=metrics
    )
    if args.json:
        print(json.dumps(scores))
    else:
        width = max((len(name) for name in scores), default=0)
        for name, score in scores.items():
            print(f"{name:<{width}}  {score:.4f}")
    return 0


def _service_module() -> str:
    """Return the importable package holding the HTTP app: ``nshash_service`` or ``service``.

    The one next to this ``nshash`` package comes first (a source checkout's ``service``
    beside an editable install's ``nshash_service`` that points at another checkout).
    """
    home = Path(__file__).resolve().parents[2]
    names = ["nshash_service", "service"]
    for mod in list(names):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and Path(spec.origin).resolve().parents[1] == home:
            names.remove(mod)
            names.insert(0, mod)
            break
    for mod in names:
        try:
            app = importlib.import_module(f"{mod}.app")
        except ModuleNotFoundError as exc:
            if exc.name in (mod, f"{mod}.app"):
                continue
            raise ConfigError(
                f"The HTTP service cannot be imported ({exc}): {install_hint('service')}"
            ) from exc
        if hasattr(app, "create_app"):
            return mod
    raise ConfigError(
        "The HTTP service is not installed (neither nshash_service nor service can be"
        f" imported): {install_hint('service')}"
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    """Check everything the service needs, then run it: any start-up problem is one line."""
    url: str | None = args.store or os.environ.get(STORE_ENV)
    if args.workers < 1:
        raise UsageError(f"--workers must be 1 or more, not {args.workers}")
    if args.workers > 1:
        scheme = parse_url(url)[0] if url else "memory"
        if scheme not in SHARED_SCHEMES:
            raise UsageError(
                f"--workers {args.workers} needs a store shared between processes"
                f" (redis://, rediss:// or unix://), not {mask_url(url or 'memory://')!r}:"
                " memory and LevelDB state lives in one process, so each worker would hand"
                " out its own ids (and LevelDB admits one opener); run one worker or use Redis"
            )
    missing = [m for m in ("uvicorn", "fastapi") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"nshash serve needs {' and '.join(missing)}: {install_hint('service')}"
        )
    mod = _service_module()
    if url:
        os.environ[STORE_ENV] = url
    settings = _service_settings(mod)
    listener = _listen(args.host, args.port)
    _no_delay(listener)
    uvicorn = importlib.import_module("uvicorn")
    server_config = importlib.import_module(f"{mod}.server").server_config
    where = {"host": args.host, "port": args.port}
    if args.workers == 1:
        # The app is built and its store opened here, so a bad URL, a missing driver or a
        # locked file is reported as one line; the lifespan then finds the store open.
        app = importlib.import_module(f"{mod}.app").create_app(settings)
        app.state.service.store.open()
        _banner(args, settings, listener)
        uvicorn.Server(server_config(settings, app, **where)).run(sockets=[listener])
        return 0
    # Several workers (Redis only): each builds its own app; check the store opens first.
    holder = importlib.import_module(f"{mod}.deps").StoreHolder(settings)
    holder.open()
    holder.close()
    _banner(args, settings, listener)
    config = server_config(
        settings, f"{mod}.app:create_app", factory=True, workers=args.workers, **where
    )
    from uvicorn.supervisors import Multiprocess

    Multiprocess(config, sockets=[listener]).run()
    return 0


def _banner(args: argparse.Namespace, settings: Any, listener: Any) -> None:
    """Say on stderr where ``nshash serve`` listens and what it serves: its address, store
    (any password masked), method and workers."""
    host, port = listener.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    workers = "1 worker" if args.workers == 1 else f"{args.workers} workers"
    key = "API key required" if settings.api_key is not None else "no API key"
    print(
        f"nshash serve: http://{shown}:{port}/ | store {mask_url(settings.store_url)} |"
        f" method {settings.method} | {workers} | {key}",
        file=sys.stderr,
        flush=True,
    )


def _no_delay(sock: Any) -> None:
    """Turn Nagle's algorithm off on the listening socket; accepted connections inherit it.

    uvicorn creates the shared socket of ``--workers N`` without naming the TCP protocol, so
    asyncio does not set TCP_NODELAY on the connections it accepts, and a kept-alive client
    then waits about 40 ms (the peer's delayed ACK) for every answer sent in two writes.
    """
    import socket

    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _service_settings(mod: str) -> Any:
    """Read the service's settings from the environment; a bad value is a :class:`ConfigError`."""
    pydantic = importlib.import_module("pydantic")
    settings_module = importlib.import_module(f"{mod}.settings")
    try:
        return settings_module.Settings()
    except pydantic.ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = "NSHASH_" + "_".join(str(part) for part in error["loc"]).upper()
            problems.append(f"{name}={error.get('input')!r}: {error['msg']}")
        raise ConfigError("Bad service setting " + "; ".join(problems)) from None


def _listen(host: str, port: int) -> Any:
    """Bind the service's socket now, so an address in use is an error line, not a log."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"Cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


# -- parser ------------------------------------------------------------------------------

_STORE_HELP_SAVED = f"store URL (default: ${STORE_ENV}); e.g. memory:///path/news.pkl"


def _add_record_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="OUT", help="write here (default: stdout; .gz: gzip)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="input format (default: from the name: .jsonl[.gz], .csv[.gz], a folder/.txt,"
        " .parquet)",
    )
    p.add_argument(
        "--text-field",
        metavar="NAME",
        help="the field with the article text (default: 'text', or 'content' if absent)",
    )
    p.add_argument(
        "--encoding",
        default="auto",
        metavar="NAME",
        help="the input's encoding (default auto: UTF-8, else GBK, Big5 or UTF-16 as detected"
        " from the start of the input); the output is UTF-8",
    )
    p.add_argument("--id-field", default="id", metavar="NAME", help="the id field (default: id)")
    p.add_argument(
        "--title-field", default="title", metavar="NAME", help="the title field (default: title)"
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="fingerprint in N processes (0: one per CPU; default 1); same output for any N",
    )
    p.add_argument(
        "--on-error",
        choices=("write", "skip", "fail"),
        default="write",
        help="a bad record is reported and written with similar_id null and an 'error' field"
        " (default: output line N stays input line N), left out (skip), or stops the run with"
        " exit 1 (fail)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    tuning = p.add_argument_group(
        "tuning (each also a store URL option, ?theta=0.6, and a variable, NSHASH_THETA)"
    )
    for setting in SETTINGS.values():
        default = "" if setting.default is None else f"; default {setting.default}"
        tuning.add_argument(
            setting.flag,
            dest=f"setting_{setting.name}",
            metavar="X",
            help=f"{setting.help}{default}",
        )


class _VersionAction(argparse.Action):
    """``--version``: looks the version up only when asked (the lookup costs every run)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .. import __version__
        from ..methods.nshash.compiled import assign_info
        from ..text.kernel import kernel_info

        info, assign = kernel_info(), assign_info()
        print(
            f"nshash {__version__} (text path: {info['path']}; {info['reason']})"
            f" (assignment: {assign['path']}; {assign['reason']})"
        )
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """Return the ``nshash`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="nshash",
        description="Near-duplicate detection for crawled articles: reposts of one story"
        " share a similar_id.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        nargs=0,
        help="show program's version number and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "dedup",
        help="give every article of a file its similar_id",
        description="Write every record of INPUT with its similar_id and duplicate flag, in"
        " input order (JSONL in, JSONL out; CSV in, CSV out; Parquet in, Parquet out; .txt files"
        " in, JSONL out).",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="a .jsonl[.gz], .csv or .parquet file, a folder of .txt files, or - for JSONL on"
        " stdin",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL (default: ${STORE_ENV}, else memory://, which lives in this process"
        " only and writes nothing to disk)",
    )
    p.add_argument(
        "--method",
        choices=("nshash", "keyed", "simhash"),
        default="nshash",
        help="nshash's sentence anchors (default); the keyed method: content, head, tail"
        " and title keys confirmed by cosine (needs nshash[keyed]); or simhash: one 64-bit"
        " simhash a document, Hamming distance <= 3 (seed 002). Each keeps its own tables",
    )
    p.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="local: this machine, in input order (default); spark: the batch job of"
        " nshash.spark on a Parquet or JSONL input (needs nshash[spark] and Java; -o names"
        " the output directory; --jobs N runs local[N] unless spark-submit sets a master)",
    )
    p.add_argument(
        "--track",
        action="store_true",
        help="keep each record's url, site and time with its group, as the service does, so"
        " that `nshash groups --since 24h` and the hot-stories pages rank the stories (the"
        " nshash method; fields named by --url-field, --site-field and --time-field)",
    )
    p.add_argument(
        "--url-field", default="url", metavar="NAME", help="with --track: the url field (url)"
    )
    p.add_argument(
        "--site-field",
        default="site",
        metavar="NAME",
        help="with --track: the site field (site; default: the host of the url)",
    )
    p.add_argument(
        "--time-field",
        default="published_at",
        metavar="NAME",
        help="with --track: the time field, epoch seconds or an ISO 8601 time (published_at;"
        " default: now)",
    )
    _add_record_options(p)
    p.set_defaults(func=_cmd_dedup, parser=p)

    p = sub.add_parser(
        "groups",
        help="the largest groups of a saved store (hot stories)",
        description="List the largest groups of a saved store, or with --since the stories"
        " that got the most copies in a recent window, with their titles.",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.add_argument("--top", type=int, default=30, metavar="N", help="how many groups (default 30)")
    p.add_argument(
        "--min-size",
        type=int,
        default=None,
        metavar="N",
        help="smallest group shown (default 2; 1 with --search, --site, --from or --to)",
    )
    p.add_argument("--json", action="store_true", help="JSON with every member")
    p.add_argument(
        "--search",
        "-q",
        metavar="TERM",
        help="only stories whose headline holds TERM (case, width and traditional or"
        " simplified script do not matter)",
    )
    p.add_argument("--site", metavar="HOST", help="only stories carried by this site")
    p.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        help="rank by copies from this date or time (ISO 8601: 2019-01-01, 2019-01-01T08:00)",
    )
    p.add_argument(
        "--to",
        dest="end",
        metavar="WHEN",
        help="... up to this one (exclusive; a bare date takes that whole day)",
    )
    p.add_argument(
        "--tz",
        metavar="ZONE",
        help="time zone of --from/--to and of the times shown (Asia/Hong_Kong; default"
        " $NSHASH_TIMEZONE, else UTC)",
    )
    p.add_argument(
        "--offset", type=int, default=0, help="skip this many matching stories (next pages)"
    )
    p.add_argument(
        "--since",
        metavar="WINDOW",
        help="rank by documents added in this window instead (24h, 90m, 7d; counts only"
        " documents added with tracking on, as the service does); --min-size is then the"
        " fewest documents in the window",
    )
    p.set_defaults(func=_cmd_groups, parser=p)

    p = sub.add_parser(
        "query",
        help="the similar_id each record would get from a saved store (writes nothing)",
        description="Write every record of INPUT with the similar_id it would get (null when"
        " new); the store is not changed.",
    )
    p.add_argument(
        "input",
        metavar="INPUT",
        help="a .jsonl[.gz], .csv, .parquet or .txt file, a folder, or - for JSONL on stdin",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.add_argument(
        "--explain",
        action="store_true",
        help='add an "explanation" to each record: the anchors looked up, those set aside as'
        " boilerplate, and every group they hit with the sketch overlap, score and verdict",
    )
    _add_record_options(p)
    p.set_defaults(func=_cmd_query, parser=p)

    p = sub.add_parser(
        "stats",
        help="counts over a saved store",
        description="Print a saved store's counts: documents, groups, fingerprints, the"
        " fingerprints learned as boilerplate, the last id given, and the store's own figures.",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_stats, parser=p)

    p = sub.add_parser(
        "repair",
        help="recover a damaged memory or LevelDB store (keeps everything before the damage)",
        description="Open a memory store whose journal is damaged, keeping every line before"
        " the damage (the damaged journal is kept as PATH.journal.damaged), or a LevelDB"
        " directory (LevelDB's repair, then every counter checked against its tables).",
    )
    p.add_argument("--store", metavar="URL", help=_STORE_HELP_SAVED)
    p.set_defaults(func=_cmd_repair, parser=p)

    p = sub.add_parser(
        "compare",
        help="similarity scores of two texts (nshash[similarity])",
        description="Score two texts with the similarity measures, each in [0, 1]:"
        f" {', '.join(METRIC_NAMES)}.",
    )
    p.add_argument("a", metavar="FILE_A", help="a text file, or - for stdin")
    p.add_argument("b", metavar="FILE_B", help="a text file, or - for stdin")
    p.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help=f"which measures (default: all): {', '.join(METRIC_NAMES)}",
    )
    p.add_argument(
        "--max-chars",
        type=int,
        default=COMPARE_MAX_CHARS,
        metavar="N",
        help=f"refuse a text longer than N characters (default {COMPARE_MAX_CHARS:,})",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_compare, parser=p)

    p = sub.add_parser(
        "serve",
        help="run the HTTP service on uvicorn (nshash[service])",
        description="Run the HTTP service and its pages on uvicorn. Settings come from"
        " NSHASH_* variables (NSHASH_STORE_URL, NSHASH_API_KEY, ...; see the README); the"
        " options below override them.",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help=f"store URL, passed to the service as ${STORE_ENV} (default: the service's)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", metavar="ADDR", help="address to bind (default 127.0.0.1)"
    )
    p.add_argument("--port", type=int, default=8000, metavar="N", help="port (default 8000)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="uvicorn worker processes (default 1; more need a redis:// store)",
    )
    p.set_defaults(func=_cmd_serve, parser=p)
    return parser


def _describe_os_error(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {exc.filename!r}"
    return str(exc) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``nshash`` command line and return its exit status.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 1 on an error, 2 on bad usage.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    sub: argparse.ArgumentParser = args.parser
    try:
        code: int = args.func(args)
        return code
    except UsageError as exc:
        sub.print_usage(sys.stderr)
        print(f"{sub.prog}: error: {exc}", file=sys.stderr)
        return 2
    except NSHashError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"Error: {_describe_os_error(exc)}", file=sys.stderr)
        return 1
    except EOFError:
        print("Error: the input ended in the middle (a truncated .gz file?)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted", file=sys.stderr)
        return 130
