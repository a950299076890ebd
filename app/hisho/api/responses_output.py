"""OpenAI's Responses API response: the response object, its output items (reasoning, message, function calls),
its usage, and the typed server-sent events of a streamed one, rendered from ``answer``'s protocol-neutral
pieces. No I/O.

Rules of use: ``Shell(request, model)`` holds one response's id and what it echoes; ``shell.whole(outcome)`` is a
finished response, ``Events(shell)`` renders a stream (``start``, then ``feed`` each ``answer.stream`` item;
``final`` is the finished response once the ``Outcome`` came). ``record(request, body, outcome)`` is what
``store`` keeps: the conversation in the template's form (``instructions`` left out, as OpenAI leaves them out of
a continuation) and the response body.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from hisho.api import http, tooling
from hisho.api.answer import Failed, Outcome, TextDelta, ThinkingDelta
from hisho.api.errors import ApiError
from hisho.api.responses_input import Request


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage(o: Outcome) -> dict[str, Any]:
    return {"input_tokens": o.prompt_tokens,
            "input_tokens_details": {"cached_tokens": o.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": o.completion_tokens, "output_tokens_details": {"reasoning_tokens": o.reasoning_tokens},
            "total_tokens": o.prompt_tokens + o.completion_tokens}


def record(request: Request, body: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": outcome.text}
    if outcome.reasoning:
        turn["reasoning_content"] = outcome.reasoning
    if outcome.calls:
        turn["tool_calls"] = tooling.call_parts(outcome.calls)
    return {"messages": [*request.history, turn], "response": body}


class Shell:
    """One response: its id, creation time and the request's settings it echoes."""

    def __init__(self, request: Request, model: str) -> None:
        self.request, self.model = request, model
        self.id = new_id("resp")
        self.created = int(time.time())

    def body(self, status: str, output: list[dict[str, Any]], outcome: Outcome | None = None,
             error: ApiError | None = None) -> dict[str, Any]:
        r, job = self.request, self.request.job
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "background": False, "completed_at": int(time.time()) if status == "completed" else None,
            "error": {"code": error.code or "server_error", "message": error.message} if error else None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens, "max_tool_calls": None,
            "metadata": r.metadata, "model": self.model, "output": output, "parallel_tool_calls": r.parallel,
            "previous_response_id": r.previous_id, "reasoning": {"effort": r.effort, "summary": r.summary},
            "service_tier": "default", "store": r.store, "temperature": job.sampling.temperature,
            "text": {"format": r.text_format}, "tool_choice": r.tool_choice, "tools": r.tools,
            "top_p": job.sampling.top_p, "truncation": "disabled", "user": None,
            "usage": usage(outcome) if outcome is not None else None,
        }

    def status(self, outcome: Outcome) -> str:
        return "incomplete" if outcome.finish == "length" else "completed"

    def reasoning_item(self, text: str, item_id: str | None = None) -> dict[str, Any]:
        item: dict[str, Any] = {"id": item_id or new_id("rs"), "type": "reasoning", "summary": [],
                                "content": [{"type": "reasoning_text", "text": text}], "status": "completed"}
        if self.request.encrypted_reasoning:  # opaque to the client; read back from a reasoning input item
            item["encrypted_content"] = text
        return item

    def message_item(self, text: str, status: str, item_id: str | None = None) -> dict[str, Any]:
        return {"id": item_id or new_id("msg"), "type": "message", "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}

    def call_items(self, outcome: Outcome) -> list[dict[str, Any]]:
        return [{"id": new_id("fc"), "type": "function_call", "call_id": c.id, "name": c.name,
                 "arguments": c.arguments, "status": "completed"} for c in outcome.calls]

    def whole(self, outcome: Outcome) -> dict[str, Any]:
        status = self.status(outcome)
        output = [self.reasoning_item(outcome.reasoning)] if outcome.reasoning else []
        if outcome.text or not outcome.calls:
            output.append(self.message_item(outcome.text, status))
        return self.body(status, output + self.call_items(outcome), outcome)


class Events:
    """A streamed response's events, each with its ``sequence_number``."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.seq = 0
        self.output: list[dict[str, Any]] = []      # finished items, in order
        self.open: dict[str, Any] | None = None      # the item being written
        self.text = ""
        self.final: dict[str, Any] | None = None
        self.outcome: Outcome | None = None

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return http.sse(data, event=kind)

    def start(self) -> list[bytes]:
        body = self.shell.body("in_progress", [])
        return [self.event("response.created", response=body), self.event("response.in_progress", response=body)]

    def _where(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.output)}

    def _begin(self, kind: str) -> list[bytes]:
        out = self._end()
        if kind == "reasoning":
            self.open = {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            self.open = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress",
                         "content": []}
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        out.append(self.event("response.output_item.added", output_index=len(self.output), item=self.open))
        out.append(self.event("response.content_part.added", **self._where(), content_index=0, part=part))
        return out

    def _end(self, status: str = "completed") -> list[bytes]:
        if self.open is None:
            return []
        where, text = self._where(), self.text
        if self.open["type"] == "reasoning":
            item = self.shell.reasoning_item(text, self.open["id"])
            part = item["content"][0]
            out = [self.event("response.reasoning_text.done", **where, content_index=0, text=text)]
        else:
            item = self.shell.message_item(text, status, self.open["id"])
            part = item["content"][0]
            out = [self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])]
        out.append(self.event("response.content_part.done", **where, content_index=0, part=part))
        out.append(self.event("response.output_item.done", output_index=len(self.output), item=item))
        self.output.append(item)
        self.open, self.text = None, ""
        return out

    def feed(self, piece: TextDelta | ThinkingDelta | Outcome | Failed) -> list[bytes]:
        if isinstance(piece, (TextDelta, ThinkingDelta)):
            kind = "reasoning" if isinstance(piece, ThinkingDelta) else "message"
            out = self._begin(kind) if self.open is None or self.open["type"] != kind else []
            self.text += piece.text
            name = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            extra: dict[str, Any] = {} if kind == "reasoning" else {"logprobs": []}
            out.append(self.event(name, **self._where(), content_index=0, delta=piece.text, **extra))
            return out
        if isinstance(piece, Failed):
            out = self._end("incomplete")
            body = self.shell.body("failed", self.output, error=piece.error)
            return [*out, self.event("response.failed", response=body)]
        return self._finish(piece)

    def _finish(self, outcome: Outcome) -> list[bytes]:
        status = self.shell.status(outcome)
        has_message = any(item["type"] == "message" for item in self.output) or \
            (self.open is not None and self.open["type"] == "message")
        out = []
        if not has_message and not outcome.calls:  # a reply with nothing to say still has its (empty) message
            out += self._begin("message")
        out += self._end(status)
        for item in self.shell.call_items(outcome):
            index = len(self.output)
            where = {"item_id": item["id"], "output_index": index}
            out.append(self.event("response.output_item.added", output_index=index,
                                  item={**item, "arguments": "", "status": "in_progress"}))
            out.append(self.event("response.function_call_arguments.delta", **where, delta=item["arguments"]))
            out.append(self.event("response.function_call_arguments.done", **where, arguments=item["arguments"]))
            out.append(self.event("response.output_item.done", output_index=index, item=item))
            self.output.append(item)
        self.outcome = outcome
        self.final = self.shell.body(status, self.output, outcome)
        return out

    def closing(self) -> bytes:
        """The last event: ``response.completed`` or ``response.incomplete`` with the whole response."""
        assert self.final is not None
        kind = "response.completed" if self.final["status"] == "completed" else "response.incomplete"
        return self.event(kind, response=self.final)
