"""After an API reply: make its sequence hold exactly the tokens the client's next request starts with, so the
save that follows keeps the reply (``hisho serve``'s disk prompt cache). Engine thread only.

A client sends the conversation again with the reply as an assistant message, and the chat template renders it
as text: its tokens can differ from the sampled ones (another split of the same text, a stop string cut off, the
template's end-of-turn markup). What the next request shares with these cells is the rendered conversation up to
the next user header (the common head of two renders that differ only in the user's words, as the window's
chats do after every turn: ``hisho.core.kv.session.next_turn_prefix``). The cells are cut back to where they
agree with that (``Runtime.seq_rm``: exact, or a checkpoint on a window or recurrent model) and the rest is read,
then a checkpoint is taken at the end (sliding-window and recurrent models), so the follow-up reads only its
own message. A raw-token request has no template: its cells are kept as they are.
"""

from __future__ import annotations

import logging
from typing import Any

from hisho.core.engine.protocol import common_prefix
from hisho.engine.model.runtime import Runtime

log = logging.getLogger("hisho.engine")


def next_turn_head(rt: Runtime, spec: dict[str, Any], reply: str) -> list[int]:
    """The tokens the next request of the conversation in ``spec`` (a chat request) starts with after ``reply``;
    empty when ``spec`` holds no messages."""
    messages = spec.get("messages")
    if not isinstance(messages, list) or not messages:
        return []
    history = [*messages, {"role": "assistant", "content": reply}]

    def render(user: str) -> list[int]:
        return rt.prompt_tokens({"messages": [*history, {"role": "user", "content": user}],
                                 "tools": spec.get("tools"), "template_kwargs": spec.get("template_kwargs")})

    a = render("Alpha 1")
    return a[:common_prefix(a, render("Beta words 2"))]


def keep_reply(rt: Runtime, seq: int, spec: dict[str, Any], reply: str) -> int:
    """Make ``seq`` hold the next turn's head after ``reply`` (see the module docstring). Returns the tokens it
    read for that (0 where the cells already held them, or where there is no template)."""
    head = next_turn_head(rt, spec, reply)
    held = rt.seqs.get(seq, [])
    if not head or len(head) >= rt.n_ctx_seq:
        return 0
    common = common_prefix(held, head)
    if common < len(held) or not rt.keeper.dense:
        common = rt.seq_rm(seq, common)
    rest = head[common:]
    if rest:
        rt.decode_tokens(seq, rest, want_logits=False)
    rt.keeper.checkpoint(seq)  # the reply's end: a follow-up (or an edit of it) restores this on a window model
    log.debug("sequence %d: kept the reply as the next request renders it (%d tokens read again)", seq, len(rest))
    return len(rest)
