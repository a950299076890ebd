"""``hisho bench reasoning``: what a reasoning model's chat reads per turn, and whether reuse stays exact.

A five-turn chat on a true-shape model (random weights, the bundled tokenizer) that speaks a real reasoning
template (``--template FILE``; by default the checkout's tests/fixtures/templates: Qwen3's, the DeepSeek-R1
distills' and GPT-OSS's). Random weights do not think, so each reply is forced through the engine (its test hook
``force_text``, turned on for this bench's own engine): the cells then hold exactly what a real reasoning reply
would. Per turn: the prompt's tokens, those reused from the cache, those read, and the bound the turn must keep
(the last answer, the new message and the template's markup between them: ``new_tokens``); after each turn the
greedy continuation of the next prompt from the cache is compared with a fresh prefill of it (``exact``).

The templates drop earlier reasoning from the rendered history, so turn N+1 is not turn N's tokens plus the new
message (docs/reasoning.md): the figure that matters is ``read`` against ``new_tokens``, per memory type.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hisho.bench.shapes import MEMORY_TYPES, model_file
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.core.formats.reasoning import ReasoningKind

QUESTIONS = ("What is the capital of France?", "And of Italy?", "Which is bigger?", "Name a river in each.",
             "Thanks, summarize.")
GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=8)
FORCED = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=400)
TEMPLATE_DIR = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "templates"
TEMPLATES = ("Qwen-Qwen3.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "openai-gpt-oss-120b.jinja")


def reply_for(turn: int) -> tuple[str, str]:
    """Turn ``turn``'s forced reasoning and answer."""
    return (f"The user asks question {turn}. I recall facts and check them twice before answering.",
            f"Answer {turn}: here is what I found, in a few words.")


def forced_text(client: EngineClient, thought: str, answer: str) -> str:
    """The reply a real model of the loaded format writes (its end-of-generation token is sampled, never decoded
    into the cells, so it is not part of the text)."""
    fmt = client.reasoning
    if fmt.kind is ReasoningKind.HARMONY:
        return (f"<|channel|>analysis<|message|>{thought}<|end|>"
                f"<|start|>assistant<|channel|>final<|message|>{answer}")
    return ("" if fmt.starts_inside else "<think>\n") + f"{thought}\n</think>\n\n{answer}"


def _greedy(client: EngineClient, tokens: list[int]) -> list[int]:
    result = client.generate(tokens=tokens, sampling=GREEDY).collect()
    return [int(t) for t in result.extra.get("tokens") or []]


def chat(client: EngineClient, turns: int = len(QUESTIONS)) -> list[dict[str, Any]]:
    """The five-turn forced chat on ``client`` (a loaded engine with test hooks on): one row per turn."""
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are terse."}]
    opened = len(client.tokenize("<think>\n")) if client.reasoning.starts_inside else 0
    rows: list[dict[str, Any]] = []
    for i, question in enumerate(QUESTIONS[:turns]):
        messages.append({"role": "user", "content": question})
        prompt = client.tokenize(messages=messages)
        thought, answer = reply_for(i)
        forced = forced_text(client, thought, answer)
        result = client.generate(tokens=prompt, sampling=FORCED, test_hooks={"force_text": forced}).collect()
        # What may be read: everything from where the last reply began (its prompt's end; a template that
        # opened the reasoning in its generation prompt renders that turn without those few tokens).
        before = len(client.tokenize(messages=messages[:-2])) - opened if i else 0
        row: dict[str, Any] = {"turn": i + 1, "prompt_tokens": result.prompt_tokens,
                               "reused": result.cached_tokens, "read": result.prompt_tokens - result.cached_tokens,
                               "new_tokens": result.prompt_tokens - before,
                               "answer_only": result.text == answer, "reasoning_apart": result.reasoning == thought}
        messages.append({"role": "assistant", "content": result.text, "reasoning_content": result.reasoning})
        probe = client.tokenize(messages=[*messages, {"role": "user", "content": "Go on."}])
        from_cache = _greedy(client, probe)
        client.seq_rm(0, 0)
        row["exact"] = from_cache == _greedy(client, probe)
        # the cells back where the chat left them, as the next send (or a restore) would find them
        client.generate(tokens=prompt, sampling=FORCED, test_hooks={"force_text": forced}).collect()
        rows.append(row)
    return rows


def run_one(shape: str, template: Path) -> dict[str, Any]:
    path = model_file(shape, "Q4_0", chat_template=template.read_text(encoding="utf-8"))
    with EngineClient(test_hooks=True) as client:
        client.load(LoadParams(model_path=str(path), n_ctx=4096))
        turns = chat(client)
        fmt = client.reasoning.to_dict()
    later = turns[1:]
    return {"shape": shape, "template": template.name, "format": fmt, "turns": turns,
            "read_within_new": all(t["read"] <= t["new_tokens"] + 2 for t in later),
            "read_tokens": sum(t["read"] for t in later), "new_tokens": sum(t["new_tokens"] for t in later),
            "prompt_tokens": sum(t["prompt_tokens"] for t in later),
            "exact": all(t["exact"] for t in turns)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    templates = [Path(args.model)] if args.model and args.model.endswith(".jinja") else \
        [TEMPLATE_DIR / name for name in TEMPLATES]
    missing = [str(t) for t in templates if not t.is_file()]
    if missing:
        from hisho.core.errors import UserError

        raise UserError(f"no chat template at {', '.join(missing)} (give one with --model FILE.jinja)")
    shapes = [small for small, _full in MEMORY_TYPES.values()]
    rows = [run_one(shape, t) for t in templates for shape in dict.fromkeys(shapes)]
    return {"rows": rows, "exact": all(r["exact"] for r in rows),
            "read_within_new": all(r["read_within_new"] for r in rows)}
