"""A remote OpenAI-compatible server (llama-server, llama-cpp-python's server, vLLM, SGLang) as an ``Engine``.
No Qt, no llama_cpp.

Rules of use:
- ``load(LoadParams(model_path=<model id>))`` picks the server's model ('' or an unknown id: its first one)
  and asks the server what it is (``probe``); ``load_info["n_ctx"]`` is the server's context size where it
  tells, else the ``n_ctx`` asked for.
- ``generate(messages=...)`` streams ``/v1/chat/completions``; ``generate(prompt=...)`` ``/v1/completions``.
  Messages go as they are (same template, same system prompt, nothing time-dependent), so every turn's
  prompt starts with the previous one byte for byte and the server's prefix cache hits; the result's
  ``cached_tokens`` is the server's own count (llama-server ``timings.cache_n``, OpenAI-style
  ``usage.prompt_tokens_details.cached_tokens``) and ``extra["prompt_n"]`` the tokens it actually read.
- Against llama-server with ``--slot-save-path`` a chat is pinned to one slot, saved after each finished
  turn and restored before the next when the server lost it (``slots.SlotKeeper``).
- ``cancel()`` closes the connection: the server stops decoding. No first byte after ``WAIT_NOTICE_S``:
  ``on_wait(engine name)`` is called once (the window shows "waiting for <engine>"); nothing blocks.
- ``batch`` (a document summary's map-reduce) runs its items as parallel requests (``batch.RemoteBatch``).
- Capabilities: ``batch`` only; none of the local KV ones (files, prefill): the server keeps its own cache.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from hisho.core.engine.ops import BatchGenerate, StateLoad, StateSave
from hisho.core.engine.protocol import ErrorKind, GenerationResult, LoadParams, Sampling
from hisho.core.engine.seam import Capability
from hisho.core.remote.batch import RemoteBatch
from hisho.core.remote.http import Endpoint, RemoteError, SSEStream, call
from hisho.core.remote.probe import ServerInfo, probe
from hisho.core.remote.slots import SlotKeeper

log = logging.getLogger("hisho.remote")

WAIT_NOTICE_S = 5.0
LLAMA_KINDS = ("llama.cpp", "llama-cpp-python")


class RemoteStream:
    """One streaming request to the server (``TokenStream``)."""

    def __init__(self, engine: RemoteEngine, path: str, body: dict[str, Any],
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
            for ev in self._sse:
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


class RemoteEngine:
    """The ``Engine`` protocol over HTTP (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, *, slot: int = 0, slot_min_tokens: int | None = None) -> None:
        self.endpoint = endpoint
        self.info = ServerInfo()
        self.model = ""
        self.on_wait: Callable[[str], None] | None = None
        self.last_reply: GenerationResult | None = None   # the last chat reply's figures (the window shows the hit)
        self._slot, self._slot_min = slot, slot_min_tokens
        self.slots: SlotKeeper | None = None
        self._load_info: dict[str, Any] = {}
        self._params: LoadParams | None = None

    @property
    def name(self) -> str:
        return self.endpoint.name

    # ----- Engine: identity ----------------------------------------------------------------------------

    @property
    def engine_info(self) -> dict[str, Any]:
        return {"remote": True, "engine": self.name, "url": self.endpoint.root, "kind": self.info.kind,
                "version": self.info.version}

    @property
    def load_info(self) -> dict[str, Any]:
        return self._load_info

    @property
    def load_params(self) -> LoadParams | None:
        return self._params

    @property
    def capabilities(self) -> frozenset[str]:
        return frozenset({Capability.BATCH.value})

    @property
    def pid(self) -> int | None:
        return None

    @property
    def restarts(self) -> int:
        return 0

    def load(self, params: LoadParams) -> dict[str, Any]:
        info = probe(self.endpoint)
        if info.error:
            raise RemoteError(info.error)
        if not info.models:
            raise RemoteError(f"{self.name} ({self.endpoint.root}) serves no model")
        wanted = params.model_path
        if wanted and wanted not in info.models:
            raise RemoteError(f"{self.name} has no model {wanted!r} (it serves {', '.join(info.models[:5])})")
        self.info, self.model, self._params = info, wanted or info.models[0], params
        self.slots = None
        if info.slot_save:
            self.slots = SlotKeeper(self.endpoint, self._slot,
                                    **({"min_tokens": self._slot_min} if self._slot_min is not None else {}))
        self._load_info = {"n_ctx": info.n_ctx or params.n_ctx, "n_ctx_reported": bool(info.n_ctx),
                           "model": self.model, "engine": self.name, "kind": info.kind,
                           "version": info.version, "remote": True, "slot_save": info.slot_save}
        return self._load_info

    def unload(self) -> None:
        self._load_info = {}

    def close(self, timeout: float = 5.0) -> None:
        self._load_info = {}

    def kill(self) -> None:
        self._load_info = {}

    # ----- generation ----------------------------------------------------------------------------------

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        body: dict[str, Any] = {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens}
        if s.seed >= 0:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        kind = self.info.kind
        if kind in LLAMA_KINDS:
            body.update(top_k=s.top_k, min_p=s.min_p, repeat_penalty=s.repeat_penalty)
        if kind == "llama.cpp":
            body.update(repeat_last_n=s.repeat_last_n, cache_prompt=True, ignore_eos=s.ignore_eos)
            if self.slots is not None:
                body["id_slot"] = self._slot
        elif kind in ("vllm", "sglang"):
            body.update(top_k=s.top_k, min_p=s.min_p, repetition_penalty=s.repeat_penalty,
                        ignore_eos=s.ignore_eos)
        return body

    def generate(self, *, messages: list[dict[str, str]] | None = None, prompt: str | None = None,
                 tokens: list[int] | None = None, sampling: Sampling | None = None,
                 seq: int = 0) -> RemoteStream:
        if not self.model:
            raise RemoteError(f"{self.name}: no model chosen yet")
        body: dict[str, Any] = {"model": self.model, "stream": True, **self._sampling(sampling or Sampling())}
        if self.info.kind != "llama-cpp-python":
            body["stream_options"] = {"include_usage": True}
        if messages is not None:
            body["messages"] = [{"role": m["role"], "content": m["content"]} for m in messages]
            if self.slots is not None:
                self.slots.ensure(self.model, body["messages"][:-1])
            return RemoteStream(self, "/v1/chat/completions", body, body["messages"])
        if prompt is not None:
            body["prompt"] = prompt
            return RemoteStream(self, "/v1/completions", body, None)
        raise RemoteError(f"{self.name}: a remote engine takes messages or a prompt, not token ids")

    def _after_reply(self, history: list[dict[str, str]], text: str, result: GenerationResult) -> None:
        if self.slots is not None and text:
            held = [*history, {"role": "assistant", "content": text}]
            got = self.slots.save(self.model, held, result.prompt_tokens + result.completion_tokens)
            if got is not None:
                result.extra["slot_saved"] = got

    def batch(self, request: BatchGenerate) -> RemoteBatch:
        if not self.model:
            raise RemoteError(f"{self.name}: no model chosen yet")
        return RemoteBatch(self, request)

    # ----- tokens --------------------------------------------------------------------------------------

    def tokenize(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None,
                 add_generation_prompt: bool = True, special: bool = True) -> list[int]:
        kind = self.info.kind
        if kind == "llama.cpp":
            if messages is not None:
                text = str(call(self.endpoint, "POST", "/apply-template", {"messages": messages}).get("prompt", ""))
            got = call(self.endpoint, "POST", "/tokenize", {"content": text or "", "parse_special": special,
                                                             "add_special": messages is None})
            return [int(t) for t in got.get("tokens", [])]
        if kind in ("vllm", "sglang"):
            req: dict[str, Any] = {"model": self.model}
            req.update({"messages": messages, "add_generation_prompt": add_generation_prompt}
                       if messages is not None else {"prompt": text or ""})
            return [int(t) for t in call(self.endpoint, "POST", "/tokenize", req).get("tokens", [])]
        if kind == "llama-cpp-python":
            joined = text if messages is None else "\n".join(m["content"] for m in messages)
            got = call(self.endpoint, "POST", "/extras/tokenize", {"input": joined or "", "model": self.model})
            return [int(t) for t in got.get("tokens", [])]
        raise RemoteError(f"{self.name} does not tokenize for clients")

    def count_tokens(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None) -> int:
        try:
            return len(self.tokenize(text, messages=messages))
        except RemoteError as exc:
            if exc.status is None and "does not tokenize" not in str(exc):
                raise                                   # the server is down: say so, do not guess
            joined = text if messages is None else "\n".join(m["content"] for m in messages)
            return len((joined or "").encode("utf-8")) // 3 + 4 * len(messages or [])  # an upper-ish guess

    def detokenize(self, tokens: list[int]) -> str:
        if self.info.kind in ("llama.cpp", "vllm", "sglang"):
            return str(call(self.endpoint, "POST", "/detokenize", {"tokens": tokens, "model": self.model})
                       .get("content") or "")
        raise RemoteError(f"{self.name} does not detokenize for clients")

    # ----- local-only operations (no capability: callers never reach these) ------------------------------

    def _local_only(self, what: str) -> RemoteError:
        err = RemoteError(f"{self.name}: {what} runs on the local engine only")
        err.kind = ErrorKind.BAD_REQUEST
        return err

    def seq_rm(self, seq: int = 0, start: int = 0) -> int:
        raise self._local_only("sequence removal")

    def prefill(self, tokens: list[int], seq: int = 0) -> dict[str, Any]:
        raise self._local_only("prefill")

    def kv_info(self, prepare_bytes: int = 0) -> dict[str, Any]:
        raise self._local_only("KV files")

    def state_save(self, request: StateSave) -> RemoteStream:
        raise self._local_only("KV files")

    def state_load(self, request: StateLoad) -> dict[str, Any]:
        raise self._local_only("KV files")

    def kv_flush(self, timeout: float = 30.0) -> bool:
        return True
