"""Benchmark: every store at scale, on a synthetic corpus built from ``zh_news``, against the seed.

The corpus (:class:`Corpus`) has distinct originals of realistic length and 10 % reposts of
earlier originals (light and heavy edits); see ``bench/README.md``. Each store runs in a
subprocess of its own (so its RSS is its own), documents are fed one at a time through
``NSHash.open(url).add(text, doc_id)`` (Redis: ``add_many`` batches), and the bench prints per
store and size: docs/s overall and per fifth of the run, bytes per document, the longest single
``add``, reopen time, Redis server CPU per document, and ratios against the seed algorithm
(``bench/seed_nshash.py``) measured in the same run.

Usage::

    python bench/bench_scale.py                          # 20,000 documents, every store
    python bench/bench_scale.py --sizes 10000,50000,200000 --stores memory,leveldb,seed
    python bench/bench_scale.py --docs 200000 --json > scale.json
    python bench/bench_scale.py --docs 50000 --stores leveldb --count-gets
    python bench/bench_scale.py --docs 200000 --retention 40000   # a window of 40,000 docs

With ``--retention W`` every store but the seed is opened with ``?retention=Ws`` on a clock
that moves one second per document, so the stream runs several windows long; the bench then
prints what the store holds at the end of each fifth (RSS, files or ``used_memory``), which
stays flat once the stream is past the window.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Where the shared data lives: ``../shared/data`` next to the repository (or ``--data-dir``).
DATA_DIR = ROOT.parent / "shared" / "data"
DATA_FILE = "zh_news.jsonl.gz"

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: Every store the bench knows, in the order it runs them.
STORES = ("seed", "memory", "memfile", "leveldb", "sqlite", "redis", "redis-add")
DEFAULT_STORES = ("seed", "memory", "memfile", "leveldb", "sqlite", "redis")

#: Where clauses end inside a sentence, and where sentences end.
_CLAUSE = re.compile(r"(?<=[，、；：])")
_SENTENCE = re.compile(r"(?<=[。！？])")
_DIGITS = re.compile(r"\d+")

_SITES = ("新华网", "人民网", "央视网", "中国新闻网", "环球网", "澎湃新闻", "新浪新闻", "网易新闻")
_HEADERS = ("来源：{site}", "原标题：{title}", "本文来源：{site} 编辑：{editor}", "{site}讯")
_FOOTERS = (
    "（责任编辑：{editor}）",
    "本文转载自{site}，版权归原作者所有，如有侵权请联系删除。",
    "声明：转载此文是出于传递更多信息之目的。若有来源标注错误或侵犯了您的合法权益，"
    "请作者持权属证明与本网联系，我们将及时更正、删除，谢谢。",
)
_EDITORS = ("王伟", "李娜", "张敏", "刘洋", "陈静", "杨帆", "赵磊", "黄丽")


# -- the corpus ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Doc:
    """One document of the stream: *kind* is ``original``, ``light`` or ``heavy``."""

    doc_id: str
    text: str
    kind: str
    #: The index of the original a repost copies (its own index for an original).
    original: int


class Corpus:
    """A deterministic stream of distinct originals and reposts built from ``zh_news``.

    **Originals.** Original *i* takes the shape of a random ``zh_news`` item (its paragraphs,
    the sentences of each and the clauses of each sentence, so lengths are those of the real
    items) and fills every clause with a clause drawn at random from the whole corpus. Two
    originals then share no sentence of more than one clause (the pool has ~10^5 clauses), so
    they are distinct for a sentence-hash method, yet every sentence is real news phrasing
    (and the recurring official phrasing of the source comes along). Splicing whole paragraphs
    instead would make originals share whole sentences once the stream is longer than the
    source, i.e. make them near-duplicates of each other. Original *i* depends only on
    ``(seed, i)``, so a repost regenerates it instead of keeping every text in memory.

    **Reposts.** A ``repost`` share of the stream (10 %) copies an earlier original, mostly a
    recent one (news is reposted within days): *light* (half) wraps it in a site header and
    footer and changes a few characters; *heavy* (half) also cuts it to 60-90 %, changes the
    figures, drops a sentence or two and may add a one-sentence lead.
    """

    def __init__(
        self, path: Path = DATA_DIR / DATA_FILE, seed: int = 14, repost: float = 0.10
    ) -> None:
        self.seed = seed
        self.repost = repost
        self.clauses: list[str] = []
        #: Per source item: per paragraph, the clause count of each sentence.
        self.shapes: list[tuple[tuple[int, ...], ...]] = []
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                content = str(json.loads(line).get("content") or "")
                shape = []
                for para in content.split("\n"):
                    sentences = [s for s in _SENTENCE.split(para.strip()) if s]
                    counts = []
                    for sentence in sentences:
                        parts = [c for c in _CLAUSE.split(sentence) if c]
                        self.clauses.extend(parts)
                        counts.append(len(parts))
                    if counts:
                        shape.append(tuple(counts))
                if shape:
                    self.shapes.append(tuple(shape))
        if not self.shapes:
            raise ValueError(f"{path} holds no text")

    def original(self, i: int) -> str:
        """The text of original *i* (the same for the same seed, every time)."""
        rng = random.Random(self.seed * 1_000_003 + i)
        shape = self.shapes[rng.randrange(len(self.shapes))]
        clauses, n = self.clauses, len(self.clauses)
        return "\n".join(
            "".join("".join(clauses[rng.randrange(n)] for _ in range(k)) for k in para)
            for para in shape
        )

    def _wrap(self, rng: random.Random, text: str) -> str:
        fill = {
            "site": rng.choice(_SITES),
            "editor": rng.choice(_EDITORS),
            "title": text.split("\n", 1)[0][:20],
        }
        head = rng.choice(_HEADERS).format(**fill)
        foot = rng.choice(_FOOTERS).format(**fill)
        return f"{head}\n{text}\n{foot}"

    def _typos(self, rng: random.Random, text: str, k: int) -> str:
        chars = list(text)
        for _ in range(k):
            j = rng.randrange(len(chars))
            chars[j] = self.clauses[rng.randrange(len(self.clauses))][:1] or chars[j]
        return "".join(chars)

    def _heavy(self, rng: random.Random, text: str) -> str:
        text = _DIGITS.sub(lambda m: str(rng.randrange(1, 10 ** len(m.group()) + 1)), text)
        sentences = [s for s in _SENTENCE.split(text) if s]
        for _ in range(min(rng.randint(1, 2), max(0, len(sentences) - 3))):
            sentences.pop(rng.randrange(len(sentences)))
        text = "".join(sentences)
        text = text[: max(1, int(len(text) * rng.uniform(0.6, 0.9)))]
        if rng.random() < 0.5:
            lead = "".join(self.clauses[rng.randrange(len(self.clauses))] for _ in range(3))
            text = f"{lead}。\n{text}"
        return text

    def __iter__(self) -> Iterator[Doc]:
        return self.stream()

    def stream(self, n: int | None = None) -> Iterator[Doc]:
        """The first *n* documents of the stream (endless without *n*)."""
        rng = random.Random(self.seed)
        originals = 0
        count = 0
        while n is None or count < n:
            if originals > 0 and rng.random() < self.repost:
                back = min(originals, int(rng.expovariate(1 / 2000)) + 1)
                src = originals - back
                r = random.Random(self.seed * 7_919 + count)
                text = self._typos(r, self.original(src), r.randint(1, 3))
                kind = "light" if r.random() < 0.5 else "heavy"
                if kind == "heavy":
                    text = self._heavy(r, text)
                yield Doc(f"r{count}-{kind}-of-o{src}", self._wrap(r, text), kind, src)
            else:
                yield Doc(f"o{originals}", self.original(originals), "original", originals)
                originals += 1
            count += 1


# -- measuring one store, in a process of its own -------------------------------------------
def rss_bytes() -> int:
    """This process's resident set size now (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dir_bytes(path: str) -> int:
    """The bytes of every file under *path*."""
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(base, name))
    return total


class GetCounter:
    """Stands for a ``plyvel.DB``: counts ``get`` calls per table (first key byte) and hits."""

    TABLES = {
        b"\x00": "meta", b"f": "fingerprint", b"x": "exact", b"c": "common", b"v": "votes",
        b"p": "parent", b"s": "sketch", b"z": "size", b"m": "member", b"d": "doc",
        b"h": "hour", b"t": "seen",
    }  # fmt: skip

    def __init__(self, db: Any) -> None:
        self._db = db
        self.gets: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        #: Gets of a key already read during the same ``add`` (see :meth:`next_doc`).
        self.repeats: Counter[str] = Counter()
        self._keys: set[bytes] = set()

    def next_doc(self) -> None:
        """A new ``add`` starts: gets from now on are not repeats of earlier ones."""
        self._keys.clear()

    def get(self, key: bytes, *args: Any, **kwargs: Any) -> Any:
        value = self._db.get(key, *args, **kwargs)
        table = self.TABLES.get(key[:1], repr(key[:1]))
        self.gets[table] += 1
        if value is not None:
            self.hits[table] += 1
        if key in self._keys:
            self.repeats[table] += 1
        self._keys.add(key)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _redis_info(client: Any) -> dict[str, float]:
    cpu = client.info("cpu")
    mem = client.info("memory")
    stats = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    return {
        "cpu": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "used_memory": float(mem["used_memory"]),
        "evalsha_calls": float(evalsha.get("calls", 0)),
        "evalsha_usec": float(evalsha.get("usec", 0)),
    }


def run_worker(store: str, n: int, seed: int, batch: int, redis_url: str | None,
               count_gets: bool, data: Path = DATA_DIR / DATA_FILE,
               retention: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Feed *n* documents to one *store*; return its figures (runs in its own process).

    With *retention* (documents), the store forgets groups older than that many documents
    (a clock moving one second per document) and its size is measured at every fifth."""
    from nshash import AddResult, NSHash

    corpus = Corpus(data, seed=seed)
    tmp = tempfile.mkdtemp(prefix="nshash-bench-scale-")
    fifths = [0.0] * 5
    longest = 0.0
    out: dict[str, Any] = {"store": store, "docs": n}
    originals = new_groups = reposts = joined = 0
    # The bench's own bookkeeping is allocated before the RSS baseline, so it is not counted.
    group_of = array("q", [-1]) * (n + 1)
    seen = bytearray(2 * n + 2)

    def score(doc: Doc, gid: int) -> None:
        nonlocal originals, new_groups, reposts, joined
        known = 0 <= gid < len(seen) and seen[gid]
        if doc.kind == "original":
            originals += 1
            new_groups += not known
            group_of[doc.original] = gid
        else:
            reposts += 1
            joined += group_of[doc.original] == gid
        if 0 <= gid < len(seen):
            seen[gid] = 1

    try:
        gc.collect()
        # The corpus's source (some 600,000 clauses in lists) is the bench's, not the store's:
        # moved out of the collector's sight, so its passes time the store's objects only.
        gc.freeze()
        rss0 = rss_bytes()
        if store == "seed":
            from seed_nshash import SeedNSHash

            seed_nsh = SeedNSHash()
            for k, doc in enumerate(corpus.stream(n)):
                t0 = time.perf_counter()
                gid = seed_nsh.get_similar(doc.text)
                dt = time.perf_counter() - t0
                fifths[k * 5 // n] += dt
                longest = max(longest, dt)
                score(doc, gid)
            out["bytes_per_doc"] = (rss_bytes() - rss0) / n
            out["bytes_what"] = "RSS delta"
        else:
            client = None
            if store == "memory":
                url = "memory://"
            elif store == "memfile":
                url = f"memory://{tmp}/scale.pkl"
            elif store == "leveldb":
                url = f"leveldb://{tmp}/db"
            elif store == "sqlite":
                url = f"sqlite://{tmp}/scale.db"
            else:
                import redis

                assert redis_url is not None
                client = redis.Redis.from_url(redis_url)
                client.config_resetstat()
                url = f"{redis_url}?prefix=scale-{uuid.uuid4().hex[:8]}"
            now = [1_700_000_000.0]
            if retention is not None:
                url += f"{'&' if '?' in url else '?'}retention={retention}s"
                out["retention_docs"] = retention
            nsh = NSHash.open(url, clock=lambda: now[0])
            sizes: list[float] = []
            ends = {n * f // 5 for f in range(1, 6)} if retention is not None else set()

            def measure(k: int) -> None:
                """At the end of each fifth (with a window): what the store holds now."""
                if k + 1 not in ends:
                    return
                if store == "memory":
                    gc.collect()
                    sizes.append(rss_bytes() - rss0)
                elif client is not None:
                    sizes.append(_redis_info(client)["used_memory"] - before["used_memory"])
                else:
                    sizes.append(dir_bytes(tmp))

            counter = None
            if count_gets and store == "leveldb":
                counter = GetCounter(nsh.store._kv.db)  # type: ignore[attr-defined]
                nsh.store._kv.db = counter  # type: ignore[attr-defined]
            before = _redis_info(client) if client is not None else None
            if store == "redis":
                docs = corpus.stream(n)
                k = 0
                while k < n:
                    chunk = [next(docs) for _ in range(min(batch, n - k))]
                    items = [{"text": d.text, "id": d.doc_id} for d in chunk]
                    t0 = time.perf_counter()
                    results = nsh.add_many(items)
                    dt = time.perf_counter() - t0
                    fifths[k * 5 // n] += dt
                    longest = max(longest, dt)
                    for d, r in zip(chunk, results, strict=True):
                        assert isinstance(r, AddResult), r
                        score(d, r.similar_id)
                    for _ in chunk:
                        now[0] += 1
                        measure(k)
                        k += 1
                if sizes:
                    out["bytes_per_fifth"] = sizes
                out["longest_is"] = f"add_many of {batch}"
            else:
                for k, doc in enumerate(corpus.stream(n)):
                    if counter is not None:
                        counter.next_doc()
                    t0 = time.perf_counter()
                    result = nsh.add(doc.text, doc.doc_id)
                    dt = time.perf_counter() - t0
                    fifths[k * 5 // n] += dt
                    longest = max(longest, dt)
                    score(doc, result.similar_id)
                    now[0] += 1
                    measure(k)
            if sizes:
                out["bytes_per_fifth"] = sizes
            if counter is not None:
                out["gets_per_doc"] = {t: c / n for t, c in counter.gets.most_common()}
                out["hits_per_doc"] = {t: c / n for t, c in counter.hits.most_common()}
                out["gets_per_doc_total"] = sum(counter.gets.values()) / n
                out["repeat_gets_per_doc"] = {t: c / n for t, c in counter.repeats.most_common()}
                nsh.store._kv.db = counter._db  # type: ignore[attr-defined]
            if store == "memory":
                gc.collect()
                out["bytes_per_doc"] = (rss_bytes() - rss0) / n
                out["bytes_what"] = "RSS delta"
            if client is not None and before is not None:
                after = _redis_info(client)
                out["bytes_per_doc"] = (after["used_memory"] - before["used_memory"]) / n
                out["bytes_what"] = "used_memory delta"
                out["server_cpu_us_per_doc"] = (after["cpu"] - before["cpu"]) * 1e6 / n
                out["evalsha_calls"] = after["evalsha_calls"] - before["evalsha_calls"]
                out["evalsha_us_per_doc"] = (after["evalsha_usec"] - before["evalsha_usec"]) / n
            t0 = time.perf_counter()
            nsh.close()
            out["close_s"] = time.perf_counter() - t0
            if store in ("memfile", "leveldb", "sqlite"):
                out["bytes_per_doc"] = dir_bytes(tmp) / n
                out["bytes_what"] = "files after close"
                if store == "memfile":
                    out["files"] = {name: os.path.getsize(os.path.join(tmp, name))
                                    for name in sorted(os.listdir(tmp))}  # fmt: skip
                t0 = time.perf_counter()
                again = NSHash.open(url)
                out["reopen_s"] = time.perf_counter() - t0
                out["documents_after_reopen"] = again.stats().documents
                again.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total = sum(fifths)
    out["add_s"] = total
    out["docs_per_s"] = n / total if total else 0.0
    out["fifths_docs_per_s"] = [(n / 5) / f if f else 0.0 for f in fifths]
    first, last = out["fifths_docs_per_s"][0], out["fifths_docs_per_s"][-1]
    out["last_vs_first_fifth"] = last / first if first else 0.0
    out["longest_add_ms"] = longest * 1000
    out["originals_new_group"] = new_groups / originals if originals else 0.0
    out["reposts_joined"] = joined / reposts if reposts else 0.0
    return out


# -- the parent: one subprocess per store and size ------------------------------------------
def spawn(store: str, n: int, args: argparse.Namespace, redis_url: str | None) -> dict[str, Any]:
    """Run one store at one size in a fresh interpreter; return what it measured."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", store, "--docs", str(n),
           "--seed", str(args.seed), "--batch", str(args.batch),
           "--data-dir", str(args.data_dir)]  # fmt: skip
    if redis_url:
        cmd += ["--redis-url", redis_url]
    if args.count_gets:
        cmd.append("--count-gets")
    if args.leveldb_options is not None:
        cmd += ["--leveldb-options", args.leveldb_options]
    if args.retention is not None:
        cmd += ["--retention", str(args.retention)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {store} worker failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_store(store: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run *store* at *n* documents; Redis gets a fresh server of its own in a temp dir."""
    if not store.startswith("redis"):
        return spawn(store, n, args, None)
    from tests.redis_server import RedisServer

    with tempfile.TemporaryDirectory(prefix="nshash-bench-scale-redis-") as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        try:
            return spawn(store, n, args, server.url)
        finally:
            server.stop()


def _fmt_row(r: dict[str, Any], seed: dict[str, Any] | None, memory: dict[str, Any] | None) -> str:
    ratio_seed = f"{r['docs_per_s'] / seed['docs_per_s']:.3f}x" if seed else "-"
    ratio_mem = f"{r['docs_per_s'] / memory['docs_per_s']:.2f}x" if memory else "-"
    fifths = "/".join(f"{f:,.0f}" for f in r["fifths_docs_per_s"])
    extra = []
    if "reopen_s" in r:
        extra.append(f"reopen {r['reopen_s']:.2f}s, close {r['close_s']:.2f}s")
    if "bytes_per_fifth" in r:
        held = " / ".join(f"{b / 1e6:,.1f}" for b in r["bytes_per_fifth"])
        extra.append(f"window {r['retention_docs']:,} docs: MB held per fifth {held}")
    if "server_cpu_us_per_doc" in r:
        extra.append(f"server CPU {r['server_cpu_us_per_doc']:.0f} us/doc, "
                     f"evalsha {r['evalsha_us_per_doc']:.0f} us/doc")  # fmt: skip
    if "gets_per_doc_total" in r:
        top = ", ".join(f"{t} {c:.2f}" for t, c in r["gets_per_doc"].items())
        hits = ", ".join(f"{t} {c:.2f}" for t, c in r["hits_per_doc"].items())
        again = ", ".join(f"{t} {c:.2f}" for t, c in r["repeat_gets_per_doc"].items())
        extra.append(f"gets/doc {r['gets_per_doc_total']:.2f} ({top}); hits/doc ({hits});"
                     f" repeats of a key read in the same add ({again})")  # fmt: skip
    extra.append(f"originals new {r['originals_new_group']:.3f}, "
                 f"reposts joined {r['reposts_joined']:.3f}")  # fmt: skip
    return (
        f"{r['store']:<10} {r['docs']:>9,} {r['docs_per_s']:>9,.0f} {ratio_seed:>8} "
        f"{ratio_mem:>7} {r['last_vs_first_fifth']:>6.2f} {r.get('bytes_per_doc', 0):>8,.0f} "
        f"{r.get('bytes_what', ''):<18} {r['longest_add_ms']:>8.1f}  {fifths}\n"
        f"{'':<10} {'; '.join(extra)}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--worker``, one store of it) and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--docs", type=int, default=20_000, help="documents per run")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes (instead of --docs)")
    parser.add_argument("--stores", default=",".join(DEFAULT_STORES),
                        help=f"comma-separated, of {', '.join(STORES)}")  # fmt: skip
    parser.add_argument("--batch", type=int, default=100, help="add_many batch for redis")
    parser.add_argument("--seed", type=int, default=14, help="corpus seed")
    parser.add_argument("--count-gets", action="store_true", help="count LevelDB gets per table")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR,
                        help=f"where {DATA_FILE} is (default {DATA_DIR})")  # fmt: skip
    parser.add_argument(
        "--leveldb-options",
        default=None,
        help="plyvel options for leveldb as JSON (e.g. '{}' for plyvel's defaults) instead of"
        " nshash.stores.leveldb.OPEN_OPTIONS",
    )
    parser.add_argument("--retention", type=int, default=None, metavar="DOCS",
                        help="open the stores with a retention window this many documents"
                        " long (a clock of one second per document)")  # fmt: skip
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data = args.data_dir / DATA_FILE
    if not data.exists():
        print(f"Error: {data} is missing: this benchmark reads ../shared/data/ next to the"
              " repository (or pass --data-dir)", file=sys.stderr)  # fmt: skip
        return 2
    if args.leveldb_options is not None:
        try:
            options = json.loads(args.leveldb_options)
            if not isinstance(options, dict):
                raise ValueError
        except ValueError:
            print(f"Error: --leveldb-options must be a JSON object, not {args.leveldb_options!r}",
                  file=sys.stderr)  # fmt: skip
            return 2
        from nshash.stores import leveldb as leveldb_base

        leveldb_base.OPEN_OPTIONS = options
    if args.worker:
        result = run_worker(args.worker, args.docs, args.seed, args.batch, args.redis_url,
                            args.count_gets, data, args.retention)  # fmt: skip
        print(json.dumps(result))
        return 0
    stores = [s for s in args.stores.split(",") if s]
    unknown = sorted(set(stores) - set(STORES))
    if unknown:
        print(f"Error: unknown store(s) {', '.join(unknown)}; known: {', '.join(STORES)}",
              file=sys.stderr)  # fmt: skip
        return 2
    if any(s.startswith("redis") for s in stores) and shutil.which("redis-server") is None:
        print("Error: redis-server is not installed (or leave redis out of --stores)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.docs]
    except ValueError:
        print(f"Error: --sizes must be integers, not {args.sizes!r}", file=sys.stderr)
        return 2
    if args.retention is not None and args.retention < 1:
        print("Error: --retention must be at least 1 document", file=sys.stderr)
        return 2
    if any(n < 5 for n in sizes):
        print("Error: every size must be at least 5 documents", file=sys.stderr)
        return 2
    results: list[dict[str, Any]] = []
    if not args.json:
        print(f"corpus: {DATA_FILE}, seed {args.seed}, 10 % reposts; {os.cpu_count()} CPUs "
              "(shared machine: docs/s are noisy, bytes are not)")  # fmt: skip
    for n in sizes:
        by_store: dict[str, dict[str, Any]] = {}
        for store in stores:
            print(f"running {store} at {n:,} documents ...", file=sys.stderr, flush=True)
            by_store[store] = run_store(store, n, args)
            results.append(by_store[store])
        if args.json:
            continue
        print(f"\n{n:,} documents")
        print(
            f"{'store':<10} {'docs':>9} {'docs/s':>9} {'x seed':>8} {'x mem':>7} "
            f"{'5th/1st':>6} {'B/doc':>8} {'bytes are':<18} {'max ms':>8}  docs/s per fifth"
        )
        seed, memory = by_store.get("seed"), by_store.get("memory")
        for store in stores:
            print(_fmt_row(by_store[store], seed, memory))
    if args.json:
        print(json.dumps({"corpus": DATA_FILE, "seed": args.seed, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
