"""The flash-attention measurement: on one loaded model, time one prompt ubatch and one decode step at a depth
with flash attention on (at the load's ubatch) and off (at the ubatch the planner's rule would run), and let
``hisho.core.planner.attention`` weigh them per front end and keep the answer (docs/flash-attention.md,
"Measured here").

Cheap by design: the weights are loaded once; each timing gets a context of its own (flash attention is fixed
when a context is made, and it decides the V layout of the cache), filled to the depth by a synthetic state (the
probe's ``synthetic_state``: one decoded cell repeated, written with ``llama_state_seq_set_data``), so no prompt
is read to get there. One context lives at a time (its cache and, off, its attention scores are the only extra
memory). The ways take turns, repetition by repetition, so a machine that gets busier midway charges both.

Run as ``python -m hisho.engine.measure.attention`` (role ``attention-probe``) with a JSON request on stdin: the
model is loaded in that child, never in the window's process or while the engine serves.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import LoadParams
from hisho.core.units import padded_cells
from hisho.engine.lib import backends
from hisho.engine.lib.llama_setup import Batch, context_params, maps_file, model_params
from hisho.engine.measure.probe import LogCapture, synthetic_state

log = logging.getLogger("hisho.engine")

DECODE_STEPS = 5


class Stopped(Exception):
    """A request came in: the measurement gives way (and runs again at the next idle time)."""


def never() -> bool:
    return False


def measure(model: Any, params: LoadParams, *, depth: int, ubatch_off: int, shallow: int = 0, seqs: int = 1,
            repeats: int = 3, stop: Callable[[], bool] = never) -> dict[str, Any]:
    """The timings (seconds) as ``AttentionProbe.from_dict`` reads them: flash attention on with
    ``params.n_ubatch``-token prompt ubatches, off with ``ubatch_off``, each at ``depth`` cached cells and, where
    ``shallow`` > 0, at ``shallow`` cells too. ``seqs`` > 1 (a serving load): a context of that many sequences,
    one KV stream each, every one filled to the depth, and the decode step carries one token for each (what a
    step costs while that many requests are answered at once). ``stop()`` true (checked by ggml between graph
    nodes): ``Stopped`` at once."""
    vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)))
    ubatch_on = params.n_ubatch
    seqs = max(1, seqs)
    tokens = [(i * 7919 + 11) % vocab for i in range(max(ubatch_on, ubatch_off) + 1 + seqs)]
    depths = {"_s": depth, "_shallow_s": shallow} if shallow > 0 else {"_s": depth}
    times: dict[str, list[float]] = {f"{what}_{way}{end}": [] for what in ("prompt", "decode")
                                     for way in ("on", "off") for end in depths}
    for rep in range(max(1, repeats)):
        order = (True, False) if rep % 2 == 0 else (False, True)  # neither way always goes first
        for on in order:
            ub = ubatch_on if on else ubatch_off
            for end, cells in depths.items():
                way = LoadParams.from_dict({**params.to_dict(), "flash_attn": on, "n_ubatch": ub, "n_batch": ub,
                                            "n_ctx": seqs * padded_cells(cells + ub + 1), "n_seq_max": seqs,
                                            "kv_unified": seqs == 1})
                prompt_s, decode_s = _time_at_depth(model, way, cells, tokens, stop)
                times[f"prompt_{'on' if on else 'off'}{end}"].append(prompt_s)
                times[f"decode_{'on' if on else 'off'}{end}"].append(decode_s)
    return {"depth": depth, "ubatch_on": ubatch_on, "ubatch_off": ubatch_off, "shallow": max(0, shallow),
            "seqs": seqs, **times}


def _time_at_depth(model: Any, params: LoadParams, depth: int, tokens: list[int],
                   stop: Callable[[], bool] = never) -> tuple[float, float]:
    """(seconds for one ``params.n_ubatch``-token prompt batch, seconds for one decode step), both after
    ``depth`` cells of each of the ``params.n_seq_max`` sequences filled from a synthetic state, in a fresh
    context made from ``params``: the prompt batch in sequence 0, the decode step one token in every sequence."""
    if stop():
        raise Stopped
    ctx = llama_cpp.llama_init_from_model(model, context_params(params))
    if not ctx:
        raise RuntimeError(f"no context for the measurement (flash attention {params.flash_attn})")
    if stop is not never:
        # ggml asks between graph nodes, so a request waits for one node, not one decode. Each ask takes the GIL:
        # cheap in the engine process (its other threads sleep), so the child measurement goes without.
        aborter = llama_cpp.ggml_abort_callback(lambda _data: bool(stop()))  # referenced while the context lives
        llama_cpp.llama_set_abort_callback(ctx, aborter, None)
    seqs = max(1, params.n_seq_max)
    batch = Batch(max(params.n_ubatch, seqs), 1)
    mem = llama_cpp.llama_get_memory(ctx)

    def decode(chunk: list[int], start: int, each_seq: bool = False) -> float:
        batch.clear()
        if each_seq:  # one token per sequence, all at position ``start``
            for seq in range(seqs):
                batch.add(chunk[seq], start, seq, True)
        else:
            for i, tok in enumerate(chunk):
                batch.add(tok, start + i, 0, i == len(chunk) - 1)
        began = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch.raw) != 0:
            if stop():
                raise Stopped
            raise RuntimeError("llama_decode failed in the measurement")
        return time.perf_counter() - began

    def roll_back() -> None:
        for seq in range(seqs):
            llama_cpp.llama_memory_seq_rm(mem, seq, depth, -1)

    try:
        if depth > 0:
            _fill(ctx, decode, depth, tokens[0], seqs)
        decode(tokens[:seqs], depth, each_seq=True)  # untimed: the first graph of a shape builds its plan
        roll_back()
        prompt_s = decode(tokens[:params.n_ubatch], depth)
        steps = []
        for step in range(DECODE_STEPS):  # a step is short: the best of a few, each rolled back (another
            roll_back()                   # program holding a core only ever adds to it)
            steps.append(decode(tokens[1 + step:1 + step + seqs], depth, each_seq=True))
        return prompt_s, min(steps)
    finally:
        batch.free()
        llama_cpp.llama_free(ctx)


def _fill(ctx: Any, decode: Any, depth: int, token: int, seqs: int = 1) -> None:
    """Cells 0..depth-1 of sequences 0..seqs-1 from one decoded cell repeated (``synthetic_state``)."""
    decode([token], 0)
    size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
    raw = (ctypes.c_uint8 * size)()
    one = bytes(raw[:int(llama_cpp.llama_state_seq_get_data(ctx, raw, size, 0))])
    llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, -1, -1)
    model = llama_cpp.llama_get_model(ctx)
    n_swa = int(llama_cpp.llama_model_n_swa(model))
    state = b"".join(piece * times for piece, times in synthetic_state(one, depth, n_swa))
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    for seq in range(seqs):
        if int(llama_cpp.llama_state_seq_set_data(ctx, buf, len(state), seq)) != len(state):
            raise RuntimeError("llama.cpp did not take the synthetic state")


def idle_seconds() -> float:
    """Seconds without a request before this engine measures (``attention.IDLE_ENV``), 0 for never: the app's
    own engine measures, benchmarks' and tests' do not."""
    from hisho.core.planner.attention import IDLE_ENV

    try:
        return max(0.0, float(os.environ.get(IDLE_ENV, "0")))
    except ValueError:
        return 0.0


def pending(params: LoadParams) -> bool:
    """Whether the engine should measure after loading ``params``, when it is idle: a CPU-only load with an f16
    cache that the planner's rule turned flash attention off for (its ``n_ubatch`` is the rule's; ``n_batch``
    the ubatch asked for), at the default threads (what the planner's key names), not measured yet."""
    from hisho.core.planner import attention as rule

    if (params.flash_attn or params.n_gpu_layers > 0 or (params.type_k, params.type_v) != ("f16", "f16")
            or params.n_threads not in (0, rule.default_threads())):
        return False
    return rule.recall(params.model_path, params.n_ctx, (params.n_batch, params.n_ubatch),
                       seqs=rule.sequences(params.n_seq_max, params.kv_unified)) is None


def when_idle(model: Any, params: LoadParams, stop: Callable[[], bool]) -> bool:
    """Measure the loaded ``model`` for ``params`` (``pending``) and keep the answer for the next plan and load;
    False when ``stop`` interrupted it (to be run again). A measurement that fails is logged and not retried."""
    from hisho.core.planner import attention as rule

    seqs = rule.sequences(params.n_seq_max, params.kv_unified)
    depth = rule.depth_for(params.n_ctx, seqs)
    need = context_bytes(model, seqs * (depth + params.n_batch), params.n_batch)  # the deep one
    free = available_bytes()
    if free < 2 * need:
        log.info("flash attention not measured: a %d MiB context would leave too little of %d MiB free", need >> 20,
                 free >> 20)
        return True
    started = time.perf_counter()
    way = LoadParams.from_dict({**params.to_dict(), "n_ubatch": params.n_batch, "n_threads": 0})
    try:
        found = measure(model, way, depth=depth, ubatch_off=params.n_ubatch, shallow=rule.shallow_for(depth),
                        seqs=seqs, stop=stop)
    except Stopped:
        log.info("flash-attention measurement gave way to a request; it runs again when the engine is idle")
        return False
    except (RuntimeError, ValueError) as exc:
        log.warning("flash-attention measurement failed (%s); the planner's rule stands", exc)
        return True
    probe = rule.AttentionProbe.from_dict(found)
    rule.remember(params.model_path, params.n_ctx, probe)
    log.info("flash attention measured in %.1f s: %s (the next load takes it)", time.perf_counter() - started,
             "; ".join(probe.summary(kind) for kind in rule.WORKLOADS))
    return True


def context_bytes(model: Any, cells: int, ubatch: int) -> int:
    """About what one measuring context holds beside the loaded model: its f16 cache and, flash attention off,
    one ubatch's f32 scores and their f16 copy (docs/flash-attention.md, "What it costs"), plus a margin."""
    n_head = int(llama_cpp.llama_model_n_head(model))
    kv_per_cell = 2 * 2 * int(llama_cpp.llama_model_n_layer(model)) * int(llama_cpp.llama_model_n_embd(model)) \
        * int(llama_cpp.llama_model_n_head_kv(model)) // max(1, n_head)
    return cells * kv_per_cell + cells * ubatch * n_head * 6 + (64 << 20)


def available_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unsupported platform: assume room (the measurement is small)
        return 1 << 62


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Load ``request["model_path"]`` once (CPU, as a CPU-only load runs) and measure."""
    logs = LogCapture()  # llama.cpp's lines stay out of the answer
    backends.init()
    params = LoadParams(model_path=str(request["model_path"]), n_ubatch=int(request.get("ubatch_on", 512)),
                        n_threads=int(request.get("threads", 0)), n_gpu_layers=0)
    model = llama_cpp.llama_model_load_from_file(params.model_path.encode("utf-8"),
                                                 model_params(params, maps_file(params)))
    if not model:
        return {"ok": False, "error": f"llama.cpp could not load {params.model_path}"}
    started = time.perf_counter()
    try:
        probe = measure(model, params, depth=int(request["depth"]), ubatch_off=int(request["ubatch_off"]),
                        shallow=int(request.get("shallow", 0)), seqs=int(request.get("seqs", 1)),
                        repeats=int(request.get("repeats", 3)))
    except (RuntimeError, ValueError) as exc:
        return {"ok": False, "error": str(exc)}
    finally:
        llama_cpp.llama_model_free(model)
        logs.take()
    return {"ok": True, "probe": probe, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    raw = sys.stdin.read().strip()
    request = json.loads(raw) if raw else {}
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever native code prints must not corrupt the JSON answer
    answer = run(request)
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
