"""One streaming request's events, as the engine's client hands them out: ``Stream``.

``EngineClient.stream`` makes one per streaming request; its events come from the client's reader thread through
a queue. Reasoning models' replies are split here (answer, reasoning, tool calls), so every caller gets the same
split. ``as_error`` turns an engine's error event into the exception a caller catches.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any, Protocol

from hisho.core.engine.protocol import ErrorKind, GenerationResult, Progress
from hisho.core.errors import EngineClosed, EngineCrashed, EngineError
from hisho.core.formats.markers import reading_text
from hisho.core.formats.reasoning import Channel, ReasoningFormat, ReplySplitter, split_text


class StreamOwner(Protocol):
    """What a stream needs of the client that made it."""

    threads: dict[str, Any]

    def cancel(self, req_id: int) -> None: ...

    def _progressed(self, progress: Progress) -> None: ...

    def _forget(self, req_id: int) -> None: ...


class Stream:
    """Iterator over one streaming request's token events (dicts with ``text`` and ``token``).

    After iteration ends, ``result`` holds the ``GenerationResult``. ``cancel()`` may be called from any thread;
    the engine stops before its next prompt batch or sampled token. "progress" events are not yielded: the
    latest is ``progress`` (and ``EngineClient.progress()``).

    A reasoning model's reply is split here (``reasoning``): each token event's ``text`` holds only answer text
    and ``reasoning`` the reasoning text (either may be empty: a marker, or text held back until the next token
    says what it is); ``tool`` lists a harmony tool call's pieces. ``result.text`` is the answer alone and
    ``result.reasoning`` the reasoning, so no caller shows or stores thinking as the answer by accident.
    """

    def __init__(self, client: StreamOwner, req_id: int, events: queue.Queue[Any], op: str = "",
                 reasoning: ReasoningFormat | None = None, thinking: bool = True, chat: bool = True) -> None:
        self._client = client
        self.id = req_id
        self.op = op
        self._events = events
        self.result: GenerationResult | None = None
        self.first_token_at: float | None = None
        self.progress: Progress | None = None
        self.first_answer_at: float | None = None   # the first token of the answer (after any reasoning)
        self._fmt = reasoning if reasoning is not None and reasoning.reasons else None
        # A chat reply is split; a raw completion (a prompt given as text) continues the text as it is.
        self._splitter = ReplySplitter(self._fmt, thinking=thinking) \
            if self._fmt is not None and chat and op in ("generate", "serve") else None
        self._thinking = thinking

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while True:
                ev = self._events.get()
                kind = ev.get("ev")
                if kind == "progress":
                    self.progress = Progress.from_event(ev, self.op)
                    self._client._progressed(self.progress)
                elif kind == "token":
                    if self.first_token_at is None:
                        self.first_token_at = time.perf_counter()
                    yield self._split(ev)
                elif kind == "done":
                    result = GenerationResult.from_event(ev)
                    if self._splitter is not None:
                        tail, split = self._splitter.finish()
                        if tail:
                            yield self._token_event({"ev": "token", "token": None}, tail)
                        result.text, result.reasoning = split.content, split.reasoning
                        result.reasoning_unfinished = split.unfinished_reasoning
                    self.result = result
                    if isinstance(ev.get("threads"), dict):
                        self._client.threads = ev["threads"]
                    return
                elif kind == "error":
                    raise as_error(ev)
        finally:
            self._client._forget(self.id)

    @property
    def reasoning_kind(self) -> str:
        """The reasoning format this stream's reply is split by ("" when it is not split)."""
        return self._fmt.kind.value if self._splitter is not None and self._fmt is not None else ""

    def _split(self, ev: dict[str, Any]) -> dict[str, Any]:
        if self._splitter is not None:
            raw = reading_text(ev)  # format markers shown, any other control token dropped
            return {**self._token_event(ev, self._splitter.feed(raw)), "piece": raw}
        if self._fmt is not None and self.op == "batch_generate" and isinstance(ev.get("text"), str):
            split = split_text(self._fmt, ev["text"], thinking=self._thinking)  # a whole item at once
            return {**ev, "text": split.content, "reasoning": split.reasoning,
                    "reasoning_unfinished": split.unfinished_reasoning}
        return ev

    def _token_event(self, ev: dict[str, Any], pieces: list[Any]) -> dict[str, Any]:
        text = "".join(p.text for p in pieces if p.channel is Channel.CONTENT)
        if text and self.first_answer_at is None:
            self.first_answer_at = time.perf_counter()
        return {**ev, "text": text,
                "reasoning": "".join(p.text for p in pieces if p.channel is Channel.REASONING),
                "tool": [{"recipient": p.recipient, "text": p.text} for p in pieces if p.channel is Channel.TOOL]}

    def cancel(self) -> None:
        self._client.cancel(self.id)

    def collect(self) -> GenerationResult:
        """Drain the stream and return the result."""
        for _ in self:
            pass
        assert self.result is not None
        return self.result


def as_error(ev: dict[str, Any]) -> EngineError:
    kind = ErrorKind.of(ev.get("kind", ErrorKind.INTERNAL))
    if kind is ErrorKind.CRASHED:
        return EngineCrashed(str(ev.get("message", "engine crashed")), ev.get("exit_code"))
    if kind is ErrorKind.CLOSED:
        return EngineClosed(str(ev.get("message", "the engine was closed")))
    return EngineError(kind, str(ev.get("message", "engine error")))
