"""Prompt offload (llama.cpp's ``op_offload``) with some layers on a GPU and the rest in RAM: decided by a probe.

With prompt offload on, llama.cpp runs a prompt batch's (32+ tokens) matrix products of the RAM-resident layers
on the device too, copying their weights there batch by batch. Whether that pays depends on the device (a
discrete GPU over PCIe, an iGPU on the CPU's memory bus, a software device on the CPU's own cores), so the
engine times one short prompt batch both ways when it loads a split it has not measured
(``hisho.engine.model.offload``) and keeps the answer here, beside the planner's calibrations: per model file,
llama.cpp build, devices and split. The planner puts a kept answer into the load (``LoadParams.op_offload``), so
a split is measured once. docs/vulkan.md, "Prompt offload".

No layer offloaded: off, never probed (nothing belongs on the device). Every layer offloaded: llama.cpp's
default (nothing in RAM to copy).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hisho.core.atomic import write_text_atomic
from hisho.core.planner.kept_file import kept_file

log = logging.getLogger("hisho.planner")

# The probe's batch: above llama.cpp's threshold for sending products to the device (32 tokens in ggml-vulkan
# and ggml-cuda), short enough that a slow path costs seconds. A longer prompt spreads the copies over more
# tokens, so this batch leans towards "off"; the margin below leans the same way on purpose: offloading where
# the two are close risks the slow path that prompted this rule, keeping it off costs little.
PROBE_TOKENS = 64
# The device must read the batch this much faster than the CPU to be chosen.
MARGIN = 1.15
# One timing each way settles it when one side is this much faster; closer, a second pair is taken.
CLEAR = 1.5


def partial(n_gpu_layers: int, n_layer: int) -> bool:
    """Some layers on the device and some in RAM (llama.cpp counts the output layer as layer ``n_layer``)."""
    return 0 < n_gpu_layers < n_layer + 1


def device_wins(on_s: list[float], off_s: list[float]) -> bool:
    """The rule: prompt offload on when the device's best time for the batch beats the CPU's by ``MARGIN``."""
    if not on_s or not off_s:
        return False
    return min(off_s) >= MARGIN * min(on_s)


def settled(on_s: list[float], off_s: list[float]) -> bool:
    """Whether the timings taken so far decide: two each, or one each with one side ``CLEAR``-ly faster."""
    if not on_s or not off_s:
        return False
    if len(on_s) >= 2 and len(off_s) >= 2:
        return True
    fast, slow = sorted((min(on_s), min(off_s)))
    return slow >= CLEAR * fast


@dataclass(frozen=True)
class OffloadProbe:
    """One probe's timings (seconds for ``n_tokens`` prompt tokens) and the choice they make."""

    on_s: list[float]
    off_s: list[float]
    n_tokens: int

    @property
    def chosen(self) -> bool:
        return device_wins(self.on_s, self.off_s)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "chosen": self.chosen}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffloadProbe:
        return cls(on_s=[float(x) for x in data["on_s"]], off_s=[float(x) for x in data["off_s"]],
                   n_tokens=int(data["n_tokens"]))


def device_key(name: str, description: str) -> str:
    """One device as the key names it; the engine and the planner each read ggml's device list."""
    return f"{name}:{description}"


def cache_path(model_path: str, n_gpu_layers: int, devices: list[str], library: str) -> Path:
    """Where the probe of this split is kept: by the model file (path, size, mtime), the llama.cpp build
    (``calibrate.library_version``), the devices ggml sees (name and description) and the layers offloaded."""
    return kept_file("prompt-offload", model_path, library, "/".join(sorted(devices)), n_gpu_layers, PROBE_TOKENS)


def recall(model_path: str, n_gpu_layers: int, devices: list[str], library: str) -> OffloadProbe | None:
    """The kept probe of this split, or None (never measured, or unreadable)."""
    path = cache_path(model_path, n_gpu_layers, devices, library)
    try:
        return OffloadProbe.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("prompt-offload probe %s unreadable (%s); measuring again", path, exc)
        return None


def remember(model_path: str, n_gpu_layers: int, devices: list[str], library: str, probe: OffloadProbe) -> None:
    path = cache_path(model_path, n_gpu_layers, devices, library)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(probe.to_dict()))
