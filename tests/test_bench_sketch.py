"""The sketch-size bench: a small run on the shared labelled set, so the bench cannot rot."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_sketch import main, measure
from bench.evaluate import DATA_DIR


@pytest.mark.skipif(not (DATA_DIR / "en_reposts_dev.jsonl.gz").exists(), reason="no shared data")
def test_a_sparser_sketch_holds_fewer_values() -> None:
    dense = measure(8, 256, ["en"], DATA_DIR, limit=300)
    sparse = measure(32, 256, ["en"], DATA_DIR, limit=300)
    assert 0 < sparse["values_per_group"] < dense["values_per_group"] / 2
    assert 0.5 < dense["en"] <= 1.0 and 0.0 <= sparse["en"] <= 1.0


def test_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rates", "x"]) == 2
    assert main(["--sets", "nowhere"]) == 2
    assert main(["--data-dir", str(tmp_path / "none")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(e.startswith("Error: ") for e in errors)
