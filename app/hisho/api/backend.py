"""Between the event loop and the engine: each request's token stream is read on its own worker thread and
handed to the loop through an ``asyncio.Queue``. No Qt.

Rules of use:
- ``Backend(engine, model, ...)``: two callables (the engine, the model's ``ModelName``), asked again for each request, so the API follows a model
  switch or a remote connect the moment the app makes it. An engine with ``Capability.SERVE`` runs requests
  in its serving batch as parallel sequences; one without it gets one reply at a time through ``generate``.
- ``open(job, key)`` is awaited on the event loop; it checks the request against ``Limits`` and the key's place
  in line (``Admission``), and returns once the engine answered with something (a first token, a finished
  reply or an error), so a refused request becomes an HTTP error before any byte of a 200 stream is sent.
  While the engine works on something sent before the request (a summary, the window's reply, a model load)
  the request waits in ``waits`` (``/health`` shows it) for at most ``Limits.max_wait_s``, then is refused
  with 503 ``engine_busy`` and ``Retry-After`` (``hisho.api.waits``). ``Reply.close()`` cancels the engine's
  sequence at once (client gone); the request's wall-clock limit does the same by itself (``Reply.timed_out``).
- ``busy`` counts requests the engine has not ended yet (the window shows it, ``/health`` reports it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from hisho.api import tooling, waits
from hisho.api.cache import PromptCache
from hisho.api.limits import Admission, Limits
from hisho.api.shapes import ApiError, Job
from hisho.core.engine.ops import Serve
from hisho.core.engine.protocol import ErrorKind, GenerationResult
from hisho.core.engine.seam import Capability, Engine, TokenStream
from hisho.core.errors import EngineCrashed, EngineError
from hisho.core.formats.markers import reading_text
from hisho.core.models.names import ModelName
from hisho.core.stored_responses import StoredResponses

log = logging.getLogger("hisho.api")

_END = object()
POLL_S = 0.1  # how often a waiting request looks at what the engine works on


def api_error(exc: BaseException, prompt_param: str = "messages", schema_param: str | None = None) -> ApiError:
    """What a client sees for an engine failure: never a traceback. ``prompt_param``: the field a refused
    prompt is named by ("messages" for chat, "prompt" for completions)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, EngineCrashed):
        return ApiError(503, f"the engine stopped while answering ({exc}); the next request restarts it",
                        type_="server_error", code="engine_crashed")
    if isinstance(exc, EngineError):
        if exc.kind is ErrorKind.CONTEXT_FULL:
            return ApiError(400, str(exc), code="context_length_exceeded", param=prompt_param)
        if exc.kind is ErrorKind.BAD_REQUEST:
            # A schema the grammar converter could not take names the field it came in (``schema_param``).
            grammar = "grammar" in str(exc) or "JSON schema" in str(exc)
            return ApiError(400, str(exc), param=schema_param if grammar else None,
                            code="invalid_schema" if grammar and schema_param else None)
        if exc.kind is ErrorKind.NOT_LOADED:
            return ApiError(503, str(exc), type_="server_error", code="model_not_loaded")
        if exc.kind is ErrorKind.CLOSED:
            return ApiError(503, "the server is shutting down", type_="server_error", code="engine_closed")
        return ApiError(500, str(exc), type_="server_error")
    log.error("API request failed: %s: %s", type(exc).__name__, exc)
    return ApiError(500, f"internal error ({type(exc).__name__}); details in the log", type_="server_error")


def context_of(engine: Engine) -> int:
    """Tokens one sequence holds, prompt and reply together (0: the engine does not say)."""
    info = engine.load_info
    return int(info.get("n_ctx_seq") or info.get("n_ctx") or 0)


def slots_of(engine: Engine) -> int:
    """Requests the engine runs at once: its serving batch's sequences (in a unified KV cache the last one is
    the KV saves' scratch sequence), else one."""
    if Capability.SERVE.value not in engine.capabilities:
        return 1
    params = engine.load_params
    n = int(engine.load_info.get("n_seq_max") or (params.n_seq_max if params else 1))
    unified = params.kv_unified if params is not None else True
    return max(1, n - 1) if unified and n > 1 else max(1, n)


def timeout_error() -> ApiError:
    return ApiError(504, "the request ran past this server's time limit and was cancelled (Settings → API)",
                    type_="server_error", code="request_timeout")


def _cancel_started(started: asyncio.Future[TokenStream]) -> None:
    """A stream sent for a request that is gone: cancelled, and read to its end on a thread of its own, so the
    engine's client forgets it (nothing would wait behind it)."""
    if not started.cancelled() and started.exception() is None:
        stream = started.result()
        stream.cancel()
        threading.Thread(target=_drain, args=(stream,), name="hisho-api-drain", daemon=True).start()


def _drain(stream: TokenStream) -> None:
    try:
        for _ in stream:
            pass
    except Exception as exc:  # it was cancelled: how it ended matters to nobody
        log.debug("a cancelled API stream ended with %s", exc)


class Thought(str):
    """A piece of a reasoning model's thinking in a reply's items (``reasoning_content``, never ``content``)."""


class Reply:
    """One request's engine stream, read on a worker thread. Iterate (async) for token texts; ``result`` when
    it ends, or ``error``."""

    def __init__(self, stream: TokenStream, loop: asyncio.AbstractEventLoop, on_end: Callable[[Reply], None],
                 model_id: str = "", prompt_param: str = "messages", raw: bool = False,
                 schema_param: str | None = None) -> None:
        self.stream = stream
        self.raw = raw  # items are the tokens' raw pieces (special tokens shown), for a call parser
        self.model_id = model_id          # the model that answers (what the response names)
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.result: GenerationResult | None = None
        self.error: ApiError | None = None
        self.timed_out = False
        self._prompt_param = prompt_param
        self._schema_param = schema_param
        self._loop = loop
        self._on_end = on_end
        self._timer: asyncio.TimerHandle | None = None
        self._first: asyncio.Future[None] = loop.create_future()
        threading.Thread(target=self._read, name="hisho-api-reply", daemon=True).start()

    def limit(self, seconds: float) -> None:
        """Cancel the engine's work after ``seconds`` whatever the client does (the loop's thread)."""
        self._timer = self._loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.timed_out = True
        self.stream.cancel()

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._deliver, item)
        except RuntimeError:  # the server stopped (its loop closed) before the engine ended this reply: nobody reads
            self.stream.cancel()

    def _deliver(self, item: Any) -> None:
        if not self._first.done():
            self._first.set_result(None)
        if item is _END and self._timer is not None:
            self._timer.cancel()  # a finished reply is not held for the rest of its time limit
            self._timer = None
        self.queue.put_nowait(item)

    def _read(self) -> None:
        # A reasoning model's stream is split by the engine client: ``text`` is the answer and ``reasoning``
        # the thinking (sent apart, as ``reasoning_content``). A call parser reads the answer's raw text, or
        # for harmony the whole raw reply (its calls and channels are markers the parser reads itself).
        whole_raw = getattr(self.stream, "reasoning_kind", "") == "harmony"
        try:
            for ev in self.stream:
                thought = ev.get("reasoning")
                if thought:
                    self._put(Thought(str(thought)))
                split = "reasoning" in ev  # then "piece" is what the splitter read: already ``reading_text``
                if self.raw and split and whole_raw:
                    self._put(str(ev.get("piece", "")))
                elif self.raw and not split:
                    self._put(reading_text(ev))  # markers shown, other control tokens dropped
                else:
                    self._put(str(ev.get("text", "")))
            self.result = self.stream.result
        except Exception as exc:  # every engine failure becomes an OpenAI-shaped error
            self.error = api_error(exc, self._prompt_param, self._schema_param)
        finally:
            if self.timed_out and self.error is None and (self.result is None
                                                          or self.result.stop_reason == "cancelled"):
                self.error = timeout_error()
            self._on_end(self)
            self._put(_END)

    @property
    def first_event(self) -> asyncio.Future[None]:
        """Done at the first token or the end (await ``started`` instead to wait for it)."""
        return self._first

    async def started(self) -> None:
        """Wait for the first token or the end (whichever comes first)."""
        await self._first

    async def texts(self) -> AsyncIterator[str]:
        """The answer's texts (a reasoning model's thinking is left out: ``items`` has it)."""
        async for item in self.items():
            if not isinstance(item, Thought):
                yield item

    async def items(self) -> AsyncIterator[str]:
        """Answer texts (``str``) and reasoning texts (``Thought``), in the order the model wrote them."""
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            if item:
                yield item

    @property
    def raw_answer(self) -> bool:
        """Whether the texts are split from a reasoning reply (the call parser reads them, not ``raw_text``)."""
        return getattr(self.stream, "reasoning_kind", "") not in ("", "none", "harmony")

    def close(self) -> None:
        """Cancel the engine's sequence (harmless after the end)."""
        self.stream.cancel()


@dataclass(frozen=True)
class Served:
    """One request the engine ran, for the window's list of recent requests."""

    at: float                 # when it ended (time.time())
    protocol: str             # its wire format (``Job.wire``)
    prompt_tokens: int
    cached_tokens: int        # of the prompt, tokens that came from the cache (RAM or disk) instead of being read
    completion_tokens: int
    seconds: float            # from admission to the end
    outcome: str              # "done", "cancelled" or "failed"


RECENT = 50  # requests ``Backend.recent`` keeps


class Backend:
    def __init__(self, engine: Callable[[], Engine], model: Callable[[], ModelName], defaults: dict[str, Any],
                 max_tokens: int, cache: PromptCache | None = None, limits: Limits | None = None) -> None:
        self._engine = engine
        self._model = model
        self.cache = cache  # the disk prompt cache (chat requests on an engine with SERVE and KV_STATE)
        self.defaults = defaults
        self.max_tokens = max_tokens
        self.limits = limits or Limits()
        self.admission = Admission(self.limits.max_queued)
        self.waits = waits.WaitQueue(self.limits.max_wait_s, on_change=lambda _n: self._queue_changed())
        self._busy = 0
        self.cancelled = 0  # requests whose engine sequence was cancelled (a client went away, or its time ran out)
        self.timed_out = 0  # of those, the ones cancelled by the time limit
        self._lock = threading.Lock()
        self.recent: deque[Served] = deque(maxlen=RECENT)  # newest last (any thread appends; read a copy)
        self.on_busy: Callable[[int], None] | None = None  # the window's indicator (any thread)
        self.on_result: Callable[[GenerationResult], None] | None = None  # each finished request (bench)
        # (running, waiting) after each change (any thread): the app's queue (``AppState.api_queue``, set by
        # api/launch.py for the composition root).
        self.on_queue: Callable[[int, int], None] | None = None
        # Responses kept for ``previous_response_id`` (api/responses.py; set by api/launch.py; None: none kept).
        self.responses: StoredResponses | None = None

    @property
    def engine(self) -> Engine:
        return self._engine()

    @property
    def model(self) -> ModelName:
        return self._model()

    @property
    def model_id(self) -> str:
        return self._model().id

    @property
    def busy(self) -> int:
        return self._busy

    def _count(self, delta: int) -> None:
        with self._lock:
            self._busy += delta
            n = self._busy
        if self.on_busy is not None:
            self.on_busy(n)
        self._queue_changed()

    def _queue_changed(self) -> None:
        """Tell ``on_queue`` how many requests the engine is on and how many wait behind other work (one
        admitted but not yet sent waits too: it is not counted busy yet)."""
        if self.on_queue is not None:
            waiting = self.waits.waiting
            self.on_queue(max(0, self._busy - waiting), waiting)

    def _start(self, engine: Engine, job: Job, n_ctx_seq: int) -> TokenStream:
        fields: dict[str, Any] = {"messages": job.messages} if job.kind == "chat" else {"prompt": job.prompt}
        template: dict[str, Any] = {"tools": job.extras.tools, "template_kwargs": job.extras.template_kwargs}
        serve = getattr(engine, "serve", None)
        if Capability.SERVE.value in engine.capabilities and serve is not None:
            extra: dict[str, Any] = {"max_prompt": self.limits.prompt_tokens(n_ctx_seq),
                                     "test_hooks": job.extras.test_hooks}
            if job.kind == "chat":
                fields.update(template)
            # Tools count as prompt: an agent resends the same system prompt and tools with every request.
            if self.cache is not None and job.kind == "chat" and self.cache.worth_it(job.messages or [],
                                                                                      job.extras.tools):
                tokens = engine.tokenize(messages=job.messages, tools=job.extras.tools,
                                         template_kwargs=job.extras.template_kwargs)
                plan = self.cache.plan(tokens)
                # The messages ride along: after the reply the engine renders its turn from them, so the save keeps
                # the reply as the next request renders it (engine/decode/replykeep.py).
                fields = {"tokens": tokens, "messages": job.messages, **template}
                extra.update(chunks=plan.chunks or None, keep=plan.keep, save_dir=plan.save_dir)
                self.cache.used(plan)
            stream: TokenStream = serve(Serve(sampling=job.sampling, **fields, **extra))
            return stream
        return engine.generate(sampling=job.sampling, **fields)

    def _ended(self, reply: Reply, key: str, since: float, job: Job) -> None:
        self.admission.leave(key, since)
        result = reply.result
        outcome = "failed" if reply.error is not None or result is None else \
            "cancelled" if result.stop_reason == "cancelled" else "done"
        self.recent.append(Served(time.time(), job.wire, result.prompt_tokens if result else 0,
                                  result.cached_tokens if result else 0, result.completion_tokens if result else 0,
                                  time.monotonic() - since, outcome))
        if reply.result is not None and self.on_result is not None:
            self.on_result(reply.result)
        if reply.result is not None and self.cache is not None:
            self.cache.record(reply.result.extra)
        if reply.result is not None and reply.result.stop_reason == "cancelled":
            with self._lock:
                self.cancelled += 1
                self.timed_out += reply.timed_out
        self._count(-1)

    async def open(self, job: Job, key: str = "") -> Reply:
        engine, name = self.engine, self.model  # resolved once per request: the one running now
        model = name.id
        # /v1/models lists the id; a request may name the model by any of its aliases (core.models.names)
        if not name.accepts(job.model):
            raise ApiError(404, f"the model '{job.model}' does not exist; this server has '{model}'",
                           param="model", code="model_not_found")
        n_ctx_seq = context_of(engine)
        self.limits.check(job, n_ctx_seq)
        if job.kind == "chat":
            extras = job.extras
            if (extras.tools or extras.json_output or extras.template_kwargs) and \
                    Capability.SERVE.value not in engine.capabilities:
                raise ApiError(400, "tools, response_format and chat_template_kwargs need the local engine; the "
                                    "connected server does not take them through this API", code="not_supported")
            job.sampling = tooling.apply(extras, job.sampling, engine.load_info)
        since = self.admission.enter(key, slots_of(engine))
        ticket = self.waits.enter()
        try:
            return await self._send(engine, job, n_ctx_seq, model, key, since, ticket)
        finally:
            self.waits.leave(ticket)

    async def _send(self, engine: Engine, job: Job, n_ctx_seq: int, model: str, key: str, since: float,
                    ticket: int) -> Reply:
        loop = asyncio.get_running_loop()
        limit = self.limits.request_timeout_s  # counted from here: sending it (a tokenize on a busy engine) too
        started = loop.run_in_executor(None, self._start, engine, job, n_ctx_seq)
        try:
            # Shielded (asyncio.wait): a client that leaves (or a time limit passed) while the request is being
            # sent must still have the stream it gets cancelled, or the engine would answer nobody.
            await self._until(started, engine, ticket, None, since + limit)
            stream = started.result()
        except BaseException as exc:
            self.admission.leave(key, since)
            if isinstance(exc, (asyncio.CancelledError, TimeoutError, ApiError)):
                started.add_done_callback(_cancel_started)
            if isinstance(exc, asyncio.CancelledError):
                raise
            if isinstance(exc, TimeoutError):
                raise timeout_error() from None
            raise api_error(exc, job.prompt_param, job.extras.schema_param) from None
        self._count(1)
        reply = Reply(stream, loop, lambda r: self._ended(r, key, since, job), model, job.prompt_param,
                      raw=job.extras.family is not None, schema_param=job.extras.schema_param)
        reply.limit(max(0.0, limit - (time.monotonic() - since)))
        try:
            # Until the engine is on it (nothing sent before it left), the wait is the queue's, bounded.
            await self._until(reply.first_event, engine, ticket, getattr(stream, "id", None), math.inf, settle=True)
            await reply.started()
        except BaseException:
            reply.close()  # its reader thread ends it (and frees its place) once the engine gets to it
            raise
        return reply

    async def _until(self, fut: asyncio.Future[Any], engine: Engine, ticket: int, before: int | None,
                     deadline: float, settle: bool = False) -> None:
        """Wait for ``fut`` (never cancelling it) until ``deadline`` (then TimeoutError). While the engine works on
        something sent before request ``before``, the wait is bounded by ``max_wait_s`` from the ticket on (then
        ``busy_error``). ``settle``: return as soon as nothing is ahead (the rest is the engine's work on it)."""
        while not fut.done():
            work = waits.behind(engine, before)
            if work is None and settle:
                self.waits.leave(ticket)
                return
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError
            waited, bound = self.waits.waited(ticket), self.waits.max_wait_s
            if work is not None and waited >= bound:
                self.waits.refused += 1
                what = waits.ACTIVITY.get(work[0], work[0])
                log.info("API request refused after %.1f s behind the engine's %s", waited, what)
                raise waits.busy_error(what, waited, waits.retry_after(engine, work, bound))
            step = min(POLL_S, deadline - now, bound - waited if work is not None else POLL_S)
            await asyncio.wait({fut}, timeout=max(0.001, step))
