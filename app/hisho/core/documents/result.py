"""What a summary job gives back: ``JobResult`` (the CLI's JSON) and one ``DocResult`` per document. No Qt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hisho.core.documents.ask import ChatPlan
from hisho.core.documents.model import Document


@dataclass
class DocResult:
    file: str
    summary: str
    mode: str
    chunks: int
    chunks_cached: int
    input_tokens: int
    n_parallel: int
    notes: list[str]
    quality: dict[str, Any] = field(default_factory=dict)  # core.documents.quality: copied / repeated / verdict


@dataclass
class JobResult:
    summary: str
    documents: list[DocResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    eta_s: float = 0.0
    cancelled: bool = False
    truncated: bool = False   # only a cut the user asked for (``pages``) sets this
    # For "ask about it" (not in the JSON): the extracted documents and their chunks as (refs, text).
    extracted: list[Document] = field(default_factory=list)
    parts: list[tuple[str, str]] = field(default_factory=list)
    # Set when a summary is mostly copied text or repetition: the model is too small (``quality.warning``).
    quality_warning: str = ""
    suggested_model: dict[str, Any] | None = None
    # A single document that fits was summarized on the prefix its conversation keeps (the summary turn's
    # messages; ``hisho.core.documents.reading``): opening it reads nothing of the document again.
    chat_prompt: list[dict[str, str]] = field(default_factory=list)
    tokens_read: int = 0          # prompt tokens the engine read for this job (its own figures)
    document_tokens_read: int = 0  # of those, the document's own tokens (map chunks and the document read once)
    n_ctx: int = 0                # the context the job planned for: the loaded one, within the trained one
    context_note: str = ""        # set when the model was trained on less context than is loaded
    # The chat the summary opens as (``ask.ChatPlan``: sized by the job; None: cancelled or nothing read), and
    # the tokens the job read to leave that chat's prefix saved (a long document's; 0 when restored).
    chat: ChatPlan | None = None
    chat_prefix_read: int = 0
    chat_open_read: int = 0       # tokens read when the summary was opened as a chat (``Documents.open_result``)
    chat_prefix_tokens: int = 0   # that chat's prefix (system prompt + summary turn)

    def as_dict(self) -> dict[str, Any]:
        chunks = sum(d.chunks for d in self.documents)
        cached = sum(d.chunks_cached for d in self.documents)
        return {
            "summary": self.summary, "chunks": chunks, "chunks_cached": cached, "chunks_generated": chunks - cached,
            "input_tokens": sum(d.input_tokens for d in self.documents), "seconds": round(self.seconds, 3),
            "eta_s": round(self.eta_s, 1), "truncated": self.truncated, "cancelled": self.cancelled,
            "skipped": self.skipped, "quality_warning": self.quality_warning,
            "suggested_model": self.suggested_model, "tokens_read": self.tokens_read,
            "document_tokens_read": self.document_tokens_read, "n_ctx": self.n_ctx,
            "context_note": self.context_note, "read_whole": bool(self.chat_prompt),
            "chat_note": self.chat.attachment.note if self.chat is not None else "",
            "documents": [d.__dict__ for d in self.documents],
        }


def duration(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.0f} hours"
    if seconds >= 90:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} seconds"
