"""The disk prompt cache: a prefix ``hisho serve`` saw before a restart is restored, not prefilled again."""

from __future__ import annotations

from pathlib import Path

import openai

from hisho.core.kv.format import SUFFIX
from tests.api.conftest import start_serve, stop_serve

SYSTEM = "You are a careful assistant. Here is the project handbook.\n" + "\n".join(
    f"Rule {i}: every report names its author, its date and the figures it measured." for i in range(30))


def kv_files(home: Path) -> list[Path]:
    return [p for p in home.rglob(f"*{SUFFIX}") if p.is_file()]


def chat(url: str, key: str, model: str, question: str) -> openai.types.chat.ChatCompletion:
    c = openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=300)
    return c.chat.completions.create(model=model, max_tokens=12, temperature=0, messages=[
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])


def cached(r: openai.types.chat.ChatCompletion) -> int:
    assert r.usage is not None and r.usage.prompt_tokens_details is not None
    return int(r.usage.prompt_tokens_details.cached_tokens or 0)


def test_prefix_reused_across_a_server_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = start_serve(home)
    try:
        r1 = chat(first.url, first.key, first.model, "Who writes the reports?")
        assert r1.usage is not None and r1.usage.prompt_tokens > 500 and cached(r1) == 0
    finally:
        stop_serve(first)
    assert kv_files(home), "the prompt's KV was not saved"
    second = start_serve(home)
    try:
        r2 = chat(second.url, second.key, second.model, "Who writes the reports?")
        assert r2.usage is not None and cached(r2) == r2.usage.prompt_tokens - 1  # only the last token re-read
        assert r2.choices[0].message.content == r1.choices[0].message.content
        # Another question on the same handbook: the shared prefix comes from the file too (a fresh sequence).
        other = chat(second.url, second.key, second.model, "What must a report name?")
        assert cached(other) > 500
    finally:
        stop_serve(second)


def test_short_prompts_are_not_saved(tmp_path: Path) -> None:
    home = tmp_path / "home"
    served = start_serve(home)
    try:
        c = openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)
        c.chat.completions.create(model=served.model, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    finally:
        stop_serve(served)
    assert kv_files(home) == []
