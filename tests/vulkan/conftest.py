"""The Vulkan suite: the engine on a real Vulkan device (in CI Mesa's software device, lavapipe; docs/vulkan.md).

Runs only on a llama-cpp-python built with ``-DGGML_VULKAN=on`` (``make test-vulkan`` builds one in its own
venv). Elsewhere every test skips with the reason; with ``HISHO_VULKAN_REQUIRED=1`` (``make test-vulkan``) a
missing build or device fails instead, so CI cannot pass a suite that never ran.

ggml hides a CPU-type Vulkan device (lavapipe) unless ``GGML_VK_VISIBLE_DEVICES`` names it: the suite sets it
for its own tests and engine processes, never the product. It is set for the package only and taken back after
it, so other tests in the same run keep the product's view.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REQUIRED = os.environ.get("HISHO_VULKAN_REQUIRED") == "1"
VISIBLE = {"GGML_VK_VISIBLE_DEVICES": "0"}


def vulkan_library() -> Path | None:
    """ggml's Vulkan backend beside this llama_cpp, found without importing it (the CPU suite must not)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    lib = Path(spec.origin).parent / "lib"
    found = sorted(lib.glob("libggml-vulkan*")) + sorted(lib.glob("ggml-vulkan*.dll"))
    return found[0] if found else None


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"HISHO_VULKAN_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="package", autouse=True)
def vulkan_env() -> Iterator[None]:
    if vulkan_library() is None:
        _unavailable("no Vulkan build: this llama-cpp-python has no ggml-vulkan backend (make test-vulkan)")
    mp = pytest.MonkeyPatch()
    for key, value in VISIBLE.items():
        mp.setenv(key, os.environ.get(key, value))
    yield
    mp.undo()


@pytest.fixture(scope="package")
def probed(vulkan_env: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The device probe's answer (``python -m hisho.engine.measure.probe devices``, the planner's own path)."""
    from hisho.core.planner.calibrate import ProbeFailed, run_probe

    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(tmp_path_factory.mktemp("probe_home")))
    try:
        answer = run_probe("devices", {}, timeout=120)
    except ProbeFailed as exc:
        _unavailable(f"the device probe failed: {exc}")
        raise
    finally:
        mp.undo()
    if not answer.get("supports_gpu_offload") or not any(d["type"] in ("gpu", "igpu") for d in answer["devices"]):
        _unavailable("the Vulkan build sees no GPU device (is mesa-vulkan-drivers installed? "
                     f"devices: {answer.get('devices')})")
    return answer


@pytest.fixture(scope="package")
def device(probed: dict[str, Any]) -> dict[str, Any]:
    return next(d for d in probed["devices"] if d["type"] in ("gpu", "igpu"))
