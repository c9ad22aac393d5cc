"""The ``nshash`` command line, driven through ``main([...])`` and once as the installed script."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from nshash import DocPrint, NSHash
from nshash.cli.io import BadRecord, Fields, Item, Preparer, doc_of
from nshash.cli.workers import BATCH_SIZE, WorkerError, Workers, _mp_context
from nshash.errors import install_hint
from tests.conftest import Run
from tests.redis_server import free_port

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"



pytestmark = pytest.mark.usefixtures("no_store_env")



def main_output(args: list[str]) -> str:
    """The stdout of ``nshash ARGS`` run in a child process (exit status 0 asserted)."""
    done = subprocess.run(
        [sys.executable, "-m", "nshash", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def story(doc_id: str) -> str:
    """The story of an example article: its id without the copy number (``zh-metro-3``)."""
    return doc_id.rsplit("-", 1)[0]


def article_lines() -> list[str]:
    """The example articles, one JSON line each (with its newline)."""
    return ARTICLES.read_text(encoding="utf-8").splitlines(keepends=True)


def partition(pairs: list[tuple[str, object]]) -> set[frozenset[str]]:
    """Group ids by the value paired with them."""
    groups: dict[object, set[str]] = {}
    for doc_id, key in pairs:
        groups.setdefault(key, set()).add(doc_id)
    return {frozenset(g) for g in groups.values()}


def write_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make *data* the process's stdin."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def write_csv(path: Path, rows: list[dict[str, str]], header: list[str]) -> None:
    """Write *rows* as a CSV file with *header*."""
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


class TestDedupJsonl:
    """``nshash dedup`` on JSONL: records come back unchanged, plus their group."""

    def test_groups_follow_stories(self, run: Run) -> None:
        """Every copy of a story shares one similar_id and different stories never do."""
        code, out, _ = run("dedup", ARTICLES)
        assert code == 0
        records = [json.loads(line) for line in out.splitlines()]
        assert [r["id"] for r in records] == [json.loads(x)["id"] for x in article_lines()]
        found = partition([(r["id"], r["similar_id"]) for r in records])
        expected = partition([(r["id"], story(r["id"])) for r in records])
        assert found == expected

    def test_duplicate_flag(self, run: Run) -> None:
        """The first copy of each story is not a duplicate; every later copy is."""
        _, out, _ = run("dedup", ARTICLES)
        seen: set[str] = set()
        for record in map(json.loads, out.splitlines()):
            assert record["duplicate"] is (story(record["id"]) in seen)
            seen.add(story(record["id"]))

    def test_lines_unchanged_bytewise(self, run: Run) -> None:
        """Each output line is its input line with the two keys added before the last brace."""
        _, out, _ = run("dedup", ARTICLES)
        for line_in, line_out in zip(article_lines(), out.splitlines(), strict=True):
            record = json.loads(line_out)
            tail = f', "similar_id": {record["similar_id"]}, "duplicate": '
            tail += "true}" if record["duplicate"] else "false}"
            assert line_out == line_in.rstrip()[:-1] + tail

    def test_summary_on_stderr_only(self, run: Run) -> None:
        """Stdout holds only records; the summary with counts and titles goes to stderr."""
        _, out, err = run("dedup", ARTICLES)
        assert all(line.startswith("{") for line in out.splitlines())
        assert "30 documents" in err
        assert "11 groups (8 with more than one document), 19 duplicates" in err
        assert "; 0 bad records\n" in err
        assert "docs/s" in err
        assert "largest groups" in err
        assert "江城地铁5号线今日开通运营" in err  # the largest story's first title
        assert "nothing was saved" in err  # the default memory:// store is documented

    def test_gzip_input_and_output(self, run: Run, tmp_path: Path) -> None:
        """A .jsonl.gz input gives the same records, and -o x.gz writes gzip."""
        plain = run("dedup", ARTICLES)[1]
        packed = tmp_path / "articles.jsonl.gz"
        packed.write_bytes(gzip.compress(ARTICLES.read_bytes()))
        code, out, _ = run("dedup", packed)
        assert code == 0 and out == plain
        target = tmp_path / "out.jsonl.gz"
        code, out, _ = run("dedup", packed, "-o", target)
        assert code == 0 and out == ""
        assert gzip.decompress(target.read_bytes()).decode("utf-8") == plain

    def test_stdin(self, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
        """``-`` reads JSONL from stdin."""
        plain = run("dedup", ARTICLES)[1]
        write_stdin(monkeypatch, ARTICLES.read_bytes())
        code, out, err = run("dedup", "-")
        assert code == 0 and out == plain
        assert "<stdin>" in err

    def test_output_file(self, run: Run, tmp_path: Path) -> None:
        """-o writes the records to a file and nothing to stdout."""
        target = tmp_path / "out.jsonl"
        code, out, _ = run("dedup", ARTICLES, "-o", target)
        assert code == 0 and out == ""
        assert len(target.read_text(encoding="utf-8").splitlines()) == 30

    def test_text_field_fallback_and_choice(self, run: Run, tmp_path: Path) -> None:
        """Without --text-field, 'content' is used, else 'text'; --text-field picks another."""
        body = "The harbour reopened after the storm. Ferries run on the winter timetable."
        path = tmp_path / "mixed.jsonl"
        rows = [{"id": "a", "content": body}, {"id": "b", "text": body}, {"id": "c", "body": body}]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        code, out, err = run("dedup", path, "--on-error", "skip")
        assert code == 0
        assert [json.loads(x)["id"] for x in out.splitlines()] == ["a", "b"]
        assert "line 3: no 'text' or 'content' field" in err
        code, out, err = run("dedup", path, "--text-field", "body", "--on-error", "skip")
        assert [json.loads(x)["id"] for x in out.splitlines()] == ["c"]
        assert "line 1: no 'body' field" in err

    def test_rerun_replaces_added_keys(self, run: Run, tmp_path: Path) -> None:
        """Running dedup on its own output replaces similar_id and duplicate, never repeats them."""
        first = tmp_path / "first.jsonl"
        run("dedup", ARTICLES, "-o", first)
        _, out, _ = run("dedup", first)
        before = first.read_text("utf-8").splitlines()
        for line_first, line_again in zip(before, out.splitlines(), strict=True):
            assert line_again.count('"similar_id"') == 1
            assert json.loads(line_again) == json.loads(line_first)

    def test_numeric_ids_and_blank_lines(self, run: Run, tmp_path: Path) -> None:
        """Integer ids are accepted as names and blank lines are no records."""
        path = tmp_path / "ids.jsonl"
        path.write_text(
            '{"id": 7, "content": "A short note about the weather today and tomorrow."}\n\n\n',
            encoding="utf-8",
        )
        code, out, err = run("dedup", path, "--store", f"memory://{tmp_path}/s.pkl")
        assert code == 0 and len(out.splitlines()) == 1 and "0 bad records" in err
        code, out, _ = run("groups", "--store", f"memory://{tmp_path}/s.pkl", "--min-size", "1")
        assert code == 0 and "7" in out.splitlines()[1]


class TestDedupOtherFormats:
    """``nshash dedup`` on CSV and on folders of .txt files."""

    HEADER = ["id", "title", "content", "site"]

    def example_rows(self) -> list[dict[str, str]]:
        return [{k: r[k] for k in self.HEADER} for r in map(json.loads, article_lines())]

    def test_csv_in_csv_out(self, run: Run, tmp_path: Path) -> None:
        """CSV rows come back unchanged with two columns added, grouped like the JSONL run."""
        path = tmp_path / "articles.csv"
        write_csv(path, self.example_rows(), self.HEADER)
        code, out, _ = run("dedup", path)
        assert code == 0
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0] == self.HEADER + ["similar_id", "duplicate", "error"]
        assert all(r[6] == "" for r in rows[1:])
        assert [r[:4] for r in rows[1:]] == [list(d.values()) for d in self.example_rows()]
        jsonl = [json.loads(x) for x in run("dedup", ARTICLES)[1].splitlines()]
        assert [r[4] for r in rows[1:]] == [str(r["similar_id"]) for r in jsonl]
        assert [r[5] for r in rows[1:]] == [str(r["duplicate"]).lower() for r in jsonl]

    def test_csv_keeps_crlf_and_existing_columns(self, run: Run, tmp_path: Path) -> None:
        """A CRLF file stays CRLF, and an existing similar_id column is filled, not repeated."""
        path = tmp_path / "crlf.csv"
        header = ["similar_id", "content"]
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, lineterminator="\r\n")
            writer.writerow(header)
            writer.writerow(["old", "Snow closed the mountain pass for the second day."])
        code, _, _ = run("dedup", path, "-o", tmp_path / "out.csv")
        assert code == 0
        data = (tmp_path / "out.csv").read_bytes()
        assert data == (
            b"similar_id,content,duplicate,error\r\n"
            b"1,Snow closed the mountain pass for the second day.,false,\r\n"
        )

    def test_txt_folder(self, run: Run, tmp_path: Path) -> None:
        """Each .txt file is a record: id is its path in the folder, title its first line."""
        folder = tmp_path / "news"
        (folder / "more").mkdir(parents=True)
        articles = list(map(json.loads, article_lines()))
        for a in articles[:6]:
            sub = folder / "more" if a["id"].endswith("-2") else folder
            (sub / f"{a['id']}.txt").write_text(a["title"] + "\n" + a["content"], "utf-8")
        (folder / "notes.md").write_text("not an article", encoding="utf-8")
        code, out, _ = run("dedup", folder)
        assert code == 0
        records = [json.loads(x) for x in out.splitlines()]
        assert [r["id"] for r in records] == sorted(r["id"] for r in records)
        assert "more/zh-metro-2.txt" in [r["id"] for r in records]
        assert set(records[0]) == {"id", "title", "similar_id", "duplicate"}
        assert {r["title"] for r in records} == {a["title"] for a in articles[:6]}
        found = partition([(r["id"], r["similar_id"]) for r in records])
        expected = partition([(r["id"], story(Path(r["id"]).stem)) for r in records])
        assert found == expected

    def test_format_option_overrides_name(self, run: Run, tmp_path: Path) -> None:
        """--format reads a file whose name says nothing about its format."""
        path = tmp_path / "articles.data"
        shutil.copy(ARTICLES, path)
        assert run("dedup", path, "--format", "jsonl")[0] == 0


class TestJobs:
    """--jobs N fingerprints in worker processes without changing the output."""

    def test_jobs_2_identical_to_jobs_1(self, run: Run, tmp_path: Path) -> None:
        """Several batches, bad records included: output and reports are byte-identical."""
        lines = article_lines()
        path = tmp_path / "many.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for i in range(BATCH_SIZE * 3 // len(lines) + 1):
                for line in lines:
                    record = json.loads(line)
                    record["id"] = f"{record['id']}-r{i}"
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.write("not json\n")
        outputs = []
        for jobs in ("1", "2"):
            target = tmp_path / f"out-{jobs}.jsonl"
            code, _, err = run("dedup", path, "--jobs", jobs, "-o", target)
            assert code == 0
            outputs.append((target.read_bytes(), [x for x in err.splitlines() if "line" in x]))
        assert outputs[0] == outputs[1]
        assert len(outputs[0][0].splitlines()) > BATCH_SIZE * 3
        assert len(outputs[0][1]) == BATCH_SIZE * 3 // len(lines) + 1

    def test_spawned_workers_when_threads_run(self, run: Run, tmp_path: Path) -> None:
        """With a thread running, workers are spawned instead of forked; same output."""
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait, daemon=True)
        thread.start()
        try:
            assert _mp_context().get_start_method() == "spawn"
            code, out, _ = run("dedup", ARTICLES, "--jobs", "2")
        finally:
            stop.set()
            thread.join()
        assert code == 0 and out == run("dedup", ARTICLES)[1]

    def test_dead_worker_is_an_error(self) -> None:
        """A worker killed from outside gives WorkerError, never a wrong or partial answer."""
        batch = [Item("line 1", b'{"content": "Seven boats left the harbour at dawn."}')]
        with Workers(2, Preparer(Fields(), ("similar_id",))) as workers:
            for proc in workers._procs:
                proc.kill()
                proc.join()
            with pytest.raises(WorkerError, match="exited unexpectedly"):
                list(workers.map(iter([batch, batch])))

    def test_workers_send_packed_words(self) -> None:
        """Workers answer with each record's packed words (no ints), which read back as the
        DocPrint the plain form gives; a bad record stays a BadRecord in its place."""
        lines = [line.encode("utf-8") for line in article_lines()] + [b"not json"]
        preparer = Preparer(Fields(), ("similar_id",))
        plain = preparer.run(lines)
        batch = [Item(f"line {i}", line) for i, line in enumerate(lines, 1)]
        with Workers(2, preparer) as workers:
            [(_, sent)] = list(workers.map(iter([batch])))
        assert len(sent) == len(plain) and isinstance(sent[-1], BadRecord)
        for got, want in zip(sent[:-1], plain[:-1], strict=True):
            assert not isinstance(got, BadRecord) and not isinstance(want, BadRecord)
            assert isinstance(got[2], bytes) and got[3] is None
            assert got[:2] == want[:2] and got[4:] == want[4:]
            assert doc_of(got) == doc_of(want) == DocPrint(want[2], want[3], *want[4])

    def test_jobs_must_not_be_negative(self, run: Run) -> None:
        """--jobs -1 is bad usage."""
        code, _, err = run("dedup", ARTICLES, "--jobs", "-1")
        assert code == 2 and "--jobs" in err

    @pytest.mark.parametrize("flag", [["--spark-parts"], ["--against", "x.jsonl"]])
    def test_spark_flags_need_the_spark_engine(self, run: Run, flag: list[str]) -> None:
        """A Spark-only flag on the local engine is bad usage (--spark-parts was ignored)."""
        code, out, err = run("dedup", ARTICLES, *flag)
        assert code == 2 and out == "" and "need --engine spark" in err

    def test_jobs_past_four_a_core_are_refused(self, run: Run) -> None:
        """A mistyped count (--jobs 100000) would start that many processes: bad usage."""
        most = 4 * (os.cpu_count() or 1)
        code, _, err = run("dedup", ARTICLES, "--jobs", str(most + 1))
        assert code == 2 and f"at most {most}" in err


class TestBadRecords:
    """Bad records are reported with their place; skipped by default, fatal with fail."""

    def bad_file(self, tmp_path: Path) -> Path:
        path = tmp_path / "bad.jsonl"
        good = "Wind turbines were installed on the northern ridge. Power flows from May."
        lines = [
            json.dumps({"id": "ok1", "content": good}),
            "{not json",
            json.dumps({"id": "e", "content": " ，。！ "}),
            json.dumps({"id": "m", "title": "no text"}),
            json.dumps(["a", "list"]),
            json.dumps({"id": "n", "content": 42}),
            json.dumps({"id": ["x"], "content": good}),
        ]
        data = "\n".join(lines).encode("utf-8") + b'\n{"id": "u", "content": "\xff"}\n'
        data += (json.dumps({"id": "ok2", "content": good}) + "\n").encode("utf-8")
        path.write_bytes(data)
        return path

    def test_write_keeps_lines_aligned(self, run: Run, tmp_path: Path) -> None:
        """By default a bad record is written with similar_id null and its error, in place."""
        path = self.bad_file(tmp_path)
        code, out, err = run("dedup", path)
        assert code == 0
        lines = out.splitlines()
        assert len(lines) == len(path.read_bytes().splitlines()) == 9
        records = [json.loads(x) for x in lines]
        assert [r["similar_id"] is None for r in records] == [False] + [True] * 7 + [False]
        assert records[1] == {
            "similar_id": None,
            "duplicate": None,
            "error": "line 2: not valid JSON (Expecting property name enclosed in double quotes:"
            " line 1 column 2 (char 1))",
        }
        assert records[3] == {
            "id": "m",
            "title": "no text",
            "similar_id": None,
            "duplicate": None,
            "error": "line 4: no 'text' or 'content' field; its keys are ['id', 'title']",
        }
        assert lines[3].startswith(json.dumps({"id": "m", "title": "no text"})[:-1] + ", ")
        assert "error" not in records[0] and records[8]["similar_id"] == records[0]["similar_id"]
        assert f"bad record {path} line 8: the line is not valid UTF-8" in err
        assert "7 bad records written with an error" in err

    def test_no_usable_record_fails(self, run: Run, tmp_path: Path) -> None:
        """A file in which no record has the text field is an error (exit 1), not a success."""
        path = tmp_path / "body.jsonl"
        path.write_text("".join(json.dumps({"id": i, "body": "x"}) + "\n" for i in range(300)))
        code, out, err = run("dedup", path)
        assert code == 1
        assert err.splitlines()[-1] == (
            f"Error: none of the 100 records read from {path} could be used (stopped there);"
            f" the first: {path} line 1: no 'text' or 'content' field; its keys are ['id', 'body']"
        )
        assert len(out.splitlines()) == 100

    def test_missing_fields_warn(self, run: Run) -> None:
        """A misspelt --id-field or --title-field gets a warning, once each."""
        code, _, err = run("dedup", ARTICLES, "--id-field", "idd", "--title-field", "headline")
        assert code == 0
        assert err.count("warning: ") == 2
        assert "warning: the first 30 records have no 'idd' field (--id-field)" in err
        assert "warning: the first 30 records have no 'headline' field (--title-field)" in err
        assert "warning" not in run("dedup", ARTICLES)[2]

    def test_skip_reports_each_with_line_number(self, run: Run, tmp_path: Path) -> None:
        """Each bad line is named with its number and reason; the good ones are written."""
        code, out, err = run("dedup", self.bad_file(tmp_path), "--on-error", "skip")
        assert code == 0
        assert [json.loads(x)["id"] for x in out.splitlines()] == ["ok1", "ok2"]
        name = str(tmp_path / "bad.jsonl")
        assert f"skipped {name} line 2: not valid JSON" in err
        assert f"skipped {name} line 3: the text has no letters or digits" in err
        assert f"skipped {name} line 4: no 'text' or 'content' field" in err
        assert f"skipped {name} line 5: a JSON array, not an object" in err
        assert f"skipped {name} line 6: the 'content' field is a JSON number, not a string" in err
        assert f"skipped {name} line 7: the 'id' field is a JSON array" in err
        assert f"skipped {name} line 8: the line is not valid UTF-8" in err
        assert "7 bad records skipped" in err

    def test_lone_surrogates(self, run: Run, tmp_path: Path) -> None:
        """A JSON escape for a lone surrogate is refused in an id and in a text (as
        ``NSHash.add`` refuses it), and kept as it came in a title."""
        path = tmp_path / "sur.jsonl"
        text = "A lone sits in this sentence, which is long enough to count."
        bad = text.replace("lone", "lone \\ud800")
        path.write_text(
            f'{{"id": "a\\ud800", "content": "{text}"}}\n'
            f'{{"id": "b", "similar_id": 9, "title": "t\\udfff", "content": "{text}"}}\n'
            f'{{"id": "c", "content": "{bad}"}}\n',
            encoding="utf-8",
        )
        code, out, err = run(
            "dedup", path, "--store", f"memory://{tmp_path}/s.pkl", "--on-error", "skip"
        )
        assert code == 0
        assert "line 1: the 'id' field holds a lone surrogate" in err
        assert "line 3: text must be valid Unicode text: it has a lone surrogate" in err
        assert out == (
            f'{{"id": "b", "title": "t\\udfff", "content": "{text}",'
            ' "similar_id": 1, "duplicate": false}\n'
        )

    def test_fail_stops_at_first(self, run: Run, tmp_path: Path) -> None:
        """--on-error fail exits 1 at the first bad record, after writing the ones before."""
        code, out, err = run("dedup", self.bad_file(tmp_path), "--on-error", "fail")
        assert code == 1
        assert [json.loads(x)["id"] for x in out.splitlines()] == ["ok1"]
        assert err.startswith("Error: ") and "line 2: not valid JSON" in err

    def test_csv_rows_numbered_like_a_spreadsheet(self, run: Run, tmp_path: Path) -> None:
        """CSV problems name the row (header = row 1): a wrong width, an empty text."""
        path = tmp_path / "bad.csv"
        path.write_text(
            "id,content\n"
            'a,"Two new buses, both electric, join the fleet on Monday morning."\n'
            "b,   \n"
            "c,too,many,fields\n",
            encoding="utf-8",
        )
        code, out, err = run("dedup", path)
        assert code == 0
        assert f"{path} row 3: the text has no letters or digits" in err
        assert f"{path} row 4: the row has 4 fields, the header 2" in err
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0] == ["id", "content", "similar_id", "duplicate", "error"]
        assert rows[2:] == [
            ["b", "   ", "", "", "row 3: the text has no letters or digits"],
            ["c", "too", "", "", "row 4: the row has 4 fields, the header 2"],
        ]
        code, out, err = run("dedup", path, "--on-error", "skip")
        assert code == 0 and len(out.splitlines()) == 2  # header + one row

    def test_csv_without_text_column(self, run: Run, tmp_path: Path) -> None:
        """A CSV with no text column is an error (exit 1) naming the columns it has."""
        path = tmp_path / "nocol.csv"
        path.write_text("id,body\na,hello there\n", encoding="utf-8")
        code, out, err = run("dedup", path)
        assert code == 1 and out == ""
        assert "Error: " in err and "no 'text' or 'content' column" in err and "'body'" in err

    def test_empty_txt_file(self, run: Run, tmp_path: Path) -> None:
        """An empty .txt file is reported by its path."""
        (tmp_path / "a.txt").write_text("Lanterns lit the old bridge for the festival.", "utf-8")
        (tmp_path / "b.txt").write_text("\n\n", "utf-8")
        code, out, err = run("dedup", tmp_path)
        assert code == 0 and len(out.splitlines()) == 2
        assert json.loads(out.splitlines()[1]) == {
            "id": "b.txt",
            "title": None,
            "similar_id": None,
            "duplicate": None,
            "error": f"{tmp_path / 'b.txt'}: the text has no letters or digits",
        }
        assert f"{tmp_path / 'b.txt'}: the text has no letters or digits" in err

    def test_truncated_gzip(self, run: Run, tmp_path: Path) -> None:
        """A truncated .gz input is an error, exit 1."""
        path = tmp_path / "cut.jsonl.gz"
        path.write_bytes(gzip.compress(ARTICLES.read_bytes())[:-200])
        code, _, err = run("dedup", path)
        assert code == 1 and err.splitlines()[-1].startswith("Error: ")


class TestUsageAndErrors:
    """Exit codes: 0 success, 1 error, 2 usage."""

    def test_help_and_version(self, run: Run) -> None:
        """--help and --version exit 0."""
        code, out, _ = run("--help")
        assert code == 0 and "dedup" in out
        code, out, _ = run("--version")
        assert code == 0 and out.startswith("nshash ")

    def test_no_command(self, run: Run) -> None:
        """A missing command is bad usage."""
        code, _, err = run()
        assert code == 2 and "usage:" in err

    def test_unknown_option(self, run: Run) -> None:
        """An unknown option is bad usage."""
        assert run("dedup", ARTICLES, "--bogus")[0] == 2

    def test_format_from_name_unknown(self, run: Run, tmp_path: Path) -> None:
        """An input whose format cannot be told from its name is bad usage."""
        path = tmp_path / "articles.xml"
        path.write_text("<a/>", encoding="utf-8")
        code, _, err = run("dedup", path)
        assert code == 2 and "--format" in err

    def test_missing_input(self, run: Run, tmp_path: Path) -> None:
        """A missing file is an error naming the file."""
        code, out, err = run("dedup", tmp_path / "nope.jsonl")
        assert code == 1 and out == ""
        assert err == f"Error: No such file or directory: {str(tmp_path / 'nope.jsonl')!r}\n"

    def test_bad_store_url(self, run: Run) -> None:
        """An unknown store scheme is an error with the library's message."""
        code, _, err = run("dedup", ARTICLES, "--store", "mysql:///x.db")
        assert code == 1 and err.startswith("Error: Unknown store scheme 'mysql'")

    def test_store_from_environment(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """NSHASH_STORE_URL is the default store of every command."""
        monkeypatch.setenv("NSHASH_STORE_URL", f"memory://{tmp_path}/env.pkl")
        assert run("dedup", ARTICLES, "-q")[0] == 0
        code, out, _ = run("stats")
        assert code == 0 and "documents:" in out and "30" in out

    def test_locked_store(self, run: Run, tmp_path: Path) -> None:
        """A store held by another opener gives an error, exit 1."""
        url = f"memory://{tmp_path}/held.pkl"
        with NSHash.open(url):
            code, _, err = run("dedup", ARTICLES, "--store", url)
        assert code == 1 and err.startswith("Error: ")

    def test_output_over_input_refused(self, run: Run, tmp_path: Path) -> None:
        """-o naming the input file is bad usage (it would be truncated before it is read)."""
        path = tmp_path / "a.jsonl"
        shutil.copy(ARTICLES, path)
        code, _, err = run("dedup", path, "-o", path)
        assert code == 2 and "is the input file" in err
        assert path.read_bytes() == ARTICLES.read_bytes()

    def test_txt_from_stdin_refused(self, run: Run) -> None:
        """The txt format cannot read stdin."""
        code, _, err = run("dedup", "-", "--format", "txt")
        assert code == 1 and "not stdin" in err

    def test_progress_bar_on_request(self, run: Run) -> None:
        """--progress draws a bar with a rate on stderr even when it is not a terminal."""
        code, out, err = run("dedup", ARTICLES, "--progress")
        assert code == 0 and "doc" in err and "\r" in err
        assert all(line.startswith("{") for line in out.splitlines())

    def test_quiet(self, run: Run) -> None:
        """-q prints no summary."""
        code, _, err = run("dedup", ARTICLES, "-q")
        assert code == 0 and err == ""


class TestSavedStore:
    """groups, stats and query read what dedup stored, on every backend."""

    def test_dedup_then_groups_stats_query(self, run: Run, store_url: str) -> None:
        """The largest groups, the counts and read-only queries agree with the dedup run."""
        code, out, _ = run("dedup", ARTICLES, "--store", store_url, "-q")
        assert code == 0
        added = {r["id"]: r["similar_id"] for r in map(json.loads, out.splitlines())}
        if store_url == "memory://":
            code, _, err = run("groups", "--store", store_url)
            assert code == 2 and "starts empty" in err
            return

        code, out, _ = run("groups", "--store", store_url, "--top", "3")
        assert code == 0
        lines = out.splitlines()
        assert lines[0].split() == ["size", "similar_id", "title"]
        assert lines[1].split()[:2] == ["5", str(added["zh-metro-1"])]
        assert "江城地铁5号线今日开通运营 (zh-metro-1)" in lines[1]
        assert len(lines) == 4

        code, out, _ = run("groups", "--store", store_url, "--json", "--min-size", "4")
        groups = json.loads(out)
        assert [g["size"] for g in groups] == [5, 4, 4]
        first = {
            "id": "zh-metro-1",
            "title": "江城地铁5号线今日开通运营",
            "doc_id": "zh-metro-1",
            "score": 0.0,
            "verdict": "new story",
        }
        assert groups[0]["members"][0] == first

        code, out, _ = run("stats", "--store", store_url, "--json")
        stats = json.loads(out)
        assert code == 0 and stats["documents"] == 30 and stats["groups"] == 11

        code, out, err = run("query", "--store", store_url, ARTICLES)
        assert code == 0
        assert {r["id"]: r["similar_id"] for r in map(json.loads, out.splitlines())} == added
        assert all("duplicate" not in json.loads(line) for line in out.splitlines())
        assert "30 match a stored group, 0 are new" in err
        assert json.loads(run("stats", "--store", store_url, "--json")[1]) == stats

    def test_query_new_text_is_null(self, run: Run, tmp_path: Path) -> None:
        """A text the store has not seen gets similar_id null."""
        url = f"memory://{tmp_path}/s.pkl"
        run("dedup", ARTICLES, "--store", url, "-q")
        path = tmp_path / "new.txt"
        path.write_text("A comet will be visible to the naked eye next week.", "utf-8")
        code, out, err = run("query", "--store", url, path)
        assert code == 0
        assert json.loads(out) == {
            "id": "new.txt",
            "title": "A comet will be visible to the naked eye next week.",
            "similar_id": None,
        }
        assert "0 match a stored group, 1 are new" in err

    def test_read_commands_need_a_store(self, run: Run) -> None:
        """groups, stats and query without --store or NSHASH_STORE_URL are bad usage."""
        for args in (["groups"], ["stats"], ["query", str(ARTICLES)]):
            code, _, err = run(*args)
            assert code == 2 and "NSHASH_STORE_URL" in err

    def test_groups_empty_store(self, run: Run, tmp_path: Path) -> None:
        """An empty store lists no group and says so on stderr."""
        NSHash.open(f"memory://{tmp_path}/empty.pkl").close()
        code, out, err = run("groups", "--store", f"memory://{tmp_path}/empty.pkl")
        assert code == 0 and out == "" and "no group" in err

    @pytest.mark.parametrize("command", ["groups", "stats", "query"])
    @pytest.mark.parametrize("scheme", ["memory", "leveldb"])
    def test_missing_store(self, run: Run, tmp_path: Path, command: str, scheme: str) -> None:
        """A read command on a store that does not exist fails (exit 1) and creates nothing."""
        if scheme == "leveldb":
            pytest.importorskip("plyvel")
        url = f"{scheme}://{tmp_path}/typo/news.db"
        args = [command, "--store", url] + ([str(ARTICLES)] if command == "query" else [])
        code, out, err = run(*args)
        assert (code, out) == (1, "")
        assert err.startswith(f"Error: There is no {'memory' if scheme == 'memory' else 'LevelDB'}")
        assert err.count("\n") == 1 and "reading never creates one" in err
        assert list(tmp_path.iterdir()) == []

    def test_groups_bad_limits(self, run: Run, tmp_path: Path) -> None:
        """--top 0 is refused with the library's error, exit 1."""
        NSHash.open(f"memory://{tmp_path}/e.pkl").close()
        code, _, err = run("groups", "--store", f"memory://{tmp_path}/e.pkl", "--top", "0")
        assert code == 1 and err.startswith("Error: limit must be a positive integer")


BRIDGE = (
    "The harbour bridge will close for repairs in May, the city said today. Traffic will be"
    " diverted over the northern ring road for six weeks, and buses will run every ten minutes."
)


class TestTrack:
    """``dedup --track``: each record's url, site and time go into the store's activity."""

    def test_jsonl_csv_parquet(self, run: Run, tmp_path: Path) -> None:
        """The hot stories of a tracked dedup rank the story with its sites and times, from
        JSONL, CSV and Parquet alike; an untracked run keeps none."""
        now = int(time.time())
        rows = [
            {"id": "a", "content": BRIDGE, "url": "https://one.example/a", "when": now - 3600},
            {"id": "b", "content": "Update: " + BRIDGE, "site": "two.example", "when": None},
            {"id": "c", "content": BRIDGE + " More soon.", "url": "https://www.three.example/c"},
        ]
        iso = datetime.fromtimestamp(now - 60, timezone.utc).isoformat()
        rows[1]["when"] = iso
        jsonl = tmp_path / "in.jsonl"
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
        csv_path = tmp_path / "in.csv"
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "content", "url", "site", "when"])
            for r in rows:
                when = r.get("when")
                writer.writerow([r["id"], r["content"], r.get("url", ""), r.get("site", ""),
                                 "" if when is None else str(when)])  # fmt: skip
        inputs = [jsonl, csv_path, jsonl]  # JSONL twice: in this process, then by 2 workers
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq

            cols = ("id", "content", "url", "site")
            table = pa.Table.from_pylist(
                [{**{k: r.get(k) for k in cols}, "when": str(r.get("when") or "")} for r in rows]
            )
            pq.write_table(table, tmp_path / "in.parquet")
            inputs.append(tmp_path / "in.parquet")
        except ImportError:
            pass
        for i, src in enumerate(inputs):
            store = f"memory://{tmp_path}/s{i}.pkl"
            out = tmp_path / f"out{i}{src.suffix}"
            jobs = "2" if i == 2 else "1"
            code, _, err = run("dedup", src, "--store", store, "--track", "--time-field",
                               "when", "-j", jobs, "-q", "-o", out)  # fmt: skip
            assert code == 0, err
            with NSHash.open(store, readonly=True) as nsh:
                (hot,) = nsh.hot("1d")
                assert hot.recent == 3, src
                assert hot.sites == ("one.example", "two.example", "three.example"), src
                assert hot.first_seen == now - 3600 and hot.last_seen >= now - 60, src
        untracked = f"memory://{tmp_path}/plain.pkl"
        assert run("dedup", jsonl, "--store", untracked, "-q", "-o", os.devnull)[0] == 0
        with NSHash.open(untracked, readonly=True) as nsh:
            assert nsh.hot("1d") == []

    def test_bad_fields_are_bad_records(self, run: Run, tmp_path: Path) -> None:
        """A url that is not a string or a time that is not one is a bad record, reported."""
        src = tmp_path / "in.jsonl"
        src.write_text(
            json.dumps({"id": "x", "content": BRIDGE, "url": 5}) + "\n"
            + json.dumps({"id": "y", "content": BRIDGE, "published_at": "soon"}) + "\n"
            + json.dumps({"id": "z", "content": BRIDGE, "published_at": -5}) + "\n"
            + json.dumps({"id": "ok", "content": BRIDGE, "published_at": 1_700_000_000}) + "\n"
        )  # fmt: skip
        code, out, err = run("dedup", src, "--track", "-o", "-")
        assert code == 0
        errors = [json.loads(line).get("error") for line in out.splitlines()]
        assert "'url' field is a number, not a string" in errors[0]
        assert "'published_at' field is not a time" in errors[1]
        assert "1970 to 9999" in errors[2]
        assert sum(line.startswith("bad record") for line in err.splitlines()) == 3

    def test_other_methods_refused(self, run: Run) -> None:
        """--track is the nshash method's: another method is a usage error (exit 2)."""
        code, _, err = run("dedup", ARTICLES, "--method", "simhash", "--track")
        assert code == 2 and "--track keeps activity for the nshash method" in err


class TestCompare:
    """``nshash compare A B``: the similarity measures of two texts."""

    @pytest.fixture(autouse=True)
    def _similarity(self) -> None:
        pytest.importorskip("nshash.toolkit.similarity", reason="the toolkit needs its extra")

    def texts(self, tmp_path: Path) -> tuple[Path, Path]:
        articles = list(map(json.loads, article_lines()))
        a, b = tmp_path / "a.txt", tmp_path / "b.txt"
        a.write_text(articles[0]["content"], encoding="utf-8")
        b.write_text(articles[1]["content"], encoding="utf-8")
        return a, b

    def test_all_metrics(self, run: Run, tmp_path: Path) -> None:
        """Without --metrics every measure is printed, each in [0, 1]."""
        from nshash.toolkit.similarity import METRICS

        code, out, _ = run("compare", *self.texts(tmp_path), "--json")
        scores = json.loads(out)
        assert code == 0 and list(scores) == list(METRICS)
        assert all(0.0 <= v <= 1.0 for v in scores.values())
        assert scores["levenshtein"] > 0.5  # a repost with a header and footer

    def test_some_metrics_as_text(self, run: Run, tmp_path: Path) -> None:
        """--metrics picks measures (space or comma separated); text output is one per line."""
        code, out, _ = run("compare", *self.texts(tmp_path), "--metrics", "cosine,simhash")
        assert code == 0
        assert [line.split()[0] for line in out.splitlines()] == ["cosine", "simhash"]

    def test_stdin_and_identical(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``-`` reads one side from stdin; a text compared with itself scores 1."""
        a, _ = self.texts(tmp_path)
        write_stdin(monkeypatch, a.read_bytes())
        code, out, _ = run("compare", "-", a, "--json", "--metrics", "cosine", "levenshtein")
        assert code == 0 and json.loads(out) == pytest.approx({"cosine": 1.0, "levenshtein": 1.0})

    def test_unknown_metric(self, run: Run, tmp_path: Path) -> None:
        """An unknown metric is bad usage and the valid names are listed."""
        code, _, err = run("compare", *self.texts(tmp_path), "--metrics", "jaccard")
        assert code == 2 and "'jaccard'" in err and "levenshtein" in err

    def test_both_stdin(self, run: Run) -> None:
        """A and B cannot both be stdin."""
        assert run("compare", "-", "-")[0] == 2

    def test_help_lists_metrics(self, run: Run) -> None:
        """compare --help names every measure, as the toolkit defines them."""
        from nshash.cli.compare import METRIC_NAMES
        from nshash.toolkit.similarity import METRICS

        assert METRIC_NAMES == METRICS
        code, out, _ = run("compare", "--help")
        assert code == 0 and all(name in " ".join(out.split()) for name in METRICS)

    def test_missing_toolkit(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without the similarity module the error gives the install hint, exit 1."""
        monkeypatch.setitem(sys.modules, "nshash.toolkit.similarity", None)
        code, _, err = run("compare", *self.texts(tmp_path))
        assert code == 1
        assert err.startswith("Error: ") and install_hint("similarity") in err


class TestServe:
    """``nshash serve``: uvicorn on the service app, refusing unsafe worker counts."""

    @pytest.mark.parametrize("store", [None, "memory://", "leveldb:///tmp/x.ldb"])
    def test_workers_need_shared_store(self, run: Run, store: str | None) -> None:
        """--workers 2 without a redis:// store is bad usage, and the message says why."""
        args = ["serve", "--workers", "2"] + (["--store", store] if store else [])
        code, _, err = run(*args)
        assert code == 2
        assert "redis://" in err and "each worker would hand out its own ids" in err

    def test_workers_past_four_a_core_are_refused(self, run: Run) -> None:
        """--workers 100000 on a redis:// store is bad usage (it started processes until the
        machine ran out of memory)."""
        most = 4 * (os.cpu_count() or 1)
        code, _, err = run("serve", "--workers", "100000", "--store", "redis://127.0.0.1:1/0")
        assert code == 2 and f"--workers must be at most {most}" in err

    def test_missing_uvicorn(self, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without uvicorn the error gives the install hint, exit 1."""
        monkeypatch.setitem(sys.modules, "uvicorn", None)
        code, _, err = run("serve")
        assert code == 1 and install_hint("service") in err

    @pytest.mark.slow
    def test_serves_http(self, tmp_path: Path) -> None:
        """``python -m nshash serve`` answers /healthz and uses the store it was given."""
        pytest.importorskip("uvicorn")
        port = free_port()
        store = f"memory://{tmp_path}/served.pkl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-m", "nshash", "serve", "--store", store, "--port", str(port)]
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server did not start in 30 s"
                    time.sleep(0.1)
            assert health.status_code == 200
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()
            assert ready["store"] == store
        finally:
            proc.terminate()
            proc.wait(timeout=30)


class TestInstalledScript:
    """The ``nshash`` console script that pip installs."""

    def test_console_script(self, tmp_path: Path) -> None:
        """``nshash dedup`` runs as its own process: records on stdout, summary on stderr."""
        script = shutil.which("nshash")
        if script is None:
            message = "the nshash script is not on PATH (pip install -e .)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NSHASH_")}
        done = subprocess.run(
            [script, "dedup", str(ARTICLES), "--jobs", "2"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()
        lines = done.stdout.decode("utf-8").splitlines()
        assert len(lines) == 30 and all(json.loads(x)["similar_id"] >= 1 for x in lines)
        assert "30 documents" in done.stderr.decode("utf-8")

    def test_python_dash_m(self, tmp_path: Path) -> None:
        """``python -m nshash`` is the same command line; bad usage exits 2."""
        done = subprocess.run(
            [sys.executable, "-m", "nshash", "dedup"], cwd=tmp_path, capture_output=True
        )
        assert done.returncode == 2 and b"usage: nshash dedup" in done.stderr


class TestNoStoreMade:
    """``repair`` and ``correct`` work on a store that exists: given a path with none, they
    say so, exit 1, and leave no file (they made an empty store, then answered about it)."""

    @pytest.mark.parametrize("scheme", ["memory", "leveldb", "sqlite"])
    @pytest.mark.parametrize(
        "command", [["repair"], ["correct", "detach", "x"], ["correct", "join", "1", "2"]]
    )
    def test_a_missing_store_is_an_error(
        self, run: Run, tmp_path: Path, scheme: str, command: list[str]
    ) -> None:
        if scheme == "leveldb":
            pytest.importorskip("plyvel")
        url = f"{scheme}://{tmp_path / 'none.store'}"
        code, out, err = run(*command, "--store", url)
        assert (code, out) == (1, "") and err.startswith("Error: There is no store at")
        assert list(tmp_path.iterdir()) == []
