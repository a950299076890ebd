"""``hisho bench plan --kept``: the plan against a peak reached the way a chat reaches it on a sliding-window or
recurrent model: the context nearly full, the engine's partial-state checkpoints taken (more than it keeps, so
the eviction's transient is in the peak), then the whole sequence saved to chunk files and restored.

The child (``python -m hisho.bench.plan_kept`` through ``hisho.core.spawn``, role ``kept-probe``) loads through
the engine's own ``Runtime`` with two sequences (the window's profile: one for the chat, one scratch for chunk
copies), fills all but ``checkpoints x step`` tokens with the probe's synthetic fill (a state plus one real
ubatch, as ``bench plan`` does), then decodes ``step`` tokens and takes a checkpoint (``PrefixKeeper.checkpoint``)
``checkpoints - 1`` times, saves (``KVState.save``, 512-token chunks), takes the last step and checkpoint beside
the arena the writer kept, and restores (``KVState.restore``). It reports
the peak RSS growth and what the engine held: checkpoint bytes, the save's arena, the chunk files' bytes."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hisho.core.engine.protocol import LoadParams
from hisho.core.planner.calibrate import (
    ProbeFailed as ProbeFailed,  # the one ProbeFailed; plan_profiles catches it here
)
from hisho.core.planner.calibrate import child_answer
from hisho.core.planner.state import CHUNK_TOKENS

log = logging.getLogger("hisho.bench")

# The memory types' full shapes (bench/shapes.py) and the quant people run them in; gpt-oss-20b is 12 GB, so its
# alternating 128-token window is measured on the tiny shape of the same pattern.
KEPT_MODELS = (("gemma-3-1b", "Q4_K_M"), ("gpt-oss-tiny", "Q8_0"), ("lfm2-350m", "Q4_K_M"),
               ("granite-4.0-h-1b", "Q4_K_M"))
KEPT_CONTEXTS = (2048, 8192, 32768)
RAM_SHARE = 0.5  # a cell is measured only when its plan needs at most this share of the available RAM
PROBE_TIMEOUT_S = 3600


def kept_cells(only: str | None, n_batch: int, n_threads: int, machine: Any, fa_allowed: bool, *,
               kv_types: tuple[str, ...], cell_configs: Callable[..., list[Any]],
               summary: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> dict[str, Any]:
    """Every (model, n_ctx, KV type) cell of ``KEPT_MODELS`` (``only``: "shape[:quant][@n_ctx[/kv]],...", which
    may also name another true shape with its quant, e.g. a dense "llama-3.2-1b:Q4_K_M@8192/f16"), planned as the
    window loads it (two sequences, KV saved) and measured in a fresh child each. ``cell_configs`` and
    ``summary`` are bench.plan's (passed in: that module calls this one)."""
    from hisho.bench.shapes import SHAPES, model_file
    from hisho.core.models.gguf_facts import read_facts
    from hisho.core.planner import calibration_for

    wanted = [_cell_filter(w) for w in (only or "").split(",") if w.strip()]
    models = [(s, q) for s, q in KEPT_MODELS if not wanted or any(w[0] in (s, f"{s}:{q}") for w in wanted)]
    models += [(n.split(":")[0], n.split(":")[1]) for n, _c, _k in wanted
               if ":" in n and n.split(":")[0] in SHAPES and tuple(n.split(":")) not in models]

    def picked(shape: str, quant: str, n_ctx: int, kv: str) -> bool:
        return not wanted or any(n in (shape, f"{shape}:{quant}") and c in (None, n_ctx) and k in (None, kv)
                                 for n, c, k in wanted)

    cells: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for shape, quant in models:
        path = model_file(shape, quant)
        facts = read_facts(path)
        calib = calibration_for(facts, n_ubatch=n_batch)
        for n_ctx in sorted({*KEPT_CONTEXTS, *(c for _n, c, _k in wanted if c)}):
            if facts.context_length and n_ctx > facts.context_length:
                continue
            for kv in kv_types:
                if not picked(shape, quant, n_ctx, kv):
                    continue
                cfg = dataclasses.replace(cell_configs(path, n_ctx, kv, n_batch, machine, fa_allowed=fa_allowed)[0],
                                          n_seq_max=2, saves_kv=True)
                label = f"{shape}:{quant}"
                try:
                    cell = kept_cell(facts, cfg, calib, machine, str(path), n_threads)
                except (ProbeFailed, ValueError) as e:
                    log.warning("cell %s n_ctx %d %s failed: %s", label, n_ctx, kv, e)
                    failed.append({"model": label, "n_ctx": n_ctx, "type_k": kv, "error": str(e)})
                    continue
                cell["model"] = label
                sys.stderr.write(json.dumps(cell) + "\n")
                sys.stderr.flush()
                cells.append(cell)
    out: dict[str, Any] = {"matrix": True, "kept": True, "contexts": list(KEPT_CONTEXTS),
                           "models": [f"{s}:{q}" for s, q in models]}
    if cells:
        out.update(summary(cells))
    out["cells"] = cells
    if failed:
        out["failed_cells"] = failed
    return out


def _cell_filter(item: str) -> tuple[str, int | None, str | None]:
    """"shape[:quant][@n_ctx[/kv]]" as (name, n_ctx or None, KV type or None)."""
    name, _, cell = item.strip().partition("@")
    ctx, _, kv = cell.partition("/")
    return name, int(ctx) if ctx else None, kv or None


def kept_cell(facts: Any, cfg: Any, calib: Any, machine: Any, model_path: str, n_threads: int) -> dict[str, Any]:
    from hisho.core.planner.memory import estimate
    from hisho.core.planner.state import kept_bytes
    from hisho.core.units import MIB

    cpu = machine.cpu or None
    predicted = estimate(facts, cfg, calib, cpu=cpu)
    if predicted.resident > RAM_SHARE * machine.ram_available:
        raise ValueError(f"needs {predicted.resident / MIB:.0f} MiB: more than {RAM_SHARE:.0%} of the free RAM")
    params = LoadParams(model_path=model_path, n_ctx=cfg.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch,
                        n_threads=n_threads, flash_attn=cfg.flash_attn, type_k=cfg.type_k, type_v=cfg.type_v,
                        n_seq_max=cfg.n_seq_max, use_mmap=predicted.mmap if cpu else None)
    caches = {"dense": 1, "swa": 2, "hybrid": 2 if any(facts.swa_layers) else 1, "recurrent": 0}[facts.memory]
    request = {"params": params.to_dict(), "n_swa": facts.n_swa, "kv_caches": caches}
    m = run_kept_probe(request)
    buffers = m["buffers"]
    reported = sum(sum(buffers.get(k, {}).values()) for k in ("model", "KV", "RS", "compute", "output"))
    arena = -(-int(m["save_copied_bytes"]) // (4 << 20)) * (4 << 20)
    measured_kept = max(int(m["checkpoint_bytes_max_held"]), int(m["checkpoint_bytes_kept"])) + arena
    measured_committed = reported + int(m["our_arrays"]) + measured_kept
    k = kept_bytes(facts, cfg)
    measured = int(m["peak_growth"])
    return {
        "n_ctx": cfg.n_ctx, "type_k": cfg.type_k, "type_v": cfg.type_v, "flash_attn": cfg.flash_attn,
        "memory": facts.memory, "kind": m["kind"], "mmap": m["mmap"],
        "predicted_resident": predicted.resident, "measured_resident": measured,
        "resident_error_pct": pct_error(predicted.resident, measured),
        "predicted_committed": predicted.committed, "measured_committed": measured_committed,
        "committed_error_pct": pct_error(predicted.committed, measured_committed),
        "predicted_kept": predicted.kept, "predicted_checkpoint": k.per_checkpoint,
        "predicted_checkpoints_kept": k.kept_per_seq, "predicted_arena": k.arena,
        "measured_checkpoint": max(m["checkpoint_sizes"], default=0), "measured_checkpoints_kept": m["checkpoints_kept"],
        "measured_checkpoint_bytes_max": m["checkpoint_bytes_max_held"], "measured_arena": arena,
        "save_copied_bytes": m["save_copied_bytes"], "save_chunks": m["save_chunks"],
        "chunk_file_bytes": m["chunk_file_bytes"], "restored": m["restored"], "step": m.get("step", 16),
        "peak_before_save": m["after_checkpoints_peak"], "peak_after_save": m["after_save_peak"],
        "estimate": predicted.estimate,
    }


def run_kept_probe(request: dict[str, Any]) -> dict[str, Any]:
    """``measure_kept(request)`` in a fresh child (``spawn`` role "kept-probe"); its last JSON line. Raises
    ProbeFailed when it times out or prints none."""
    from hisho.core import spawn
    from hisho.core.planner.state import HEAP_RETAINS, HEAP_TRIM

    # glibc's mmap threshold at its dynamic maximum from the start: the state a long session reaches (freed
    # checkpoints up to 32 MiB stay in the heap), not the fresh process's 128 KiB.
    env = spawn.child_env(MALLOC_MMAP_THRESHOLD_=str(HEAP_RETAINS), MALLOC_TRIM_THRESHOLD_=str(HEAP_TRIM))
    return child_answer("kept-probe", request=request, timeout=PROBE_TIMEOUT_S, what="the kept-state probe", env=env)


def pct_error(predicted: int, measured: int) -> float:
    return round(100.0 * (predicted - measured) / measured, 3) if measured else 0.0


def measure_kept(request: dict[str, Any]) -> dict[str, Any]:
    from hisho.engine.kv.chunkwriter import ChunkWriter
    from hisho.engine.kv.kvstate import KVState
    from hisho.engine.measure.probe import _fill_by_state, batch_bytes, load_measured, memory_now

    # 9 x 64 tokens after the fill: past a window cache's n_swa x 2 + n_ubatch cells, so every one of them holds a
    # cell of the sequence (as in a long chat) when the save copies the window part. Read with the interval marks
    # on (``read``), 9 x 72: turns that end between the marks (a multiple of 64 would end on every other one, and a
    # mark that is also a turn's is one checkpoint, not two), so the sequence keeps the most a context can.
    read = bool(request.get("read"))
    n_ck, step = int(request.get("checkpoints", 9)), int(request.get("step", 72 if read else 64))
    probe = load_measured(request)
    rt, base, loaded, buffers, tokens = probe.rt, probe.base, probe.loaded, probe.buffers, probe.tokens
    full_ctx = rt.n_ctx
    n_ctx = rt.n_ctx_seq  # one sequence's cells: all of them, or its own stream's (the API's slots)
    # The probe's synthetic fill (a state built in an anonymous mmap, unmapped before the peak is reset, then one
    # real ubatch) or a real reading (``read``), told the context ends where the checkpoints' steps begin.
    caches = request.get("kv_caches")
    # ``sequences``: how many a front end fills at once (serve's slots, each in its own stream); one otherwise.
    seqs = range(int(request.get("sequences", 1)))
    # ``end_full``: the first sequence's last prompt ubatch ends at the full context at the end, beside what the
    # engine keeps (a long chat's next prompt after a save and a restore); otherwise the steps end there.
    tail = rt.n_batch if request.get("end_full") else 0
    # ``read``: the context filled by one long reading with the engine's interval checkpoints on, as a front end
    # reads a long prompt (the most checkpoints a context keeps: docs/planner.md "Kept state"); the steps and the
    # last ubatch stop at the marks too. Otherwise the synthetic fill, and the steps read with the marks off.
    rt.n_ctx = n_ctx - n_ck * step - tail
    try:
        for seq in seqs:
            if read:
                rt.decode_tokens(seq, tokens[:rt.n_ctx], want_logits=False)
            else:
                _fill_by_state(rt, tokens, int(request.get("n_swa", 0)), None if caches is None else int(caches),
                               seq)
    finally:
        rt.n_ctx = full_ctx
    keeper = rt.keeper
    sizes: list[int] = []
    held_max = 0
    pos = dict.fromkeys(seqs, n_ctx - n_ck * step - tail)

    def to_full(seq: int = 0) -> None:
        """``seq`` prompted up to the full context (its last ubatch attends every cell: the bare context's peak)
        and a checkpoint taken there, so what is saved next is the whole context the plan prices."""
        nonlocal held_max
        held = len(rt.seqs.get(seq, []))
        if tail and held < n_ctx:
            rt.decode_tokens(seq, tokens[held:n_ctx], want_logits=False, checkpoints=read)
            pos[seq] = n_ctx
            before = keeper.checkpoint_bytes()
            if keeper.checkpoint(seq):
                sizes.append(len(keeper.checkpoints[seq][-1].data))
                held_max = max(held_max, before + sizes[-1])

    def step_and_checkpoint(seq: int = 0) -> None:
        nonlocal held_max
        rt.decode_tokens(seq, tokens[pos[seq]:pos[seq] + step], want_logits=False, checkpoints=read)
        pos[seq] += step
        before = keeper.checkpoint_bytes()
        if keeper.checkpoint(seq):
            sizes.append(len(keeper.checkpoints[seq][-1].data))
            held_max = max(held_max, before + sizes[-1])

    for _ in range(n_ck - 1):
        for seq in seqs:
            step_and_checkpoint(seq)
    after_checkpoints = memory_now()
    if not request.get("save", True):  # a front end that saves no KV (generate, summarize): no save, no restore
        to_full()
        return _unsaved(request, probe, sizes, held_max, memory_now())
    reports: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hisho-kept-") as tmp:
        # The first save of a model file hashes every byte of it (its identity, then cached on disk): measured
        # with an empty cache, as the first chat with a new model pays it.
        os.environ["HISHO_HOME"] = str(Path(tmp) / "home")
        writer = ChunkWriter()
        kv = KVState(rt, writer)
        after_kvstate = memory_now()
        for seq in seqs:
            to_full(seq)
        summary = kv.save(0, Path(tmp) / "kv", CHUNK_TOKENS, reports.append)
        for seq in seqs[1:]:  # the other slots' saves queued behind the first (each copies into its own arena)
            kv.save(seq, Path(tmp) / f"kv{seq}", CHUNK_TOKENS, lambda _r: None)
        writer.wait_idle()
        if not tail:  # the last step's checkpoint beside the arena the writer kept (a chat's next turn)
            step_and_checkpoint()
        after_save = memory_now()
        chunks = reports[0]["chunks"] if reports else []
        lows = [int(c["swa_lo"]) for c in chunks if c.get("swa_lo") is not None and c["swa_lo"] < c["start"] + c["n_tokens"]]
        warm = max((a.capacity for a in writer._free), default=0)
        kept_checkpoints = len(keeper.checkpoints.get(0, []))
        kinds = {seq: [c.interval for c in keeper.checkpoints.get(seq, [])] for seq in seqs}
        for seq, marks in kinds.items():
            log.debug("sequence %d keeps %d turn and %d interval checkpoints (%s)", seq, marks.count(False),
                      marks.count(True), [c.n for c in keeper.checkpoints.get(seq, [])])
        kept_bytes = keeper.checkpoint_bytes()
        t0 = time.perf_counter()
        restored = kv.restore(0, [{"path": c["path"], "key": c["key"]} for c in chunks], keep=n_ctx)
        restore_s = time.perf_counter() - t0
        file_bytes = sum(int(c.get("bytes", 0)) for c in chunks)
    end = memory_now()
    arrays = batch_bytes(rt)
    kind = keeper.kind
    rt.close()
    return {"ok": True, "n_ctx": rt.n_ctx, "filled": n_ctx, "kind": kind, "step": step, "load_s": rt.load_s, "mmap": rt.mmap,
            "baseline_rss": base["rss"], "peak_growth": max(end["peak"], loaded["peak"]) - base["rss"],
            "load_peak_growth": loaded["peak"] - base["rss"],
            "after_checkpoints_peak": after_checkpoints["peak"] - base["rss"],
            "after_save_peak": after_save["peak"] - base["rss"],
            "after_kvstate_rss": after_kvstate["rss"] - base["rss"],
            "after_checkpoints_rss": after_checkpoints["rss"] - base["rss"],
            "after_save_rss": after_save["rss"] - base["rss"], "end_rss": end["rss"] - base["rss"],
            "checkpoint_sizes": sizes, "checkpoints_kept": kept_checkpoints, "checkpoint_bytes_kept": kept_bytes,
            "turns_intervals_kept": [[m.count(False), m.count(True)] for m in kinds.values()],
            "checkpoint_bytes_max_held": held_max, "swa_low": min(lows, default=-1),
            "save_copied_bytes": int(summary["copied_bytes"]), "save_chunks": len(chunks),
            "chunk_payload_bytes": [int(c.get("bytes", 0)) for c in chunks], "chunk_file_bytes": file_bytes,
            "warm_arena": warm, "restored": int(restored["restored"]), "restore_s": restore_s,
            "buffers": buffers, "our_arrays": arrays}


def _unsaved(request: dict[str, Any], probe: Any, sizes: list[int], held_max: int,
             after_checkpoints: dict[str, int]) -> dict[str, Any]:
    """The end of a cell for a front end that saves no KV. With ``job`` ([sequences, cells each]) the summary
    job's context is then swapped in (``Runtime.job_context``: one KV stream per sequence, within the chat
    context's cells) and its first sequence filled as the context was: the job's peak beside the chat's."""
    from hisho.engine.measure.probe import _fill_by_state, batch_bytes, memory_now

    rt, base, loaded = probe.rt, probe.base, probe.loaded
    peak = max(after_checkpoints["peak"], loaded["peak"])
    job = request.get("job")
    job_peak = 0
    if job:
        caches = request.get("kv_caches")
        with rt.job_context(int(job[0]), int(job[1])) as jrt:
            full = jrt.n_ctx
            jrt.n_ctx = jrt.n_ctx_seq
            try:
                _fill_by_state(jrt, probe.tokens, int(request.get("n_swa", 0)), None if caches is None else int(caches))
            finally:
                jrt.n_ctx = full
            job_peak = memory_now()["peak"] - base["rss"]
    end = memory_now()
    arrays = batch_bytes(rt)
    kind = rt.keeper.kind
    rt.close()
    return {"ok": True, "n_ctx": rt.n_ctx, "filled": rt.n_ctx_seq, "kind": kind, "load_s": rt.load_s,
            "mmap": rt.mmap, "baseline_rss": base["rss"],
            "peak_growth": max(peak - base["rss"], job_peak, end["peak"] - base["rss"]),
            "context_peak": peak - base["rss"], "job_peak": job_peak,
            "load_peak_growth": loaded["peak"] - base["rss"], "checkpoint_sizes": sizes,
            "checkpoint_bytes_max_held": held_max, "buffers": probe.buffers, "our_arrays": arrays}


def main(argv: list[str]) -> int:
    raw = sys.stdin.read().strip()
    request = json.loads(raw) if raw else {}
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # native output must not corrupt the JSON answer
    answer = measure_kept(request)
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
