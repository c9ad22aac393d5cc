"""The README's vocabulary tables hold to the code: the library, the command line, the API."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path

import pytest

from nshash import NSHash
from nshash.cli import build_parser
from nshash.cli.io import DEFAULT_TEXT_FIELDS
from nshash.options import SETTINGS
from nshash.results import AddResult, DocumentRecord, Member

README = (Path(__file__).resolve().parents[1] / "README.md").read_text("utf-8")


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table after *heading*, each cell without its backticks."""
    section = README.split(heading, 1)[1]
    start = section.index("\n| ")
    rows = []
    for line in section[start + 1 :].splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set(cells[0]) <= {"-"}:
            continue
        rows.append(cells)
    return rows[1:]  # no header


def _code(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _dedup_options() -> dict[str, argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    dedup = sub.choices["dedup"]
    return {flag: action for action in dedup._actions for flag in action.option_strings}


FIELDS = _table("## Names on every surface")
SETTING_ROWS = _table("Every tuning setting can be given four ways")


class TestFields:
    def test_every_field_is_listed(self) -> None:
        """The table names each field of the vocabulary once."""
        names = [_code(row[0])[0] for row in FIELDS]
        assert names == [
            "text", "id", "title", "url", "site", "published_at", "similar_id", "duplicate"
        ]

    def test_http_api_names(self) -> None:
        """The API's document body and answer use the names in the table's HTTP column."""
        from service import Settings, create_app

        schemas = create_app(Settings(store_url="memory://")).openapi()["components"]["schemas"]
        body = set(schemas["DocumentIn"]["properties"])
        answer = set(schemas["AddResponse"]["properties"])
        for row in FIELDS:
            name = _code(row[3])[0]
            assert name in body | answer, name

    def test_library_names(self) -> None:
        """NSHash.add takes the input fields by these names; results carry the output ones."""
        params = set(inspect.signature(NSHash.add).parameters)
        for row in FIELDS:
            field = _code(row[0])[0]
            if field in ("similar_id", "duplicate"):
                assert hasattr(AddResult, field)
            else:
                assert field in params, field
        for cls in (AddResult, Member, DocumentRecord):
            assert isinstance(inspect.getattr_static(cls, "id"), property)

    def test_command_line_names(self) -> None:
        """The command line's default fields are the table's."""
        options = _dedup_options()
        assert DEFAULT_TEXT_FIELDS[0] == "text"
        for field in ("id", "title", "url", "site"):
            assert options[f"--{field}-field"].default == field
        assert options["--time-field"].default == "published_at"

    def test_library_id_keyword(self) -> None:
        """``add(text, id=...)`` and ``doc_id=`` are one id; two different ones are refused."""
        from nshash.errors import ConfigError

        nsh = NSHash.open("memory://")
        text = "The river flooded the lower town overnight. Two hundred homes were evacuated."
        assert nsh.add(text, id="a1").id == "a1"
        assert nsh.add(text, doc_id="a1").replayed
        with pytest.raises(ConfigError, match="Give the id once"):
            nsh.add(text, doc_id="a1", id="b2")


class TestSettings:
    def test_every_setting_is_a_row(self) -> None:
        """The settings table lists exactly the schema's settings, in its order."""
        assert [_code(row[0])[0] for row in SETTING_ROWS] == list(SETTINGS)

    def test_defaults_are_the_policy_s(self) -> None:
        """The schema's default of each guard setting is MatchPolicy's own (both say it)."""
        import dataclasses

        from nshash import MatchPolicy

        for f in dataclasses.fields(MatchPolicy):
            assert SETTINGS[f.name].default == f.default, f.name

    @pytest.mark.parametrize("row", SETTING_ROWS, ids=lambda row: row[0].strip("`"))
    def test_row_matches_the_code(self, row: list[str]) -> None:
        """Each spelling in a row is the one the code reads."""
        name = _code(row[0])[0]
        setting = SETTINGS[name]
        assert _code(row[1]) == [f"{name}="]
        assert _code(row[2]) == [f"?{name}="]
        assert _code(row[3]) == [setting.flag] and setting.flag in _dedup_options()
        assert _code(row[4]) == [setting.env] == [f"NSHASH_{name.upper()}"]
        default = "n + 8" if setting.default is None else str(setting.default)
        assert row[5] == default
        if setting.default is not None:  # the keyword and the URL option are taken as spelt
            NSHash.open("memory://", **{name: setting.default}).close()
            NSHash.open(f"memory://?{name}={setting.default}").close()
