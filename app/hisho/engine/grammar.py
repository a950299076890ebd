"""llama.cpp's grammar sampler for one reply (``Sampling.grammar``: structured output, tool calls), and the gate
that keeps it cheap. Engine thread only, like every sampler.

Why a gate: applying a grammar checks every candidate token against it, ~70 ms a token on a 49K vocabulary
(measured on the bundled model, where a step costs ~10 ms). Most tokens a model draws are allowed anyway, so the
gate does what llama.cpp's ``common_sampler`` does (common/sampling.cpp): draw from the chain as if there were no
grammar, ask the grammar about that one token, and only if it refuses apply the grammar to every candidate and
draw again. Then the grammar (and the chain) accept the token.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

from hisho.core.engine.protocol import ErrorKind, Sampling

_TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


class GrammarError(ValueError):
    """A grammar llama.cpp could not parse (a bad request: the caller's grammar or schema)."""

    kind = ErrorKind.BAD_REQUEST


def regex_escape(text: str) -> str:
    """``text`` as a literal in llama.cpp's regexes (std::regex, ECMAScript): only the syntax characters."""
    return "".join("\\" + c if c in _REGEX_SYNTAX else c for c in text)


_REGEX_SYNTAX = frozenset("\\^$.|?*+()[]{}")


def full_grammar(s: Sampling) -> str:
    """``s.grammar`` with the rules of ``s.grammar_schemas`` added, each schema converted by llama-cpp-python's
    JSON-schema converter (the one ``json_schema_to_gbnf`` runs) under its own rule name, so that several
    schemas (one per tool) share one grammar."""
    if not s.grammar_schemas:
        return s.grammar
    from llama_cpp.llama_grammar import SchemaConverter

    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        for name, schema in s.grammar_schemas.items():
            # The converter names its top rule "root" when given no name.
            converter.visit(converter.resolve_refs(schema, name), "" if name == "root" else name)
    except Exception as exc:  # the converter raises plain exceptions for schemas it cannot express
        raise GrammarError(f"the JSON schema cannot be turned into a grammar: {exc}") from None
    return s.grammar + "\n" + _strict_strings(str(converter.format_grammar()))


# The converter of llama-cpp-python 0.3.36 lets a JSON string hold raw control characters (a newline), which JSON
# forbids and strict parsers refuse; llama.cpp's own converter has since excluded them (json-schema-to-grammar).
_LOOSE_CHAR = 'char ::= [^"\\\\] '
_STRICT_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] '


def _strict_strings(grammar: str) -> str:
    return grammar.replace(_LOOSE_CHAR, _STRICT_CHAR)


def grammar_sampler(rt: Any, s: Sampling) -> Any:
    """llama.cpp's grammar sampler for ``s.grammar`` (root rule ``root``). Lazy: a trigger word that is one
    control token of the vocabulary (``[TOOL_CALLS]``, ``<|python_tag|>``) triggers on that token, as llama.cpp's
    server does; any other word becomes a pattern that finds it anywhere in the reply, its own text the start
    of the constrained part (common/sampling.cpp builds its patterns the same way)."""
    grammar = full_grammar(s).encode("utf-8")
    if not s.grammar_lazy:
        smpl = llama_cpp.llama_sampler_init_grammar(rt.vocab, grammar, b"root")
    else:
        tokens: list[int] = []
        patterns = list(s.grammar_patterns)
        for word in s.grammar_triggers:
            ids = rt.tokenize(word, parse_special=True)
            if len(ids) == 1 and rt.is_special_token(word):
                tokens.append(int(ids[0]))
            else:
                patterns.append("^[\\s\\S]*?(" + regex_escape(word) + ")[\\s\\S]*$")
        raw = [p.encode("utf-8") for p in patterns]
        c_patterns = (ctypes.c_char_p * max(1, len(raw)))(*raw)
        c_tokens = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        smpl = llama_cpp.llama_sampler_init_grammar_lazy_patterns(rt.vocab, grammar, b"root", c_patterns, len(raw),
                                                                  c_tokens, len(tokens))
    if not smpl:
        raise GrammarError("the grammar could not be parsed (llama.cpp's log says where)")
    return smpl


class Gate:
    """A reply's grammar beside its sampler chain (None: greedy). See the module docstring."""

    def __init__(self, rt: Any, s: Sampling, chain: Any) -> None:
        self.grammar = grammar_sampler(rt, s)
        self.chain = chain
        n = int(rt.n_vocab)
        self._data = (llama_cpp.llama_token_data * n)()
        self._view = np.ctypeslib.as_array(self._data).view(_TOKEN_DATA).reshape(-1)
        self._ids = np.arange(n, dtype=np.intc)
        self._all = llama_cpp.llama_token_data_array(self._data, n, -1, False)
        self._one_data = llama_cpp.llama_token_data()
        self._one = llama_cpp.llama_token_data_array(ctypes.pointer(self._one_data), 1, -1, False)

    def sample(self, logits: Any) -> int:
        token = self._draw(logits, grammar=False)
        if not self._allowed(token):
            token = self._draw(logits, grammar=True)
        llama_cpp.llama_sampler_accept(self.grammar, token)
        if self.chain is not None:
            llama_cpp.llama_sampler_accept(self.chain, token)
        return token

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
        one = self._one_data
        one.id, one.logit, one.p = token, 0.0, 0.0  # type: ignore[assignment]  # ctypes converts
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self._one))
        return bool(np.isfinite(one.logit))

    def free(self) -> None:
        if self.grammar is not None:
            llama_cpp.llama_sampler_free(self.grammar)
            self.grammar = None
