"""Which control tokens a reply's reader sees: the markers of the reply formats (think tags, harmony's channels
and message bounds, the tool-call families' call markers). Any other control token a model writes (a stray
``<|im_start|>``, an end-of-turn token of another template) is no text of the reply, on any path.

Rules of use: ``reading_text(event)`` gives a token event's text for a parser (the reasoning splitter, a call
parser): its "piece" (the special text shown) where that is a format's marker, else its plain "text" (empty
for a control token). Pure; no I/O.
"""

from __future__ import annotations

from typing import Any

from hisho.core.formats.reasoning import (
    H_CHANNEL,
    H_CONSTRAIN,
    H_ENDS,
    H_MESSAGE,
    H_START,
    THINK_CLOSE,
    THINK_OPEN,
)

# The tool-call families' markers (hisho.core.formats.tools), with the closing ones.
_CALL_MARKERS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>")

KEPT = frozenset({THINK_OPEN, THINK_CLOSE, H_START, H_CHANNEL, H_MESSAGE, H_CONSTRAIN, *H_ENDS, *_CALL_MARKERS})


def reading_text(event: dict[str, Any]) -> str:
    """A token event's text as a reply parser reads it: format markers shown, other control tokens dropped."""
    piece = event.get("piece")
    if isinstance(piece, str) and piece in KEPT:
        return piece
    return str(event.get("text", ""))
