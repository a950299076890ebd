"""packaging/vulkan/build-deps.sh finds the Vulkan loader however large the machine's library cache is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "packaging" / "vulkan" / "build-deps.sh"


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def test_the_loader_is_found_in_a_library_cache_larger_than_a_pipe(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    # A cache of ~300 KB whose loader line comes first: a search that stops at the first match closes the pipe
    # while ldconfig still writes, and ldconfig dies of SIGPIPE.
    _tool(
        tools,
        "ldconfig",
        'echo "\tlibvulkan.so (libc6,x86-64) => /nowhere/libvulkan.so"\n'
        'i=0; while [ $i -lt 5000 ]; do echo "\tlibfiller$i.so.1 (libc6,x86-64) => /nowhere/libfiller$i.so.1"; '
        "i=$((i+1)); done",
    )
    _tool(tools, "glslc", "exit 0")
    _tool(tools, "apt-get", "exit 0")  # nothing is installed by the test, even as root
    sdk = tmp_path / "sdk"
    include = sdk / "usr" / "include"
    (include / "vulkan").mkdir(parents=True)
    (include / "vulkan" / "vulkan_core.h").write_text("#define VK_HEADER_VERSION 300\n")
    (include / "spirv" / "unified1").mkdir(parents=True)
    (include / "spirv" / "unified1" / "spirv.hpp").write_text("\n")
    # The files where the loader usually lies are left out: only the cache can find it.
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}",
        "HISHO_VULKAN_LOADER_FILES": str(tmp_path / "no-loader-here.so"),
    }

    done = subprocess.run(
        ["bash", str(SCRIPT), str(sdk)], env=env, capture_output=True, text=True, timeout=120, check=False
    )

    assert "missing" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    # The system's own headers may be new enough (nothing to add) or too old (the SDK's are named).
    assert lines in ([], [""], [f"-DVulkan_INCLUDE_DIR={include}"]), done.stdout
