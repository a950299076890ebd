"""Control tokens come only from the chat template's markup: which texts of a vocabulary are its control tokens,
a rendered prompt's tokens with message text never turned into one, and the reply pieces that are markup.

Rules of use: one ``Controls`` per loaded model (``Runtime.controls``); its tables are made once, at first use
(scanning the vocabulary takes a moment on a large one). ``refuse_in_tools`` raises ``ValueError`` with the
sentence a client reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from hisho.engine.lib.llama_setup import control_tokens, markup_tokens


class Controls:
    def __init__(self, vocab: Any, n_vocab: int, token_text: Callable[[int], str],
                 tokenize: Callable[..., list[int]]) -> None:
        self._vocab, self._n_vocab, self._text, self._tokenize = vocab, n_vocab, token_text, tokenize
        self._controls: tuple[dict[str, int], re.Pattern[str] | None] | None = None
        self._markup: frozenset[int] | None = None

    def table(self) -> tuple[dict[str, int], re.Pattern[str] | None]:
        """(control token text -> id, a pattern that finds any of them)."""
        if self._controls is None:  # made once per model
            self._controls = control_tokens(self._vocab, self._n_vocab, self._text)
        return self._controls

    def markup(self) -> frozenset[int]:
        """The ids whose pieces are markup, never shown as a reply's text."""
        if self._markup is None:  # made once per model, at its first reply
            self._markup = markup_tokens(self._vocab, self._n_vocab, self._text)
        return self._markup

    def refuse_in_tools(self, request: dict[str, Any]) -> None:
        """Tool schemas and tool-call arguments are written by the template as its own markup (``render_parts``
        keeps only message contents apart), so a control token's text in them would become that token:
        refused instead."""
        _ids, pattern = self.table()
        calls = [m.get("tool_calls") for m in request["messages"] if isinstance(m, dict) and m.get("tool_calls")]
        if pattern is None or (not request.get("tools") and not calls):
            return
        found = pattern.search(json.dumps([request.get("tools"), calls], ensure_ascii=False))
        if found is not None:
            raise ValueError(f"a tool schema or tool call holds {found.group()!r}, a control token of this model; "
                             "remove it")

    def template_tokens(self, parts: list[tuple[str, bool]]) -> list[int]:
        """Tokens of a rendered chat prompt: control tokens only where the template's markup spells them; message
        text never becomes one. Text between control tokens is tokenized in one piece, markup and content
        together, as llama.cpp does between the control tokens it finds (so an ordinary prompt gets exactly
        the tokens a whole-text ``parse_special`` tokenization gives)."""
        ids, pattern = self.table()
        tokens: list[int] = []
        raw: list[str] = []

        def flush() -> None:
            text = "".join(raw)
            raw.clear()
            if text:
                tokens.extend(self._tokenize(text, add_special=False, parse_special=False))

        for text, markup in parts:
            if not markup or pattern is None:
                raw.append(text)
                continue
            pos = 0
            for m in pattern.finditer(text):
                raw.append(text[pos:m.start()])
                flush()
                tokens.append(ids[m.group()])
                pos = m.end()
            raw.append(text[pos:])
        flush()
        return tokens

    def is_special(self, text: str) -> bool:
        """Whether ``text`` is exactly one special (control) token of this vocabulary."""
        ids, _pattern = self.table()
        return text in ids and self._tokenize(text, parse_special=True) == [ids[text]]
