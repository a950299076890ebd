"""Direct calls into ggml's shared library for what llama_cpp's bindings do not expose."""

from __future__ import annotations

import ctypes
import pathlib

import llama_cpp


def _ggml_base() -> ctypes.CDLL:
    lib_dir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        candidate = lib_dir / name
        if candidate.exists():
            return ctypes.CDLL(str(candidate))
    raise OSError(f"ggml-base library not found in {lib_dir}")


def ggml_abort(message: str) -> None:
    """Call ggml_abort, exactly what a failed GGML_ASSERT calls: prints a backtrace and abort()s."""
    lib = _ggml_base()
    lib.ggml_abort.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    lib.ggml_abort(b"hisho/engine/lib/native.py", 0, message.replace("%", "%%").encode("utf-8"))
