"""A reply's token sampler: llama.cpp's sampler chain for the request's ``Sampling``, the plain greedy shortcut, and
a grammar beside the chain (``hisho.engine.decode.grammar.Gate``). Split out of ``hisho.engine.lib.llama_setup``:
sampling is a reply's concern, and the grammar it keeps is decode's. Engine thread only.
"""

from __future__ import annotations

from typing import Any

import llama_cpp

from hisho.core.engine.protocol import Sampling
from hisho.engine.decode.grammar import Gate
from hisho.engine.lib.llama_setup import logits_at


class Sampler:
    """A reply's token sampler. Plain greedy decoding (temperature 0, no repeat penalty, end-of-generation
    allowed) reads the argmax of the logits where llama.cpp left them: ``llama_sampler_sample`` first copies
    every logit into a candidate array (~60 us a token on a 49K vocabulary, measured), which a serving step of
    4 sequences pays 4 times. The first maximum wins, as in llama.cpp's greedy sampler, so the token is the same.
    Anything else runs llama.cpp's chain (``chain``): top-k, penalties, top-p, min-p, temperature, dist.
    A grammar (``Sampling.grammar``) is kept beside the chain: ``hisho.engine.decode.grammar.Gate``."""


    def __init__(self, rt: Any, s: Sampling) -> None:
        self.n_vocab = int(rt.n_vocab)
        self.greedy = s.temperature <= 0 and s.repeat_penalty == 1.0 and not s.ignore_eos
        self.chain: Any = None if self.greedy else _chain(rt, s)
        self.gate = Gate(rt, s, self.chain) if s.grammar or s.grammar_schemas else None

    def sample(self, ctx: Any, i: int = -1) -> int:
        """The token for the logits of batch position ``i`` (-1: the last that has logits)."""
        if self.gate is not None:
            return self.gate.sample(logits_at(ctx, i, self.n_vocab))
        if self.chain is not None:
            return int(llama_cpp.llama_sampler_sample(self.chain, ctx, i))
        return int(logits_at(ctx, i, self.n_vocab).argmax())

    def free(self) -> None:
        if self.gate is not None:
            self.gate.free()
            self.gate = None
        if self.chain is not None:
            llama_cpp.llama_sampler_free(self.chain)
            self.chain = None


def _chain(rt: Any, s: Sampling) -> Any:
    """A sampler chain: (logit bias), top-k, penalties, top-p, min-p, temperature, dist; greedy if temp <= 0."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    if s.ignore_eos:
        eos = int(llama_cpp.llama_vocab_eos(rt.vocab))
        eot = int(llama_cpp.llama_vocab_eot(rt.vocab))
        banned = sorted({t for t in (eos, eot) if t >= 0})
        biases = (llama_cpp.llama_logit_bias * len(banned))()
        for i, tok in enumerate(banned):
            biases[i].token = tok  # type: ignore[assignment]
            biases[i].bias = float("-inf")
        add(chain, llama_cpp.llama_sampler_init_logit_bias(rt.n_vocab, len(banned), biases))
    # Penalties scan the candidate list for repeats: run them after top-k, never on the full vocabulary.
    if s.top_k > 0 and s.temperature > 0:
        add(chain, llama_cpp.llama_sampler_init_top_k(s.top_k))
    if s.repeat_penalty != 1.0:
        add(chain, llama_cpp.llama_sampler_init_penalties(rt.n_vocab, s.repeat_last_n, s.repeat_penalty, 0.0, 0.0))
    if s.temperature <= 0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if 0 < s.top_p < 1:
        add(chain, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
    if s.min_p > 0:
        add(chain, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
    add(chain, llama_cpp.llama_sampler_init_temp(s.temperature))
    seed = s.seed if s.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED
    add(chain, llama_cpp.llama_sampler_init_dist(seed))
    return chain
