"""The tuning settings: one schema reached by keyword, store URL, flag and variable."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

from nshash import NSHash
from nshash import errors as errors_module
from nshash.cli import main
from nshash.errors import ConfigError, UnknownOptionError, install_hint
from nshash.methods.nshash.core import _POLICY_OPTIONS, _TEXT_OPTIONS
from nshash.options import SETTINGS, from_environ, settings_in_url

REPO = Path(__file__).resolve().parents[1]
ARTICLES = REPO / "example" / "articles.jsonl"


class TestSchema:
    def test_every_option_nshash_passes_on_is_a_setting(self) -> None:
        """The schema lists exactly the options NSHash hands to its fingerprinter and guard."""
        assert set(SETTINGS) == {"n", "min_length", "hashfunc", *_TEXT_OPTIONS, *_POLICY_OPTIONS}

    def test_url_settings_are_taken_off_the_store_url(self) -> None:
        """Only the store's own options stay in the URL the store sees."""
        url, found = settings_in_url("memory:///tmp/x.pkl?fsync=always&theta=0.7&n=8")
        assert url == "memory:///tmp/x.pkl?fsync=always"
        assert found == {"theta": "0.7", "n": "8"}

    def test_environment(self) -> None:
        """NSHASH_* variables are cast by the setting's kind; empty ones are unset."""
        assert from_environ({"NSHASH_THETA": "0.7", "NSHASH_N": "", "NSHASH_HTML": "no"}) == {
            "theta": 0.7,
            "html": False,
        }
        with pytest.raises(ConfigError, match="environment variable NSHASH_VOTES"):
            from_environ({"NSHASH_VOTES": "many"})


class TestOpen:
    def test_url_option_reaches_the_policy(self) -> None:
        """``memory://?theta=0.8&n=8`` tunes the guard and the fingerprinter."""
        with NSHash.open("memory://?theta=0.8&n=8") as nsh:
            assert nsh.policy.theta == 0.8 and nsh.policy.n == 8 and nsh.fingerprinter.n == 8

    def test_bad_url_value_names_the_url(self) -> None:
        """A value out of range says it came from the store URL."""
        with pytest.raises(ConfigError, match=r"theta must be in \(0, 1\].*from the store URL"):
            NSHash.open("memory://?theta=2")

    def test_contradiction_is_refused(self) -> None:
        """A setting given in the URL and as a keyword with another value is an error."""
        with pytest.raises(ConfigError, match="theta is given twice"):
            NSHash.open("memory://?theta=0.5", theta=0.6)

    def test_unknown_keyword_is_not_blamed_on_the_url(self) -> None:
        """A misspelt keyword is reported as a keyword, with what NSHash takes."""
        with pytest.raises(UnknownOptionError) as info:
            NSHash.open("memory://", threshold=0.9)
        assert "Unknown keyword(s) ['threshold'] for NSHash.open" in str(info.value)
        assert "theta" in str(info.value) and info.value.names == ["threshold"]

    def test_unknown_url_option_names_the_store(self) -> None:
        """An option nobody takes in the URL is the store's to refuse."""
        with pytest.raises(UnknownOptionError, match=r"\['bogus'\] for the store"):
            NSHash.open("memory://?bogus=1")


class TestCommandLine:
    def run(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    def test_flag_changes_the_answer(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--theta 1 keeps an edited copy apart that the default joins."""
        _, default, _ = self.run(capsys, "dedup", str(ARTICLES), "-q")
        _, strict, _ = self.run(capsys, "dedup", str(ARTICLES), "-q", "--theta", "1")
        groups = [{json.loads(line)["similar_id"] for line in out.splitlines()} for out in
                  (default, strict)]
        assert len(groups[1]) > len(groups[0])

    @pytest.mark.parametrize(
        ("args", "env", "where"),
        [
            (["--theta", "2"], {}, "(from --theta)"),
            (["--votes", "x"], {}, "votes must be an integer, not 'x' (from --votes)"),
            ([], {"NSHASH_THETA": "x"}, "(from the environment variable NSHASH_THETA)"),
            (["--store", "memory://?sketch_rate=3"], {}, "(from the store URL)"),
            # past what any store could hold or the kernel's integers take (were tracebacks)
            (["--n", "2147483648"], {}, "n must be an integer from 1 to 65536"),
            (["--sketch-cap", str(2**63)], {}, "sketch_cap must be an integer from 1 to"),
            ([], {"NSHASH_SHINGLE": str(2**63)}, "(from the environment variable NSHASH_SHINGLE)"),
            (["--store", f"memory://?sketch_rate={2**63}"], {}, "(from the store URL)"),
        ],
    )
    def test_bad_value_is_one_line_naming_its_source(
        self,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        args: list[str],
        env: dict[str, str],
        where: str,
    ) -> None:
        """A bad setting stops the run with one Error: line that says where it came from."""
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code, out, err = self.run(capsys, "dedup", str(ARTICLES), *args)
        assert code == 1 and out == ""
        assert err.startswith("Error: ") and err.count("\n") == 1 and where in err, err

    def test_url_wins_over_the_environment(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A variable is a default: a store URL that names the setting overrides it."""
        monkeypatch.setenv("NSHASH_THETA", "0.2")
        code, _, err = self.run(
            capsys, "dedup", str(ARTICLES), "-q", "--store", "memory://?theta=0.9"
        )
        assert code == 0, err


class TestService:
    def test_variable_reaches_the_service(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """NSHASH_THETA tunes the service's guard."""
        from fastapi.testclient import TestClient

        from service import Settings, create_app

        monkeypatch.setenv("NSHASH_THETA", "0.9")
        with TestClient(create_app(Settings(store_url="memory://"))) as client:
            nsh: Any = client.app.state.service.store.get()  # type: ignore[attr-defined]
            assert nsh.policy.theta == 0.9


class TestInstallHint:
    @pytest.fixture(autouse=True)
    def _fresh(self) -> Any:
        errors_module._installed_from.cache_clear()
        yield
        errors_module._installed_from.cache_clear()

    def fake(self, monkeypatch: pytest.MonkeyPatch, direct_url: str | None) -> None:
        class Dist:
            def read_text(self, name: str) -> str | None:
                return direct_url

        monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist())

    def test_from_an_index(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A release installed from an index is named by its name."""
        self.fake(monkeypatch, None)
        monkeypatch.setattr(errors_module.Path, "is_file", lambda self: False)
        assert install_hint("redis") == "pip install 'nshash[redis]'"

    def test_from_a_clone(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A clone installed from its folder is named by that folder, '.' from inside it."""
        self.fake(monkeypatch, json.dumps({"url": tmp_path.as_uri(), "dir_info": {}}))
        assert install_hint("redis") == f"pip install '{tmp_path}[redis]'"
        errors_module._installed_from.cache_clear()
        monkeypatch.chdir(tmp_path)
        assert install_hint("service") == "pip install '.[service]'"

    def test_from_a_wheel(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A local wheel is named by its file."""
        wheel = tmp_path / "nshash-0.1.0-py3-none-any.whl"
        self.fake(monkeypatch, json.dumps({"url": wheel.as_uri(), "archive_info": {}}))
        assert install_hint("spark") == f"pip install '{wheel}[spark]'"
