"""``hisho bench peers-resume --json``: Hisho and the two public projects that keep a llama-server conversation
across restarts (hearth-llm's proxy and stillwarm's sessions, each in front of upstream ``llama-server``) on the
same file and the same requests, in one run.

Per model and contestant, greedy replies of ``REPLY`` tokens:
1. cold: a conversation of about ``--tokens`` tokens (a system prompt, then turns that each give a part of a
   list, answered "Noted.") and a question, on an empty store;
2. restart (every process of the contestant), then resume: the same conversation with the contestant's own
   reply and a follow-up question;
3. restart, then branch: only the first ``BRANCH_SHARE`` of the conversation's turns (about 1,500 of 4,000
   tokens) and another question.
Each request of 2 and 3 is also asked of a fresh server of the same kind with nothing kept (a new HISHO_HOME for
Hisho, a new ``llama-server`` for both peers): ``*_speedup`` is its first-token time over the contestant's, and
``exact_*`` whether the replies are the same (spaces around them aside). ``disk_bytes``: the contestant's files
after the run; ``reused_tokens``: prompt tokens of the resume the server reports it did not compute (``cached_tokens`` from
Hisho, llama-server's ``timings.cache_n`` behind the peers), ``branch_reused_tokens`` the same for the branch.
A peer that is not installed gives a row with ``skipped`` (how to install it); ``--quick``: the bundled model and
a few hundred tokens (a smoke run that a test can afford). The box should be quiet: one repetition is taken.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hisho.bench.resume_systems import (
    Answer,
    FreshLlama,
    HearthSystem,
    HishoSystem,
    StillwarmSystem,
    missing_peer,
)
from hisho.bench.servers import NOT_BUILT, llama_server_binary

REPLY = 16
BRANCH_SHARE = 0.375   # the branch keeps this share of the conversation's turns (about 1.5K of 4K tokens)
COLOURS = ("red", "green", "blue", "yellow", "white")
TOKENS_PER_ITEM = 15   # "Item 17 is a green box holding 2 apples." with its share of the turn (SmolLM2: 14.7)
Messages = list[dict[str, str]]


def conversation(n_tokens: int) -> Messages:
    """A system prompt and user turns of 20 list items each (answered "Noted.") up to about ``n_tokens``."""
    msgs = [{"role": "system", "content": "You answer questions about the list the user gives."}]
    for start in range(0, max(20, n_tokens // TOKENS_PER_ITEM), 20):
        part = " ".join(f"Item {j} is a {COLOURS[j % 5]} box holding {j * 7 % 13} apples."
                        for j in range(start, start + 20))
        msgs += [{"role": "user", "content": f"More of the list: {part}"}, {"role": "assistant", "content": "Noted."}]
    return msgs


def requests(n_tokens: int) -> tuple[Messages, Callable[[str], Messages], Messages]:
    """The cold request, the resume request given the cold reply, and the branch request."""
    conv = conversation(n_tokens)
    cold = conv + [{"role": "user", "content": "What colour is item 17?"}]
    turns = (len(conv) - 1) // 2
    branch = conv[:1 + 2 * max(1, round(turns * BRANCH_SHARE))] + [
        {"role": "user", "content": "How many apples are in item 3?"}]

    def resume(reply: str) -> Messages:
        return cold + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And item 18?"}]

    return cold, resume, branch


def models(args: argparse.Namespace) -> list[Path]:
    from hisho.bench.model_ids import resolve
    from hisho.bench.real_models import gemma_270m
    from hisho.bench.shapes import model_file
    from hisho.core.models.store import bundled_model_path

    if args.model:
        path = resolve(args.model) or Path(args.model)
        return [path]
    if getattr(args, "quick", False):
        bundled = bundled_model_path()
        if bundled is None:
            raise SystemExit("hisho: error: the bundled default model is not installed")
        return [bundled]
    return [model_file("llama-3.2-1b", "Q4_0"), gemma_270m()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from hisho.core.units import padded_cells
    from hisho.engine.lib.llama_setup import physical_cores

    quick = bool(getattr(args, "quick", False))
    n_tokens = int(args.tokens or (400 if quick else 4000))
    n_ctx = padded_cells(n_tokens + 1024)
    threads = physical_cores()
    binary = llama_server_binary()
    out: dict[str, Any] = {"bench": "peers-resume", "tokens": n_tokens, "n_ctx": n_ctx, "threads": threads,
                           "reply_tokens": REPLY, "rows": []}
    with tempfile.TemporaryDirectory(prefix="hisho-bench-peers-resume-") as tmp:
        for model in models(args):
            folder = Path(tmp) / model.stem
            fresh: Baselines = {"hisho": _fresh_hisho(model, n_ctx, folder)}
            cache: dict[str, Answer] = {}
            if binary is not None:
                fresh["llama"] = FreshLlama(binary, model, n_ctx, threads, folder / "fresh-llama").ask
            for name in ("hisho", "hearth", "stillwarm"):
                out["rows"].append(_row(name, model, n_ctx, threads, folder / name, n_tokens, fresh, binary,
                                       cache))
    return out


def _fresh_hisho(model: Path, n_ctx: int, folder: Path) -> Callable[[Messages, int], Answer]:
    count = iter(range(1_000_000))

    def ask(messages: Messages, max_tokens: int) -> Answer:
        system = HishoSystem(model, n_ctx, folder / f"fresh-hisho-{next(count)}").start()
        try:
            return system.ask(messages, max_tokens)
        finally:
            system.stop()

    return ask


Baselines = dict[str, Callable[[Messages, int], Answer]]


def _reference(fresh: Baselines, cache: dict[str, Answer], which: str, messages: Messages) -> Answer:
    """The baseline's answer to ``messages``, asked once per model (both peers share llama-server's)."""
    key = which + repr(messages)
    if key not in cache:
        cache[key] = fresh[which](messages, REPLY)
    return cache[key]


def _row(name: str, model: Path, n_ctx: int, threads: int, folder: Path, n_tokens: int,
         fresh: Baselines, binary: Path | None, cache: dict[str, Answer]) -> dict[str, Any]:
    row: dict[str, Any] = {"system": name, "model": model.name}
    why = missing_peer(name) if name != "hisho" else None
    if why is None and name != "hisho" and binary is None:
        why = NOT_BUILT
    if why is not None:
        return {**row, "skipped": why}
    system: Any
    if name == "hisho":
        system = HishoSystem(model, n_ctx, folder)
    else:
        assert binary is not None
        system = (HearthSystem if name == "hearth" else StillwarmSystem)(binary, model, n_ctx, threads, folder)
    cold_req, resume_of, branch_req = requests(n_tokens)
    system.start()
    try:
        cold = system.ask(cold_req, REPLY)
        system.restart()
        resume_req = resume_of(cold.text)
        resume = system.ask(resume_req, REPLY)
        system.restart()
        branch = system.ask(branch_req, REPLY)
    finally:
        system.stop()
    which = "hisho" if name == "hisho" else "llama"
    ref_resume = _reference(fresh, cache, which, resume_req)
    ref_branch = _reference(fresh, cache, which, branch_req)
    return {**row, "cold_ttft_s": round(cold.ttft_s, 3), "cold_prompt_tokens": cold.prompt_tokens,
            "resume_ttft_s": round(resume.ttft_s, 3), "branch_ttft_s": round(branch.ttft_s, 3),
            "fresh_resume_ttft_s": round(ref_resume.ttft_s, 3), "fresh_branch_ttft_s": round(ref_branch.ttft_s, 3),
            "resume_speedup": round(ref_resume.ttft_s / max(resume.ttft_s, 1e-9), 2),
            "branch_speedup": round(ref_branch.ttft_s / max(branch.ttft_s, 1e-9), 2),
            "exact_resume": _same(resume, ref_resume), "exact_branch": _same(branch, ref_branch),
            "disk_bytes": system.disk_bytes(), "reused_tokens": resume.reused,
            "branch_reused_tokens": branch.reused, "resume_prompt_tokens": resume.prompt_tokens,
            "branch_prompt_tokens": branch.prompt_tokens}


def _same(got: Answer, fresh: Answer) -> bool:
    """The same reply; spaces around it aside (llama-server's chat endpoint trims them, ``/completion`` not)."""
    return got.text.strip() == fresh.text.strip()
