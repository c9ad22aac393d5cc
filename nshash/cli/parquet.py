"""Parquet files for ``nshash dedup`` and ``nshash query``: read in batches, written back whole.

Parquet is what Spark jobs, Hugging Face datasets and DuckDB write, so stored corpora are
mostly in it. Needs ``pip install 'nshash[parquet]'`` (pyarrow).

* Reading streams the file :data:`READ_BATCH_ROWS` rows at a time, row group after row group,
  so memory stays flat whatever the file's length (it does grow with the size of the file's
  row groups, which pyarrow reads one at a time). Each row becomes one record: its text from
  the text column (``content``, else ``text``, or ``--text-field``), its id from the id column
  (a string or an integer column) and its title from the title column when they exist.
* Writing keeps every input column, its type and its values, and the file's schema metadata,
  and adds ``similar_id`` (int64, null where ``query`` finds no group), ``duplicate`` (bool)
  and ``error`` (string, null but for rows that could not be used) after them, as CSV does
  (``query --explain``: ``explanation``, a JSON object as text, instead of ``duplicate``); a
  column of that name already there is replaced in place. Rows are
  written in input order, in row groups of up to :data:`WRITE_GROUP_ROWS` rows or
  :data:`WRITE_GROUP_BYTES` bytes, so the output does not depend on ``--jobs``. The
  compression is the input's.

A row whose text is null is a bad record: reported, and written with null answers and the
reason in ``error`` (or left out with ``--on-error skip``), like a bad JSONL line. A text
column that is not a string column is a configuration error.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import install_hint

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as exc:  # pragma: no cover - the extra is installed under test
    raise ImportError(
        f"Parquet files need pyarrow, which cannot be imported ({exc}):"
        f" {install_hint('parquet')}"
    ) from exc

from ..errors import ConfigError
from .io import Fields, Item, Prepared, Source

__all__ = [
    "READ_BATCH_ROWS",
    "ParquetItem",
    "ParquetSource",
    "ParquetWriter",
    "open_parquet",
]

#: Rows read at a time: a few MB of articles as Python strings. Memory depends on this and on
#: the file's row group size (pyarrow holds the row group being read), never on its length.
READ_BATCH_ROWS = 2048

#: An output row group is written once it holds this many rows or bytes (Arrow's own
#: compact buffers, not Python objects), so readers get row groups of a useful size.
WRITE_GROUP_ROWS = 65_536
WRITE_GROUP_BYTES = 32 << 20

#: The types of the columns the commands add (``explanation``, a JSON object, as its text).
ADDED_TYPES = {
    "similar_id": pa.int64(),
    "duplicate": pa.bool_(),
    "explanation": pa.string(),
    "error": pa.string(),
}

#: Codec names in the file's metadata -> what :class:`pyarrow.parquet.ParquetWriter` takes.
_CODECS = {"UNCOMPRESSED": "none", "LZ4_RAW": "lz4"}


class _Chunk:
    """One record batch as read; its rows are written out together."""

    __slots__ = ("batch",)

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch


@dataclass(slots=True)
class ParquetItem(Item):
    """A Parquet row: an :class:`~nshash.cli.io.Item` that knows its batch and place in it."""

    chunk: _Chunk | None = None
    index: int = 0


def _is_string(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)) or (
        str(kind) == "string_view"
    )


def _is_integer(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_integer(kind))


class ParquetSource(Source):
    """An open Parquet file, read batch by batch (see :func:`open_parquet`).

    Attributes:
        schema: the file's Arrow schema (with its metadata), which the output keeps.
        compression: the codec of the file's first column chunk, reused for the output.
    """

    def __init__(
        self,
        name: str,
        items: Iterator[Item],
        closers: Sequence[Callable[[], object]],
        schema: pa.Schema,
        total: int,
        compression: str,
    ) -> None:
        super().__init__(name, "parquet", items, closers, total=total)
        self.schema = schema
        self.compression = compression


def _part_files(name: str) -> list[str]:
    """The files to read: *name*, or the part files of a folder in name order.

    A folder (what Spark and Hive write) is read as one file: its ``*.parquet`` and ``*.pq``
    files, skipping ``_``- and ``.``-prefixed ones (``_SUCCESS``, checksums). Partitioned
    folders (``key=value/`` subfolders) are refused: the partition keys are in the paths, not
    in the files, so the output could not keep them.
    """
    folder = Path(name)
    if not folder.is_dir():
        with open(name, "rb"):  # a missing or unreadable file is the usual OSError
            pass
        return [name]
    parts = sorted(
        str(p)
        for p in folder.iterdir()
        if p.is_file() and p.suffix.lower() in (".parquet", ".pq") and p.name[0] not in "._"
    )
    if not parts:
        nested = any(p.is_dir() for p in folder.iterdir())
        hint = " (a partitioned dataset: give one partition's folder)" if nested else ""
        raise ConfigError(f"The folder {name!r} holds no .parquet file{hint}")
    return parts


def _open_file(path: str) -> pq.ParquetFile:
    try:
        # pre_buffer would read ahead the column chunks of every row group still to come
        # (measured: memory grew with the file); without it one row group is held at a time.
        # Given the path, pyarrow reads into its own pool rather than into Python bytes.
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"{path!r} is not a readable Parquet file ({exc})") from None


def open_parquet(name: str, fields: Fields) -> ParquetSource:
    """Open the Parquet file (or folder of part files) *name* for reading.

    Raises:
        ConfigError: *name* is stdin, a file is not Parquet, the part files' schemas differ,
            there is no text column, or a text, id or title column has a type that cannot
            hold one.
        OSError: the file cannot be opened.
    """
    if name == "-":
        raise ConfigError(
            "Parquet cannot be read from stdin (its index is at the end of the file); give a file"
        )
    parts = _part_files(name)
    first = _open_file(parts[0])
    try:
        schema = first.schema_arrow
        total = first.metadata.num_rows
        for part in parts[1:]:  # footers only: cheap
            other = _open_file(part)
            try:
                if not other.schema_arrow.equals(schema):
                    raise ConfigError(
                        f"The part files of {name!r} differ: {parts[0]!r} has columns"
                        f" {schema.names!r} ({schema.types}), {part!r} {other.schema_arrow.names!r}"
                        f" ({other.schema_arrow.types})"
                    )
                total += other.metadata.num_rows
            finally:
                other.close()
        names = schema.names
        read = {*fields.text, fields.id, fields.title, fields.url, fields.site, fields.time}
        twice = sorted({n for n in names if n in read and names.count(n) > 1})
        if twice:  # (a column read by name must be one column)
            raise ConfigError(
                f"{name} has more than one column named {', '.join(map(repr, twice))}"
            )
        text = next((f for f in fields.text if f in names), None)
        if text is None:
            raise ConfigError(
                f"{name} has no {fields.describe_text()} column; its columns are {names!r}"
                " (use --text-field)"
            )
        if not _is_string(schema.field(text).type):
            raise ConfigError(
                f"The text column {text!r} of {name} holds {schema.field(text).type}, not strings"
            )
        id_col = fields.id if fields.id in names else None
        if id_col is not None:
            kind = schema.field(id_col).type
            if not (_is_string(kind) or _is_integer(kind)):
                raise ConfigError(
                    f"The id column {id_col!r} of {name} holds {kind}; ids are strings or"
                    " integers (use --id-field)"
                )
        title_col = fields.title if fields.title in names else None
        if title_col is not None and not _is_string(schema.field(title_col).type):
            raise ConfigError(
                f"The title column {title_col!r} of {name} holds"
                f" {schema.field(title_col).type}, not strings (use --title-field)"
            )
        meta = first.metadata
        codec = "SNAPPY"
        if meta.num_row_groups and meta.num_columns:
            codec = meta.row_group(0).column(0).compression
    except BaseException:
        first.close()
        raise
    first.close()
    open_files: list[pq.ParquetFile] = []

    def close() -> None:
        while open_files:
            open_files.pop().close()

    return ParquetSource(
        name,
        _items(parts, open_files, text, id_col, title_col),
        [close],
        schema,
        total,
        _CODECS.get(codec, codec.lower()),
    )


def _items(
    parts: list[str],
    open_files: list[pq.ParquetFile],
    text: str,
    id_col: str | None,
    title_col: str | None,
) -> Iterator[Item]:
    for part in parts:
        reader = _open_file(part)
        open_files.append(reader)
        prefix = f"{Path(part).name} " if len(parts) > 1 else ""
        row = 0
        for batch in reader.iter_batches(batch_size=READ_BATCH_ROWS):
            chunk = _Chunk(batch)
            n = batch.num_rows
            texts = batch.column(text).to_pylist()
            ids = batch.column(id_col).to_pylist() if id_col is not None else [None] * n
            titles = batch.column(title_col).to_pylist() if title_col is not None else [None] * n
            for index in range(n):
                row += 1
                where = f"{prefix}row {row}"
                body = texts[index]
                if body is None:
                    yield ParquetItem(
                        where, b"", None, f"the {text!r} column is null", chunk=chunk, index=index
                    )
                    continue
                doc_id = ids[index]
                doc_id = None if doc_id is None or doc_id == "" else str(doc_id)
                title = titles[index] or None
                yield ParquetItem(where, ("row", body, doc_id, title), chunk=chunk, index=index)
        open_files.remove(reader)
        reader.close()


class ParquetWriter:
    """Writes the rows of a :class:`ParquetSource` with the added columns set.

    A batch read is complete once a row of the next batch arrives (bad rows never do); complete
    batches are gathered into row groups (see :data:`WRITE_GROUP_ROWS`). Call :meth:`close`
    at the end, or the last rows and the file's footer are not written.

    Args:
        out: a binary stream (not a terminal).
        source: the input, whose schema and compression the output keeps.
        added: the column names added, in order (see :data:`ADDED_TYPES`); ``error`` follows.

    Raises:
        ConfigError: *out* is a terminal.
    """

    def __init__(self, out: IO[bytes], source: ParquetSource, added: Sequence[str]) -> None:
        isatty = getattr(out, "isatty", None)
        if isatty is not None and isatty():
            raise ConfigError("Parquet output is binary, not for a terminal: give -o FILE.parquet")
        schema = source.schema
        self.added = (*added, "error")
        fields: list[Any] = list(schema)
        #: For each output column: the input column it copies, or the added column it is.
        self._plan: list[tuple[bool, int]] = []
        for i, field in enumerate(schema):
            if field.name in self.added:
                fields[i] = pa.field(field.name, ADDED_TYPES[field.name])
                self._plan.append((True, self.added.index(field.name)))
            else:
                self._plan.append((False, i))
        for j, name in enumerate(self.added):
            if name not in schema.names:
                fields.append(pa.field(name, ADDED_TYPES[name]))
                self._plan.append((True, j))
        self.schema = pa.schema(fields, metadata=schema.metadata)
        self._writer = pq.ParquetWriter(out, self.schema, compression=source.compression)
        self._abandoned = False
        self._chunk: _Chunk | None = None
        self._rows: list[int] = []
        self._values: list[list[object]] = [[] for _ in self.added]
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0

    def write(self, item: Item, prepared: Prepared | None, values: Sequence[object]) -> None:
        """Take one row: the input row of *item* plus *values* for the added columns."""
        self._take(item, (*values, None))

    def write_bad(self, item: Item, message: str, values: Sequence[object]) -> None:
        """Take a row that could not be used: *values* (nulls) and *message* in ``error``."""
        self._take(item, (*values, message))

    def _take(self, item: Item, values: Sequence[object]) -> None:
        assert isinstance(item, ParquetItem) and item.chunk is not None
        if item.chunk is not self._chunk:
            self._emit()
            self._chunk = item.chunk
        self._rows.append(item.index)
        for column, value in zip(self._values, values, strict=True):
            column.append(value)

    def flush(self) -> None:
        """Do nothing: rows are written in whole row groups (see the class docstring)."""

    def _emit(self) -> None:
        chunk = self._chunk
        if chunk is None:
            return
        batch = chunk.batch
        if len(self._rows) != batch.num_rows:  # bad records were left out
            batch = batch.take(pa.array(self._rows, pa.int64()))
        arrays = []
        for is_added, index in self._plan:
            if is_added:
                name = self.added[index]
                values = self._values[index]
                if name == "explanation":
                    values = [
                        None if v is None else json.dumps(v, ensure_ascii=False) for v in values
                    ]
                arrays.append(pa.array(values, ADDED_TYPES[name]))
            else:
                arrays.append(batch.column(index))
        out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._chunk = None
        self._rows = []
        self._values = [[] for _ in self.added]
        self._pending.append(out)
        self._pending_rows += out.num_rows
        self._pending_bytes += out.nbytes
        if self._pending_rows >= WRITE_GROUP_ROWS or self._pending_bytes >= WRITE_GROUP_BYTES:
            self._write_group()

    def _write_group(self) -> None:
        if self._pending:
            table = pa.Table.from_batches(self._pending, schema=self.schema)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self._pending = []
        self._pending_rows = self._pending_bytes = 0

    def close(self) -> None:
        """Write the last rows and the file's footer (the stream itself stays open); nothing
        after :meth:`abandon`."""
        if self._abandoned:
            return
        self._emit()
        self._write_group()
        self._writer.close()

    def abandon(self) -> None:
        """Drop the rows not yet written and write no footer: the run failed, or the reader
        of the stream went away (``| head``), so writing more would only fail again."""
        self._abandoned = True
        self._pending = []
        with contextlib.suppress(pa.ArrowException, OSError):
            self._writer.close()
