"""RedisStore on a real ``redis-server``: URLs, key layout, parity with the memory store, faults.

The behaviour every store shares is in ``test_store_contract.py``; this module checks what is
Redis's own: options and secrets in URLs, the documented key layout under one hash tag, results
identical to the memory store for the same sequence of documents (synthetic stories with site
boilerplate, bridges and repeats, and real reposts when ``../shared/data`` is present), a lookup
that writes nothing, and errors when the server is down, hung or refuses the password.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

from nshash import (  # noqa: E402
    AddResult,
    ConfigError,
    NSHash,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    open_store,
)
from nshash.methods.nshash.redis import RedisStore  # noqa: E402
from tests.redis_server import RedisServer, redis_server_available, start_cluster  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "zh_reposts_dev.jsonl.gz"

#: The hard bound on reporting a dead or hung server (the default timeouts are 1 s).
UNAVAILABLE_BOUND = 2.0
#: How many fields a split table's bucket holds on average before the next one splits
#: (``FILL`` in nshash/stores/lua/nshash_common.lua).
FILL = 16


# -- synthetic stories with site boilerplate ------------------------------------------------


def _sentence(rng: random.Random, lo: int = 14, hi: int = 30) -> str:
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(rng.randint(lo, hi)))


def synthetic_corpus(seed: int = 7) -> list[tuple[str, str]]:
    """(doc_id, text) pairs: stories, reposts on sites with long shared footers, bridges."""
    rng = random.Random(seed)
    footers = [[_sentence(rng, 32, 40), _sentence(rng, 32, 40)] for _ in range(3)]
    headers = [_sentence(rng, 4, 8) for _ in range(3)]
    stories = [[_sentence(rng) for _ in range(rng.randint(3, 7))] for _ in range(40)]
    docs: list[tuple[str, str]] = []

    def publish(doc_id: str, sentences: list[str]) -> None:
        site = rng.randrange(len(footers))
        body = "。".join(sentences) + "。"
        docs.append((doc_id, f"{headers[site]}\n{body}\n" + "。".join(footers[site]) + "。"))

    for s, story in enumerate(stories):
        publish(f"s{s}-0", story)
        for r in range(rng.randint(0, 3)):
            edited = list(story)
            if len(edited) > 3 and rng.random() < 0.5:
                edited.pop(rng.randrange(len(edited)))
            i = rng.randrange(len(edited))
            j = rng.randrange(len(edited[i]))
            edited[i] = edited[i][:j] + "变" + edited[i][j + 1 :]
            publish(f"s{s}-{r + 1}", edited)
    rng.shuffle(docs)
    # Two overlapping fragments of one story reach the store apart (each holds too little of
    # the other), then the whole text bridges and merges them; a digest quoting two unrelated
    # stories in full merges nothing, and one quoting half of each joins the better match.
    story = [_sentence(rng) for _ in range(8)]
    docs.append(("bridge-left", "。".join(story[:5]) + "。"))
    docs.append(("bridge-right", "。".join(story[3:]) + "。"))
    docs.append(("bridge", "。".join(story) + "。"))
    left, right = [_sentence(rng) for _ in range(4)], [_sentence(rng) for _ in range(4)]
    docs.append(("digest-left", "。".join(left) + "。"))
    docs.append(("digest-right", "。".join(right) + "。"))
    docs.append(("digest", "。".join(left + right) + "。"))
    docs.append(("bridge-more", "。".join(left[2:] + right[2:]) + "。"))
    # Exact repeats (no doc id and with one), a short text, and a re-sent doc id.
    docs.append(("", docs[0][1]))
    docs.append(("repeat", docs[1][1]))
    docs.append(("short", "短讯一则"))
    docs.append(("", "短讯一则"))
    docs.append((docs[2][0], "这段新文字不会被看到，因为文档编号已经来过。"))
    return docs


def real_corpus(limit: int) -> list[tuple[str, str]]:
    """The first *limit* documents of ``zh_reposts_dev`` as (doc_id, text)."""
    if not DATA.exists():
        pytest.skip(f"{DATA} is missing (the shared evaluation data is not checked out)")
    out = []
    with gzip.open(DATA, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.append((row["id"], row["text"]))
            if len(out) == limit:
                break
    return out


def _feed(nsh: NSHash, docs: list[tuple[str, str]], batch: int = 0) -> list[AddResult]:
    if batch:
        out: list[AddResult] = []
        for i in range(0, len(docs), batch):
            items = [
                {"text": t, "id": d, "title": f"title {d}"} if d else t
                for d, t in docs[i : i + batch]
            ]
            for r in nsh.add_many(items):
                assert isinstance(r, AddResult), r
                out.append(r)
        return out
    return [nsh.add(t, d or None, title=f"title {d}" if d else None) for d, t in docs]


def _snapshot(nsh: NSHash, doc_ids: list[str]) -> dict[str, Any]:
    stats = nsh.stats()
    return {
        "stats": (
            stats.documents,
            stats.groups,
            stats.fingerprints,
            stats.common_fingerprints,
            stats.last_id,
        ),
        "groups": nsh.groups(min_size=1, limit=10_000),
        "top": nsh.groups(min_size=2, limit=3),
        "each": [nsh.group(i) for i in range(1, stats.last_id + 2)],
        "resolve": [nsh.resolve(i) for i in range(1, stats.last_id + 2)],
        "docs": [nsh.document(d) for d in doc_ids],
    }


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def redis_url(redis_base_url: str) -> str:
    """A fresh prefix on the session's Redis."""
    return f"{redis_base_url}?prefix=rs-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test alone, to stop, pause and restart."""
    if not redis_server_available():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _client(url: str) -> Any:
    return redis.Redis.from_url(url.split("?")[0])


# -- tests -------------------------------------------------------------------------------------


class TestFromUrl:
    def test_defaults(self, redis_base_url: str) -> None:
        """Without options the prefix is 'nshash' and both timeouts are one second."""
        store = RedisStore.from_url(redis_base_url)
        try:
            assert store.prefix == "nshash"
            kwargs = store._client.connection_pool.connection_kwargs
            assert kwargs["socket_timeout"] == 1.0 and kwargs["socket_connect_timeout"] == 1.0
        finally:
            store.close()

    def test_query_and_keyword_options(self, redis_base_url: str) -> None:
        """Query options are read and keyword options override them."""
        url = f"{redis_base_url}?prefix=a&socket_timeout=3"
        store = open_store(url, prefix="b", socket_connect_timeout="0.25")
        try:
            assert isinstance(store, RedisStore) and store.prefix == "b"
            kwargs = store._client.connection_pool.connection_kwargs
            assert kwargs["socket_timeout"] == 3.0 and kwargs["socket_connect_timeout"] == 0.25
        finally:
            store.close()

    @pytest.mark.parametrize(
        "query",
        ["frobnicate=1", "socket_timeout=soon", "socket_timeout=0", "socket_timeout=-1",
         "max_connections=0", "db=x", "db=1", "prefix=", "prefix=a{b}", "prefix=a%20b"],
    )  # fmt: skip
    def test_bad_options(self, query: str) -> None:
        """Unknown options and bad values raise ConfigError before anything connects."""
        with pytest.raises(ConfigError):
            open_store(f"redis://127.0.0.1:1/0?{query}")

    def test_bad_urls(self) -> None:
        """A URL with another scheme or a bad port raises ConfigError."""
        with pytest.raises(ConfigError):
            RedisStore.from_url("http://127.0.0.1:6379/0")
        with pytest.raises(ConfigError):
            RedisStore.from_url("redis://127.0.0.1:notaport/0")
        for path in ("abc", "-1", "1/2"):  # redis-py would use database 0 and say nothing
            with pytest.raises(ConfigError, match="path is a database number"):
                RedisStore.from_url(f"redis://127.0.0.1:1/{path}")

    def test_password_masked_in_repr_and_errors(self) -> None:
        """The password of a URL shows in no repr and no message, even for a bad option."""
        url = "redis://:hunter2-secret@127.0.0.1:1/0?prefix=p"
        store = RedisStore.from_url(url)
        assert "hunter2" not in repr(store) and "hunter2" not in store.url
        assert "***" in repr(store)
        with pytest.raises(StoreUnavailableError) as info:
            store.ping()
        assert "hunter2" not in str(info.value) and "hunter2" not in repr(info.value)
        assert "hunter2" not in str(info.value.__cause__)
        store.close()
        with pytest.raises(ConfigError) as bad:
            open_store(url + "&nope=1")
        assert "hunter2" not in str(bad.value)

    def test_unix_socket(self, tmp_path: Path) -> None:
        """unix:// URLs reach a server on a Unix socket; db comes from the query."""
        if not redis_server_available():
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        sock = tmp_path / "r.sock"
        server = RedisServer(tmp_path / "redis", extra_args=["--unixsocket", str(sock)])
        server.start()
        try:
            with NSHash.open(f"unix://{sock}?db=2&prefix=u") as nsh:
                assert nsh.add("经由本地套接字写入的第一篇测试文章内容。").similar_id == 1
            assert redis.Redis(unix_socket_path=str(sock), db=2).exists("{u}:counter") == 1
        finally:
            server.stop()


def _make_certs(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with openssl."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    paths = {n: directory / f"{n}.pem" for n in ("ca", "ca-key", "cert", "key")}

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=nshash-ca",
        "-keyout",
        str(paths["ca-key"]),
        "-out",
        str(paths["ca"]),
    )
    csr = directory / "server.csr"
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        str(paths["key"]),
        "-out",
        str(csr),
    )
    ext = directory / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(paths["ca"]),
        "-CAkey",
        str(paths["ca-key"]),
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        str(ext),
        "-out",
        str(paths["cert"]),
    )
    return paths  # fmt: skip


class TestTLS:
    def test_rediss_with_private_ca(self, tmp_path: Path) -> None:
        """rediss:// works with ssl_ca_certs; without the CA the certificate is refused."""
        if not redis_server_available():
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        from tests.redis_server import free_port

        certs = _make_certs(tmp_path / "certs")
        tls_port = free_port()
        server = RedisServer(tmp_path / "redis", extra_args=[
            "--tls-port", str(tls_port), "--tls-cert-file", str(certs["cert"]),
            "--tls-key-file", str(certs["key"]), "--tls-ca-cert-file", str(certs["ca"]),
            "--tls-auth-clients", "no",
        ])  # fmt: skip
        try:
            server.start()
        except RuntimeError as exc:
            pytest.skip(f"this redis-server has no TLS: {exc}")
        try:
            url = f"rediss://127.0.0.1:{tls_port}/0?prefix=tls&ssl_ca_certs={certs['ca']}"
            with NSHash.open(url) as nsh:
                assert nsh.add("经过加密连接写入的一篇测试文章，内容足够长。").similar_id == 1
            untrusted = f"rediss://127.0.0.1:{tls_port}/0?prefix=tls"
            with NSHash.open(untrusted) as nsh, pytest.raises(StoreError) as info:
                nsh.stats()
            assert type(info.value) is StoreError and "TLS" in str(info.value)
        finally:
            server.stop()

    def test_tls_options_need_rediss(self) -> None:
        """TLS options on a plain redis:// URL, or a bad ssl_cert_reqs, raise ConfigError."""
        with pytest.raises(ConfigError, match="rediss"):
            open_store("redis://127.0.0.1:1/0?ssl_ca_certs=/tmp/ca.pem")
        with pytest.raises(ConfigError, match="ssl_cert_reqs"):
            open_store("rediss://127.0.0.1:1/0?ssl_cert_reqs=maybe")


class TestConstructor:
    def test_own_client(self, redis_base_url: str) -> None:
        """A redis.Redis client configured by the caller can be wrapped directly."""
        client = redis.Redis.from_url(redis_base_url)
        store = RedisStore(client, prefix=f"own-{uuid.uuid4().hex[:8]}")
        with NSHash(store=store) as nsh:
            result = nsh.add("调用方自己配置的客户端也可以直接使用，这是一篇测试文章。")
            assert result.similar_id == 1
            assert nsh.stats().documents == 1

    def test_decoding_client_refused(self, redis_base_url: str) -> None:
        """A client that decodes replies to str is refused: the store reads bytes."""
        client = redis.Redis.from_url(redis_base_url, decode_responses=True)
        with pytest.raises(ConfigError, match="decode_responses"):
            RedisStore(client)

    def test_resolve_unknown_id(self, redis_url: str) -> None:
        """An id never handed out or merged resolves to itself, however large."""
        with RedisStore.from_url(redis_url) as store:
            assert store.resolve(7) == 7
            assert store.resolve(2**62 + 1) == 2**62 + 1


class TestKeyLayout:
    def test_keys_share_the_hash_tag(self, redis_url: str) -> None:
        """Every key is '{prefix}:...', of the documented type, and all map to one slot."""
        docs = synthetic_corpus()
        with NSHash.open(redis_url) as nsh:
            results = _feed(nsh, docs)
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
        client = _client(redis_url)
        keys = [k.decode() for k in client.scan_iter(match=f"{{{prefix}}}:*", count=1000)]
        assert keys and all(k.startswith(f"{{{prefix}}}:") for k in keys)
        types = {k: client.type(k).decode() for k in keys}
        expected = {
            "split": "hash", "common": "set", "sizes": "zset",
            "docs": "hash", "counter": "string", "documents": "string", "layout": "string",
            "letters": "string",
        }  # fmt: skip
        for name, kind in expected.items():
            assert types.pop(f"{{{prefix}}}:{name}") == kind, name
        # Only merged groups have a parent and only cut sketches a limit: maybe none here.
        assert types.pop(f"{{{prefix}}}:parent", "hash") == "hash"
        assert types.pop(f"{{{prefix}}}:limits", "hash") == "hash"
        buckets = [k for k in types if k.split(":", 1)[1][:2] == "f:"]
        assert types and all(
            (k.split(":", 1)[1][:2], t)
            in {("s:", "set"), ("m:", "list"), ("f:", "hash"), ("x:", "hash"), ("v:", "hash"),
                ("o:", "hash")}
            for k, t in types.items()
        )
        # Each group's first member is a field of the split table o, only later ones in its
        # list m:<id>: one-member groups have no list key.
        firsts = {}
        for k in (k for k in types if k.split(":", 1)[1][:2] == "o:"):
            firsts.update({int(g): d.decode() for g, d in client.hgetall(k).items()})
        count = int(client.hget(f"{{{prefix}}}:split", "o").split()[0])
        with NSHash.open(redis_url) as nsh:
            assert len(firsts) == count == nsh.stats().groups
            for g, first in firsts.items():
                group = nsh.group(g)
                assert group is not None and group.members[0].doc_id == first
                has_list = f"{{{prefix}}}:m:{g}" in types
                assert has_list == (len(group.members) > 1)
                assert len(group.members) == group.size - group.without_id
                head = nsh.store.group_head(g, 2)
                assert head is not None and head.members == group.members[:2]
        assert len({redis.crc.key_slot(k.encode()) for k in keys}) == 1
        # Fingerprints are signed 64-bit decimals, so sets of them are compact intsets; the
        # anchors (exact texts, votes) are spread over small hashes by their last 5 digits,
        # which Redis keeps as compact listpacks.
        exact = [k for k in types if k.split(":", 1)[1][:2] == "x:"]
        assert 0 < sum(client.hlen(k) for k in exact) <= len(results)
        anchors = {h for r in results for h in r.fingerprints}
        fields = [f for k in buckets for f in client.hkeys(k)]
        count, level, pointer = map(int, client.hget(f"{{{prefix}}}:split", "f").split())
        assert len(fields) == len(anchors) == count
        assert len(buckets) == 2**level + pointer > 16  # split past the first sixteen
        assert {int(f) % 2**64 for f in fields} == anchors
        assert any(int(f) < 0 for f in fields)
        assert client.object("encoding", f"{{{prefix}}}:s:1") == b"intset"
        assert client.object("encoding", buckets[0]) == b"listpack"

    def test_split_tables_grow_by_linear_hashing(self, redis_url: str) -> None:
        """Past FILL fields a bucket on average the anchor table splits its next bucket in two
        (linear hashing on the field's last 9 digits): every anchor sits in the bucket the rule
        names, every bucket stays a compact listpack, none is lost (each document, cut, still
        finds its group), and the count is exact (retention's tests see it fall as groups are
        forgotten)."""
        rng = random.Random(3)
        docs = ["。".join(_sentence(rng) for _ in range(14)) for _ in range(560)]
        with NSHash.open(redis_url) as nsh:
            ids = [nsh.add(t, doc_id=f"d{i}").similar_id for i, t in enumerate(docs)]
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            client = _client(redis_url)
            count, level, pointer = map(int, client.hget(f"{{{prefix}}}:split", "f").split())
            assert level >= 8 and FILL * 2**level < count <= FILL * (2**level + pointer)
            fields = 0
            for key in client.scan_iter(match=f"{{{prefix}}}:f:*", count=1000):
                tail = int(key.decode().split(":f:")[1])
                assert client.object("encoding", key) == b"listpack"
                for field in client.hkeys(key):
                    x = int(field.decode()[-9:])
                    want = x % 2**level
                    if want < pointer:
                        want = x % 2 ** (level + 1)
                    assert tail == want, (field, tail, level, pointer)
                    fields += 1
            assert fields == count == nsh.stats().fingerprints
            for i in range(0, 560, 37):
                again = nsh.add("。".join(docs[i].split("。")[2:]), doc_id=f"again{i}")
                assert again.similar_id == ids[i], i

    def test_a_store_with_one_anchor_hash_keeps_it(self, redis_url: str) -> None:
        """A store written before the anchor, exact-text and vote tables were split over
        small hashes keeps each in its one hash: it answers as a split store does, and writes
        there."""
        docs = synthetic_corpus()
        half = len(docs) // 2
        with NSHash.open(redis_url) as nsh:
            _feed(nsh, docs[:half])
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
        client = _client(redis_url)
        buckets = list(client.scan_iter(match=f"{{{prefix}}}:f:*", count=1000))
        assert buckets
        for code, table in (("f", "fp"), ("x", "exact"), ("v", "votes")):
            for key in client.scan_iter(match=f"{{{prefix}}}:{code}:*", count=1000):
                # back to the old layout: one hash a table, no count
                client.hset(f"{{{prefix}}}:{table}", mapping=client.hgetall(key))
                client.delete(key)
        for key in client.scan_iter(match=f"{{{prefix}}}:o:*", count=1000):
            for gid, first in client.hgetall(key).items():  # first members back in the lists
                client.lpush(f"{{{prefix}}}:m:{gid.decode()}", first)
            client.delete(key)
        client.delete(f"{{{prefix}}}:split")
        split_url = f"{redis_url.split('?')[0]}?prefix=split-{uuid.uuid4().hex[:8]}"
        answers = []
        for url in (redis_url, split_url):
            with NSHash.open(url) as nsh:
                if url == split_url:
                    _feed(nsh, docs[:half])
                results = _feed(nsh, docs[half:])
                answers.append(([(r.similar_id, r.duplicate) for r in results],
                                nsh.stats().fingerprints, nsh.query(docs[0][1]),
                                nsh.groups(min_size=1, limit=1000)))  # fmt: skip
        assert answers[0] == answers[1]
        for code in "fxv":
            assert not list(client.scan_iter(match=f"{{{prefix}}}:{code}:*", count=1000))
        assert client.hlen(f"{{{prefix}}}:votes") and client.hlen(f"{{{prefix}}}:exact")
        assert client.hlen(f"{{{prefix}}}:fp") == answers[0][1]

    def test_records_keep_anchors_packed_and_read_the_decimal_ones(self, redis_url: str) -> None:
        """A document record keeps its anchors packed after the header (8 bytes each); a record
        written before, with them in decimal in the header, reads the same: its document, its
        title in the group's members, and a replay of its doc id."""
        import struct

        title = "Tram line \u2014 #3 of 4\n(update)"
        text = synthetic_corpus()[0][1]
        with NSHash.open(redis_url) as nsh:
            first = nsh.add(text, doc_id="a", title=title)
            assert nsh.add(text + "。更多。", doc_id="b").similar_id == first.similar_id
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            client = _client(redis_url)
            docs = f"{{{prefix}}}:docs"
            record = nsh.document("a")
            assert record is not None and record.title == title and record.fingerprints
            raw = client.hget(docs, "a")
            header, _, rest = raw.partition(b"\n")
            n = len(record.fingerprints)
            # ... then the evidence: the score and the verdict's code (a new story: 0, 1)
            assert header.endswith(b" #%d 0 1" % n) and len(rest) == 8 * n + len(title.encode())
            assert (record.score, record.verdict) == (0.0, "new story")
            assert struct.unpack_from(f"<{n}Q", rest) == record.fingerprints
            signed = struct.unpack(f">{n}q", struct.pack(f">{n}Q", *record.fingerprints))
            old = header.rsplit(b" ", 3)[0] + b" " + b",".join(b"%d" % h for h in signed)
            client.hset(docs, "a", old + b"\n" + title.encode())
            assert nsh.document("a") == dataclasses.replace(record, score=None, verdict=None)
            group = nsh.group(first.similar_id)
            assert group is not None and [m.title for m in group.members] == [title, None]
            again = nsh.add(text, doc_id="a", title=title)
            assert (again.similar_id, again.duplicate) == (first.similar_id, first.duplicate)
            fields = header.split(b" ")
            untitled = b" ".join([*fields[:3], b"0", *fields[4:]])
            for bad in (header + b"\n" + rest[:-len(title.encode()) - 3],  # torn anchors
                        untitled + b"\n" + rest):  # untitled, yet bytes past the anchors
                client.hset(docs, "a", bad)
                with pytest.raises(StoreCorruptError, match="unreadable"):
                    nsh.document("a")
            client.hset(docs, "a", header + b"\n" + rest[:-len(title.encode()) - 3])
            with pytest.raises(StoreCorruptError, match="unreadable"):
                nsh.group(first.similar_id)  # the script reads the title past the anchors

    def test_a_prefix_written_by_a_newer_layout_is_refused(self, redis_url: str) -> None:
        """A write marks the prefix with the layout it wrote ({P}:layout); a prefix marked
        with a later one (a newer nshash's) is refused by every call, reads included, and is
        left as it was."""
        text = synthetic_corpus()[0][1]
        with NSHash.open(redis_url) as nsh:
            nsh.add(text, doc_id="a")
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            client = _client(redis_url)
            key = f"{{{prefix}}}:layout"
            assert client.get(key) == b"4"
            client.set(key, b"5")
            before = client.dbsize()
            for call in (lambda: nsh.add(text + "。又一段。", doc_id="b"),
                         lambda: nsh.query(text), lambda: nsh.group(1), nsh.stats):
                with pytest.raises(StoreError, match="newer nshash"):
                    call()
            assert client.get(key) == b"5" and client.dbsize() == before

    @pytest.mark.parametrize("begun", ["new", "marked-3", "unmarked"])
    def test_new_prefixes_keep_narrow_sketches_and_older_ones_wide(
        self, redis_base_url: str, begun: str
    ) -> None:
        """A new prefix is layout 4: its sketch sets hold 31-bit values, which Redis keeps as
        an intset of 32-bit integers. A prefix a layout-3 client began (marked 3, or holding
        groups from before the mark) keeps 53-bit values and layout 3 through later writes,
        so its groups keep matching."""
        from nshash.text.fingerprint import NARROW_BITS, SKETCH_BITS
        from tests.test_store_contract import ZH_LIBRARY, ZH_WATER, ZH_WATER_REPOST

        prefix = f"width-{begun}-{uuid.uuid4().hex[:6]}"
        client = _client(redis_base_url)
        key = f"{{{prefix}}}:layout"
        if begun == "marked-3":
            client.set(key, b"3")
        with NSHash.open(f"{redis_base_url}?prefix={prefix}") as nsh:
            if begun == "unmarked":  # groups written before the mark, then the mark taken off
                client.set(key, b"3")
                nsh.add(ZH_LIBRARY, doc_id="old")
                client.delete(key)
            first = nsh.add(ZH_WATER, doc_id="w")
            assert nsh.add(ZH_WATER_REPOST, doc_id="r").similar_id == first.similar_id
            assert nsh.query(ZH_WATER_REPOST) == first.similar_id
            values = [int(v) for v in client.smembers(f"{{{prefix}}}:s:{first.similar_id}")]
            encoding = client.object("encoding", f"{{{prefix}}}:s:{first.similar_id}")
        wide = begun != "new"
        assert client.get(key) == (b"3" if wide else b"4")
        bits = SKETCH_BITS if wide else NARROW_BITS
        assert 1 << (bits - 4) <= max(values) < 1 << bits
        assert encoding == b"intset"  # 64-bit integers when wide, 32-bit when narrow

    def test_the_script_narrows_what_a_client_sent_whole(self, redis_base_url: str) -> None:
        """The client narrows a document's sketch for a prefix of narrow sketches; one sent
        whole (a client that read the prefix before it was made again) is narrowed by the
        script the same way: the same groups and the same sketch sets."""
        from tests.test_store_contract import ZH_LIBRARY, ZH_WATER, ZH_WATER_REPOST

        client = _client(redis_base_url)
        seen = []
        for whole in (False, True):
            prefix = f"sent-{whole}-{uuid.uuid4().hex[:6]}"
            with NSHash.open(f"{redis_base_url}?prefix={prefix}") as nsh:
                store: Any = nsh.store
                assert nsh.query(ZH_WATER) is None and store._narrow is True
                if whole:
                    store._narrow = False
                ids = [nsh.add(t, doc_id=f"d{i}").similar_id
                       for i, t in enumerate((ZH_WATER, ZH_WATER_REPOST, ZH_LIBRARY))]
                why = nsh.explain(ZH_WATER_REPOST)
                sets = [client.smembers(f"{{{prefix}}}:s:{g}") for g in sorted(set(ids))]
            seen.append((ids, why.similar_id, [c.shared for c in why.candidates], sets))
            assert client.get(f"{{{prefix}}}:layout") == b"4"
        assert seen[0] == seen[1] and seen[0][0][0] == seen[0][0][1] != seen[0][0][2]

    def test_a_sketch_narrowed_for_another_layout_is_refused_then_sent_again(
        self, redis_base_url: str
    ) -> None:
        """A client that read a new prefix (narrow sketches), which a layout-3 client then
        began, has its narrowed document refused before anything is written; an add is sent
        again whole, a query fails once with StoreError and works on the next call."""
        from tests.test_store_contract import ZH_WATER, ZH_WATER_REPOST

        prefix = f"race-{uuid.uuid4().hex[:6]}"
        client = _client(redis_base_url)
        with NSHash.open(f"{redis_base_url}?prefix={prefix}") as nsh:
            store: Any = nsh.store
            assert nsh.query(ZH_WATER) is None and store._narrow is True
            client.set(f"{{{prefix}}}:layout", b"3")  # as a layout-3 client leaves it
            first = nsh.add(ZH_WATER, doc_id="w")
            assert store._narrow is False and client.get(f"{{{prefix}}}:layout") == b"3"
            values = [int(v) for v in client.smembers(f"{{{prefix}}}:s:{first.similar_id}")]
            assert max(values) >= 1 << 40  # 53-bit values
            store._narrow = True
            with pytest.raises(StoreError, match="WIDTH"):
                nsh.query(ZH_WATER_REPOST)
            assert nsh.query(ZH_WATER_REPOST) == first.similar_id
            assert nsh.stats().documents == 1

    def test_prefixes_are_independent(self, redis_base_url: str) -> None:
        """Two prefixes in one Redis keep separate counters and groups."""
        a = NSHash.open(f"{redis_base_url}?prefix=ind-a-{uuid.uuid4().hex[:6]}")
        b = NSHash.open(f"{redis_base_url}?prefix=ind-b-{uuid.uuid4().hex[:6]}")
        try:
            text = "两个命名空间互不干扰，这一篇文章在两边都应得到编号一。"
            assert a.add("另一篇只写进第一个命名空间里的文章，编号应是一。").similar_id == 1
            assert a.add(text).similar_id == 2
            assert b.add(text).similar_id == 1
            assert b.stats().documents == 1
        finally:
            a.close()
            b.close()


def compare_with_memory(docs: list[tuple[str, str]], url: str, batch: int) -> list[AddResult]:
    """Feed *docs* to memory:// and to *url*; assert identical answers, tables and queries."""
    ids = sorted({d for d, _ in docs if d})
    with NSHash.open("memory://") as mem, NSHash.open(url) as red:
        expected = _feed(mem, docs)
        got = _feed(red, docs, batch)
        assert got == expected
        assert _snapshot(red, ids) == _snapshot(mem, ids)
        texts = [t for _, t in docs[::3]] + ["一篇从来没有出现过的文章，查询时应当得不到编号。"]
        assert [red.query(t) for t in texts] == [mem.query(t) for t in texts]
    return expected


class TestParity:
    def _compare(self, docs: list[tuple[str, str]], url: str, batch: int) -> list[AddResult]:
        return compare_with_memory(docs, url, batch)

    def test_synthetic_sequence_one_at_a_time(self, redis_url: str) -> None:
        """Stories, boilerplate, a bridge merge and repeats give the memory store's answers."""
        results = self._compare(synthetic_corpus(), redis_url, batch=0)
        assert any(r.merged_from for r in results), "the corpus must exercise a merge"
        assert any(r.replayed for r in results), "the corpus must exercise a replay"
        assert sum(not r.duplicate for r in results) < len(results) - 40

    def test_synthetic_sequence_pipelined(self, redis_url: str) -> None:
        """add_many in batches of 17 answers exactly like the memory store one at a time."""
        self._compare(synthetic_corpus(seed=11), redis_url, batch=17)

    def test_boilerplate_marked_common(self, redis_url: str) -> None:
        """Refused matches mark fingerprints common in Redis exactly as in memory."""
        docs = synthetic_corpus()
        with NSHash.open("memory://") as mem, NSHash.open(redis_url) as red:
            _feed(mem, docs)
            _feed(red, docs)
            assert red.stats().common_fingerprints == mem.stats().common_fingerprints > 0

    def test_real_reposts(self, redis_url: str) -> None:
        """300 real documents of zh_reposts_dev give identical ids, flags and merges."""
        self._compare(real_corpus(300), redis_url, batch=0)

    def test_real_reposts_pipelined(self, redis_url: str) -> None:
        """The same 300 documents through add_many (batches of 100) give the same answers."""
        self._compare(real_corpus(300), redis_url, batch=100)


class TestReadOnly:
    def test_lookup_writes_nothing(self, redis_url: str) -> None:
        """Queries and reads leave every key byte-for-byte as it was."""
        docs = synthetic_corpus()
        with NSHash.open(redis_url) as nsh:
            _feed(nsh, docs[:60])
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            client = _client(redis_url)

            def dump() -> dict[bytes, Any]:
                # Contents, not DUMP: a hash table's iteration order may change on reads.
                read = {
                    b"hash": client.hgetall,
                    b"set": client.smembers,
                    b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                    b"list": lambda k: client.lrange(k, 0, -1),
                    b"string": client.get,
                }
                return {
                    k: read[client.type(k)](k) for k in client.scan_iter(match=f"{{{prefix}}}:*")
                }

            before = dump()
            for _, text in docs:
                nsh.query(text)
            nsh.groups(1, 100)
            nsh.group(1)
            nsh.stats()
            nsh.document(docs[0][0])
            assert dump() == before

    def test_read_script_cannot_write(self, redis_url: str) -> None:
        """The read-only script is flagged no-writes, so Redis itself refuses a write in it."""
        from nshash.stores.scripts import lua_script

        assert lua_script("nshash_read").startswith("#!lua flags=no-writes\n")
        assert lua_script("keyed_read").startswith("#!lua flags=no-writes\n")
        client = _client(redis_url)
        with pytest.raises(redis.ResponseError, match="(?i)write"):
            client.eval("#!lua flags=no-writes\nreturn redis.call('SET', KEYS[1], 'x')", 1, "k")


class TestReplica:
    def test_queries_on_a_replica(self, own_server: RedisServer, tmp_path: Path) -> None:
        """A read-only replica answers queries and reads like its primary and refuses adds."""
        _client(own_server.url).config_set("repl-diskless-sync-delay", 0)  # sync at once
        replica = RedisServer(
            tmp_path / "replica", extra_args=["--replicaof", "127.0.0.1", str(own_server.port)]
        )
        replica.start()
        try:
            docs = synthetic_corpus()[:40]
            with NSHash.open(own_server.url + "?prefix=rep") as primary:
                _feed(primary, docs)
                assert _client(own_server.url).wait(1, 10_000) == 1
                expected = [primary.query(t) for _, t in docs]
                stats = primary.stats()
            with NSHash.open(replica.url + "?prefix=rep") as nsh:
                assert [nsh.query(t) for _, t in docs] == expected
                assert nsh.stats() == stats
                with pytest.raises(StoreError) as info:
                    nsh.add("副本是只读的，这篇文章不能写进去，存储应当报错。")
                assert type(info.value) is StoreError and "read only" in str(info.value)
        finally:
            replica.stop()


class TestErrors:
    def test_wrong_type_is_store_error(self, redis_url: str) -> None:
        """A key of the wrong type under the prefix gives StoreError, not a redis exception."""
        with NSHash.open(redis_url) as nsh:
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            _client(redis_url).set(f"{{{prefix}}}:fp", "oops")
            with pytest.raises(StoreError) as info:
                nsh.add("一篇会撞上错误键类型的文章，存储应当报错而不是崩溃。")
            assert type(info.value) is StoreError and "WRONGTYPE" in str(info.value)

    def test_bad_item_fails_alone_in_a_batch(self, redis_url: str) -> None:
        """In add_many, an item whose record is corrupt yields its error; the others go in."""
        with NSHash.open(redis_url) as nsh:
            prefix = nsh.store.prefix  # type: ignore[attr-defined]
            _client(redis_url).hset(f"{{{prefix}}}:docs", "bad", "garbage")
            texts = [
                "第一篇正常的文章，内容足够长可以作为锚点。",
                "第三篇正常文章，内容也足够长可以作为锚点。",
            ]
            out = nsh.add_many(
                [{"text": texts[0], "id": "a"}, {"text": "任意内容的文章也不要紧。", "id": "bad"},
                 {"text": texts[1], "id": "c"}, ""]
            )  # fmt: skip
            assert [type(r).__name__ for r in out] == [
                "AddResult", "StoreCorruptError", "AddResult", "EmptyDocumentError"
            ]  # fmt: skip
            assert isinstance(out[0], AddResult) and isinstance(out[2], AddResult)
            assert (out[0].similar_id, out[2].similar_id) == (1, 2)
            with pytest.raises(StoreCorruptError):
                nsh.document("bad")

    def test_closed_store(self, redis_url: str) -> None:
        """Every call after close raises StoreClosedError; closing twice is harmless."""
        store = RedisStore.from_url(redis_url)
        store.close()
        store.close()
        with pytest.raises(StoreClosedError):
            store.ping()
        with pytest.raises(StoreClosedError):
            store.stats()

    def test_script_cache_flushed(self, redis_url: str) -> None:
        """After SCRIPT FLUSH the scripts are loaded again, one at a time and pipelined."""
        with NSHash.open(redis_url) as nsh:
            nsh.add("脚本缓存清空之前写入的第一篇文章，内容足够长。")
            _client(redis_url).script_flush()
            assert nsh.add("脚本缓存清空之后写入的第二篇文章，内容足够长。").similar_id == 2
            _client(redis_url).script_flush()
            out = nsh.add_many(["脚本缓存再次清空之后批量写入的第三篇文章。"])
            assert isinstance(out[0], AddResult) and out[0].similar_id == 3
            _client(redis_url).script_flush()
            assert nsh.query("脚本缓存清空之前写入的第一篇文章，内容足够长。") == 1


class TestFaults:
    def test_stopped_server(self, own_server: RedisServer) -> None:
        """With Redis stopped, add fails fast with StoreUnavailableError; it recovers later."""
        with NSHash.open(own_server.url + "?prefix=f") as nsh:
            assert nsh.add("服务器停止之前写入的一篇文章，内容足够长。").similar_id == 1
            own_server.stop()
            start = time.monotonic()
            with pytest.raises(StoreUnavailableError):
                nsh.add("服务器停止期间尝试写入的一篇文章，内容足够长。")
            assert time.monotonic() - start < UNAVAILABLE_BOUND
            with pytest.raises(StoreUnavailableError):
                nsh.store.ping()
            out = nsh.add_many(
                ["服务器停止期间批量写入的文章一号。", "服务器停止期间批量写入的文章二号。"]
            )
            assert [type(r) for r in out] == [StoreUnavailableError, StoreUnavailableError]
            own_server.start()  # empty again: no persistence in this test
            result = nsh.add("服务器恢复之后写入的一篇文章，内容足够长。")
            assert result.similar_id == 1 and not result.duplicate
            nsh.store.ping()

    def test_hung_server(self, own_server: RedisServer) -> None:
        """A server that accepts but never answers is reported within the bound; a retry
        with the same doc_id after it wakes up is safe."""
        with NSHash.open(own_server.url + "?prefix=h") as nsh:
            nsh.add("服务器暂停之前写入的一篇文章，内容足够长。", "before")
            own_server.pause()
            try:
                start = time.monotonic()
                with pytest.raises(StoreUnavailableError):
                    nsh.add("服务器暂停期间写入的一篇文章，内容足够长。", "during")
                assert time.monotonic() - start < UNAVAILABLE_BOUND
            finally:
                own_server.resume()
            again = nsh.add("服务器暂停期间写入的一篇文章，内容足够长。", "during")
            assert again.similar_id == 2
            assert nsh.stats().documents == 2
            assert nsh.group(2) is not None and nsh.group(2).doc_ids == ["during"]  # type: ignore[union-attr]

    def test_password(self, tmp_path: Path) -> None:
        """The right password works; a wrong one is a StoreError that does not show it."""
        if not redis_server_available():
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        server = RedisServer(tmp_path / "redis", extra_args=["--requirepass", "s3cret-pw"])
        server.start()
        try:
            good = f"redis://:s3cret-pw@127.0.0.1:{server.port}/0?prefix=pw"
            with NSHash.open(good) as nsh:
                assert nsh.add("需要密码才能写入的一篇文章，内容足够长。").similar_id == 1
                assert "s3cret" not in repr(nsh) and "s3cret" not in repr(nsh.store)
            bad = f"redis://:wrong-pw@127.0.0.1:{server.port}/0?prefix=pw"
            with NSHash.open(bad) as nsh, pytest.raises(StoreError) as info:
                nsh.add("密码错误时尝试写入的一篇文章，内容足够长。")
            assert type(info.value) is StoreError
            assert "wrong-pw" not in str(info.value) and "***" in str(info.value)
            server.stop()
            with NSHash.open(good) as nsh, pytest.raises(StoreUnavailableError) as down:
                nsh.add("服务器停止时写入的一篇文章，内容足够长。")
            assert "s3cret" not in str(down.value)
        finally:
            server.stop()


@pytest.mark.slow
class TestCluster:
    def test_namespace_served_by_its_node(self, tmp_path: Path) -> None:
        """On a 3-node Redis Cluster, a URL naming any node reaches the node owning the
        namespace's slot (following MOVED) and answers like the memory store."""
        import shutil

        if not redis_server_available() or shutil.which("redis-cli") is None:
            pytest.skip("redis-server and redis-cli are needed (apt-get install redis-server)")
        servers = start_cluster(tmp_path / "cluster")
        try:
            entry = redis.Redis(port=servers[0].port)
            owners: dict[int, str] = {}
            for k in range(200):
                try:
                    entry.get(f"{{cl{k}}}:counter")
                    owners.setdefault(servers[0].port, f"cl{k}")
                except redis.exceptions.MovedError as moved:
                    owners.setdefault(moved.port, f"cl{k}")
                if len(owners) == len(servers):
                    break
            assert len(owners) == len(servers)
            for port, prefix in owners.items():
                url = f"{servers[0].url}?prefix={prefix}"
                compare_with_memory(synthetic_corpus(seed=port), url, batch=17)
                with NSHash.open(url) as nsh:  # a fresh store whose first call is a read
                    assert nsh.query(synthetic_corpus(seed=port)[0][1]) is not None
                    assert nsh.stats().documents > 0
                for server in servers:
                    keys = list(redis.Redis(port=server.port).scan_iter(match=f"{{{prefix}}}:*"))
                    assert bool(keys) == (server.port == port)
        finally:
            for server in servers:
                server.stop()


class TestScripts:
    """Each method's scripts are .lua files of the package; includes expand in place."""

    def test_every_script_loads_and_expands_its_includes(self) -> None:
        from importlib.resources import files

        from nshash.stores.scripts import lua_script

        names = sorted(
            p.name[:-4]
            for p in (files("nshash.stores") / "lua").iterdir()
            if p.name.endswith(".lua")
        )
        assert {"nshash_assign", "nshash_read", "keyed_read", "keyed_write"} <= set(names)
        assert "simhash_assign" in names
        for name in names:
            text = lua_script(name)
            assert "-- include:" not in text, name
        common = lua_script("nshash_common")
        assert common in lua_script("nshash_assign") and common in lua_script("nshash_read")
        assert lua_script("nshash_assign").startswith("#!lua\n")
