"""llama.cpp's grammar sampler for one reply (``Sampling.grammar``: structured output, tool calls), and the gate
around it. Engine thread only, like every sampler.

Why a gate: applying a grammar checks every candidate token against it, ~70 ms a token on a 49K vocabulary
(measured on the bundled model, where a step costs ~10 ms). Most tokens a model draws are allowed anyway, so the
gate does what llama.cpp's ``common_sampler`` does (common/sampling.cpp): draw from the chain as if there were no
grammar, ask the grammar about that one token, and only if it refuses apply the grammar to every candidate and
draw again. Then the grammar (and the chain) accept the token.

Lazy grammars are triggered here, not by llama.cpp's lazy sampler: when its trigger matches, that sampler feeds
the text from the trigger on to the grammar, and text the grammar cannot take (the rest of the token that
completed the trigger) raises a C++ exception, which through ctypes ends the engine process. The gate finds the
trigger itself (the same patterns and trigger tokens), then feeds that text token by token, each only after the
grammar has said it takes it; a reply that already left the grammar goes on unconstrained (logged). The
grammar sampler is never given a token it refuses. See docs/api.md "Tool calls".
"""

from __future__ import annotations

import ctypes
import logging
import re
from typing import Any

import llama_cpp
import numpy as np

from hisho.core.engine.protocol import ErrorKind, Sampling
from hisho.core.formats.schema import bounded_rule

log = logging.getLogger("hisho.engine")

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class GrammarError(ValueError):
    """A grammar llama.cpp could not parse (a bad request: the caller's grammar or schema)."""

    kind = ErrorKind.BAD_REQUEST


def full_grammar(s: Sampling) -> str:
    """``s.grammar`` with the rules of ``s.grammar_schemas`` added, each schema converted by llama-cpp-python's
    JSON-schema converter (the one ``json_schema_to_gbnf`` runs) under its own rule name, so that several
    schemas (one per tool) share one grammar."""
    if not s.grammar_schemas:
        return s.grammar
    converter = _converter()
    try:
        for name, schema in s.grammar_schemas.items():
            # The converter names its top rule "root" when given no name.
            converter.visit(converter.resolve_refs(schema, name), "" if name == "root" else name)
    except Exception as exc:  # the converter raises plain exceptions for schemas it cannot express
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {exc}") from None
    return s.grammar + "\n" + _strict_strings(str(converter.format_grammar()))


def _converter() -> Any:
    """llama-cpp-python's converter, with bounded numbers (``minimum``, ``maximum``, exclusive ones) written as
    ``hisho.core.formats.schema`` writes them: the converter itself ignores bounds."""
    from llama_cpp.llama_grammar import RESERVED_NAMES, SchemaConverter

    class Converter(SchemaConverter):  # type: ignore[misc]  # llama_cpp is untyped
        def visit(self, schema: Any, name: str) -> Any:
            rule = bounded_rule(schema)
            if rule is None:
                return super().visit(schema, name)
            return self._add_rule(name + "-" if name in RESERVED_NAMES else name or "root", rule + " space")

    return Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


# The converter of llama-cpp-python 0.3.36 lets a JSON string hold raw control characters (a newline), which JSON
# forbids and strict parsers refuse; llama.cpp's own converter has since excluded them (json-schema-to-grammar).
_LOOSE_CHAR = 'char ::= [^"\\\\] '
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] '


def _strict_strings(grammar: str) -> str:
    return grammar.replace(_LOOSE_CHAR, _STRICT_CHAR)


def grammar_sampler(rt: Any, s: Sampling) -> Any:
    """llama.cpp's grammar sampler for ``s.grammar`` (root rule ``root``), constraining from its first token."""
    smpl = llama_cpp.llama_sampler_init_grammar(rt.vocab, full_grammar(s).encode("utf-8"), b"root")
    if not smpl:
        raise GrammarError("the grammar could not be parsed (llama.cpp's log says where)")
    return smpl


def check_grammar(rt: Any, s: Sampling) -> None:
    """Raise ``GrammarError`` now if ``s``'s grammar (or a trigger pattern) will not do."""
    if s.grammar_lazy:
        Trigger(rt, s)
    llama_cpp.llama_sampler_free(grammar_sampler(rt, s))


class Trigger:
    """Where a lazy grammar starts: a trigger word that is one control token of the vocabulary (``[TOOL_CALLS]``,
    ``<|python_tag|>``) triggers on that token, as llama.cpp's server does; any other word anywhere in the
    reply; a pattern (``Sampling.grammar_patterns``) when it matches the whole reply so far, the constrained
    text starting at its first group (llama.cpp's lazy patterns, common/sampling.cpp)."""

    def __init__(self, rt: Any, s: Sampling) -> None:
        self.tokens: set[int] = set()
        patterns = list(s.grammar_patterns)
        for word in s.grammar_triggers:
            ids = rt.tokenize(word, parse_special=True)
            if len(ids) == 1 and rt.is_special_token(word):
                self.tokens.add(int(ids[0]))
            else:
                patterns.append("^[\\s\\S]*?(" + re.escape(word) + ")[\\s\\S]*$")
        try:
            self.patterns = [re.compile(p) for p in patterns]
        except re.error as exc:
            raise GrammarError(f"a trigger pattern does not compile: {exc}") from None
        self.text = ""

    def start(self, token: int, piece: str) -> str | None:
        """After ``token`` (its text ``piece``, special tokens shown): the text to constrain from, None while
        the trigger has not come."""
        if token in self.tokens:
            return piece
        self.text += piece
        for pattern in self.patterns:
            m = pattern.fullmatch(self.text)
            if m is not None:
                at = next((m.start(i) for i in range(1, (m.re.groups or 0) + 1) if m.group(i)), m.start())
                return self.text[at:]
        return None


class Gate:
    """A reply's grammar beside its sampler chain (None: greedy). See the module docstring."""

    def __init__(self, rt: Any, s: Sampling, chain: Any) -> None:
        self.rt = rt
        self.grammar: Any = grammar_sampler(rt, s)
        self.trigger = Trigger(rt, s) if s.grammar_lazy else None
        self.chain = chain
        n = int(rt.n_vocab)
        self._data = (llama_cpp.llama_token_data * n)()
        self._view = np.ctypeslib.as_array(self._data).view(_TOKEN_DATA).reshape(-1)
        self._ids = np.arange(n, dtype=np.intc)
        self._all = llama_cpp.llama_token_data_array(self._data, n, -1, False)
        self._one_data = llama_cpp.llama_token_data()
        self._one = llama_cpp.llama_token_data_array(ctypes.pointer(self._one_data), 1, -1, False)

    def sample(self, logits: Any) -> int:
        if self.grammar is None or self.trigger is not None:  # unconstrained (yet)
            token = self._draw(logits, grammar=False)
            self._accept_chain(token)
            if self.trigger is not None:
                self._watch(token)
            return token
        token = self._draw(logits, grammar=False)
        if not self._allowed(token):
            token = self._draw(logits, grammar=True)
        if self._allowed(token):
            llama_cpp.llama_sampler_accept(self.grammar, token)
        else:  # the grammar allows no token at all (a bug in it): go on without it rather than fail the engine
            self._drop("it allows no token")
        self._accept_chain(token)
        return token

    def _accept_chain(self, token: int) -> None:
        if self.chain is not None:
            llama_cpp.llama_sampler_accept(self.chain, token)

    def _watch(self, token: int) -> None:
        """A lazy grammar: has its trigger come with ``token``? Then feed it the text from the trigger on."""
        assert self.trigger is not None
        start = self.trigger.start(token, self.rt.token_text(token))
        if start is None:
            return
        self.trigger = None
        for part in self.rt.tokenize(start, parse_special=True):
            if not self._allowed(part):
                self._drop(f"the reply left it at {start!r}")
                return
            llama_cpp.llama_sampler_accept(self.grammar, part)

    def _drop(self, why: str) -> None:
        log.warning("grammar dropped for the rest of this reply: %s", why)
        self.free()

    def _draw(self, logits: Any, grammar: bool) -> int:
        if not grammar and self.chain is None:
            return int(logits.argmax())
        view, arr = self._view, self._all
        view["id"] = self._ids  # the chain's top-k reorders the array in place
        view["logit"] = logits
        view["p"] = 0.0
        arr.size, arr.selected, arr.sorted = len(view), -1, False
        if grammar:
            llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(arr))
        if self.chain is None:
            return int(view["id"][int(view["logit"][:arr.size].argmax())])
        llama_cpp.llama_sampler_apply(self.chain, ctypes.byref(arr))
        return int(view["id"][arr.selected])

    def _allowed(self, token: int) -> bool:
        """Whether the grammar takes ``token`` now (applying it to one candidate never changes its state)."""
        one = self._one_data
        one.id, one.logit, one.p = token, 0.0, 0.0  # type: ignore[assignment]  # ctypes converts
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one))
        return bool(np.isfinite(one.logit))

    def free(self) -> None:
        if self.grammar is not None:
            llama_cpp.llama_sampler_free(self.grammar)
            self.grammar = None
