"""``nshash dedup`` and ``nshash query`` on Parquet files (pyarrow), driven through ``main``."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import nshash.cli.parquet  # noqa: E402
from tests.conftest import Run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"



pytestmark = pytest.mark.usefixtures("no_store_env")



def articles() -> list[dict[str, str]]:
    """The example articles as dicts."""
    return [json.loads(line) for line in ARTICLES.read_text(encoding="utf-8").splitlines()]


def rich_table() -> pa.Table:
    """The example articles with columns of many types beside them, nulls included."""
    rows = articles()
    n = len(rows)
    tz = dt.timezone.utc
    columns = {
        "id": pa.array([r["id"] for r in rows]),
        "title": pa.array([r["title"] for r in rows], pa.large_string()),
        "site": pa.array([r["site"] for r in rows]).dictionary_encode(),
        "content": pa.array([r["content"] for r in rows]),
        "rank": pa.array(range(n), pa.int16()),
        "score": pa.array([i / 7 if i % 5 else None for i in range(n)], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in range(n)]),
        "published": pa.array(
            [dt.datetime(2024, 5, 1, 8, i, tzinfo=tz) for i in range(n)], pa.timestamp("us", tz)
        ),
        "day": pa.array([dt.date(2024, 5, 1 + i % 28) for i in range(n)], pa.date32()),
        "tags": pa.array([[r["site"], str(i)] if i % 3 else [] for i, r in enumerate(rows)]),
        "meta": pa.array([{"words": len(r["content"]), "lang": r["id"][:2]} for r in rows]),
        "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(9, 2)),
        "raw": pa.array([r["id"].encode() for r in rows], pa.binary()),
    }
    schema_meta = {b"origin": b"nshash test", b"pandas": b'{"index_columns": []}'}
    return pa.table(columns).replace_schema_metadata(schema_meta)


def jsonl_answers(run: Run) -> list[tuple[int, bool]]:
    """``(similar_id, duplicate)`` per article from ``nshash dedup`` on the JSONL file."""
    code, out, _ = run("dedup", ARTICLES, "-q")
    assert code == 0
    return [(r["similar_id"], r["duplicate"]) for r in map(json.loads, out.splitlines())]


class TestRoundTrip:
    """Parquet in, Parquet out: every column kept, two added."""

    def test_every_column_and_value_kept(self, run: Run, tmp_path: Path) -> None:
        """Each input column comes back with its type, values and nulls; schema metadata too."""
        table = rich_table()
        source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pq.write_table(table, source, row_group_size=7)
        code, out, err = run("dedup", source, "-o", target)
        assert code == 0, err
        assert out == ""
        result = pq.read_table(target)
        assert result.column_names == [*table.column_names, "similar_id", "duplicate", "error"]
        assert result.column("error").null_count == table.num_rows
        assert result.select(table.column_names).equals(table)
        assert result.schema.metadata == table.schema.metadata
        assert result.schema.field("similar_id").type == pa.int64()
        assert result.schema.field("duplicate").type == pa.bool_()
        assert "30 documents" in err

    def test_same_answers_as_jsonl(self, run: Run, tmp_path: Path) -> None:
        """Each row gets the similar_id and duplicate flag its JSONL line gets."""
        source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pq.write_table(pa.Table.from_pylist(articles()), source, row_group_size=4)
        assert run("dedup", source, "-o", target, "-q")[0] == 0
        got = pq.read_table(target).select(["similar_id", "duplicate"]).to_pylist()
        assert [(r["similar_id"], r["duplicate"]) for r in got] == jsonl_answers(run)

    def test_added_columns_replaced_in_place(self, run: Run, tmp_path: Path) -> None:
        """Grouping an output again replaces its similar_id and duplicate columns."""
        source, once, twice = (tmp_path / f"{n}.parquet" for n in ("in", "once", "twice"))
        pq.write_table(pa.Table.from_pylist(articles()), source)
        assert run("dedup", source, "-o", once, "-q")[0] == 0
        # An earlier tool's similar_id of another type is replaced, not kept beside.
        first = pq.read_table(once)
        stale = first.set_column(
            first.column_names.index("similar_id"),
            "similar_id",
            pa.array(["x"] * first.num_rows),
        )
        pq.write_table(stale, once)
        assert run("dedup", once, "-o", twice, "-q")[0] == 0
        assert pq.read_table(twice).equals(first)

    def test_compression_kept(self, run: Run, tmp_path: Path) -> None:
        """The output uses the input's codec."""
        source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pq.write_table(pa.Table.from_pylist(articles()), source, compression="zstd")
        assert run("dedup", source, "-o", target, "-q")[0] == 0
        meta = pq.ParquetFile(target).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"

    def test_integer_ids_and_text_field(self, run: Run, tmp_path: Path) -> None:
        """An integer id column names documents; --text-field picks the column."""
        rows = [{"key": i, "body": r["content"]} for i, r in enumerate(articles(), 1)]
        source, target = tmp_path / "in.pq", tmp_path / "out.pq"
        pq.write_table(pa.Table.from_pylist(rows), source)
        store = f"memory://{tmp_path}/s.pkl"
        args = ("dedup", source, "-o", target, "--text-field", "body", "--id-field", "key")
        assert run(*args, "--store", store, "-q")[0] == 0
        code, out, _ = run("groups", "--store", store, "--json")
        assert code == 0
        members = {m["doc_id"] for g in json.loads(out) for m in g["members"]}
        assert {"1", "2", "3", "4", "5"} <= members

    def test_query_adds_nullable_similar_id(self, run: Run, tmp_path: Path) -> None:
        """``query`` on Parquet adds similar_id only, null for a new story."""
        store = f"memory://{tmp_path}/s.pkl"
        assert run("dedup", ARTICLES, "--store", store, "-q")[0] == 0
        rows = [{"text": articles()[0]["content"]}, {"text": "A story nobody has told yet at all."}]
        source, target = tmp_path / "q.parquet", tmp_path / "answer.parquet"
        pq.write_table(pa.Table.from_pylist(rows), source)
        assert run("query", source, "--store", store, "-o", target, "-q")[0] == 0
        result = pq.read_table(target)
        assert result.column_names == ["text", "similar_id", "error"]
        assert result.column("similar_id").to_pylist() == [1, None]

    def test_empty_file(self, run: Run, tmp_path: Path) -> None:
        """A file with a schema and no rows gives a file with no rows and both columns."""
        source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pq.write_table(pa.table({"content": pa.array([], pa.string())}), source)
        assert run("dedup", source, "-o", target, "-q")[0] == 0
        result = pq.read_table(target)
        assert result.num_rows == 0
        assert result.column_names == ["content", "similar_id", "duplicate", "error"]


class TestStreamingAndJobs:
    """Batches stream through in order; worker processes change nothing."""

    def test_jobs_2_identical_to_jobs_1(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Many read batches, bad rows in several: the two files are byte-identical."""
        monkeypatch.setattr(nshash.cli.parquet, "READ_BATCH_ROWS", 100)
        monkeypatch.setattr(nshash.cli.parquet, "WRITE_GROUP_ROWS", 250)
        base = articles()
        rows = []
        for copy in range(30):
            for i, r in enumerate(base):
                text = None if (copy * 30 + i) % 97 == 0 else r["content"]
                rows.append({"id": f"{r['id']}-{copy}", "content": text, "copy": copy})
        source = tmp_path / "in.parquet"
        pq.write_table(pa.Table.from_pylist(rows), source, row_group_size=250)
        outputs = []
        for jobs in ("1", "2"):
            target = tmp_path / f"out-{jobs}.parquet"
            code, _, err = run("dedup", source, "--jobs", jobs, "-o", target)
            assert code == 0
            reports = [line for line in err.splitlines() if line.startswith("bad record")]
            outputs.append((target.read_bytes(), reports))
        assert outputs[0] == outputs[1]
        bad = [n for n in range(len(rows)) if n % 97 == 0]
        assert len(outputs[0][1]) == len(bad)
        assert f"row {bad[1] + 1}: the 'content' column is null" in outputs[0][1][1]
        result = pq.read_table(tmp_path / "out-1.parquet")
        assert result.select(["id", "content", "copy"]).to_pylist() == rows  # row N is row N
        errors = result.column("error").to_pylist()
        assert [n for n, e in enumerate(errors) if e is not None] == bad
        assert all(result.column("similar_id")[n].as_py() is None for n in bad)
        meta = pq.ParquetFile(tmp_path / "out-1.parquet").metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert sizes == [300, 300, 300]  # three read batches of 100 rows each

    def test_skip_leaves_bad_rows_out(self, run: Run, tmp_path: Path) -> None:
        """With --on-error skip a row without text is reported and left out."""
        rows = [{"text": a["content"]} for a in articles()[:3]]
        rows.insert(1, {"text": None})
        source, target = tmp_path / "in.parquet", tmp_path / "out.parquet"
        pq.write_table(pa.Table.from_pylist(rows), source)
        code, _, err = run("dedup", source, "-o", target, "--on-error", "skip")
        assert code == 0 and "row 2: the 'text' column is null" in err
        result = pq.read_table(target)
        assert result.column("text").to_pylist() == [r["text"] for r in rows if r["text"]]


class TestPartFiles:
    """A folder of part files, as Spark writes it, reads as one file."""

    def test_folder_in_name_order(self, run: Run, tmp_path: Path) -> None:
        """Parts are read in name order, _SUCCESS and hidden files skipped; one file out."""
        table = pa.Table.from_pylist(articles())
        folder = tmp_path / "corpus.parquet"
        folder.mkdir()
        for i, start in enumerate(range(0, 30, 12)):
            pq.write_table(table.slice(start, 12), folder / f"part-{i:05d}.snappy.parquet")
        (folder / "_SUCCESS").write_bytes(b"")
        (folder / ".part-00000.snappy.parquet.crc").write_bytes(b"x")
        target = tmp_path / "out.parquet"
        assert run("dedup", folder, "-o", target, "-q")[0] == 0
        result = pq.read_table(target)
        assert result.select(table.column_names).equals(table)
        got = [(r["similar_id"], r["duplicate"]) for r in result.to_pylist()]
        assert got == jsonl_answers(run)

    def test_parts_must_agree(self, run: Run, tmp_path: Path) -> None:
        """Parts with other columns, or a partitioned folder, are refused with the reason."""
        folder = tmp_path / "mixed.parquet"
        folder.mkdir()
        pq.write_table(pa.table({"text": ["One article here."]}), folder / "a.parquet")
        pq.write_table(pa.table({"text": ["Two."], "x": [1]}), folder / "b.parquet")
        code, _, err = run("dedup", folder, "-o", tmp_path / "out.parquet")
        assert code == 1 and "The part files of" in err and "differ" in err
        hive = tmp_path / "hive.parquet"
        (hive / "day=1").mkdir(parents=True)
        pq.write_table(pa.table({"text": ["One."]}), hive / "day=1" / "a.parquet")
        code, _, err = run("dedup", hive, "-o", tmp_path / "out.parquet")
        assert code == 1 and "partitioned dataset" in err


class TestErrors:
    """Bad Parquet input: one ``Error:`` line and exit 1."""

    def test_no_text_column(self, run: Run, tmp_path: Path) -> None:
        """A file without the text column names its columns."""
        source = tmp_path / "in.parquet"
        pq.write_table(pa.table({"body": ["x"], "id": ["a"]}), source)
        code, _, err = run("dedup", source, "-o", tmp_path / "out.parquet")
        assert code == 1
        assert err.startswith("Error: ") and "'body'" in err and "--text-field" in err

    def test_text_column_not_strings(self, run: Run, tmp_path: Path) -> None:
        """A numeric text column is refused up front."""
        source = tmp_path / "in.parquet"
        pq.write_table(pa.table({"text": [1, 2]}), source)
        code, _, err = run("dedup", source, "-o", tmp_path / "out.parquet")
        assert code == 1 and "holds int64, not strings" in err

    @pytest.mark.parametrize("twice", ["id", "text"])
    def test_a_column_read_by_name_twice(self, run: Run, tmp_path: Path, twice: str) -> None:
        """Two columns of the name read (possible in Parquet) are refused: it was a traceback."""
        source = tmp_path / "in.parquet"
        other = "id" if twice == "text" else "text"
        columns = [pa.array(["Some words here.", "More words."])] * 3
        pq.write_table(pa.Table.from_arrays(columns, names=[twice, twice, other]), source)
        code, out, err = run("dedup", source, "-o", tmp_path / "out.parquet")
        assert (code, out) == (1, "") and err.count("\n") == 1
        assert f"more than one column named {twice!r}" in err

    def test_float_id_column(self, run: Run, tmp_path: Path) -> None:
        """An id column of floats is refused (ids are strings or integers)."""
        source = tmp_path / "in.parquet"
        pq.write_table(pa.table({"text": ["Some words here."], "id": [1.5]}), source)
        code, _, err = run("dedup", source, "-o", tmp_path / "out.parquet")
        assert code == 1 and "The id column 'id'" in err

    def test_not_parquet(self, run: Run, tmp_path: Path) -> None:
        """A .parquet name on another kind of file is a clear error."""
        source = tmp_path / "in.parquet"
        source.write_text('{"text": "not parquet"}\n')
        code, _, err = run("dedup", source, "-o", tmp_path / "out.parquet")
        assert code == 1 and "is not a readable Parquet file" in err
        assert "Traceback" not in err

    def test_stdin_refused(self, run: Run) -> None:
        """Parquet needs a seekable file, so stdin is refused."""
        code, _, err = run("dedup", "-", "--format", "parquet")
        assert code == 1 and "stdin" in err

    def test_format_detected(self) -> None:
        """.parquet and .pq names read as Parquet."""
        from nshash.cli.io import detect_format

        assert detect_format("a/b.parquet") == detect_format("c.PQ") == "parquet"
