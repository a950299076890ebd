"""Calibration: llama.cpp's own dry run for one model, cached per model file + library version.

``calibrate(facts)`` runs the probe child ``dry-run`` (``hisho.core.spawn``, role ``probe``) in a subprocess (the core never imports
llama_cpp, and a probe that aborts takes only its own process down). The probe loads the model with
``no_alloc`` (nothing allocated, no weight read) and creates one context per grid point: n_ctx = 256, 512, …
up to the model's trained length, for each KV type / flash-attention combination the search considers. It
reports llama.cpp's compute and output buffers, the compute a one-logit decode touches, and the process growth
of the load itself. Results go to ``paths.cache_dir()/calibration/<hash>.json``, keyed by the header's digest
(``cache_path``); ``cached(facts)`` reads them back in milliseconds, so plans answer instantly once a model has
been calibrated, and a hub file (dry-run from its header before the download) plans as its downloaded copy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.atomic import write_text_atomic
from hisho.core.models.gguf_facts import ModelFacts
from hisho.core.models.gguf_hub import hub_header_path
from hisho.core.planner.memory import Calibration
from hisho.core.probe import PROBE_TIMEOUT_S as PROBE_TIMEOUT_S
from hisho.core.probe import ProbeFailed as ProbeFailed
from hisho.core.probe import child_answer as child_answer
from hisho.core.probe import gpu_backends as gpu_backends
from hisho.core.probe import library_version as library_version
from hisho.core.probe import run_probe as run_probe
from hisho.core.units import padded_cells

# The probe child's runner (ProbeFailed, run_probe, child_answer, library_version…) lives in core/probe.py, below
# core/machine.py, which asks it for the devices; its names stay importable from here.

log = logging.getLogger("hisho.planner")

# (flash_attn, type_k, type_v): the KV layouts the search considers.
LAYOUTS = ((True, "f16", "f16"), (True, "q8_0", "q8_0"), (True, "q4_0", "q4_0"), (False, "f16", "f16"))
MAX_GRID_CTX = 1 << 17
CALIBRATION_VERSION = 4  # 2, 3: repack facts (the CPU_REPACK line of the dry run) and the CPU features; 4: load peak


def grid(facts: ModelFacts) -> list[int]:
    top = padded_cells(min(max(facts.context_length, 4096), MAX_GRID_CTX))
    sizes, n = [], 256
    while n < top:
        sizes.append(n)
        n *= 2
    sizes.append(top)
    return sizes


def cache_path(facts: ModelFacts, n_ubatch: int) -> Path:
    """Where the dry run of ``facts`` is kept. By the header's digest where it is known: a hub file, its
    downloaded copy and a copy moved elsewhere are one model to llama.cpp (the dry run reads only the header),
    so they share one calibration and plan alike before and after a download. Otherwise by path and mtime."""
    if facts.header_sha:
        key = f"sha:{facts.header_sha}|{facts.file_size}"
    else:
        p = Path(facts.source)
        stat = p.stat()
        key = f"{p.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    key += f"|{library_version()}|{n_ubatch}|{CALIBRATION_VERSION}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return paths.cache_dir() / "calibration" / f"{digest}.json"


_MEMO: dict[Path, tuple[int, Calibration]] = {}  # parsed files by mtime: the planner page prices many cells


def can_calibrate(facts: ModelFacts) -> bool:
    """A local file, or a hub file whose header was kept (``read_hub_facts``): a dry run can be made."""
    if facts.source.startswith("hf:"):
        return bool(facts.header_sha) and hub_header_path(facts).is_file()
    return Path(facts.source).is_file()


def shape_path(facts: ModelFacts, n_ubatch: int) -> Path:
    """Where the dry run of any file of this model's shape is kept: the quants of one model (a hub repository's
    files) have the same architecture, layers, vocabulary and tensor names, and llama.cpp's compute and output
    buffers and its load's own memory do not depend on the weights' types (measured: identical compute points,
    overheads within 0.7 % of a few MiB, on Q4_0, Q4_K_M and Q8_0 files). Only the repack buffer does, and
    ``cached`` leaves that to the rule (repack.py), which sizes it from each file's own tensor table."""
    shape = {k: getattr(facts, k) for k in ("architecture", "n_layer", "n_embd", "n_ff", "n_head", "n_head_kv",
                                             "key_length", "value_length", "n_swa", "swa_layers", "context_length",
                                             "vocab_size", "memory", "attention_layers", "recurrent_layers",
                                             "n_embd_r", "n_embd_s", "tied_embeddings")}
    shape["tensors"] = sorted(facts.tensor_bytes)
    key = f"{json.dumps(shape, sort_keys=True)}|{library_version()}|{n_ubatch}|{CALIBRATION_VERSION}"
    return paths.cache_dir() / "calibration" / f"shape-{hashlib.sha256(key.encode('utf-8')).hexdigest()[:24]}.json"


def cached(facts: ModelFacts, n_ubatch: int = 512) -> Calibration | None:
    """The stored calibration for this model and library (its own, else one of a file of the same shape with
    the repack figure left to the rule), or None."""
    if not facts.header_sha and (facts.source.startswith("hf:") or not Path(facts.source).is_file()):
        return None
    own = _read(cache_path(facts, n_ubatch))
    if own is not None or not facts.known_architecture:
        return own
    sibling = _read(shape_path(facts, n_ubatch))
    return dataclasses.replace(sibling, repacked=-1) if sibling is not None else None


def _read(path: Path) -> Calibration | None:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    hit = _MEMO.get(path)
    if hit is not None and hit[0] == mtime:
        return hit[1]
    try:
        calib = Calibration.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("calibration cache %s unreadable (%s); ignoring it", path, exc)
        return None
    _MEMO[path] = (mtime, calib)
    return calib


def calibrate(facts: ModelFacts, *, n_ubatch: int = 512, n_batch: int = 512, force: bool = False) -> Calibration:
    """Run the dry run for ``facts`` and cache it. A hub file is dry-run from its kept header in a stand-in
    file of the same size (``standin``). Raises ProbeFailed if llama.cpp cannot."""
    if not force:
        hit = cached(facts, n_ubatch)
        if hit is not None:
            return hit
    contexts = [
        {"n_ctx": n, "n_batch": n_batch, "n_ubatch": n_ubatch, "flash_attn": fa, "type_k": tk, "type_v": tv}
        for fa, tk, tv in LAYOUTS for n in grid(facts)
    ]
    with standin(facts) as model_path:
        answer = run_probe("dry-run", {"model_path": str(model_path), "contexts": contexts, "touched": True})
    calib = calibration_from_probe(answer, n_ubatch)
    write_text_atomic(cache_path(facts, n_ubatch), json.dumps(calib.to_dict()))
    write_text_atomic(shape_path(facts, n_ubatch), json.dumps(calib.to_dict()))
    log.info("calibrated %s: %d contexts probed", facts.source, len(contexts))
    return calib


@contextlib.contextmanager
def standin(facts: ModelFacts) -> Iterator[Path]:
    """The file a dry run opens: a local model itself; for a hub file, its header followed by a hole up to the
    file's size (the dry run loads with no_alloc and LLAMA_LOAD_MODE_NONE, so llama.cpp reads the header and
    checks that every tensor lies inside the file, and never reads the data). Sparse where the file system
    allows it; removed after the run."""
    if not facts.source.startswith("hf:"):
        yield Path(facts.source)
        return
    head = hub_header_path(facts)
    if not facts.header_sha or not head.is_file():
        raise ProbeFailed(f"no header kept for {facts.source}: read it from the hub first")
    folder = paths.cache_dir() / "calibration"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"standin-{facts.header_sha[:16]}-{os.getpid()}.gguf"
    try:
        with path.open("wb") as fh:
            fh.write(head.read_bytes())
            fh.truncate(facts.file_size)
        yield path
    finally:
        path.unlink(missing_ok=True)


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
