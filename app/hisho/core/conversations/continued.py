"""A chat that outgrew its context continues in a new chat from a summary of it. No Qt.

Rules of use: ``summarize_into_new(service, conversation_id)`` runs on the engine lane (it generates). The
summary is asked for at the end of the chat's own prompt whenever that fits with the summary's room: the engine
holds that prefix (the chat on screen was just answered or prefetched) and reads only the request, so nothing
of the conversation is read again and no earlier answer changes. A chat too long even for that is summarized
from a transcript of its latest part. The old chat is left as it is; the new one starts with the summary in its
system prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hisho.core.engine.protocol import Sampling

log = logging.getLogger("hisho.chat")

SUMMARY_TOKENS = 400
REQUEST = "Summarize our conversation so far in a few sentences, keeping names, facts and open questions."
SYSTEM = "You summarize conversations faithfully and briefly."


def summary_prompt(service: Any, conversation_id: int) -> tuple[list[dict[str, str]], bool]:
    """The messages the summary is written from, and whether they are the chat's own prompt (its held prefix
    plus the request) rather than a transcript to read."""
    own = [*service.prompt_messages(conversation_id), {"role": "user", "content": REQUEST}]
    if service.count(own) + SUMMARY_TOKENS <= service.n_ctx:
        return own, True
    transcript = "\n\n".join(f"{m.role.upper()}: {m.content}" for m in service.store.branch(conversation_id))
    budget_chars = max(1000, (service.n_ctx - 600) * 3)  # ~3 chars per token; keep the latest part
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Summarize this conversation in a few sentences, keeping names, facts and "
                                        "open questions:\n\n" + transcript[-budget_chars:]}], False


def summarize_into_new(service: Any, conversation_id: int, on_text: Callable[[str], None] | None = None) -> int:
    """Ask the model for a summary of the branch and start a new conversation seeded with it."""
    conv = service.store.get(conversation_id)
    messages, own = summary_prompt(service, conversation_id)
    stream = service.engine.generate(messages=messages, sampling=Sampling(temperature=0.2, max_tokens=SUMMARY_TOKENS))
    parts: list[str] = []
    for ev in stream:
        parts.append(str(ev.get("text", "")))
        if on_text is not None:
            on_text(parts[-1])
    result = stream.result
    if result is not None:
        log.info("conversation %s summarized %s: %d prompt tokens, %d read", conversation_id,
                 "on its own prefix" if own else "from a transcript", result.prompt_tokens,
                 result.prompt_tokens - result.cached_tokens)
    summary = "".join(parts).strip()
    system = (conv.system_prompt + "\n\n" if conv.system_prompt else "") + \
        f"Summary of an earlier conversation ({conv.title}):\n{summary}"
    new = service.write(lambda: service.store.create(f"{conv.title} (continued)", model=conv.model,
                                                     system_prompt=system, settings=conv.settings))
    return int(new.id)
