"""Planning arithmetic (a word counter stands in for the tokenizer: the planner only needs a count function)
and the resumable SQLite cache."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hisho.core.db import Database
from hisho.core.documents.cache import Key, SummaryCache, model_fingerprint
from hisho.core.documents.model import Document, Section
from hisho.core.documents.plan import (
    CHUNK_TARGET,
    STRETCH,
    estimate_seconds,
    make_plan,
    merge_refs,
    pack_sections,
    reduce_groups,
)


def words(text: str) -> int:
    return len(text.split())


def doc_of(pages: list[str]) -> Document:
    return Document(Path("d.pdf"), "pdf", "sha", [Section(t, f"p. {i}", i) for i, t in enumerate(pages, 1)])


def test_single_pass_when_it_fits() -> None:
    plan = make_plan(doc_of(["a b c"] * 10), words, 4096, overhead_tokens=50)
    assert plan.mode == "single" and len(plan.chunks) == 1
    assert plan.chunks[0].refs == "pp. 1–10" and plan.input_tokens == 30


def test_map_reduce_chunks_from_context() -> None:
    pages = [" ".join(f"w{i}" for i in range(300))] * 40  # 12,000 words
    plan = make_plan(doc_of(pages), words, 2048, overhead_tokens=100, summary_tokens=200)
    assert plan.mode == "map_reduce"
    assert plan.chunk_tokens == min(CHUNK_TARGET, 2048 - 100 - 200)
    assert all(c.tokens <= plan.chunk_tokens for c in plan.chunks)
    assert plan.chunks[0].refs == "pp. 1–3"  # 3 pages of 300 words (+ seams) fit 1024
    assert plan.n_parallel == 1  # one 1,300-token sequence fills a 2K context
    big = make_plan(doc_of(pages * 2), words, 16384, overhead_tokens=100, summary_tokens=200, final_tokens=400)
    # 27 chunks at the target would leave a last round of 3: 24 slightly bigger ones fill 3 rounds of 8.
    assert big.n_parallel == 8 and len(big.chunks) == 24
    assert CHUNK_TARGET < big.chunk_tokens <= CHUNK_TARGET * STRETCH
    small = make_plan(doc_of(pages), words, 700, overhead_tokens=100, summary_tokens=200)
    assert small.chunk_tokens == 400 and all(c.tokens <= 400 for c in small.chunks)


def test_chunks_grow_a_little_to_fill_the_last_round() -> None:
    # 40 pages of 430 words: 20 chunks of 2 pages at a 1,024 target; 8 sequences of 1,536 cells fit. 20 chunks
    # leave a third round of 4; 16 slightly bigger ones (cut inside pages) fill two rounds.
    pages = [" ".join(f"p{p}w{i}" for i in range(430)) for p in range(40)]
    plan = make_plan(doc_of(pages), words, 8 * 1536, overhead_tokens=128, summary_tokens=200)
    assert plan.mode == "map_reduce" and plan.n_parallel == 8 and len(plan.chunks) == 16
    assert max(c.tokens for c in plan.chunks) <= 1536 - 128 - 200
    assert " ".join(c.text for c in plan.chunks).split() == " ".join(pages).split()  # nothing lost, in order
    assert plan.chunks[0].refs.startswith("pp. 1–") and plan.chunks[-1].refs.endswith("40")
    # Without room to grow (cells just enough for a 1,024 chunk), the 20 chunks stay.
    tight = make_plan(doc_of(pages), words, 8 * 1280, overhead_tokens=56, summary_tokens=200)
    assert len(tight.chunks) == 20 and max(c.tokens for c in tight.chunks) <= CHUNK_TARGET


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=900), min_size=1, max_size=30), st.integers(150, 1200))
def test_packing_keeps_every_word_in_order_and_within_budget(sizes: list[int], budget: int) -> None:
    sections = [Section(" ".join(f"s{i}w{k}" for k in range(n)) or "x", f"p. {i + 1}", i + 1)
                for i, n in enumerate(sizes)]
    chunks = pack_sections(sections, words, budget)
    assert all(c.tokens <= budget for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    flat = " ".join(c.text for c in chunks).split()
    assert flat == " ".join(s.text for s in sections).split()


def test_unbroken_text_is_cut_by_characters() -> None:
    chunks = pack_sections([Section("x" * 50_000, "line 1")], lambda t: len(t) // 4, 1000)
    assert all(c.tokens <= 1000 for c in chunks) and "".join(c.text for c in chunks) == "x" * 50_000


@settings(deadline=None)  # a shared, loaded CPU must not turn a slow example into a failure
@given(st.lists(st.integers(1, 300), min_size=2, max_size=40), st.integers(600, 3000))
def test_reduce_groups_shrink_and_keep_order(sizes: list[int], budget: int) -> None:
    parts = [" ".join(["w"] * n) + f" #{i}" for i, n in enumerate(sizes)]
    groups = reduce_groups(parts, words, budget)
    assert [p for g in groups for p in g] == parts
    assert len(groups) < len(parts)
    assert all(len(g) >= 2 for g in groups)


def test_merge_refs() -> None:
    assert merge_refs(["pp. 1–3", "pp. 4–6", "p. 7"]) == "pp. 1–7"
    assert merge_refs(["pp. 1–3", "pp. 8–9"]) == "pp. 1–3, 8–9"
    assert merge_refs(["§ Intro", "§ Methods", "§ End"]) == "§ Intro … § End"


def test_eta_grows_with_work_and_shrinks_with_speed() -> None:
    pages = [" ".join(["w"] * 300)] * 80
    plan = make_plan(doc_of(pages), words, 16384, overhead_tokens=100)
    slow = estimate_seconds(plan, 100.0, 20.0, 1.0)
    assert slow > estimate_seconds(plan, 200.0, 40.0, 1.0) > 0
    assert estimate_seconds(plan, 100.0, 20.0, 2.0) < slow


def test_cache_survives_reopen_and_keys_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    cache = SummaryCache(Database(path))
    key = Key("docsha", 0, "chunk1", "modelA", "sum-v1")
    assert cache.get(key) is None
    cache.put(key, 0, "pp. 1–3", "summary one", 12)
    cache.db.close()
    again = SummaryCache(Database(path))
    assert again.get(key) == "summary one"
    for other in (Key("docsha", 0, "chunk1", "modelB", "sum-v1"), Key("docsha", 0, "chunk1", "modelA", "sum-v2"),
                  Key("docsha", 1, "chunk1", "modelA", "sum-v1"), Key("other", 0, "chunk1", "modelA", "sum-v1")):
        assert again.get(other) is None
    assert again.count("docsha") == 1 and again.count("docsha", level=1) == 0
    again.put_speeds("modelA", 300.0, 120.0, 1.9)
    assert again.speeds("modelA") == (300.0, 120.0, 1.9)


def test_model_fingerprint_tracks_file(tmp_path: Path) -> None:
    a = tmp_path / "m.gguf"
    a.write_bytes(b"GGUF" + b"\x00" * 100)
    first = model_fingerprint(a)
    a.write_bytes(b"GGUF" + b"\x01" * 100)
    assert model_fingerprint(a) != first


def test_model_fingerprint_covers_every_byte(tmp_path: Path) -> None:
    """A byte changed past the header (same size, mtime put back) is another model: its summaries are not reused."""
    a = tmp_path / "m.gguf"
    data = bytearray(b"GGUF" + bytes(3 << 20))
    a.write_bytes(data)
    before = a.stat()
    first = model_fingerprint(a)
    data[2 << 20] = 1
    a.write_bytes(data)
    os.utime(a, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert model_fingerprint(a) != first
    assert model_fingerprint(a) == model_fingerprint(a)
