"""``hisho bench resume --tokens N [--cold] [--kv-type q8_0] --json``: resume a saved conversation from SSD.

One run, ratios against baselines from the same run (docs/architecture.md, "How we measure"):
1. Engine A: the N-token conversation prefilled once (``prefill_s``), then, as the app does after every turn,
   the next user header appended (``next_turn_header_tokens``) and saved through ``KVSession``; then a fixed
   ~15-token question sent on it in memory (``ttft_in_memory_s``, the greedy reference continuation). A fresh
   send is that prefill plus the in-memory send (``ttft_fresh_s``, ``ttft_fresh_derived``): one prefill only.
2. Engine B, a new process with the model already loaded (``load_s`` and a one-reply ``warmup_s`` reported
   apart): restore to ready-to-decode (``restore_s``, median of ``--repeat``), a send from an empty sequence
   (restore + question prefill: ``ttft_restored_s``), the continuation compared token by token with the same
   conversation kept in memory in A (``identical_continuation``). Restores and raw reads are timed in both
   page-cache modes too (``restore_warm_s``/``restore_cold_s``, ``raw_read_warm_s``/``raw_read_cold_s``,
   ``restore_vs_raw_read_warm``/``_cold``); ``kv_bytes_per_token``: the chunk files' bytes per token restored.
3. The same question typed ahead character by character through ``KVSession.draft`` after a prefetch; the clock
   starts at Send (``ttft_typeahead_s``).
4. The chunk files read into a reused buffer (``raw_read_s``); a second conversation on the same document saved
   next to the first (``shared_prefix_bytes_ratio``: disk bytes of two ÷ one).
5. The same question sent as the app sends it (``ChatService`` with the KV hooks, on a store in the temporary
   folder): the engine requests made from the send to the first token (``send_round_trips``: prompt tokens
   and fit, KV restore, reply; ``turn_round_trips`` adds the KV save after it) and the seconds from the send to
   the first token (``ttft_app_send_s``), the conversation's KV on disk.
``--background N``: every phase runs beside N busy processes (hisho.bench.background), so fresh prefill,
restore and type-ahead are all measured on a loaded machine and the ratios compare like with like.
KV files and the index live in a temporary folder: the bench never touches the user's KV cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho.bench.background import busy_processes
from hisho.bench.filler import document
from hisho.core.conversations.chat import ChatService, FitReport
from hisho.core.conversations.store import ChatSettings, ConversationStore
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.kv.chat_hooks import KVChat
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession, next_turn_prefix, suffix_length
from hisho.core.models.store import ModelStore
from hisho.core.planner.launch import load_params_for, open_model
from hisho.core.units import padded_cells

QUESTION = "What colour is item 17?"  # 17 tokens with the chat template around it
REPLY = "I have read the whole list."
CONTINUATION = 16
TYPE_DELAY_S = 0.06  # a fast typist: ~16 characters a second




def run(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "image", False):  # a conversation that holds an image (hisho.bench.resume_image)
        from hisho.bench import resume_image

        return resume_image.run(args)
    n = max(256, int(args.tokens or 4096))
    repeat = max(1, int(args.repeat))
    from hisho.bench.model_ids import resolve
    from hisho.bench.shapes import SHAPES

    model_path = resolve(args.model) or open_model(args.model, ModelStore())
    base = load_params_for(model_path, n_ctx=padded_cells(n + 512), n_seq_max=2, saves_kv=True)
    kv = args.kv_type or base.type_k
    params = dataclasses.replace(base, type_k=kv, type_v=kv, flash_attn=base.flash_attn or kv != "f16")
    greedy = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=CONTINUATION, ignore_eos=True)
    background = max(0, int(getattr(args, "background", 0) or 0))
    with tempfile.TemporaryDirectory(prefix="hisho-bench-kv-") as tmp, busy_processes(background):
        index = KVIndex(Database(Path(tmp) / "index.sqlite3"), Path(tmp) / "kv")
        shape = SHAPES.get(str(args.model).removeprefix("shape:").split(":")[0])
        out: dict[str, Any] = {"tokens": 0, "kv_type": kv, "cold": bool(args.cold), "n_ctx": params.n_ctx,
                               "background": background, "_tmp": tmp, "model": model_path.name,
                               "memory": shape.memory if shape else None}
        a = _phase_fresh(params, index, n, greedy, out)
        _phase_restore(params, index, a, greedy, repeat, bool(args.cold), out)
    return out


def _warm_up(client: EngineClient) -> float:
    """One short reply, as a running app has already given: the first decode of a process allocates its compute
    buffers, which is load time, not time to first token. Reported apart."""
    started = time.perf_counter()
    client.generate(prompt="Hello", sampling=Sampling(temperature=0.0, max_tokens=2)).collect()
    client.seq_rm(0)
    return time.perf_counter() - started


def _send(client: EngineClient, tokens: list[int], sampling: Sampling, started: float) -> tuple[float, list[int]]:
    """Generate from ``tokens``; seconds from ``started`` to the first token, and the tokens."""
    first = 0.0
    got: list[int] = []
    for ev in client.generate(tokens=tokens, sampling=sampling):
        if not first:
            first = time.perf_counter() - started
        got.append(int(ev["token"]))
    return first, got


def _conversation(client: EngineClient, n: int) -> tuple[list[dict[str, str]], list[int]]:
    """Messages whose rendered conversation has about ``n`` tokens, and those tokens."""
    per = len(client.tokenize(document(200))) / 200
    sentences = max(1, int(n / per))
    while True:
        history = [{"role": "user", "content": document(sentences)}, {"role": "assistant", "content": REPLY}]
        conv = client.tokenize(messages=history, add_generation_prompt=False)
        if len(conv) <= n or sentences == 1:
            return history, conv
        sentences -= max(1, int((len(conv) - n) / per))


def _phase_fresh(params: LoadParams, index: KVIndex, n: int, greedy: Sampling, out: dict[str, Any]) -> dict[str, Any]:
    """The one prefill of the conversation: timed, saved as the app saves it, then the question sent on it.

    A fresh send costs that prefill plus the question's prefill and first token (``ttft_fresh_s`` is their sum,
    ``ttft_fresh_derived``): sending the whole prompt again from nothing would prefill the conversation a second
    time, which at 16K on a 3B model is most of an hour on a 2-core laptop and tells nothing new."""
    with EngineClient() as client:
        client.load(params)
        out["fresh_warmup_s"] = _warm_up(client)
        history, conv = _conversation(client, n)
        full = client.tokenize(messages=[*history, {"role": "user", "content": QUESTION}])
        out["tokens"], out["question_tokens"] = len(conv), len(full) - len(conv)
        client.seq_rm(0)
        started = time.perf_counter()
        out["prefill_s"] = float(client.prefill(conv, 0)["seconds"])
        # What the app does after every turn before saving (KVChat._close_turn): append the next user header.
        head = next_turn_prefix(lambda t: client.tokenize(messages=[*history, {"role": "user", "content": t}]))
        client.prefill(head, 0)
        prefill_wall = time.perf_counter() - started
        out["saved_tokens"], out["next_turn_header_tokens"] = len(head), len(head) - len(conv)
        session = KVSession(client, index, budget_bytes=1 << 50)
        started = time.perf_counter()
        session.save("bench:a")
        out["save_return_s"] = time.perf_counter() - started
        session.flush()
        out["save_s"] = time.perf_counter() - started
        out["save_copy_s"] = session.last_save.get("copy_s")  # the in-memory copy the next reply waits for
        # The question on the conversation still in memory: the reference continuation (the same batch split
        # as after a restore), the best a restore could hope for, and with the prefill the fresh send.
        out["ttft_in_memory_s"], reference = _send(client, full, greedy, time.perf_counter())
        out["ttft_fresh_s"] = prefill_wall + out["ttft_in_memory_s"]
        out["ttft_fresh_derived"] = True
        session.close()
    return {"history": history, "conv": conv, "full": full, "reference": reference}


def _phase_restore(params: LoadParams, index: KVIndex, a: dict[str, Any], greedy: Sampling, repeat: int,
                   cold: bool, out: dict[str, Any]) -> None:
    full = a["full"]
    with EngineClient() as client:
        started = time.perf_counter()
        client.load(params)
        out["load_s"] = time.perf_counter() - started
        out["warmup_s"] = _warm_up(client)
        session = KVSession(client, index, budget_bytes=1 << 50)
        match = index.lookup(session.fingerprint(), full)
        files = [Path(c["path"]) for c in match.chunks]
        out["state_bytes"] = sum(p.stat().st_size for p in files)
        out["chunks"] = len(files)
        started = time.perf_counter()
        session.prepare(max(p.stat().st_size for p in files))
        out["prepare_s"] = time.perf_counter() - started
        modes = (cold, not cold) if hasattr(os, "posix_fadvise") else (False,)
        for mode in modes:   # the asked-for mode first (the figures below), then the other one beside it
            restores, engine_s = [], []
            for _ in range(repeat):
                client.seq_rm(0)
                _drop_cache(files, mode)
                if mode:   # what the dropped cache still holds (0: the cold restore reads the disk)
                    _resident_after_drop(files, out)
                rep = session.restore("bench:a", full)
                restores.append(rep.seconds)
                engine_s.append(rep.engine_s)
            out[f"restore_{'cold' if mode else 'warm'}_s"] = statistics.median(restores)
            if mode == cold:
                out["restore_s"] = statistics.median(restores)
                out["restore_engine_s"] = statistics.median(engine_s)
                out["restored_tokens"] = rep.restored
        out["kv_bytes_per_token"] = round(out["state_bytes"] / max(1, out["restored_tokens"]))
        # Send from an empty sequence: restore + question prefill + first token.
        client.seq_rm(0)
        _drop_cache(files, cold)
        started = time.perf_counter()
        session.restore("bench:a", full)
        out["ttft_restored_s"], restored_tokens = _send(client, full, greedy, started)
        out["identical_continuation"] = restored_tokens == a["reference"]
        _typeahead(client, session, a, greedy, files, cold, out)
        if cold or len(modes) > 1:   # after every restore so far: a file the engine still maps cannot be dropped
            _drop_cache(files, True)
            _resident_after_drop(files, out)
        buf = bytearray(b"\1" * max(p.stat().st_size for p in files))  # allocated and touched once, untimed
        for mode in modes:
            raw = statistics.median(_raw_read(files, buf, mode) for _ in range(repeat))
            out[f"raw_read_{'cold' if mode else 'warm'}_s"] = raw
            out[f"raw_read_serial_{'cold' if mode else 'warm'}_s"] = statistics.median(
                _raw_read(files, buf, mode, ahead=False) for _ in range(repeat))
            if mode == cold:
                out["raw_read_s"] = raw
        _shared_prefix(client, session, a, out)
        _app_send(client, session, a, files, cold, Path(out.pop("_tmp")), out)   # last: it saves a chat's KV
        session.close()
    _ratios(out)


def _app_send(client: EngineClient, session: KVSession, a: dict[str, Any], files: list[Path], cold: bool,
              tmp: Path, out: dict[str, Any]) -> None:
    """The question sent through the chat service as the window sends it: one job (prepare, fit, record, KV
    restore, reply) on this thread, counting the engine requests it makes."""
    store = ConversationStore(Database(tmp / "chats.sqlite3"))
    try:
        service = ChatService(store, client)
        KVChat(service, session).install()
        settings = ChatSettings(temperature=0.0, repeat_penalty=1.0, max_tokens=CONTINUATION)
        cid = store.create("bench", settings=settings).id
        user = store.add_message(cid, "user", a["history"][0]["content"])
        store.add_message(cid, "assistant", a["history"][1]["content"], parent_id=user.id)
        client.seq_rm(0)
        _drop_cache(files, cold)
        first: list[float] = []
        trips: list[int] = []
        before = client.requests
        started = time.perf_counter()

        def on_text(_piece: str) -> None:
            if not first:
                first.append(time.perf_counter() - started)
                trips.append(client.requests - before)   # what the first-token wait held

        made = service.send_if_fits(cid, QUESTION)
        assert not isinstance(made, FitReport), "the bench conversation does not fit its context"
        service.run(made[0], on_text, made[1])
        out["send_round_trips"] = trips[0] if trips else None
        out["turn_round_trips"] = client.requests - before      # with the KV save after the reply
        out["ttft_app_send_s"] = first[0] if first else None
    finally:
        store.close()


def _typeahead(client: EngineClient, session: KVSession, a: dict[str, Any], greedy: Sampling, files: list[Path],
               cold: bool, out: dict[str, Any]) -> None:
    history = a["history"]

    def tokens_for(text: str) -> list[int]:
        return client.tokenize(messages=[*history, {"role": "user", "content": text}])

    suffix = suffix_length(tokens_for)
    client.seq_rm(0)
    _drop_cache(files, cold)
    prefills: list[list[int]] = []   # the draft thread's prefill calls, in order: the question's batch split
    prefill = client.prefill

    def recording(tokens: list[int], seq: int = 0) -> dict[str, Any]:
        prefills.append(list(tokens))
        return prefill(tokens, seq)

    client.prefill = recording  # type: ignore[method-assign]
    try:
        session.prefetch("bench:a", a["conv"])  # the conversation was selected in the sidebar
        for i in range(1, len(QUESTION) + 1):
            session.draft(tokens_for(QUESTION[:i]), suffix)
            time.sleep(TYPE_DELAY_S)
        session.wait_drafted()
    finally:
        client.prefill = prefill  # type: ignore[method-assign]
    started = time.perf_counter()  # Send
    session.restore("bench:a", a["full"])
    out["ttft_typeahead_s"], typed = _send(client, a["full"], greedy, started)
    out["typeahead_identical"] = typed == a["reference"]
    out["typeahead_first_difference"] = _first_difference(typed, a["reference"])
    out["typeahead_prefills"] = len(prefills)
    # The exact promise (docs/threads.md, "Does a thread change alter greedy output?"): the same restore and
    # the same prefill calls made again give the same continuation. Where this holds and typeahead_identical
    # does not, the difference is the batch split's rounding (the question prefilled in pieces as it was typed
    # against one batch), not state lost or mixed between the draft thread and Send.
    client.seq_rm(0)
    session.restore("bench:a", a["conv"])
    for part in prefills:
        prefill(part, 0)
    _, replayed = _send(client, a["full"], greedy, time.perf_counter())
    out["typeahead_replay_identical"] = replayed == typed


def _first_difference(got: list[int], want: list[int]) -> int | None:
    """The index of the first token where two continuations part (None: identical)."""
    for i, (x, y) in enumerate(zip(got, want, strict=False)):
        if x != y:
            return i
    return None if len(got) == len(want) else min(len(got), len(want))


def _shared_prefix(client: EngineClient, session: KVSession, a: dict[str, Any], out: dict[str, Any]) -> None:
    """A second conversation on the same document: different reply, then saved next to the first."""
    one = session.index.total_bytes()
    history = [a["history"][0], {"role": "assistant", "content": "Noted: a long list of boxes and apples."}]
    tokens = client.tokenize(messages=history, add_generation_prompt=False)
    session.restore("bench:b", tokens)
    client.prefill(tokens, 0)
    session.save("bench:b")
    session.flush()
    out["shared_prefix_bytes_ratio"] = round(session.index.total_bytes() / one, 4) if one else None


def _raw_read(files: list[Path], buf: bytearray, cold: bool, *, ahead: bool = True) -> float:
    """Seconds to read the files' bytes into a warm buffer, each file in one sequential pass: the baseline a
    restore is compared with (it also has to verify and hand the bytes to llama.cpp).

    ``ahead`` (the baseline): read as a plain sequential reader that knows its next file reads the disk at
    its best: ``POSIX_FADV_SEQUENTIAL`` on the file (what ``cp`` and ``cat`` ask for) and ``POSIX_FADV_WILLNEED``
    on the next one while this one is read, the read-ahead a restore gives itself (engine/kv/kvstate.py). Without
    it (``raw_read_serial_*``, the baseline before) every file comes in the kernel's default read-ahead window
    at a time, one request after another: on a virtual disk whose requests are slow but many can be in flight,
    that read was ~4x slower than the restore that reads the same bytes, and the ratio said nothing about the
    restore."""
    view = memoryview(buf)
    _drop_cache(files, cold)
    advise = ahead and hasattr(os, "posix_fadvise")
    started = time.perf_counter()
    for i, path in enumerate(files):
        if advise and i + 1 < len(files):
            _advise(files[i + 1], "POSIX_FADV_WILLNEED")
        with open(path, "rb", buffering=0) as fh:
            if advise:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            got = 0
            while n := fh.readinto(view[got:]):
                got += n
    return time.perf_counter() - started


def _advise(path: Path, advice: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, getattr(os, advice))
    finally:
        os.close(fd)


def _resident_after_drop(files: list[Path], out: dict[str, Any]) -> None:
    """``cold_resident_bytes``: the most of the chunk files any drop left in the page cache (0: every cold read
    came from the disk). Pages a process still maps are not dropped."""
    got = resident_bytes(files)
    if got is not None:
        out["cold_resident_bytes"] = max(got, int(out.get("cold_resident_bytes") or 0))


def resident_bytes(files: list[Path]) -> int | None:
    """Bytes of ``files`` in the page cache now (``mincore`` over a read-only map; None where unsupported):
    after a drop, what a "cold" read or restore still finds in memory."""
    import ctypes
    import mmap

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        c_mmap, c_munmap, c_mincore = libc.mmap, libc.munmap, libc.mincore
    except (OSError, AttributeError):
        return None
    c_mmap.restype = ctypes.c_void_p
    c_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    c_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    c_mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = mmap.PAGESIZE
    total = 0
    for path in files:
        size = path.stat().st_size
        if not size:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = c_mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            try:
                vec = ctypes.create_string_buffer((size + page - 1) // page)
                if c_mincore(addr, size, vec) != 0:
                    return None
                total += sum(b & 1 for b in vec.raw) * page
            finally:
                c_munmap(addr, size)
        finally:
            os.close(fd)
    return min(total, sum(p.stat().st_size for p in files))


def _drop_cache(files: list[Path], cold: bool) -> None:
    """--cold: evict the files' pages so the next read comes from the disk (posix_fadvise, no root needed)."""
    if not cold:
        return
    if not hasattr(os, "posix_fadvise"):
        raise SystemExit("hisho: error: --cold needs posix_fadvise (Linux); this OS cannot drop the page cache")
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _ratios(out: dict[str, Any]) -> None:
    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 2) if b > 0 else None

    out["restore_speedup"] = ratio(out["prefill_s"], out["restore_s"])
    out["speedup"] = ratio(out["ttft_fresh_s"], out["ttft_restored_s"])
    out["typeahead_speedup"] = ratio(out["ttft_fresh_s"], out["ttft_typeahead_s"])
    out["restore_vs_raw_read"] = ratio(out["raw_read_s"], out["restore_s"])
    out["restore_vs_raw_read_engine"] = ratio(out["raw_read_s"], out["restore_engine_s"])
    for mode in ("warm", "cold"):
        if f"restore_{mode}_s" in out and f"raw_read_{mode}_s" in out:
            out[f"restore_vs_raw_read_{mode}"] = ratio(out[f"raw_read_{mode}_s"], out[f"restore_{mode}_s"])
    for key, value in list(out.items()):
        if isinstance(value, float):
            out[key] = round(value, 5)
