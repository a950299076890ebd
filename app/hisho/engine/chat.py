"""Formats chat messages with the model's own template (``tokenizer.chat_template`` in the GGUF metadata).

Templates are Jinja in the Hugging Face dialect; we render them in a sandbox. A model without a template gets
ChatML, the most common format, and the load result says so (``chat_template_source: fallback``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@dataclass
class ChatTemplate:
    text: str
    bos_token: str
    eos_token: str
    source: str  # "gguf" or "fallback"

    def __post_init__(self) -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._compiled = env.from_string(self.text)

    @classmethod
    def from_model(cls, metadata: dict[str, str], token_text: Callable[[int], str]) -> ChatTemplate:
        def special(key: str) -> str:
            value = metadata.get(key)
            try:
                return token_text(int(value)) if value is not None else ""
            except ValueError:
                return ""

        bos = special("tokenizer.ggml.bos_token_id")
        eos = special("tokenizer.ggml.eos_token_id")
        text = metadata.get("tokenizer.chat_template", "")
        return cls(text or CHATML, bos, eos, "gguf" if text else "fallback")

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        clean = [{"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in messages]
        return self._compiled.render(
            messages=clean, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token,
        )
