"""A loaded model's reasoning format, and where in a prompt its template opened the reasoning (engine side of
``hisho.core.formats.reasoning``; docs/reasoning.md). Engine thread only, like the ``Runtime`` it reads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from hisho.core.formats import reasoning

if TYPE_CHECKING:
    from hisho.engine.model.chat import ChatTemplate
    from hisho.engine.model.runtime import Runtime

log = logging.getLogger("hisho.engine")


def reasoning_format(template: ChatTemplate, tokenize: Callable[..., list[int]]) -> reasoning.ReasoningFormat:
    """How a model reasons: from its template, the text the template writes to open the assistant's turn, and
    whether the think tags are tokens of its vocabulary (``tokenize(text, parse_special=True)``)."""
    if template.completion:
        return reasoning.NONE
    try:
        probe = [{"role": "user", "content": "\ue000"}]
        opened = template.render(probe, add_generation_prompt=True)
        generation_prompt = opened[len(template.render(probe, add_generation_prompt=False)):]
    except Exception as exc:  # noqa: BLE001 - a template that cannot render a bare turn reasons as it says
        log.info("reasoning probe: the template does not render a single user turn (%s)", exc)
        generation_prompt = ""
    tokens = frozenset(t for t in (reasoning.THINK_OPEN, reasoning.THINK_CLOSE)
                       if len(tokenize(t, parse_special=True)) == 1)
    fmt = reasoning.detect(template.text, generation_prompt, tokens)
    if fmt.reasons:
        log.info("reasoning format: %s", fmt.to_dict())
    return fmt


def opened_at(rt: Runtime, prompt: list[int]) -> int:
    """Where the reasoning the template opened in its generation prompt begins in ``prompt`` (the R1 distills'
    "<think>\\n"): the index of the token that holds the tag's first character (a tokenizer may merge it with the
    character before, as "><"), or ``len(prompt)`` when the template opens none there."""
    if not rt.reasoning.starts_inside:
        return len(prompt)
    tail = prompt[-12:]
    pieces = [rt.piece(t, special=True) for t in tail]
    at = b"".join(pieces).rfind(reasoning.THINK_OPEN.encode("utf-8"))
    if at < 0:
        return len(prompt)
    for i, piece in enumerate(pieces):
        if at < len(piece):
            return len(prompt) - len(tail) + i
        at -= len(piece)
    return len(prompt)
