"""The engine protocol's typed records: every op round-trips through its wire form, bad requests are refused
with a clear kind, the version check, and one enum of error kinds."""

from __future__ import annotations

import pytest

from hisho.core.engine.ops import (
    REQUESTS,
    BatchGenerate,
    Generate,
    Hello,
    Load,
    Prompt,
    SeqRm,
    StateLoad,
    parse_request,
)
from hisho.core.engine.protocol import (
    PROTOCOL_VERSION,
    BadRequest,
    ErrorKind,
    LoadParams,
    ProtocolMismatch,
    Sampling,
    check_protocol,
)
from hisho.core.errors import EngineCrashed, EngineError


def test_every_op_round_trips_through_the_wire() -> None:
    samples = [
        Generate(messages=[{"role": "user", "content": "hi"}], seq=1, sampling=Sampling(max_tokens=3, stop=["x"])),
        Load(params=LoadParams(model_path="/m.gguf", n_ctx=1024, n_seq_max=2)),
        StateLoad(chunks=[{"key": "k", "path": "p"}], keep=5, tokens=[1, 2, 3], map=False),
        BatchGenerate(items=[Prompt(messages=[{"role": "user", "content": "a"}], max_tokens=9).to_wire()],
                      n_parallel=2, n_ctx_per_seq=512),
        Hello(protocol=PROTOCOL_VERSION),
    ]
    for req in samples:
        assert parse_request({"id": 1, "op": req.op, **req.to_wire()}) == req
    for op, kind in REQUESTS.items():
        assert kind.op == op and parse_request({"op": op, **({"model_path": "m"} if op == "load" else {})}).op == op


def test_prompt_spec_holds_only_what_was_given() -> None:
    gen = Generate(tokens=[5, 6], sampling=Sampling(max_tokens=1))
    assert gen.spec() == {"tokens": [5, 6], "add_generation_prompt": True, "special": True}
    assert [p.max_tokens for p in BatchGenerate(items=[{"prompt": "x", "max_tokens": 4}]).prompts()] == [4]


def test_bad_requests_are_refused_with_their_kind() -> None:
    with pytest.raises(BadRequest, match="unknown op 'nope'") as info:
        parse_request({"op": "nope"})
    assert info.value.kind is ErrorKind.BAD_REQUEST
    with pytest.raises(BadRequest, match="model_path"):
        parse_request({"op": "load"})
    for wrong in ({"op": "seq_rm", "seq": "0"}, {"op": "generate", "sampling": "greedy"},
                  {"op": "detokenize", "tokens": 5}, {"op": "state_load", "map": 1}):
        with pytest.raises(BadRequest, match="cannot be"):
            parse_request(wrong)
    # Unknown fields are ignored (an older engine meets a newer client's optional extra), known ones checked.
    assert parse_request({"op": "seq_rm", "seq": 1, "later_field": True}) == SeqRm(seq=1)


def test_version_check() -> None:
    check_protocol(PROTOCOL_VERSION, "engine")
    for other in (None, PROTOCOL_VERSION + 1, "1"):
        with pytest.raises(ProtocolMismatch, match="reinstall") as info:
            check_protocol(other, "engine")
        assert info.value.kind is ErrorKind.PROTOCOL


def test_error_kinds_come_from_one_enum() -> None:
    assert EngineError("context_full", "x").kind is ErrorKind.CONTEXT_FULL
    assert EngineError("something new", "x").kind is ErrorKind.INTERNAL  # a newer engine's kind: still an error
    assert EngineCrashed("gone").kind is ErrorKind.CRASHED and EngineCrashed("gone").kind == "crashed"
    assert f"{ErrorKind.MODEL_LOAD}" == "model_load"
