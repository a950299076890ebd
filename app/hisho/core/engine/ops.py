"""The engine's requests: one typed record per op, shared by the client (core) and the engine process.

``Request`` subclasses, listed in ``REQUESTS``; ``to_wire`` / ``from_wire`` are the only way a request becomes
JSON and back, and ``parse_request`` is how the engine reads one. The values they carry (``LoadParams``,
``Sampling``), the error kinds, the version check and the line transport are ``hisho.core.engine.protocol``'s; the
full contract is docs/engine-protocol.md. Nothing here imports llama_cpp.

Rules of use: a new op is a record here, added to ``REQUESTS`` (docs/architecture.md, "Where a new thing goes").
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar, cast

from hisho.core.engine.protocol import BadRequest, LoadParams, Sampling

# ----- requests: one record per op; the wire form is the record's fields, flat, next to "id" and "op" -----------

R = TypeVar("R", bound="Request")


@dataclass(frozen=True)
class Request:
    """A request to the engine. ``to_wire`` / ``from_wire`` are the only way requests become JSON and back:
    the client builds the record, the engine parses it before its handler runs (a wrong field is a
    ``bad_request`` error, not a KeyError deep in a handler). Fields left ``None`` are not sent."""

    op: ClassVar[str] = ""
    streaming: ClassVar[bool] = False  # answered by "token" events and one "done", else by one "result"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = value.to_dict() if isinstance(value, (Sampling, LoadParams)) else value
        return out

    @classmethod
    def from_wire(cls: type[R], data: dict[str, Any]) -> R:
        hints = _hints(cast(type, cls))
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name == "sampling" and isinstance(value, dict):
                value = Sampling.from_dict(value)
            if not _fits(value, hints[f.name]):
                raise BadRequest(f"{cls.op}: field {f.name!r} cannot be {value!r}")
            kwargs[f.name] = value
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise BadRequest(f"{cls.op}: {exc}") from None


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fits(value: Any, hint: Any) -> bool:
    """Does a JSON value fit a field's annotation (one level deep: int, float, str, bool, list, dict,
    a record, or a union of those)?"""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    target = origin or hint
    return isinstance(value, target) if isinstance(target, type) else True


@dataclass(frozen=True)
class Prompt(Request):
    """What to run: exactly one of ``messages`` (the model's chat template), ``prompt`` (raw text, BOS added),
    ``tokens`` or ``text`` (tokenize only). Also one item of a batch (with its own ``max_tokens``). With
    ``messages``: ``tools`` (OpenAI function schemas) and ``template_kwargs`` (``enable_thinking``, …) go to
    the chat template too; a message may carry ``tool_calls``, ``tool_call_id``, ``name``, ``reasoning_content``."""

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    tokens: list[int] | None = None
    text: str | None = None
    add_generation_prompt: bool = True
    special: bool = True
    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] | None = None

    def spec(self) -> dict[str, Any]:
        """The prompt fields only (what the engine's ``prompt_tokens`` reads)."""
        return {k: v for k, v in Prompt.to_wire(self).items() if k in _PROMPT_FIELDS}


_PROMPT_FIELDS = {f.name for f in fields(Prompt)}


@dataclass(frozen=True)
class Hello(Request):
    op = "hello"
    protocol: int | None = None  # the client sends PROTOCOL_VERSION; a request without it is a mismatch


@dataclass(frozen=True)
class Load(Request):
    op = "load"
    params: LoadParams = field(default_factory=lambda: LoadParams(model_path=""))

    def to_wire(self) -> dict[str, Any]:
        return self.params.to_dict()

    @classmethod
    def from_wire(cls: type[R], data: dict[str, Any]) -> R:
        if not data.get("model_path"):
            raise BadRequest("load: model_path is required")
        return cls(params=LoadParams.from_dict(data))  # type: ignore[call-arg]


@dataclass(frozen=True)
class Unload(Request):
    op = "unload"


@dataclass(frozen=True)
class Generate(Prompt):
    """``test_hooks`` (read only by an engine started with ``HISHO_ENGINE_TEST_HOOKS=1``):
    ``{"hold_after_tokens": N}`` holds the reply after its N-th token until it is cancelled or released
    (``release``), so a test can act while a reply is surely mid-way, whatever the machine's speed.
    ``{"force_text": TEXT}``: the reply is TEXT's tokens (special tokens parsed) instead of sampled ones, each
    decoded into the cells as a sampled one is, then it ends with stop_reason "eos" (tests of reply formats:
    random or small weights never write a tool call)."""

    op = "generate"
    streaming = True
    seq: int = 0
    sampling: Sampling = field(default_factory=Sampling)
    test_hooks: dict[str, Any] | None = None


@dataclass(frozen=True)
class Serve(Prompt):
    """An API request (``hisho serve``): joins the engine's serving batch (engine/decode/serving.py) as a parallel
    sequence. Events: "queued" (its position while every sequence is busy), "token"s, one "done". ``chunks`` /
    ``keep``: a KV restore (as in ``StateLoad``) of the prompt's longest saved prefix, done when it gets a
    sequence (the disk prompt cache); ``save_dir`` / ``save_tokens``: save the prompt's first ``save_tokens``
    tokens' KV there once prefilled (its own "saved" event); with ``messages`` beside ``tokens`` (what the tokens
    render), the save comes after the reply instead and keeps it as the next request renders it. ``max_prompt``: refuse (context_full) a prompt of
    more tokens (0: what a sequence holds). ``test_hooks``: as ``Generate``'s (``force_text`` only)."""

    op = "serve"
    streaming = True
    sampling: Sampling = field(default_factory=Sampling)
    max_prompt: int = 0
    chunks: list[dict[str, Any]] | None = None
    keep: int = 0
    save_dir: str | None = None
    save_tokens: int = 0
    chunk_tokens: int = 0
    test_hooks: dict[str, Any] | None = None


@dataclass(frozen=True)
class Tokenize(Prompt):
    op = "tokenize"


@dataclass(frozen=True)
class Prefill(Prompt):
    """Evaluate a prompt into sequence ``seq`` without sampling (type-ahead, precomputed document KV)."""

    op = "prefill"
    seq: int = 0


@dataclass(frozen=True)
class Detokenize(Request):
    op = "detokenize"
    tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SeqRm(Request):
    op = "seq_rm"
    seq: int = 0
    start: int = 0


@dataclass(frozen=True)
class BatchGenerate(Request):
    """Several prompts as parallel sequences (``items`` are ``Prompt`` wire dicts); ``n_ctx_per_seq`` > 0
    runs them in a job context with one KV stream per sequence."""

    op = "batch_generate"
    streaming = True
    items: list[dict[str, Any]] = field(default_factory=list)
    sampling: Sampling = field(default_factory=Sampling)
    n_parallel: int | None = None
    n_ctx_per_seq: int = 0

    def prompts(self) -> list[Prompt]:
        return [Prompt.from_wire(item) for item in self.items]


@dataclass(frozen=True)
class KvInfo(Request):
    op = "kv_info"
    prepare_bytes: int = 0


@dataclass(frozen=True)
class StateSave(Request):
    """Streaming: the engine answers "done" once the chunk files are written (docs/kv-format.md)."""

    op = "state_save"
    streaming = True
    dir: str = ""
    seq: int = 0
    chunk_tokens: int = 0
    test_hooks: dict[str, Any] | None = None


@dataclass(frozen=True)
class StateLoad(Request):
    op = "state_load"
    chunks: list[dict[str, Any]] = field(default_factory=list)
    seq: int = 0
    keep: int = 0
    tokens: list[int] | None = None
    map: bool = True


@dataclass(frozen=True)
class KvFlush(Request):
    op = "kv_flush"
    timeout: float = 30.0


@dataclass(frozen=True)
class Abort(Request):
    """Test hook: the engine dies the way a failed GGML_ASSERT does."""

    op = "abort"


@dataclass(frozen=True)
class Shutdown(Request):
    op = "shutdown"


REQUESTS: dict[str, type[Request]] = {r.op: r for r in (
    Hello, Load, Unload, Generate, Tokenize, Prefill, Detokenize, SeqRm, BatchGenerate, KvInfo, StateSave,
    StateLoad, KvFlush, Abort, Shutdown, Serve)}
# cancel (and the test hook release) are handled by the engine's reader thread, never queued
OPS = frozenset(REQUESTS) | {"cancel", "release"}


def parse_request(message: dict[str, Any]) -> Request:
    """The typed record of a wire request; BadRequest for an unknown op or a field of the wrong shape."""
    op = str(message.get("op", ""))
    kind = REQUESTS.get(op)
    if kind is None:
        raise BadRequest(f"unknown op {op!r}")
    return kind.from_wire(message)
