"""Between the event loop and the engine: each request's token stream is read on its own worker thread and
handed to the loop through an ``asyncio.Queue``. No Qt.

Rules of use:
- ``Backend(engine, model_id, ...)`` wraps an ``Engine`` with ``Capability.SERVE`` (requests join the engine's
  serving batch as parallel sequences); an engine without it gets one reply at a time through ``generate``.
- ``open(job)`` is awaited on the event loop; it returns once the engine answered with something (a queue
  position, a first token, a finished reply or an error), so a refused request becomes an HTTP error before any
  byte of a 200 stream is sent. ``Reply.close()`` cancels the engine's sequence at once (client gone).
- ``busy`` counts requests in flight (the window shows it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from hisho.api.cache import PromptCache
from hisho.api.shapes import ApiError, Job
from hisho.core.engine.ops import Serve
from hisho.core.engine.protocol import ErrorKind, GenerationResult
from hisho.core.engine.seam import Capability, Engine, TokenStream
from hisho.core.errors import EngineCrashed, EngineError

log = logging.getLogger("hisho.api")

_END = object()


def api_error(exc: BaseException) -> ApiError:
    """What a client sees for an engine failure: never a traceback."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, EngineCrashed):
        return ApiError(503, f"the engine stopped while answering ({exc}); the next request restarts it",
                        type_="server_error", code="engine_crashed")
    if isinstance(exc, EngineError):
        if exc.kind is ErrorKind.CONTEXT_FULL:
            return ApiError(400, str(exc), code="context_length_exceeded", param="messages")
        if exc.kind is ErrorKind.BAD_REQUEST:
            return ApiError(400, str(exc))
        if exc.kind is ErrorKind.NOT_LOADED:
            return ApiError(503, str(exc), type_="server_error", code="model_not_loaded")
        return ApiError(500, str(exc), type_="server_error")
    log.error("API request failed: %s: %s", type(exc).__name__, exc)
    return ApiError(500, f"internal error ({type(exc).__name__}); details in the log", type_="server_error")


class Reply:
    """One request's engine stream, read on a worker thread. Iterate (async) for token texts; ``result`` when
    it ends."""

    def __init__(self, stream: TokenStream, loop: asyncio.AbstractEventLoop, on_end: Callable[[Reply], None]) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.result: GenerationResult | None = None
        self.error: ApiError | None = None
        self._loop = loop
        self._on_end = on_end
        self._first: asyncio.Future[None] = loop.create_future()
        threading.Thread(target=self._read, name="hisho-api-reply", daemon=True).start()

    def _put(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._deliver, item)

    def _deliver(self, item: Any) -> None:
        if not self._first.done():
            self._first.set_result(None)
        self.queue.put_nowait(item)

    def _read(self) -> None:
        try:
            for ev in self.stream:
                self._put(str(ev.get("text", "")))
            self.result = self.stream.result
        except Exception as exc:  # every engine failure becomes an OpenAI-shaped error
            self.error = api_error(exc)
        finally:
            self._on_end(self)
            self._put(_END)

    async def started(self) -> None:
        """Wait for the first token or the end (whichever comes first)."""
        await self._first

    async def texts(self) -> AsyncIterator[str]:
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            yield item

    def close(self) -> None:
        """Cancel the engine's sequence (harmless after the end)."""
        self.stream.cancel()


class Backend:
    def __init__(self, engine: Engine, model_id: str, defaults: dict[str, Any], max_tokens: int,
                 cache: PromptCache | None = None) -> None:
        self.engine = engine
        self.cache = cache  # the disk prompt cache (chat requests on an engine with SERVE and KV_STATE)
        self.model_id = model_id
        self.defaults = defaults
        self.max_tokens = max_tokens
        self._busy = 0
        self.cancelled = 0  # requests whose engine sequence was cancelled (a client went away)
        self._lock = threading.Lock()
        self.on_busy: Callable[[int], None] | None = None  # the window's indicator (any thread)
        self.on_result: Callable[[GenerationResult], None] | None = None  # each finished request (bench)

    @property
    def busy(self) -> int:
        return self._busy

    def _count(self, delta: int) -> None:
        with self._lock:
            self._busy += delta
            n = self._busy
        if self.on_busy is not None:
            self.on_busy(n)

    def _start(self, job: Job) -> TokenStream:
        fields: dict[str, Any] = {"messages": job.messages} if job.kind == "chat" else {"prompt": job.prompt}
        serve = getattr(self.engine, "serve", None)
        if Capability.SERVE.value in self.engine.capabilities and serve is not None:
            extra: dict[str, Any] = {}
            if self.cache is not None and job.kind == "chat" and self.cache.worth_it(job.messages or []):
                tokens = self.engine.tokenize(messages=job.messages)
                plan = self.cache.plan(tokens)
                fields = {"tokens": tokens}
                extra = {"chunks": plan.chunks or None, "keep": plan.keep, "save_dir": plan.save_dir}
                self.cache.used(plan)
            stream: TokenStream = serve(Serve(sampling=job.sampling, **fields, **extra))
            return stream
        return self.engine.generate(sampling=job.sampling, **fields)

    def _ended(self, reply: Reply) -> None:
        if reply.result is not None and self.on_result is not None:
            self.on_result(reply.result)
        if reply.result is not None and self.cache is not None:
            self.cache.record(reply.result.extra)
        if reply.result is not None and reply.result.stop_reason == "cancelled":
            with self._lock:
                self.cancelled += 1
        self._count(-1)

    async def open(self, job: Job) -> Reply:
        if job.model != self.model_id:
            raise ApiError(404, f"the model '{job.model}' does not exist; this server has '{self.model_id}'",
                           param="model", code="model_not_found")
        loop = asyncio.get_running_loop()
        try:
            stream = await loop.run_in_executor(None, self._start, job)
        except Exception as exc:
            raise api_error(exc) from None
        self._count(1)
        reply = Reply(stream, loop, self._ended)
        try:
            await reply.started()
        except asyncio.CancelledError:
            reply.close()
            raise
        return reply
