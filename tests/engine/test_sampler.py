"""The reply loops' sampler (hisho.engine.decode.sampler.Sampler): plain greedy decoding reads the logits' argmax
in place instead of running llama.cpp's chain; the token must be the one llama.cpp's greedy sampler picks, at
every batch position, ties included; anything else still runs the chain."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np

from hisho.core.engine.protocol import LoadParams, Sampling
from hisho.engine.decode.sampler import Sampler
from hisho.engine.model.runtime import Runtime

GREEDY = Sampling(temperature=0.0, repeat_penalty=1.0)


def test_greedy_argmax_is_llama_cpps_greedy_token_at_every_position(default_model_path: Path) -> None:
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=1024))
    reference = llama_cpp.llama_sampler_init_greedy()
    ours = Sampler(rt, GREEDY)
    try:
        prompt = rt.prompt_tokens({"messages": [
            {"role": "user", "content": "List the planets of the solar system, then count to twenty."}]})
        rt.batch.clear()
        for i, tok in enumerate(prompt):
            rt.batch.add(tok, i, 0, True)  # logits at every position: as many different distributions
        rt.decode_batch()
        assert ours.greedy and ours.chain is None
        picked = [ours.sample(rt.ctx, i) for i in range(len(prompt))]
        assert picked == [int(llama_cpp.llama_sampler_sample(reference, rt.ctx, i)) for i in range(len(prompt))]
        assert ours.sample(rt.ctx) == picked[-1]  # -1: the last position with logits
        assert len(set(picked)) > 5
        # A tie: the first of the equal maxima, as llama.cpp's greedy sampler (a strict "greater than" scan).
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(rt.ctx, 0), shape=(rt.n_vocab,))
        top = int(logits.argmax())
        logits[top + 7] = logits[top]
        assert ours.sample(rt.ctx, 0) == top == int(llama_cpp.llama_sampler_sample(reference, rt.ctx, 0))
    finally:
        ours.free()
        llama_cpp.llama_sampler_free(reference)
        rt.close()


def test_anything_but_plain_greedy_runs_llama_cpps_chain(default_model_path: Path) -> None:
    rt = Runtime.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
    try:
        for sampling in (Sampling(temperature=0.0, repeat_penalty=1.1), Sampling(temperature=0.7),
                         Sampling(temperature=0.0, repeat_penalty=1.0, ignore_eos=True)):
            sampler = Sampler(rt, sampling)
            assert not sampler.greedy and sampler.chain is not None
            sampler.free()
            assert sampler.chain is None
            sampler.free()  # twice is harmless
    finally:
        rt.close()
