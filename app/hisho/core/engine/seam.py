"""The engine seam: what the chat, KV persistence, documents and benchmarks need from "something that runs a
model". No Qt, no llama_cpp.

Rules of use:
- Code above the engine (``hisho.core.conversations.chat``, ``kv_session``, ``documents``, the GUI, the CLI) depends on
  ``Engine``, never on ``EngineClient``; only the composition root (``hisho.core.services``) picks the
  implementation. ``hisho.core.engine.client.EngineClient`` (the local child process) is the first one; a
  remote OpenAI-compatible server or the API server's shared engine are the next (docs/architecture.md).
- ``capabilities`` says what an engine can keep beyond text in, tokens out: KV state files, prefill without
  sampling, parallel sequences in one batch. Callers check it before using those methods; an engine without
  ``KV_STATE`` simply gets no ``KVSession`` (chats prefill as they would after a cache miss).
- Every method may block (it waits for the engine) and may be called from any worker thread, never the GUI
  thread. ``TokenStream.cancel`` is the exception: any thread, returns at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from hisho.core.engine.ops import BatchGenerate, StateLoad, StateSave
from hisho.core.engine.protocol import GenerationResult, LoadParams, Progress, Sampling


class Capability(str, Enum):
    KV_STATE = "kv_state"     # state_save / state_load / kv_info: KV cache to and from files
    PREFILL = "prefill"       # evaluate a prompt without sampling (type-ahead, precomputed documents)
    BATCH = "batch"           # several prompts as parallel sequences of one context
    SEQUENCES = "sequences"   # more than one sequence id (KV saves use a scratch sequence)
    SERVE = "serve"           # ``serve``: requests join one long-lived batch as they come (hisho.api)


class TokenStream(Protocol):
    """One streaming request: iterate for token events (``{"text", "token"}``); ``result`` once it ends."""

    result: GenerationResult | None

    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def cancel(self) -> None: ...
    def collect(self) -> GenerationResult: ...


@runtime_checkable
class Engine(Protocol):
    """A model runner. See the module docstring for the rules of use."""

    @property
    def engine_info(self) -> dict[str, Any]: ...         # what ``hello`` reported (version, devices)
    @property
    def load_info(self) -> dict[str, Any]: ...           # what the last load reported (n_ctx, template, …)
    @property
    def load_params(self) -> LoadParams | None: ...
    @property
    def capabilities(self) -> frozenset[str]: ...
    @property
    def pid(self) -> int | None: ...                     # the local process (diagnostics); None if remote
    @property
    def restarts(self) -> int: ...                       # how often it was started again after dying

    def load(self, params: LoadParams) -> dict[str, Any]: ...
    def unload(self) -> None: ...
    def close(self, timeout: float = 5.0) -> None: ...
    def kill(self) -> None: ...                          # last resort at exit: stop now, whatever runs

    def generate(self, *, messages: list[dict[str, str]] | None = None, prompt: str | None = None,
                 tokens: list[int] | None = None, sampling: Sampling | None = None,
                 seq: int = 0, template_kwargs: dict[str, Any] | None = None) -> TokenStream: ...
    def batch(self, request: BatchGenerate) -> TokenStream: ...
    def tokenize(self, text: str | None = None, *, messages: list[dict[str, Any]] | None = None,
                 add_generation_prompt: bool = True, special: bool = True,
                 tools: list[dict[str, Any]] | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> list[int]: ...
    def count_tokens(self, text: str | None = None, *, messages: list[dict[str, str]] | None = None) -> int: ...
    def detokenize(self, tokens: list[int]) -> str: ...

    # Sequences and KV state (Capability.SEQUENCES / PREFILL / KV_STATE).
    def seq_rm(self, seq: int = 0, start: int = 0) -> int: ...
    def prefill(self, tokens: list[int], seq: int = 0) -> dict[str, Any]: ...
    def kv_info(self, prepare_bytes: int = 0) -> dict[str, Any]: ...
    def state_save(self, request: StateSave) -> TokenStream: ...
    def state_load(self, request: StateLoad) -> dict[str, Any]: ...
    def kv_flush(self, timeout: float = 30.0) -> bool: ...

    # How far the engine is in reading a prompt (None when it reads none it reports on), and stopping the
    # request that reports it (``Progress.id``): any thread, at once.
    def progress(self) -> Progress | None: ...
    def cancel(self, req_id: int) -> None: ...
    def cancel_load(self) -> bool: ...                   # stop a load in flight (any thread); False: none runs
