"""nshash.export and ``nshash groups --export``: a store's groups as one Parquet file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nshash import NSHash
from nshash.cli import main
from nshash.errors import ConfigError, StateError
from nshash.export import EXPORT_COLUMNS, META_KEY, export_groups, read_export_info
from nshash.text.fingerprint import narrow

pq = pytest.importorskip("pyarrow.parquet")

STORY = (
    "The river burst its banks overnight and flooded the old town centre.\n"
    "Residents were taken to safety by boat before dawn, and the mayor asked for army help.\n"
    "Engineers say the flood wall built ten years ago held along most of its length."
)
OTHER = (
    "A new bridge across the bay opened to traffic today after six years of work.\n"
    "The first drivers crossed at dawn, and the ferry that served the route will stop."
)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return f"memory://{tmp_path / 'news.pkl'}"
    return f"sqlite://{tmp_path / 'news.db'}"


def test_export_holds_every_group(store: str, tmp_path: Path) -> None:
    """One row a group in id order: its ids, its documents' anchors (signed), its sketch and
    limit as the store compares them; the metadata gives the last id, the width and the
    common hashes."""
    with NSHash.open(store) as nsh:
        a = nsh.add(STORY, doc_id="a")
        nsh.add("Metro desk\n" + STORY, doc_id="b")
        nsh.add(OTHER, doc_id="c")
        nsh.add(OTHER + " More soon.")  # no id: counted in size, no record
        out = tmp_path / "groups.parquet"
        counts = export_groups(nsh, str(out))
        sketch = nsh.store.sketch(a.similar_id)
        anchors = {
            _signed(h)
            for d in ("a", "b")
            for h in (nsh.document(d) or a).fingerprints  # type: ignore[union-attr]
        }
        common = {_signed(h) for h in nsh.store.common()}
        is_narrow = nsh.store.narrow_sketches()
        prepared = narrow(nsh.prepare(STORY)) if is_narrow else nsh.prepare(STORY)
    table = pq.read_table(out)
    assert tuple(table.column_names) == EXPORT_COLUMNS
    rows = table.to_pylist()
    assert [r["similar_id"] for r in rows] == [1, 2]
    assert rows[0]["ids"] == ["a", "b"] and rows[1]["ids"] == ["c"]
    assert [r["size"] for r in rows] == [2, 2]
    assert set(rows[0]["anchors"]) == anchors
    assert sketch is not None and (tuple(rows[0]["sketch"]), rows[0]["limit"]) == sketch
    assert set(prepared.sketch) <= set(rows[0]["sketch"])
    meta = json.loads(table.schema.metadata[META_KEY])
    assert meta["kind"] == "nshash-groups" and meta["version"] == 1
    assert meta["last_id"] == 2 and meta["narrow"] is is_narrow
    assert set(meta["common"]) == common
    assert counts == {
        "groups": 2,
        "documents": 3,
        "anchors": counts["anchors"],
        "common": len(common),
        "last_id": 2,
    }
    info = read_export_info(table.schema.metadata, table.column_names, str(out))
    assert info is not None and info.last_id == 2


def test_an_empty_store_exports_an_empty_file(tmp_path: Path) -> None:
    with NSHash.open(f"memory://{tmp_path / 'e.pkl'}") as nsh:
        export_groups(nsh, str(tmp_path / "g.parquet"))
    table = pq.read_table(tmp_path / "g.parquet")
    assert table.num_rows == 0 and tuple(table.column_names) == EXPORT_COLUMNS


def test_an_existing_file_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "g.parquet"
    out.write_bytes(b"keep")
    with NSHash.open("memory://") as nsh, pytest.raises(ConfigError, match="exists"):
        export_groups(nsh, str(out))
    assert out.read_bytes() == b"keep"


def test_malformed_exports_are_refused() -> None:
    """An export whose metadata or columns are not the format's is a StateError; a Parquet
    file without the metadata is no export (None)."""
    cols = list(EXPORT_COLUMNS)
    assert read_export_info(None, cols, "x") is None
    good = {"kind": "nshash-groups", "version": 1, "last_id": 3, "narrow": True, "common": []}
    assert read_export_info({META_KEY: json.dumps(good).encode()}, cols, "x") is not None
    for bad in (
        b"not json",
        json.dumps({**good, "kind": "other"}).encode(),
        json.dumps({**good, "version": 9}).encode(),
        json.dumps({**good, "last_id": -1}).encode(),
        json.dumps({**good, "common": ["x"]}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "narrow"}).encode(),
    ):
        with pytest.raises(StateError, match="not a readable nshash groups export"):
            read_export_info({META_KEY: bad}, cols, "x")
    with pytest.raises(StateError, match="sketch"):
        read_export_info({META_KEY: json.dumps(good).encode()}, cols[:4], "x")


def test_cli_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``nshash groups --store URL --export FILE`` writes the file and says what is in it; a
    second run to the same file is one Error line and exit 1; a store that is not there too."""
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": i, "text": t}) + "\n"
            for i, t in (("a", STORY), ("b", "Metro desk\n" + STORY), ("c", OTHER))
        ),
        "utf-8",
    )
    url = f"sqlite://{tmp_path / 'news.db'}"
    assert main(["dedup", str(src), "--store", url, "-q", "-o", str(tmp_path / "o.jsonl")]) == 0
    out = tmp_path / "g.parquet"
    capsys.readouterr()
    assert main(["groups", "--store", url, "--export", str(out)]) == 0
    err = capsys.readouterr().err
    assert "exported 2 groups (3 documents with an id" in err and str(out) in err
    assert pq.read_table(out).num_rows == 2
    assert main(["groups", "--store", url, "--export", str(out)]) == 1
    assert capsys.readouterr().err.startswith("Error: ")
    missing = f"sqlite://{tmp_path / 'none.db'}"
    assert main(["groups", "--store", missing, "--export", str(tmp_path / "x.parquet")]) == 1
    assert capsys.readouterr().err.startswith("Error: ")
    # Not a Parquet file's name (the file was written as Parquet whatever its name, "-"
    # included), or a listing's options, which the export ignored: bad usage, nothing written.
    for target, more, said in (
        ("-", [], "give a FILE.parquet"),
        (str(tmp_path / "g.jsonl"), [], "give a FILE.parquet"),
        ("", [], "give a FILE.parquet"),
        (str(tmp_path / "h.parquet"), ["--top", "3"], "--top"),
        (str(tmp_path / "h.parquet"), ["--since", "1h", "--json"], "--json, --since"),
        (str(tmp_path / "h.parquet"), ["--search", "mill"], "--search"),
    ):
        assert main(["groups", "--store", url, "--export", target, *more]) == 2
        assert said in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name[0] in "-gh") == ["g.parquet"]
