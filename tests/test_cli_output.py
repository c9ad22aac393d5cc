"""The command line's output never surprises: formats follow -o, binary refuses a terminal,
a reader that goes away ends the run quietly, and --help reads the same for every command."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nshash.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"


@pytest.fixture
def parquet_file(tmp_path: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in ARTICLES.read_text("utf-8").splitlines()]
    path = tmp_path / "articles.parquet"
    pq.write_table(pa.Table.from_pylist(rows * 400), path)
    return path


class TestOutputFormat:
    def test_parquet_into_a_jsonl_name_is_refused(
        self, parquet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Parquet input with ``-o out.jsonl`` is one Error: line, and no file is written."""
        out = tmp_path / "out.jsonl"
        assert main(["dedup", str(parquet_file), "-o", str(out)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("Error: Parquet input is written back as Parquet")
        assert "names a JSONL file" in err and err.count("\n") == 1
        assert not out.exists()

    def test_jsonl_into_a_parquet_name_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """JSONL input with ``-o out.parquet`` is refused the same way."""
        assert main(["dedup", str(ARTICLES), "-o", str(tmp_path / "out.parquet")]) == 1
        assert "names a Parquet file" in capsys.readouterr().err

    def test_matching_and_neutral_names_are_written(self, tmp_path: Path) -> None:
        """A name that says the input's format, or no format, is written as before."""
        for name in ("out.jsonl", "out.jsonl.gz", "out.txt"):
            assert main(["dedup", str(ARTICLES), "-q", "-o", str(tmp_path / name)]) == 0
            assert (tmp_path / name).stat().st_size > 0

    def test_parquet_refuses_a_terminal(
        self,
        parquet_file: Path,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Without -o, Parquet bytes are not sent to a terminal."""
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
        assert main(["dedup", str(parquet_file)]) == 1
        err = capsys.readouterr().err
        assert "Parquet output is binary and stdout is a terminal" in err

    def test_parquet_into_head_ends_quietly(self, parquet_file: Path) -> None:
        """Piped into a reader that stops early, a Parquet run ends without a traceback."""
        run = subprocess.run(
            f"{sys.executable} -m nshash dedup {parquet_file} -q | head -c 100 > /dev/null",
            shell=True,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert "Traceback" not in run.stderr and "Error" not in run.stderr, run.stderr


class TestHelp:
    def subparsers(self) -> dict[str, argparse.ArgumentParser]:
        parser = build_parser()
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(action.choices)

    def test_every_command_has_a_description(self) -> None:
        """``nshash COMMAND --help`` says what the command does, for every command."""
        for name, parser in self.subparsers().items():
            assert parser.description and len(parser.description) > 30, name

    def test_metavars_are_one_vocabulary(self) -> None:
        """Options that take a value name it from one small set (N for counts, URL, ...)."""
        allowed = {"N", "URL", "NAME", "WINDOW", "X", "OUT", "ADDR", "INPUT", "FILE_A", "FILE_B"}
        allowed |= {"TERM", "SITE", "WHEN", "ZONE", "STATE", "FILE"}
        seen = set()
        for name, parser in self.subparsers().items():
            for action in parser._actions:
                if action.option_strings and action.nargs != 0 and action.choices is None:
                    if isinstance(action, argparse.BooleanOptionalAction):
                        continue
                    metavar = action.metavar or action.dest.upper()
                    seen.add(metavar)
                    assert metavar in allowed, (name, action.option_strings, metavar)
        assert {"N", "URL"} <= seen
