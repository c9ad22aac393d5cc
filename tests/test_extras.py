"""A missing extra is reported the same way whatever the input: no surprise half-way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nshash.cli import main
from nshash.errors import ConfigError, install_hint


class TestCompareWithoutJieba:
    @pytest.fixture(autouse=True)
    def _no_jieba(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "jieba", None)

    def test_english_is_refused_too(self) -> None:
        """compare() on English text needs the extra as much as on Chinese."""
        from nshash.toolkit.similarity import compare

        with pytest.raises(ConfigError, match=r"similarity measures need jieba") as info:
            compare("the same words", "the same words")
        assert install_hint("similarity") in str(info.value)

    def test_command_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``nshash compare`` on two English files is one Error: line with the hint."""
        a, b = tmp_path / "a.txt", tmp_path / "b.txt"
        a.write_text("The council approved the bridge repair.")
        b.write_text("The council approved the repair of the bridge.")
        assert main(["compare", str(a), str(b)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and install_hint("similarity") in err
