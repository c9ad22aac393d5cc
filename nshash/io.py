"""Article files for the command line: readers, the fingerprinting step, and writers.

Four input formats, picked from the name or given explicitly:

* ``jsonl``: one JSON object a line (``.jsonl``, ``.json``, ``.ndjson``, also gzipped as
  ``.gz``, or ``-`` for stdin). Lines are kept as bytes: the output line is the input line,
  byte for byte, with ``"similar_id"`` and ``"duplicate"`` added before its closing brace.
* ``csv``: a header row, then one article a row (``.csv``, also ``.csv.gz``). Rows are numbered
  as a spreadsheet shows them: the header is row 1, the first article row 2.
* ``txt``: a folder of ``.txt`` files (searched recursively, sorted by path) or one ``.txt``
  file. The id is the file's path relative to the folder, the title its first non-blank line.
* ``parquet``: a Parquet file (``.parquet``, ``.pq``) or a folder of part files so named, as
  Spark writes it, read in batches by
  :mod:`nshash.parquet` (``pip install 'nshash[parquet]'``), written back as Parquet with
  every input column and the two added ones.

The work is split so that the expensive part can run in worker processes: a :class:`Source`
yields batches of raw items in input order, a :class:`Preparer` (pure; picklable config)
parses each item and fingerprints its text, and the parent feeds the results to the store in
order and hands them to a writer. A record that cannot be used (not JSON, no text field, a text
with no letters or digits) comes back as a :class:`BadRecord` message instead.
"""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from .errors import ConfigError, EmptyDocumentError, NSHashError
from .fingerprint import Fingerprinter

__all__ = [
    "FORMATS",
    "BadRecord",
    "CsvError",
    "CsvWriter",
    "Fields",
    "Item",
    "JsonlWriter",
    "Prepared",
    "Preparer",
    "Source",
    "detect_format",
    "open_output",
    "open_source",
]

#: The input formats :func:`open_source` reads.
FORMATS = ("jsonl", "csv", "txt", "parquet")

#: The text fields tried, in order, when no ``--text-field`` is given: raw corpora usually
#: name the article body ``content``, repost sets and many exports ``text``.
DEFAULT_TEXT_FIELDS = ("content", "text")

#: Longest title kept for a ``.txt`` file (its first line may be a whole paragraph).
TXT_TITLE_MAX = 200

_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True, slots=True)
class Fields:
    """Which record fields hold the text, the id and the title.

    Attributes:
        text: the text field names to try in order (the first one a record has is used).
        id: the id field; a record without it is still grouped but not listed by name.
        title: the title field, kept with the id for group listings.
    """

    text: tuple[str, ...] = DEFAULT_TEXT_FIELDS
    id: str = "id"
    title: str = "title"

    def describe_text(self) -> str:
        """Return the text field names for a message: ``'content' or 'text'``."""
        return " or ".join(repr(f) for f in self.text)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that cannot be fingerprinted, and why (one sentence, no location)."""

    message: str


#: A fingerprinted record: doc id, title, the three :class:`~nshash.DocPrint` fields
#: (sentences, sketch, exact) and, for JSONL, the output line's head when the input line could
#: not be reused as it is (None otherwise). Plain tuples keep the trip between processes cheap.
Prepared = tuple[str | None, str | None, tuple[int, ...], tuple[int, ...], int, bytes | None]

#: What the parent sends a worker per record: a JSONL line (bytes), a CSV row's
#: ``("row", text, id, title)``, or a ``.txt`` file's ``("file", path, id, None)``.
Payload = bytes | tuple[str, str, str | None, str | None]


def detect_format(name: str, given: str | None = None) -> str:
    """Return the input format of *name*: *given* if set, else one guessed from the name.

    Args:
        name: a file or folder path, or ``-`` for stdin (JSONL unless *given* says otherwise).
        given: ``jsonl``, ``csv``, ``txt`` or ``parquet``, or None to guess.

    Raises:
        ConfigError: *given* is unknown, or the format cannot be told from *name*.
    """
    if given is not None:
        if given not in FORMATS:
            raise ConfigError(f"Unknown format {given!r}; use one of {', '.join(FORMATS)}")
        return given
    if name == "-":
        return "jsonl"
    lower = name.lower().rstrip("/")
    if lower.endswith(_PARQUET_SUFFIXES):  # a file, or a folder of part files (Spark's)
        return "parquet"
    if os.path.isdir(name):
        return "txt"
    if lower.endswith(".gz"):
        lower = lower[:-3]
    if lower.endswith(_JSONL_SUFFIXES):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith(".txt"):
        return "txt"
    raise ConfigError(
        f"Cannot tell the format of {name!r} from its name; use --format jsonl, csv, txt or parquet"
    )


class Preparer:
    """Parses raw records and fingerprints their text; pure, so it runs in worker processes.

    Args:
        fields: where the text, id and title are.
        added: the keys the command adds to each record (``similar_id``, ``duplicate``); a
            JSONL record that already has one of them is rewritten without it.
        fingerprint_options: options for :class:`~nshash.Fingerprinter`; they must match the
            ``NSHash`` the results are added to.
    """

    def __init__(
        self,
        fields: Fields,
        added: Sequence[str],
        fingerprint_options: dict[str, Any] | None = None,
    ) -> None:
        self.fields = fields
        self.added = tuple(added)
        self.fingerprint_options = dict(fingerprint_options or {})
        self.fingerprinter = Fingerprinter(**self.fingerprint_options)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Preparer, (self.fields, self.added, self.fingerprint_options))

    def run(self, payloads: Sequence[Payload]) -> list[Prepared | BadRecord]:
        """Prepare a batch of payloads, in order."""
        out: list[Prepared | BadRecord] = []
        for payload in payloads:
            try:
                if isinstance(payload, bytes):
                    out.append(self._jsonl(payload))
                elif payload[0] == "file":
                    out.append(self._txt(payload[1], payload[2]))
                else:
                    out.append(self._fingerprint(payload[1], payload[2], payload[3], None))
            except _Bad as bad:
                out.append(BadRecord(str(bad)))
        return out

    def _fingerprint(
        self, text: str, doc_id: str | None, title: str | None, head: bytes | None
    ) -> Prepared:
        try:
            doc = self.fingerprinter.prepare(text)
        except EmptyDocumentError:
            raise _Bad("the text has no letters or digits") from None
        except NSHashError as exc:  # pragma: no cover - prepare only raises for non-str text
            raise _Bad(str(exc)) from None
        return (doc_id, title, doc.sentences, doc.sketch, doc.exact, head)

    def _jsonl(self, line: bytes) -> Prepared:
        try:
            record = json.loads(line)
        except UnicodeDecodeError:
            raise _Bad("the line is not valid UTF-8") from None
        except ValueError as exc:
            raise _Bad(f"not valid JSON ({exc})") from None
        if not isinstance(record, dict):
            raise _Bad(f"a JSON {_json_type(record)}, not an object")
        fields = self.fields
        for name in fields.text:
            if name in record:
                text = record[name]
                break
        else:
            raise _Bad(f"no {fields.describe_text()} field")
        if not isinstance(text, str):
            raise _Bad(f"the {name!r} field is a JSON {_json_type(text)}, not a string")
        doc_id = _record_id(record.get(fields.id), fields.id)
        title = record.get(fields.title)
        if not isinstance(title, str) or not title:
            title = None
        elif not _encodable(title):  # a lone surrogate ("\ud800"): valid JSON, not UTF-8
            title = title.encode("utf-8", "replace").decode("utf-8")
        head = None
        if any(key in record for key in self.added):
            kept = {k: v for k, v in record.items() if k not in self.added}
            try:
                dumped = json.dumps(kept, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates stay escaped, as they came
                dumped = json.dumps(kept).encode("ascii")
            head = dumped[:-1] + (b", " if kept else b"")
        return self._fingerprint(text, doc_id, title, head)

    def _txt(self, path: str, doc_id: str | None) -> Prepared:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise _Bad(f"cannot read the file ({exc.strerror})") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise _Bad("the file is not valid UTF-8") from None
        title = next((line.strip() for line in text.splitlines() if line.strip()), None)
        if title is not None and len(title) > TXT_TITLE_MAX:
            title = title[: TXT_TITLE_MAX - 1] + "…"
        return self._fingerprint(text, doc_id, title, None)


class _Bad(Exception):
    """Raised inside :class:`Preparer` for a record that cannot be used."""


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def _encodable(text: str) -> bool:
    """Return whether *text* can be written as UTF-8 (JSON escapes allow lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _record_id(value: object, field: str) -> str | None:
    """Return a record's id as a str (numbers are accepted), or None when it has none."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        if not _encodable(value):
            raise _Bad(f"the {field!r} field holds a lone surrogate, which is not valid Unicode")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _Bad(f"the {field!r} field is a JSON {_json_type(value)}, not a string or integer")


@dataclass(slots=True)
class Item:
    """One raw record as the parent keeps it.

    Attributes:
        where: its location for messages (``line 7``, ``row 3``, ``news/a.txt``).
        payload: what a :class:`Preparer` gets.
        row: a CSV row as read (the writer copies it), else None.
        bad: why the record was refused while reading (a CSV row of the wrong width), else
            None; such an item is never fingerprinted.
    """

    where: str
    payload: Payload
    row: list[str] | None = None
    bad: str | None = None


class Source:
    """An open input: yields its records in batches, in input order.

    Use :func:`open_source` to get one; close it (or use ``with``) when done.

    Attributes:
        name: the input's name for messages (``-`` reads as ``<stdin>``).
        format: ``jsonl``, ``csv`` or ``txt``.
        header: the CSV header row (None for other formats).
        total: how many records there are, when known before reading (a ``.txt`` folder).
        newline: the line ending to write (a CSV input's own; ``\\n`` otherwise).
    """

    def __init__(
        self,
        name: str,
        format: str,
        items: Iterator[Item],
        closers: Sequence[Callable[[], object]] = (),
        header: list[str] | None = None,
        total: int | None = None,
        newline: str = "\n",
    ) -> None:
        self.name = name
        self.format = format
        self.header = header
        self.total = total
        self.newline = newline
        self._items = items
        self._closers = list(closers)

    def batches(self, size: int = 256) -> Iterator[list[Item]]:
        """Yield lists of up to *size* items, in input order."""
        items = self._items
        while batch := list(itertools.islice(items, size)):
            yield batch

    def close(self) -> None:
        """Close the underlying files (never stdin)."""
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(name: str, format: str, fields: Fields) -> Source:
    """Open the input *name* in *format* (see :func:`detect_format`).

    Raises:
        ConfigError: the input does not fit the format (a CSV without the text column, a
            folder with no ``.txt`` file, ``-`` with ``txt``).
        OSError: the input cannot be opened.
    """
    if format == "txt":
        return _open_txt(name)
    if format == "parquet":
        return _open_parquet(name, fields)
    closers: list[Callable[[], object]] = []
    if name == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        raw = open(name, "rb")
        closers.append(raw.close)
        if name.lower().endswith(".gz"):
            raw = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
            closers.append(raw.close)
    display = "<stdin>" if name == "-" else name
    try:
        if format == "jsonl":
            return Source(display, "jsonl", _jsonl_items(raw), closers)
        return _open_csv(display, raw, closers, fields)
    except BaseException:
        while closers:
            closers.pop()()
        raise


def _jsonl_items(raw: IO[bytes]) -> Iterator[Item]:
    for number, line in enumerate(raw, 1):
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line.strip():  # blank lines (often the last one) are no records
            yield Item(f"line {number}", line)


def _open_csv(
    display: str, raw: IO[bytes], closers: list[Callable[[], object]], fields: Fields
) -> Source:
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    # Detach on close: a wrapper that is garbage-collected closes what it wraps (stdin too).
    closers.append(text.detach)
    # Articles are long: lift the csv module's 128 KiB field limit.
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
    first = text.readline()
    if not first.strip():
        raise ConfigError(f"{display} has no CSV header row")
    newline = "\r\n" if first.endswith("\r\n") else "\n"
    reader = csv.reader(itertools.chain([first], text))
    header = next(reader)
    text_col = next((header.index(f) for f in fields.text if f in header), None)
    if text_col is None:
        raise ConfigError(
            f"{display} has no {fields.describe_text()} column; its header is {header!r}"
            " (use --text-field)"
        )
    id_col = header.index(fields.id) if fields.id in header else None
    title_col = header.index(fields.title) if fields.title in header else None
    return Source(
        display,
        "csv",
        _csv_items(reader, len(header), text_col, id_col, title_col),
        closers,
        header=header,
        newline=newline,
    )


def _csv_items(
    reader: Any,
    width: int,
    text_col: int,
    id_col: int | None,
    title_col: int | None,
) -> Iterator[Item]:
    number = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise CsvError(f"row {number + 1}: {exc}") from None
        except UnicodeDecodeError:
            raise CsvError(f"row {number + 1}: not valid UTF-8") from None
        number += 1
        if not row:
            continue
        where = f"row {number}"
        if len(row) != width:
            yield Item(where, b"", row, f"the row has {len(row)} fields, the header {width}")
            continue
        doc_id = row[id_col] if id_col is not None and row[id_col] else None
        title = row[title_col] if title_col is not None and row[title_col] else None
        yield Item(where, ("row", row[text_col], doc_id, title), row)


def _open_parquet(name: str, fields: Fields) -> Source:
    try:
        from .parquet import open_parquet  # pyarrow loads only for Parquet input
    except ImportError as exc:
        raise ConfigError(str(exc)) from None
    return open_parquet(name, fields)


class CsvError(NSHashError):
    """A CSV input cannot be parsed any further (for instance, it holds a NUL byte)."""


def _open_txt(name: str) -> Source:
    if name == "-":
        raise ConfigError("The txt format reads a folder or a .txt file, not stdin")
    root = Path(name)
    if root.is_file():
        paths = [root]
        base = root.parent
    elif root.is_dir():
        paths = sorted(p for p in root.rglob("*.txt") if p.is_file())
        base = root
        if not paths:
            raise ConfigError(f"The folder {name!r} holds no .txt file")
    else:
        raise FileNotFoundError(2, "No such file or directory", name)

    def items() -> Iterator[Item]:
        for path in paths:
            rel = path.relative_to(base).as_posix()
            yield Item(str(path), ("file", str(path), rel, None))

    return Source(name, "txt", items(), total=len(paths))


# -- output ------------------------------------------------------------------------------


def open_output(name: str | None) -> tuple[IO[bytes], bool]:
    """Open the binary output stream: stdout for None or ``-``, gzip for ``.gz`` names.

    Returns:
        The stream and whether the caller must close it.
    """
    if name is None or name == "-":
        sys.stdout.flush()
        return sys.stdout.buffer, False
    if name.lower().endswith(".gz"):
        return cast(IO[bytes], gzip.open(name, "wb")), True
    return open(name, "wb"), True


def _json_value(value: object) -> bytes:
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    return str(value).encode("ascii")


class JsonlWriter:
    """Writes JSONL records with the added keys just before their closing brace.

    Args:
        out: a binary stream.
        added: the keys added, in order.
    """

    def __init__(self, out: IO[bytes], added: Sequence[str]) -> None:
        self.out = out
        keys = [json.dumps(k).encode("utf-8").replace(b"%", b"%%") + b": %s" for k in added]
        self._template = b"%s" + b", ".join(keys) + b"}\n"
        self._buffer: list[bytes] = []

    def write(self, item: Item, prepared: Prepared, values: Sequence[object]) -> None:
        """Write one record: the input line (or its rewrite) plus *values* for the keys."""
        head = prepared[5]
        if head is None:
            if isinstance(item.payload, bytes):
                head = item.payload.rstrip()[:-1] + b", "
            else:  # a .txt file: the record is its id and title
                record = {"id": prepared[0], "title": prepared[1]}
                head = json.dumps(record, ensure_ascii=False).encode("utf-8")[:-1] + b", "
        self._buffer.append(self._template % (head, *map(_json_value, values)))

    def flush(self) -> None:
        """Write what is buffered to the stream and flush it."""
        if self._buffer:
            self.out.write(b"".join(self._buffer))
            self._buffer.clear()
        self.out.flush()


class CsvWriter:
    """Writes CSV rows as read, with the added columns set (appended unless already there).

    Args:
        out: a binary stream.
        header: the input's header row.
        added: the column names added.
        newline: the line ending to use (the input's own).
    """

    def __init__(
        self, out: IO[bytes], header: list[str], added: Sequence[str], newline: str = "\n"
    ) -> None:
        self._text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=False)
        self._writer = csv.writer(self._text, lineterminator=newline)
        self.width = len(header)
        self.columns: list[int] = []
        full = list(header)
        for name in added:
            if name in full:
                self.columns.append(full.index(name))
            else:
                self.columns.append(len(full))
                full.append(name)
        self._writer.writerow(full)
        self._extra = len(full) - len(header)

    def write(self, item: Item, prepared: Prepared, values: Sequence[object]) -> None:
        """Write one row: the input row plus *values* in the added columns."""
        assert item.row is not None
        row = item.row + [""] * self._extra
        for column, value in zip(self.columns, values, strict=True):
            row[column] = _csv_value(value)
        self._writer.writerow(row)

    def flush(self) -> None:
        """Flush the rows written so far to the stream."""
        self._text.flush()

    def detach(self) -> None:
        """Flush and let go of the binary stream without closing it."""
        self._text.flush()
        self._text.detach()


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
