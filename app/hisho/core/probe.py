"""The llama.cpp probe child, run from core: ``run_probe(command, request)`` starts it (``hisho.core.spawn``, role
``probe``) with the request as JSON on stdin and returns its JSON answer; ``child_answer`` does the same for the
other measuring children. ``library_version`` keys every cache of what the probe measured (the device list in
``core/machine.py``, calibrations in ``core/planner/calibrate.py``). No llama_cpp here: the library is found
without importing it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from hisho.core import spawn

PROBE_TIMEOUT_S = 120


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


def child_answer(role: str, *args: str, request: dict[str, Any], timeout: float, what: str,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a measuring child (``spawn.run``: ``role`` with ``args``) with ``request`` as JSON on stdin; the last
    JSON line it printed. ``what`` names it in the ProbeFailed raised on a timeout or an answer-less exit."""
    try:
        proc = spawn.run(role, *args, input=json.dumps(request), timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"{what} took longer than {timeout:.0f} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise ProbeFailed(f"{what} failed: {tail[0]}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def run_probe(command: str, request: dict[str, Any], timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the probe child (``hisho.core.spawn``, role ``probe``) with ``request`` on stdin; its JSON answer."""
    answer = child_answer("probe", command, request=request, timeout=timeout, what=f"llama.cpp probe '{command}'")
    if not answer.get("ok"):
        raise ProbeFailed(f"llama.cpp probe '{command}' failed: {answer.get('error', 'unknown error')}")
    return answer
