"""A reasoning model's chat through the engine (``hisho.bench.reasoning.chat``): the reply's thinking is told
apart from its answer, the next turn's prompt follows the model's own template (Qwen3's, the R1 distills' and
GPT-OSS's drop earlier reasoning), and the KV reuse stays exact: after each turn the greedy continuation from the
cache equals a fresh prefill of the same rendered prompt, and the turn reads no more than its new message, the
last answer and the template's markup between them.

Random weights do not think, so each reply is forced through the engine (test hook ``force_text``): the KV then
holds exactly what a real reasoning reply would. The models are true-shape tiny files of each memory type with
the bundled tokenizer and a real reasoning template (tests/fixtures/templates)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hisho.bench import reasoning as bench
from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.formats.reasoning import ReasoningKind

# Each memory type (dense, sliding window, short-convolution hybrid) with each template.
CASES = [(shape, name) for shape in ("llama-tiny", "gemma-3-tiny", "lfm2-tiny") for name in bench.TEMPLATES]


@pytest.fixture(scope="module", params=CASES, ids=[f"{s}-{n.split('-')[0]}" for s, n in CASES])
def reasoning_engine(request: pytest.FixtureRequest) -> Iterator[tuple[EngineClient, str]]:
    shape, name = request.param
    template = (bench.TEMPLATE_DIR / name).read_text(encoding="utf-8")
    path = model_file(shape, "Q4_0", chat_template=template)
    client = EngineClient(test_hooks=True)
    # small slices: a prompt is read in several, as a long one is at the default n_batch
    client.load(LoadParams(model_path=str(path), n_ctx=4096, n_batch=64, n_ubatch=64))
    yield client, name
    client.close()


def test_a_reasoning_template_is_detected(reasoning_engine: tuple[EngineClient, str]) -> None:
    client, name = reasoning_engine
    fmt = client.reasoning
    if name.startswith("openai-gpt-oss"):
        assert fmt.kind is ReasoningKind.HARMONY and fmt.efforts == ("low", "medium", "high")
    elif name.startswith("Qwen"):
        assert fmt.kind is ReasoningKind.THINK and fmt.toggle == "enable_thinking" and not fmt.starts_inside
    else:
        assert fmt.kind is ReasoningKind.THINK and fmt.starts_inside and fmt.toggle == ""


def test_five_reasoning_turns_reuse_exactly_and_read_only_what_is_new(
        reasoning_engine: tuple[EngineClient, str]) -> None:
    client, name = reasoning_engine
    turns = bench.chat(client)
    assert all(t["answer_only"] and t["reasoning_apart"] for t in turns), turns
    assert all(t["exact"] for t in turns), f"{name}: reused KV changed the continuation: {turns}"
    for t in turns[1:]:
        assert t["reused"] > 0 and t["read"] <= t["new_tokens"] + 2, (name, turns)
