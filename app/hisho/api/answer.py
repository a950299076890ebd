"""One reply read the same way under every wire format: what a protocol module renders, whether the client asked
for chat completions, Responses or Messages. No I/O but the reply's queue.

Rules of use:
- A protocol module parses its request into a ``Job`` (``api.shapes``; a chat job with ``messages`` in the
  template's form and ``Extras`` for tools, tool choice, output format and reasoning control), opens it with
  ``Backend.open``, then either awaits ``collect(reply, job)`` for the whole ``Outcome`` or iterates
  ``stream(reply, job)``: ``TextDelta`` and ``ThinkingDelta`` pieces in the order the model wrote them, then one
  ``Outcome`` (or one ``Failed`` when the engine failed mid-reply). Both close the reply when done, also when the
  consumer stops early (a client that left).
- Tool calls are read by the one parser (``hisho.core.formats.tools``, through ``tooling.read_calls`` and
  ``tooling.call_stream``: a call cut by the token limit is dropped, never shown as text; a request for one call
  gets one) from the raw reply for a job whose ``extras.family`` is set (``tooling.apply`` sets it); stop strings
  are cut by ``shapes.StopFilter``. A protocol never reads the engine's stream itself.
- ``Outcome.finish`` is protocol-neutral: ``"stop"`` (the model ended), ``"length"`` (the token limit or the
  context; also where calls finished before the cut), ``"tool_calls"`` or ``"stop_sequence"``
  (``Outcome.stop_sequence`` says which); each protocol maps it to its own words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from hisho.api import tooling
from hisho.api.backend import Reply, Thought
from hisho.api.errors import ApiError
from hisho.api.shapes import FINISH, Job, StopFilter
from hisho.core.formats.tools import ToolCall


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass
class Outcome:
    """A finished reply: the answer with its calls taken out, the thinking apart, and the counts."""

    text: str
    finish: str
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    stop_sequence: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0          # prompt tokens that came from the cache (RAM or disk), not read
    reasoning_tokens: int = 0       # of the completion tokens, those spent thinking

    @property
    def read_tokens(self) -> int:
        """Prompt tokens the engine actually read for this request."""
        return max(0, self.prompt_tokens - self.cached_tokens)


@dataclass(frozen=True)
class Failed:
    """The engine failed after the reply began (a stream's last item)."""

    error: ApiError


def _finish(reply: Reply, stops: StopFilter, calls: list[ToolCall]) -> str:
    assert reply.result is not None
    finish = tooling.finish_reason(calls, FINISH.get(reply.result.stop_reason, "stop"), stops.stopped)
    return "stop_sequence" if finish == "stop" and stops.stopped else finish


def _outcome(reply: Reply, text: str, thinking: list[str], stops: StopFilter, calls: list[ToolCall]) -> Outcome:
    result = reply.result
    assert result is not None
    finish = _finish(reply, stops, calls)
    return Outcome(text=text, finish=finish, reasoning=result.reasoning or "".join(thinking), calls=calls,
                   stop_sequence=stops.matched if finish == "stop_sequence" else None,
                   prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
                   cached_tokens=result.cached_tokens, reasoning_tokens=len(thinking))


async def collect(reply: Reply, job: Job) -> Outcome:
    """The whole reply; raises the engine's failure as an ``ApiError``."""
    parts: list[str] = []
    thinking: list[str] = []
    try:
        async for item in reply.items():
            (thinking if isinstance(item, Thought) else parts).append(item)
    finally:
        reply.close()
    if reply.error is not None:
        raise reply.error
    result = reply.result
    assert result is not None
    stops = StopFilter(job.stops)
    calls: list[ToolCall] = []
    if job.extras.family is not None:  # a request with tools: its calls read from the raw pieces
        parsed = tooling.read_calls(job.extras, "".join(parts), result.stop_reason)
        text, calls = stops.feed(parsed.content) + stops.flush(), parsed.calls
    else:
        text = stops.feed("".join(parts)) + stops.flush()
    return _outcome(reply, text, thinking, stops, calls)


async def stream(reply: Reply, job: Job) -> AsyncIterator[TextDelta | ThinkingDelta | Outcome | Failed]:
    """The reply as it comes; the last item is an ``Outcome`` or a ``Failed``. Calls come whole in the
    ``Outcome`` (the text that may be a call's marker is held back until it is known not to be)."""
    stops = StopFilter(job.stops)
    calls_in = tooling.call_stream(job.extras)
    calls: list[ToolCall] = []
    text: list[str] = []
    thinking: list[str] = []
    try:
        async for item in reply.items():
            if isinstance(item, Thought):
                thinking.append(item)
                yield ThinkingDelta(str(item))
                continue
            out = stops.feed(calls_in.feed(item) if calls_in is not None else item)
            if out:
                text.append(out)
                yield TextDelta(out)
            if stops.stopped:
                reply.close()  # the engine may still be a token or two behind the stop string
        ended = reply.result.stop_reason if reply.result is not None else ""
        if calls_in is not None:
            rest, calls = calls_in.finish(cut=ended in tooling.CUT)
            out = stops.feed(rest)
            if out:
                text.append(out)
                yield TextDelta(out)
        tail = stops.flush()
        if tail:
            text.append(tail)
            yield TextDelta(tail)
        if reply.error is not None:
            yield Failed(reply.error)
        else:
            yield _outcome(reply, "".join(text), thinking, stops, calls)
    finally:
        reply.close()
