"""``hisho bench summarize``: what batching and a precomputed document KV buy, all in ONE engine process.

- ``decode_batch_gain``: aggregate decode tokens/s of 8 sequences in one batch ÷ one sequence (pure decode
  steps only, same prompt length, ``ignore_eos`` so every sequence makes ``--tokens`` tokens).
Every batch runs the way the app runs it: in a job context the engine swaps in (one KV stream per sequence of
``seq_cells`` cells; ``Runtime.job_context``), the one-at-a-time baseline in a job context of one sequence of the
same size, so both do the same attention work per token.
- ``batched_vs_sequential``: wall time of a whole map phase (the real planner's chunks and map prompts of a
  synthetic document of ``--doc-tokens``) run one chunk at a time ÷ the same items run batched (continuous
  batching, 8 sequences). Every chunk summary is ``SUMMARY_TOKENS`` long in both runs (``ignore_eos``) so the
  work is identical.
- ``followup_speedup``: time to first token of a fresh prefill of document + question ÷ the same question
  appended to a sequence that already holds the document's KV (what "ask about it" does).
Repetitions are interleaved (sequential, batched, sequential, …); medians are reported.
``--only reading`` measures instead how often a document is read from drop to the first follow-up answer
(``hisho.bench.reading``; ``--quick``: smaller documents and replies, for big or slow models).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

from hisho.core.documents import plan as P
from hisho.core.documents.model import Document, Section
from hisho.core.engine.client import EngineClient
from hisho.core.engine.ops import BatchGenerate
from hisho.core.engine.protocol import Sampling
from hisho.core.models.store import ModelStore
from hisho.core.planner.launch import load_params_for, open_model

WORDS = ("river council budget library road repair school harvest market bridge winter summer report "
         "committee mayor approved rejected funding museum train station hospital clinic teacher farmer "
         "rainfall drought solar panel wind turbine bakery festival tourism museum archive census").split()
QUESTION = "Which budget items did the committee approve, and on which pages?"


def synthetic_document(n_words: int, seed: int = 7) -> Document:
    """Deterministic prose-like text, one "page" per 250 words."""
    rng = random.Random(seed)
    sections = []
    for page in range(1, n_words // 250 + 2):
        sentences = []
        for _ in range(25):
            words = [rng.choice(WORDS) for _ in range(9)]
            sentences.append(" ".join(words).capitalize() + f" costs {rng.randint(100, 99999)} dollars.")
        sections.append(Section(" ".join(sentences), f"p. {page}", page))
    return Document(Path("bench.pdf"), "pdf", "bench", sections)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "only", None) == "reading":  # how often a document is read (hisho.bench.reading)
        from hisho.bench.reading import run_reading

        quick = bool(getattr(args, "quick", False))
        model = str(open_model(args.model, ModelStore()))
        figures = run_reading(model, 2048 if quick else 4096, 8 if quick else 20, 24 if quick else 60,
                              64 if quick else P.FINAL_TOKENS, 32 if quick else P.SUMMARY_TOKENS, 16 if quick else 64)
        return {"model": model, **figures}
    n_tokens = max(32, args.tokens or 128)
    doc_tokens = max(2048, getattr(args, "doc_tokens", None) or 8192)
    repeat = max(1, args.repeat)
    model_path = open_model(args.model, ModelStore())
    per_seq = P.seq_cells(P.CHUNK_TARGET + 128 + P.SUMMARY_TOKENS)
    n_ctx = max(8 * per_seq, 8 * P.seq_cells(64 + n_tokens), 4096)
    params = load_params_for(model_path, n_ctx=n_ctx, n_seq_max=2)  # as the window loads it
    out: dict[str, Any] = {"model": str(model_path), "n_ctx": n_ctx, "n_seq_max": params.n_seq_max,
                           "kv_unified": params.kv_unified, "job_context": "one KV stream per sequence",
                           "repeat": repeat, "decode_tokens": n_tokens}
    with EngineClient() as client:
        client.load(params)
        out.update(_decode_gain(client, n_tokens, repeat))
        out.update(_map_phase(client, doc_tokens, n_ctx, repeat))
        out.update(_followup(client, n_ctx, repeat))
    return out


def _batch(client: EngineClient, items: list[dict[str, Any]], sampling: Sampling, n_parallel: int,
           cells: int) -> dict[str, Any]:
    stream = client.batch(BatchGenerate(items=items, sampling=sampling, n_parallel=n_parallel, n_ctx_per_seq=cells))
    start = time.perf_counter()
    finished = list(stream)
    assert stream.result is not None and len(finished) == len(items)
    return {**stream.result.extra, "client_wall_s": time.perf_counter() - start}


def _decode_gain(client: EngineClient, n_tokens: int, repeat: int) -> dict[str, Any]:
    sampling = Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=n_tokens, ignore_eos=True)
    items = [{"messages": [{"role": "user", "content": f"Write a story about a town, part {i}."}]} for i in range(8)]
    one, eight = [], []
    for _ in range(repeat):
        cells = P.seq_cells(64 + n_tokens)
        one.append(float(_batch(client, items[:1], sampling, 1, cells)["decode_tokens_per_s"]))
        eight.append(float(_batch(client, items, sampling, 8, cells)["decode_tokens_per_s"]))
    a, b = statistics.median(one), statistics.median(eight)
    return {"decode_tps_1": round(a, 2), "decode_tps_8": round(b, 2),
            "decode_batch_gain": round(b / a, 3) if a else None,
            "decode_runs_1": [round(x, 2) for x in one], "decode_runs_8": [round(x, 2) for x in eight]}


def _map_phase(client: EngineClient, doc_tokens: int, n_ctx: int, repeat: int) -> dict[str, Any]:
    doc = synthetic_document(int(doc_tokens / 1.75))
    overhead = client.count_tokens(messages=P.map_messages(doc.name, "pp. 000–000", ""))
    # The planner's map phase (make_plan would choose one pass: the document fits this context).
    plan = P.map_plan(doc, client.count_tokens, n_ctx, overhead_tokens=overhead)
    per_seq = overhead + max(c.tokens for c in plan.chunks) + P.SUMMARY_TOKENS
    items = [{"messages": P.map_messages(doc.name, c.refs, c.text)} for c in plan.chunks]
    sampling = Sampling(temperature=0.0, repeat_penalty=1.1, max_tokens=P.SUMMARY_TOKENS, ignore_eos=True)
    seq, bat = [], []
    for _ in range(repeat):
        seq.append(float(_batch(client, items, sampling, 1, per_seq)["client_wall_s"]))
        bat.append(float(_batch(client, items, sampling, plan.n_parallel, per_seq)["client_wall_s"]))
    s, b = statistics.median(seq), statistics.median(bat)
    return {"map_chunks": len(plan.chunks), "map_input_tokens": plan.input_tokens, "chunk_tokens": plan.chunk_tokens,
            "map_parallel": plan.n_parallel, "summary_tokens": P.SUMMARY_TOKENS,
            "map_sequential_s": round(s, 2), "map_batched_s": round(b, 2),
            "batched_vs_sequential": round(s / b, 3) if b else None,
            "map_sequential_runs": [round(x, 2) for x in seq], "map_batched_runs": [round(x, 2) for x in bat]}


def _followup(client: EngineClient, n_ctx: int, repeat: int) -> dict[str, Any]:
    doc = synthetic_document(1500)
    system = {"role": "system", "content": "Answer questions about this document.\n\n" + doc.text}
    doc_tokens = client.tokenize(messages=[system], add_generation_prompt=False)
    full = client.tokenize(messages=[system, {"role": "user", "content": QUESTION}])
    shared = next((i for i, (a, b) in enumerate(zip(doc_tokens, full)) if a != b), len(doc_tokens))
    one = Sampling(temperature=0.0, max_tokens=1)
    fresh, follow = [], []
    for _ in range(repeat):
        client.seq_rm(0)
        fresh.append(_ttft(client, full, 0, one))
        # The precomputed KV: the document alone, prefilled once into sequence 1 (kept across questions).
        client.seq_rm(1)
        client.generate(tokens=full[:shared], seq=1, sampling=one).collect()
        follow.append(_ttft(client, full, 1, one))
    f, q = statistics.median(fresh), statistics.median(follow)
    return {"followup_doc_tokens": shared, "followup_question_tokens": len(full) - shared,
            "ttft_fresh_s": round(f, 4), "ttft_followup_s": round(q, 4),
            "followup_speedup": round(f / q, 2) if q else None}


def _ttft(client: EngineClient, tokens: list[int], seq: int, sampling: Sampling) -> float:
    start = time.perf_counter()
    stream = client.generate(tokens=tokens, seq=seq, sampling=sampling)
    stream.collect()  # records when the first token event arrived
    assert stream.first_token_at is not None
    return stream.first_token_at - start
