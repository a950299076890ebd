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
- ``cancel()`` closes the connection: the server stops decoding. No first byte after ``stream.WAIT_NOTICE_S``:
  ``on_wait(engine name)`` is called once (the window shows "waiting for <engine>"); nothing blocks.
- ``batch`` (a document summary's map-reduce) runs its items as parallel requests (``batch.RemoteBatch``).
- Capabilities: ``batch`` only; none of the local KV ones (files, prefill): the server keeps its own cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hisho.core.engine.ops import BatchGenerate, StateLoad, StateSave
from hisho.core.engine.protocol import ErrorKind, GenerationResult, LoadParams, Progress, Sampling
from hisho.core.engine.seam import Capability
from hisho.core.remote.batch import RemoteBatch
from hisho.core.remote.http import Endpoint, RemoteError, call
from hisho.core.remote.probe import ServerInfo, probe
from hisho.core.remote.slots import SlotKeeper
from hisho.core.remote.stream import RemoteStream

log = logging.getLogger("hisho.remote")

LLAMA_KINDS = ("llama.cpp", "llama-cpp-python")


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
                 seq: int = 0, template_kwargs: dict[str, Any] | None = None) -> RemoteStream:
        if not self.model:
            raise RemoteError(f"{self.name}: no model chosen yet")
        body: dict[str, Any] = {"model": self.model, "stream": True, **self._sampling(sampling or Sampling())}
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs  # llama-server's and vLLM's name for them
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

    def tokenize(self, text: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 add_generation_prompt: bool = True, special: bool = True,
                 tools: list[dict[str, Any]] | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> list[int]:
        kind = self.info.kind
        if tools is not None or template_kwargs:
            raise RemoteError(f"{self.name}: tokenizing with tools or template settings is not supported")
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

    def progress(self) -> Progress | None:
        """A remote server reports no prompt-reading progress (the window says what it waits for instead)."""
        return None

    def cancel(self, req_id: int) -> None:
        """Nothing to stop by id: a remote request is stopped through its stream (it reports no progress)."""

    def cancel_load(self) -> bool:
        """A remote "load" is one short probe of the server: nothing to stop."""
        return False

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
