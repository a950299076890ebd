"""One streamed request of ``hisho bench agent`` in any of the three wire formats, read as it arrives: when the
first output came (text, thinking or a tool call), the calls, the text, and the prompt's counts (tokens in the
prompt, and of them those that came from the server's cache), whichever way the server reports them.

A server's own words for the counts: OpenAI's ``usage.prompt_tokens`` with ``prompt_tokens_details.cached_tokens``
(chat completions) or ``usage.input_tokens`` with ``input_tokens_details.cached_tokens`` (Responses); Anthropic's
``usage.input_tokens`` (what was read) beside ``cache_read_input_tokens`` and ``cache_creation_input_tokens``;
llama-server's ``timings`` (``prompt_n`` read, ``cache_n`` reused), taken first where a server sends them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from hisho.bench.agent_session import PATHS, Call


@dataclass
class Answer:
    ttft_s: float = 0.0
    total_s: float = 0.0
    text: str = ""
    calls: list[Call] = field(default_factory=list)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""


def _events(response: httpx.Response) -> Any:
    for line in response.iter_lines():
        if line.startswith("data:"):
            data = line[5:].strip()
            if data and data != "[DONE]":
                try:
                    yield json.loads(data)
                except ValueError:
                    continue


class _Reader:
    def __init__(self) -> None:
        self.answer = Answer()
        self.text: list[str] = []
        self.calls: dict[Any, dict[str, str]] = {}   # by index / item id / block index
        self.timings: dict[str, Any] | None = None
        self.usage: dict[str, Any] = {}

    def output(self, start: float) -> None:
        if not self.answer.ttft_s:
            self.answer.ttft_s = time.perf_counter() - start

    def call_part(self, key: Any, *, id: str = "", name: str = "", arguments: str = "") -> None:
        c = self.calls.setdefault(key, {"id": "", "name": "", "arguments": ""})
        c["id"] = id or c["id"]
        c["name"] = name or c["name"]
        c["arguments"] += arguments

    def chat(self, ev: dict[str, Any], start: float) -> None:
        if ev.get("usage"):
            self.usage = ev["usage"]
        for choice in ev.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
                self.output(start)
            if delta.get("content"):
                self.text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                fn = tc.get("function") or {}
                self.call_part(tc.get("index", 0), id=tc.get("id") or "", name=fn.get("name") or "",
                               arguments=fn.get("arguments") or "")

    def responses(self, ev: dict[str, Any], start: float) -> None:
        kind = str(ev.get("type", ""))
        if kind.endswith(".delta") and ("output_text" in kind or "reasoning" in kind or "arguments" in kind):
            self.output(start)
        if kind == "response.output_text.delta":
            self.text.append(str(ev.get("delta", "")))
        elif kind == "response.output_item.done":
            item = ev.get("item") or {}
            if item.get("type") == "function_call":
                self.output(start)
                self.calls[item.get("id") or len(self.calls)] = {
                    "id": str(item.get("call_id", "")), "name": str(item.get("name", "")),
                    "arguments": str(item.get("arguments", ""))}
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.usage = (ev.get("response") or {}).get("usage") or {}

    def messages(self, ev: dict[str, Any], start: float) -> None:
        kind = ev.get("type")
        if kind == "message_start":
            self.usage.update(((ev.get("message") or {}).get("usage")) or {})
        elif kind == "content_block_start":
            block = ev.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.output(start)
                self.call_part(ev.get("index"), id=str(block.get("id", "")), name=str(block.get("name", "")))
        elif kind == "content_block_delta":
            self.output(start)
            delta = ev.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(str(delta.get("text", "")))
            elif delta.get("type") == "input_json_delta":
                self.call_part(ev.get("index"), arguments=str(delta.get("partial_json", "")))
        elif kind == "message_delta":
            self.usage.update({k: v for k, v in (ev.get("usage") or {}).items() if v is not None})

    def counts(self, protocol: str) -> None:
        a, u = self.answer, self.usage
        if self.timings and "prompt_n" in self.timings:
            cached, read = int(self.timings.get("cache_n", 0)), int(self.timings.get("prompt_n", 0))
            a.prompt_tokens, a.cached_tokens = cached + read, cached
            a.completion_tokens = int(self.timings.get("predicted_n", 0))
            return
        if protocol == "chat":
            a.prompt_tokens = int(u.get("prompt_tokens", 0))
            a.cached_tokens = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            a.completion_tokens = int(u.get("completion_tokens", 0))
        elif protocol == "responses":
            a.prompt_tokens = int(u.get("input_tokens", 0))
            a.cached_tokens = int((u.get("input_tokens_details") or {}).get("cached_tokens") or 0)
            a.completion_tokens = int(u.get("output_tokens", 0))
        else:
            read = int(u.get("input_tokens", 0)) + int(u.get("cache_creation_input_tokens") or 0)
            a.cached_tokens = int(u.get("cache_read_input_tokens") or 0)
            a.prompt_tokens = read + a.cached_tokens
            a.completion_tokens = int(u.get("output_tokens", 0))


def send(client: httpx.Client, base: str, key: str, protocol: str, body: dict[str, Any]) -> Answer:
    """Send ``body`` to ``base`` (the server's root, no ``/v1``) as ``protocol`` and read the stream. A kept-alive
    connection the server closed after its last stream (llama-server does) is opened anew once."""
    try:
        return _send(client, base, key, protocol, body)
    except httpx.RemoteProtocolError:
        return _send(client, base, key, protocol, body)


def _send(client: httpx.Client, base: str, key: str, protocol: str, body: dict[str, Any]) -> Answer:
    headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}
    reader = _Reader()
    start = time.perf_counter()
    with client.stream("POST", base + PATHS[protocol], json=body, headers=headers, timeout=3600) as r:
        if r.status_code != 200:
            r.read()
            reader.answer.error = f"{r.status_code}: {r.text[:300]}"
            return reader.answer
        read = {"chat": reader.chat, "responses": reader.responses, "messages": reader.messages}[protocol]
        for ev in _events(r):
            if isinstance(ev.get("timings"), dict):
                reader.timings = ev["timings"]
            read(ev, start)
    a = reader.answer
    a.total_s = time.perf_counter() - start
    a.ttft_s = a.ttft_s or a.total_s
    a.text = "".join(reader.text)
    a.calls = [Call(c["id"], c["name"], c["arguments"]) for c in reader.calls.values() if c["name"]]
    reader.counts(protocol)
    return a
