"""Reusing a cached prefix never changes the answer, on every memory type llama.cpp has: dense attention, a
sliding window (Gemma-3's 512, gpt-oss's 128), a short-convolution hybrid (LFM2) and a Mamba-2 hybrid
(Granite-4.0-H). Each path that keeps a prefix — an API request sharing a prefix with a longer earlier one,
regenerate, edit-and-resend, type-ahead with a deleted word, a restart resumed from disk, a document shared by
two chats — must give the greedy continuation a fresh prefill of the same tokens gives, token for token.

The models are the tiny true-shape files of hisho.bench.shapes (real architecture, layer pattern and window,
random weights: a missing cell changes greedy output). Lengths are chosen so the window cache has overwritten
what the shorter prefix needs (asserted), which is where keeping a prefix used to go wrong.

Continuations are compared over 300 tokens (a window cell in another slot only moves the last bits, which part
greedy output late). The reference is the same history replayed on an empty sequence, fed in the same pieces (the prompt but its
last token, then the last; a reply one token at a time), without the reuse: llama.cpp's CPU kernels round
differently for another batch split, so a one-shot prefill of a generated reply can part ways in the last bits
for reasons that have nothing to do with reuse (docs/kv-format.md "Numerics"). One thread: a thread change can
move the last bits too (docs/threads.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from hisho.bench.shapes import MEMORY_TYPES, SHAPES
from hisho.core.db import Database
from hisho.core.engine.protocol import LoadParams, Sampling, common_prefix
from hisho.core.kv import format as kvf
from hisho.core.kv.index import KVIndex
from hisho.engine.decode.reply import generate
from hisho.engine.decode.serving import Job, ServingBatch, message_marks
from hisho.engine.kv.chunkwriter import ChunkWriter
from hisho.engine.kv.kvstate import KVState, prefill
from hisho.engine.model.prefix import PARTIAL
from hisho.engine.model.runtime import Runtime
from tests.fixtures.gguf_shapes import true_model

# A repeat penalty keeps greedy decoding on random weights out of a one-token loop, so every compared token
# depends on what the cache holds. Continuations are compared over COMPARE tokens: a window cell in another slot
# (the ring order) changes only the last bits, and those part greedy output at a near tie hundreds of tokens on.
GREEDY = Sampling(temperature=0.0, repeat_penalty=1.5, max_tokens=8, ignore_eos=True)
COMPARE = 300
HEADER = [5000, 5001, 5002]  # stands for the template's "end of turn, next role" tokens
N_UBATCH = 512


def toks(seed: int, n: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(1000, 40000) for _ in range(n)]


@pytest.fixture(scope="module", params=sorted(MEMORY_TYPES))
def shape(request: pytest.FixtureRequest) -> str:
    return MEMORY_TYPES[str(request.param)][0]


def load(shape: str) -> Runtime:
    return Runtime.load(LoadParams(model_path=str(true_model(shape, "Q8_0")), n_ctx=4096, n_seq_max=2,
                                   n_threads=1, n_ubatch=N_UBATCH))


@pytest.fixture(scope="module")
def rt(shape: str) -> Iterator[Runtime]:
    runtime = load(shape)
    yield runtime
    runtime.close()


def long_reply(shape: str) -> int:
    """A reply long enough that the window cache (n_swa x n_seq_max + n_ubatch cells) overwrites the window
    before the prompt's end; hybrids lose the ability to cut back with the first token."""
    n_swa = SHAPES[shape].sliding_window
    return 2 * n_swa + N_UBATCH + 64 if n_swa else 24


def reply(rt: Runtime, prompt: list[int], n: int = COMPARE) -> list[int]:
    events = list(generate(rt, 0, prompt, replace(GREEDY, max_tokens=n), lambda: False))
    return list(events[-1].tokens)  # type: ignore[union-attr]


def fresh(rt: Runtime, prompt: list[int], n: int = COMPARE) -> list[int]:
    """The reference: an empty sequence, the prompt prefilled but its last token, then the reply."""
    rt.clear()
    assert rt.decode_tokens(0, prompt[:-1], want_logits=False)
    return reply(rt, prompt, n)


def type_in(rt: Runtime, tokens: list[int]) -> None:
    assert prefill(rt, 0, tokens, lambda: False)["complete"]


def needs_loss(rt: Runtime, shape: str, p: int) -> None:
    """The cache alone cannot continue at ``p`` (what the test is about): the window cache no longer holds the
    window before ``p``, or a recurrent state is past it."""
    s = SHAPES[shape]
    if s.memory == "hybrid":
        assert p < len(rt.seqs.get(0, [])), "the scenario does not reach what it tests"
    elif s.memory == "swa":
        pos_min = int(llama_cpp.llama_memory_seq_pos_min(rt.memory, 0))
        assert pos_min > max(0, p - s.sliding_window), "the scenario does not reach what it tests"


# ----- (a) the API's serving slots -----------------------------------------------------------------------


def serve(rt: Runtime, prompt: list[int], n: int = COMPARE, marks: tuple[int, ...] = ()) -> tuple[list[int], int]:
    batch = ServingBatch(rt)
    out: list[int] = []
    done: dict[str, Any] = {}

    def emit(event: dict[str, Any]) -> None:
        if event.get("ev") == "token":
            out.append(int(event["token"]))
        elif event.get("ev") == "done":
            done.update(event)

    batch.add(Job(1, prompt, replace(GREEDY, max_tokens=n), emit, emit, marks=marks))
    while batch.busy:
        batch.step()
    return out, int(done["cached_tokens"])


def test_api_request_sharing_a_prefix_with_a_longer_earlier_one(rt: Runtime, shape: str) -> None:
    rt.clear()
    n_swa = SHAPES[shape].sliding_window
    first = toks(10, 2 * n_swa + N_UBATCH + 300 if n_swa else 600)
    serve(rt, first, 4, marks=(100,))  # its first message (a system prompt, a document) ends at 100
    shorter = first[:100] + toks(11, 20)
    needs_loss(rt, shape, 100)
    # A dense cache keeps the earlier request's first 100 cells, computed inside its first 512-token ubatch; a
    # fresh prefill computes them in a 100-token one, which can round differently (docs/kv-format.md
    # "Numerics"): the pieces are not the same, so only the first tokens compare there.
    n = 8 if SHAPES[shape].memory == "dense" else COMPARE
    got, cached = serve(rt, shorter, n)
    assert cached == 100  # the checkpoint at the message boundary, not a prefill from the start
    rt.clear()
    want, _ = serve(rt, shorter, n, (100,))  # the same pieces: the module docstring
    assert got == want
    # A regenerate of the longer one (the same prompt again): the checkpoint before its last token.
    rt.clear()
    again, _ = serve(rt, first, n)  # a dense slot reads the prompt in one go: its last token too (serving.py)
    regenerated, cached = serve(rt, first, n)
    assert regenerated == again and cached == len(first) - 1


def test_api_chat_requests_checkpoint_their_message_boundaries(rt: Runtime, shape: str) -> None:
    """A chat request marks where its first message ends: a second question on the same system prompt restores
    the checkpoint there."""
    r = random.Random(12)
    words = ["apple", "river", "stone", "lamp", "cloud", "seven", "north", "paper", "glass", "tiger"]
    system = {"role": "system", "content": "The code word is PELICAN-42. " + " ".join(r.choices(words, k=40))}
    n_swa = SHAPES[shape].sliding_window
    long_q = {"role": "user", "content": " ".join(r.choices(words, k=(2 * n_swa + N_UBATCH + 200) if n_swa else 200))}
    short_q = {"role": "user", "content": "What is the code word?"}
    first_spec, second_spec = {"messages": [system, long_q]}, {"messages": [system, short_q]}
    first, second = rt.prompt_tokens(first_spec), rt.prompt_tokens(second_spec)
    marks = message_marks(rt, first_spec, first)
    if SHAPES[shape].memory == "dense":
        assert marks == ()  # a dense cache cuts anywhere
        return
    boundary = common_prefix(rt.prompt_tokens({"messages": [system], "add_generation_prompt": False}), first)
    assert marks == (boundary,) and common_prefix(first, second) >= boundary
    rt.clear()
    serve(rt, first, 4, marks)
    needs_loss(rt, shape, boundary)
    got, cached = serve(rt, second)
    assert cached == boundary
    rt.clear()
    assert got == serve(rt, second, COMPARE, marks)[0]  # the reference, fed in the same pieces (module docstring)


# ----- (b) regenerate after a reply longer than the window ------------------------------------------------


def test_regenerate_after_a_long_reply(rt: Runtime, shape: str) -> None:
    prompt = toks(1, 200)
    first = fresh(rt, prompt, long_reply(shape))
    needs_loss(rt, shape, len(prompt) - 1)
    assert reply(rt, prompt, len(first)) == first  # the whole reply again


def test_regenerate_of_a_turn_read_as_the_app_reads_it(rt: Runtime, shape: str) -> None:
    """The window's way: the earlier turns are held, the new message is read with the prompt's end in one
    call (a dense model: one slice, its last token inside it), the turn boundary is appended after the reply.
    A regenerate reads that slice again as it was, not its last token alone."""
    rt.clear()
    history = toks(13, 300) + HEADER
    type_in(rt, history)
    prompt = history + toks(14, 60) + HEADER
    first = reply(rt, prompt)
    type_in(rt, prompt + first + HEADER)
    events = list(generate(rt, 0, prompt, replace(GREEDY, max_tokens=COMPARE), lambda: False))
    stats = events[-1]
    assert list(stats.tokens) == first  # type: ignore[union-attr]
    if SHAPES[shape].memory == "dense":
        assert stats.cached_tokens == len(history)  # type: ignore[union-attr]  # the message's slice, read again


# ----- (c) edit-and-resend of an earlier message -----------------------------------------------------------


def test_edit_and_resend_an_earlier_message(rt: Runtime, shape: str) -> None:
    p1 = toks(2, 100) + toks(3, 40) + HEADER
    turn1 = p1 + fresh(rt, p1, long_reply(shape)) + HEADER
    type_in(rt, turn1)
    p2 = turn1 + toks(4, 40) + HEADER
    turn2 = p2 + reply(rt, p2, long_reply(shape)) + HEADER
    type_in(rt, turn2)
    reply(rt, turn2 + toks(7, 30) + HEADER)
    edited = turn1 + toks(5, 40) + HEADER  # the second message, edited
    needs_loss(rt, shape, len(turn1))
    got = reply(rt, edited)
    assert fresh(rt, p1, long_reply(shape)) == turn1[len(p1):-len(HEADER)]  # the same history, replayed
    type_in(rt, turn1)
    assert got == reply(rt, edited)
    # ... and the last message, edited: the turn boundary's checkpoint (or the cache) serves it.
    rt.clear()
    type_in(rt, turn2)
    reply(rt, turn2 + toks(8, 30) + HEADER, long_reply(shape))
    last = turn2 + toks(9, 30) + HEADER
    got = reply(rt, last)
    rt.clear()
    type_in(rt, turn2)
    assert got == reply(rt, last)


# ----- (d) type-ahead, then a deleted word -----------------------------------------------------------------


def test_type_ahead_then_a_deleted_word(rt: Runtime, shape: str) -> None:
    p1 = toks(20, 150)
    turn = p1 + fresh(rt, p1, long_reply(shape)) + HEADER
    type_in(rt, turn)
    words = toks(21, 12)
    for n in (4, 8, 12):  # typing
        type_in(rt, turn + words[:n])
    type_in(rt, turn + words[:9])  # the last word (3 tokens) deleted
    prompt = turn + words[:9] + HEADER
    got = reply(rt, prompt)
    assert fresh(rt, p1, long_reply(shape)) == turn[len(p1):-len(HEADER)]
    type_in(rt, turn)  # the app appends the turn boundary after each reply, then the draft grows
    for n in (4, 8, 9):
        type_in(rt, turn + words[:n])
    assert got == reply(rt, prompt)


# ----- (e) restart and resume from disk; (f) a document prefix shared by two chats ---------------------------


class Disk:
    """What the app's KV session does, in the engine's own terms: save a sequence's chunks and index them."""

    def __init__(self, tmp: Path) -> None:
        self.index = KVIndex(Database(tmp / "db.sqlite3"), tmp / "kv")
        self.dir = tmp / "kv"
        self.writer = ChunkWriter()

    def save(self, rt: Runtime, owner: str) -> None:
        kv = KVState(rt, self.writer)
        reports: list[dict[str, Any]] = []
        kv.save(0, self.dir, 512, reports.append)
        assert self.writer.wait_idle(60) and reports
        self.index.record_save(owner, kv.fingerprint, reports[0]["chunks"], reports[0]["model"])

    def restore(self, rt: Runtime, prompt: list[int]) -> tuple[int, int]:
        """(what the index offered, what the engine kept): equal when the index offers only exact points."""
        rt.clear()  # from disk, not from what the engine still holds
        kv = KVState(rt, self.writer)
        match = self.index.lookup(kv.fingerprint, prompt)
        got = kv.restore(0, match.request(), match.keep, prompt) if match.chunks else {"restored": 0}
        return match.keep, int(got["restored"])


def test_restart_and_resume_from_disk(rt: Runtime, shape: str, tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    p1 = toks(40, 300)
    r1 = fresh(rt, p1, long_reply(shape))
    turn = p1 + r1 + HEADER
    type_in(rt, turn)
    disk.save(rt, "conv:1")
    again = load(shape)  # a new engine: nothing in memory
    try:
        nxt = turn + toks(41, 30) + HEADER
        offered, kept = disk.restore(again, nxt)
        assert offered == kept == len(turn)  # the saved boundary resumes exactly, on every memory type
        got = reply(again, nxt)
        assert fresh(again, p1, long_reply(shape)) == r1  # the conversation kept in memory instead
        type_in(again, turn)
        assert got == reply(again, nxt)
        # Regenerate the saved reply after the restart: a point inside the saved chain.
        offered, kept = disk.restore(again, p1)
        assert offered == kept
        assert reply(again, p1, len(r1)) == r1
    finally:
        again.close()


def test_document_prefix_shared_by_two_chats(rt: Runtime, shape: str, tmp_path: Path) -> None:
    disk = Disk(tmp_path)
    rt.clear()
    doc = toks(30, 1100)
    type_in(rt, doc)
    disk.save(rt, "doc:1")
    chat1 = doc + toks(31, 20) + HEADER
    turn1 = chat1 + reply(rt, chat1, long_reply(shape)) + HEADER
    type_in(rt, turn1)
    disk.save(rt, "conv:1")
    chat2 = doc + toks(32, 20) + HEADER
    in_memory = reply(rt, chat2)
    rt.clear()
    type_in(rt, doc)
    want = reply(rt, chat2)
    assert in_memory == want
    again = load(shape)
    try:
        offered, kept = disk.restore(again, chat2)
        assert offered == kept == len(doc)  # the document's own chain ends at its last token, exactly
        assert reply(again, chat2) == want
    finally:
        again.close()


def test_a_hybrid_save_writes_the_recurrent_state_once(rt: Runtime, shape: str, tmp_path: Path) -> None:
    """Every chunk copied through the scratch sequence used to carry the whole live recurrent state (seq_cp copies
    the state, not a range): Granite-4.0-H-1B's 55 MiB, eight times for 4096 tokens, none of them usable. Now a
    chunk carries a state only where one was taken at its end: the tail, and each interval checkpoint the prompt's
    reading kept (so a restore can end there too)."""
    if SHAPES[shape].memory != "hybrid":
        pytest.skip("no recurrent state")
    rt.clear()
    doc = toks(50, 1300)  # three chunks of 512
    type_in(rt, doc)
    state = int(llama_cpp.llama_state_seq_get_size_ext(rt.ctx, 0, PARTIAL))
    writer = ChunkWriter()
    kv = KVState(rt, writer)
    reports: list[dict[str, Any]] = []
    whole = kv.save(0, tmp_path / "one", 0, reports.append)["copied_bytes"]
    chunked = kv.save(0, tmp_path / "kv", 512, reports.append)["copied_bytes"]
    assert writer.wait_idle(60) and len(reports) == 2
    assert rt.seqs[0] == doc and int(llama_cpp.llama_memory_seq_pos_max(rt.memory, 0)) == len(doc) - 1
    assert state > 0 and chunked < whole + 3 * state  # one state per chunk end it was taken at, none twice
    chunks = reports[1]["chunks"]
    assert [c["state_end"] for c in chunks] == [512, 1024, len(doc)]
    disk = Disk(tmp_path)
    disk.index.record_save("doc:1", kv.fingerprint, chunks, reports[1]["model"])
    chat = doc + toks(51, 20) + HEADER
    want = reply(rt, chat)
    again = load(shape)
    try:
        offered, kept = disk.restore(again, chat)
        assert offered == kept == len(doc)
        assert reply(again, chat) == want
        # A restore ends only where a state was saved: the first chunk's end, not the divergence at 600.
        branch = doc[:600] + HEADER
        offered, kept = disk.restore(again, branch)
        assert offered == kept == 512
        got = reply(again, branch)
        assert got == fresh(again, branch)
    finally:
        again.close()


def test_hybrid_chunks_saved_with_the_state_in_every_file_still_restore_exactly(
        rt: Runtime, shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before the state went into the tail only (every chunk with the whole state) are offered as
    before (only their save's tail ends a restore) and mix with new ones in one chain."""
    if SHAPES[shape].memory != "hybrid":
        pytest.skip("no recurrent state")
    disk = Disk(tmp_path)
    rt.clear()
    doc = toks(60, 1300)
    type_in(rt, doc)
    with monkeypatch.context() as old:  # the old layout: the state in every chunk, state_end = the save's length
        old.setattr(rt.keeper, "drop_state", lambda seq: True)
        old.setattr(kvf, "NO_STATE", len(doc))
        disk.save(rt, "doc:1")
    longer = doc + toks(61, 400)
    type_in(rt, longer)
    disk.save(rt, "conv:1")  # chunks 0 and 1 are the old files, then a new one and the tail
    for prompt in (doc + HEADER, longer + HEADER):
        want = reply(rt, prompt)
        again = load(shape)
        try:
            offered, kept = disk.restore(again, prompt)
            assert offered == kept == len(prompt) - len(HEADER)
            assert reply(again, prompt) == want
        finally:
            again.close()
        type_in(rt, longer)
