"""The disk prompt cache: a prefix ``hisho serve`` saw before a restart is restored, not prefilled again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_a_follow_up_after_a_restart_reads_only_its_own_message(tmp_path: Path) -> None:
    """The reply is part of what is saved, as the next request renders it: the follow-up does not read it again."""
    home = tmp_path / "home"
    first = start_serve(home)
    try:
        r1 = chat(first.url, first.key, first.model, "Who writes the reports?")
        answer = r1.choices[0].message.content or ""
        assert r1.usage is not None and r1.usage.completion_tokens >= 8 and answer
    finally:
        stop_serve(first)
    second = start_serve(home)
    try:
        c = openai.OpenAI(base_url=second.url, api_key=second.key, max_retries=0, timeout=300)
        r2 = c.chat.completions.create(model=second.model, max_tokens=4, temperature=0, messages=[
            {"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who writes the reports?"},
            {"role": "assistant", "content": answer}, {"role": "user", "content": "And who checks them?"}])
        assert r2.usage is not None
        read = r2.usage.prompt_tokens - cached(r2)
        # Its own words, the end of its turn and the assistant header; the reply (8+ tokens) came from the file.
        assert 0 < read <= 14, read
    finally:
        stop_serve(second)


def test_the_save_threshold_is_the_new_tokens_cost() -> None:
    from hisho.api.cache import worth_saving

    assert not worth_saving(40, 0)          # a short first prompt: a prefill is cheaper than the file
    assert worth_saving(300, 0)
    assert worth_saving(40, 4000)           # a short follow-up of a long conversation: read at depth, dearer
    assert not worth_saving(0, 4000)


def test_a_branch_after_a_restart_restores_the_nearest_interval_on_a_window_model(tmp_path: Path) -> None:
    """``hisho serve`` saves one file per request (one KV stream per sequence: no scratch sequence to cut chunks),
    so on a sliding-window model it also saves the prefix at each kept interval checkpoint: a request that parts
    from an earlier one in the middle of a message restores the nearest one, with the answer of a fresh server."""
    from tests.fixtures.gguf_shapes import true_model

    model = str(true_model("gemma-3-tiny", "Q8_0"))
    lines = [f"Line {i}: the {('owl', 'fox', 'cat')[i % 3]} counts {i * 3} stars." for i in range(150)]
    long_q = [{"role": "user", "content": "\n".join(lines) + "\nWhich animal is on line 4?"}]
    branch = [{"role": "user", "content": "\n".join(lines[:100]) + "\nWhich animal is on line 7?"}]

    def ask(served: Any, messages: list[dict[str, str]]) -> openai.types.chat.ChatCompletion:
        c = openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)
        return c.chat.completions.create(model=served.model, max_tokens=12, temperature=0,
                                         messages=messages)  # type: ignore[arg-type]

    fresh = start_serve(tmp_path / "fresh", "--model", model, "--n-ctx", "4096")
    try:
        want = ask(fresh, branch)
        assert cached(want) == 0
    finally:
        stop_serve(fresh)
    home = tmp_path / "home"
    first = start_serve(home, "--model", model, "--n-ctx", "4096")
    try:
        r1 = ask(first, long_q)
        assert r1.usage is not None and r1.usage.prompt_tokens > 1600
    finally:
        stop_serve(first)
    second = start_serve(home, "--model", model, "--n-ctx", "4096")
    try:
        got = ask(second, branch)
        assert got.usage is not None and want.usage is not None
        # The snapshot at the mark before the divergence (marks every 128 tokens on a CPU load: not the one at
        # 1024 of 512-token marks), not a read from the start (nor the cut inside a message the window cannot
        # give back): what is read again is under one mark's worth plus the new question.
        read = got.usage.prompt_tokens - cached(got)
        assert cached(got) > 1024 and cached(got) % 128 == 0 and 0 < read < 128 + 24, (cached(got), read)
        assert got.choices[0].message.content == want.choices[0].message.content
    finally:
        stop_serve(second)


def test_replies_that_end_while_others_decode_are_kept_without_disturbing_them(tmp_path: Path) -> None:
    """Four saved conversations decoding side by side, each ending at another step: keeping one reply (reading
    what the next request renders for it) happens after every sequence sampled that step's logits, so the
    others go on (keeping it mid-step left them sampling outputs that were gone: the engine aborted)."""
    import threading

    served = start_serve(tmp_path / "home")
    try:
        out: dict[int, openai.types.chat.ChatCompletion] = {}

        def ask(i: int, n: int) -> None:
            c = openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0, timeout=300)
            out[i] = c.chat.completions.create(model=served.model, max_tokens=n, temperature=0, messages=[
                {"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Question {i}: who signs?"}])

        threads = [threading.Thread(target=ask, args=(i, n)) for i, n in enumerate((2, 10, 18, 26))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert sorted(out) == [0, 1, 2, 3]
        tokens = [r.usage.completion_tokens if r.usage else 0 for r in (out[i] for i in range(4))]
        assert tokens[0] == 2 and all(n > 2 for n in tokens[1:]), tokens   # the others went on after the first
        health = openai.OpenAI(base_url=served.url, api_key=served.key, max_retries=0).with_options(timeout=30)
        assert health.models.list().data                 # the same engine still answers
        assert served.proc.poll() is None
    finally:
        stop_serve(served)
    assert kv_files(tmp_path / "home")
