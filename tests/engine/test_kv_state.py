"""KV persistence end to end on the real default model: save, restore, type-ahead, and every fault falling back.

One engine per module (n_seq_max 2: the scratch sequence chunked saves use). The conversation is small (~300
tokens, chunks of 64) so prefills stay short on a shared 2-core box.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import Prefill, Request
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.kv import format as kvf
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession, suffix_length

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=12, ignore_eos=True)
CHUNK = 64
DOC = " ".join(f"Box {i} is {('red', 'green', 'blue')[i % 3]} and holds {i * 7 % 13} apples." for i in range(22))
HISTORY = [{"role": "user", "content": DOC}, {"role": "assistant", "content": "I have read the list."}]
QUESTION = "What colour is box 5?"


@pytest.fixture(scope="module")
def kv_engine(engine_home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient(test_hooks=True)
    # One thread, fixed: these tests compare greedy continuations token for token, and a thread change can move
    # the last bits of attention (ggml splits the KV over the threads in decode; docs/threads.md). One thread
    # also never collapses when other programs hold the cores.
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, n_threads=1))
    yield client
    client.close()
    mp.undo()


@pytest.fixture(scope="module")
def prompts(kv_engine: EngineClient) -> dict[str, list[int]]:
    conv = kv_engine.tokenize(messages=HISTORY, add_generation_prompt=False)
    full = kv_engine.tokenize(messages=[*HISTORY, {"role": "user", "content": QUESTION}])
    assert full[:len(conv)] == conv and len(conv) > 4 * CHUNK
    # The reference is the conversation prefilled, then the question: what a conversation kept in memory does.
    # (A one-shot prefill of everything can differ in the last bits: llama.cpp's CPU matmul rounds differently
    # for another batch split, so greedy decoding may part ways after a few tokens. docs/kv-format.md.)
    kv_engine.call("seq_rm", {"seq": 0, "start": 0})
    kv_engine.call("prefill", {"seq": 0, "tokens": conv})
    reference = [int(ev["token"]) for ev in kv_engine.generate(tokens=full, sampling=GREEDY)]
    kv_engine.call("seq_rm", {"seq": 0, "start": 0})
    kv_engine.call("prefill", {"seq": 0, "tokens": full})  # the whole prompt held; its last token re-evaluated
    reference_full = [int(ev["token"]) for ev in kv_engine.generate(tokens=full, sampling=GREEDY)]
    return {"conv": conv, "full": full, "reference": reference, "reference_full": reference_full}


@pytest.fixture
def session(kv_engine: EngineClient, tmp_path: Path) -> Iterator[KVSession]:
    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    s = KVSession(kv_engine, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
    yield s
    s.close()


def save_conversation(engine: EngineClient, session: KVSession, conv: list[int], owner: str = "conv:1",
                      **hooks: float) -> None:
    engine.call("seq_rm", {"seq": 0, "start": 0})
    engine.call("prefill", {"seq": 0, "tokens": conv})
    session.save(owner, test_hooks=dict(hooks) or None)
    assert session.flush(60)


def answer(engine: EngineClient, tokens: list[int]) -> tuple[list[int], int]:
    stream = engine.generate(tokens=tokens, sampling=GREEDY)
    got = [int(ev["token"]) for ev in stream]
    assert stream.result is not None
    return got, stream.result.cached_tokens


def chunk_files(session: KVSession) -> list[Path]:
    rows = session.index.db.query("SELECT path FROM kv_chunks ORDER BY start")
    return [session.kv_dir / r["path"] for r in rows]


def cleared(engine: EngineClient) -> None:
    engine.call("seq_rm", {"seq": 0, "start": 0})


# ----- the happy paths ---------------------------------------------------------------------------------


def test_restore_in_chunks_gives_the_identical_continuation(kv_engine: EngineClient, session: KVSession,
                                                            prompts: dict[str, list[int]]) -> None:
    conv, full = prompts["conv"], prompts["full"]
    save_conversation(kv_engine, session, conv)
    files = chunk_files(session)
    assert len(files) == -(-len(conv) // CHUNK)
    cleared(kv_engine)
    report = session.restore("conv:1", full)
    assert report.restored == len(conv) and report.failed == 0 and not report.skipped
    tokens, cached = answer(kv_engine, full)
    assert cached == len(conv)  # only the question was prefilled
    assert tokens == prompts["reference"]
    # The same conversation in memory: nothing is loaded again.
    assert session.restore("conv:1", full).skipped


def test_restore_in_a_new_engine_process(default_model_path: Path, session: KVSession, kv_engine: EngineClient,
                                         prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    with EngineClient() as fresh:
        fresh.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, n_threads=1))
        other = KVSession(fresh, session.index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        assert other.restore("conv:1", prompts["full"]).restored == len(prompts["conv"])
        assert answer(fresh, prompts["full"])[0] == prompts["reference"]
        other.close()


def test_whole_prompt_saved_re_evaluates_its_last_token(kv_engine: EngineClient, session: KVSession,
                                                        prompts: dict[str, list[int]]) -> None:
    full = prompts["full"]
    save_conversation(kv_engine, session, full)
    cleared(kv_engine)
    assert session.restore("conv:1", full).restored == len(full) - 1  # a state holds no logits
    tokens, cached = answer(kv_engine, full)
    assert cached == len(full) - 1 and tokens == prompts["reference_full"]


def test_two_conversations_share_the_document_chunks(kv_engine: EngineClient, session: KVSession,
                                                     prompts: dict[str, list[int]]) -> None:
    conv = prompts["conv"]
    save_conversation(kv_engine, session, conv, "conv:1")
    one = session.index.total_bytes()
    other = kv_engine.tokenize(messages=[HISTORY[0], {"role": "assistant", "content": "Noted."}],
                               add_generation_prompt=False)
    save_conversation(kv_engine, session, other, "conv:2")
    assert session.index.total_bytes() <= 1.35 * one  # 64-token chunks here; 512 in the app
    before = set(chunk_files(session))
    session.delete("conv:2")
    assert set(chunk_files(session)) < before
    assert all(p.exists() for p in chunk_files(session))
    session.delete("conv:1")
    assert not list((session.kv_dir).rglob("*.hkv"))


def test_typeahead_makes_send_one_decode_step(kv_engine: EngineClient, session: KVSession,
                                              prompts: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Type-ahead prefills the draft in pieces whose boundaries depend on typing and scheduling (a draft
    superseded before the draft thread saw it is never prefilled; the suffix waits for a pause). Those pieces
    are llama_decode batches, and llama.cpp's CPU kernels round differently for another batch split, so the
    promise is exact only against the same split: Send's continuation is the one you get by making the same
    prefill calls at Send time (no state is lost or mixed between the draft thread and Send). Measured on
    this model: prefilling the question in one batch or after any one split point gives tokens that can part
    ways at token 8 (2887 vs 7302: a near tie), which is what failed here under load (docs/threads.md)."""
    save_conversation(kv_engine, session, prompts["conv"])
    cleared(kv_engine)

    def tokens_for(text: str) -> list[int]:
        return kv_engine.tokenize(messages=[*HISTORY, {"role": "user", "content": text}])

    suffix = suffix_length(tokens_for)
    assert 2 <= suffix <= 8
    prefills: list[list[int]] = []  # every prefill the draft thread made, in order: its batch split
    call = kv_engine.call

    def recording(op: Request | str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        if isinstance(op, Prefill) and op.tokens is not None:  # the client sends typed requests
            prefills.append(list(op.tokens))
        elif op == "prefill" and params is not None:
            prefills.append(list(params["tokens"]))
        return call(op, params)

    monkeypatch.setattr(kv_engine, "call", recording)
    session.prefetch("conv:1", prompts["conv"])
    for draft in ("What col", "What colour is box 9", "What colour is box 5?"):  # an edit rolls back
        session.draft(tokens_for(draft), suffix)
    assert session.wait_drafted(30)
    monkeypatch.setattr(kv_engine, "call", call)
    full = prompts["full"]
    assert prefills and prefills[-1] == full
    assert session.restore("conv:1", full).skipped
    tokens, cached = answer(kv_engine, full)
    assert cached == len(full) - 1  # Send decoded one token
    # The same restore and the same prefills made again, then Send: the identical continuation. (The restore
    # leaves the conversation's last token out of what it holds, so the first draft prefill evaluates it
    # together with the draft: another split than the reference's, which is how token 8 came out 7302 instead
    # of 2887 in the failure this test once had.)
    cleared(kv_engine)
    session.restore("conv:1", prompts["conv"])
    for part in prefills:
        kv_engine.call("prefill", {"seq": 0, "tokens": part})
    assert answer(kv_engine, full) == (tokens, len(full) - 1)


def test_usage_and_budget(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"], "conv:1")
    usage = session.usage("conv:1")
    assert usage.n_tokens == len(prompts["conv"]) and usage.bytes > 0 and usage.seconds_saved > 0
    session.budget_bytes = usage.bytes + 1
    other = kv_engine.tokenize(text="A different conversation entirely. " * 20)
    save_conversation(kv_engine, session, other, "conv:2")
    assert session.usage("conv:1").bytes == 0  # least recently used went first
    assert session.usage("conv:2").bytes > 0


# ----- faults: never a crash, never a wrong answer, the bad file removed ---------------------------------


def expected(engine: EngineClient, prompts: dict[str, list[int]], held: int) -> list[int]:
    """The answer with the first ``held`` prompt tokens already in memory and the rest prefilled in one go
    (the batch split decides the last bits; see the ``prompts`` fixture). Cached per split."""
    key = f"expected_{held}"
    if key not in prompts:
        cleared(engine)
        if held:
            engine.call("prefill", {"seq": 0, "tokens": prompts["full"][:held]})
        prompts[key] = answer(engine, prompts["full"])[0]
    return prompts[key]


def assert_falls_back(engine: EngineClient, session: KVSession, prompts: dict[str, list[int]],
                      max_restored: int) -> None:
    cleared(engine)
    report = session.restore("conv:1", prompts["full"])
    assert report.restored <= max_restored
    tokens, cached = answer(engine, prompts["full"])
    assert cached == report.restored
    assert tokens == expected(engine, prompts, report.restored)


def test_truncated_file(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    bad = chunk_files(session)[1]
    bad.write_bytes(bad.read_bytes()[:-1000])
    assert_falls_back(kv_engine, session, prompts, CHUNK)
    assert not bad.exists()


def test_flipped_byte(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    bad = chunk_files(session)[0]
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x10
    bad.write_bytes(bytes(data))
    assert_falls_back(kv_engine, session, prompts, 0)
    assert not bad.exists()


def test_file_from_another_model(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    bad = chunk_files(session)[0]
    with open(bad, "rb") as fh:
        header = kvf.read_header(fh, bad.stat().st_size)
        payload = fh.read()
    foreign = kvf.fingerprint({"gguf": "another model"})
    plan = kvf.ChunkPlan(header.start, header.start + header.n_tokens, header.key, header.parent)
    bad.write_bytes(kvf.encode_header(foreign, plan, header.tokens, payload) + payload)
    assert_falls_back(kv_engine, session, prompts, 0)
    assert not bad.exists()


def test_file_from_another_kv_type(default_model_path: Path, kv_engine: EngineClient, session: KVSession,
                                   prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    chunks = session.index.lookup(session.fingerprint(), prompts["full"])
    with EngineClient() as q8:
        q8.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, n_threads=1, type_k="q8_0",
                           type_v="q8_0", flash_attn=True))
        other = KVSession(q8, session.index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        assert other.fingerprint() != session.fingerprint()
        assert other.restore("conv:1", prompts["full"]).restored == 0  # the index offers nothing
        # Forced: the f16 files handed straight to the q8_0 engine are refused before llama.cpp sees them.
        res = q8.call("state_load", {"seq": 0, "chunks": chunks.request(), "keep": chunks.keep})
        assert res["restored"] == 0 and "fingerprint" in res["failed"][0]["reason"]
        other.close()
    assert all(p.exists() for p in chunk_files(session))  # f16 files stay valid for f16 engines


def test_missing_file(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    files = chunk_files(session)
    files[2].unlink()
    assert_falls_back(kv_engine, session, prompts, 2 * CHUNK)
    assert chunk_files(session) == files[:2]  # the hole and what hung behind it are forgotten
    assert session.usage("conv:1").n_tokens == 2 * CHUNK


def test_index_row_without_file(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    files = chunk_files(session)
    files[1].unlink()
    assert session.index.reconcile()["rows_without_file"] == 1
    assert chunk_files(session) == files[:1]
    assert_falls_back(kv_engine, session, prompts, CHUNK)


def test_file_without_index_row(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    n_files = len(chunk_files(session))
    session.index.db.execute("DELETE FROM kv_chunks")
    session.index.db.execute("DELETE FROM kv_entries")
    assert_falls_back(kv_engine, session, prompts, 0)
    monkeypatch.setattr("hisho.core.kv.index.RECENT_S", -1.0)  # as if the app restarted a while later
    assert session.index.reconcile()["files_removed"] == n_files
    assert not list(session.kv_dir.rglob("*.hkv"))


def test_disk_full_during_a_write(kv_engine: EngineClient, session: KVSession, prompts: dict[str, list[int]]) -> None:
    save_conversation(kv_engine, session, prompts["conv"], fail_after=1000)
    assert not [p for p in session.kv_dir.rglob("*") if kvf.is_temp(p)]
    assert session.index.total_bytes() == 0
    assert_falls_back(kv_engine, session, prompts, 0)


def test_engine_killed_during_a_write(default_model_path: Path, tmp_path: Path, prompts: dict[str, list[int]]) -> None:
    client = EngineClient(test_hooks=True)
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, n_threads=1))
    index = KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")
    session = KVSession(client, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
    client.call("prefill", {"seq": 0, "tokens": prompts["conv"]})
    session.save("conv:1", test_hooks={"delay_s": 30})
    deadline = time.monotonic() + 20
    while not [p for p in index.kv_dir.rglob("*") if kvf.is_temp(p)] and time.monotonic() < deadline:
        time.sleep(0.02)
    client.kill()
    assert session.flush(10)
    temps = [p for p in index.kv_dir.rglob("*") if kvf.is_temp(p)]
    assert temps and index.total_bytes() == 0
    assert index.reconcile()["files_removed"] >= 1
    assert not [p for p in index.kv_dir.rglob("*") if kvf.is_temp(p)]
    # The next request restarts the engine; nothing usable on disk, so the prompt prefills and answers right.
    assert session.restore("conv:1", prompts["full"]).restored == 0
    assert answer(client, prompts["full"])[0] == expected(client, prompts, 0)
    session.close()
    client.close()


def test_q8_0_kv_round_trip_takes_about_half_the_disk(default_model_path: Path, kv_engine: EngineClient,
                                                      session: KVSession, prompts: dict[str, list[int]],
                                                      tmp_path: Path) -> None:
    save_conversation(kv_engine, session, prompts["conv"])
    f16_bytes = session.index.total_bytes()
    with EngineClient() as q8:
        q8.load(LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, n_threads=1, type_k="q8_0",
                           type_v="q8_0", flash_attn=True))
        index = KVIndex(Database(tmp_path / "q8.sqlite3"), tmp_path / "kv-q8")
        other = KVSession(q8, index, chunk_tokens=CHUNK, budget_bytes=1 << 40)
        q8.call("prefill", {"seq": 0, "tokens": prompts["conv"]})
        in_memory = answer(q8, prompts["full"])[0]
        save_conversation(q8, other, prompts["conv"])
        assert 0.45 < index.total_bytes() / f16_bytes < 0.6  # q8_0: 34 bytes per 32 values, f16: 64
        cleared(q8)
        assert other.restore("conv:1", prompts["full"]).restored == len(prompts["conv"])
        assert answer(q8, prompts["full"])[0] == in_memory
        other.close()


def test_writer_keeps_turn_sized_arenas_and_drops_huge_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first save of a long conversation needs an arena as large as its KV; kept, it would stay resident
    for the engine's life. Arenas up to WARM_ARENA_MAX are reused, larger ones are let go after the write."""
    from hisho.engine.kv import chunkwriter

    monkeypatch.setattr(chunkwriter, "WARM_ARENA_MAX", 8 << 20)
    writer = chunkwriter.ChunkWriter()
    small = writer.take_arena(1 << 20)
    writer.give_arena(small)
    assert writer.take_arena(1 << 20) is small
    writer.give_arena(small)
    huge = writer.take_arena(16 << 20)
    assert huge is small and huge.capacity >= 16 << 20   # grown in place of the kept one
    writer.give_arena(huge)
    assert writer.take_arena(1 << 20) is not huge


def test_writer_lets_a_huge_arena_go_once_its_write_is_done(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """An arena over WARM_ARENA_MAX is no longer referenced by the writer once its job is reported done (the
    writer thread's loop variable used to hold the finished job, and so its arena, until the next save)."""
    import weakref

    from hisho.engine.kv import chunkwriter

    monkeypatch.setattr(chunkwriter, "WARM_ARENA_MAX", 4 << 20)
    writer = chunkwriter.ChunkWriter()
    small, huge = chunkwriter.Arena(), chunkwriter.Arena()
    small.ensure(1)
    huge.ensure(8 << 20)
    gone, kept = weakref.ref(huge), weakref.ref(small)
    reports: list[list[dict[str, object]]] = []
    for i, arena in enumerate((small, huge)):  # the huge one last: nothing comes after it
        record: dict[str, object] = {"path": str(tmp_path / f"{i}.bin")}
        writer.submit(chunkwriter.Job(arena, [(record, b"h", 0, 16)], reports.append))
    del huge, small, arena
    assert writer.wait_idle(60)
    assert [r[0]["written"] for r in reports] == [True, True]
    assert kept() is not None and kept() in writer._free   # turn-sized: kept for the next save
    assert gone() is None   # let go after its write, not held until the next save
