"""Raw llama-cpp-python, in the calling process: the baseline that ``hisho bench decode`` compares against.

Uses the plain high-level ``llama_cpp.Llama`` API the way a script would, with the same threads, context size,
batch and flash-attention setting as the engine, and greedy sampling.
"""

from __future__ import annotations

import time
from typing import Any

import llama_cpp

from hisho.core.protocol import LoadParams
from hisho.engine.llama_setup import mmap_policy, physical_cores


class RawModel:
    def __init__(self, params: LoadParams) -> None:
        threads = params.n_threads or physical_cores()
        self.llm = llama_cpp.Llama(
            model_path=params.model_path, n_ctx=params.n_ctx, n_batch=params.n_batch, n_ubatch=params.n_ubatch,
            n_threads=threads, n_threads_batch=params.n_threads_batch or threads, flash_attn=params.flash_attn,
            n_gpu_layers=params.n_gpu_layers, verbose=False,
            # As the engine loads it: a model whose weights get repacked is read, not mapped (held once).
            use_mmap=params.use_mmap if params.use_mmap is not None else mmap_policy(params.model_path),
        )

    def decode(self, prompt_tokens: list[int], n_tokens: int, max_seconds: float = 0.0) -> dict[str, Any]:
        """Greedy-generate ``n_tokens`` after the prompt (fewer if ``max_seconds`` > 0 pass first); decode rate
        from first to last token."""
        llm = self.llm
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

    def close(self) -> None:
        self.llm.close()
