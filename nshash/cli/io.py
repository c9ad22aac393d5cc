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
  :mod:`nshash.cli.parquet` (``pip install 'nshash[parquet]'``), written back as Parquet with
  every input column and the two added ones.

**Encodings.** Output is always UTF-8. Input is read as ``encoding`` says; the default,
``auto``, reads UTF-8 (with or without a byte-order mark) and, when the input is not UTF-8,
tells UTF-16, GBK (read as its superset GB18030) and Big5 (read as Big5-HKSCS) apart from its
first 64 KiB (:func:`sniff_encoding`). A JSONL or CSV input in another encoding is
transcoded as it is read, so the output line is the input line in UTF-8.

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
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, AnyStr, cast

from ..errors import ConfigError, EmptyDocumentError, NSHashError
from ..inputs import MAX_TEXT_CHARS, check_doc_id, check_text, check_title
from ..results import DocMeta
from ..text.fingerprint import DocPrint, Fingerprinter, from_packed, packed_words

if TYPE_CHECKING:
    from ..methods.nshash.core import NSHash

# Optional speedups (``pip install 'nshash[fast]'``), each with the standard library behind
# it: isal's igzip is gzip's GzipFile, inflating about 3x faster (ISA-L); orjson parses a
# record about 2x faster than json. Without them the same results come, more slowly.
_INFLATE_ERRORS: tuple[type[Exception], ...]
_igzip: ModuleType | None
_orjson: ModuleType | None
try:
    from isal import igzip as _igzip
    from isal.igzip_lib import IsalError

    _INFLATE_ERRORS = (zlib.error, cast(type[Exception], IsalError))
except ImportError:
    _igzip, _INFLATE_ERRORS = None, (zlib.error,)
try:
    import orjson as _orjson
except ImportError:
    _orjson = None


def _gzip_file(file: IO[bytes]) -> IO[bytes]:
    """A reader of the gzip stream *file*: isal's where installed, else the standard one."""
    if _igzip is not None:
        return cast(IO[bytes], _igzip.GzipFile(fileobj=file, mode="rb"))
    return cast(IO[bytes], gzip.GzipFile(fileobj=file, mode="rb"))


__all__ = [
    "ENCODINGS",
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
    "Tracker",
    "detect_format",
    "open_output",
    "open_source",
    "sniff_encoding",
]

#: The input formats :func:`open_source` reads.
FORMATS = ("jsonl", "csv", "txt", "parquet")

#: The text fields tried, in order, when no ``--text-field`` is given: ``text``, the name
#: every surface uses (the HTTP API, the library, Parquet), then ``content``, which many raw
#: corpora use for the article body (read as before; see the README's vocabulary table).
DEFAULT_TEXT_FIELDS = ("text", "content")

#: Longest title kept for a ``.txt`` file (its first line may be a whole paragraph).
TXT_TITLE_MAX = 200

_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_PARQUET_SUFFIXES = (".parquet", ".pq")

#: What ``--encoding auto`` may detect besides UTF-8, as (name shown, codec used to read).
ENCODINGS = (("utf-16", "utf-16"), ("gbk", "gb18030"), ("big5", "big5hkscs"))

#: How much of the input the encoding is told from.
SNIFF_BYTES = 64 * 1024

#: The longest record read, in bytes: a JSONL line, or a CSV row in characters (a text at
#: :data:`~nshash.inputs.MAX_TEXT_CHARS` written as JSON escapes, with room for the other
#: fields; a line break counts). A longer JSONL line is a bad record, read on to its end
#: without being held whole; a longer CSV row stops the run (its end cannot be found
#: without parsing it).
MAX_RECORD_BYTES = 64 * 1024 * 1024

#: A batch is cut once its records hold this many bytes (characters for CSV), whatever
#: their count, so the batches in flight stay bounded in memory.
BATCH_BYTES = 16 * 1024 * 1024

#: The longest ``.txt`` file read, in bytes (a character takes 4 at most); a longer one is a
#: bad record, and no more of it than this is read.
MAX_TXT_BYTES = 4 * MAX_TEXT_CHARS


# -- encodings ---------------------------------------------------------------------------


def _decodes(sample: bytes, codec: str) -> str | None:
    """Decode *sample* (which may end mid-character) strictly, or return None."""
    import codecs

    try:
        return codecs.getincrementaldecoder(codec)("strict").decode(sample, final=False)
    except UnicodeDecodeError:
        return None


def _common_share(text: str, codec: str, rows: tuple[tuple[int, int], ...]) -> float:
    """The share of *text*'s CJK characters that sit in the common rows of *codec*.

    Text in one of GBK and Big5 also decodes, wrongly, in the other most of the time; the
    wrong decoding is full of rare characters, while real text is mostly the most frequent
    level of its character set (GB2312 level 1, Big5 level 1).
    """
    cjk = [ch for ch in text if "\u4e00" <= ch <= "\u9fff"]
    if not cjk:
        return 0.0
    common = 0
    for ch in cjk:
        try:
            code = int.from_bytes(ch.encode(codec), "big")
        except UnicodeEncodeError:
            continue
        common += any(lo <= code <= hi for lo, hi in rows)
    return common / len(cjk)


#: The frequent characters: GB2312 level 1 (B0A1-D7F9) and Big5 level 1 (A440-C67E).
_COMMON_ROWS = {"gbk": ((0xB0A1, 0xD7F9),), "big5": ((0xA440, 0xC67E),)}


def sniff_encoding(sample: bytes, name: str = "the input") -> str:
    """Return the codec to read *sample*'s file with: UTF-8, UTF-16, GB18030 or Big5-HKSCS.

    UTF-8 wins when the sample is valid UTF-8 or mostly so (a few bad lines), and when no
    other encoding decodes it either (the lines that are not UTF-8 are then reported one by
    one as bad records).

    Args:
        sample: the first bytes of the file (:data:`SNIFF_BYTES` is plenty).
        name: the file's name (kept for messages).

    Example:
        >>> sniff_encoding("新闻：地铁开通运营。".encode("gbk"))
        'gb18030'
        >>> sniff_encoding("新聞：地鐵開通營運。".encode("big5"))
        'big5hkscs'
    """
    if sample.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if _decodes(sample, "utf-8") is not None:
        return "utf-8"
    import codecs

    lenient = codecs.getincrementaldecoder("utf-8")("replace").decode(sample, final=False)
    bad = lenient.count("\ufffd")
    if sum(ch > "\x7f" for ch in lenient) >= 5 * bad:  # mostly UTF-8: a few bad lines
        return "utf-8"
    if sample and sample.count(0) * 4 > len(sample):  # ASCII in UTF-16 without a mark
        zeros_even = sample[0::2].count(0)
        return "utf-16-be" if zeros_even > sample[1::2].count(0) else "utf-16-le"
    scores = {}
    for shown, codec in (("gbk", "gbk"), ("big5", "big5hkscs")):
        text = _decodes(sample, codec)
        if text is not None:
            scores[shown] = _common_share(
                text, "gb2312" if shown == "gbk" else "big5", _COMMON_ROWS[shown]
            )
    if not scores:  # nothing fits better: UTF-8, whose bad lines are then reported singly
        return "utf-8"
    best = max(scores, key=lambda k: scores[k])
    return dict(ENCODINGS)[best]


def _check_codec(encoding: str) -> str:
    """Return *encoding*'s codec name, or raise :class:`ConfigError` for an unknown one."""
    import codecs

    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise ConfigError(f"Unknown encoding {encoding!r}") from None
    if not getattr(info, "_is_text_encoding", True):  # rot13, hex, base64, zlib: bytes to bytes
        raise ConfigError(f"{encoding!r} is not a text encoding (such as utf-8 or gb18030)")
    return info.name


def _ascii_compatible(codec: str) -> bool:
    """Whether *codec* writes a line break as the byte 0x0A (so bytes split into lines)."""
    try:
        return "\n{}".encode(codec) == b"\n{}"
    except (UnicodeEncodeError, LookupError):  # pragma: no cover - every codec encodes these
        return False


class _Rewound(io.RawIOBase):
    """A stream that yields *head* (bytes already read to sniff them), then the rest of *rest*."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


class _Inflated(io.RawIOBase):
    """A gzip stream whose damaged data raises :class:`gzip.BadGzipFile` (an OSError: the
    command line says ``Error: ...``) rather than zlib's or ISA-L's own error."""

    def __init__(self, inflated: IO[bytes], name: str) -> None:
        self._inflated = inflated
        self._name = name

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            return self._inflated.readinto(buffer)  # type: ignore[attr-defined, no-any-return]
        except _INFLATE_ERRORS as exc:
            raise gzip.BadGzipFile(f"{self._name}: the gzip data is damaged ({exc})") from None


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
    #: With ``dedup --track``: where a record's url, site and time are (see :class:`Tracker`).
    url: str = "url"
    site: str = "site"
    time: str = "published_at"

    def describe_text(self) -> str:
        """Return the text field names for a message: ``'text' or 'content'``."""
        return " or ".join(repr(f) for f in self.text)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that cannot be fingerprinted, and why (one sentence, no location)."""

    message: str


#: A fingerprinted record: doc id, title, the :class:`~nshash.DocPrint` fields (sentences,
#: sketch, then exact, limit and places together; or, prepared ``packed``, the packed words
#: and None: see :meth:`Preparer.run`), for JSONL the output line's head when the input line
#: could not be reused as it is (None otherwise), and for a JSONL record read for
#: ``dedup --track`` its url, site and time fields as they are (None otherwise: a
#: :class:`Tracker` reads rows itself). Plain tuples keep the trip between processes cheap.
Prepared = tuple[
    str | None,
    str | None,
    tuple[int, ...] | bytes,
    tuple[int, ...] | None,
    tuple[int, int] | tuple[int, int, bytes],
    bytes | None,
    tuple[Any, Any, Any] | None,
]


def doc_of(prepared: Prepared) -> DocPrint:
    """The :class:`~nshash.DocPrint` of an nshash-method record, in either form
    :meth:`Preparer.run` makes (a packed one stays packed: see
    :func:`~nshash.text.fingerprint.from_packed`)."""
    if prepared[3] is None:
        words = prepared[2]
        assert isinstance(words, bytes)
        return from_packed(words, *prepared[4])
    sentences = prepared[2]
    assert not isinstance(sentences, bytes)
    return DocPrint(sentences, prepared[3], *prepared[4])


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
        encoding: how ``.txt`` files are decoded.
        track: keep a JSONL record's url, site and time fields (``dedup --track``), so the
            parent need not parse the line again.
    """

    def __init__(
        self,
        fields: Fields,
        added: Sequence[str],
        fingerprint_options: dict[str, Any] | None = None,
        encoding: str = "auto",
        track: bool = False,
    ) -> None:
        self.fields = fields
        self.track = track
        self.added = tuple(added)
        self.fingerprint_options = dict(fingerprint_options or {})
        self.fingerprinter = Fingerprinter(**self.fingerprint_options)
        #: How ``.txt`` files are decoded: ``auto`` (see :func:`sniff_encoding`) or a codec.
        self.encoding = encoding if encoding == "auto" else _check_codec(encoding)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Preparer,
            (self.fields, self.added, self.fingerprint_options, self.encoding, self.track),
        )

    def run(self, payloads: Sequence[Payload], packed: bool = False) -> list[Prepared | BadRecord]:
        """Prepare a batch of payloads, in order.

        With *packed*, the nshash method's anchors and sketch come as one bytes object of
        packed words in the sentences slot, and None in the sketch slot (see
        :func:`~nshash.text.fingerprint.packed_words`; :func:`doc_of` reads either form):
        no int is made for a value, and the words cross a pipe as they are. Other methods'
        slots are the same either way.
        """
        out: list[Prepared | BadRecord] = []
        for payload in payloads:
            try:
                if isinstance(payload, bytes):
                    out.append(self._jsonl(payload, packed))
                elif payload[0] == "file":
                    out.append(self._txt(payload[1], payload[2], packed))
                else:
                    out.append(
                        self._fingerprint(payload[1], payload[2], payload[3], None, None, packed)
                    )
            except _Bad as bad:
                out.append(BadRecord(str(bad)))
        return out

    def _fingerprint(
        self,
        text: str,
        doc_id: str | None,
        title: str | None,
        head: bytes | None,
        tracked: tuple[Any, Any, Any] | None = None,
        packed: bool = False,
    ) -> Prepared:
        try:
            check_doc_id(doc_id)
            check_text(text)  # the library's own check, as NSHash.add makes it
            first, second, third = self._slots(text, title, packed)
        except EmptyDocumentError:
            raise _Bad("the text has no letters or digits") from None
        except NSHashError as exc:  # an id or title the stores refuse (nshash.inputs)
            raise _Bad(str(exc)) from None
        return (doc_id, title, first, second, third, head, tracked)

    def _slots(self, text: str, title: str | None, packed: bool = False) -> tuple[Any, Any, Any]:
        """The fingerprint slots of a :data:`Prepared` tuple: the nshash method's sentences,
        sketch, and exact fingerprint with the sketch limit and places (a subclass fills them
        with another method's); with *packed*, the packed words and None in place of the
        sentences and sketch."""
        check_title(title)
        doc = self.fingerprinter.prepare(text)
        if packed:
            return packed_words(doc), None, (doc.exact, doc.limit, doc.places)
        return doc.sentences, doc.sketch, (doc.exact, doc.limit, doc.places)

    def _jsonl(self, line: bytes, packed: bool = False) -> Prepared:
        try:
            record = _loads(line, self.fields.id, self.added)
        except UnicodeDecodeError:
            raise _Bad("the line is not valid UTF-8") from None
        except ValueError as exc:
            raise _Bad(f"not valid JSON ({exc})") from None
        except RecursionError:
            raise _Bad("JSON nested too deeply to read") from None
        if not isinstance(record, dict):
            raise _Bad(f"a JSON {_json_type(record)}, not an object")
        fields = self.fields
        for name in fields.text:
            if name in record:
                text = record[name]
                break
        else:
            keys = list(record)
            shown = repr(keys[:20])[:-1] + ", ...]" if len(keys) > 20 else repr(keys)
            raise _Bad(f"no {fields.describe_text()} field; its keys are {shown[:300]}")
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
        tracked = None
        if self.track:
            tracked = (record.get(fields.url), record.get(fields.site), record.get(fields.time))
        return self._fingerprint(text, doc_id, title, head, tracked, packed)

    def _txt(self, path: str, doc_id: str | None, packed: bool = False) -> Prepared:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_TXT_BYTES + 1)
        except OSError as exc:
            raise _Bad(f"cannot read the file ({exc.strerror})") from None
        if len(data) > MAX_TXT_BYTES:
            raise _Bad(f"the file has more than {MAX_TXT_BYTES} bytes")
        codec = self.encoding
        if codec == "auto":
            codec = sniff_encoding(data[:SNIFF_BYTES], path)
        try:
            text = data.decode("utf-8-sig" if codec == "utf-8" else codec)
        except UnicodeDecodeError:
            raise _Bad(f"the file is not valid {codec}") from None
        title = next((line.strip() for line in text.splitlines() if line.strip()), None)
        if title is not None and len(title) > TXT_TITLE_MAX:
            title = title[: TXT_TITLE_MAX - 1] + "…"
        return self._fingerprint(text, doc_id, title, None, None, packed)


def _loads(line: bytes, id_field: str, added: Sequence[str]) -> Any:
    """``json.loads(line)``, through orjson where it is installed and gives the same record.

    orjson refuses what json accepts beyond strict JSON (NaN, lone surrogates, a BOM) and
    reads integers past 64 bits as floats: json then parses the line, so a record means the
    same either way (its id, and every field when the record is rewritten).
    """
    if _orjson is not None:
        try:
            record = _orjson.loads(line)
        except _orjson.JSONDecodeError:
            pass  # json decides: the same record, or its own error message
        else:
            if not isinstance(record, dict) or (
                not isinstance(record.get(id_field), float)
                and not any(key in record for key in added)
            ):
                return record
    return json.loads(line)


class _Bad(Exception):
    """Raised inside :class:`Preparer` for a record that cannot be used."""


class Tracker:
    """What ``dedup --track`` keeps of each record besides its text: its url, site and time,
    read from the fields :class:`Fields` names and handed to :meth:`nshash.NSHash.meta`.

    A time is epoch seconds (a number, or a string of one in CSV) or an ISO 8601 string
    (``2024-05-03T12:30:00Z``; without an offset it is UTC); a missing or empty one is now.
    A value of the wrong kind makes the record a bad record, with the reason.
    """

    def __init__(self, source: Source, fields: Fields) -> None:
        self.names = (fields.url, fields.site, fields.time)
        self.format = source.format
        header = source.header or []
        #: The CSV columns of the three fields (None: not in the header).
        self.columns = [header.index(n) if n in header else None for n in self.names]

    def _values(self, item: Item, prepared: Prepared) -> list[Any]:
        if prepared[6] is not None:  # a JSONL record: its worker kept the fields
            return list(prepared[6])
        if self.format == "csv" and item.row is not None:
            return [item.row[c] if c is not None else None for c in self.columns]
        chunk = getattr(item, "chunk", None)  # a Parquet row
        if chunk is not None:
            batch = chunk.batch
            names = batch.schema.names
            index = getattr(item, "index", 0)
            return [batch.column(n)[index].as_py() if n in names else None for n in self.names]
        return [None, None, None]  # a .txt file has none

    def meta(self, item: Item, prepared: Prepared, nsh: NSHash) -> DocMeta | str:
        """The :class:`~nshash.DocMeta` of the record *item* (fingerprinted as *prepared*),
        or why it cannot have one."""
        url, site, when = (None if v == "" else v for v in self._values(item, prepared))
        for name, value in zip(self.names[:2], (url, site), strict=True):
            if value is not None and not isinstance(value, str):
                return f"the {name!r} field is a {_json_type(value)}, not a string"
        if isinstance(when, str):
            text = when
            try:
                when = float(text)
            except ValueError:
                try:
                    when = datetime.fromisoformat(text)
                except ValueError:
                    return f"the {self.names[2]!r} field is not a time: {text!r:.40}"
        elif when is not None and not isinstance(when, (int, float, datetime)):
            return f"the {self.names[2]!r} field is a {_json_type(when)}, not a time"
        if isinstance(when, bool):
            return f"the {self.names[2]!r} field is a boolean, not a time"
        try:
            found = nsh.meta(url or None, site or None, when)
        except NSHashError as exc:
            return str(exc)
        assert found is not None  # the store was opened tracking
        return found


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
        size: the input file's size in bytes (compressed, for ``.gz``), when it has one.
        encoding: the codec the input is read with (found by :func:`sniff_encoding`).
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
        size: int | None = None,
        position: Callable[[], int] | None = None,
        encoding: str = "utf-8",
    ) -> None:
        self.name = name
        self.format = format
        self.header = header
        self.total = total
        self.newline = newline
        self.size = size
        self._position = position
        self.encoding = encoding
        self._items = items
        self._closers = list(closers)

    def batches(self, size: int = 256, max_bytes: int = BATCH_BYTES) -> Iterator[list[Item]]:
        """Yield lists of up to *size* items, in input order, each cut once its payloads
        hold *max_bytes* (characters for CSV rows): long records make short batches."""
        batch: list[Item] = []
        held = 0
        for item in self._items:
            batch.append(item)
            payload = item.payload
            if isinstance(payload, bytes):
                held += len(payload)
            elif isinstance(payload[1], str):
                held += len(payload[1])
            if len(batch) >= size or held >= max_bytes:
                yield batch
                batch, held = [], 0
        if batch:
            yield batch

    def bytes_read(self) -> int | None:
        """How far into the input file reading has got, in bytes (None for stdin, folders)."""
        if self._position is None:
            return None
        try:
            return self._position()
        except (OSError, ValueError):  # closed
            return self.size

    def close(self) -> None:
        """Close the underlying files (never stdin)."""
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_source(name: str, format: str, fields: Fields, encoding: str = "auto") -> Source:
    """Open the input *name* in *format* (see :func:`detect_format`).

    Args:
        name: a file, a folder (``txt``) or ``-`` for stdin.
        format: ``jsonl``, ``csv`` or ``txt``.
        fields: where the text, id and title are.
        encoding: ``auto`` (UTF-8, else what :func:`sniff_encoding` finds) or a codec name;
            ``.txt`` files are decoded by the :class:`Preparer` instead.

    Raises:
        ConfigError: the input does not fit the format (a CSV without the text column, a
            folder with no ``.txt`` file, ``-`` with ``txt``), or its encoding is unknown.
        OSError: the input cannot be opened.
    """
    if format == "txt":
        return _open_txt(name)
    if format == "parquet":
        raise ConfigError("Parquet input opens through nshash.cli.parquet.open_parquet")
    closers: list[Callable[[], object]] = []
    size: int | None = None
    position: Callable[[], int] | None = None
    if name == "-":
        raw: IO[bytes] = sys.stdin.buffer
    else:
        file = open(name, "rb")
        closers.append(file.close)
        size, position = os.fstat(file.fileno()).st_size, file.tell
        raw = file
        if name.lower().endswith(".gz"):
            inflated = _gzip_file(file)
            closers.append(inflated.close)
            raw = io.BufferedReader(_Inflated(inflated, name), 1 << 16)
    display = "<stdin>" if name == "-" else name
    try:
        codec, raw = _decoding(raw, encoding, display)
        if format == "jsonl":
            utf8 = codec in ("utf-8", "utf-8-sig")
            items = _jsonl_items(raw) if utf8 else _transcoded_items(raw, codec, display)
            source = Source(display, "jsonl", items, closers, size=size, position=position)
        else:
            source = _open_csv(display, raw, closers, fields, codec)
            source.size, source._position = size, position
        source.encoding = codec
        return source
    except BaseException:
        while closers:
            closers.pop()()
        raise


def _decoding(raw: IO[bytes], encoding: str, display: str) -> tuple[str, IO[bytes]]:
    """Return the codec to read *raw* with, and the stream to read (rewound after sniffing)."""
    if encoding != "auto":
        return _check_codec(encoding), raw
    sample = raw.read(SNIFF_BYTES)
    codec = sniff_encoding(sample, display)
    return codec, io.BufferedReader(_Rewound(sample, raw), 1 << 16)


#: How much of a line is read at a time (a longer one is read in pieces of this size).
_PIECE = 1 << 20


def _lines(
    readline: Callable[[int], AnyStr], newline: AnyStr, limit: int = MAX_RECORD_BYTES
) -> Iterator[AnyStr | None]:
    """The lines *readline* reads (with their ends), None for each longer than *limit*
    (its end included).

    A long line is read in pieces, and one over the limit is read on to its end and
    dropped, never held whole: a gzip file of a few MB may inflate to one line of gigabytes.
    """
    while line := readline(_PIECE):
        if (len(line) < _PIECE or line.endswith(newline)) and len(line) <= limit:
            yield line  # whole (the common case)
            continue
        parts, size = [line], len(line)
        while size <= limit and len(line) == _PIECE and not line.endswith(newline):
            line = readline(_PIECE)
            parts.append(line)
            size += len(line)
        if size <= limit:
            yield newline[:0].join(parts)
            continue
        parts.clear()
        while len(line) == _PIECE and not line.endswith(newline):
            line = readline(_PIECE)
        yield None


def _too_long(where: str) -> Item:
    """The bad record standing for a line over :data:`MAX_RECORD_BYTES`."""
    return Item(where, b"", bad=f"the line is longer than {MAX_RECORD_BYTES} bytes")


def _jsonl_items(raw: IO[bytes]) -> Iterator[Item]:
    for number, line in enumerate(_lines(raw.readline, b"\n"), 1):
        if line is None:
            yield _too_long(f"line {number}")
            continue
        if number == 1 and line.startswith(b"\xef\xbb\xbf"):
            line = line[3:]
        if line and not line.isspace():  # blank lines (often the last one) are no records
            yield Item(f"line {number}", line)  # (isspace stops at the first other byte)


def _transcoded_items(raw: IO[bytes], codec: str, display: str) -> Iterator[Item]:
    """The records of a JSONL input in *codec*, each line re-encoded as UTF-8."""
    if _ascii_compatible(codec):  # GBK, Big5, ...: a line break is the byte 0x0A
        for number, line in enumerate(_lines(raw.readline, b"\n"), 1):
            if line is None:
                yield _too_long(f"line {number}")
                continue
            if not line.strip():
                continue
            try:
                text = line.decode(codec)
            except UnicodeDecodeError:
                yield Item(f"line {number}", line, bad=f"the line is not valid {codec}")
                continue
            if number == 1:
                text = text.lstrip("\ufeff")
            yield Item(f"line {number}", text.encode("utf-8", "surrogatepass"))
        return
    wrapper = io.TextIOWrapper(raw, encoding=codec, newline="")
    number = 0
    try:
        for number, read in enumerate(_lines(wrapper.readline, "\n"), 1):
            if read is None:
                yield _too_long(f"line {number}")
                continue
            if number == 1:
                read = read.lstrip("\ufeff")
            if read.strip():
                yield Item(f"line {number}", read.encode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        raise ConfigError(f"{display} line {number + 1}: not valid {codec}") from None
    finally:
        wrapper.detach()


def _open_csv(
    display: str,
    raw: IO[bytes],
    closers: list[Callable[[], object]],
    fields: Fields,
    codec: str = "utf-8",
) -> Source:
    utf8 = codec in ("utf-8", "utf-8-sig")
    # Bytes the codec refuses come through as lone surrogates (U+DC80-U+DCFF), so that the
    # row holding them is a bad record rather than the end of the run.
    text = io.TextIOWrapper(
        raw, encoding="utf-8-sig" if utf8 else codec, newline="", errors="surrogateescape"
    )
    # Detach on close: a wrapper that is garbage-collected closes what it wraps (stdin too).
    closers.append(text.detach)
    # Articles are long: lift the csv module's 128 KiB field limit (a row is bounded anyway).
    csv.field_size_limit(max(csv.field_size_limit(), MAX_RECORD_BYTES))
    lines = _RowLines(text.readline)
    rows = iter(lines)
    try:
        first = next(rows, "")
        if not first.strip():
            raise ConfigError(f"{display} has no CSV header row")
        newline = "\r\n" if first.endswith("\r\n") else "\n"
        reader = csv.reader(itertools.chain([first], rows))
        header = next(reader)
    except (csv.Error, _RowTooLong, UnicodeDecodeError) as exc:
        raise CsvError(f"{display}: the header row cannot be read ({exc})") from None
    if _escaped(header):
        raise ConfigError(f"{display}: the header row is not valid {codec}")
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
        _csv_items(reader, lines, codec, len(header), text_col, id_col, title_col),
        closers,
        header=header,
        newline=newline,
    )


class _RowTooLong(Exception):
    """Raised through :func:`csv.reader` when one row runs past :data:`MAX_RECORD_BYTES`."""


class _RowLines:
    """The lines of a CSV text for :func:`csv.reader`, none longer than the limit and no row
    (which may span lines) longer either: :attr:`held` counts the characters handed out since
    the reader's last row ended (the caller sets it back to 0 after each row)."""

    def __init__(self, readline: Callable[[int], str], limit: int = MAX_RECORD_BYTES) -> None:
        self._readline = readline
        self._limit = limit
        self.held = 0

    def __iter__(self) -> Iterator[str]:
        limit = self._limit
        for line in _lines(self._readline, "\n", limit):
            if line is None or self.held + len(line) > limit:
                raise _RowTooLong(f"a row longer than {limit} characters")
            self.held += len(line)
            yield line


#: A character that strict decoding of the input would have refused (see :func:`_open_csv`).
_ESCAPED = re.compile("[\udc80-\udcff]")


def _escaped(row: list[str]) -> bool:
    """Whether *row* holds bytes that were not valid in the input's encoding."""
    return any(not field.isascii() and _ESCAPED.search(field) for field in row)


def _csv_items(
    reader: Any,
    lines: _RowLines,
    codec: str,
    width: int,
    text_col: int,
    id_col: int | None,
    title_col: int | None,
) -> Iterator[Item]:
    number = 1
    while True:
        lines.held = 0
        try:
            row = next(reader)
        except StopIteration:
            return
        except (csv.Error, _RowTooLong) as exc:
            raise CsvError(f"row {number + 1}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise CsvError(f"row {number + 1}: not valid {exc.encoding}") from None
        number += 1
        if not row:
            continue
        where = f"row {number}"
        if _escaped(row):  # kept for the output with U+FFFD for each byte
            kept = [_ESCAPED.sub("\ufffd", field) for field in row]
            yield Item(where, b"", kept, f"the row is not valid {codec}")
            continue
        if len(row) != width:
            yield Item(where, b"", row, f"the row has {len(row)} fields, the header {width}")
            continue
        doc_id = row[id_col] if id_col is not None and row[id_col] else None
        title = row[title_col] if title_col is not None and row[title_col] else None
        yield Item(where, ("row", row[text_col], doc_id, title), row)


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
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return str(value).encode("ascii")


class JsonlWriter:
    """Writes JSONL records with the added keys just before their closing brace.

    Args:
        out: a binary stream.
        added: the keys added, in order.
    """

    def __init__(self, out: IO[bytes], added: Sequence[str]) -> None:
        self.out = out
        self._keys = (*added, "error")
        keys = [json.dumps(k).encode("utf-8").replace(b"%", b"%%") + b": %s" for k in added]
        self._template = b"%s" + b", ".join(keys) + b"}\n"
        #: The added keys after a reused line's last field (the line is not copied).
        self._tail = b", " + b", ".join(keys) + b"}\n"
        self._buffer: list[bytes | memoryview] = []

    def write(self, item: Item, prepared: Prepared, values: Sequence[object]) -> None:
        """Write one record: the input line (or its rewrite) plus *values* for the keys."""
        head = prepared[5]
        if head is None:
            payload = item.payload
            if isinstance(payload, bytes):
                # The line parsed as an object, so only JSON white space follows its closing
                # brace: the line up to that brace is kept as a view, the keys go after it.
                buffer = self._buffer
                buffer.append(memoryview(payload)[: payload.rfind(b"}")])
                buffer.append(self._tail % tuple(map(_json_value, values)))
                return
            # a .txt file: the record is its id and title
            record = {"id": prepared[0], "title": prepared[1]}
            head = json.dumps(record, ensure_ascii=False).encode("utf-8")[:-1] + b", "
        self._buffer.append(self._template % (head, *map(_json_value, values)))

    def write_bad(self, item: Item, message: str, values: Sequence[object]) -> None:
        """Write a record that could not be used: its fields, *values* (nulls), ``"error"``.

        A JSON object keeps its fields (the line as it came, when that can be reused); a line
        that is not one becomes an object of the added keys and the error alone, so output
        line N is still input line N.
        """
        keys = self._keys
        head = b"{"
        payload = item.payload
        if isinstance(payload, bytes):
            try:
                record = json.loads(payload)
            except (ValueError, RecursionError):  # not JSON, or nested too deep to read
                record = None
            if isinstance(record, dict) and record:
                if any(k in record for k in keys):
                    kept = {k: v for k, v in record.items() if k not in keys}
                    head = json.dumps(kept, ensure_ascii=False).encode("utf-8", "replace")[:-1]
                    head += b", " if kept else b""
                else:
                    head = payload.rstrip()[:-1] + b", "
        elif payload[0] == "file":
            head = json.dumps({"id": payload[2], "title": None}).encode("utf-8")[:-1] + b", "
        fields = {k: v for k, v in zip(keys, values, strict=False)}
        fields["error"] = message
        tail = json.dumps(fields, ensure_ascii=False).encode("utf-8", "replace")[1:]
        self._buffer.append(head + tail + b"\n")

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
        error_column: add an ``error`` column too, empty but for rows that could not be used.
    """

    def __init__(
        self,
        out: IO[bytes],
        header: list[str],
        added: Sequence[str],
        newline: str = "\n",
        error_column: bool = True,
    ) -> None:
        self._text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=False)
        self._writer = csv.writer(self._text, lineterminator=newline)
        self.width = len(header)
        self.columns: list[int] = []
        full = list(header)
        added = (*added, "error") if error_column else tuple(added)
        self._errors = error_column
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
        self._write(item.row, (*values, "") if self._errors else values)

    def write_bad(self, item: Item, message: str, values: Sequence[object]) -> None:
        """Write a row that could not be used: as read (cut or padded to the header's width),
        *values* (empty) in the added columns and *message* in ``error``."""
        row = (item.row or [])[: self.width]
        row += [""] * (self.width - len(row))
        self._write(row, (*values, message) if self._errors else values)

    def _write(self, row: list[str], values: Sequence[object]) -> None:
        row = row + [""] * self._extra
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
