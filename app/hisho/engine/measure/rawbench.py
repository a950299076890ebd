"""Raw llama-cpp-python, in the calling process: the baseline that ``hisho bench decode`` compares against.

Uses the plain high-level ``llama_cpp.Llama`` API the way a script would, with the same threads, context size,
batch, flash-attention setting and prompt offload (``op_offload``) as the engine, and greedy sampling. Prompt
offload is the one default not kept: on a GPU build with no layer offloaded llama.cpp's default reads every
prompt on the device (docs/vulkan.md), and the baseline would measure that instead of llama.cpp's CPU path.
"""

from __future__ import annotations

import time
from typing import Any

import llama_cpp

from hisho.core.engine.protocol import LoadParams
from hisho.engine.lib.llama_setup import (
    Batch,
    context_params,
    maps_file,
    model_params,
    physical_cores,
    prompt_offload,
)


class RawModel:
    def __init__(self, params: LoadParams) -> None:
        threads = params.n_threads or physical_cores()
        self.llm = llama_cpp.Llama(
            model_path=params.model_path, n_ctx=params.n_ctx, n_batch=params.n_batch, n_ubatch=params.n_ubatch,
            n_threads=threads, n_threads_batch=params.n_threads_batch or threads, flash_attn=params.flash_attn,
            n_gpu_layers=params.n_gpu_layers, verbose=False,
            # As the engine loads it: a model whose weights get repacked is read, not mapped (held once).
            use_mmap=maps_file(params), op_offload=prompt_offload(params),
        )

    def decode(self, prompt_tokens: list[int], n_tokens: int, max_seconds: float = 0.0, *,
               keep_cache: bool = False) -> dict[str, Any]:
        """Greedy-generate ``n_tokens`` after the prompt (fewer if ``max_seconds`` > 0 pass first); decode rate
        from first to last token. ``keep_cache``: no reset first, so ``generate`` keeps the longest prefix the
        context already holds (a deep prompt just prefilled is decoded on, not prefilled again)."""
        llm = self.llm
        if not keep_cache:
            llm.reset()
        start = time.perf_counter()
        first = last = 0.0
        tokens: list[int] = []
        for tok in llm.generate(prompt_tokens, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0,
                                reset=True):
            llm.detokenize([tok])
            last = time.perf_counter()
            if not first:
                first = last
            tokens.append(int(tok))
            if len(tokens) >= n_tokens or (max_seconds > 0 and last - start > max_seconds and len(tokens) > 1):
                break
        return {
            "ttft_s": first - start,
            "tokens_per_s": (len(tokens) - 1) / (last - first) if len(tokens) > 1 else 0.0,
            "tokens": tokens,
        }

    def first_token(self, prompt_tokens: list[int]) -> float:
        """Seconds from nothing cached to the first greedy token after ``prompt_tokens`` (prefill + one sample)."""
        return float(self.decode(prompt_tokens, 1)["ttft_s"])

    def close(self) -> None:
        self.llm.close()


def batched_decode(params: LoadParams, prompts: list[list[int]], n_tokens: int) -> dict[str, float]:
    """llama.cpp's own figure for parallel decode, through llama-cpp-python's low-level API as a script would
    use it: one context made from ``params`` (the engine's serving context: its cells, sequences, threads), each
    prompt prefilled into its own sequence, then greedy steps of one ``llama_decode`` for all sequences
    together. Returns the decode rate of the first prompt alone and of all of them together (tokens/s over the
    steps after the prompts), and their ratio: the ceiling of what serving them together can gain."""
    model = llama_cpp.llama_model_load_from_file(params.model_path.encode("utf-8"),
                                                 model_params(params, maps_file(params)))
    if not model:
        raise RuntimeError(f"llama.cpp could not load {params.model_path}")
    ctx = llama_cpp.llama_init_from_model(model, context_params(params))
    greedy = llama_cpp.llama_sampler_init_greedy()
    batch = Batch(max(params.n_batch, len(prompts)), max(1, params.n_seq_max))
    out: dict[str, float] = {}
    try:
        for group in (prompts[:1], prompts):
            llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            last: list[int] = []
            for seq, prompt in enumerate(group):
                batch.clear()
                for i, tok in enumerate(prompt):
                    batch.add(tok, i, seq, i == len(prompt) - 1)
                if llama_cpp.llama_decode(ctx, batch.raw) != 0:
                    raise RuntimeError("llama_decode failed on a prompt")
                last.append(int(llama_cpp.llama_sampler_sample(greedy, ctx, -1)))
            pos = [len(p) for p in group]
            start = time.perf_counter()
            for _ in range(n_tokens):
                batch.clear()
                for seq, tok in enumerate(last):
                    batch.add(tok, pos[seq], seq, True)
                    pos[seq] += 1
                if llama_cpp.llama_decode(ctx, batch.raw) != 0:
                    raise RuntimeError("llama_decode failed on a step")
                last = [int(llama_cpp.llama_sampler_sample(greedy, ctx, i)) for i in range(len(group))]
            out[f"tokens_per_s_{len(group)}"] = n_tokens * len(group) / (time.perf_counter() - start)
    finally:
        batch.free()
        llama_cpp.llama_sampler_free(greedy)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    out["gain"] = out[f"tokens_per_s_{len(prompts)}"] / out["tokens_per_s_1"]
    return out

