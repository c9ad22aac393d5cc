"""``nshash dedup`` and ``nshash query``: every record of a file through a store, written back in
input order with its ``similar_id`` (``query`` only reads the store; ``--engine spark`` hands
``dedup`` to :mod:`nshash.spark`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from ..errors import ConfigError, NSHashError, StateError
from ..methods.nshash.core import NSHash
from ..options import SETTINGS, blame, from_environ, from_text, settings_in_url
from ..results import AddResult, DocMeta
from .common import (
    _STORE_HELP_SAVED,
    PROCESSES_PER_CPU,
    STORE_ENV,
    RecordError,
    UsageError,
    _store_url,
    most_processes,
)
from .io import (
    FORMATS,
    BadRecord,
    CsvWriter,
    Fields,
    JsonlWriter,
    Prepared,
    Preparer,
    Source,
    Tracker,
    detect_format,
    doc_of,
    open_output,
    open_source,
)
from .progress import Tally, _count, _print_summary, _Progress, _Reporter, _say
from .workers import BATCH_SIZE, Workers

if TYPE_CHECKING:

    from ..methods.keyed import KeyedDedup
    from ..methods.simhash import SimhashDedup
    from .parquet import ParquetWriter

    #: What ``dedup --method`` opens.
    Method = NSHash | KeyedDedup | SimhashDedup



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


def _settings(
    args: argparse.Namespace, in_url: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The tuning settings this run gives besides the store URL's own (*in_url*), and where
    each came from: the flags (``--theta``), else the ``NSHASH_*`` variables for a setting the
    URL does not give itself.
    """
    values = {k: v for k, v in from_environ(os.environ).items() if k not in in_url}
    origins = {k: f"the environment variable {SETTINGS[k].env}" for k in values}
    for name, setting in SETTINGS.items():
        flagged = getattr(args, f"setting_{name}", None)
        if flagged is not None:
            values[name] = setting.cast(flagged, setting.flag)
            origins[name] = setting.flag
    return values, origins


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

    def _slots(self, text: str, title: str | None, packed: bool = False) -> tuple[Any, Any, Any]:
        if self.method == "keyed":
            keyed = self._keymaker.prepare(text, title)
            return keyed.keys, keyed.vector, (0, 0)
        doc = self._simhash(text)
        return doc.keys, (doc.fingerprint,), (0, 0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_MethodPreparer, (self.fields, self.added, self.encoding, self.method))


#: A fingerprint slot of a Prepared record that is not packed.
Slot = tuple[int, ...]


def _adder(nsh: Method) -> Callable[[Prepared, DocMeta | None], AddResult]:
    """The add call of the method, fed what its preparer made (and, tracking, the record's
    :class:`~nshash.DocMeta`)."""
    if isinstance(nsh, NSHash):
        # The preparer checked the id and title as add_prepared does (check_doc_id and
        # check_title, in the worker): the add goes straight to the checked arguments' call.
        add = nsh._add
        return lambda r, m: add(doc_of(r), r[0], r[1], m, False)
    from ..methods.keyed import KeyedDedup, KeyedDoc
    from ..methods.simhash import SimhashDoc

    # These methods' preparers never pack their slots (see Preparer.run).
    if isinstance(nsh, KeyedDedup):
        keyed = nsh
        return lambda r, m: keyed.add_prepared(
            KeyedDoc(cast(Slot, r[2]), cast(Slot, r[3])), r[0], title=r[1]
        )
    sim = nsh
    return lambda r, m: sim.add_prepared(
        SimhashDoc(cast(Slot, r[3])[0], cast(Slot, r[2])), r[0], title=r[1]
    )


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
    sizes = tally.sizes
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
                    doc = doc_of(result)
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
                sizes[sid] = sizes.get(sid, 0) + 1  # (Counter's += calls __missing__)
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
    most = most_processes()
    if jobs > most:
        raise argparse.ArgumentTypeError(
            f"must be at most {most} here ({PROCESSES_PER_CPU} per CPU core), not {value!r}"
        )
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
    in_url = settings_in_url(store_url)[1] if method == "nshash" else {}
    settings, origins = _settings(args, in_url) if method == "nshash" else ({}, {})
    # The workers fingerprint with the store URL's settings too. NSHash.open below checks
    # every value again (the guard's too) and refuses a flag that contradicts the URL; a bad
    # fingerprinter value is named here by where it came from.
    given = {**from_text(in_url, "the store URL"), **settings}
    fingerprint = {k: v for k, v in given.items() if SETTINGS[k].text}
    track = getattr(args, "track", False)
    try:
        preparer = (
            Preparer(_fields(args), added, fingerprint, args.encoding, track)
            if method == "nshash"
            else _MethodPreparer(_fields(args), added, args.encoding, method)
        )
    except ConfigError as exc:
        raise blame(exc, {**dict.fromkeys(in_url, "the store URL"), **origins}) from None
    # The store opens before the workers start: they fingerprint with the letter_units it
    # was begun with (NSHash adopts it when no flag, variable or URL gives one).
    with (
        _open_input(args.input, fmt, preparer.fields, args.encoding) as source,
        NSHash.open(
            store_url,
            readonly=mode == "query",
            track=getattr(args, "track", False),
            settings_from=origins,
            **settings,
        )
        if method == "nshash"
        else _open_method(store_url, method) as nsh,
        Workers(args.jobs, _store_preparer(preparer, nsh)) as workers,
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


def _store_preparer(preparer: Preparer, nsh: Method) -> Preparer:
    """*preparer*, fingerprinting as *nsh* does: with the ``letter_units`` its store was
    begun with (NSHash adopted it, see :meth:`nshash.Store.letter_units`)."""
    if not isinstance(nsh, NSHash) or type(preparer) is not Preparer:
        return preparer
    units = nsh.fingerprinter.letter_units
    if preparer.fingerprinter.letter_units == units:
        return preparer
    options = {**preparer.fingerprint_options, "letter_units": units}
    return Preparer(preparer.fields, preparer.added, options, preparer.encoding, preparer.track)


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


# -- commands ----------------------------------------------------------------------------


def _cmd_dedup(args: argparse.Namespace) -> int:
    if args.engine == "spark":
        return _dedup_spark(args)
    if args.against is not None or args.export_groups is not None or args.spark_parts:
        raise UsageError(
            "--against, --export-groups and --spark-parts need --engine spark (the local"
            " engine keeps its groups in --store; nshash groups --export writes them)"
        )
    return _records(args, "add", _store_url(args, saved=False))


def _dedup_spark(args: argparse.Namespace) -> int:
    """``dedup --engine spark``: the batch job of :mod:`nshash.spark` on a file Spark reads.

    Spark's master comes from ``spark-submit`` or ``spark.master`` when set, else
    ``local[N]`` with N from ``--jobs`` (its workers run this Python); a small input starts
    a driver tuned for a short job (:func:`nshash.spark.session`'s *small*). The output is one
    file, or with ``--spark-parts`` a folder of part files.
    """
    from ..spark import (
        SPARK_FORMATS,
        _format_of,
        check_outputs,
        dedup_file,
        failure_reason,
        is_small,
        session,
        spoil_class_archive,
    )

    if args.method != "nshash":
        raise UsageError("--engine spark runs the nshash method only")
    if not args.output:
        raise UsageError("--engine spark writes a file: give -o OUT")
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
    for state in args.against or ():
        if "://" not in state and not os.path.exists(state):
            raise StateError(f"No such file: {state!r} (--against)")
    check_outputs(args.output, args.export_groups)  # before a JVM starts
    root = logging.getLogger()
    if not root.handlers:
        # py4j reports the call a Ctrl-C broke with logging.exception, which would set up the
        # root logger and print its tracebacks; "Interrupted" says it here.
        root.addHandler(logging.NullHandler())
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    had_session = SparkSession.getActiveSession() is not None
    spark = session(cores=args.jobs, app="nshash dedup", small=is_small(args.input))
    spark.sparkContext.setLogLevel("FATAL")  # a failure is told in one Error line below
    done = False
    try:
        counts = dedup_file(
            spark,
            args.input,
            args.output,
            fmt=fmt,
            fields=_fields(args),
            parts=args.spark_parts,
            against=args.against,
            export_groups=args.export_groups,
            **_settings(args, {})[0],
        )
        done = True
    except NSHashError:
        raise
    except Exception as exc:  # Spark's own errors (a file it cannot read)
        raise ConfigError(f"the Spark job failed: {failure_reason(exc)}") from None
    finally:
        if not done:
            spoil_class_archive()
        if not had_session:
            spark.stop()
    if not args.quiet:
        elapsed = time.perf_counter() - started
        exported = ""
        if "exported" in counts:
            exported = f"; {counts['exported']:,} groups -> {args.export_groups}"
        print(
            f"dedup (spark): {counts['documents']:,} documents, {counts['groups']:,} groups"
            f" of 2+, {counts['duplicates']:,} duplicates, {counts['errors']:,} without a"
            f" group; {elapsed:.1f} s -> {args.output}{exported}",
            file=sys.stderr,
        )
    return 0


def _cmd_query(args: argparse.Namespace) -> int:
    return _records(args, "query", _store_url(args, saved=True))


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
        help="fingerprint in N processes (0: one per CPU; default 1; at most 4 per CPU);"
        " same output for any N",
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


def add_dedup_parser(sub: Any) -> None:
    """The ``dedup`` command's options."""
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
        " nshash.spark on a Parquet or JSONL input, the same output (needs nshash[spark] and"
        " Java; -o names the output file; --jobs N runs local[N] unless spark-submit sets a"
        " master)",
    )
    p.add_argument(
        "--spark-parts",
        action="store_true",
        help="with --engine spark: write -o OUT as a folder of Spark part files (for outputs"
        " too large for one file, or on a cluster's storage) instead of one file",
    )
    p.add_argument(
        "--against",
        metavar="STATE",
        action="append",
        help="with --engine spark: group INPUT against stored groups, a previous run's"
        " output (JSONL or Parquet records with similar_id) or an export of groups (`nshash"
        " groups --export FILE`, or a run's --export-groups FILE): new records get a stored"
        " group's id where they belong, new groups ids after the largest stored one; repeat"
        " it to join several (an export and the outputs since)",
    )
    p.add_argument(
        "--export-groups",
        metavar="FILE",
        help="with --engine spark: also write the groups (those of --against with INPUT's"
        " records joined in, and the new ones) and the learned boilerplate as an export, a"
        " Parquet file, for the next run's --against FILE",
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


def add_query_parser(sub: Any) -> None:
    """The ``query`` command's options."""
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
