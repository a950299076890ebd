"""``hisho bench peers`` takes its figures in turns, try by try: each contestant does the same things in the
same order on its own cache, and no contestant's try of a figure is taken before every contestant has done the
previous try (a machine whose speed drifts then favours none). Fake contestants: no model is loaded."""

from __future__ import annotations

from typing import Any

from hisho.bench.peers import CHAT_TURNS, SHORT_REPLIES, _repetition

LOG: list[tuple[str, str, int]] = []


class Fake:
    def __init__(self, name: str, speed: float) -> None:
        self.name, self.speed = name, speed

    def first_token(self, tokens: list[int]) -> float:
        LOG.append((self.name, "first", len(tokens)))
        return len(tokens) / self.speed / 1000 + 0.001 * sum(1 for e in LOG if e[0] == self.name)

    def decode(self, tokens: list[int], n: int) -> dict[str, Any]:
        LOG.append((self.name, "decode", len(tokens)))
        return {"tokens_per_s": self.speed * (1 + len(LOG) / 1000), "tokens": [len(tokens)] * n}


def test_figures_are_taken_in_turns_try_by_try() -> None:
    LOG.clear()
    names = ["hisho", "llama_server", "raw"]
    contestants = {n: Fake(n, speed) for n, speed in zip(names, (10.0, 20.0, 40.0), strict=True)}
    prompts = {"chat": [1] * 30, "deep": 96, "long": [{48: [2] * 48, 160: [3] * 160}] * 2}
    out = _repetition(contestants, prompts, 1, 6)

    # Each contestant on its own: chat turns, short replies, the long prompts shortest first, the deep reply.
    own = [("first", 30)] * CHAT_TURNS + [("decode", 30)] * SHORT_REPLIES + [("first", 48), ("first", 160),
                                                                              ("decode", 96)]
    for n in names:
        assert [(op, size) for who, op, size in LOG if who == n] == own, n
    # Globally: every block of three is one try of one figure by all three, the first of each block turning.
    tries = [LOG[i:i + 3] for i in range(0, len(LOG), 3)]
    assert len(tries) == CHAT_TURNS + SHORT_REPLIES + 3
    for block in tries:
        assert sorted(who for who, _, _ in block) == names
        assert len({(op, size) for _, op, size in block}) == 1
    firsts = [block[0][0] for block in tries]
    assert all(a != b for a, b in zip(firsts, firsts[1:], strict=False))
    assert all(a[-1][0] != b[0][0] for a, b in zip(tries, tries[1:], strict=False)), "nobody twice in a row"
    assert firsts[0] == "llama_server"          # repetition 1 starts one further along than repetition 0

    for n in names:
        fig = out[n]
        assert set(fig) == {"ttft_chat_s", "decode_short_tps", "tokens", "first_token_48_s", "first_token_160_s",
                            "decode_deep_tps"}
        assert fig["tokens"] == [30] * 6
    assert out["raw"]["decode_short_tps"] > out["llama_server"]["decode_short_tps"] > out["hisho"]["decode_short_tps"]
