"""llama.cpp as its own memory oracle. Run as ``python -m hisho.engine.probe COMMAND`` with a JSON request on
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
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import re
import sys
from typing import Any

import llama_cpp

from hisho.core.protocol import LoadParams
from hisho.engine import backends

MIB = 1024 * 1024
_BUFFER = re.compile(r"(\S+)\s+(model|output|KV|compute) buffer size =\s+([\d.]+) MiB")
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers")
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
    """Buffer sizes from a log chunk: ``{"model": {dev: bytes}, "output": …, "KV": …, "compute": …,
    "kv_caches": [{"bytes", "cells", "layers"}]}``. MiB values are printed with two decimals."""
    out: dict[str, Any] = {"model": {}, "output": {}, "KV": {}, "compute": {}, "kv_caches": []}
    for dev, kind, mib in _BUFFER.findall(text):
        out[kind][dev] = out[kind].get(dev, 0) + round(float(mib) * MIB)
    for mib, cells, layers in _KV_SIZE.findall(text):
        out["kv_caches"].append({"bytes": round(float(mib) * MIB), "cells": int(cells), "layers": int(layers)})
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


def library_version() -> str:
    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
    libs = sorted(p.name for p in lib.glob("*llama*")) if lib.is_dir() else []
    return f"llama-cpp-python {llama_cpp.__version__} {' '.join(libs[-1:])}"


# ----- dry run ---------------------------------------------------------------------------------------------


def dry_run(request: dict[str, Any]) -> dict[str, Any]:
    """``request``: model_path, n_gpu_layers, contexts: [{n_ctx, n_batch, n_ubatch, type_k, type_v, flash_attn,
    n_seq_max, swa_full}], touched (bool: also probe n_outputs_max=1)."""
    from hisho.engine.runtime import context_params

    logs = LogCapture()
    backends.init()
    logs.take()
    mparams = llama_cpp.llama_model_default_params()
    mparams.no_alloc = True
    mparams.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    mparams.n_gpu_layers = int(request.get("n_gpu_layers", 0))
    before = memory_now()
    model = llama_cpp.llama_model_load_from_file(str(request["model_path"]).encode("utf-8"), mparams)
    if not model:
        return {"ok": False, "error": "llama.cpp could not read the model", "log_tail": logs.take()[-2000:]}
    after_model = memory_now()
    result: dict[str, Any] = {
        "ok": True, "library": library_version(),
        "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "model_anon": after_model["anon"] - before["anon"], "model_file": after_model["file"] - before["file"],
        "model_buffers": parse_buffers(logs.take())["model"], "contexts": [],
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
    return {"ok": True, "kv_caches": buffers["kv_caches"], "compute": buffers["compute"],
            "output": buffers["output"], "anon": after["anon"] - before["anon"],
            "file": after["file"] - before["file"]}


def _last_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "error" in ln.lower() or "failed" in ln.lower()]
    return lines[-1].strip() if lines else "context creation failed"


# ----- devices ---------------------------------------------------------------------------------------------


def devices() -> dict[str, Any]:
    """ggml's device list. Types: cpu, gpu (discrete), igpu (shares system RAM), accel."""
    backends.init()
    lib = _ggml()
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, fn).restype = ctypes.c_char_p
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append({
            "name": (lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
            "description": (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
            "type": _DEV_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "unknown"),
            "free": int(free.value), "total": int(total.value),
        })
    return {"ok": True, "library": library_version(),
            "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()), "devices": out}


def _ggml() -> ctypes.CDLL:
    lib_dir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml.so", "libggml.dylib", "ggml.dll"):
        if (lib_dir / name).exists():
            return ctypes.CDLL(str(lib_dir / name))
    raise OSError(f"ggml library not found in {lib_dir}")


# ----- real measurement ------------------------------------------------------------------------------------


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """Load ``request["params"]`` (LoadParams) through the engine's Runtime, fill n_ctx with full ubatches
    (one logit row per ubatch, as the engine decodes a prompt), report peak RSS growth over the baseline."""
    from hisho.engine.runtime import Runtime

    logs = LogCapture()
    backends.init()
    params = LoadParams.from_dict(request["params"])
    reset_peak()
    base = memory_now()
    rt = Runtime.load(params)
    loaded = memory_now()
    buffers = parse_buffers(logs.take())
    n_vocab = rt.n_vocab
    tokens = [(i * 7919 + 11) % n_vocab for i in range(rt.n_ctx)]
    for start in range(0, rt.n_ctx, rt.n_batch):
        rt.decode_tokens(0, tokens[start:start + rt.n_batch])
    end = memory_now()
    # llama_batch_init(capacity, 0, n_seq_max): token, pos, n_seq_id, logits arrays and seq_id pointers.
    cap = rt.batch.capacity
    batch_bytes = cap * (4 + 4 + 4 + 1 + 8) + (cap + 1) * 8 + cap * 4 * rt.n_seq_max
    rt.close()
    return {"ok": True, "library": library_version(), "n_ctx": rt.n_ctx, "filled": len(rt.seqs.get(0, [])),
            "baseline_rss": base["rss"], "peak_growth": end["peak"] - base["rss"],
            "end_growth": end["rss"] - base["rss"], "load_growth": loaded["rss"] - base["rss"],
            "anon_growth": end["anon"] - base["anon"], "file_growth": end["file"] - base["file"],
            "buffers": buffers, "our_arrays": batch_bytes}


COMMANDS = {"dry-run": dry_run, "devices": lambda _req: devices(), "measure": measure}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in COMMANDS:
        sys.stderr.write(f"usage: python -m hisho.engine.probe {{{'|'.join(COMMANDS)}}} < request.json\n")
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
