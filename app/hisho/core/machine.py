"""What the machine offers: RAM, CPU threads and the GPU devices llama.cpp sees, turned into a memory budget.

``detect()`` reads RAM with psutil and the device list from the ggml backend API (through
``python -m hisho.engine.measure.probe devices`` in a subprocess, cached per library version). ``from_fixture(path)``
builds the same from a recorded JSON file (tests, and "what would this laptop do"). ``Machine.budget()`` applies
the rules:

- Free memory a driver reports can exceed its total: clamp free <= total.
- Available RAM counts the memory this app's own children hold (the engine and its loaded model:
  ``own_children_memory``): a model is judged against the same budget before and after it is loaded.
- Unified memory (an iGPU, Apple silicon) is ONE pool with system RAM: GPU bytes and CPU bytes come out of the
  same budget; the GPU part is further limited by what the platform lets the GPU map (``PlatformRules``):
  Windows gives an iGPU half of RAM as shared memory; Linux AMD APUs map VRAM carve-out + GTT (sysfs);
  Apple exposes a recommended working set (what ggml's Metal device reports as its total).
- Headroom for the OS and the app: 15 % of RAM, at least 256 MiB, at most 4 GiB, never more than half.
- Fit decisions use ``resident`` on Linux and macOS (untouched reservations cost nothing there) and
  ``committed`` on Windows (commit charge counts every allocation).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from hisho.core import paths
from hisho.core.units import GIB, MIB

log = logging.getLogger("hisho.planner")



@dataclass(frozen=True)
class Device:
    name: str
    type: str            # cpu | gpu (discrete) | igpu (shares RAM) | accel
    total: int
    free: int
    description: str = ""


@dataclass(frozen=True)
class Budget:
    """Bytes a plan may use. ``ram``: system RAM after headroom. ``gpu``: a discrete GPU's free memory, or on
    unified memory the most of ``ram`` the GPU may map. ``metric``: which prediction fit decisions use."""

    ram: int
    gpu: int
    unified: bool
    headroom: int
    metric: str
    explain: str


@dataclass(frozen=True)
class Machine:
    platform: str                      # linux | windows | darwin
    ram_total: int
    ram_available: int
    cpu_threads: int
    devices: tuple[Device, ...] = ()
    supports_gpu_offload: bool = False
    sysfs_root: str | None = None      # Linux: where /sys lives (fixtures point elsewhere)
    source: str = "detected"
    extra: dict[str, Any] = field(default_factory=dict)
    cpu: frozenset[str] = frozenset()  # ggml's CPU features (decide weight repacking); empty: not probed

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.type in ("gpu", "igpu"))

    @property
    def unified(self) -> bool:
        return any(d.type == "igpu" for d in self.gpus) or (self.platform == "darwin" and bool(self.gpus))

    def headroom(self) -> int:
        return min(max(int(self.ram_total * 0.15), 256 * MIB), 4 * GIB, self.ram_total // 2)

    def budget(self, *, ram: int | None = None, gpu: int | None = None, uma: bool | None = None) -> Budget:
        """The budget, optionally for a pretend RAM / GPU size (``hisho plan --ram-gib/--gpu-gib/--uma``)."""
        m = self if ram is None else replace(self, ram_total=ram, ram_available=ram)
        headroom = m.headroom()
        ram_budget = max(0, min(m.ram_total - headroom, m.ram_available))
        unified = m.unified if uma is None else uma
        gpu_budget = 0
        if m.supports_gpu_offload or gpu is not None:
            if gpu is not None:
                gpu_budget = gpu
            elif m.gpus:
                dev = m.gpus[0]
                gpu_budget = rules_for(m).gpu_limit(m, dev) if unified else min(dev.free, dev.total)
        if unified:
            gpu_budget = min(gpu_budget, ram_budget)
        metric = "committed" if m.platform == "windows" else "resident"
        pool = "one pool (unified memory)" if unified else ("RAM + GPU" if gpu_budget else "RAM")
        explain = (f"{_gib(ram_budget)} of RAM after {_gib(headroom)} headroom for the OS and the app"
                   + (f", GPU may use {_gib(gpu_budget)}" if gpu_budget else "")
                   + f"; {pool}; fit judged on {metric} memory")
        return Budget(ram=ram_budget, gpu=gpu_budget, unified=unified, headroom=headroom, metric=metric,
                      explain=explain)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


# ----- platform rules ----------------------------------------------------------------------------------


class PlatformRules(Protocol):
    def gpu_limit(self, machine: Machine, device: Device) -> int:
        """Bytes of the unified pool the GPU may map."""


class DefaultRules:
    def gpu_limit(self, machine: Machine, device: Device) -> int:
        return min(device.free, device.total) or machine.ram_total // 2


class WindowsRules:
    """An iGPU's shared memory is half of RAM by default (plus any BIOS carve-out the driver reports)."""

    def gpu_limit(self, machine: Machine, device: Device) -> int:
        return max(machine.ram_total // 2, min(device.total, machine.ram_total) if device.type == "gpu" else 0)


class LinuxAmdApuRules:
    """amdgpu maps the VRAM carve-out plus GTT (system RAM the GPU may address): both from sysfs."""

    def gpu_limit(self, machine: Machine, device: Device) -> int:
        root = Path(machine.sysfs_root or "/sys")
        best = 0
        for card in sorted((root / "class" / "drm").glob("card*/device")):
            vram, gtt = _read_int(card / "mem_info_vram_total"), _read_int(card / "mem_info_gtt_total")
            best = max(best, vram + gtt)
        return min(best, machine.ram_total) if best else DefaultRules().gpu_limit(machine, device)


class AppleRules:
    """Metal's recommendedMaxWorkingSetSize, which ggml reports as the device total (about 2/3 to 3/4 of RAM)."""

    def gpu_limit(self, machine: Machine, device: Device) -> int:
        return min(device.total, machine.ram_total) if device.total else machine.ram_total * 2 // 3


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def rules_for(machine: Machine) -> PlatformRules:
    if machine.platform == "windows":
        return WindowsRules()
    if machine.platform == "darwin":
        return AppleRules()
    if machine.platform == "linux" and machine.unified:
        return LinuxAmdApuRules()
    return DefaultRules()


# ----- building a Machine ------------------------------------------------------------------------------


def _device(d: dict[str, Any]) -> Device:
    total, free = int(d.get("total", 0)), int(d.get("free", 0))
    # Drivers report free > total on unified memory (free counts swap or system RAM): clamp.
    return Device(name=str(d.get("name", "?")), type=str(d.get("type", "gpu")), total=total,
                  free=min(free, total) if total else free, description=str(d.get("description", "")))


def from_dict(data: dict[str, Any], *, base_dir: Path | None = None, source: str = "fixture") -> Machine:
    """A Machine from a recorded description (tests/fixtures/devices/*.json). ``sysfs_root`` is relative to
    ``base_dir``."""
    sysfs = data.get("sysfs_root")
    if sysfs and base_dir is not None:
        sysfs = str((base_dir / sysfs).resolve())
    total = int(data["ram_total"])
    return Machine(platform=str(data.get("platform", "linux")), ram_total=total,
                   ram_available=min(int(data.get("ram_available", total)), total),
                   cpu_threads=int(data.get("cpu_threads", 4)),
                   devices=tuple(_device(d) for d in data.get("devices", [])),
                   supports_gpu_offload=bool(data.get("supports_gpu_offload", False)), sysfs_root=sysfs,
                   source=source, cpu=frozenset(str(f) for f in data.get("cpu_features", ())))


def from_fixture(path: str | Path) -> Machine:
    p = Path(path)
    return from_dict(json.loads(p.read_text(encoding="utf-8")), base_dir=p.parent, source=f"fixture:{p.name}")


def _platform() -> str:
    return "windows" if sys.platform.startswith("win") else ("darwin" if sys.platform == "darwin" else "linux")


def detect(*, probe_devices: bool = True) -> Machine:
    """This machine. The device list comes from a cached probe (ggml's device API in a subprocess)."""
    import psutil

    vm = psutil.virtual_memory()
    data: dict[str, Any] = {"platform": _platform(), "ram_total": int(vm.total),
                            "ram_available": int(vm.available) + own_children_memory(),
                            "cpu_threads": os.cpu_count() or 1}
    if probe_devices:
        probed = _probed_devices()
        data["devices"] = [d for d in probed.get("devices", []) if d.get("type") != "cpu"]
        data["supports_gpu_offload"] = bool(probed.get("supports_gpu_offload", False))
        data["cpu_features"] = probed.get("cpu_features", [])
    else:
        data["cpu_features"] = _cached_probe().get("cpu_features", [])
    return from_dict(data, source="detected")


def own_children_memory() -> int:
    """Private memory of this process's children: the engine with its loaded model (and a probe, if one runs).
    A plan is judged against the machine's budget, not against what is left beside the model it replaces: a
    model loaded here gives its memory back when the next load (or a reload with other settings) takes its
    place. Mapped file pages are left out (the OS already counts them as available page cache); on Linux
    that is RSS less its file-backed and shared part."""
    import psutil

    total = 0
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        try:
            info = child.memory_info()
        except psutil.Error:
            continue  # it ended meanwhile
        total += max(0, int(info.rss) - int(getattr(info, "shared", 0)))
    return total


def _cached_probe() -> dict[str, Any]:
    """The stored device probe of this library version, or {} (never runs the probe)."""
    from hisho.core.probe import library_version

    try:
        stored = json.loads((paths.cache_dir() / "devices.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return dict(stored) if stored.get("library_key") == library_version() else {}


def _probed_devices() -> dict[str, Any]:
    from hisho.core.probe import ProbeFailed, library_version, run_probe

    cache = paths.cache_dir() / "devices.json"
    stored = _cached_probe()
    if stored and "cpu_features" in stored:
        return stored
    try:
        answer = run_probe("devices", {}, timeout=60)
    except ProbeFailed as exc:
        log.warning("device probe failed (%s); planning for the CPU only", exc)
        return {"devices": [], "supports_gpu_offload": False}
    answer["library_key"] = library_version()
    cache.write_text(json.dumps(answer), encoding="utf-8")
    return answer
