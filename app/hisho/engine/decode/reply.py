"""One reply on one sequence: prefill what the sequence does not hold yet, then sample token by token (the
window's chats, ``hisho generate``). Engine thread only. Parallel replies are ``hisho.engine.decode.batched`` and
``hisho.engine.decode.serving``."""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator

import llama_cpp

from hisho.core.engine.protocol import ErrorKind, Sampling
from hisho.engine.decode import speculate
from hisho.engine.decode.sampler import Sampler
from hisho.engine.lib.llama_setup import GenStats, hit_stop
from hisho.engine.model.reasoning import opened_at
from hisho.engine.model.runtime import RequestError, Runtime


def generate(rt: Runtime, seq: int, prompt: list[int], sampling: Sampling, cancelled: Callable[[], bool],
             on_progress: Callable[[int, int], None] | None = None,
             forced: list[int] | None = None) -> Iterator[tuple[int, str] | GenStats]:
    """Prefill ``prompt`` into ``seq`` (reusing its cached prefix) and sample a reply.

    Yields ``(token, text)`` per token, then the final ``GenStats``. ``cancelled`` is checked between prefill
    slices and before every token, so a cancel takes effect within one slice or one token. ``on_progress(done,
    total)`` reports the prefill between slices (``Runtime.decode_tokens``). ``forced`` (the test hook
    ``force_text``): these tokens are the reply instead of sampled ones, each decoded into the cells as a
    sampled one would be; after the last the reply ends as at an end-of-generation token.
    """
    rt.check_seq(seq)
    if not prompt:
        raise RequestError(ErrorKind.BAD_REQUEST, "empty prompt")
    if len(prompt) >= rt.n_ctx:
        raise RequestError(ErrorKind.CONTEXT_FULL,
                            f"the prompt has {len(prompt)} tokens; the context holds {rt.n_ctx}")
    stats = GenStats(prompt_tokens=len(prompt))
    start = time.perf_counter()
    stats.cached_tokens = rt.reuse_prefix(seq, prompt)
    rest = prompt[stats.cached_tokens:]
    report = on_progress
    n_rest = len(rest)

    def progress(before: int) -> Callable[[int, int], None] | None:
        # Every piece reports against the whole prompt still to read.
        return None if report is None else (lambda done, _total: report(before + done, n_rest))

    cut = opened_at(rt, prompt) - stats.cached_tokens
    if 0 < cut < len(rest) - 1:
        # The template opened the reasoning in the generation prompt (R1 distills' "<think>\n"), and the next
        # turn renders this reply without it: the next prompt parts from these cells right here. Read up to
        # here as a slice of its own (dense) and keep a checkpoint here (window, recurrent), so that turn reuses
        # everything before and reads only what is new (docs/reasoning.md "History and reuse").
        if not rt.decode_tokens(seq, rest[:cut], want_logits=False, should_stop=cancelled,
                                on_progress=progress(0), note_slices=True):
            stats.stop_reason = "cancelled"
            yield stats
            return
        rt.keeper.checkpoint(seq, prompt=True)
        rest = rest[cut:]
        on_progress = progress(cut)
    if not rt.keeper.dense:
        # A checkpoint one token short of the prompt: a regenerate (or an edit of the next message) restores
        # it where a sliding window or a recurrent state cannot be cut back (hisho.engine.model.prefix), and decodes
        # the last token alone, as here. (A dense regenerate reads the prompt's last slice again instead:
        # PrefixKeeper._slice_start.)
        if not rt.decode_tokens(seq, rest[:-1], want_logits=False, should_stop=cancelled,
                                on_progress=progress(n_rest - len(rest))):
            stats.stop_reason = "cancelled"
            yield stats
            return
        rt.keeper.checkpoint(seq, prompt=True)
        rest = rest[-1:]
        on_progress = progress(n_rest - 1)
    # Measured before the logits it must not touch.
    # Never with an image in the prompt: a draft looked up there could propose an image's placeholder.
    drafts = forced is None and min(prompt) >= 0 and speculate.wanted(rt, seq, sampling, prompt[-1])
    # The slices are noted: a dense regenerate reads the last one again (PrefixKeeper._slice_start).
    if not rt.decode_tokens(seq, rest, should_stop=cancelled, on_progress=on_progress, note_slices=True):
        stats.stop_reason = "cancelled"
        yield stats
        return
    sampler = Sampler(rt, sampling)
    spec = speculate.Speculator(rt, seq, sampler, prompt, sampling) if drafts else None
    utf8 = codecs.getincrementaldecoder("utf-8")("replace")
    held = rt.seqs[seq]
    text_parts: list[str] = []
    first_at = 0.0
    try:
        while True:
            if cancelled():
                stats.stop_reason = "cancelled"
                break
            if stats.completion_tokens >= sampling.max_tokens:
                stats.stop_reason = "length"
                break
            if len(held) >= rt.n_ctx:
                stats.stop_reason = "context_full"
                break
            if forced is not None:
                if stats.completion_tokens >= len(forced):
                    stats.stop_reason = "eos"
                    break
                token = forced[stats.completion_tokens]
            else:
                token = spec.next_token() if spec else sampler.sample(rt.ctx)
            if not sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(rt.vocab, token):
                stats.stop_reason = "eos"
                break
            stats.completion_tokens += 1
            stats.tokens.append(token)
            piece = utf8.decode(rt.piece(token))
            if stats.completion_tokens == 1:
                first_at = time.perf_counter()
                stats.ttft_s = first_at - start
            text_parts.append(piece)
            yield token, piece
            if hit_stop(text_parts, sampling.stop):
                stats.stop_reason = "stop"
                # The stop token is sampled but not yet in the cache; keep the cache as is.
                break
            if stats.completion_tokens >= sampling.max_tokens:
                # Nothing will be sampled after the last token: decoding it would only delay "done" by a
                # step. The next prompt re-evaluates it (reuse_prefix keeps what the cache holds).
                stats.stop_reason = "length"
                break
            if spec:
                spec.advance(token)
                continue
            rt.batch.clear()
            rt.batch.add(token, len(held), seq, True)
            rt.decode_batch()
            held.append(token)
    finally:
        if spec:
            spec.finish()
            stats.speculation = spec.stats()
        sampler.free()
    if stats.completion_tokens:
        stats.decode_s = time.perf_counter() - first_at
    tail = utf8.decode(b"", final=True)
    if tail:
        text_parts.append(tail)
    stats.text = "".join(text_parts)
    stats.raw_text = rt.raw_text(stats.tokens)
    yield stats
