"""Hot stories stay whole: many heavily edited copies, in any order, on every store."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import opencc
import pytest

from nshash import NSHash
from nshash.cli import main


def _sentence(rng: random.Random, lo: int = 16, hi: int = 34) -> str:
    return "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(rng.randint(lo, hi)))


def _story(rng: random.Random, paragraphs: int = 5) -> list[list[str]]:
    """Paragraphs of sentences, with figures in some sentences."""
    out = []
    for _ in range(paragraphs):
        para = []
        for _ in range(rng.randint(2, 4)):
            s = _sentence(rng)
            if rng.random() < 0.4:
                cut = rng.randrange(len(s))
                s = s[:cut] + str(rng.randrange(10, 9999)) + s[cut:]
            para.append(s)
        out.append(para)
    return out


def _text(paragraphs: list[list[str]]) -> str:
    return "\n\n".join("。".join(p) + "。" for p in paragraphs)


_T2S = opencc.OpenCC("s2t")


def copies(rng: random.Random, story: list[list[str]]) -> list[str]:
    """The original and 14 copies with one heavy edit each, and one with three at once."""
    base = _text(story)
    flat = "".join(base.split("\n"))

    def rewrap(text: str) -> str:
        w = rng.randint(11, 40)
        one = text.replace("\n", "")
        return "\n".join(one[i : i + w] for i in range(0, len(one), w))

    def promo(text: str) -> str:
        return "\n".join(
            p + ("\n" + "点击关注我们的公众号获取更多" + _sentence(rng, 6, 10) if i % 2 else "")
            for i, p in enumerate(text.split("\n"))
        )

    def figures(text: str) -> str:
        return "".join(str(rng.randrange(10)) if c.isdigit() else c for c in text)

    def lead(text: str) -> str:
        return "导读：" + _sentence(rng, 20, 30) + "。" + _sentence(rng, 20, 30) + "。\n" + text

    def html(text: str) -> str:
        return "<div class='a'>" + "".join(f"<p>{p}</p>" for p in text.split("\n")) + "</div>"

    def truncate(text: str) -> str:
        return text[: int(len(text) * 0.3)]

    def traditional(text: str) -> str:
        return str(_T2S.convert(text))

    def typos(text: str) -> str:
        chars = list(text)
        for _ in range(len(chars) // 60):
            chars[rng.randrange(len(chars))] = chr(rng.randrange(0x4E00, 0x9FA5))
        return "".join(chars)

    edits = [rewrap, promo, figures, lead, html, truncate, traditional, typos]
    out = [base, flat]
    out += [edit(base) for edit in edits]
    out += [edit(typos(base)) for edit in (rewrap, truncate, lead, promo)]
    out.append(truncate(promo(rewrap(base)))[:] + "")
    out.append(lead(figures(rewrap(base))))
    return out


class TestHotStory:
    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_copies_stay_whole_in_any_order(self, store_url: str, seed: int) -> None:
        """A story and 15 heavily edited copies, in a shuffled order, end in one group."""
        rng = random.Random(seed)
        docs = copies(rng, _story(rng))
        rng.shuffle(docs)
        with NSHash.open(store_url) as nsh:
            ids = {nsh.resolve(nsh.add(d).similar_id) for d in docs}
            assert len(ids) == 1
            assert nsh.stats().common_fingerprints == 0

    def test_site_wrappers_do_not_split_or_join(self) -> None:
        """Ten stories with five copies each on three sites with long footers: ten groups."""
        rng = random.Random(5)
        footers = [_sentence(rng, 60, 80) + "。" + _sentence(rng, 60, 80) for _ in range(3)]
        docs: list[tuple[int, str]] = []
        for s in range(10):
            for d in copies(rng, _story(rng, 3))[:6]:
                docs.append((s, f"{_sentence(rng, 4, 6)}\n{d}\n{rng.choice(footers)}"))
        rng.shuffle(docs)
        with NSHash.open("memory://") as nsh:
            got = [nsh.add(text).similar_id for _, text in docs]
            final = [nsh.resolve(g) for g in got]
        by_story: dict[int, set[int]] = {}
        for (story, _), gid in zip(docs, final, strict=True):
            by_story.setdefault(story, set()).add(gid)
        assert all(len(g) == 1 for g in by_story.values())
        assert len({next(iter(g)) for g in by_story.values()}) == 10


class TestCraftedDocuments:
    def test_one_sentence_inside_unrelated_text_cannot_hide_a_story(self) -> None:
        """300 crafted documents, each one sentence of a real story amid unrelated text, do
        not stop later reposts of those stories from joining them: all but at most one of 20
        (the crafted quotes make some of a short story's values common; a heavily edited
        repost then keeps too few: over seeds 0-29, 7 of 600 reposts were lost with letters
        of 1 unit and 4 of 600 with 2, where this seed loses one, a copy whose figures all
        changed)."""
        rng = random.Random(11)
        stories = [_story(rng, 3) for _ in range(20)]
        with NSHash.open("memory://") as nsh:
            ids = [nsh.add(_text(s)).similar_id for s in stories]
            for _ in range(300):
                story = rng.choice(stories)
                quoted = rng.choice(rng.choice(story))
                noise = [_sentence(rng) for _ in range(rng.randint(4, 8))]
                noise.insert(rng.randrange(len(noise)), quoted)
                crafted = nsh.add("。".join(noise) + "。")
                assert crafted.similar_id not in ids
            lost = 0
            for story, gid in zip(stories, ids, strict=True):
                repost = copies(rng, story)[rng.choice([2, 3, 4, 9])]
                lost += nsh.resolve(nsh.add(repost).similar_id) != gid
            assert lost <= 1


class TestFragmentsHeal:
    def test_a_copy_matching_two_fragments_merges_them(self, store_url: str) -> None:
        """Two overlapping parts of a story start two groups (each holds too little of the
        other); the whole text merges them, and the old ids resolve to the survivor."""
        rng = random.Random(3)
        story = _story(rng, 8)
        first, second = _text(story[:4]), _text(story[2:7])
        with NSHash.open(store_url) as nsh:
            a = nsh.add(first).similar_id
            b = nsh.add(second).similar_id
            assert a != b
            whole = nsh.add(_text(story))
            assert whole.similar_id == min(a, b) and whole.merged_from == (max(a, b),)
            assert nsh.resolve(b) == nsh.resolve(a) == a

    def test_a_digest_of_two_stories_merges_nothing(self, store_url: str) -> None:
        """A page quoting two whole stories matches both, yet the stories stay apart."""
        rng = random.Random(12)
        one, two = _story(rng, 3), _story(rng, 3)
        with NSHash.open(store_url) as nsh:
            a = nsh.add(_text(one)).similar_id
            b = nsh.add(_text(two)).similar_id
            digest = nsh.add(_text(one) + "\n\n" + _text(two))
            assert digest.similar_id in (a, b) and digest.merged_from == ()
            assert nsh.resolve(a) == a and nsh.resolve(b) == b


class TestExplain:
    def test_add_and_query_say_why(self, store_url: str) -> None:
        """Explanations name the group an anchor hit, the overlap, threshold and verdict."""
        rng = random.Random(8)
        story = _story(rng)
        other = _story(rng)
        footer = _sentence(rng, 60, 70)
        with NSHash.open(store_url) as nsh:
            first = nsh.add(_text(story), explain=True)
            assert first.explanation is not None and first.explanation.candidates == []
            repost = copies(rng, story)[3]
            why = nsh.explain(repost)
            assert why.similar_id == first.similar_id and why.reason == "matched"
            (c,) = why.candidates
            assert c.similar_id == first.similar_id and c.verdict == "joined"
            assert c.anchors and set(c.anchors) <= set(why.anchors)
            assert c.score >= why.theta and c.shared <= min(c.document_values, c.group_values)
            added = nsh.add(repost, explain=True)
            assert added.explanation is not None
            assert added.explanation.candidates[0].similar_id == added.similar_id
            # Two unrelated articles sharing a footer: the guard refuses, and says so.
            nsh.add(_text(other[:2]) + "\n" + footer)
            unrelated = _text(other[3:]) + "\n" + footer
            refused = nsh.explain(unrelated)
            assert refused.similar_id is None and refused.reason == "new"
            assert all(
                c.verdict == "refused" and c.score < refused.theta for c in refused.candidates
            )
            exact = nsh.explain(_text(story))
            assert exact.reason == "exact" and exact.similar_id == first.similar_id

    def test_learned_boilerplate_is_listed(self) -> None:
        """Once a footer is learned, the explanation lists its anchors as set aside."""
        rng = random.Random(9)
        footer = _sentence(rng, 90, 100)
        with NSHash.open("memory://") as nsh:
            for _ in range(8):
                nsh.add(_text(_story(rng, 3)) + "\n" + footer)
            assert nsh.stats().common_fingerprints > 0 and nsh.stats().groups == 8
            why = nsh.explain(_text(_story(rng, 3)) + "\n" + footer)
            assert why.boilerplate and not set(why.boilerplate) & set(why.anchors)
            assert why.similar_id is None


class TestExplainSurfaces:
    def test_query_explain_on_the_command_line(self, tmp_path: Path) -> None:
        """`nshash query --explain` adds each record's explanation, as JSON."""
        rng = random.Random(4)
        story = _story(rng)
        source = tmp_path / "in.jsonl"
        source.write_text(json.dumps({"id": "a", "text": _text(story)}) + "\n", "utf-8")
        probe = tmp_path / "probe.jsonl"
        probe.write_text(json.dumps({"id": "b", "text": copies(rng, story)[4]}) + "\n", "utf-8")
        store = f"memory://{tmp_path}/s.pkl"
        assert main(["dedup", str(source), "--store", store, "-o", os.devnull, "-q"]) == 0
        out = tmp_path / "out.jsonl"
        assert main(["query", str(probe), "--store", store, "--explain", "-o", str(out), "-q"]) == 0
        record = json.loads(out.read_text("utf-8"))
        assert record["similar_id"] == 1
        why = record["explanation"]
        assert why["reason"] == "matched" and why["candidates"][0]["verdict"] == "joined"
        assert all(len(h) == 16 for h in why["anchors"])

    def test_query_explain_over_http(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """POST /v1/query with explain answers the explanation beside the id."""
        from fastapi.testclient import TestClient

        from service.app import create_app

        monkeypatch.setenv("NSHASH_STORE_URL", "memory://")
        rng = random.Random(6)
        story = _story(rng)
        with TestClient(create_app()) as client:
            sid = client.post("/v1/documents", json={"text": _text(story)}).json()["similar_id"]
            reply = client.post("/v1/query", json={"text": copies(rng, story)[4], "explain": True})
            assert reply.status_code == 200
            body = reply.json()
            assert body["similar_id"] == sid == body["explanation"]["similar_id"]
            assert body["explanation"]["candidates"][0]["verdict"] == "joined"
            plain = client.post("/v1/query", json={"text": copies(rng, story)[4]}).json()
            assert plain == {"similar_id": sid}
