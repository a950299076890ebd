"""The engine's wire protocol: typed parameter records shared by the client (core) and the engine process.

Transport: one JSON object per line over the child's stdin (requests) and a private copy of its stdout (events).
Requests are typed records (``hisho.core.engine.ops``: one ``Request`` subclass per op, in ``REQUESTS``) carrying the
values defined here (``LoadParams``, ``Sampling``); streaming ops answer with any number of "token" events and
then one "done" event (``GenerationResult``), the others with exactly one "result"; any op may instead end with
one "error" event whose ``kind`` is an ``ErrorKind``. Before any of those, an op that reads a prompt longer than
one batch (``generate``, ``prefill``) sends "progress" events between batches (``Progress``). Both sides check ``PROTOCOL_VERSION`` at ``hello``. See
docs/engine-protocol.md for the full contract. Nothing here imports llama_cpp.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# The one list of error kinds lives in core/errors.py, below the engine client; named here for the wire's users.
from hisho.core.errors import ErrorKind as ErrorKind

PROTOCOL_VERSION = 3  # checked at ``hello`` by both sides: a client and an engine from different builds refuse


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
    # llama.cpp's op_offload with some layers on a GPU: None until decided (planner/offload.py: a kept probe, else
    # the engine measures at load). With none offloaded it is always off (engine.lib.llama_setup.prompt_offload).
    op_offload: bool | None = None
    # The model's vision projector (an mmproj GGUF beside it); "" reads no images (docs/images.md).
    mmproj_path: str = ""

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
    # A GBNF grammar the reply must follow (structured output, tool-call arguments; docs/api.md "Tool calls").
    # ``grammar_schemas``: rule name -> JSON schema, turned into rules of that name by the engine (llama.cpp's own
    # converter) and added to ``grammar`` (alone, a schema named "root" is the whole grammar).
    # Lazy: free text until a trigger, constrained from there on. A trigger word that is one control token of
    # the vocabulary triggers on that token; other words, anywhere in the reply. Patterns are llama.cpp's lazy
    # patterns: matched against the whole reply so far, the constrained text starts at their first group.
    grammar: str = ""
    grammar_schemas: dict[str, Any] = field(default_factory=dict)
    grammar_lazy: bool = False
    grammar_triggers: list[str] = field(default_factory=list)
    grammar_patterns: list[str] = field(default_factory=list)

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
    raw_text: str = ""  # the reply with its special tokens shown (text drops control tokens: harmony's channels)
    # A reasoning model's reasoning, apart from ``text`` (the answer only; hisho.core.formats.reasoning), and
    # whether the reply ended while still reasoning (its token budget ran out before an answer began).
    reasoning: str = ""
    reasoning_unfinished: bool = False

    @classmethod
    def from_event(cls, ev: dict[str, Any]) -> GenerationResult:
        known = {"text", "prompt_tokens", "completion_tokens", "cached_tokens", "ttft_s", "decode_s",
                 "tokens_per_s", "stop_reason", "raw_text"}
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
            raw_text=str(ev.get("raw_text", "")),
        )


@dataclass(frozen=True)
class Progress:
    """How far a request is in reading its prompt (a "progress" event): ``done`` of ``total`` tokens to read
    (what the sequence already held is not counted). ``op`` is the request's op, ``id`` its request id."""

    id: int
    op: str
    done: int
    total: int

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total > 0 else 0.0

    @classmethod
    def from_event(cls, ev: dict[str, Any], op: str) -> Progress:
        return cls(int(ev.get("id", -1)), op, int(ev.get("done", 0)), int(ev.get("total", 0)))


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
