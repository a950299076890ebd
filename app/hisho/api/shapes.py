"""OpenAI's request and response shapes: parse a request body into what the engine runs, and build the
response bodies and stream chunks. No I/O.

Rules of use: ``parse_chat`` / ``parse_completion`` raise ``ApiError`` (an OpenAI-shaped error with its HTTP
status) for anything a client got wrong; nothing here raises anything else for bad input.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from hisho.api.errors import ApiError
from hisho.api.images import ImagePart, image_part, text_chars
from hisho.api.tooling import Extras, parse_extras, parse_message
from hisho.core.engine.protocol import Sampling

__all__ = ["ApiError", "Job", "parse_chat", "parse_completion"]

MAX_STOPS = 4  # OpenAI's limit
# The roles a chat template knows; "developer" is OpenAI's newer name for the system message. The old "function"
# role is refused: no template renders it (tool results come as "tool" messages).
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


@dataclass
class Job:
    """What one request asks the engine for."""

    kind: str                                  # "chat" or "text"
    model: str
    stream: bool
    include_usage: bool
    sampling: Sampling
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    stops: tuple[str, ...] = ()
    max_tokens_param: str = "max_tokens"       # the field the client gave it in (errors name it)
    max_tokens_given: bool = False
    extras: Extras = field(default_factory=Extras)  # tools, response_format, template settings (api.tooling)
    protocol: str = ""                         # the wire format it came in, when not chat/text completions

    @property
    def wire(self) -> str:
        """The wire format the request came in, as the window's request list names it."""
        return self.protocol or ("chat completions" if self.kind == "chat" else "completions")

    @property
    def prompt_param(self) -> str:
        """The field an error about the prompt names."""
        return "messages" if self.kind == "chat" else "prompt"

    def prompt_chars(self) -> int:
        if self.messages is not None:
            return sum(text_chars(m["content"]) for m in self.messages) + len(json.dumps(self.extras.tools or []))
        return len(self.prompt or "")


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"'{name}' must be a number", param=name)
    if not lo <= value <= hi:
        raise ApiError(400, f"'{name}' must be between {lo:g} and {hi:g}", param=name)
    return float(value)


def _integer(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"'{name}' must be an integer", param=name)
    return value


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    if len(stops) > MAX_STOPS:
        raise ApiError(400, f"'stop' takes at most {MAX_STOPS} strings", param="stop")
    if not all(stops):
        raise ApiError(400, "'stop' strings must not be empty", param="stop", code="invalid_value")
    return tuple(stops)


def _one_choice(body: dict[str, Any], name: str) -> None:
    """``n`` (and ``best_of``) other than 1: one choice per request is all this server makes."""
    value = _integer(body, name)
    if value is not None and value != 1:
        raise ApiError(400, f"'{name}' must be 1: this server makes one choice per request", param=name,
                       code="invalid_value")


def _no_logprobs(body: dict[str, Any]) -> None:
    """Log probabilities are not reported by this server: asking for them is refused, never ignored."""
    for name in ("logprobs", "top_logprobs"):
        if body.get(name) not in (None, False, 0):
            raise ApiError(400, f"'{name}' is not supported: this server does not report log probabilities; "
                                "send the request without it", param=name, code="unsupported_parameter")


def _common(body: dict[str, Any], kind: str, defaults: dict[str, Any], max_default: int) -> Job:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, param)
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(400, f"'{param}' must be at least 1", param=param)
    _one_choice(body, "n")
    _no_logprobs(body)
    seed = _integer(body, "seed")
    stops = _stops(body)
    sampling = Sampling(
        temperature=_number(body, "temperature", float(defaults.get("temperature", 0.7)), 0.0, 2.0),
        top_p=_number(body, "top_p", float(defaults.get("top_p", 0.95)), 0.0, 1.0),
        top_k=int(defaults.get("top_k", 40)),
        repeat_penalty=1.0,  # OpenAI's API has no repeat penalty (frequency/presence penalties are 0 by default)
        seed=seed if seed is not None and seed >= 0 else -1,
        max_tokens=max_tokens or max_default,
        stop=list(stops),
    )
    return Job(kind, model, stream, bool(options.get("include_usage", False)), sampling, stops=stops,
               max_tokens_param=param, max_tokens_given=max_tokens is not None)


def parse_chat(body: Any, defaults: dict[str, Any], max_default: int) -> Job:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    job = _common(body, "chat", defaults, max_default)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] needs a 'role'", param=f"messages[{i}]")
        role = ROLES.get(m["role"])
        if role is None:
            known = ", ".join(f"'{r}'" for r in ROLES)
            raise ApiError(400, f"messages[{i}].role: {_short(m['role'])} is not supported; use {known}",
                           param=f"messages[{i}].role", code="invalid_value")
        # An assistant turn that only calls tools has no content (OpenAI sends null there).
        calls_only = role == "assistant" and m.get("content") is None and bool(m.get("tool_calls"))
        out.append(parse_message(m, i, role, "" if calls_only else _content(m.get("content"), i)))
    _tool_results_answer_calls(out)
    job.messages = out
    job.extras = parse_extras(body)
    return job


def _tool_results_answer_calls(messages: list[dict[str, Any]]) -> None:
    """Each tool message answers a call an earlier assistant message made (its ``tool_call_id`` is that call's
    ``id``): a result of no call is the client's mistake, which a template would render as nonsense. A result
    without a ``name`` gets its call's (templates that show it read it; every wire format then renders the same)."""
    ids: dict[str, str] = {}
    for i, m in enumerate(messages):
        ids.update((c["id"], c["function"]["name"]) for c in m.get("tool_calls") or [] if c["id"])
        if m["role"] == "tool" and m["tool_call_id"] in ids:
            m.setdefault("name", ids[m["tool_call_id"]])
        elif m["role"] == "tool":
            where = "no assistant message before it calls a tool" if not ids else \
                f"the calls before it have the ids {', '.join(sorted(repr(x) for x in ids))}"
            raise ApiError(400, f"messages[{i}].tool_call_id {_short(m['tool_call_id'])} answers no call: {where}",
                           param=f"messages[{i}].tool_call_id", code="invalid_value")


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


def _content(content: Any, i: int) -> str | list[dict[str, Any]]:
    """A message's text: a string, or OpenAI's list of parts (text, and images as data URLs: api/images.py; with
    an image the parts stay a list, the engine's). ``null`` is refused, as OpenAI refuses it where no tool call
    stands in for the text."""
    if content is None:
        raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts, not null",
                       param=f"messages[{i}].content", code="invalid_type")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[dict[str, Any]] = []
        for k, part in enumerate(content):
            if isinstance(part, ImagePart) or isinstance(part, dict) and part.get("type") == "image_url":
                parts.append(image_part(part, f"messages[{i}].content[{k}]"))
                continue
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, f"messages[{i}].content: only text and image_url parts are supported",
                               param=f"messages[{i}].content")
            parts.append({"type": "text", "text": part["text"]})
        if any(p["type"] == "image" for p in parts):
            return parts
        return "".join(p["text"] for p in parts)
    raise ApiError(400, f"messages[{i}].content must be a string", param=f"messages[{i}].content")


def parse_completion(body: Any, defaults: dict[str, Any], max_default: int) -> Job:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    job = _common(body, "text", defaults, max_default)
    _one_choice(body, "best_of")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise ApiError(400, "'prompt' must be a non-empty string (one prompt per request)", param="prompt")
    job.prompt = prompt
    return job


FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context_full": "length"}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Ids:
    """The id and creation time every chunk of one response shares."""

    def __init__(self, kind: str, model: str) -> None:
        self.kind, self.model = kind, model
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())

    def envelope(self, choices: list[dict[str, Any]], chunk: bool = False) -> dict[str, Any]:
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {"id": self.id, "object": obj + (".chunk" if chunk and self.kind == "chat" else ""),
                "created": self.created, "model": self.model, "choices": choices}

    def delta(self, text: str | None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text:
                delta["content"] = text
            return self.envelope([{"index": 0, "delta": delta, "finish_reason": finish}], chunk=True)
        return self.envelope([{"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}])

    def reasoning_delta(self, text: str) -> dict[str, Any]:
        """A chunk of a reasoning model's thinking: ``delta.reasoning_content`` (llama-server's and DeepSeek's
        field; clients that do not know it show only ``content``)."""
        return self.envelope([{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": None}],
                             chunk=True)

    def whole(self, text: str, finish: str, use: dict[str, Any]) -> dict[str, Any]:
        if self.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish, "logprobs": None}
        return {**self.envelope([choice]), "usage": use}


class StopFilter:
    """Cuts streamed text at the first stop string, which itself is never sent (OpenAI's rule). Text that could
    be the start of a stop string is held back until the next piece says it is not."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.pending = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that cut the text

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self.pending += text
        found = [(i, s) for s, i in ((s, self.pending.find(s)) for s in self.stops) if i >= 0]
        if found:
            cut, self.matched = min(found)
            out, self.pending, self.stopped = self.pending[:cut], "", True
            return out
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        out = self.pending[:len(self.pending) - hold]
        self.pending = self.pending[len(out):]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out
