"""nshash.spark: the batch job in Spark's local mode (few, short: one session for the file).

Skipped when pyspark or Java is missing, except under CI (``CI=true``), where ``.ci/run``
installs both and a skip would hide a broken job.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nshash import NSHash
from nshash.cli import main
from nshash.errors import ConfigError, StateError

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _need(ok: bool, reason: str) -> None:
    if not ok:
        if _CI:
            pytest.fail(f"{reason} (CI runs the Spark tests: .ci/run installs it)")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] session for the module."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _need(False, "pyspark is not installed: pip install 'nshash[spark]'")
    _need(shutil.which("java") is not None, "java is not installed")
    from nshash.spark import session as start

    session = start("local[2]", app="nshash-tests")
    yield session
    session.stop()


def _story(rng: random.Random, words: list[str], sentences: int = 8) -> list[str]:
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(10, 16))).capitalize() + "."
        for _ in range(sentences)
    ]


def _corpus() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Documents ``(id, text)`` and each one's story.

    A hot story in 12 edited copies, three stories in 3 copies, 30 single articles, every
    one with one of two sites' long footers (the boilerplate trap), and a digest page quoting
    stories ``s1`` and ``s2`` whole.
    """
    rng = random.Random(7)
    words = [
        "".join(rng.choice("bcdfghklmnprstvz") for _ in range(rng.randint(4, 8)))
        for _ in range(3000)
    ]
    footers = [
        "Copyright Example Media Group. All rights reserved. This material may not be"
        " published, broadcast, rewritten or redistributed without written permission.",
        "Disclaimer: the views expressed in this article are the author's own and do not"
        " necessarily reflect the editorial policy of this website or its partners.",
    ]
    docs: list[tuple[str, str]] = []
    story: dict[str, str] = {}
    bodies: dict[str, list[str]] = {}

    def add(doc_id: str, sentences: list[str], name: str) -> None:
        footer = footers[len(docs) % 2]
        docs.append((doc_id, "\n".join([*sentences, footer])))
        story[doc_id] = name

    hot = _story(rng, words, 10)
    bodies["hot"] = hot
    for i in range(12):
        copy = list(hot)
        del copy[rng.randrange(len(copy))]  # a dropped sentence
        if i % 3 == 0:
            copy = copy[: 6 + i % 4]  # truncated
        if i % 4 == 1:
            copy.insert(0, "Breaking: " + " ".join(rng.choice(words) for _ in range(8)) + ".")
        add(f"hot-{i:02d}", copy, "hot")
    for s in range(3):
        body = _story(rng, words)
        bodies[f"s{s}"] = body
        for i in range(3):
            add(f"s{s}-{i}", body if i == 0 else body[:-1], f"s{s}")
    for i in range(30):
        add(f"single-{i:02d}", _story(rng, words, rng.randint(3, 8)), f"single-{i:02d}")
    add("digest", ["Today's top stories."] + bodies["s1"] + bodies["s2"], "digest")
    return docs, story


@pytest.fixture(scope="module")
def corpus() -> tuple[list[tuple[str, str]], dict[str, str]]:
    return _corpus()


@pytest.fixture(scope="module")
def grouped(spark: Any, corpus: tuple[list[tuple[str, str]], dict[str, str]]) -> dict[str, Any]:
    """The corpus (plus an empty text) through :func:`nshash.spark.dedup`, as id -> row."""
    from nshash.spark import dedup

    docs, _ = corpus
    rows = [*docs, ("empty", " ... "), ("hot-copy", docs[0][1])]
    df = spark.createDataFrame(rows, "id string, text string")
    return {r["id"]: r for r in dedup(df).collect()}


class TestDedup:
    def test_columns_and_rows(self, grouped: dict[str, Any], corpus: Any) -> None:
        """Every row comes back once, with similar_id and duplicate added."""
        docs, _ = corpus
        assert len(grouped) == len(docs) + 2
        row = grouped["hot-00"]
        assert set(row.asDict()) == {"id", "text", "similar_id", "duplicate"}

    def test_hot_story_one_group_with_an_integer_id(self, grouped: dict[str, Any]) -> None:
        """All copies of a hot story share one integer id; its smallest document id is first."""
        ids = {grouped[f"hot-{i:02d}"]["similar_id"] for i in range(12)}
        assert len(ids) == 1
        assert all(type(i) is int for i in ids)
        assert grouped["hot-00"]["duplicate"] is False
        assert grouped["hot-05"]["duplicate"] is True
        assert grouped["hot-copy"]["similar_id"] in ids  # identical text

    def test_ids_number_groups_in_id_order(self, grouped: dict[str, Any]) -> None:
        """Groups are numbered 1, 2, ... in the order of their first document ids."""
        firsts = sorted((k, r["similar_id"]) for k, r in grouped.items() if r["duplicate"] is False)
        assert [sid for _, sid in firsts] == list(range(1, len(firsts) + 1))

    def test_footers_do_not_merge_stories(self, grouped: dict[str, Any], corpus: Any) -> None:
        """Articles that share only a site footer stay apart; reposts share their story's id."""
        _, story = corpus
        by_story: dict[str, set[Any]] = {}
        for doc_id, name in story.items():
            if doc_id != "digest":
                by_story.setdefault(name, set()).add(grouped[doc_id]["similar_id"])
        assert all(len(ids) == 1 for ids in by_story.values()), by_story
        assert len({next(iter(ids)) for ids in by_story.values()}) == len(by_story)

    def test_digest_does_not_merge_two_stories(self, grouped: dict[str, Any]) -> None:
        """A digest page quoting two stories joins at most one of them."""
        assert grouped["s1-0"]["similar_id"] != grouped["s2-0"]["similar_id"]
        stories = {grouped[k]["similar_id"] for k in ("s1-0", "s2-0")}
        assert grouped["digest"]["similar_id"] in stories or not grouped["digest"]["duplicate"]

    def test_empty_text_gets_no_group(self, grouped: dict[str, Any]) -> None:
        """A text with no letters or digits gets similar_id and duplicate null."""
        assert grouped["empty"]["similar_id"] is None
        assert grouped["empty"]["duplicate"] is None

    def test_order_does_not_matter(self, spark: Any, grouped: dict[str, Any], corpus: Any) -> None:
        """Shuffled input over more partitions gives the same groups."""
        from nshash.spark import dedup

        docs, _ = corpus
        rows = [*docs, ("empty", " ... "), ("hot-copy", docs[0][1])]
        random.Random(3).shuffle(rows)
        df = spark.createDataFrame(rows, "id string, text string").repartition(3)
        again = {r["id"]: r["similar_id"] for r in dedup(df).collect()}
        assert again == {k: r["similar_id"] for k, r in grouped.items()}

    def test_bad_arguments(self, spark: Any) -> None:
        """A missing column or a bad option is a ConfigError."""
        from nshash.spark import dedup

        df = spark.createDataFrame([("a", "x")], "id string, body string")
        with pytest.raises(ConfigError, match="no column 'text'"):
            dedup(df)
        with pytest.raises(ConfigError, match="Unknown option"):
            dedup(df, "body", nonsense=1)
        with pytest.raises(ConfigError, match="theta"):
            dedup(df, "body", theta=2.0)


class TestCli:
    def test_engine_spark_jsonl_equals_local(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--engine spark -o out.jsonl`` writes one file, byte for byte the local engine's."""
        docs, _ = corpus
        # The digest page joins one of the two stories it quotes: which one depends on the
        # order the online engine sees them in, so it is left out of this comparison.
        shuffled = [d for d in docs if d[0] != "digest"]
        random.Random(5).shuffle(shuffled)
        records: list[dict[str, Any]] = [{"id": i, "text": t, "site": "x"} for i, t in shuffled]
        records.insert(3, {"id": "bad", "text": 5})
        records.insert(9, {"id": "empty", "text": " ... "})
        src = tmp_path / "in.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
        out, local = tmp_path / "out.jsonl", tmp_path / "local.jsonl"
        assert main(["dedup", str(src), "--engine", "spark", "-o", str(out), "-q"]) == 0
        assert out.is_file()
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".nshash-parts")]
        assert main(["dedup", str(src), "-o", str(local), "-q"]) == 0
        assert out.read_bytes() == local.read_bytes()
        rows = [json.loads(line) for line in out.open()]
        got = {r["id"]: r["similar_id"] for r in rows}
        assert len({got[f"hot-{i:02d}"] for i in range(12)}) == 1
        assert rows[3]["similar_id"] is None and rows[3]["error"].startswith("line 4: ")
        capsys.readouterr()

    def test_engine_spark_parts_and_parquet(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--spark-parts`` writes a folder of part files; ``.parquet`` one Parquet file."""
        import pyarrow.parquet as pq

        docs, _ = corpus
        src = tmp_path / "in.jsonl"
        src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in docs), "utf-8")
        folder = tmp_path / "parts.jsonl"
        args = ["dedup", str(src), "--engine", "spark", "-q"]
        assert main([*args, "-o", str(folder), "--spark-parts"]) == 0
        assert folder.is_dir()
        rows = [json.loads(line) for f in sorted(folder.glob("part-*")) for line in f.open()]
        assert [r["id"] for r in rows] == [i for i, _ in docs]
        table = pq.read_table(_parquet(src, tmp_path))
        pq_out = tmp_path / "out.parquet"
        assert (
            main(
                [
                    "dedup",
                    str(tmp_path / "in.parquet"),
                    "--engine",
                    "spark",
                    "-q",
                    "-o",
                    str(pq_out),
                ]
            )
            == 0
        )
        assert pq_out.is_file()
        got = pq.read_table(pq_out).to_pylist()
        assert [r["id"] for r in got] == table.column("id").to_pylist()
        assert [r["similar_id"] for r in got] == [r["similar_id"] for r in rows]
        capsys.readouterr()

    def test_engine_spark_errors(
        self, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A missing input is one Error line; a format Spark does not read is bad usage."""
        code = main(["dedup", str(tmp_path / "no.jsonl"), "--engine", "spark", "-o", "x"])
        assert code == 1
        assert capsys.readouterr().err.startswith("Error: ")
        (tmp_path / "a.csv").write_text("id,text\n1,x\n", "utf-8")
        code = main(["dedup", str(tmp_path / "a.csv"), "--engine", "spark", "-o", "x"])
        assert code == 2
        capsys.readouterr()
        # A .gz file cut short: the Java error that stopped the job, not Py4J's wrapper.
        whole = gzip.compress(
            "".join(
                json.dumps({"id": i, "text": f"story {i} " * 400}) + "\n" for i in range(40)
            ).encode("utf-8")
        )
        (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
        out = tmp_path / "cut-out.jsonl"
        code = main(["dedup", str(tmp_path / "cut.jsonl.gz"), "--engine", "spark", "-o", str(out)])
        assert code == 1 and not out.exists()
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            "Error: the Spark job failed: java.io.EOFException: Unexpected end of input stream"
        ]

    def test_an_existing_output_is_refused_before_spark_starts(self, tmp_path: Path) -> None:
        """An -o that exists is one Error line at once: no JVM starts (none writes a class
        archive into the cache folder, none prints to stderr)."""
        _need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
        src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        src.write_text(json.dumps({"id": 1, "text": "Hello there, world."}) + "\n", "utf-8")
        out.write_text("kept\n", "utf-8")
        cache = tmp_path / "cache"
        command = ["dedup", str(src), "--engine", "spark", "-o", str(out)]
        done = subprocess.run(
            [sys.executable, "-m", "nshash", *command],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        )
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            f"Error: {str(out)!r} exists; remove it or choose another -o"
        ]
        assert out.read_text("utf-8") == "kept\n"
        assert not (cache / "nshash").exists() or not list((cache / "nshash").iterdir())

    @pytest.mark.slow
    def test_ctrl_c_is_one_line(self, tmp_path: Path) -> None:
        """Ctrl-C during a job: "Interrupted" and exit status 130, no traceback (py4j's
        report of the broken call stays quiet), no output file, and the run's class archive
        is marked spoiled (its JVM stopped early)."""
        import signal
        import time

        _need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
        _need(shutil.which("java") is not None, "java is not installed")
        src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        rng = random.Random(3)
        words = [f"w{i}" for i in range(3000)]
        src.write_text(
            "".join(
                json.dumps({"id": i, "text": " ".join(rng.choices(words, k=300))}) + "\n"
                for i in range(3000)
            ),
            "utf-8",
        )
        cache = tmp_path / "cache"
        proc = subprocess.Popen(
            [sys.executable, "-m", "nshash", "dedup", str(src), "--engine", "spark"]
            + ["-o", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        )
        deadline = time.monotonic() + 120
        while not list(cache.glob("nshash/*.tmp.pid")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)  # the session is up once its JVM's archive is claimed
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        said = [
            line for line in err.splitlines() if not line.startswith("WARNING: Using incubator")
        ]
        assert said == ["Interrupted"]
        assert not out.exists()
        (pid,) = cache.glob("nshash/*.tmp.pid")
        assert pid.read_text().split()[1:] == ["spoiled"]

    def test_no_java_is_one_error_line(self, tmp_path: Path) -> None:
        """Without a Java runtime (a JAVA_HOME that has none, or none set and none on the
        PATH), the command says so in one Error line before pyspark tries to start one."""
        _need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
        src = tmp_path / "in.jsonl"
        src.write_text(json.dumps({"id": 1, "text": "Hello there, world."}) + "\n", "utf-8")
        command = ["dedup", str(src), "--engine", "spark", "-o", str(tmp_path / "out.jsonl")]
        bare = tmp_path / "bin"  # a PATH with this Python and the shell, and no java
        bare.mkdir()
        for tool in ("bash", "sh", "env", "uname", "dirname", "ps"):
            found = shutil.which(tool)
            if found:
                (bare / tool).symlink_to(found)
        cases = [
            ({"JAVA_HOME": str(tmp_path / "nojava")}, "which has no bin/java"),
            ({"PATH": str(bare)}, "no java on the PATH"),
        ]
        for change, says in cases:
            env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
            env.update(change)
            done = subprocess.run(
                [sys.executable, "-m", "nshash", *command],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            assert done.returncode == 1
            lines = done.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("Error: Spark needs a Java runtime")
            assert says in lines[0]
            assert not (tmp_path / "out.jsonl").exists()


class TestSmallInput:
    def test_small_is_a_local_input_up_to_the_limit(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A file or folder on this disk up to SMALL_INPUT bytes is small; more, or a path
        that is not here, is not."""
        from nshash import spark as nspark

        monkeypatch.setattr(nspark, "SMALL_INPUT", 100)
        (tmp_path / "a.jsonl").write_bytes(b"x" * 100)
        (tmp_path / "b.jsonl").write_bytes(b"x" * 101)
        parts = tmp_path / "parts.parquet"
        (parts / "sub").mkdir(parents=True)
        (parts / "part-0.parquet").write_bytes(b"x" * 60)
        assert nspark.is_small(str(tmp_path / "a.jsonl"))
        assert not nspark.is_small(str(tmp_path / "b.jsonl"))
        assert nspark.is_small(str(parts))
        (parts / "sub" / "part-1.parquet").write_bytes(b"x" * 60)
        assert not nspark.is_small(str(parts))
        assert not nspark.is_small(str(tmp_path / "missing.jsonl"))
        assert not nspark.is_small("hdfs://namenode/crawl.jsonl")

    def test_small_session_settings(self) -> None:
        """A small input's session runs without adaptive execution or generated code."""
        from nshash import spark as nspark

        assert nspark.SMALL_SQL["spark.sql.adaptive.enabled"] == "false"
        assert nspark.SMALL_SQL["spark.sql.codegen.factoryMode"] == "NO_CODEGEN"


class TestClassArchive:
    """The small driver's class archive in the cache folder (no JVM is started here)."""

    @pytest.fixture
    def folder(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        _need(importlib.util.find_spec("pyspark") is not None, "pyspark is not installed")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        return tmp_path / "nshash"

    def _stem(self, folder: Path) -> Path:
        from nshash import spark as nspark

        return folder / f"spark-{nspark._archive_key(nspark.SMALL_JVM, {})}"

    def test_none_yet_this_run_writes_it(self, folder: Path) -> None:
        """With no archive, the JVM is told to write one to a file of this process's own."""
        from nshash import spark as nspark

        options, writer = nspark._class_archive(nspark.SMALL_JVM, {})
        writing = f"{self._stem(folder)}.{os.getpid()}.tmp"
        assert f"-XX:ArchiveClassesAtExit={writing}" in options
        assert writer == writing + ".pid"

    def test_a_whole_archive_is_named_then_mapped(self, folder: Path) -> None:
        """An archive whose JVM has exited and that is whole is named with its size and
        mapped; one of another size than its name is removed."""
        from nshash import spark as nspark

        nspark._class_archive(nspark.SMALL_JVM, {})  # makes the folder
        stem = self._stem(folder)
        Path(f"{stem}.1.tmp").write_bytes(nspark._ARCHIVE_MAGIC + b"x" * 96)
        Path(f"{stem}.1.tmp.pid").write_text(str(_dead_pid()))
        options, writer = nspark._class_archive(nspark.SMALL_JVM, {})
        assert options.startswith(f"-XX:SharedArchiveFile={stem}-100.jsa ") and not writer
        assert sorted(p.name for p in folder.iterdir()) == [f"{stem.name}-100.jsa"]
        assert nspark._class_archive(nspark.SMALL_JVM, {})[0] == options
        Path(f"{stem}-100.jsa").write_bytes(b"cut")
        options, writer = nspark._class_archive(nspark.SMALL_JVM, {})
        assert "ArchiveClassesAtExit" in options and writer
        assert not list(folder.glob("*.jsa"))

    def test_a_cut_archive_is_dropped_and_a_busy_one_waited_for(self, folder: Path) -> None:
        """An archive cut short (its JVM killed as it wrote) is removed; while a JVM writes
        one, a run goes without and writes none."""
        from nshash import spark as nspark

        nspark._class_archive(nspark.SMALL_JVM, {})
        stem = self._stem(folder)
        Path(f"{stem}.1.tmp").write_bytes(b"\0" * 100)
        Path(f"{stem}.1.tmp.pid").write_text(str(_dead_pid()))
        options, writer = nspark._class_archive(nspark.SMALL_JVM, {})
        assert "ArchiveClassesAtExit" in options and writer
        assert not Path(f"{stem}.1.tmp").exists()
        Path(f"{stem}.2.tmp.pid").write_text(str(os.getpid()))
        assert nspark._class_archive(nspark.SMALL_JVM, {}) == ("", "")

    def test_a_failed_run_archive_is_dropped(
        self, folder: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The archive of a run whose job failed (spoil_class_archive) is removed, whole as
        it is, and the next run writes one again."""
        from nshash import spark as nspark

        nspark._class_archive(nspark.SMALL_JVM, {})
        stem = self._stem(folder)
        writer = Path(f"{stem}.1.tmp.pid")
        Path(f"{stem}.1.tmp").write_bytes(nspark._ARCHIVE_MAGIC + b"x" * 96)
        writer.write_text(str(_dead_pid()))
        monkeypatch.setattr(nspark, "_archive_writer", str(writer))
        nspark.spoil_class_archive()
        assert writer.read_text().split()[1:] == [nspark._SPOILED]
        assert nspark._archive_writer == ""
        nspark.spoil_class_archive()  # this process writes none now: nothing changes
        assert writer.read_text().split()[1:] == [nspark._SPOILED]
        options, new = nspark._class_archive(nspark.SMALL_JVM, {})
        assert "ArchiveClassesAtExit" in options and new
        assert not list(folder.glob("*.jsa")) and not Path(f"{stem}.1.tmp").exists()
        assert not writer.exists()


def _dead_pid() -> int:
    """The id of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _parquet(src: Path, tmp_path: Path) -> str:
    """Write *src*'s records as ``in.parquet`` beside it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in src.open()]
    path = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def _halves_docs(corpus: Any) -> list[tuple[str, str]]:
    """The corpus in a fixed shuffle (so that stories span the two halves), without the
    digest page: a digest in the stored half carries both stories it quotes into its stored
    group, which then draws the second half's copies of either (as the online store does in
    that order), while one run over both keeps the two stories apart."""
    docs = [d for d in corpus[0] if d[0] != "digest"]
    random.Random(5).shuffle(docs)
    return docs


def _pairs(labels: dict[str, Any]) -> set[tuple[str, str]]:
    """The pairs of documents that share a label."""
    groups: dict[Any, list[str]] = {}
    for doc_id, label in labels.items():
        if label is not None:
            groups.setdefault(label, []).append(doc_id)
    return {(a, b) for ids in groups.values() for a in ids for b in ids if a < b}


class TestAgainst:
    def test_second_half_against_first_equals_one_run(
        self, spark: Any, grouped: dict[str, Any], corpus: Any
    ) -> None:
        """The second half grouped against the first half's result gives one run's pairs,
        stored ids where a new document joins a stored group and new ids after the largest."""
        from nshash.spark import dedup

        docs = _halves_docs(corpus)
        half = len(docs) // 2
        first = dedup(spark.createDataFrame(docs[:half], "id string, text string")).cache()
        second = dedup(
            spark.createDataFrame(docs[half:], "id string, text string"), against=first
        ).collect()
        stored = {r["id"]: r["similar_id"] for r in first.collect()}
        labels = {**stored, **{r["id"]: r["similar_id"] for r in second}}
        assert len(labels) == len(docs)
        one = {k: r["similar_id"] for k, r in grouped.items() if k not in ("empty", "hot-copy")}
        # The digest page joins one of the two stories it quotes, or none: which depends on
        # the order of the nodes, which the stored half changes. Every other pair is equal.
        assert {p for p in _pairs(labels) if "digest" not in p} == {
            p for p in _pairs(one) if "digest" not in p
        }
        top = max(stored.values())
        joined = [r for r in second if r["similar_id"] <= top]
        assert joined and all(r["duplicate"] for r in joined)
        assert {r["similar_id"] for r in joined} <= set(stored.values())
        fresh = sorted({r["similar_id"] for r in second if r["similar_id"] > top})
        assert fresh == list(range(top + 1, top + 1 + len(fresh)))

    def test_new_copies_join_a_wide_stored_group_before_each_other(self, spark: Any) -> None:
        """Two new copies of a stored story join its group, though they share more with each
        other than with the group's sketch (the union of many edited copies, cut at its cap),
        as one run over all of them puts them together."""
        from nshash.spark import dedup

        rng = random.Random(3)
        words = [
            "".join(rng.choice("bcdfghklmnprstvz") for _ in range(rng.randint(4, 8)))
            for _ in range(3000)
        ]
        body = _story(rng, words, 10)
        stored = []
        for i in range(10):  # each copy drops a sentence and adds five of its own
            copy = list(body)
            del copy[rng.randrange(len(copy))]
            stored.append((f"old-{i}", "\n".join(copy + _story(rng, words, 5))))
        update = _story(rng, words, 3)
        new = [(f"new-{i}", "\n".join(body[i:] + update)) for i in range(2)]
        schema = "id string, text string"
        one = {
            r["id"]: r["similar_id"]
            for r in dedup(spark.createDataFrame(stored + new, schema)).collect()
        }
        assert len(set(one.values())) == 1
        first = dedup(spark.createDataFrame(stored, schema)).cache()
        gid = {r["similar_id"] for r in first.collect()}
        got = dedup(spark.createDataFrame(new, schema), against=first).collect()
        first.unpersist()
        assert len(gid) == 1
        assert {r["similar_id"] for r in got} == gid


def _halves(corpus: Any, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The corpus shuffled (so that stories span the halves) as all, first and second
    halves in JSONL."""
    docs = _halves_docs(corpus)
    half = len(docs) // 2
    paths = (tmp_path / "all.jsonl", tmp_path / "first.jsonl", tmp_path / "second.jsonl")
    for path, part in zip(paths, (docs, docs[:half], docs[half:]), strict=True):
        path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in part), "utf-8")
    return paths


def _ids(path: Path) -> dict[str, Any]:
    return {r["id"]: r["similar_id"] for r in map(json.loads, path.open(encoding="utf-8"))}


def _same_pairs(labels: dict[str, Any], one: dict[str, Any]) -> None:
    """The pairs of *labels* are one run's, the digest page's aside (it joins one of the two
    stories it quotes, or none, depending on what it sees first)."""
    assert set(labels) == set(one)
    assert {p for p in _pairs(labels) if "digest" not in p} == {
        p for p in _pairs(one) if "digest" not in p
    }


def _fresh_after(new: dict[str, Any], stored: set[int], top: int) -> None:
    """New documents have a stored id or one after *top*, numbered on from it."""
    joined = {v for v in new.values() if v <= top}
    assert joined and joined <= stored
    fresh = sorted({v for v in new.values() if v > top})
    assert fresh == list(range(top + 1, top + 1 + len(fresh)))


@pytest.mark.slow
class TestAgainstFiles:
    def test_against_a_previous_spark_output(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--engine spark --against OUT`` (yesterday's output): the second half gets the
        stored ids where it belongs, and the two halves' pairs are one run's."""
        every, first, second = _halves(corpus, tmp_path)
        run = ["--engine", "spark", "-q"]
        one, old, new = tmp_path / "one.jsonl", tmp_path / "old.jsonl", tmp_path / "new.jsonl"
        assert main(["dedup", str(every), *run, "-o", str(one)]) == 0
        assert main(["dedup", str(first), *run, "-o", str(old)]) == 0
        assert main(["dedup", str(second), *run, "--against", str(old), "-o", str(new)]) == 0
        stored, answers = _ids(old), _ids(new)
        assert list(answers) == [json.loads(line)["id"] for line in second.open()]
        _same_pairs({**stored, **answers}, _ids(one))
        _fresh_after(answers, set(stored.values()), max(stored.values()))
        capsys.readouterr()

    def test_against_a_store_export(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The first half into a saved store (the local engine), ``nshash groups --export``,
        then the second half through Spark in two batches, the first against the export, the
        second against the export and the first's output: the store's ids go on, new groups
        are numbered after the last id, and the pairs are one local run's."""
        every, first, second = _halves(corpus, tmp_path)
        url = f"sqlite://{tmp_path / 'news.db'}"
        one = tmp_path / "one.jsonl"
        assert main(["dedup", str(every), "-q", "-o", str(one)]) == 0
        assert main(["dedup", str(first), "--store", url, "-q", "-o", os.devnull]) == 0
        export = tmp_path / "groups.parquet"
        assert main(["groups", "--store", url, "--export", str(export)]) == 0
        # The second half comes in two batches: the later one against the export and the
        # earlier batch's output together.
        lines = second.read_text("utf-8").splitlines(keepends=True)
        day1, day2 = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
        day1.write_text("".join(lines[: len(lines) // 2]), "utf-8")
        day2.write_text("".join(lines[len(lines) // 2 :]), "utf-8")
        out1, out2 = tmp_path / "out1.jsonl", tmp_path / "out2.jsonl"
        run = ["--engine", "spark", "-q", "--against", str(export)]
        assert main(["dedup", str(day1), *run, "-o", str(out1)]) == 0
        assert main(["dedup", str(day2), *run, "--against", str(out1), "-o", str(out2)]) == 0
        import pyarrow.parquet as pq

        rows = pq.read_table(export).to_pylist()
        stored = {doc_id: r["similar_id"] for r in rows for doc_id in r["ids"]}
        first_day, second_day = _ids(out1), _ids(out2)
        _same_pairs({**stored, **first_day, **second_day}, _ids(one))
        with NSHash.open(url, readonly=True) as nsh:
            last = nsh.stats().last_id
        _fresh_after(first_day, set(stored.values()), last)
        top = max([last, *first_day.values()])
        fresh = {v for v in second_day.values() if v > top}
        assert fresh == set(range(top + 1, top + 1 + len(fresh)))
        assert {v for v in second_day.values() if v <= top} <= {
            *stored.values(),
            *first_day.values(),
        }
        capsys.readouterr()


@pytest.mark.slow
class TestExportChain:
    def test_each_run_exports_the_groups_for_the_next(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``--export-groups`` writes the groups after a run (the stored ones with the run's
        records joined in, and the new ones) as an export: day 2 is grouped against day 1's
        export alone, and the three days' pairs are one run's."""
        import pyarrow.parquet as pq

        from nshash.export import META_KEY

        every, first, second = _halves(corpus, tmp_path)
        lines = second.read_text("utf-8").splitlines(keepends=True)
        day1, day2 = tmp_path / "day1.jsonl", tmp_path / "day2.jsonl"
        day1.write_text("".join(lines[: len(lines) // 2]), "utf-8")
        day2.write_text("".join(lines[len(lines) // 2 :]), "utf-8")
        run = ["--engine", "spark", "-q"]
        one = tmp_path / "one.jsonl"
        out0, out1, out2 = (tmp_path / f"out{i}.jsonl" for i in range(3))
        s0, s1 = tmp_path / "s0.parquet", tmp_path / "s1.parquet"
        assert main(["dedup", str(every), *run, "-o", str(one)]) == 0
        assert main(["dedup", str(first), *run, "-o", str(out0), "--export-groups", str(s0)]) == 0
        args = ["dedup", str(day1), *run, "--against", str(s0), "--export-groups", str(s1)]
        assert main([*args, "-o", str(out1)]) == 0
        assert main(["dedup", str(day2), *run, "--against", str(s1), "-o", str(out2)]) == 0
        labels = {**_ids(out0), **_ids(out1), **_ids(out2)}
        _same_pairs(labels, _ids(one))
        table = pq.read_table(s1)
        rows = table.to_pylist()
        known = {**_ids(out0), **_ids(out1)}
        assert {i: r["similar_id"] for r in rows for i in r["ids"]} == known
        assert sum(r["size"] for r in rows) == len(known)
        assert all(r["exacts"] and r["sketch"] for r in rows)
        meta = json.loads(table.schema.metadata[META_KEY])
        assert meta["last_id"] == max(known.values()) and meta["narrow"] is False
        _fresh_after(_ids(out2), set(known.values()), max(known.values()))
        assert main([*args, "-o", str(tmp_path / "again.jsonl")]) == 1  # s1 exists
        assert "exists" in capsys.readouterr().err


@pytest.mark.slow
class TestAgainstParquet:
    def test_a_parquet_output_and_a_list_of_states(
        self, spark: Any, corpus: Any, tmp_path: Path
    ) -> None:
        """A previous result as a Parquet file answers as the same result as a DataFrame;
        a list of states (here the first half in two files) is one set of groups."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from nshash.spark import dedup

        docs = _halves_docs(corpus)
        half = len(docs) // 2
        schema = "id string, text string"
        first = dedup(spark.createDataFrame(docs[:half], schema)).collect()
        rows = [r.asDict() for r in first]
        whole, a, b = (tmp_path / n for n in ("first.parquet", "a.parquet", "b.parquet"))
        pq.write_table(pa.Table.from_pylist(rows), whole)
        pq.write_table(pa.Table.from_pylist(rows[::2]), a)
        pq.write_table(pa.Table.from_pylist(rows[1::2]), b)
        new = spark.createDataFrame(docs[half:], schema)
        by_file = {r["id"]: r["similar_id"] for r in dedup(new, against=str(whole)).collect()}
        by_list = dedup(new, against=[str(a), str(b)]).collect()
        assert {r["id"]: r["similar_id"] for r in by_list} == by_file
        stored = {r["id"]: r["similar_id"] for r in rows}
        one = {k: v for k, v in _ids_of(dedup(spark.createDataFrame(docs, schema))).items()}
        _same_pairs({**stored, **by_file}, one)


def _ids_of(df: Any) -> dict[str, Any]:
    return {r["id"]: r["similar_id"] for r in df.collect()}


class TestAgainstErrors:
    def test_bad_state_on_the_command_line(
        self, spark: Any, corpus: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A missing STATE, one without similar_id, or a malformed export: one Error line,
        exit 1, nothing written; --against without --engine spark is bad usage."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        _, first, second = _halves(corpus, tmp_path)
        broken = tmp_path / "broken.parquet"
        meta = {b"nshash": json.dumps({"kind": "nshash-groups", "version": 1}).encode()}
        pq.write_table(pa.table({"similar_id": [1]}).replace_schema_metadata(meta), broken)
        past = tmp_path / "past.parquet"
        good = {"kind": "nshash-groups", "version": 1, "last_id": 1, "narrow": False, "common": []}
        longs = pa.list_(pa.int64())
        table = pa.table(
            {
                "similar_id": [5],
                "size": [1],
                "ids": pa.array([["a"]], pa.list_(pa.string())),
                "anchors": pa.array([[1]], longs),
                "sketch": pa.array([[2]], longs),
                "limit": [3],
            }
        )
        meta = {b"nshash": json.dumps(good).encode()}
        pq.write_table(table.replace_schema_metadata(meta), past)
        plain = tmp_path / "plain.parquet"
        pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), plain)
        out = tmp_path / "out.jsonl"
        for state, says in (
            (tmp_path / "none.jsonl", "No such file"),
            (first, "no similar_id"),
            (plain, "no similar_id"),
            (broken, "not a readable nshash groups export"),
            (past, "past its last_id"),
            (tmp_path / "x.csv", "No such file"),
        ):
            args = ["dedup", str(second), "--engine", "spark", "--against", str(state)]
            assert main([*args, "-o", str(out)]) == 1, state
            err = capsys.readouterr().err.strip().splitlines()
            errors = [line for line in err if line.startswith("Error: ")]
            assert len(errors) == 1 and says in errors[0], err
            assert not out.exists()
        assert main(["dedup", str(second), "--against", str(first), "-o", str(out)]) == 2
        capsys.readouterr()

    def test_bad_state_in_the_library(self, spark: Any, tmp_path: Path) -> None:
        """The library raises StateError (a ConfigError) for the same."""
        from nshash.spark import dedup

        df = spark.createDataFrame([("a", "x y z")], "id string, text string")
        with pytest.raises(StateError, match="No such file"):
            dedup(df, against=str(tmp_path / "none.parquet"))
        with pytest.raises(StateError, match="no similar_id"):
            dedup(df, against=df)
        with pytest.raises(StateError, match="a store's export"):
            dedup(df, against="sqlite:///tmp/news.db")
        with pytest.raises(StateError, match="no stored groups"):
            dedup(df, against=[])
        stored = spark.createDataFrame(
            [("a", "x", "1")], "id string, text string, similar_id string"
        )
        with pytest.raises(StateError, match="not integers"):
            dedup(df, against=stored)


ROOT = Path(__file__).resolve().parents[1]
ZH = Path(os.environ.get("NSHASH_DATA_DIR", ROOT.parent / "shared" / "data"))


@pytest.mark.slow
class TestFreshVenv:
    def test_readme_command_from_a_venv(self, tmp_path: Path) -> None:
        """``pip install '.[spark]'`` into a new venv, then the README's Spark command on
        zh_reposts_dev with PYSPARK_PYTHON unset and the venv not on the PATH: it works, and
        its output is the local engine's wherever the two group alike."""
        import subprocess
        import sys
        import venv

        data = ZH / "zh_reposts_dev.jsonl.gz"
        _need(data.exists(), f"{data} is not here (set NSHASH_DATA_DIR)")
        _need(shutil.which("java") is not None, "java is not installed")
        env_dir = tmp_path / "venv"
        try:
            venv.EnvBuilder(with_pip=True).create(env_dir)
        except Exception as exc:  # no ensurepip in this Python, say
            pytest.skip(f"cannot create a venv here: {exc}")
        python = env_dir / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
        env["PATH"] = "/usr/bin:/bin"  # the venv is not activated
        install = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"{ROOT}[spark]"],
            env=env,
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            pytest.skip(f"pip could not install nshash[spark]: {install.stderr.strip()[-300:]}")
        out = tmp_path / "out.jsonl"
        run = subprocess.run(
            [
                str(env_dir / "bin" / "nshash"),
                "dedup",
                str(data),
                "--engine",
                "spark",
                "-o",
                str(out),
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert "dedup (spark): 6,695 documents" in run.stderr
        # No Spark log lines: the summary, and the JVM's own line about incubator modules.
        said = ("dedup (spark): ", "WARNING: Using incubator modules")
        assert [line for line in run.stderr.splitlines() if not line.startswith(said)] == []
        local = tmp_path / "local.jsonl"
        code = subprocess.run(
            [sys.executable, "-m", "nshash", "dedup", str(data), "-o", str(local), "-q"],
            cwd=ROOT,
        ).returncode
        assert code == 0
        mine, theirs = out.read_bytes().splitlines(), local.read_bytes().splitlines()
        assert len(mine) == len(theirs) == 6695
        from bench.evaluate import pairwise_scores

        records = [json.loads(line) for line in mine]
        stories = [r["story"] for r in records]
        spark_ids = [r["similar_id"] for r in records]
        local_ids = [json.loads(line)["similar_id"] for line in theirs]
        assert all(type(i) is int for i in spark_ids)
        heads = [line.rsplit(b', "similar_id"', 1)[0] for line in mine]
        assert heads == [line.rsplit(b', "similar_id"', 1)[0] for line in theirs]
        got, want = pairwise_scores(spark_ids, stories), pairwise_scores(local_ids, stories)
        assert got.precision >= 0.995
        assert abs(got.f1 - want.f1) <= 0.01, (got, want)

    def test_workers_without_nshash_say_what_to_set(self, tmp_path: Path) -> None:
        """Workers whose Python lacks nshash (a cluster's, here a bare venv's) stop the run
        with one Error line that names PYSPARK_PYTHON, not a Java stack trace."""
        import subprocess
        import sys
        import venv

        _need(shutil.which("java") is not None, "java is not installed")
        bare = tmp_path / "bare"
        try:
            venv.EnvBuilder(with_pip=False).create(bare)
        except Exception as exc:
            pytest.skip(f"cannot create a venv here: {exc}")
        src = tmp_path / "in.jsonl"
        src.write_text(json.dumps({"id": "a", "text": "A short story of rivers."}) + "\n")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYSPARK_PYTHON"] = str(bare / "bin" / "python")
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); from nshash.cli import main;"
            f" sys.exit(main(['dedup', {str(src)!r}, '--engine', 'spark', '-o', 'out.jsonl']))"
        )
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert run.returncode == 1, run.stderr[-2000:]
        errors = [line for line in run.stderr.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1, run.stderr[-2000:]
        assert "cannot import nshash" in errors[0] and "PYSPARK_PYTHON" in errors[0]
        assert run.stderr.strip().splitlines()[-1] == errors[0]
        assert not (tmp_path / "out.jsonl").exists()


def _frame_pages() -> dict[str, str]:
    """tests/test_frame.py's pages: two briefs of one new site (its header, related block and
    footer are most of each page), and a story with a repost on another site and a copy on
    the same site."""
    from tests.test_frame import RELATED, lead, page
    from tests.test_store_contract import EN_BAKERY, EN_ORCHARD, EN_TURTLES

    story = f"{EN_TURTLES}\n{EN_ORCHARD}"
    return {
        "b1": page("Harbor Wire", lead(EN_TURTLES), RELATED),
        "b2": page("Harbor Wire", lead(EN_BAKERY), RELATED),
        "s1": page("Harbor Wire", story, RELATED),
        "s2": page("Valley Post", story, RELATED.upper()),
        "s3": page("Harbor Wire", story.replace("turtles", "sea turtles"), RELATED),
    }


class TestFrame:
    """The frame rule (assign.unframed / set_aside) in the Spark job's pair verification, on
    tests/test_frame.py's example: the later page's frame is set aside, as the online path
    sets aside the frame of the document that arrives."""

    def test_a_pair_is_judged_as_the_online_path_judges_the_later_page(self) -> None:
        """The two briefs through the verifying function, the earlier one as *a*: refused
        with the later one's places (the online verdict), accepted without them with the
        score the online path gives the pair counted whole."""
        pa = pytest.importorskip("pyarrow")
        from nshash.spark import ACCEPTED, VOTE, _options, _verify_batches

        pages = _frame_pages()
        fingerprinter, policy, _ = _options({})
        one, two = fingerprinter.prepare(pages["b1"]), fingerprinter.prepare(pages["b2"])
        with NSHash.open("memory://") as nsh:
            nsh.add(pages["b1"], doc_id="b1")
            (cand,) = nsh.explain(pages["b2"]).candidates
        assert cand.frame > 0 and cand.score < policy.theta

        def verdicts(places: bytes) -> list[dict[str, Any]]:
            longs = pa.list_(pa.int64())
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([0], pa.int64()),
                    pa.array([1], pa.int64()),
                    pa.array([[-7, 9]], longs),  # the anchors that paired them
                    pa.array([list(one.sketch)], longs),
                    pa.array([one.limit], pa.int64()),
                    pa.array([list(two.sketch)], longs),
                    pa.array([two.limit], pa.int64()),
                    pa.array([places], pa.binary()),
                ],
                names=["a", "b", "hits", "sa", "la", "sb", "lb", "pb"],
            )
            out = _verify_batches(policy, [])([batch])
            return [r for b in out for r in b.to_pylist()]

        framed = verdicts(two.places)
        assert not [r for r in framed if r["kind"] == ACCEPTED]
        votes = {(r["a"], r["b"]) for r in framed if r["kind"] == VOTE}  # the refusal's votes
        assert {node for node, _ in votes} == {0, 1}
        assert {(0, -7), (0, 9), (1, -7), (1, 9)} <= votes  # on its anchors too
        (whole,) = [r for r in verdicts(b"") if r["kind"] == ACCEPTED]
        assert len(whole["shared"]) == cand.shared + cand.frame
        assert whole["score"] == pytest.approx(
            (cand.shared + cand.frame)
            / min(cand.document_values + cand.frame, cand.group_values + cand.frame)
        )

    def test_groups_are_the_online_path_s(self, spark: Any) -> None:
        """tests/test_frame.py's two cases, each run alone as there: the new site's briefs stay
        apart (one group each, as on the online path), and the story's full copies, on another
        site and on the same one, join."""
        from nshash.spark import dedup

        pages = _frame_pages()
        for case, groups in ((("b1", "b2"), 2), (("s1", "s2", "s3"), 1)):
            rows = [(i, pages[i], n) for n, i in enumerate(case)]
            df = spark.createDataFrame(rows, "id string, text string, pos long")
            got = {r["id"]: r["similar_id"] for r in dedup(df, order_col="pos").collect()}
            with NSHash.open("memory://") as nsh:
                online = {i: nsh.add(pages[i], doc_id=i).similar_id for i in case}
            assert len(set(got.values())) == len(set(online.values())) == groups
            assert _pairs(got) == _pairs(online)


def _template_pages() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Two stories of one series, ``a`` and ``b``, each opening with the series' formula
    (three sentences, most of a short page) and then twelve of its own: full copies, copies
    cut after four sentences, and short pages of the formula and one sentence, each page
    under a header of its own site. Pages in the order: ``a``'s, then ``b``'s longer ones,
    then ``b``'s short ones (the online path then sees ``b``'s story before its short pages)."""
    rng = random.Random(11)
    words = [
        "".join(rng.choice("bcdfghklmnprstvz") for _ in range(rng.randint(4, 8)))
        for _ in range(3000)
    ]
    formula = _story(rng, words, 3)
    docs: list[tuple[str, str]] = []
    story: dict[str, str] = {}
    for name in ("a", "b"):
        body = formula + _story(rng, words, 12)
        for kind, size, copies in (("full", len(body), 3), ("cut", 7, 2), ("short", 4, 3)):
            for i in range(copies):
                header = " ".join(rng.choice(words) for _ in range(8)).capitalize() + "."
                doc_id = f"{name}-{kind}-{i}"
                docs.append((doc_id, "\n".join([header, *body[:size]])))
                story[doc_id] = name
    return docs, story


class TestMergeGuard:
    """The online merge guard in the Spark job: a merge joins two groups alike as a whole."""

    def test_a_node_s_first_choice_is_its_best_scored_pick(self) -> None:
        """Of the matches a node picks, the best scored (then the most shared) is its first
        choice; its other picks are merges, and a stored group chooses nothing."""
        from nshash.methods.nshash.assign import MatchPolicy
        from nshash.spark import _guard_rows

        shared = list(range(10))
        rows = [
            # node 5: a short page inside 6 (score 1.0), sharing most with 7 (0.8, its
            # reference); 8 shares little of what 5 shares with 7, so 5 does not agree to it.
            (5, [(6, 1.0, shared[:6], 6), (7, 0.8, shared, 12), (8, 0.7, [20, 21, 22], 4)]),
            (1, [(5, 0.9, shared, 10)]),  # a stored group (below the floor)
        ]
        got = list(_guard_rows(MatchPolicy(), floor=2)(rows))
        assert got == [(5, 6, True, True), (5, 7, True, False), (1, 5, False, False)]

    def test_short_pages_of_a_series_do_not_join_its_stories(self, spark: Any) -> None:
        """Two stories of a series stay apart though their short pages (the series' formula
        and one sentence) match each other strongly: each page joins its own story first, and
        the two stories share only the formula, as on the online path."""
        from nshash.spark import dedup

        docs, story = _template_pages()
        rows = [(i, t, n) for n, (i, t) in enumerate(docs)]
        df = spark.createDataFrame(rows, "id string, text string, pos long")
        got = {r["id"]: r["similar_id"] for r in dedup(df, order_col="pos").collect()}
        with NSHash.open("memory://") as nsh:
            online = {i: nsh.add(t, doc_id=i).similar_id for i, t in docs}
        for engine, labels in (("online", online), ("spark", got)):
            by_story = {name: {labels[i] for i in story if story[i] == name} for name in "ab"}
            assert by_story["a"].isdisjoint(by_story["b"]), (engine, by_story)
        assert len({got[i] for i in story if story[i] == "a"}) == 1
        assert len({got[i] for i in story if story[i] == "b"}) == 1
