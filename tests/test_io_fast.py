"""``dedup`` input through the optional speedups (orjson, isal) means what it meant without."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from nshash.cli import io as nio
from nshash.cli import main

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"

#: Lines where orjson and json could disagree: integers past 64 bits, what only json accepts
#: (NaN, infinities, lone surrogates, a byte-order mark), duplicate keys, non-objects.
LINES = [
    b'{"text": "a", "id": 12345678901234567890123}',
    b'{"text": "a", "id": 7, "extra": 123456789012345678901234567890}',
    b'{"text": "a", "x": NaN, "y": 1e400}',
    b'{"text": "\\ud800 lone", "title": "\\udfff"}',
    b'\xef\xbb\xbf{"text": "bom"}',
    b'{"text": "a", "text": "b"}',
    b"[1, 2, 3]",
    b'"just a string"',
    b'{"text": "a", "similar_id": 123456789012345678901234567890}',
    b'{"text": "\xe4\xb8\xad\xe6\x96\x87", "id": "x", "n": 0.1}',
]


class TestLoads:
    @pytest.mark.parametrize("line", LINES)
    def test_same_record_as_json(self, line: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every line prepares to what it prepares to with json alone (or the same error)."""
        preparer = nio.Preparer(nio.Fields(), ("similar_id", "duplicate"))
        fast = preparer.run([line])
        monkeypatch.setattr(nio, "_orjson", None)
        assert repr(fast) == repr(preparer.run([line]))

    def test_orjson_is_used(self) -> None:
        """Where orjson is installed, plain records go through it."""
        pytest.importorskip("orjson")
        assert nio._orjson is not None
        assert nio._loads(b'{"text": "a", "id": 3}', "id", ()) == {"text": "a", "id": 3}


class TestGzip:
    def test_reads_what_gzip_reads(self, tmp_path: Path) -> None:
        """The gzip reader in use (isal's where installed) gives the standard bytes."""
        data = ARTICLES.read_bytes() * 50
        path = tmp_path / "a.jsonl.gz"
        path.write_bytes(gzip.compress(data))
        with open(path, "rb") as f:
            assert nio._gzip_file(f).read() == data

    def test_damaged_gzip_is_one_error_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A .gz whose deflate data is damaged fails with one ``Error:`` line, exit 1."""
        good = gzip.compress(ARTICLES.read_bytes() * 20)
        path = tmp_path / "bad.jsonl.gz"
        path.write_bytes(good[:10] + b"x" * 40 + good[50:])
        code = main(["dedup", str(path), "--jobs", "1"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1
        assert err[-1].startswith("Error: ") and "gzip data is damaged" in err[-1]

    def test_dedup_of_gzip_matches_plain(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The same records, gzipped or not, get the same output."""
        plain = tmp_path / "a.jsonl"
        plain.write_bytes(ARTICLES.read_bytes())
        packed = tmp_path / "b.jsonl.gz"
        packed.write_bytes(gzip.compress(ARTICLES.read_bytes()))
        outs = []
        for path in (plain, packed):
            assert main(["dedup", str(path), "--jobs", "1"]) == 0
            outs.append(capsys.readouterr().out)
        assert outs[0] == outs[1] and outs[0]
