"""The LevelDB open options: bloom filters are written, and directories written without them
(or with them, read by LevelDB's defaults) still open and answer the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from nshash import NSHash
from nshash.stores import leveldb as leveldb_base

STORY = (
    "国家统计局今天发布数据显示，前三季度国内生产总值同比增长百分之五点二，经济运行持续恢复向好。\n"
    "其中，第三季度增长百分之四点九，环比增长百分之一点三，主要指标稳中有进，就业形势总体稳定。\n"
    "专家表示，随着一系列稳增长政策落地见效，四季度经济有望继续保持回升态势，全年目标可以实现。"
)
OTHER = (
    "气象台预计，未来三天北方大部地区将迎来大范围降温，局地降温幅度可达十二摄氏度以上并伴有大风。\n"
    "农业部门提醒各地提前做好设施农业防寒保暖工作，及时收获已成熟的蔬菜，减少低温冻害带来的损失。"
)


def _write(path: Path) -> tuple[int, int]:
    with NSHash.open(f"leveldb://{path}?fsync=no") as nsh:
        story = nsh.add(STORY, "a").similar_id
        other = nsh.add(OTHER, "b").similar_id
    return story, other


def _check(path: Path, story: int, other: int) -> None:
    with NSHash.open(f"leveldb://{path}?fsync=no") as nsh:
        assert nsh.stats().documents == 2
        assert nsh.query("来源：新华网\n" + STORY + "\n（责任编辑：王伟）") == story
        assert nsh.query(OTHER) == other
        assert nsh.document("a") is not None and nsh.document("zz") is None


def _tables(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in path.iterdir() if p.suffix in (".ldb", ".sst")]


class TestOpenOptions:
    def test_options(self) -> None:
        """Every open asks for a bloom filter and a cache larger than LevelDB's 8 MB."""
        assert leveldb_base.OPEN_OPTIONS["bloom_filter_bits"] == 10
        assert leveldb_base.OPEN_OPTIONS["lru_cache_size"] > 8 * 1024 * 1024

    def test_tables_carry_a_bloom_filter(self, tmp_path: Path) -> None:
        """Tables written by the store hold LevelDB's bloom filter block."""
        path = tmp_path / "db"
        story, other = _write(path)
        _check(path, story, other)  # the reopen writes the replayed log out as a table
        tables = _tables(path)
        assert tables and any(b"filter.leveldb.BuiltinBloomFilter2" in t for t in tables)

    def test_directory_written_with_defaults_opens(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A directory written with plyvel's defaults (no filter) opens and answers the same."""
        path = tmp_path / "db"
        with monkeypatch.context() as m:
            m.setattr(leveldb_base, "OPEN_OPTIONS", {})
            story, other = _write(path)
            _check(path, story, other)
        assert not any(b"BuiltinBloomFilter2" in t for t in _tables(path))
        _check(path, story, other)

    def test_defaults_open_a_tuned_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A directory written with the options opens with plyvel's defaults too (a downgrade)."""
        path = tmp_path / "db"
        story, other = _write(path)
        _check(path, story, other)
        monkeypatch.setattr(leveldb_base, "OPEN_OPTIONS", {})
        _check(path, story, other)
