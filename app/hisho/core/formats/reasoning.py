"""Reasoning formats: which one a model speaks (from its chat template and vocabulary), and a streaming
splitter that tells its reasoning from its answer.

Two formats are handled (docs/reasoning.md):

- **Think tags** (DeepSeek-R1 distills, Qwen3/QwQ, Phi-4-reasoning, SmolLM3, Granite's and similar templates):
  the reply is ``<think>…</think>`` then the answer. Some templates open the tag in the generation prompt
  themselves (``starts_inside``), so the reply starts inside the reasoning and shows only the closing tag.
  A ``<think>`` counts only at the start of a reply (after blank space): later it is the answer's own text.
- **Harmony** (GPT-OSS): messages on channels, ``<|channel|>analysis<|message|>…<|end|>`` then
  ``<|start|>assistant<|channel|>final<|message|>…<|return|>``; ``commentary`` with a recipient
  (``to=functions.NAME``) is a tool call. The markers are control tokens, so the splitter reads the reply with
  special tokens shown (the engine's ``raw`` pieces).

Rules of use: pure functions and one small state machine; no Qt, no llama_cpp. ``detect`` runs once per loaded
model (the engine reports its result in the load info); ``ReplySplitter`` runs once per reply, fed piece by
piece, and never holds back more than the longest marker's length of text.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# Harmony's markers (openai-harmony's encoding; they are single control tokens of GPT-OSS's vocabulary).
H_START, H_CHANNEL, H_MESSAGE, H_CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
H_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_HARMONY_MARKERS = (H_START, H_CHANNEL, H_MESSAGE, H_CONSTRAIN, *H_ENDS)


class Channel(str, Enum):
    """What a piece of a reply is."""

    REASONING = "reasoning"
    CONTENT = "content"
    TOOL = "tool"        # a harmony tool call's body (its recipient in ``Piece.recipient``)

    def __str__(self) -> str:
        return self.value


class ReasoningKind(str, Enum):
    NONE = "none"
    THINK = "think"
    HARMONY = "harmony"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ReasoningFormat:
    """How a model reasons, as far as its template and vocabulary tell.

    ``toggle``: the template variable that turns thinking off ("enable_thinking"), "" when none;
    ``efforts``: the reasoning efforts the template takes (GPT-OSS: low, medium, high), empty when none;
    ``starts_inside``: the generation prompt ends inside an opened think tag.
    """

    kind: ReasoningKind = ReasoningKind.NONE
    starts_inside: bool = False
    toggle: str = ""
    efforts: tuple[str, ...] = ()

    @property
    def reasons(self) -> bool:
        return self.kind is not ReasoningKind.NONE

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = self.kind.value
        out["efforts"] = list(self.efforts)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ReasoningFormat:
        data = data or {}
        try:
            kind = ReasoningKind(str(data.get("kind", "none")))
        except ValueError:
            kind = ReasoningKind.NONE
        return cls(kind=kind, starts_inside=bool(data.get("starts_inside", False)),
                   toggle=str(data.get("toggle", "")), efforts=tuple(str(e) for e in data.get("efforts", ())))


NONE = ReasoningFormat()


def detect(template: str, generation_prompt: str = "", tokens: frozenset[str] = frozenset()) -> ReasoningFormat:
    """The reasoning format of a model whose chat template is ``template``.

    ``generation_prompt``: what the template writes after the last message to start the assistant's turn
    (rendered by the engine, thinking left at the template's default); ``tokens``: texts that are single
    tokens of the model's vocabulary (its added and control tokens), where known."""
    if H_CHANNEL in template and "analysis" in template:
        efforts = ("low", "medium", "high") if "reasoning_effort" in template else ()
        return ReasoningFormat(ReasoningKind.HARMONY, efforts=efforts)
    if THINK_CLOSE in template or THINK_OPEN in template or THINK_CLOSE in tokens:
        inside = generation_prompt.rstrip().endswith(THINK_OPEN)
        toggle = "enable_thinking" if "enable_thinking" in template else ""
        return ReasoningFormat(ReasoningKind.THINK, starts_inside=inside, toggle=toggle)
    return NONE


@dataclass
class Piece:
    channel: Channel
    text: str
    recipient: str = ""   # a harmony tool call's "functions.NAME"


@dataclass
class Split:
    """A whole reply, split: what ``ReplySplitter.finish`` returns."""

    content: str = ""
    reasoning: str = ""
    tools: list[Piece] = field(default_factory=list)
    # The reply ended inside its reasoning (a budget or a stop cut it): no answer came.
    unfinished_reasoning: bool = False


class ReplySplitter:
    """Feed a reply's pieces (special tokens shown) in order; get back what each is.

    ``feed`` returns the pieces that are settled so far; text that might still be the start of a marker is held
    back until the next piece says what it is (at most one marker's length). ``finish`` flushes and returns the
    whole reply split."""

    def __init__(self, fmt: ReasoningFormat, *, thinking: bool = True) -> None:
        self.fmt = fmt
        self._buf = ""
        self._split = Split()
        self._started = False      # a non-blank character of reasoning has been seen
        self._header = ""          # harmony: the header of the message being read
        self._channel = Channel.CONTENT
        self._recipient = ""
        if fmt.kind is ReasoningKind.THINK:
            self._state = "reasoning" if fmt.starts_inside and thinking else "start"
        elif fmt.kind is ReasoningKind.HARMONY:
            self._state = "header"
        else:
            self._state = "content"

    @property
    def in_reasoning(self) -> bool:
        return self._state == "reasoning" or (self._state == "body" and self._channel is Channel.REASONING)

    def feed(self, text: str) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        if self.fmt.kind is ReasoningKind.THINK:
            self._think(out, final=False)
        elif self.fmt.kind is ReasoningKind.HARMONY:
            self._harmony(out, final=False)
        else:
            self._emit(out, Channel.CONTENT, self._buf)
            self._buf = ""
        return out

    def finish(self) -> tuple[list[Piece], Split]:
        out: list[Piece] = []
        if self.fmt.kind is ReasoningKind.THINK:
            self._think(out, final=True)
            self._split.unfinished_reasoning = self._state == "reasoning"
        elif self.fmt.kind is ReasoningKind.HARMONY:
            self._harmony(out, final=True)
            self._split.unfinished_reasoning = self._state == "body" and self._channel is Channel.REASONING
        else:
            self._emit(out, Channel.CONTENT, self._buf)
            self._buf = ""
        split = self._split
        split.content = split.content.strip() if self.fmt.reasons else split.content
        split.reasoning = split.reasoning.strip()
        return out, split

    # ----- think tags --------------------------------------------------------------------------------

    def _think(self, out: list[Piece], *, final: bool) -> None:
        while self._buf:
            if self._state == "start":
                stripped = self._buf.lstrip()
                if not stripped:
                    if final:
                        self._buf = ""
                    return
                if stripped.startswith(THINK_OPEN):
                    self._buf = stripped[len(THINK_OPEN):]
                    self._state = "reasoning"
                    continue
                if THINK_OPEN.startswith(stripped) and not final:
                    return  # maybe the tag, not yet whole
                self._state = "content"
                continue
            if self._state == "reasoning":
                if not self._take_until(out, Channel.REASONING, THINK_CLOSE, final):
                    return
                self._state = "content"
                continue
            self._emit(out, Channel.CONTENT, self._buf)
            self._buf = ""

    def _take_until(self, out: list[Piece], channel: Channel, marker: str, final: bool) -> bool:
        """Emit buffered text on ``channel`` up to ``marker``; True (marker consumed) when it was found."""
        # A model whose template opened the tag sometimes writes it again: not reasoning text.
        if channel is Channel.REASONING and not self._started:
            stripped = self._buf.lstrip()
            if stripped.startswith(THINK_OPEN):
                self._buf = stripped[len(THINK_OPEN):]
            elif THINK_OPEN.startswith(stripped) and stripped and not final:
                return False
        at = self._buf.find(marker)
        if at >= 0:
            self._emit(out, channel, self._buf[:at])
            self._buf = self._buf[at + len(marker):]
            return True
        keep = 0 if final else _partial_suffix(self._buf, (marker,))
        self._emit(out, channel, self._buf[:len(self._buf) - keep])
        self._buf = self._buf[len(self._buf) - keep:]
        return False

    # ----- harmony -----------------------------------------------------------------------------------

    def _harmony(self, out: list[Piece], *, final: bool) -> None:
        while self._buf:
            if self._state == "header":
                at = self._buf.find(H_MESSAGE)
                if at < 0:
                    if final:  # a reply that never opened a message: show what it wrote
                        self._emit(out, Channel.CONTENT, _strip_markers(self._header + self._buf))
                        self._buf = ""
                    return
                self._header += self._buf[:at]
                self._buf = self._buf[at + len(H_MESSAGE):]
                self._channel, self._recipient = _harmony_header(self._header)
                self._header = ""
                self._state = "body"
                continue
            ends = [(self._buf.find(m), m) for m in H_ENDS if m in self._buf]
            if ends:
                at, marker = min(ends)
                self._emit(out, self._channel, self._buf[:at], self._recipient)
                self._buf = self._buf[at + len(marker):]
                self._state = "header"
                continue
            keep = 0 if final else _partial_suffix(self._buf, H_ENDS)
            self._emit(out, self._channel, self._buf[:len(self._buf) - keep], self._recipient)
            self._buf = self._buf[len(self._buf) - keep:]
            return

    # ----- both --------------------------------------------------------------------------------------

    def _emit(self, out: list[Piece], channel: Channel, text: str, recipient: str = "") -> None:
        if not text:
            return
        if channel is Channel.REASONING and not self._started:
            text = text.lstrip()
            if not text:
                return
        if channel is Channel.CONTENT and self.fmt.reasons and not self._split.content:
            text = text.lstrip()
            if not text:
                return
        if channel is Channel.REASONING:
            self._started = True
            self._split.reasoning += text
        elif channel is Channel.CONTENT:
            self._split.content += text
        else:
            self._split.tools.append(Piece(channel, text, recipient))
        if out and out[-1].channel is channel and out[-1].recipient == recipient:
            out[-1].text += text
        else:
            out.append(Piece(channel, text, recipient))


def _harmony_header(header: str) -> tuple[Channel, str]:
    """A harmony message header (``<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json``):
    its channel and recipient."""
    recipient = ""
    found = re.search(r"\bto=([^\s<]+)", header)
    if found:
        recipient = found.group(1)
    channel = ""
    at = header.rfind(H_CHANNEL)
    if at >= 0:
        channel = re.split(r"[\s<]", header[at + len(H_CHANNEL):].lstrip(), maxsplit=1)[0]
    if recipient and recipient != "assistant":
        return Channel.TOOL, recipient
    if channel == "analysis":
        return Channel.REASONING, ""
    return Channel.CONTENT, ""  # final, commentary without a recipient (a preamble), or none said


def _partial_suffix(text: str, markers: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that is the start of one of ``markers`` (held back)."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), 0, -1):
            if marker.startswith(text[-n:]):
                best = max(best, n)
                break
    return best


def _strip_markers(text: str) -> str:
    for marker in _HARMONY_MARKERS:
        text = text.replace(marker, "")
    return text


def split_text(fmt: ReasoningFormat, raw: str, *, thinking: bool = True) -> Split:
    """A whole reply's text split in one go (a stored reply, a non-streamed answer)."""
    splitter = ReplySplitter(fmt, thinking=thinking)
    splitter.feed(raw)
    return splitter.finish()[1]
