"""``dedup`` input: encodings (GBK, Big5, UTF-16, detected or given) and the progress bar."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from nshash.cli.io import sniff_encoding
from tests.conftest import Run

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"




def traditional_articles() -> str:
    """The example articles in traditional script (Big5 has no simplified characters)."""
    import opencc

    to_traditional = opencc.OpenCC("s2t")
    return to_traditional.convert(ARTICLES.read_text("utf-8"))


def encodable(text: str, codec: str) -> str:
    """*text* without the characters *codec* cannot write (the fixture's rare symbols)."""
    return text.encode(codec, "ignore").decode(codec)


class TestSniff:
    """sniff_encoding tells UTF-8, UTF-16, GBK and Big5 apart from a sample."""

    @pytest.mark.parametrize(
        ("codec", "expected"),
        [
            ("utf-8", "utf-8"),
            ("utf-16", "utf-16"),
            ("utf-16-le", "utf-16-le"),
            ("gbk", "gb18030"),
            ("big5", "big5hkscs"),
        ],
    )
    def test_articles(self, codec: str, expected: str) -> None:
        """The example articles, written in each encoding, are detected as it."""
        text = traditional_articles() if codec == "big5" else ARTICLES.read_text("utf-8")
        sample = encodable(text, codec).encode(codec)[:65536]
        assert sniff_encoding(sample) == expected

    def test_real_traditional_news(self) -> None:
        """Hong Kong news in Big5 is Big5, and the same in GBK is GBK."""
        text = traditional_articles()
        assert sniff_encoding(encodable(text, "gbk").encode("gbk")) == "gb18030"
        assert sniff_encoding(encodable(text, "big5").encode("big5")) == "big5hkscs"


class TestEncodings:
    """The output of a GBK, Big5 or UTF-16 input equals that of the same input in UTF-8."""

    @pytest.mark.parametrize("codec", ["gbk", "big5", "utf-16"])
    @pytest.mark.parametrize("given", [False, True], ids=["detected", "given"])
    def test_jsonl(self, run: Run, tmp_path: Path, codec: str, given: bool) -> None:
        """Records are read in their encoding and written as UTF-8, grouped alike."""
        text = encodable(traditional_articles(), "big5")
        (tmp_path / "utf8.jsonl").write_text(text, encoding="utf-8")
        (tmp_path / "other.jsonl").write_bytes(text.encode(codec))
        code, expected, _ = run("dedup", tmp_path / "utf8.jsonl", "-q")
        assert code == 0
        extra = ["--encoding", codec] if given else []
        code, out, err = run("dedup", tmp_path / "other.jsonl", *extra, "-q")
        assert (code, err) == (0, "")
        assert out == expected

    def test_csv_gbk(self, run: Run, tmp_path: Path) -> None:
        """A GBK CSV comes out as the same rows in UTF-8."""
        rows = [json.loads(line) for line in ARTICLES.read_text("utf-8").splitlines()]
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["id", "content"])
        writer.writerows([r["id"], encodable(r["content"], "gbk")] for r in rows)
        (tmp_path / "a.csv").write_bytes(buf.getvalue().encode("gbk"))
        code, out, _ = run("dedup", tmp_path / "a.csv", "-q")
        assert code == 0
        got = list(csv.reader(io.StringIO(out)))
        assert [r[:2] for r in got[1:]] == [[r["id"], encodable(r["content"], "gbk")] for r in rows]
        assert got[1][2] == "1"

    def test_txt_big5(self, run: Run, tmp_path: Path) -> None:
        """A Big5 .txt file is read as Big5."""
        body = encodable(traditional_articles(), "big5").splitlines()[0]
        (tmp_path / "a.txt").write_bytes(json.loads(body)["content"].encode("big5"))
        code, out, _ = run("dedup", tmp_path, "-q")
        assert (
            code == 0
            and json.loads(out)["title"]
            == "江城地鐵5號線今天上午正式開通運營，全長二十八公里，共設二十二座車站。"
        )

    def test_unknown_encoding(self, run: Run) -> None:
        """An unknown --encoding is one error line, exit 1."""
        code, out, err = run("dedup", ARTICLES, "--encoding", "klingon")
        assert (code, out) == (1, "") and err == "Error: Unknown encoding 'klingon'\n"

    @pytest.mark.parametrize("codec", ["rot13", "hex", "base64"])
    def test_a_codec_of_bytes_is_not_an_encoding(self, run: Run, codec: str) -> None:
        """A codec that is not a text encoding is one error line too (it was a traceback)."""
        code, out, err = run("dedup", ARTICLES, "--encoding", codec)
        assert (code, out) == (1, "") and err.startswith("Error: ") and err.count("\n") == 1
        assert "is not a text encoding" in err

    def test_undetectable(self, run: Run, tmp_path: Path) -> None:
        """Bytes in no known encoding are read as UTF-8 and reported as not valid UTF-8."""
        path = tmp_path / "x.jsonl"
        path.write_bytes(b'{"content": "\x80\x80\x80\xff\xfe\x81"}\n')
        code, _, err = run("dedup", path)
        assert code == 1 and "line 1: the line is not valid UTF-8" in err


class TestProgress:
    """The progress bar counts the bytes read, so it has a total, a percentage and an ETA."""

    def test_bytes_total_and_eta(
        self, run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """On a file the bar shows the file's size as its total and the documents done."""
        from nshash.cli import progress

        monkeypatch.setattr(progress._Progress, "MININTERVAL", 0)  # a quick run still draws frames
        lines = ARTICLES.read_text("utf-8").splitlines()
        path = tmp_path / "many.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for i in range(60):
                for line in lines:
                    record = json.loads(line)
                    record["id"] = f"{record['id']}-{i}"
                    record["content"] += f" 第{i}次转载。"
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        from tqdm import tqdm

        total = tqdm.format_sizeof(path.stat().st_size, divisor=1024)
        code, _, err = run("dedup", path, "--progress", "-o", tmp_path / "out.jsonl")
        assert code == 0
        # A frame such as " 59%|#####9    | 704k/1.16M [00:00<00:00, 2.64MB/s, 1,024 docs]".
        frame = re.compile(
            rf"\d+%\|.*\| [\d.]+[kM]?/{re.escape(total)} \[\d\d:\d\d<\d\d:\d\d,"
            r" .*B/s, [\d,]+ docs\]"
        )
        assert any(frame.search(f) for f in err.split("\r")), err[:500]

    def test_stdin_counts_records(
        self, run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Without a size (stdin) the bar counts records."""
        import sys

        data = ARTICLES.read_bytes()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
        code, _, err = run("dedup", "-", "--progress", "-o", tmp_path / "o.jsonl")
        assert code == 0 and "doc" in err
