"""ggml's backends for this process: loaded from where they are installed, and which CPU variant runs.

A distribution build of llama.cpp (``GGML_BACKEND_DL=ON``, ``GGML_CPU_ALL_VARIANTS=ON``; see
packaging/portable-venv.sh) has no CPU code in libggml. It ships one CPU module per x86-64 level
(``libggml-cpu-x64.so`` … ``libggml-cpu-haswell.so`` … ``libggml-cpu-zen4.so``); ggml scores each against the
running CPU and loads the best (``ggml_backend_load_best`` in ggml-backend-reg.cpp). ``llama_backend_init`` looks
for them only next to the executable and in the current directory, which is neither ``site-packages/bin``
(where the wheel puts them) nor ``llama_cpp/lib`` (where the bundle puts them), and llama-cpp-python 0.3.36 does
not bind ``ggml_backend_load_all_from_path`` (abetlen/llama-cpp-python#2069). So ``init`` calls it from libggml
through ctypes before llama.cpp's own initialisation.

A native build (the developer's ``.venv``) has its CPU backend built in: nothing is loaded, the report says so.
Rules of use: call ``init()`` instead of ``llama_cpp.llama_backend_init()``; it is idempotent.
"""

from __future__ import annotations

import ctypes
import logging
import pathlib
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import llama_cpp

log = logging.getLogger("hisho.engine")

_PREFIX, _SUFFIX = ("ggml-cpu-", ".dll") if sys.platform == "win32" else ("libggml-cpu-", ".so")


@dataclass(frozen=True)
class BackendReport:
    """``mode``: "dynamic" (variants loaded at run time) or "built-in" (a native build)."""

    mode: str
    cpu_variant: str
    variants: list[str] = field(default_factory=list)
    directory: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_report: BackendReport | None = None


def library_dir() -> pathlib.Path:
    return pathlib.Path(llama_cpp.__file__).parent / "lib"


def variant_dirs() -> list[pathlib.Path]:
    """Where CPU variant modules may be: llama_cpp/lib (the bundle), site-packages/bin (the wheel)."""
    return [library_dir(), pathlib.Path(llama_cpp.__file__).parents[1] / "bin"]


def variant_name(path: pathlib.Path) -> str:
    return path.name[len(_PREFIX):-len(_SUFFIX)]


def find_variants() -> tuple[pathlib.Path | None, list[pathlib.Path]]:
    for directory in variant_dirs():
        found = sorted(directory.glob(f"{_PREFIX}*{_SUFFIX}"))
        if found:
            return directory, found
    return None, []


def _ggml() -> ctypes.CDLL:
    """libggml as llama.cpp loaded it. Wheels hold copies, not links (libggml.so, .so.0, .so.0.x.y): loading
    another copy by path would give a second backend registry that llama.cpp never sees. On Linux and macOS
    symbols resolve through libllama's handle, which searches its own dependencies; Windows keeps one module
    per name."""
    if sys.platform != "win32":
        return llama_cpp.llama_cpp._lib  # type: ignore[attr-defined,no-any-return]
    return ctypes.CDLL(str(library_dir() / "ggml.dll"))


def ggml_library() -> ctypes.CDLL:
    """libggml as llama.cpp loaded it (``_ggml``), for ggml calls llama-cpp-python does not bind."""
    return _ggml()


def _loaded_variant(candidates: list[pathlib.Path]) -> pathlib.Path | None:
    """The variant this process mapped (Linux: /proc/self/maps); elsewhere the best score, ggml's own rule."""
    maps = pathlib.Path("/proc/self/maps")
    if maps.exists():
        text = maps.read_text(encoding="utf-8", errors="replace")
        mapped = [p for p in candidates if f"/{p.name}\n" in text]
        return mapped[0] if mapped else None
    best, best_score = None, 0
    for path in candidates:
        score_fn = getattr(ctypes.CDLL(str(path)), "ggml_backend_score", None)
        score = int(score_fn()) if score_fn is not None else 0
        if score > best_score:
            best, best_score = path, score
    return best


def init() -> BackendReport:
    """Load the backends (once per process), then ``llama_backend_init``. Raises OSError naming what is
    missing when a distribution build finds no CPU backend this machine can run."""
    global _report
    if _report is not None:
        return _report
    directory, candidates = find_variants()
    if directory is None:
        llama_cpp.llama_backend_init()
        _report = BackendReport(mode="built-in", cpu_variant="built-in")
        log.info("ggml CPU backend: built into libggml (native build)")
        return _report
    ggml = _ggml()
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.restype = None
    ggml.ggml_backend_load_all_from_path(str(directory).encode("utf-8"))
    chosen = _loaded_variant(candidates)
    names = [variant_name(p) for p in candidates]
    if chosen is None:
        raise OSError(f"no llama.cpp CPU backend in {directory} runs on this CPU (shipped: {', '.join(names)})")
    llama_cpp.llama_backend_init()
    _report = BackendReport(mode="dynamic", cpu_variant=variant_name(chosen), variants=names,
                            directory=str(directory))
    log.info("ggml CPU backend: %s (of %d shipped: %s) from %s", _report.cpu_variant, len(names),
             ", ".join(names), directory)
    return _report


# ----- weight layouts the CPU backend offers ----------------------------------------------------------------------

_GGML_BACKEND_DEVICE_TYPE_CPU = 0
_extra: list[str] | None = None
_warned = False


def extra_buffer_types() -> list[str]:
    """Names of the CPU backend's extra buffer types, best first, as llama.cpp's loader will offer them to each
    weight (e.g. ``["AMX", "CPU_REPACK"]``); ``[]`` where the build has none or does not say. Call after
    ``init``."""
    global _extra
    if _extra is not None:
        return _extra
    names: list[str] = []
    try:
        lib = _ggml()
        lib.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
        lib.ggml_backend_dev_by_type.restype = ctypes.c_void_p
        lib.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
        lib.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
        lib.ggml_backend_buft_name.argtypes = [ctypes.c_void_p]
        lib.ggml_backend_buft_name.restype = ctypes.c_char_p
        dev = lib.ggml_backend_dev_by_type(_GGML_BACKEND_DEVICE_TYPE_CPU)
        reg = lib.ggml_backend_dev_backend_reg(dev) if dev else None
        fn = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts") if reg else None
        if fn:
            get = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(fn)
            arr = get(dev)
            i = 0
            while arr and arr[i]:
                names.append((lib.ggml_backend_buft_name(arr[i]) or b"").decode("utf-8", "replace"))
                i += 1
    except (AttributeError, OSError) as exc:  # an older or stripped build: the loader's defaults stand
        log.debug("CPU extra buffer types not readable: %s", exc)
    _extra = names
    return names


def extra_buffers_allowed() -> bool:
    """False where the CPU backend would put weights in AMX tiles. ggml's AMX matrix kernels crash in
    ``ggml_backend_amx_mul_mat`` on prompts of a few dozen tokens (every model tried, dense Llama and Gemma-3 at
    Q4_0/Q4_1/Q8_0, on a Xeon with AMX; ggml-org/llama.cpp#20824 open) and give wrong results on Q4_0/Q4_1
    (#16315): an engine that can crash or change answers is worse than one without repacked weights.
    Hisho's own builds leave AMX out (Makefile, packaging/portable-venv.sh), so this is the guard for a
    llama-cpp-python built elsewhere. docs/cpu-kernels.md."""
    global _warned
    amx = [n for n in extra_buffer_types() if "AMX" in n.upper()]
    if amx and not _warned:
        _warned = True
        log.warning("this llama.cpp build puts weights in %s buffers, whose kernels crash or give wrong answers: "
                    "loading without extra buffer types (no repacked weights; slower prompts). Rebuild "
                    "llama-cpp-python without AMX (make install does) for full speed", amx[0])
    return not amx


@dataclass(frozen=True)
class Device:
    """One of ggml's devices: ``type`` 0 cpu, 1 gpu (discrete), 2 igpu (shares system RAM), 3 accel."""

    name: str
    description: str
    type: int
    free: int
    total: int


def device_list(lib: ctypes.CDLL) -> list[Device]:
    """ggml's devices as registered in ``lib`` (a libggml handle: ``ggml_library``, or the probe's own)."""
    size = ctypes.c_size_t
    lib.ggml_backend_dev_count.restype = size
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [size]
    for fn in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, fn).restype = ctypes.c_char_p
        getattr(lib, fn).argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(size), ctypes.POINTER(size)]
    out = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        free, total = size(0), size(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        out.append(Device((lib.ggml_backend_dev_name(dev) or b"").decode("utf-8", "replace"),
                          (lib.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
                          int(lib.ggml_backend_dev_type(dev)), int(free.value), int(total.value)))
    return out
