"""A store's groups as one Parquet file: what a batch job groups a new batch against.

``nshash groups --store URL --export groups.parquet`` (or :func:`export_groups`) writes every
group of a saved store, one row a group, and :func:`nshash.spark.dedup` reads the file as
``against=`` (``nshash dedup --engine spark --against groups.parquet``): a new document is
judged against each stored group's anchors and sketch, as the store itself would judge it,
without the stored texts. The columns:

==============  ==================  =========================================================
column          type                what
==============  ==================  =========================================================
``similar_id``  int64               the group's canonical id
``size``        int64               its documents (with or without an id)
``ids``         list<string>        the ids of its documents that came with one, in order
``anchors``     list<int64>         the anchors of those documents (their ``fingerprints``,
                                    64-bit unsigned values stored as signed: the same bits)
``sketch``      list<int64>         the group's sketch, ascending (common values included),
                                    as the store compares it (narrow or not, see below)
``limit``       int64               the sketch's limit
==============  ==================  =========================================================

The file's key-value metadata ``nshash`` holds JSON: ``kind`` (``"nshash-groups"``),
``version`` (1), ``last_id`` (the store's largest id handed out: new groups are numbered after
it), ``narrow`` (whether the sketches are narrow, :func:`~nshash.text.fingerprint.narrow`),
``common`` (the hashes the store learned to be boilerplate, signed as the anchors) and
``store`` (its URL, password masked). A Spark job's export (``nshash dedup --engine spark
--export-groups FILE``) has the same columns and one more, ``exacts`` (list<int64>: the exact
fingerprints of each group's texts, signed), and names its inputs in ``store``.

Documents added without an id have no record, so their anchors are not in the file (their
sketch values are, in their group's sketch). The file records no tuning settings: group the new
batch with the options the store was filled with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import ConfigError, StateError, install_hint
from .methods.nshash.core import NSHash

__all__ = [
    "EXPORT_COLUMNS",
    "EXPORT_KIND",
    "ExportInfo",
    "export_groups",
    "read_export_info",
    "signed",
    "write_export",
]

#: The ``kind`` of an export's metadata.
EXPORT_KIND = "nshash-groups"
#: The metadata key of an export (Parquet key-value metadata).
META_KEY = b"nshash"
#: The format version this module writes and reads.
VERSION = 1
#: The columns of an export, in order.
EXPORT_COLUMNS = ("similar_id", "size", "ids", "anchors", "sketch", "limit")

_SIGN = 1 << 63
_WRAP = 1 << 64

#: Groups written per row group.
_BATCH = 8192


def signed(value: int) -> int:
    """A 64-bit unsigned fingerprint as a signed int64 (Parquet's and Spark's ``long``): the
    same bits."""
    return value - _WRAP if value >= _SIGN else value


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"an export of the groups is Parquet, which needs pyarrow: {install_hint('parquet')}"
        ) from exc
    return pyarrow


class ExportInfo:
    """What an export's metadata says (see the module docstring)."""

    def __init__(self, last_id: int, narrow: bool, common: list[int], store: str) -> None:
        self.last_id = last_id
        self.narrow = narrow
        #: The common hashes, signed 64-bit (as Spark's longs and the ``anchors`` column).
        self.common = common
        self.store = store


def _rows(nsh: NSHash) -> Iterator[dict[str, Any]]:
    """One row per group of *nsh*'s store, in id order."""
    store = nsh.store
    total = store.stats().groups
    groups = store.groups(min_size=1, limit=max(total, 1))
    for group in sorted(groups, key=lambda g: g.similar_id):
        found = store.sketch(group.similar_id)
        if found is None:  # forgotten between the listing and now
            continue
        values, limit = found
        anchors: dict[int, None] = {}
        for doc_id in group.doc_ids:
            record = store.document(doc_id)
            if record is not None:
                anchors.update(dict.fromkeys(record.fingerprints))
        yield {
            "similar_id": group.similar_id,
            "size": group.size,
            "ids": group.doc_ids,
            "anchors": [signed(h) for h in anchors],
            "sketch": list(values),
            "limit": limit,
        }


def export_groups(nsh: NSHash, path: str) -> dict[str, int]:
    """Write every group of *nsh*'s store to the Parquet file *path* (see the module
    docstring); the file is written whole or not at all.

    Returns:
        counts: ``groups``, ``documents`` (with an id, listed in ``ids``), ``anchors``,
        ``common`` and ``last_id``.

    Raises:
        ConfigError: *path* exists, or pyarrow is missing.
        StoreError: the store cannot be read.
    """
    if os.path.exists(path):
        raise ConfigError(f"{path!r} exists; remove it or choose another export file")
    store = nsh.store
    stats = store.stats()
    common = sorted(signed(h) for h in store.common())
    return write_export(path, _rows(nsh), stats.last_id, store.narrow_sketches(), common, store.url)


def write_export(
    path: str,
    rows: Iterable[dict[str, Any]],
    last_id: int,
    narrow: bool,
    common: list[int],
    source: str,
    exacts: bool = False,
) -> dict[str, int]:
    """Write an export (see the module docstring) of *rows* (dicts of the columns, in id
    order) to *path*, whole or not at all. *common*: signed hashes. With *exacts*, each row
    also has ``exacts`` (list<int64>): the exact fingerprints of its texts, signed (a Spark
    job knows them; a store's export has none).

    Returns:
        counts: ``groups``, ``documents`` (listed in ``ids``), ``anchors``, ``common`` and
        ``last_id``.
    """
    pa = _pyarrow()
    pq = pa.parquet
    meta = {
        "kind": EXPORT_KIND,
        "version": VERSION,
        "last_id": last_id,
        "narrow": narrow,
        "common": common,
        "store": source,
    }
    longs = pa.list_(pa.int64())
    fields = [
        ("similar_id", pa.int64()),
        ("size", pa.int64()),
        ("ids", pa.list_(pa.string())),
        ("anchors", longs),
        ("sketch", longs),
        ("limit", pa.int64()),
    ]
    if exacts:
        fields.append(("exacts", longs))
    schema = pa.schema(fields, metadata={META_KEY: json.dumps(meta).encode("utf-8")})
    counts = {"groups": 0, "documents": 0, "anchors": 0, "common": len(common)}
    tmp = path + ".tmp"
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            batch: list[dict[str, Any]] = []
            for row in rows:
                batch.append(row)
                counts["groups"] += 1
                counts["documents"] += len(row["ids"])
                counts["anchors"] += len(row["anchors"])
                if len(batch) >= _BATCH:
                    writer.write_table(pa.Table.from_pylist(batch, schema))
                    batch = []
            if batch or not counts["groups"]:
                writer.write_table(pa.Table.from_pylist(batch, schema))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    counts["last_id"] = last_id
    return counts


def read_export_info(
    metadata: dict[bytes, bytes] | None, columns: list[str], name: str
) -> ExportInfo | None:
    """The :class:`ExportInfo` of a Parquet file with this schema *metadata* and *columns*,
    or None when it is not an export (no ``nshash`` metadata).

    Raises:
        StateError: the metadata says export, but the file is not a well-formed one.
    """
    raw = (metadata or {}).get(META_KEY)
    if raw is None:
        return None
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict) or meta.get("kind") != EXPORT_KIND:
            raise ValueError("not an nshash groups export")
        if meta.get("version") != VERSION:
            raise ValueError(f"version {meta.get('version')!r}, not {VERSION}")
        last_id, narrow, common = meta["last_id"], meta["narrow"], meta["common"]
        if not isinstance(last_id, int) or isinstance(last_id, bool) or last_id < 0:
            raise ValueError(f"last_id {last_id!r}")
        if not isinstance(narrow, bool):
            raise ValueError(f"narrow {narrow!r}")
        if not isinstance(common, list) or not all(
            isinstance(h, int) and -_SIGN <= h < _SIGN for h in common
        ):
            raise ValueError("common is not a list of 64-bit integers")
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(f"{name!r} is not a readable nshash groups export: {exc}") from None
    missing = [c for c in EXPORT_COLUMNS if c not in columns]
    if missing:
        raise StateError(f"{name!r} is not a readable nshash groups export: no {missing} column")
    return ExportInfo(last_id, narrow, common, str(meta.get("store", "")))
