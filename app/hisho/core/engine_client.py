"""The parent side of the engine process: start it, talk to it, restart it after a crash.

``EngineClient`` is the one way the CLI and the GUI reach llama.cpp. It is thread-safe: any thread may issue a
request; events are routed to the request that asked. The engine itself runs one request at a time, in order.

A native abort inside llama.cpp kills only the child. Every request in flight then ends with ``EngineCrashed``;
the next request starts a fresh child and re-loads the last ``LoadParams`` before running.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from hisho.core import paths
from hisho.core.errors import EngineCrashed, EngineError
from hisho.core.protocol import PROTOCOL_VERSION, STREAMING_OPS, LoadParams, Sampling, decode, encode

log = logging.getLogger("hisho.engine")

ENGINE_FLAG = "--engine-process"  # argv[1] of a frozen bundle started as the engine


@dataclass
class GenerationResult:
    """What a finished ``generate`` reports (the "done" event)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    ttft_s: float
    decode_s: float
    tokens_per_s: float
    stop_reason: str
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_event(cls, ev: dict[str, Any]) -> GenerationResult:
        known = {"text", "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_s", "decode_s",
                 "tokens_per_s", "stop_reason"}
        return cls(
            text=ev.get("text", ""),
            prompt_tokens=int(ev.get("prompt_tokens", 0)),
            completion_tokens=int(ev.get("completion_tokens", 0)),
            cached_tokens=int(ev.get("cached_tokens", 0)),
            ttft_s=float(ev.get("ttft_s", 0.0)),
            decode_s=float(ev.get("decode_s", 0.0)),
            tokens_per_s=float(ev.get("tokens_per_s", 0.0)),
            stop_reason=str(ev.get("stop_reason", "")),
            extra={k: v for k, v in ev.items() if k not in known and k not in ("id", "ev")},
        )


class Stream:
    """Iterator over one streaming request's token events (dicts with ``text`` and ``token``).

    After iteration ends, ``result`` holds the ``GenerationResult``. ``cancel()`` may be called from any thread;
    the engine stops before sampling its next token.
    """

    def __init__(self, client: EngineClient, req_id: int, events: queue.Queue[Any]) -> None:
        self._client = client
        self.id = req_id
        self._events = events
        self.result: GenerationResult | None = None
        self.first_token_at: float | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while True:
                ev = self._events.get()
                kind = ev.get("ev")
                if kind == "token":
                    if self.first_token_at is None:
                        self.first_token_at = time.perf_counter()
                    yield ev
                elif kind == "done":
                    self.result = GenerationResult.from_event(ev)
                    return
                elif kind == "error":
                    raise _as_error(ev)
        finally:
            self._client._forget(self.id)

    def cancel(self) -> None:
        self._client.cancel(self.id)

    def collect(self) -> GenerationResult:
        """Drain the stream and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


def _as_error(ev: dict[str, Any]) -> EngineError:
    if ev.get("kind") == "crashed":
        return EngineCrashed(str(ev.get("message", "engine crashed")), ev.get("exit_code"))
    return EngineError(str(ev.get("kind", "internal")), str(ev.get("message", "engine error")))


class EngineClient:
    """Owns the engine child process. Create one per app; ``close()`` it at exit."""

    def __init__(self, *, env: dict[str, str] | None = None, test_hooks: bool = False) -> None:
        self._env = env
        self._test_hooks = test_hooks
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._write_lock = threading.Lock()
        self._state_lock = threading.RLock()
        self._pending: dict[int, queue.Queue[Any]] = {}
        self._ids = itertools.count(1)
        self._load_params: LoadParams | None = None
        self._loaded_in_proc: LoadParams | None = None
        self._load_info: dict[str, Any] = {}
        self.engine_info: dict[str, Any] = {}
        self.restarts = 0

    # ----- process lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def load_info(self) -> dict[str, Any]:
        """What the last successful load reported (n_ctx, n_vocab, chat template presence, timings)."""
        return dict(self._load_info)

    @property
    def load_params(self) -> LoadParams | None:
        return self._load_params

    def start(self) -> None:
        with self._state_lock:
            if self.running:
                return
            if self._proc is not None:
                self.restarts += 1
            env = dict(os.environ if self._env is None else self._env)
            app_root = str(Path(__file__).resolve().parents[2])
            env["PYTHONPATH"] = app_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            if self._test_hooks:
                env["HISHO_ENGINE_TEST_HOOKS"] = "1"
            # ggml attaches gdb to print a backtrace on abort: slow, and noise in the log. Opt in to get it.
            if env.get("HISHO_ENGINE_BACKTRACE") != "1":
                env.setdefault("GGML_NO_BACKTRACE", "1")
            _rotate(paths.engine_log_file())
            stderr_file = paths.engine_log_file().open("ab")
            try:
                self._proc = subprocess.Popen(
                    engine_command(),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr_file, env=_watch_parent(env),
                    bufsize=0,
                    start_new_session=True,  # a Ctrl+C in the terminal reaches the client only; it cancels
                )
            finally:
                stderr_file.close()
            self._stdin = self._proc.stdin
            self._loaded_in_proc = None
            self._reader = threading.Thread(
                target=self._read_loop, args=(self._proc,), name="hisho-engine-reader", daemon=True
            )
            self._reader.start()
        info = self._call("hello", {"protocol": PROTOCOL_VERSION}, restart=False)
        self.engine_info = info
        log.info("engine started: pid %s, llama-cpp-python %s", info.get("pid"), info.get("llama_cpp_version"))

    def close(self, timeout: float = 5.0) -> None:
        """Ask the engine to exit; kill it if it does not within ``timeout``."""
        with self._state_lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                try:
                    self._send({"id": next(self._ids), "op": "shutdown"})
                except OSError:
                    pass
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("engine did not exit in %.1fs; killing it", timeout)
                    proc.kill()
                    proc.wait()
            self._proc = None
            self._loaded_in_proc = None

    def kill(self) -> None:
        """Kill the engine at once (tests, and the GUI's last resort)."""
        with self._state_lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- requests --------------------------------------------------------------------------------

    def load(self, params: LoadParams) -> dict[str, Any]:
        """Load a model (replacing any loaded one). Raises EngineError(kind="model_load") on a bad file."""
        self._load_params = params
        self._ensure_started()
        return self._do_load(params)

    def unload(self) -> None:
        self._load_params = None
        if self.running:
            self._call("unload", {})
            self._loaded_in_proc = None

    def generate(
        self,
        *,
        messages: list[dict[str, str]] | None = None,
        prompt: str | None = None,
        tokens: list[int] | None = None,
        sampling: Sampling | None = None,
        seq: int = 0,
        **extra: Any,
    ) -> Stream:
        """Start a reply. Exactly one of messages (chat-templated), prompt (raw text) or tokens."""
        params: dict[str, Any] = {"seq": seq, "sampling": (sampling or Sampling()).to_dict(), **extra}
        if messages is not None:
            params["messages"] = messages
        if prompt is not None:
            params["prompt"] = prompt
        if tokens is not None:
            params["tokens"] = tokens
        return self.stream("generate", params)

    def tokenize(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None,
                 add_generation_prompt: bool = True, special: bool = False) -> list[int]:
        params: dict[str, Any] = {"add_generation_prompt": add_generation_prompt, "special": special}
        if messages is not None:
            params["messages"] = messages
        else:
            params["text"] = text or ""
        return list(self.call("tokenize", params)["tokens"])

    def count_tokens(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None) -> int:
        return len(self.tokenize(text, messages=messages))

    def detokenize(self, tokens: list[int]) -> str:
        return str(self.call("detokenize", {"tokens": tokens})["text"])

    def cancel(self, req_id: int) -> None:
        """Stop request ``req_id``; harmless if it already ended or the engine is gone."""
        if not self.running:
            return
        try:
            self._send({"id": next(self._ids), "op": "cancel", "target": req_id})
        except OSError:
            pass

    def call(self, op: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one non-streaming request and return its result (generic: later features add ops)."""
        self._ensure_ready()
        return self._call(op, params or {})

    def stream(self, op: str, params: dict[str, Any]) -> Stream:
        if op not in STREAMING_OPS:
            raise ValueError(f"{op} is not a streaming op")
        self._ensure_ready()
        req_id, events = self._submit(op, params)
        return Stream(self, req_id, events)

    # ----- internals -------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if not self.running:
            self.start()

    def _ensure_ready(self) -> None:
        """Start the engine if needed and re-load the last model after a crash."""
        self._ensure_started()
        params = self._load_params
        if params is not None and self._loaded_in_proc != params:
            log.info("re-loading %s into engine pid %s", params.model_path, self.pid)
            self._do_load(params)

    def _do_load(self, params: LoadParams) -> dict[str, Any]:
        info = self._call("load", params.to_dict())
        self._loaded_in_proc = params
        self._load_info = info
        return info

    def _call(self, op: str, params: dict[str, Any], restart: bool = True) -> dict[str, Any]:
        if restart:
            self._ensure_started()
        req_id, events = self._submit(op, params)
        try:
            ev = events.get()
        finally:
            self._forget(req_id)
        if ev.get("ev") == "error":
            raise _as_error(ev)
        result: dict[str, Any] = ev.get("result", {})
        return result

    def _submit(self, op: str, params: dict[str, Any]) -> tuple[int, queue.Queue[Any]]:
        req_id = next(self._ids)
        events: queue.Queue[Any] = queue.Queue()
        with self._state_lock:
            if not self.running:
                raise EngineCrashed(self._death_message(), self._proc.returncode if self._proc else None)
            self._pending[req_id] = events
        try:
            self._send({"id": req_id, "op": op, **params})
        except OSError:
            self._forget(req_id)
            raise EngineCrashed(self._death_message()) from None
        return req_id, events

    def _send(self, message: dict[str, Any]) -> None:
        with self._write_lock:
            stdin = self._stdin
            if stdin is None:
                raise OSError("engine not started")
            stdin.write(encode(message))

    def _forget(self, req_id: int) -> None:
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
            if self._proc is proc:
                self._loaded_in_proc = None
            pending = list(self._pending.values()) if self._proc is proc else []
            if self._proc is proc:
                self._pending.clear()
        if pending:
            message = self._death_message(code)
            log.error("%s", message)
            for events in pending:
                events.put({"ev": "error", "kind": "crashed", "message": message, "exit_code": code})

    def _death_message(self, code: int | None = None) -> str:
        if code is None and self._proc is not None:
            code = self._proc.poll()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        tail = _log_tail(paths.engine_log_file())
        detail = f" (last engine log line: {tail})" if tail else ""
        return f"the engine process stopped unexpectedly ({how}){detail}"


def _watch_parent(env: dict[str, str]) -> dict[str, str]:
    """Tell the engine who its parent is, so it exits the moment the parent is gone (hisho.engine.server
    ``watch_parent``). PR_SET_PDEATHSIG fires when the *thread* that started the child exits, so the engine only
    asks for it when that thread is the main thread; a watchdog covers the rest (issue 16)."""
    env["HISHO_PARENT_PID"] = str(os.getpid())
    env["HISHO_PDEATHSIG"] = "1" if threading.current_thread() is threading.main_thread() else "0"
    return env


def engine_command() -> list[str]:
    """How to start the engine: ``python -m hisho.engine``, or the frozen bundle's own executable."""
    if getattr(sys, "frozen", False):
        return [sys.executable, ENGINE_FLAG]
    return [sys.executable, "-m", "hisho.engine"]


def _rotate(path: Path, limit: int = 8 * 1024 * 1024) -> None:
    """Keep one previous engine log; llama.cpp logs every load at length."""
    try:
        if path.stat().st_size > limit:
            os.replace(path, path.with_suffix(path.suffix + ".1"))
    except OSError:
        pass


_TELLING = ("GGML_ASSERT", "error", "Error", "abort", "failed", "Traceback")


def _log_tail(path: Path) -> str:
    """The most telling of the engine log's last lines: an assert or error line if there is one."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 8192))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines[-40:]):
        if any(word in line for word in _TELLING):
            return line[:300]
    return lines[-1][:300] if lines else ""
