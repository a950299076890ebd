"""Calibration: llama.cpp's own dry run for one model, cached per model file + library version.

``calibrate(facts)`` runs the probe child ``dry-run`` (``hisho.core.spawn``, role ``probe``) in a subprocess (the core never imports
llama_cpp, and a probe that aborts takes only its own process down). The probe loads the model with
``no_alloc`` (nothing allocated, no weight read) and creates one context per grid point: n_ctx = 256, 512, …
up to the model's trained length, for each KV type / flash-attention combination the search considers. It
reports llama.cpp's compute and output buffers, the compute a one-logit decode touches, and the process growth
of the load itself. Results go to ``paths.cache_dir()/calibration/<hash>.json``; ``cached(facts)`` reads them
back in milliseconds, so plans answer instantly once a model has been calibrated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from hisho.core import paths, spawn
from hisho.core.atomic import write_text_atomic
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.planner.memory import Calibration
from hisho.core.units import padded_cells

log = logging.getLogger("hisho.planner")

# (flash_attn, type_k, type_v): the KV layouts the search considers.
LAYOUTS = ((True, "f16", "f16"), (True, "q8_0", "q8_0"), (True, "q4_0", "q4_0"), (False, "f16", "f16"))
PROBE_TIMEOUT_S = 120
MAX_GRID_CTX = 1 << 17
CALIBRATION_VERSION = 4  # 2, 3: repack facts (the CPU_REPACK line of the dry run) and the CPU features; 4: load peak


class ProbeFailed(RuntimeError):
    """The dry-run subprocess crashed or answered with an error."""


_GPU_LIBS = ("cuda", "vulkan", "metal", "hip", "sycl", "opencl", "musa", "cann")


def library_version() -> str:
    """The llama-cpp-python version, and its GPU backends where it has any: a Vulkan build of the same version
    sees other devices and reserves other buffers, so its device probe and calibrations are cached apart."""
    try:
        version = f"llama-cpp-python {metadata.version('llama-cpp-python')}"
    except metadata.PackageNotFoundError:
        return "llama-cpp-python (not installed)"
    backends = gpu_backends()
    return f"{version} ({'+'.join(backends)})" if backends else version


def gpu_backends() -> tuple[str, ...]:
    """The GPU backends llama-cpp-python ships (its lib folder's ggml libraries), found without importing it."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    found: set[str] = set()
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        if lib.is_dir():
            found.update(k for p in lib.iterdir() for k in _GPU_LIBS if k in p.name.lower())
    return tuple(sorted(found))


def grid(facts: ModelFacts) -> list[int]:
    top = padded_cells(min(max(facts.context_length, 4096), MAX_GRID_CTX))
    sizes, n = [], 256
    while n < top:
        sizes.append(n)
        n *= 2
    sizes.append(top)
    return sizes


def cache_path(facts: ModelFacts, n_ubatch: int) -> Path:
    p = Path(facts.source)
    stat = p.stat()
    key = f"{p.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{library_version()}|{n_ubatch}|{CALIBRATION_VERSION}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return paths.cache_dir() / "calibration" / f"{digest}.json"


def cached(facts: ModelFacts, n_ubatch: int = 512) -> Calibration | None:
    """The stored calibration for this exact file and library, or None (hub files are never calibrated)."""
    if facts.source.startswith("hf:") or not Path(facts.source).is_file():
        return None
    path = cache_path(facts, n_ubatch)
    if not path.is_file():
        return None
    try:
        return Calibration.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("calibration cache %s unreadable (%s); ignoring it", path, exc)
        return None


def calibrate(facts: ModelFacts, *, n_ubatch: int = 512, n_batch: int = 512, force: bool = False) -> Calibration:
    """Run the dry run for ``facts`` (a local file) and cache it. Raises ProbeFailed if llama.cpp cannot."""
    if not force:
        hit = cached(facts, n_ubatch)
        if hit is not None:
            return hit
    contexts = [
        {"n_ctx": n, "n_batch": n_batch, "n_ubatch": n_ubatch, "flash_attn": fa, "type_k": tk, "type_v": tv}
        for fa, tk, tv in LAYOUTS for n in grid(facts)
    ]
    answer = run_probe("dry-run", {"model_path": facts.source, "contexts": contexts, "touched": True})
    calib = calibration_from_probe(answer, n_ubatch)
    path = cache_path(facts, n_ubatch)
    write_text_atomic(path, json.dumps(calib.to_dict()))
    log.info("calibrated %s: %d contexts probed", facts.source, len(contexts))
    return calib


def calibration_from_probe(answer: dict[str, Any], n_ubatch: int) -> Calibration:
    points: dict[str, list[tuple[int, int, int, int]]] = {}
    device: dict[str, list[tuple[int, int]]] = {}
    gpu = bool(answer.get("supports_gpu_offload"))
    first_ctx_overhead = None
    for entry in answer.get("contexts", []):
        if not entry.get("ok"):
            continue  # a layout this build cannot do (e.g. quantized V without flash attention)
        spec = entry["config"]
        if first_ctx_overhead is None:
            first_ctx_overhead = int(entry["anon"]) + int(entry["file"])
        key = Calibration.key(bool(spec["flash_attn"]), spec["type_k"], spec["type_v"])
        cells = sum(int(c["cells"]) for c in entry["kv_caches"][:1]) or padded_cells(int(spec["n_ctx"]))
        points.setdefault(key, []).append((cells, sum(entry["compute"].values()),
                                           sum(entry.get("touched_compute", entry["compute"]).values()),
                                           sum(entry["output"].values())))
        if gpu:
            device.setdefault(key, []).append((cells, sum(v for k, v in entry["compute"].items() if on_device(k))))
    for pts in points.values():
        pts.sort()
    for dev in device.values():
        dev.sort()
    return Calibration(library=str(answer.get("library", library_version())), n_ubatch=n_ubatch,
                       model_overhead=int(answer["model_anon"]) + int(answer["model_file"]),
                       context_overhead=first_ctx_overhead or 0, points=points,
                       repacked=_repack_figure(answer), model_peak=int(answer.get("model_peak", -1)),
                       cpu_features=tuple(answer.get("cpu_features", ())), device_points=device)


def on_device(buffer: str) -> bool:
    """Whether a buffer line's name is a GPU device's memory ("Vulkan0", "CUDA0"), not host memory ("CPU",
    "CPU_REPACK", or a GPU backend's pinned host buffer "Vulkan_Host", "CUDA_Host")."""
    return not buffer.startswith("CPU") and not buffer.endswith("_Host")


def _repack_figure(answer: dict[str, Any]) -> int:
    """The CPU_REPACK model buffer of the dry run, or -1 when it gives no size: with ``no_alloc`` llama.cpp
    prints the line (so repacking is on) with 0.00 MiB; the rule (repack.py) then sizes it from the tensor
    table, which is exactly what the buffer holds."""
    size = int(answer.get("model_buffers", {}).get("CPU_REPACK", 0))
    return size if size > 0 else -1


def run_probe(command: str, request: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the probe child (``hisho.core.spawn``, role ``probe``) with ``request`` on stdin; its JSON answer."""
    try:
        proc = spawn.run("probe", command, input=json.dumps(request), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"llama.cpp probe '{command}' took longer than {timeout:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise ProbeFailed(f"llama.cpp probe '{command}' failed: {tail[0]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    if not answer.get("ok"):
        raise ProbeFailed(f"llama.cpp probe '{command}' failed: {answer.get('error', 'unknown error')}")
    return answer
