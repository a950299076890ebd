"""The one way Hisho starts a child process of its own: the engine, the llama.cpp probe and a model download.

Rules of use:
- A child is named by its *role* (``engine``, ``probe``, ``download``), never by a module path or ``sys.executable`` at the
  call site. ``command(role, *args)`` is the argv; ``popen`` / ``run`` start it with ``child_env`` and
  ``popen_options`` (the one place for process-group and parent-death settings).
- From a checkout or a wheel the child is ``python -m <module>``. In a PyInstaller bundle ``sys.executable`` is
  the ``hisho`` binary itself, which does not understand ``-m``: the child is then ``hisho --hisho-child ROLE
  ARGS…`` and ``hisho.cli.main`` hands it to the role's entry point (``run_child`` in cli/main.py). A test runs the
  probe through such a launcher (tests/engine/test_spawn.py).
- Core never imports the engine: roles map to module *names*; only the launcher imports them.
- ``stop_process`` is the one way to stop a child (ours, or a server a benchmark or a test started): ask, wait,
  then kill and reap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

CHILD_FLAG = "--hisho-child"
LEGACY_ENGINE_FLAG = "--engine-process"  # what bundles built before the spawn module passed for the engine

# role -> the module ``python -m`` runs (its ``__main__`` or ``if __name__ == "__main__"`` block).
ROLES: dict[str, str] = {
    "engine": "hisho.engine",
    "probe": "hisho.engine.measure.probe",
    "download": "hisho.core.hub.child",
    "kept-probe": "hisho.bench.plan_kept",  # hisho bench plan --kept: a measurement child, like the probe
    "attention-probe": "hisho.engine.measure.attention",  # flash attention on and off timed (planner/attention.py)
}

APP_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding the ``hisho`` package


def frozen() -> bool:
    """True inside a PyInstaller (or similar) bundle: ``sys.executable`` is the app, not a Python."""
    return bool(getattr(sys, "frozen", False))


def command(role: str, *args: str, python: str | None = None) -> list[str]:
    """The argv that starts ``role`` with ``args``, in a checkout, a wheel install or a frozen bundle alike.
    ``python``: another interpreter runs the child (a benchmark's engine on another llama.cpp build, such as
    the CPU build beside a Vulkan one); it imports this checkout's ``hisho`` first (``child_env``)."""
    if role not in ROLES:
        raise ValueError(f"unknown child role {role!r}")
    if python:
        return [python, "-m", ROLES[role], *args]
    if frozen():
        return [sys.executable, CHILD_FLAG, role, *args]
    return [sys.executable, "-m", ROLES[role], *args]


def child_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a child: the parent's (or ``base``), the package importable from a checkout, ggml's
    gdb backtrace off unless ``HISHO_ENGINE_BACKTRACE=1`` (slow, and noise in the log), unbuffered output."""
    env = dict(os.environ if base is None else base)
    if not frozen():
        env["PYTHONPATH"] = APP_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if env.get("HISHO_ENGINE_BACKTRACE") != "1":
        env.setdefault("GGML_NO_BACKTRACE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Who the parent is, so the engine exits the moment it is gone (hisho.engine.lib.process.watch_parent).
    # PR_SET_PDEATHSIG fires when the *thread* that started the child exits, so the engine only asks for it
    # when that thread is the main thread; a watchdog covers the rest.
    env["HISHO_PARENT_PID"] = str(os.getpid())
    env["HISHO_PDEATHSIG"] = "1" if threading.current_thread() is threading.main_thread() else "0"
    env.update(extra)
    return env


def popen_options() -> dict[str, Any]:
    """Extra ``subprocess`` arguments every child gets. The one place for process-group / parent-death
    settings, so the engine and the probe behave the same when the app dies.

    Each child gets its own session: a Ctrl+C in the terminal reaches the client only, which cancels (the
    engine would otherwise die with it and a stopped reply would read as an engine crash)."""
    return {"start_new_session": True}


def popen(role: str, *args: str, env: dict[str, str] | None = None, stdin: int | IO[Any] | None = None,
          stdout: int | IO[Any] | None = None, stderr: int | IO[Any] | None = None,
          python: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``role`` as a long-lived child with binary, unbuffered pipes (the engine)."""
    return subprocess.Popen(command(role, *args, python=python), stdin=stdin, stdout=stdout, stderr=stderr,
                            env=env if env is not None else child_env(), bufsize=0, **popen_options())


_RUNNING: set[subprocess.Popen[str]] = set()  # run()'s children in flight, for stop_running
_RUNNING_LOCK = threading.Lock()


def run(role: str, *args: str, input: str, timeout: float,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``role`` to completion with ``input`` on stdin (the probe). Raises subprocess.TimeoutExpired. A
    ``stop_running`` meanwhile ends the child: its result then has a non-zero exit code and what it had said."""
    proc = subprocess.Popen(command(role, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env if env is not None else child_env(),
                            **popen_options())
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stop_running() -> int:
    """End every child ``run`` is waiting on (the app quits: a measurement must not hold the exit). Returns how
    many there were; each ``run`` then returns at once."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    return len(procs)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 30.0, *,
                 ask: Callable[[], None] | None = None) -> bool:
    """Stop ``proc``: ask it to exit (``ask``; by default SIGTERM), wait up to ``timeout`` seconds, then kill it.
    Always reaps it. True if it exited by itself (or had already), False if it had to be killed. An ``ask``
    that raises OSError (a pipe to a child already gone) counts as asked."""
    if proc.poll() is not None:
        return True
    try:
        (ask or proc.terminate)()
    except OSError:
        pass
    try:
        proc.wait(timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def child_role(argv: list[str]) -> tuple[str, list[str]] | None:
    """``(role, args)`` if ``argv`` (without the program name) asks a bundle to act as a child, else None."""
    if argv[:1] == [LEGACY_ENGINE_FLAG]:
        return "engine", argv[1:]
    if argv[:1] == [CHILD_FLAG] and len(argv) >= 2 and argv[1] in ROLES:
        return argv[1], argv[2:]
    return None
