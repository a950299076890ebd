"""One streaming request to a remote server, as a ``TokenStream`` (the chat's reply, or one item of a remote
batch). No Qt.

It asks of its engine only what ``StreamOwner`` names, so both ``hisho.core.remote.engine`` (chat replies) and
``hisho.core.remote.batch`` (a summary's items) use it without importing each other. No first byte after
``WAIT_NOTICE_S``: the owner's ``on_wait`` is told once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from hisho.core.engine.protocol import GenerationResult
from hisho.core.remote.http import Endpoint, RemoteError, SSEStream

log = logging.getLogger("hisho.remote")


class StreamOwner(Protocol):
    """What a stream uses of the engine that opened it (``RemoteEngine``)."""

    endpoint: Endpoint
    model: str
    on_wait: Callable[[str], None] | None
    last_reply: GenerationResult | None

    @property
    def name(self) -> str: ...

    def _after_reply(self, history: list[dict[str, str]], text: str, result: GenerationResult) -> None: ...


WAIT_NOTICE_S = 5.0


class RemoteStream:
    """One streaming request to the server (``TokenStream``)."""

    def __init__(self, engine: StreamOwner, path: str, body: dict[str, Any],
                 history: list[dict[str, str]] | None) -> None:
        self._engine, self._path, self._body, self._history = engine, path, body, history
        self.result: GenerationResult | None = None
        self.waited = False
        self._cancelled = threading.Event()
        self._sse: SSEStream | None = None

    def cancel(self) -> None:
        self._cancelled.set()
        sse = self._sse
        if sse is not None:
            sse.close()

    def collect(self) -> GenerationResult:
        for _ in self:
            pass
        assert self.result is not None
        return self.result

    def _wait_notice(self, first: threading.Event) -> None:
        if not first.wait(WAIT_NOTICE_S) and not self._cancelled.is_set():
            self.waited = True
            log.info("waiting for %s", self._engine.name)
            if self._engine.on_wait is not None:
                self._engine.on_wait(self._engine.name)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        eng = self._engine
        started = time.perf_counter()
        first = threading.Event()
        threading.Thread(target=self._wait_notice, args=(first,), name="remote-wait", daemon=True).start()
        parts: list[str] = []
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}
        finish = ""
        first_at: float | None = None
        try:
            if self._cancelled.is_set():
                raise _Cancelled
            self._sse = SSEStream(eng.endpoint, self._path, self._body)
            if self._cancelled.is_set():
                self._sse.close()
            for ev in self._sse.open():
                first.set()
                if isinstance(ev.get("usage"), dict):
                    usage = ev["usage"]
                if isinstance(ev.get("timings"), dict):
                    timings = ev["timings"]
                for choice in ev.get("choices") or []:
                    piece = _piece(choice)
                    if piece:
                        if first_at is None:
                            first_at = time.perf_counter()
                        parts.append(piece)
                        yield {"text": piece, "token": -1}
                    finish = str(choice.get("finish_reason") or finish)
            if not self._cancelled.is_set() and not self._sse.done and not finish:
                raise RemoteError(f"{eng.name} dropped the connection in the middle of the reply; the text so far "
                                  "is kept — retry to continue")
        except _Cancelled:
            pass
        finally:
            first.set()
            if self._sse is not None:
                self._sse.close()
        ended = time.perf_counter()
        text = "".join(parts)
        cancelled = self._cancelled.is_set()
        self.result = _result(text, usage, timings, started, first_at, ended, len(parts),
                              "cancelled" if cancelled else finish or "stop")
        self.result.extra.update(engine=eng.name, model=eng.model, waited=self.waited)
        if self._history is not None:
            eng.last_reply = self.result
        if self._history is not None and not cancelled:
            eng._after_reply(self._history, text, self.result)


class _Cancelled(Exception):
    pass


def _piece(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    message = choice.get("message")                     # a server that answered without streaming
    if isinstance(message, dict):
        return str(message.get("content") or "")
    return str(choice.get("text") or "")


def _result(text: str, usage: dict[str, Any], timings: dict[str, Any], started: float,
            first_at: float | None, ended: float, pieces: int, stop: str) -> GenerationResult:
    details = usage.get("prompt_tokens_details") if isinstance(usage.get("prompt_tokens_details"), dict) else {}
    cache_n = int(timings.get("cache_n", 0) or 0)
    prompt_n = int(timings.get("prompt_n", 0) or 0)           # llama-server: tokens actually read
    cached = cache_n or int((details or {}).get("cached_tokens", 0) or 0)
    prompt_tokens = int(usage.get("prompt_tokens", 0) or 0) or (prompt_n + cache_n)
    completion = int(usage.get("completion_tokens", 0) or 0) or int(timings.get("predicted_n", 0) or 0) or pieces
    ttft = (first_at - started) if first_at is not None else ended - started
    decode_s = max(ended - first_at, 1e-9) if first_at is not None else 0.0
    tps = float(timings.get("predicted_per_second", 0.0) or 0.0)
    if not tps and first_at is not None and completion > 1:
        tps = (completion - 1) / decode_s                     # the first token is in the TTFT
    extra: dict[str, Any] = {"prompt_n": prompt_n if timings else max(prompt_tokens - cached, 0),
                             "server_timings": timings}
    return GenerationResult(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion,
                            cached_tokens=cached, ttft_s=ttft, decode_s=decode_s, tokens_per_s=tps,
                            stop_reason=stop, extra=extra)
