"""The parent side of the engine process: start it, talk to it, restart it after a crash.

``EngineClient`` is the local implementation of ``hisho.core.engine.seam.Engine``: the one way the CLI and the GUI
reach llama.cpp (the composition root, ``hisho.core.services``, makes it). The child and its channel (start,
route events to the request that asked, fail requests in flight when it dies) are ``hisho.core.engine.process``;
this class adds the typed ops, the ``PROTOCOL_VERSION`` check at ``hello`` and re-loading after a crash. It is
thread-safe: any thread may issue a request. The engine itself runs one request at a time, in order.

A native abort inside llama.cpp kills only the child. Every request in flight then ends with ``EngineCrashed``;
the next request starts a fresh child and re-loads the last ``LoadParams`` before running. ``close()`` ends every
request in flight with ``EngineClosed`` at once: no wait on the engine outlives it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hisho.core.engine.ops import (
    REQUESTS,
    BatchGenerate,
    Detokenize,
    Generate,
    Hello,
    KvFlush,
    KvInfo,
    Load,
    Prefill,
    Request,
    SeqRm,
    Serve,
    StateLoad,
    StateSave,
    Tokenize,
    Unload,
)
from hisho.core.engine.process import EngineProcess
from hisho.core.engine.protocol import (
    PROTOCOL_VERSION,
    ErrorKind,
    LoadParams,
    Progress,
    ProtocolMismatch,
    Sampling,
    check_protocol,
)
from hisho.core.engine.seam import Capability
from hisho.core.engine.stream import Stream, as_error
from hisho.core.errors import EngineError, LoadStopped
from hisho.core.formats.reasoning import ReasoningFormat

log = logging.getLogger("hisho.engine")


class EngineClient:
    """Owns the engine child process. Create one per app; ``close()`` it at exit."""

    def __init__(self, *, env: dict[str, str] | None = None, test_hooks: bool = False,
                 python: str | None = None) -> None:
        # ``python``: the engine child runs under another interpreter (``hisho bench decode --cpu-python``).
        self._process = EngineProcess(env=env, test_hooks=test_hooks, python=python)
        self._load_params: LoadParams | None = None
        self._loaded: tuple[int, LoadParams] | None = None  # (EngineProcess.generation, what it loaded)
        self._load_info: dict[str, Any] = {}
        self._closing = False   # ``begin_close``: an engine that ends is not started again
        self.engine_info: dict[str, Any] = {}
        # What the engine's thread governors chose and why, as of the last reply (docs/threads.md); one dict
        # replaced whole, so readers on other threads see an old or a new one, never half of one.
        self.threads: dict[str, Any] = {}
        # Requests sent to the engine so far (each a round trip through the pipe): ``hisho bench resume``
        # reports how many one chat send takes (``send_round_trips``).
        self.requests = 0
        # The latest "progress" of each request in flight (request id -> Progress), for waits that show how
        # far the engine is in reading a prompt (the window's "Reading your message · 37 %").
        self._progress: dict[int, Progress] = {}
        self._load_id: int | None = None   # the load request in flight, for ``cancel_load`` (any thread)
        # The load being sent or run (any thread): a request sent meanwhile runs after it (the engine keeps the
        # order), so it must not send the same load again (an API request during the window's model switch).
        self._load_pending: LoadParams | None = None
        # Every request sent and not yet ended (id -> (op, when it was sent)): what the engine is doing, and what
        # a request sent now waits behind (``activity``; the API's queue, hisho.api.waits).
        self._in_flight: dict[int, tuple[str, float]] = {}
        self._load_stopped = False

    # ----- process lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process.running

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def restarts(self) -> int:
        """How often the engine was started again after it died."""
        return self._process.restarts

    @property
    def load_info(self) -> dict[str, Any]:
        """What the last successful load reported (n_ctx, n_vocab, chat template presence, timings)."""
        return dict(self._load_info)

    @property
    def load_params(self) -> LoadParams | None:
        return self._load_params

    @property
    def reasoning(self) -> ReasoningFormat:
        """How the loaded model reasons (reported by the engine at load; none before a load)."""
        return ReasoningFormat.from_dict(self._load_info.get("reasoning"))

    def start(self) -> None:
        if not self._process.start():
            return
        info = self._call(Hello(protocol=PROTOCOL_VERSION), restart=False)
        try:
            check_protocol(info.get("protocol"), "engine")
        except ProtocolMismatch as exc:
            self.close()
            raise EngineError(ErrorKind.PROTOCOL, str(exc)) from None
        self.engine_info = info
        log.info("engine started: pid %s, llama-cpp-python %s", info.get("pid"), info.get("llama_cpp_version"))

    def close(self, timeout: float = 5.0) -> None:
        """Ask the engine to exit; kill it if it does not within ``timeout``."""
        self._process.close(timeout)

    def kill(self) -> None:
        """Kill the engine at once (tests, and the GUI's last resort)."""
        self._process.kill()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- requests --------------------------------------------------------------------------------

    def load(self, params: LoadParams) -> dict[str, Any]:
        """Load a model (replacing any loaded one). Raises EngineError(kind=MODEL_LOAD) on a bad file."""
        self._load_pending = params
        self._load_params = params
        try:
            self._ensure_started()
        except BaseException:
            self._load_pending = None
            raise
        return self._do_load(params)

    def unload(self) -> None:
        self._load_params = None
        if self.running:
            self._call(Unload())
            self._loaded = None

    def generate(
        self,
        *,
        messages: list[dict[str, str]] | None = None,
        prompt: str | None = None,
        tokens: list[int] | None = None,
        sampling: Sampling | None = None,
        seq: int = 0,
        test_hooks: dict[str, Any] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> Stream:
        """Start a reply. Exactly one of messages (chat-templated), prompt (raw text) or tokens. ``test_hooks``
        (tests, with ``EngineClient(test_hooks=True)``): ``{"hold_after_tokens": N}``, see ``release_hold``.
        ``template_kwargs``: the template's variables (``enable_thinking``): they render ``messages`` and tell
        how the reply begins (thinking off), also for ``tokens`` rendered with them."""
        return self.stream(Generate(messages=messages, prompt=prompt, tokens=tokens, seq=seq,
                                    sampling=sampling or Sampling(), test_hooks=test_hooks,
                                    template_kwargs=template_kwargs))

    def batch(self, request: BatchGenerate) -> Stream:
        """Several prompts as parallel sequences; one "token" event per finished item."""
        return self.stream(request)

    def serve(self, request: Serve) -> Stream:
        """An API request: joins the engine's serving batch at its next step (Capability.SERVE)."""
        return self.stream(request)

    def tokenize(self, text: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 add_generation_prompt: bool = True, special: bool = False,
                 tools: list[dict[str, Any]] | None = None, template_kwargs: dict[str, Any] | None = None,
                 ) -> list[int]:
        req = Tokenize(messages=messages, text=None if messages is not None else (text or ""),
                       add_generation_prompt=add_generation_prompt, special=special, tools=tools,
                       template_kwargs=template_kwargs)
        return list(self.call(req)["tokens"])

    def count_tokens(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None) -> int:
        return len(self.tokenize(text, messages=messages))

    def detokenize(self, tokens: list[int]) -> str:
        return str(self.call(Detokenize(tokens=tokens))["text"])

    def seq_rm(self, seq: int = 0, start: int = 0) -> int:
        """Drop sequence ``seq`` from position ``start`` on; returns the tokens it still holds."""
        return int(self.call(SeqRm(seq=seq, start=start))["held"])

    def prefill(self, tokens: list[int], seq: int = 0) -> dict[str, Any]:
        """Evaluate ``tokens`` into ``seq`` without sampling (keeps the common prefix it already holds)."""
        return self.call(Prefill(tokens=list(tokens), seq=seq))

    def kv_info(self, prepare_bytes: int = 0) -> dict[str, Any]:
        """The state fingerprint and buffer facts; ``prepare_bytes`` allocates the restore buffer now."""
        return self.call(KvInfo(prepare_bytes=prepare_bytes))

    def state_save(self, request: StateSave) -> Stream:
        """Save a sequence's KV (streaming: "done" once the files are written)."""
        return self.stream(request)

    def state_load(self, request: StateLoad) -> dict[str, Any]:
        return self.call(request)

    def kv_flush(self, timeout: float = 30.0) -> bool:
        return bool(self.call(KvFlush(timeout=timeout)).get("idle", False))

    @property
    def capabilities(self) -> frozenset[str]:
        """What this engine can do beyond generate/tokenize (``hisho.core.engine.seam.Capability``)."""
        return frozenset(c.value for c in Capability)

    def progress(self) -> Progress | None:
        """How far the request the engine is reading a prompt for is (the latest "progress" of a request in
        flight), or None when no request in flight has reported any. Any thread."""
        current = list(self._progress.values())
        return current[-1] if current else None

    def cancel(self, req_id: int) -> None:
        """Stop request ``req_id``; harmless if it already ended or the engine is gone."""
        self._process.cancel(req_id)

    def activity(self) -> list[tuple[int, str, float]]:
        """The requests sent and not ended yet, oldest first: (id, op, ``time.monotonic()`` when sent). The
        engine runs them in that order (a serving batch lets quick ops and the window's turns in between its
        steps), so the first is what it works on now. Any thread."""
        return sorted((rid, op, at) for rid, (op, at) in dict(self._in_flight).items())

    def release_hold(self) -> None:
        """Test hook: the reply held by ``hold_after_tokens`` goes on (a release counts from that reply's start
        on). A reply started with that hook is held after its N-th token until it is cancelled or released, so
        a test acts while it is surely mid-way (a fast machine otherwise finishes it before the test looks)."""
        self._process.release()

    def call(self, request: Request | str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one non-streaming request and return its result. ``call("op", {...})`` is the same as the op's
        record (``hisho.core.engine.ops.REQUESTS``) built from those fields: checked here, not in the engine."""
        req = _typed(request, params)
        if req.streaming:
            raise ValueError(f"{req.op} is a streaming op: use stream()")
        self._ensure_ready()
        self.requests += 1
        return self._call(req)

    def stream(self, request: Request | str, params: dict[str, Any] | None = None) -> Stream:
        req = _typed(request, params)
        if not req.streaming:
            raise ValueError(f"{req.op} is not a streaming op")
        self._ensure_ready()
        self.requests += 1
        req_id, events = self._process.submit(req)
        self._in_flight[req_id] = (req.op, time.monotonic())
        wire = req.to_wire()
        return Stream(self, req_id, events, req.op, self.reasoning, _thinking_on(wire),
                      chat=wire.get("prompt") is None)

    # ----- internals -------------------------------------------------------------------------------

    def begin_close(self) -> None:
        """The app is quitting (any thread): requests in flight go on, but an engine that exits or is killed
        from now on is not started again (a late job would restart it and re-load the model during the quit)."""
        self._closing = True

    def _ensure_started(self) -> None:
        if not self.running:
            if self._closing:
                raise EngineError(ErrorKind.CLOSED, "Hisho is closing: the engine is not started again")
            self.start()

    def _ensure_ready(self) -> None:
        """Start the engine if needed and re-load the last model after a crash."""
        self._ensure_started()
        params = self._load_params
        if params is not None and params is not self._load_pending and \
                self._loaded != (self._process.generation, params):
            log.info("re-loading %s into engine pid %s", params.model_path, self.pid)
            self._do_load(params)

    def cancel_load(self) -> bool:
        """Stop the model load in flight, if any (any thread): the engine's load progress callback sees the
        cancel and llama.cpp gives up reading the file. ``load`` then raises ``LoadStopped`` and nothing is
        loaded (the engine freed the previous model before it began). False when no load runs."""
        req_id = self._load_id
        if req_id is None:
            return False
        self._load_stopped = True
        self._process.cancel(req_id)
        return True

    def _do_load(self, params: LoadParams) -> dict[str, Any]:
        generation = self._process.generation
        self._load_stopped = False
        self._load_pending = params
        try:
            try:
                info = self._call(Load(params=params))
            except EngineError as exc:
                if self._load_stopped and exc.kind is ErrorKind.MODEL_LOAD:
                    # Stopped on purpose: the next request must not load the file again behind the user's back.
                    self._load_params, self._loaded = None, None
                    raise LoadStopped(f"the load of {Path(params.model_path).name} was stopped") from None
                raise
            self._loaded = (generation, params)
            self._load_info = info
            return info
        finally:
            if self._load_pending is params:
                self._load_pending = None

    def _call(self, req: Request, restart: bool = True) -> dict[str, Any]:
        if restart:
            self._ensure_started()
        req_id, events = self._process.submit(req)
        self._in_flight[req_id] = (req.op, time.monotonic())
        if req.op == "load":
            self._load_id = req_id
        try:
            ev = events.get()
            while ev.get("ev") == "progress":
                self._progressed(Progress.from_event(ev, req.op))
                ev = events.get()
        finally:
            if self._load_id == req_id:
                self._load_id = None
            self._forget(req_id)
        if ev.get("ev") == "error":
            raise as_error(ev)
        result: dict[str, Any] = ev.get("result", {})
        return result

    def _progressed(self, progress: Progress) -> None:
        self._progress[progress.id] = progress

    def _forget(self, req_id: int) -> None:
        self._progress.pop(req_id, None)
        self._in_flight.pop(req_id, None)
        self._process.forget(req_id)


def _thinking_on(wire: dict[str, Any]) -> bool:
    """False when the request turns a reasoning model's thinking off (its template's ``enable_thinking``)."""
    kwargs = wire.get("template_kwargs") or {}
    return not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)


def _typed(request: Request | str, params: dict[str, Any] | None) -> Request:
    if isinstance(request, Request):
        return request
    kind = REQUESTS.get(request)
    if kind is None:
        raise ValueError(f"unknown engine op {request!r}")
    return kind.from_wire(params or {})
