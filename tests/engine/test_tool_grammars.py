"""Each family's lazy tool-call grammar (hisho.core.formats.tools) in the engine's gate (hisho.engine.decode.grammar), on a
vocabulary that holds the family's special tokens: a "model" that writes the family's call marker and then
anything at all (random logits) still ends up with a call that parses and fits its tool's schema; before the
marker nothing is constrained. No decoding: the logits are made up, the sampler and the grammar are real."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.formats import tools as T
from hisho.engine.decode.sampler import Sampler
from hisho.engine.model.runtime import Runtime
from tests.fixtures.tool_models import rewrite

pytestmark = pytest.mark.timeout(600)
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}
# What the model writes before anything is constrained: free text, then the family's marker.
OPENINGS = {
    "hermes": "I will check. <tool_call>",
    "llama3": '{"name": "',
    "mistral": "[TOOL_CALLS]",
    "harmony": "<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant<|channel|>commentary to=",
}


@pytest.fixture(scope="module", params=sorted(OPENINGS))
def family_rt(request: pytest.FixtureRequest, default_model_path: Path,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Runtime]]:
    path = rewrite(default_model_path, tmp_path_factory.mktemp("fam") / f"{request.param}.gguf", request.param)
    rt = Runtime.load(LoadParams(model_path=str(path), n_ctx=256))
    yield request.param, rt
    rt.close()


def drive(rt: Runtime, sampling: Sampling, opening: str, seed: int, steps: int = 400) -> str:
    """The raw text a sampler with ``sampling`` draws from random logits, the opening's tokens made certain."""
    sampler = Sampler(rt, sampling)
    assert sampler.gate is not None
    rng = np.random.default_rng(seed)
    first = rt.tokenize(opening, parse_special=True)
    out: list[int] = []
    try:
        for i in range(steps):
            logits = rng.normal(0.0, 2.0, rt.n_vocab).astype(np.float32)
            if i < len(first):
                logits[first[i]] = 1000.0
            token = sampler.gate.sample(logits)
            if llama_cpp.llama_vocab_is_eog(rt.vocab, token):
                break
            out.append(token)
    finally:
        sampler.free()
    return rt.raw_text(out)


def test_lazy_call_grammar_after_the_marker(family_rt: tuple[str, Runtime]) -> None:
    family, rt = family_rt
    request = T.grammar_for(family, [TOOL], required=False, parallel=False)
    sampling = Sampling(temperature=1.0, seed=0, grammar=request.grammar, grammar_schemas=request.schemas,
                        grammar_lazy=request.lazy, grammar_triggers=list(request.triggers),
                        grammar_patterns=list(request.patterns))
    for seed in range(3):
        raw = drive(rt, sampling, OPENINGS[family], seed)
        assert raw.startswith(OPENINGS[family])  # nothing before the marker was held back or changed
        calls = T.parse(family, raw).calls
        assert [c.name for c in calls] == ["get_weather"], raw
        args = json.loads(calls[0].arguments)
        assert set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"), raw
        assert isinstance(args["city"], str) and len(args["city"]) <= 10, raw


def test_without_the_marker_nothing_is_constrained(family_rt: tuple[str, Runtime]) -> None:
    family, rt = family_rt
    request = T.grammar_for(family, [TOOL], required=False)
    sampling = Sampling(temperature=1.0, seed=0, grammar=request.grammar, grammar_schemas=request.schemas,
                        grammar_lazy=True, grammar_triggers=list(request.triggers),
                        grammar_patterns=list(request.patterns))
    text = "Paris is sunny today"
    raw = drive(rt, sampling, text, seed=5, steps=len(rt.tokenize(text)))
    assert raw == text
