"""The engine's wire protocol: typed parameter records shared by the client (core) and the engine process.

Transport: one JSON object per line over the child's stdin (requests) and a private copy of its stdout (events).
Requests are typed records (``Request`` subclasses, one per op, in ``REQUESTS``); streaming ops answer with any
number of "token" events and then one "done" event, the others with exactly one "result"; any op may instead
end with one "error" event whose ``kind`` is an ``ErrorKind``. Both sides check ``PROTOCOL_VERSION`` at
``hello``. See docs/engine-protocol.md for the full contract. Nothing here imports llama_cpp.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar, TypeVar, cast

PROTOCOL_VERSION = 1  # checked at ``hello`` by both sides: a client and an engine from different builds refuse


class ErrorKind(str, Enum):
    """What an "error" event says went wrong (the one list; ``EngineError.kind`` is one of these)."""

    BAD_REQUEST = "bad_request"    # malformed request, unknown op: a bug in the caller
    PROTOCOL = "protocol"          # client and engine speak different protocol versions (a broken install)
    MODEL_LOAD = "model_load"      # the model file could not be loaded: the user's to fix
    NOT_LOADED = "not_loaded"      # generate/tokenize before load
    CONTEXT_FULL = "context_full"  # prompt (+ reply) does not fit n_ctx
    STATE = "state"                # a KV state could not be saved or restored
    CRASHED = "crashed"            # the engine process died (set by the client, never sent by the engine)
    REMOTE = "remote"              # a remote engine (OpenAI-compatible server) failed; the message says how
    INTERNAL = "internal"          # anything else (a bug); the message says what

    @classmethod
    def of(cls, value: object) -> ErrorKind:
        """The kind named by ``value``; INTERNAL for anything unknown (an engine newer than this client)."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.INTERNAL

    def __str__(self) -> str:
        return self.value


class BadRequest(ValueError):
    """A request that does not match its op's record (raised by ``from_wire``)."""

    kind = ErrorKind.BAD_REQUEST


@dataclass(frozen=True)
class LoadParams:
    """Everything that decides how a model is loaded. The client keeps the last one to restart with."""

    model_path: str
    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 0               # 0: physical cores
    n_threads_batch: int = 0         # 0: same as n_threads
    n_gpu_layers: int = 0
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"
    n_seq_max: int = 1
    kv_unified: bool = True
    swa_full: bool = False
    seed: int = 0
    use_mmap: bool | None = None     # None: map the file unless llama.cpp repacks weights (planner/repack.py)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoadParams:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Sampling:
    """Sampling for one reply. temperature 0 is greedy (and deterministic)."""

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64
    seed: int = -1                   # -1: random
    max_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False         # benchmarks only: always produce max_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sampling:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class GenerationResult:
    """What a finished streaming request reports (its "done" event): a reply's figures; ``extra`` holds an op's
    own fields (a KV save's chunks, a batch's timings)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    ttft_s: float
    decode_s: float
    tokens_per_s: float
    stop_reason: str
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_event(cls, ev: dict[str, Any]) -> GenerationResult:
        known = {"text", "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_s", "decode_s",
                 "tokens_per_s", "stop_reason"}
        return cls(
            text=ev.get("text", ""),
            prompt_tokens=int(ev.get("prompt_tokens", 0)),
            completion_tokens=int(ev.get("completion_tokens", 0)),
            cached_tokens=int(ev.get("cached_tokens", 0)),
            ttft_s=float(ev.get("ttft_s", 0.0)),
            decode_s=float(ev.get("decode_s", 0.0)),
            tokens_per_s=float(ev.get("tokens_per_s", 0.0)),
            stop_reason=str(ev.get("stop_reason", "")),
            extra={k: v for k, v in ev.items() if k not in known and k not in ("id", "ev")},
        )


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
    ``tokens`` or ``text`` (tokenize only). Also one item of a batch (with its own ``max_tokens``)."""

    messages: list[dict[str, str]] | None = None
    prompt: str | None = None
    tokens: list[int] | None = None
    text: str | None = None
    add_generation_prompt: bool = True
    special: bool = True
    max_tokens: int | None = None

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
    op = "generate"
    streaming = True
    seq: int = 0
    sampling: Sampling = field(default_factory=Sampling)


@dataclass(frozen=True)
class Serve(Prompt):
    """An API request (``hisho serve``): joins the engine's serving batch (engine/serving.py) as a parallel
    sequence. Events: "queued" (its position while every sequence is busy), "token"s, one "done". ``chunks`` /
    ``keep``: a KV restore (as in ``StateLoad``) of the prompt's longest saved prefix, done when it gets a
    sequence (the disk prompt cache); ``save_dir`` / ``save_tokens``: save the prompt's first ``save_tokens``
    tokens' KV there once prefilled (its own "saved" event)."""

    op = "serve"
    streaming = True
    sampling: Sampling = field(default_factory=Sampling)
    chunks: list[dict[str, Any]] | None = None
    keep: int = 0
    save_dir: str | None = None
    save_tokens: int = 0
    chunk_tokens: int = 0


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
OPS = frozenset(REQUESTS) | {"cancel"}  # cancel is handled by the engine's reader thread, never queued


def parse_request(message: dict[str, Any]) -> Request:
    """The typed record of a wire request; BadRequest for an unknown op or a field of the wrong shape."""
    op = str(message.get("op", ""))
    kind = REQUESTS.get(op)
    if kind is None:
        raise BadRequest(f"unknown op {op!r}")
    return kind.from_wire(message)


def check_protocol(theirs: object, side: str) -> None:
    """Raise ``ProtocolMismatch`` unless ``theirs`` (the other side's ``hello``) is this build's version."""
    if theirs != PROTOCOL_VERSION:
        raise ProtocolMismatch(f"the {side} speaks engine protocol {theirs!r}, this build speaks "
                               f"{PROTOCOL_VERSION}: reinstall Hisho so both come from one version")


class ProtocolMismatch(ValueError):
    kind = ErrorKind.PROTOCOL


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (what a KV cache can keep)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def encode(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def decode(line: bytes) -> dict[str, Any]:
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("protocol message is not a JSON object")
    return value
