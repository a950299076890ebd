"""``hisho bench summarize --only reading``: how often a document is read, from drop to the first follow-up
answer, the way the window does it (``services.build`` with the window's KV persistence, a summary job,
``open_result``, a chat turn), in a folder of its own.

Figures (all token counts are the engine's: a reply's ``prompt_tokens - cached_tokens``, a batch's
``prefill_tokens``, a prefill's ``decoded``):
- ``document_tokens``: the document's tokens; ``document_tokens_read``: the document's tokens among those
  the engine read from the drop to the first follow-up answer (map chunks read, the document read once on the
  chat prefix, a follow-up's passages); ``read_ratio`` the quotient (goal 1.0 for a document that fits, ≤ 1.1
  for a longer one). ``prompt_tokens_read`` / ``prompt_read_ratio``: every prompt token read (prompt wrapping,
  combine steps and the question included): the upper bound;
- ``drop_to_answer_s``: wall time from the job's start to the end of the first follow-up answer;
- ``after_restart``: a new engine process re-summarizes the same file (summary cached) and asks again; then
  another reopens the conversation and asks: tokens read, and what was restored from disk.
- the summary's chat: ``chat_open_tokens_read`` of its ``chat_open_prefix_tokens`` (system prompt + summary turn:
  what opening the summary as a chat read; the job left the rest saved, goal ≤ 5 %), ``chat_prefix_read_by_job``
  (what the job read to leave it so), ``first_question_fits`` (the first question went out as the window sends
  it, ``send_if_fits``: no dropping, no dialog) and ``first_question_tokens_read`` against
  ``first_question_own_tokens`` (its message with the passages given, as the model got it) and
  ``first_question_turn_tokens`` (that message as the chat template wraps it: the prompt past the prefix).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hisho.bench.homes import temporary_home

WORDS = ("harbour ferry council budget bridge library school market station clinic rainfall festival museum "
         "archive tram").split()
QUESTION = "What does page 7 say about the harbour ferry?"


def write_document(path: Path, pages: int) -> Path:
    """A Markdown document of ``pages`` sections ("# Page N"), each with a known sentence."""
    out = []
    for n in range(1, pages + 1):
        body = " ".join(f"The {WORDS[(n + i) % len(WORDS)]} of district {n} reported {n * 37 + i} visitors "
                        f"in week {i + 1}." for i in range(5))
        out.append(f"# Page {n}\n\nOn page {n} the harbour ferry leaves at {n % 12 + 1} o'clock. {body}\n")
    path.write_text("\n".join(out), encoding="utf-8")
    return path


def run_reading(model: str | None, n_ctx: int, pages: int, long_pages: int, final_tokens: int,
                summary_tokens: int, answer_tokens: int) -> dict[str, Any]:
    """The reading figures for a document that fits (``pages``) and one longer than the context."""
    with temporary_home("hisho-bench-reading-") as home:
        budget = {"final_tokens": final_tokens, "summary_tokens": summary_tokens}
        fits = write_document(Path(home) / "fits.md", pages)
        out: dict[str, Any] = {"n_ctx": n_ctx, "fits": _drop_to_answer(model, n_ctx, fits, budget, answer_tokens)}
        out["fits"]["after_restart"] = _after_restart(model, n_ctx, fits, budget, answer_tokens,
                                                      int(out["fits"]["conversation"]))
        longer = write_document(Path(home) / "longer.md", long_pages)
        out["longer"] = _drop_to_answer(model, n_ctx, longer, budget, answer_tokens)
        return out


def _app(model: str | None, n_ctx: int) -> Any:
    from hisho.core import services

    app = services.build(model, "chat", n_ctx=n_ctx)
    app.load()
    return app


def _ask(app: Any, cid: int, answer_tokens: int,
         sent: list[str] | None = None) -> tuple[int, int, float, bool, int]:
    """One follow-up question: (tokens the engine read for it, tokens it restored from disk, seconds, whether it
    fitted as it was: no "no longer fits" choice, nothing dropped; the prompt's tokens).
    ``sent`` gets the question as it went out (with a long document's passages)."""
    from hisho.core.conversations.chat import FitReport
    from hisho.core.conversations.schema import ChatSettings

    app.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=answer_tokens))
    if sent is not None:
        app.chat.before_prompt.append(lambda _turn, messages: sent.append(str(messages[-1]["content"])))
    start = time.perf_counter()
    made = app.chat.send_if_fits(cid, QUESTION)  # as the window sends: a prompt that does not fit comes back
    fits = not isinstance(made, FitReport)
    if isinstance(made, FitReport):
        turn, prompt = app.chat.send(cid, QUESTION, drop_oldest=True), None  # what "Drop the oldest turns" does
    else:
        turn, prompt = made
    res = app.chat.run(turn, prompt=prompt)
    seconds = time.perf_counter() - start
    figures = res.engine
    read = int(figures.prompt_tokens) - int(figures.cached_tokens) if figures is not None else 0
    report = app.kv.last_restore if app.kv is not None else None
    restored = int(report.restored) if report is not None and report.from_disk else 0
    prompt_tokens = int(figures.prompt_tokens) if figures is not None else 0
    return read, restored, seconds, fits, prompt_tokens


def _drop_to_answer(model: str | None, n_ctx: int, path: Path, budget: dict[str, int],
                    answer_tokens: int) -> dict[str, Any]:
    app = _app(model, n_ctx)
    try:
        start = time.perf_counter()
        result = app.documents.job([path], **budget).run()
        summarized = time.perf_counter() - start
        cid, _note = app.documents.open_result(result)
        assert cid is not None, result.skipped
        opened = time.perf_counter() - start
        sent: list[str] = []
        read, _restored, _s, fits, prompt_tokens = _ask(app, cid, answer_tokens, sent)
        total = time.perf_counter() - start
        doc_tokens = sum(d.input_tokens for d in result.documents)
        # The document's tokens in the question: its passages (a long document), what the hook added to it.
        passages = max(0, app.engine.count_tokens(sent[-1]) - app.engine.count_tokens(QUESTION)) if sent else 0
        doc_read = result.document_tokens_read + passages
        all_read = result.tokens_read + read
        own = app.engine.count_tokens(sent[-1]) if sent else 0
        chat = {"chat_open_tokens_read": result.chat_open_read, "chat_open_prefix_tokens": result.chat_prefix_tokens,
                "chat_open_read_share": round(result.chat_open_read / max(result.chat_prefix_tokens, 1), 4),
                "chat_prefix_read_by_job": result.chat_prefix_read,
                "chat_note": result.chat.attachment.note if result.chat is not None else "",
                "first_question_fits": fits,
                "first_question_tokens_read": read, "first_question_own_tokens": own,
                # its turn as the chat template wraps it: the prompt past the chat's prefix
                "first_question_turn_tokens": prompt_tokens - result.chat_prefix_tokens}
        return {**chat, "document_tokens": doc_tokens, "document_tokens_read": doc_read,
                "read_ratio": round(doc_read / max(doc_tokens, 1), 3), "mode": result.documents[0].mode,
                "prompt_tokens_read": all_read, "prompt_read_ratio": round(all_read / max(doc_tokens, 1), 3),
                "job_tokens_read": result.tokens_read, "question_tokens_read": read,
                "question_passage_tokens": passages,
                "summary_s": round(summarized, 2), "open_s": round(opened - summarized, 2),
                "drop_to_answer_s": round(total, 2), "conversation": cid}
    finally:
        app.close()


def _after_restart(model: str | None, n_ctx: int, path: Path, budget: dict[str, int], answer_tokens: int,
                   cid: int) -> dict[str, Any]:
    """A new process summarizes the same file again (summary stored) and asks; another reopens and asks."""
    app = _app(model, n_ctx)
    try:
        start = time.perf_counter()
        result = app.documents.job([path], **budget).run()
        again, _note = app.documents.open_result(result)
        assert again is not None
        read, _restored, _s, _fits, _p = _ask(app, again, answer_tokens)
        resummarized = {"tokens_read": result.tokens_read + read, "seconds": round(time.perf_counter() - start, 2)}
    finally:
        app.close()
    app = _app(model, n_ctx)
    try:
        read, restored, seconds, _fits, _p = _ask(app, cid, answer_tokens)
        reopened = {"tokens_read": read, "restored_from_disk": restored, "seconds": round(seconds, 2)}
    finally:
        app.close()
    return {"resummarized": resummarized, "reopened": reopened}
