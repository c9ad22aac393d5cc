"""Hostile input files through ``nshash dedup``: each gives bad-record lines or one ``Error:``
line, never a traceback, and reading holds memory to the size limits."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from nshash import NSHash
from nshash.cli.io import MAX_RECORD_BYTES, MAX_TXT_BYTES
from nshash.errors import ConfigError
from nshash.inputs import MAX_TEXT_CHARS
from tests.conftest import Run

FIRST = "Wind turbines were installed on the northern ridge. Power flows from May."
LAST = "The harbour bridge reopened after two years of repairs to its steel deck."

#: Runs ``nshash ARGS`` in a child and prints its peak resident memory (KiB) last on stderr.
_MEASURED = (
    "import resource, sys\n"
    "from nshash.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


pytestmark = pytest.mark.usefixtures("no_store_env")



def measured(*args: str | Path) -> tuple[int, str, int]:
    """Run ``nshash ARGS`` in a child process: exit code, stderr, peak memory in bytes."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    *rest, last = done.stderr.rstrip("\n").split("\n")
    assert last.startswith("maxrss "), done.stderr[-2000:]
    return done.returncode, "\n".join(rest), int(last.split()[1]) * 1024


def gz_with_long_line(path: Path, line_bytes: int) -> None:
    """Write a gzip JSONL file: a good record, one record *line_bytes* long, a good record."""
    pack = zlib.compressobj(1, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        fh.write(pack.compress((json.dumps({"id": "a", "text": FIRST}) + "\n").encode()))
        head = b'{"id": "big", "text": "'
        fh.write(pack.compress(head))
        chunk = b"a" * (1 << 20)
        left = line_bytes - len(head) - 3
        while left > 0:
            fh.write(pack.compress(chunk[:left]))
            left -= len(chunk)
        fh.write(pack.compress(b'"}\n' + (json.dumps({"id": "c", "text": LAST}) + "\n").encode()))
        fh.write(pack.flush())


class TestJsonl:
    """Hostile JSONL lines are bad records; the lines around them are grouped."""

    @pytest.mark.parametrize("fast", [True, False], ids=["orjson", "json"])
    def test_nested_too_deep(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast: bool
    ) -> None:
        """Lines nested 2,000 deep (in a field, and as the whole line) never stop the run:
        the standard parser refuses them as bad records (orjson, where installed, reads the
        first as the good record it is); the lines around them are grouped."""
        from nshash.cli import io as cli_io

        if not fast:
            monkeypatch.setattr(cli_io, "_orjson", None)
        elif cli_io._orjson is None:
            pytest.skip("orjson is not installed")
        path = tmp_path / "deep.jsonl"
        deep = "[" * 2000 + "]" * 2000
        path.write_text(
            json.dumps({"id": "a", "text": FIRST})
            + "\n"
            + '{"id": "b", "text": "'
            + LAST.replace("harbour", "river")
            + '", "extra": '
            + deep
            + "}\n"
            + deep
            + "\n"
            + json.dumps({"id": "c", "text": LAST})
            + "\n",
            encoding="utf-8",
        )
        code, out, err = run("dedup", path, "-j", "1")
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) == 4
        too_deep = '"error": "line %d: JSON nested too deeply to read"}'
        if fast:
            assert lines[1].endswith(', "similar_id": 2, "duplicate": false}')
            assert json.loads(lines[2])["error"] == "line 3: a JSON array, not an object"
        else:
            assert lines[1].endswith(too_deep % 2) and lines[2].endswith(too_deep % 3)
        assert json.loads(lines[0])["similar_id"] == 1
        # c is 2 either way: read, b (c with one word changed) is a copy c joins, since
        # letters weigh 2 units (a shingle of 12 letters); refused, b took no id.
        assert json.loads(lines[3])["similar_id"] == 2
        assert "Traceback" not in err

    def test_text_over_the_limit_is_the_library_refusal(self, run: Run, tmp_path: Path) -> None:
        """A text of MAX_TEXT_CHARS + 1 characters is a bad record whose reason is the very
        refusal of ``NSHash.add``, and nothing of it is stored."""
        text = "a" * (MAX_TEXT_CHARS + 1)
        with pytest.raises(ConfigError) as refused:
            NSHash("memory").add(text)
        path = tmp_path / "long.jsonl"
        path.write_text(
            json.dumps({"id": "a", "text": FIRST})
            + "\n"
            + json.dumps({"id": "big", "text": text})
            + "\n",
            encoding="utf-8",
        )
        store = tmp_path / "s.pkl"
        code, out, err = run("dedup", path, "--store", f"memory://{store}")
        assert code == 0, err
        records = [json.loads(line) for line in out.splitlines()]
        assert records[1]["error"] == f"line 2: {refused.value}"
        with NSHash.open(f"memory://{store}", readonly=True) as nsh:
            assert nsh.document("big") is None and nsh.document("a") is not None

    def test_line_over_the_limit(self, tmp_path: Path) -> None:
        """A gzip line of 256 MiB is a bad record skipped without being held: the run's peak
        memory is within one record limit of a run on a small file."""
        small = tmp_path / "small.jsonl"
        small.write_text(
            json.dumps({"id": "a", "text": FIRST}) + "\n" + json.dumps({"id": "c", "text": LAST}),
            encoding="utf-8",
        )
        code, _, base = measured("dedup", small, "-o", tmp_path / "small.out")
        assert code == 0
        big = tmp_path / "big.jsonl.gz"
        gz_with_long_line(big, 256 << 20)
        out = tmp_path / "big.out"
        code, err, peak = measured("dedup", big, "-o", out)
        assert code == 0, err
        assert "Traceback" not in err
        assert f"line 2: the line is longer than {MAX_RECORD_BYTES} bytes" in err
        records = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["similar_id"] is None for r in records] == [False, True, False]
        assert peak - base < MAX_RECORD_BYTES + (48 << 20), (peak, base)

    @pytest.mark.slow
    def test_one_gib_line_in_one_mb(self, tmp_path: Path) -> None:
        """A 1 MB .jsonl.gz holding one 1 GiB line: a bad record, the memory of a small run
        plus one record limit."""
        small = tmp_path / "small.jsonl"
        small.write_text(json.dumps({"id": "a", "text": FIRST}) + "\n", encoding="utf-8")
        _, _, base = measured("dedup", small, "-o", tmp_path / "small.out")
        big = tmp_path / "big.jsonl.gz"
        gz_with_long_line(big, 1 << 30)
        assert big.stat().st_size < 8 << 20
        code, err, peak = measured("dedup", big, "-o", tmp_path / "big.out")
        assert code == 0, err
        assert "line 2: the line is longer than" in err and "1 bad record" in err
        assert peak - base < MAX_RECORD_BYTES + (48 << 20), (peak, base)


class TestCsv:
    """Hostile CSV files: a bad byte is a bad row; an endless row is one ``Error:`` line."""

    @pytest.mark.parametrize("encoding", [None, "utf-8"], ids=["auto", "given"])
    def test_invalid_utf8_byte(self, run: Run, tmp_path: Path, encoding: str | None) -> None:
        """One invalid UTF-8 byte makes its row a bad record (written with U+FFFD for the
        byte); the rows around it are grouped."""
        path = tmp_path / "bad.csv"
        path.write_bytes(
            f"id,text\na,{FIRST}\nb,caf\xe9 but in Latin-1 \xff\nc,{LAST}\n".encode("latin-1")
        )
        given = ["--encoding", encoding] if encoding else []
        code, out, err = run("dedup", path, *given)
        assert code == 0, err
        rows = list(csv.reader(io.StringIO(out)))
        assert rows[0] == ["id", "text", "similar_id", "duplicate", "error"]
        assert rows[2] == ["b", "caf\ufffd but in Latin-1 \ufffd", "", "", "row 3: the row is not"
                           " valid utf-8"]  # fmt: skip
        assert rows[1][2] and rows[3][2]
        assert f"bad record {path} row 3: the row is not valid utf-8" in err

    def test_invalid_byte_in_header(self, run: Run, tmp_path: Path) -> None:
        """An invalid byte in the header row is one ``Error:`` line."""
        path = tmp_path / "head.csv"
        path.write_bytes(b"id,te\xffxt\na,b\n")
        code, _, err = run("dedup", path, "--encoding", "utf-8")
        assert code == 1
        assert err.strip().splitlines()[-1].startswith("Error: ")
        assert "header row is not valid utf-8" in err

    def test_row_over_the_limit(self, tmp_path: Path) -> None:
        """A row longer than the record limit (here a quoted field with no end) is one
        ``Error:`` line naming the row, read in bounded memory."""
        path = tmp_path / "endless.csv"
        with path.open("wb") as fh:
            fh.write(f'id,text\na,"{FIRST}"\nb,"'.encode())
            line = b"abc " * (1 << 12) + b"\n"
            for _ in range((MAX_RECORD_BYTES + (16 << 20)) // len(line)):
                fh.write(line)
        code, err, _ = measured("dedup", path, "-o", tmp_path / "out.csv")
        assert code == 1
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1] == (
            f"Error: row 3: a row longer than {MAX_RECORD_BYTES} characters"
        )


class TestTxt:
    """A ``.txt`` file past the size limit is a bad record, read no further than the limit."""

    def test_file_over_the_limit(self, run: Run, tmp_path: Path) -> None:
        """A .txt file of more than MAX_TXT_BYTES bytes is a bad record; the others group."""
        folder = tmp_path / "docs"
        folder.mkdir()
        (folder / "a.txt").write_text(FIRST, encoding="utf-8")
        with (folder / "b.txt").open("wb") as fh:
            fh.truncate(MAX_TXT_BYTES + 1)  # sparse: no disk taken
        (folder / "c.txt").write_text(LAST, encoding="utf-8")
        code, out, err = run("dedup", folder)
        assert code == 0, err
        assert f"b.txt: the file has more than {MAX_TXT_BYTES} bytes" in err
        assert len(out.splitlines()) == 3
