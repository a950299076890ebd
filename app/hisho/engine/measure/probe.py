"""llama.cpp as its own memory oracle. Run as ``python -m hisho.engine.measure.probe COMMAND`` with a JSON request on
stdin; one JSON answer goes to stdout. Always a separate process: a probe that hits a GGML_ASSERT aborts only
itself.

Commands:
- ``dry-run``: load the model with ``no_alloc`` and ``LLAMA_LOAD_MODE_NONE`` (nothing allocated, no weight read),
  create one context per requested configuration and read the "buffer size" / "llama_kv_cache: size" lines
  llama.cpp logs. Also reports how much the process itself grew (vocabulary, tensor metadata, graph
  structures: memory a real load needs as well) and, per context, the compute buffer a graph with a single
  output needs (``n_outputs_max = 1``): the part of the compute buffer a decode that asks for one logit row
  really touches.
- ``devices``: the ggml backend devices (name, type, free and total memory) through ctypes, and whether this
  llama.cpp build can offload at all.
- ``measure``: load for real through the engine's own ``Runtime`` (mmap, as the engine does), fill the context
  with full ubatches, and report peak RSS growth over the pre-load baseline plus the buffer sizes llama.cpp
  reported. ``hisho bench plan`` runs it once per cell, each in a fresh process.
- ``speed``: this machine's speed on one model, at a fresh home's first start (``machine_speed``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import mmap
import os
import pathlib
import re
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import llama_cpp

from hisho.core.engine.protocol import LoadParams
from hisho.core.units import MIB
from hisho.engine.lib import backends
from hisho.engine.measure.machine_speed import measure_speed

_BUFFER = re.compile(r"(\S+)\s+(model|output|KV|RS|compute) buffer size =\s+([\d.]+) MiB")
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers")
# A recurrent model's state (llama-memory-recurrent.cpp): "size = X MiB (N cells, L layers, S seqs ...)".
_RS_SIZE = re.compile(r"llama_memory_recurrent: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers")
_DEV_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


class LogCapture:
    """Collects llama.cpp's and ggml's log lines (llama_log_set covers both) instead of letting them hit stderr."""

    def __init__(self) -> None:
        self.parts: list[str] = []

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def _callback(level: int, text: bytes, user_data: Any) -> None:
            self.parts.append(text.decode("utf-8", "replace"))

        self._callback = _callback  # keep a reference: ctypes does not
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))

    def take(self) -> str:
        text = "".join(self.parts)
        self.parts.clear()
        return text


def parse_buffers(text: str) -> dict[str, Any]:
    """Buffer sizes from a log chunk: ``{"model": {dev: bytes}, "output": …, "KV": …, "RS": …, "compute": …,
    "kv_caches": [{"bytes", "cells", "layers"}], "rs_caches": […]}`` (RS: a recurrent or hybrid model's
    recurrent state). MiB values are printed with two decimals."""
    out: dict[str, Any] = {"model": {}, "output": {}, "KV": {}, "RS": {}, "compute": {}, "kv_caches": [],
                           "rs_caches": []}
    for dev, kind, mib in _BUFFER.findall(text):
        out[kind][dev] = out[kind].get(dev, 0) + round(float(mib) * MIB)
    for mib, cells, layers in _KV_SIZE.findall(text):
        out["kv_caches"].append({"bytes": round(float(mib) * MIB), "cells": int(cells), "layers": int(layers)})
    for mib, cells, layers in _RS_SIZE.findall(text):
        out["rs_caches"].append({"bytes": round(float(mib) * MIB), "cells": int(cells), "layers": int(layers)})
    return out


def memory_now() -> dict[str, int]:
    """This process's resident memory split into anonymous and file-backed bytes, and its peak (Linux: from
    /proc; elsewhere psutil's rss/peak where available)."""
    status = pathlib.Path("/proc/self/status")
    if status.exists():
        vals: dict[str, int] = {}
        for line in status.read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                vals[name] = int(rest.split()[0]) * 1024
        return {"rss": vals["VmRSS"], "peak": vals["VmHWM"], "anon": vals["RssAnon"],
                "file": vals["RssFile"] + vals.get("RssShmem", 0)}
    import psutil

    info = psutil.Process().memory_info()
    peak = int(getattr(info, "peak_wset", 0) or _ru_maxrss())
    return {"rss": info.rss, "peak": max(peak, info.rss), "anon": info.rss, "file": 0}


def _ru_maxrss() -> int:
    import resource

    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(value if sys.platform == "darwin" else value * 1024)


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0) so the peak measures only what follows."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def reset_peak_works() -> bool:
    """Whether this system lets the peak mark be reset (the peak is then the process's, not the load's)."""
    return pathlib.Path("/proc/self/clear_refs").exists()


def library_version() -> str:
    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(p.name for p in lib.glob("*llama*")) if lib.is_dir() else []
    return f"llama-cpp-python {llama_cpp.__version__} {' '.join(libs[-1:])}"


# ----- dry run ---------------------------------------------------------------------------------------------


def dry_run(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: model_path, n_gpu_layers, contexts: [{n_ctx, n_batch, n_ubatch, type_k, type_v, flash_attn,
    n_seq_max, swa_full}], touched (bool: also probe n_outputs_max=1)."""
    from hisho.engine.lib.llama_setup import context_params, cpu_features

    logs = LogCapture()
    backends.init()
    logs.take()
    mparams = llama_cpp.llama_model_default_params()
    mparams.no_alloc = True
    mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    mparams.n_gpu_layers = int(request.get("n_gpu_layers", 0))
    reset_peak()
    before = memory_now()
    model = llama_cpp.llama_model_load_from_file(str(request["model_path"]).encode("utf-8"), mparams)
    if not model:
        return {"ok": False, "error": "llama.cpp could not read the model", "log_tail": logs.take()[-2000:]}
    after_model = memory_now()
    # The load's own peak over what it keeps: the GGUF metadata (every token's text, score and type) is held
    # until the loader is done with it, so a large vocabulary peaks well above what stays (262K tokens: ~15 MiB).
    model_peak = after_model["peak"] - before["rss"] if reset_peak_works() else -1
    result: dict[str, Any] = {
        "ok": True, "library": library_version(),
        "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "model_anon": after_model["anon"] - before["anon"], "model_file": after_model["file"] - before["file"],
        "model_peak": model_peak,
        "model_buffers": parse_buffers(logs.take())["model"], "contexts": [],
        "cpu_features": sorted(cpu_features()),
    }
    for spec in request.get("contexts", []):
        params = LoadParams(model_path=str(request["model_path"]), **spec)
        entry: dict[str, Any] = {"config": spec}
        entry.update(_probe_context(model, context_params(params), logs, outputs_max=0))
        if request.get("touched", True):
            entry["touched_compute"] = _probe_context(model, context_params(params), logs, outputs_max=1)["compute"]
        result["contexts"].append(entry)
    llama_cpp.llama_model_free(model)
    return result


def _probe_context(model: Any, cparams: Any, logs: LogCapture, *, outputs_max: int) -> dict[str, Any]:
    cparams.n_outputs_max = outputs_max
    before = memory_now()
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    after = memory_now()
    text = logs.take()
    if not ctx:
        return {"ok": False, "error": _last_error(text)}
    llama_cpp.llama_free(ctx)
    logs.take()
    buffers = parse_buffers(text)
    return {"ok": True, "kv_caches": buffers["kv_caches"], "rs_caches": buffers["rs_caches"],
            "compute": buffers["compute"],
            "output": buffers["output"], "anon": after["anon"] - before["anon"],
            "file": after["file"] - before["file"]}


def _last_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "error" in ln.lower() or "failed" in ln.lower()]
    return lines[-1].strip() if lines else "context creation failed"


# ----- devices ---------------------------------------------------------------------------------------------


def devices() -> dict[str, Any]:
    """ggml's device list. Types: cpu, gpu (discrete), igpu (shares system RAM), accel."""
    backends.init()
    out = [{"name": d.name, "description": d.description, "type": _DEV_TYPES.get(d.type, "unknown"),
            "free": d.free, "total": d.total} for d in backends.device_list(_ggml())]
    from hisho.engine.lib.llama_setup import cpu_features

    return {"ok": True, "library": library_version(), "cpu_features": sorted(cpu_features()),
            "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()), "devices": out}


def _ggml() -> ctypes.CDLL:
    lib_dir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        if (lib_dir / name).exists():
            return ctypes.CDLL(str(lib_dir / name))
    raise OSError(f"ggml library not found in {lib_dir}")


# ----- real measurement ------------------------------------------------------------------------------------


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """Load ``request["params"]`` (LoadParams) through the engine's Runtime, fill n_ctx, and report peak RSS
    growth over the baseline.

    ``fill``: "decode" prefills the whole context with full ubatches (one logit row per ubatch, as the engine
    decodes a prompt); "state" writes all but the last ubatch's cells straight into the KV cache with
    ``llama_state_seq_set_data`` (a state built from one decoded cell, ``synthetic_state``) and decodes only
    the last full ubatch. Both end with a full cache and the largest graph (every cell attended by a full
    ubatch), which is the peak; "state" costs one ubatch instead of n_ctx tokens, so a 3B model's 4K context is
    measured in seconds, not minutes."""
    fill = str(request.get("fill", "decode"))
    probe = load_measured(request)
    rt, base, loaded, buffers, tokens = probe.rt, probe.base, probe.loaded, probe.buffers, probe.tokens
    started = time.perf_counter()
    if fill == "state":
        caches = request.get("kv_caches")
        _fill_by_state(rt, tokens, int(request.get("n_swa", 0)), None if caches is None else int(caches))
        # The synthetic state's Python buffers are freed by now; only what follows the reset counts, and the
        # load's own peak (loaded["peak"]) is kept apart.
    else:
        for start in range(0, rt.n_ctx, rt.n_batch):
            rt.decode_tokens(0, tokens[start:start + rt.n_batch], checkpoints=False)
    fill_s = time.perf_counter() - started
    end = memory_now()
    arrays = batch_bytes(rt)
    rt.close()
    return {"ok": True, "library": library_version(), "n_ctx": rt.n_ctx, "filled": len(rt.seqs.get(0, [])),
            "fill": fill, "fill_s": fill_s, "load_s": rt.load_s, "mmap": rt.mmap,
            "baseline_rss": base["rss"], "peak_growth": max(end["peak"], loaded["peak"]) - base["rss"],
            "end_growth": end["rss"] - base["rss"], "load_growth": loaded["rss"] - base["rss"],
            "load_peak_growth": loaded["peak"] - base["rss"],
            "anon_growth": end["anon"] - base["anon"], "file_growth": end["file"] - base["file"],
            "buffers": buffers, "our_arrays": arrays}


class Measured(NamedTuple):
    """A runtime loaded by ``load_measured`` and the figures taken around its load."""

    rt: Any
    base: dict[str, int]       # memory_now() before the load (the peak reset first)
    loaded: dict[str, int]     # memory_now() after it
    buffers: dict[str, Any]    # parse_buffers() of the load's log
    tokens: list[int]          # a deterministic token for every cell of the context (what fills decode or write)
    logs: LogCapture           # keeps llama.cpp's log callback referenced while the runtime lives


def load_measured(request: dict[str, Any]) -> Measured:
    """Load ``request["params"]`` as a measuring probe does: llama.cpp's log captured, the process's peak reset,
    memory read before and after the load, the load's buffer lines parsed."""
    from hisho.engine.lib.llama_setup import prompt_offload
    from hisho.engine.model.runtime import Runtime

    logs = LogCapture()
    backends.init()
    params = LoadParams.from_dict(request["params"])
    if params.op_offload is None:
        # A partial offload's prompt-offload probe (engine.model.offload) would make contexts of its own: their
        # buffer lines would join the load's and their memory its peak. Measured as the planner prices it.
        params = dataclasses.replace(params, op_offload=prompt_offload(params))
    reset_peak()
    base = memory_now()
    rt = Runtime.load(params)
    loaded = memory_now()
    buffers = parse_buffers(logs.take())
    tokens = [(i * 7919 + 11) % rt.n_vocab for i in range(rt.n_ctx)]
    return Measured(rt, base, loaded, buffers, tokens, logs)


def batch_bytes(rt: Any) -> int:
    """What ``llama_batch_init(capacity, 0, n_seq_max)`` allocates: token, pos, n_seq_id, logits arrays and the
    seq_id pointers."""
    cap = int(rt.batch.capacity)
    return cap * (4 + 4 + 4 + 1 + 8) + (cap + 1) * 8 + cap * 4 * int(rt.n_seq_max)


def _fill_by_state(rt: Any, tokens: list[int], n_swa: int, kv_caches: int | None = None, seq: int = 0) -> None:
    """Fill all but the last ubatch of sequence ``seq``'s context from a synthetic state, then decode the last
    full ubatch. The state is built in an anonymous mmap, so freeing it gives every page back to the OS (a
    malloc'd block may stay in the heap and would count as the engine's memory)."""
    rt.decode_tokens(seq, tokens[:1], want_logits=False, checkpoints=False)
    one = _seq_state(rt, seq)
    rt.seq_rm(seq)
    n_fill = rt.n_ctx - min(rt.n_batch, rt.n_ctx)
    size = sum(len(piece) * times for piece, times in synthetic_state(one, n_fill, n_swa, kv_caches))
    mm = mmap.mmap(-1, size)
    for piece, times in synthetic_state(one, n_fill, n_swa, kv_caches):
        for _ in range(times):
            mm.write(piece)
    buf = (ctypes.c_uint8 * size).from_buffer(mm)
    got = llama_cpp.llama_state_seq_set_data(rt.ctx, buf, size, seq)
    del buf
    mm.close()
    # The decoded cell's state holds a hybrid model's whole recurrent state (55 MiB on Granite-4-H-1B): drop it
    # before the peak is reset, or the measurement counts it as the engine's.
    del one
    if got != size:
        raise RuntimeError(f"llama.cpp took {got} of {size} bytes of the synthetic state")
    rt.seqs[seq] = list(tokens[:n_fill])
    reset_peak()  # the synthetic state is unmapped; the peak from here on is the engine's own
    rt.decode_tokens(seq, tokens[n_fill:rt.n_ctx], checkpoints=False)


def _seq_state(rt: Any, seq: int) -> bytes:
    size = int(llama_cpp.llama_state_seq_get_size(rt.ctx, seq))
    buf = (ctypes.c_uint8 * size)()
    n = int(llama_cpp.llama_state_seq_get_data(rt.ctx, buf, size, seq))
    return bytes(buf[:n])


def synthetic_state(one: bytes, n_cells: int, n_swa: int = 0, kv_caches: int | None = None,
                    ) -> Iterator[tuple[bytes, int]]:
    """A sequence state of ``n_cells`` cells at positions 0..n_cells-1, from the state of ONE cell, as
    (piece, repeat) pairs to write in order. llama.cpp's per-sequence format (llama-context.cpp, llama-kv-cache.cpp
    state_write): an 8-byte preamble (io magic 0xaf143cd8, source sequence), then per cache: streams of cell
    count, cell meta, K rows per layer, V rows (or V elements when transposed). Each cell repeats the decoded
    cell's K and V. An interleaved-SWA model writes two caches; the second (sliding-window) one gets only the
    last ``n_swa`` cells, as llama.cpp saves it (older cells are masked out and not written).

    ``kv_caches``: how many attention caches come first (None: all of it); what follows is a recurrent state
    (llama-memory-recurrent.cpp state_write: one cell, its position and seq-id count, then the R and S rows),
    which has no cells to repeat: it is kept as decoded, moved to the last filled position so the next ubatch
    continues it (a hybrid model's attention and recurrent parts must end at the same position)."""
    yield one[:8], 1
    pos = 8
    cache = 0
    while pos < len(one) and (kv_caches is None or cache < kv_caches):
        cells = n_cells if cache == 0 or not n_swa else min(n_cells, n_swa)
        first = n_cells - cells
        (n_stream,) = struct.unpack_from("<I", one, pos)
        pos += 4
        yield struct.pack("<I", n_stream), 1
        for _ in range(n_stream):
            (count,) = struct.unpack_from("<I", one, pos)
            pos += 4
            if count == 0:
                yield struct.pack("<I", 0), 1
                continue
            if count != 1:
                raise ValueError(f"expected a one-cell state, got {count} cells")
            _p, n_seq = struct.unpack_from("<iI", one, pos)
            pos += 8 + 4 * n_seq
            yield struct.pack("<I", cells), 1
            yield b"".join(struct.pack("<iIi", first + i, 1, 0) for i in range(cells)), 1
            v_trans, n_layer = struct.unpack_from("<II", one, pos)
            pos += 8
            yield struct.pack("<II", v_trans, n_layer), 1
            for _ in range(n_layer):  # K rows
                k_type, row = struct.unpack_from("<iQ", one, pos)
                yield one[pos:pos + 12], 1
                yield one[pos + 12:pos + 12 + row], cells
                pos += 12 + row
            for _ in range(n_layer):  # V rows, or V elements when transposed
                if not v_trans:
                    v_type, row = struct.unpack_from("<iQ", one, pos)
                    yield one[pos:pos + 12], 1
                    yield one[pos + 12:pos + 12 + row], cells
                    pos += 12 + row
                else:
                    v_type, size_el, n_embd = struct.unpack_from("<iII", one, pos)
                    yield one[pos:pos + 12], 1
                    pos += 12
                    for _j in range(n_embd):
                        yield one[pos:pos + size_el], cells
                        pos += size_el
        cache += 1
    if pos < len(one):
        (count,) = struct.unpack_from("<I", one, pos)
        if count != 1:
            raise ValueError(f"expected a one-cell recurrent state, got {count} cells")
        _p, n_seq = struct.unpack_from("<iI", one, pos + 4)
        yield struct.pack("<IiI", 1, n_cells - 1, n_seq), 1
        yield one[pos + 12:], 1


COMMANDS = {"dry-run": dry_run, "devices": lambda _req: devices(), "measure": measure, "speed": measure_speed}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in COMMANDS:
        sys.stderr.write(f"usage: python -m hisho.engine.measure.probe {{{'|'.join(COMMANDS)}}} < request.json\n")
        return 2
    raw = sys.stdin.read().strip()
    request = json.loads(raw) if raw else {}
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever native code prints must not corrupt the JSON answer
    answer = COMMANDS[argv[0]](request)
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return 0 if answer.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
