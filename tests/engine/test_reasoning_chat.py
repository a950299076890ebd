"""A reasoning model's chat through the engine: the reply's thinking is told apart from its answer, the next turn's
prompt follows the model's own template (Qwen3's and the R1 distills' drop earlier reasoning), and the KV reuse
stays exact: after each turn, the greedy continuation from the cache equals a fresh prefill of the same rendered
prompt, and the turn reads no more than its new message and the last answer.

Random weights do not think, so each reply is forced through the engine (test hook ``force_text``): the KV then
holds exactly what a real reasoning reply would. The model is a true-shape tiny llama with the bundled tokenizer
(which has ChatML's markers) and a real reasoning template (tests/fixtures/templates)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.bench.shapes import model_file
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.formats.reasoning import ReasoningKind

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "templates"
GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=8)
QUESTIONS = ["What is the capital of France?", "And of Italy?", "Which is bigger?", "Name a river in each.",
             "Thanks, summarize."]


def _reply(i: int) -> tuple[str, str]:
    thought = f"The user asks question {i}. I recall facts and check them twice before answering."
    return thought, f"Answer {i}: here is what I found, in a few words."


# Each memory type (dense, sliding window, short-convolution hybrid) with each template.
CASES = [(shape, name) for shape in ("llama-tiny", "gemma-3-tiny", "lfm2-tiny")
         for name in ("Qwen-Qwen3.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{s}-{n.split('-')[0]}" for s, n in CASES])
def reasoning_engine(request: pytest.FixtureRequest) -> Iterator[tuple[EngineClient, str]]:
    shape, name = request.param
    template = (TEMPLATES / name).read_text(encoding="utf-8")
    path = model_file(shape, "Q4_0", chat_template=template)
    client = EngineClient(test_hooks=True)
    client.load(LoadParams(model_path=str(path), n_ctx=4096, n_batch=64, n_ubatch=64))
    yield client, name
    client.close()


def _greedy(client: EngineClient, tokens: list[int]) -> list[int]:
    result = client.generate(tokens=tokens, sampling=GREEDY).collect()
    return list(result.extra.get("tokens") or client.tokenize(result.text))


def test_a_reasoning_template_is_detected(reasoning_engine: tuple[EngineClient, str]) -> None:
    client, name = reasoning_engine
    fmt = client.reasoning
    assert fmt.kind is ReasoningKind.THINK
    if name.startswith("Qwen"):
        assert fmt.toggle == "enable_thinking" and not fmt.starts_inside
    else:
        assert fmt.starts_inside and fmt.toggle == ""


def test_five_reasoning_turns_reuse_exactly_and_read_only_what_is_new(
        reasoning_engine: tuple[EngineClient, str]) -> None:
    client, name = reasoning_engine
    opens = not client.reasoning.starts_inside
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are terse."}]
    read: list[int] = []
    for i, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        prompt = client.tokenize(messages=messages)
        thought, answer = _reply(i)
        forced = ("<think>\n" if opens else "") + f"{thought}\n</think>\n\n{answer}"
        result = client.generate(tokens=prompt, sampling=Sampling(temperature=0.0, max_tokens=200),
                                 test_hooks={"force_text": forced}).collect()
        assert result.text == answer, "the answer holds no reasoning"
        assert result.reasoning == thought
        read.append(result.prompt_tokens - result.cached_tokens)
        if i:
            # What this turn read: the last answer (the template rewrote that turn without its reasoning), the
            # new message and the template's markup between them; never the conversation before: the cells up
            # to where the last reply began (its prompt) are all reused.
            # (A template that opened the reasoning in its generation prompt renders that turn without it: those
            # few tokens are not the new prompt's.)
            asked_before = client.tokenize(messages=messages[:-2])
            opened = len(client.tokenize("<think>\n")) if client.reasoning.starts_inside else 0
            assert read[-1] <= len(prompt) - len(asked_before) + opened + 2, (name, read)
        messages.append({"role": "assistant", "content": answer, "reasoning_content": thought})
        # Exactness: the next prompt continued from this cache equals a fresh prefill of it.
        probe = client.tokenize(messages=[*messages, {"role": "user", "content": "Go on."}])
        from_cache = _greedy(client, probe)
        client.seq_rm(0, 0)
        fresh = _greedy(client, probe)
        assert from_cache == fresh, f"turn {i}: reused KV changed the continuation"
        # put the conversation back where the chat left it (as a restart or the next send would find it)
        client.generate(tokens=prompt, sampling=Sampling(temperature=0.0, max_tokens=200),
                        test_hooks={"force_text": forced}).collect()
