"""Screens of a reasoning model's chat for ``make screenshots``: the thinking folded above the answer ("Thought for
12 s", closed) and opened, at 1280×720 and 700 px wide, light and dark. The conversation is written into the store
(a reasoning reply with its thinking kept apart, as the chat saves one), so the pictures are the same every time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until

QUESTION = "Is 1,001 a prime number?"
THOUGHT = ("The user asks whether 1001 is prime. Try small divisors: 2 no (odd), 3: digit sum 2, no; 5 no; "
           "7: 7 × 143 = 1001, yes. So 1001 = 7 × 143, and 143 = 11 × 13. Not prime: 1001 = 7 × 11 × 13. "
           "Answer briefly and show the factors.")
ANSWER = "No. **1,001 = 7 × 11 × 13**, so it has divisors other than 1 and itself."


def _seed(window: Any) -> int:
    store = window.controller.store
    conv = store.create("Is 1,001 prime? (reasoning sample)")
    u = store.add_message(conv.id, "user", QUESTION)
    store.add_message(conv.id, "assistant", ANSWER, parent_id=u.id, tokens=96, tokens_per_s=41.2,
                      ttft_s=0.42, reasoning=THOUGHT, reasoning_s=11.6)
    return int(conv.id)


def reasoning_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.gui.shell import theme

    c = window.controller
    cid = _seed(window)
    c.refresh(cid)
    c.select(cid)
    wait_until(app, lambda: c.current is not None and c.current.id == cid and window.view.built_count() == 2)
    reply = window.view.widgets[window.view.messages[-1].id]
    for name, look in (("light", theme.LIGHT), ("dark", theme.DARK)):
        theme.apply(app, look)
        c.reload()
        wait_until(app, lambda: window.view.built_count() == 2)
        reply = window.view.widgets[window.view.messages[-1].id]
        for width in (1280, 700):
            window.resize(width, 720)
            if reply.thinking is not None and reply.thinking.is_open:
                reply.thinking.header.click()
            wait_until(app, lambda: False, timeout=0.4)
            window.grab().save(str(out / f"10-reasoning-closed-{width}-{name}.png"))
            if reply.thinking is not None:
                reply.thinking.header.click()
            wait_until(app, lambda: False, timeout=0.4)
            window.grab().save(str(out / f"11-reasoning-open-{width}-{name}.png"))
    theme.apply(app, theme.LIGHT)
    window.resize(1280, 720)
