"""The engine child process and its JSON-lines channel: the transport under ``EngineClient``.

``EngineProcess`` starts the child (``hisho.core.spawn``, role ``engine``; its stderr goes to the engine log),
writes requests to its stdin and routes every event it writes to the queue of the request that asked (by
``id``). When the child dies, every request still in flight gets one ``crashed`` error event that names the
exit code and the engine log's telling line; when it is closed, one ``closed`` error event. Each request is
failed by exactly one of the two (the reader thread and ``close`` take the pending set under one lock), so no
request waits on a child that is gone. It knows no op beyond ``shutdown`` and ``cancel``: typed requests,
the version check at ``hello`` and re-loading the model after a crash are ``EngineClient``'s.

Rules of use: thread-safe. ``generation`` counts the children started, so a caller can tell whether what it
did to "the engine" (a load) was done to the one running now.
"""

from __future__ import annotations

import itertools
import logging
import queue
import subprocess
import threading
from typing import IO, Any

from hisho.core import logs, paths, spawn
from hisho.core.engine.ops import Request, Shutdown
from hisho.core.engine.protocol import ErrorKind, decode, encode
from hisho.core.errors import EngineCrashed

log = logging.getLogger("hisho.engine")


class EngineProcess:
    """One engine child at a time (started again by ``start`` after it died or was closed)."""

    def __init__(self, *, env: dict[str, str] | None = None, test_hooks: bool = False,
                 python: str | None = None) -> None:
        self._env = env
        self._python = python  # another interpreter for the child (spawn.command); None: this one
        self._test_hooks = test_hooks
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._pending: dict[int, queue.Queue[Any]] = {}
        self._ids = itertools.count(1)
        self.generation = 0  # children started so far; the running one is number ``generation``
        self.restarts = 0    # children started after an earlier one died (not after ``close``)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def popen(self) -> subprocess.Popen[bytes] | None:
        """The child (tests and diagnostics)."""
        return self._proc

    def start(self) -> bool:
        """Start a child unless one is running; True if this call started one."""
        with self._state_lock:
            if self.running:
                return False
            if self._proc is not None:
                self.restarts += 1
            env = spawn.child_env(self._env)
            if self._test_hooks:
                env["HISHO_ENGINE_TEST_HOOKS"] = "1"
            logs.rotate(paths.engine_log_file())
            stderr_file = paths.engine_log_file().open("ab")
            try:
                self._proc = spawn.popen("engine", env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=stderr_file, python=self._python)
            finally:
                stderr_file.close()
            self._stdin = self._proc.stdin
            self.generation += 1
            self._reader = threading.Thread(
                target=self._read_loop, args=(self._proc,), name="hisho-engine-reader", daemon=True
            )
            self._reader.start()
            return True

    def close(self, timeout: float = 5.0) -> None:
        """Ask the child to exit; kill it if it does not within ``timeout``."""
        with self._state_lock:
            proc = self._proc
            if proc is None:
                return
            def ask() -> None:
                self.send({"id": next(self._ids), "op": Shutdown.op})

            try:
                if not spawn.stop_process(proc, timeout, ask=ask):
                    log.warning("engine did not exit in %.1fs; killed it", timeout)
            finally:
                self._proc = None
                self._fail_pending({"ev": "error", "kind": ErrorKind.CLOSED.value,
                                    "message": "the engine was closed while this request ran"})

    def kill(self) -> None:
        """Kill the child at once."""
        with self._state_lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()

    def submit(self, req: Request) -> tuple[int, queue.Queue[Any]]:
        """Write ``req`` to the child; its events arrive on the returned queue until ``forget``."""
        req_id = next(self._ids)
        events: queue.Queue[Any] = queue.Queue()
        with self._state_lock:
            if not self.running:
                raise EngineCrashed(self._death_message(), self._proc.returncode if self._proc else None)
            self._pending[req_id] = events
        try:
            self.send({"id": req_id, "op": req.op, **req.to_wire()})
        except OSError:
            self.forget(req_id)
            raise EngineCrashed(self._death_message()) from None
        return req_id, events

    def cancel(self, req_id: int) -> None:
        """Stop request ``req_id``; harmless if it already ended or the child is gone."""
        if not self.running:
            return
        try:
            self.send({"id": next(self._ids), "op": "cancel", "target": req_id})
        except OSError:
            pass

    def release(self) -> None:
        """Test hook: the engine's held reply goes on (``EngineClient.release_hold``)."""
        if self.running:
            self.send({"id": next(self._ids), "op": "release"})

    def send(self, message: dict[str, Any]) -> None:
        with self._write_lock:
            stdin = self._stdin
            if stdin is None:
                raise OSError("engine not started")
            stdin.write(encode(message))

    def forget(self, req_id: int) -> None:
        with self._state_lock:
            self._pending.pop(req_id, None)

    def _read_loop(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                ev = decode(line)
            except ValueError:
                log.warning("engine wrote a non-protocol line: %r", line[:200])
                continue
            with self._state_lock:
                target = self._pending.get(int(ev.get("id", -1)))
            if target is not None:
                target.put(ev)
        code = proc.wait()
        with self._state_lock:
            if self._proc is not proc:
                return  # closed: ``close`` failed what was pending (or a newer child owns the pending set)
            if self._pending:
                message = self._death_message(code)
                log.error("%s", message)
                self._fail_pending({"ev": "error", "kind": ErrorKind.CRASHED.value, "message": message,
                                    "exit_code": code})

    def _fail_pending(self, event: dict[str, Any]) -> None:
        """End every request in flight with ``event`` (a copy each). Call with ``_state_lock`` held."""
        pending = list(self._pending.items())
        self._pending.clear()
        for req_id, events in pending:
            events.put({**event, "id": req_id})

    def _death_message(self, code: int | None = None) -> str:
        if code is None and self._proc is not None:
            code = self._proc.poll()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        tail = logs.telling_tail(paths.engine_log_file())
        detail = f" (last engine log line: {tail})" if tail else ""
        return f"the engine process stopped unexpectedly ({how}){detail}"
