"""open_store: URL parsing, backend choice, helpful errors, and passwords kept out of sight."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from nshash import (
    ConfigError,
    NSHash,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    open_store,
)
from nshash.errors import install_hint
from nshash.methods.nshash.memory import MemoryStore
from nshash.stores.url import mask_url, parse_url
from tests.redis_server import free_port
from tests.test_store_contract import EN_RAIL, ZH_WATER


class TestParseUrl:
    """parse_url splits a store URL into scheme, path and options."""

    @pytest.mark.parametrize(
        ("url", "expected"),
        [
            ("memory://", ("memory", "", {})),
            ("memory:///data/news.pkl", ("memory", "/data/news.pkl", {})),
            ("memory://./data/news.pkl", ("memory", "./data/news.pkl", {})),
            ("MEMORY:///x.pkl?fsync=no", ("memory", "/x.pkl", {"fsync": "no"})),
            ("leveldb:///var/lib/nshash", ("leveldb", "/var/lib/nshash", {})),
            ("leveldb://./rel/dir?fsync=always", ("leveldb", "./rel/dir", {"fsync": "always"})),
            ("redis://cache:6379/2?prefix=n", ("redis", "/2", {"prefix": "n"})),
        ],
    )
    def test_parts(self, url: str, expected: tuple[str, str, dict[str, str]]) -> None:
        """Each URL form yields its scheme, its path (absolute or relative) and its options."""
        assert parse_url(url) == expected

    @pytest.mark.parametrize(
        "url", ["memory://tmp/x.pkl", "leveldb://data/news.ldb", "sqlite://~/news.db"]
    )
    def test_relative_path_must_say_so(self, url: str) -> None:
        """``memory://tmp/x.pkl`` (a slash missing?) is refused, naming both readings."""
        scheme, _, path = url.partition("://")
        with pytest.raises(ConfigError) as info:
            parse_url(url)
        assert f"{scheme}:///{path}" in str(info.value) and f"{scheme}://./{path}" in str(
            info.value
        )

    @pytest.mark.parametrize("url", ["memory", "", "/tmp/news.pkl", "leveldb:/x"])
    def test_not_a_url(self, url: str) -> None:
        """A string without ``scheme://`` is refused with an example of the right form."""
        with pytest.raises(ConfigError, match="memory://") as info:
            open_store(url)
        assert repr(url) in str(info.value)

    def test_not_a_string(self) -> None:
        """A non-string URL is a ConfigError, not a TypeError."""
        with pytest.raises(ConfigError):
            open_store(42)  # type: ignore[arg-type]


class TestOpenMemory:
    """memory:// URLs open a MemoryStore, with or without a file."""

    def test_plain(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """memory:// keeps nothing on disk."""
        monkeypatch.chdir(tmp_path)
        with open_store("memory://") as store:
            assert isinstance(store, MemoryStore)
            assert store.url == "memory://"
        assert list(tmp_path.iterdir()) == []

    def test_absolute_path(self, tmp_path: Path) -> None:
        """memory:///abs/file.pkl keeps its journal (and snapshot) at that absolute path."""
        path = tmp_path / "sub" / "news.pkl"
        with NSHash.open(f"memory://{path}") as nsh:
            nsh.add(EN_RAIL)
            assert isinstance(nsh.store, MemoryStore)
        assert (tmp_path / "sub" / "news.pkl.journal").is_file()
        with NSHash.open(f"memory://{path}") as nsh:
            assert nsh.stats().documents == 1

    def test_relative_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """memory://./rel/file.pkl is relative to the working directory."""
        monkeypatch.chdir(tmp_path)
        with NSHash.open("memory://./state/news.pkl") as nsh:
            nsh.add(ZH_WATER)
            nsh.store.save()  # type: ignore[attr-defined]
        assert (tmp_path / "state" / "news.pkl").is_file()

    def test_keyword_options_override_query(self, tmp_path: Path) -> None:
        """A keyword option replaces the URL's, and is checked the same way."""
        url = f"memory://{tmp_path}/k.pkl?fsync=no"
        with open_store(url, fsync="always"):
            pass
        with pytest.raises(ConfigError, match="'weekly'"):
            open_store(url, fsync="weekly")


class TestOpenLevelDB:
    """leveldb:// URLs open a LevelDBStore in a directory."""

    @pytest.fixture(autouse=True)
    def _plyvel(self) -> None:
        pytest.importorskip("plyvel")

    def test_absolute_path(self, tmp_path: Path) -> None:
        """leveldb:///abs/dir creates the LevelDB directory there."""
        from nshash.methods.nshash.kvstore import KVStore
        from nshash.stores.leveldb import LevelKV

        path = tmp_path / "db"
        with open_store(f"leveldb://{path}?fsync=no") as store:
            assert isinstance(store, KVStore) and isinstance(store._kv, LevelKV)
            assert store.url == f"leveldb://{path}"
        assert (path / "CURRENT").is_file()

    def test_relative_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """leveldb://./rel/dir is relative to the working directory."""
        monkeypatch.chdir(tmp_path)
        with NSHash.open("leveldb://./data/news.ldb") as nsh:
            nsh.add(EN_RAIL)
        assert (tmp_path / "data" / "news.ldb" / "CURRENT").is_file()

    @pytest.mark.parametrize("url", ["leveldb://", "leveldb:///", "leveldb://?fsync=no"])
    def test_needs_a_directory(self, url: str) -> None:
        """A LevelDB URL without a directory is refused with the right form."""
        with pytest.raises(ConfigError, match="leveldb:///path/to/dir"):
            open_store(url)

    def test_same_directory_twice(self, tmp_path: Path) -> None:
        """A second opener of one directory gets StoreLockedError naming the directory."""
        path = tmp_path / "db"
        with open_store(f"leveldb://{path}"):
            with pytest.raises(StoreLockedError, match=str(path)) as info:
                open_store(f"leveldb://{path}")
            assert info.value.url == f"leveldb://{path}"
        with open_store(f"leveldb://{path}"):
            pass  # closed: the directory is free again

    def test_path_is_a_file(self, tmp_path: Path) -> None:
        """A path that is a plain file is a StoreError that is not about locking."""
        path = tmp_path / "file"
        path.write_text("not a directory")
        with pytest.raises(StoreError, match="Cannot open LevelDB directory") as info:
            open_store(f"leveldb://{path}")
        assert type(info.value) is StoreError

    def test_foreign_leveldb_refused(self, tmp_path: Path) -> None:
        """A LevelDB directory written by something else is StoreCorruptError, left untouched."""
        import plyvel

        path = tmp_path / "other"
        db = plyvel.DB(str(path), create_if_missing=True)
        db.put(b"user:1", b"alice")
        db.close()
        with pytest.raises(StoreCorruptError, match="not an nshash store"):
            open_store(f"leveldb://{path}")
        db = plyvel.DB(str(path))
        assert list(db.iterator()) == [(b"user:1", b"alice")]
        db.close()

    def test_missing_plyvel(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """Without plyvel the error names the extra to install."""
        monkeypatch.setitem(sys.modules, "plyvel", None)
        with pytest.raises(ConfigError) as info:
            open_store(f"leveldb://{tmp_path}/db")
        assert install_hint("leveldb") in str(info.value)


class TestOpenSQLite:
    """sqlite:// URLs open the nshash tables in one SQLite file."""

    def test_absolute_path(self, tmp_path: Path) -> None:
        """sqlite:///abs/file.db creates the file there, and keeps what was added."""
        from nshash.methods.nshash.kvstore import KVStore
        from nshash.stores.sqlite import SQLiteKV

        path = tmp_path / "sub" / "news.db"
        with open_store(f"sqlite://{path}?fsync=always") as store:
            assert isinstance(store, KVStore) and isinstance(store._kv, SQLiteKV)
            assert store.url == f"sqlite://{path}"
        with NSHash.open(f"sqlite://{path}") as nsh:
            first = nsh.add(EN_RAIL, doc_id="a")
        with NSHash.open(f"sqlite://{path}") as nsh:
            assert nsh.add(EN_RAIL, doc_id="b").similar_id == first.similar_id
        assert path.is_file()

    def test_relative_path(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """sqlite://./rel/file.db is relative to the working directory."""
        monkeypatch.chdir(tmp_path)
        with NSHash.open("sqlite://./data/news.db") as nsh:
            nsh.add(EN_RAIL)
        assert (tmp_path / "data" / "news.db").is_file()

    @pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///tmp/dir/"])
    def test_needs_a_file(self, url: str) -> None:
        """A SQLite URL without a file name is refused with the right form."""
        with pytest.raises(ConfigError, match="sqlite:///path/to/news.db"):
            open_store(url)

    def test_same_file_twice(self, tmp_path: Path) -> None:
        """A second writer of one file gets StoreLockedError; a reader is let in."""
        path = tmp_path / "news.db"
        with open_store(f"sqlite://{path}") as store:
            with pytest.raises(StoreLockedError, match=str(path)):
                open_store(f"sqlite://{path}")
            with open_store(f"sqlite://{path}", readonly=True) as reader:
                assert reader.stats().documents == store.stats().documents == 0
        with open_store(f"sqlite://{path}"):
            pass  # closed: the file is free again

    def test_path_is_a_directory(self, tmp_path: Path) -> None:
        """A path that is a directory is a StoreError that is not about locking."""
        (tmp_path / "dir").mkdir()
        with pytest.raises(StoreError, match="Cannot open SQLite .*Is a directory") as info:
            open_store(f"sqlite://{tmp_path}/dir")
        assert type(info.value) is StoreError

    def test_not_a_database(self, tmp_path: Path) -> None:
        """A file that is not SQLite is StoreCorruptError, left untouched."""
        path = tmp_path / "notes.db"
        path.write_bytes(b"these are my notes, not a database" * 100)
        with pytest.raises(StoreCorruptError, match="damaged"):
            open_store(f"sqlite://{path}")
        assert path.read_bytes() == b"these are my notes, not a database" * 100

    @pytest.mark.parametrize("scheme", ["memory", "leveldb", "sqlite"])
    def test_open_path_takes_any_file_name(self, scheme: str, tmp_path: Path) -> None:
        """open_path opens a file store at a path that a URL would quote (? and #)."""
        from nshash.methods.nshash.store import open_path

        if scheme == "leveldb":
            pytest.importorskip("plyvel")
        path = tmp_path / "odd?name#x"
        with NSHash(store=open_path(scheme, str(path))) as nsh:
            first = nsh.add(EN_RAIL, doc_id="a").similar_id
        with NSHash(store=open_path(scheme, str(path))) as nsh:
            assert nsh.document("a") is not None and nsh.add(EN_RAIL).similar_id == first
        assert all(p.name.startswith("odd?name#x") for p in tmp_path.iterdir())
        with pytest.raises(ConfigError, match="open_path takes one of"):
            open_path("redis", str(path))

    def test_foreign_database_refused(self, tmp_path: Path) -> None:
        """A SQLite file with someone else's tables is StoreCorruptError, left untouched."""
        import sqlite3

        path = tmp_path / "app.db"
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('alice')")
        db.commit()
        db.close()
        before = path.read_bytes()
        with pytest.raises(StoreCorruptError, match="not an nshash store"):
            open_store(f"sqlite://{path}")
        assert path.read_bytes() == before


class TestBadUrls:
    """Unknown schemes, options and fsync policies are ConfigErrors that say what to use."""

    def test_unknown_scheme(self) -> None:
        """An unknown scheme is named, with the schemes that exist."""
        with pytest.raises(ConfigError, match="'mysql'") as info:
            open_store("mysql:///tmp/x.db")
        message = str(info.value)
        assert all(name in message for name in ("memory", "leveldb", "sqlite", "redis"))

    @pytest.mark.parametrize(
        "url",
        [
            "memory://?colour=red",
            "memory:///tmp/x.pkl?fsync=no&colour=red",
            "leveldb:///x?colour=red",
            "sqlite:///x?colour=red",
        ],
    )
    def test_unknown_option(self, url: str, tmp_path: Path) -> None:
        """A misspelt option is refused by name, never ignored, and nothing is created."""
        if url.startswith("leveldb"):
            pytest.importorskip("plyvel")
        if url.startswith(("leveldb", "sqlite")):
            url = url.replace("///x", f"//{tmp_path}/x")
        with pytest.raises(ConfigError, match="colour"):
            open_store(url)
        assert not (tmp_path / "x").exists()

    def test_option_twice(self) -> None:
        """An option given twice is ambiguous and refused."""
        with pytest.raises(ConfigError, match="'fsync' is given twice"):
            open_store("memory://?fsync=no&fsync=always")

    @pytest.mark.parametrize("scheme", ["memory", "leveldb", "sqlite"])
    def test_bad_fsync(self, scheme: str, tmp_path: Path) -> None:
        """A bad fsync policy is quoted, with the three valid ones."""
        if scheme == "leveldb":
            pytest.importorskip("plyvel")
        with pytest.raises(ConfigError, match="'sometimes'") as info:
            open_store(f"{scheme}://{tmp_path}/s?fsync=sometimes")
        assert "always, everysec, no" in str(info.value)
        assert list(tmp_path.iterdir()) == []

    def test_bad_fsync_direct(self, tmp_path: Path) -> None:
        """The store classes check fsync themselves too."""
        pytest.importorskip("plyvel")
        from nshash.methods.nshash.leveldb import LevelDBStore

        with pytest.raises(ConfigError, match="''"):
            LevelDBStore(tmp_path / "db", fsync="")
        assert list(tmp_path.iterdir()) == []


class TestPasswords:
    """A password in a store URL never shows in a repr or an error message."""

    @pytest.mark.parametrize(
        ("url", "masked"),
        [
            ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
            ("redis://alice:s3cret@cache/1?prefix=n", "redis://alice:***@cache/1?prefix=n"),
            ("rediss://:s3cret@[::1]:6380/0", "rediss://:***@[::1]:6380/0"),
            ("redis://cache:6379/0", "redis://cache:6379/0"),
            ("memory:///tmp/x.pkl", "memory:///tmp/x.pkl"),
        ],
    )
    def test_mask_url(self, url: str, masked: str) -> None:
        """mask_url replaces the password with *** and leaves the rest alone."""
        assert mask_url(url) == masked

    def test_store_repr_hides_password(self) -> None:
        """A Redis store's repr, its NSHash's repr and its errors never carry the password."""
        pytest.importorskip("nshash.methods.nshash.redis", reason="the Redis store needs redis-py")
        url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0?prefix=t&socket_connect_timeout=0.5"
        with NSHash.open(url) as nsh:
            assert "s3cret-pw" not in repr(nsh.store)
            assert "s3cret-pw" not in repr(nsh)
            assert "***" in repr(nsh.store)
            # Nothing listens on that port: the failure must not leak the password either.
            with pytest.raises(StoreError) as info:
                nsh.store.ping()
            assert "s3cret-pw" not in str(info.value)
            assert "s3cret-pw" not in str(info.value.url)

    def test_config_error_hides_password(self) -> None:
        """An error about a URL quotes it with the password masked."""
        with pytest.raises(ConfigError) as info:
            open_store("memory://:s3cret-pw@host/x?colour=red")
        assert "s3cret-pw" not in str(info.value)
