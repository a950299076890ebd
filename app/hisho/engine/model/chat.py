"""Formats chat messages with the model's own template (``tokenizer.chat_template`` in the GGUF metadata).

Templates are Jinja in the Hugging Face dialect; we render them in a sandbox. A model without a template gets
ChatML, the most common format, when its vocabulary has ChatML's markers as special tokens (a fine-tune that
lost its template), and the load result says so (``chat_template_source: fallback``). A model with neither is a
base model: ChatML's markers would be plain text to it, and it would answer "<|im_start|>assistant…" forever. It
gets plain completion instead (``chat_template_source: none``, docs/planner.md "Models without a chat template"):
the messages' texts one after another, and the reply continues the last one.

``render_parts`` says which characters the template wrote and which came from a message, so that only the
template's own markup can become control tokens: a message or a document holding ``<|im_start|>system`` stays
text. It renders once with the real contents and once with a placeholder per message, then lines the
two up; where a template changed a content beyond a ``strip`` (so the two cannot be lined up), the contents are
put where the placeholders were, untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from hisho.core.engine.protocol import ErrorKind

log = logging.getLogger("hisho.engine")

CHATML_MARKERS = ("<|im_start|>", "<|im_end|>")

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Plain completion for a base model: no markers at all, the texts separated by a blank line; the model continues
# the last text (a reply is a continuation, not an answer). BOS only where the model wants one (bos_token "").
COMPLETION = (
    "{{ bos_token }}{% for message in messages %}{{ '\\n\\n' if not loop.first }}{{ message['content'] }}"
    "{% endfor %}"
)
BASE_MODEL_NOTICE = "this file is a base model, not a chat model (no chat template): replies continue the text"


class TemplateRefused(ValueError):
    """The template raised (``raise_exception``: roles out of order, a tool-call id it does not take): a bad
    request, whose message says why."""

    kind = ErrorKind.BAD_REQUEST


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@dataclass
class ChatTemplate:
    text: str
    bos_token: str
    eos_token: str
    source: str  # "gguf", "fallback" (ChatML) or "none" (plain completion: a base model)

    def __post_init__(self) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._compiled = env.from_string(self.text)

    @property
    def completion(self) -> bool:
        """A base model: messages are rendered as plain text to continue."""
        return self.source == "none"

    @classmethod
    def from_model(cls, metadata: dict[str, str], token_text: Callable[[int], str],
                   is_special: Callable[[str], bool] | None = None) -> ChatTemplate:
        """The model's own template; without one, ChatML when ``is_special`` says each of its markers is one
        special token of this vocabulary, else plain completion."""
        def special(key: str) -> str:
            value = metadata.get(key)
            try:
                return token_text(int(value)) if value is not None else ""
            except ValueError:
                return ""

        bos = special("tokenizer.ggml.bos_token_id")
        eos = special("tokenizer.ggml.eos_token_id")
        text = metadata.get("tokenizer.chat_template", "")
        if text:
            return cls(text, bos, eos, "gguf")
        if is_special is None or all(is_special(m) for m in CHATML_MARKERS):
            return cls(CHATML, bos, eos, "fallback")
        log.info("no chat template and no ChatML tokens: %s", BASE_MODEL_NOTICE)
        wants_bos = metadata.get("tokenizer.ggml.add_bos_token", "true").lower() != "false"
        return cls(COMPLETION, bos if wants_bos else "", eos, "none")

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None) -> str:
        """The prompt for ``messages``. ``tools`` (OpenAI function schemas) go to the template as ``tools``
        (absent when None: templates test ``tools is defined``); ``extra`` holds further template variables
        (``enable_thinking``, ``reasoning_effort``), never overriding the ones set here."""
        variables: dict[str, Any] = {**(extra or {})}
        if tools is not None:
            variables["tools"] = tools
        variables.update(messages=[_clean(m) for m in messages], add_generation_prompt=add_generation_prompt,
                         bos_token=self.bos_token, eos_token=self.eos_token)
        try:
            return self._compiled.render(**variables)
        except jinja2.TemplateError as exc:  # raise_exception() in the template: the caller's messages
            raise TemplateRefused(f"the model's chat template refused these messages: {exc}") from None

    def render_parts(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                     tools: list[dict[str, Any]] | None = None, extra: dict[str, Any] | None = None,
                     ) -> list[tuple[str, bool]]:
        """The rendered prompt as ``(text, is_markup)`` pieces: markup is what the template wrote, the rest is
        message content (never to be parsed for control tokens). Joined, the texts equal ``render`` whenever
        the template shows each content as is or stripped. An empty content (an assistant turn that only
        calls tools) is not masked: a placeholder there would change what the template writes."""
        contents = [_text(m.get("content")) for m in messages]
        real = self.render(messages, add_generation_prompt, tools, extra)
        marks = [_PLACEHOLDER.format(i) if contents[i] else "" for i in range(len(messages))]
        masked = self.render([{**m, "content": marks[i]} if marks[i] else m for i, m in enumerate(messages)],
                             add_generation_prompt, tools, extra)
        pieces = _split_marks(masked, marks)
        parts = _line_up(real, pieces, contents)
        if parts is None:
            log.info("chat template changes message contents; contents placed as given")
            parts = [(contents[p] if isinstance(p, int) else p, not isinstance(p, int)) for p in pieces]
        return [(text, markup) for text, markup in parts if text]


# What a message may carry to the template besides role and content (OpenAI's fields; reasoning for templates
# that show earlier reasoning). Anything else a client sends stays out of the prompt.
_MESSAGE_KEYS = ("name", "tool_call_id", "reasoning_content")


def _text(content: Any) -> str:
    return "" if content is None else str(content)


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    """A message as templates expect it: role and text content, the tool fields where given, and tool-call
    arguments as objects (most templates write them with ``tojson``; a JSON string would come out quoted)."""
    out: dict[str, Any] = {"role": str(message.get("role", "user")), "content": _text(message.get("content"))}
    for key in _MESSAGE_KEYS:
        if message.get(key) is not None:
            out[key] = message[key]
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_call(c) for c in calls if isinstance(c, dict)]
    if out.get("reasoning_content") is not None and "thinking" not in out:
        out["thinking"] = out["reasoning_content"]  # GPT-OSS's template reads an earlier reply's analysis here
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments)
        except ValueError:
            pass  # not JSON: the template gets the text as it came
    return {**call, "type": call.get("type", "function"), "function": function}


# A private-use character pair no tokenizer or template treats specially, around the message's index.
_PLACEHOLDER = "\ue000{}\ue001"


def _split_marks(masked: str, marks: list[str]) -> list[str | int]:
    """``masked`` as markup strings and message indexes (where a placeholder stood)."""
    out: list[str | int] = []
    pos = 0
    while True:
        start = masked.find("\ue000", pos)
        end = masked.find("\ue001", start) if start >= 0 else -1
        if start < 0 or end < 0:
            out.append(masked[pos:])
            return out
        index = masked[start + 1:end]
        if not index.isdigit() or int(index) >= len(marks):  # not ours (a template will not write these)
            out.append(masked[pos:end + 1])
            pos = end + 1
            continue
        out += [masked[pos:start], int(index)]
        pos = end + 1


def _line_up(real: str, pieces: list[str | int], contents: list[str]) -> list[tuple[str, bool]] | None:
    """Walk ``real`` along the pieces: markup must match exactly, a content as given or stripped. None if the
    template did something else with a content."""
    out: list[tuple[str, bool]] = []
    pos = 0
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            if not real.startswith(piece, pos):
                return None
            out.append((piece, True))
            pos += len(piece)
            continue
        after = pieces[i + 1] if i + 1 < len(pieces) and isinstance(pieces[i + 1], str) else ""
        text = contents[piece]
        for candidate in dict.fromkeys((text, text.strip(), text.lstrip(), text.rstrip())):
            if real.startswith(candidate, pos) and real.startswith(str(after), pos + len(candidate)):
                out.append((candidate, False))
                pos += len(candidate)
                break
        else:
            return None
    return out if pos == len(real) else None
