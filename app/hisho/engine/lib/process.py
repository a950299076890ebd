"""The engine process's housekeeping: llama.cpp's log level and exiting the moment the client is gone.
Split out of ``hisho.engine.server`` (which reads requests and runs them)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

from hisho.engine.lib import hugepages

log = logging.getLogger("hisho.engine")

_GGML_DEBUG, _GGML_WARN, _GGML_CONT = 1, 3, 5  # ggml.h's ggml_log_level


def keep_llama_log_at_info() -> None:
    """llama.cpp's log lines go to stderr (engine.log) from INFO up; DEBUG lines are dropped.

    llama-cpp-python installs a callback whose level table predates ggml renumbering its levels (it reads
    DEBUG=1 as INFO), so it printed a DEBUG line per input tensor of every decode step: 2.7 MB of engine.log
    in half an hour of chatting. A continuation line follows the decision for the line it continues.

    The callback also sees the one moment the KV cache can be put on huge pages: llama.cpp logs its size
    between allocating and clearing it (hugepages.advise_kv_buffer)."""
    import ctypes

    import llama_cpp

    keep = [True]

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def _callback(level: int, text: bytes, _user_data: Any) -> None:
        if level != _GGML_CONT:
            keep[0] = level != _GGML_DEBUG
        if b"KV buffer size" in text:
            try:
                hugepages.advise_kv_buffer(text.decode("utf-8", "replace"))
            except Exception:  # an exception must not cross into llama.cpp; the cache keeps small pages
                log.debug("huge pages for the KV cache", exc_info=True)
        if keep[0]:
            sys.stderr.write(text.decode("utf-8", "replace"))
            if level >= _GGML_WARN and level != _GGML_CONT:
                sys.stderr.flush()

    keep_llama_log_at_info._callback = _callback  # type: ignore[attr-defined]  # ctypes keeps no reference
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))


WATCHDOG_S = 0.1


def watch_parent() -> None:
    """Exit at once when the client is gone, even in the middle of a long native call (a prefill slice runs
    for seconds and only then sees stdin closed). Linux: PR_SET_PDEATHSIG, when the client started us from its
    main thread; everywhere: a thread that polls the parent pid. Unwritten KV temp files are cleaned up by
    the client's next ``reconcile`` (their writer pid is dead)."""
    try:
        parent = int(os.environ.get("HISHO_PARENT_PID", "0"))
    except ValueError:
        parent = 0
    if parent <= 0:
        return
    if sys.platform.startswith("linux") and os.environ.get("HISHO_PDEATHSIG") == "1":
        try:
            import ctypes
            import signal

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError) as exc:
            log.warning("PR_SET_PDEATHSIG unavailable: %s", exc)

    def watch() -> None:
        while True:
            if not _alive(parent):
                log.warning("the client (pid %d) is gone; exiting", parent)
                os._exit(0)
            time.sleep(WATCHDOG_S)

    if not _alive(parent):  # died before we got here
        os._exit(0)
    threading.Thread(target=watch, name="hisho-parent-watch", daemon=True).start()


def _alive(parent: int) -> bool:
    if os.name == "posix":
        return os.getppid() == parent  # reparented to init/a subreaper when the parent dies
    try:
        import psutil

        return bool(psutil.pid_exists(parent))
    except ImportError:  # pragma: no cover - psutil is a dependency
        return True


def give_back_heap() -> bool:
    """Return the free pages inside the C heap to the OS (glibc's ``malloc_trim(0)``): blocks under the mmap
    threshold (up to 32 MiB once it has climbed: a sliding window's checkpoints) stay resident when freed, and
    only a free heap *top* goes back by itself. For the moment a whole context's state is let go at once (the
    swap to a summary job's context). False where the C library has no such call (not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))
