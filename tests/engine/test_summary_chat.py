"""A summary's chat is never born full and is restored, not read: a document longer than the context opens as a
chat whose prefix (system prompt + summary turn) the job left saved, so opening it reads almost nothing, and
whose first question fits with its passages and an answer (no "no longer fits" choice). A summary too long for
that room opens as its shorter level, and says so. Token counts are the engine's own figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hisho.core.conversations.chat import FitReport
from hisho.core.conversations.schema import ChatSettings
from hisho.core.documents.ask import PASSAGE_SHARE, question_room
from hisho.core.documents.extract import extract
from hisho.core.documents.job import DocResult, JobResult
from tests.engine.test_document_reading import QUESTION, app_for, pages
from tests.fixtures.docs.make import make_pdf

N_CTX = 2048


def first_question(app: Any, cid: int) -> tuple[int, int]:
    """Send the first question as the window does (``send_if_fits``): (tokens the engine read for it, tokens
    of passages it was given). Fails when the chat does not fit."""
    app.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=8))
    sent: list[str] = []
    app.chat.before_prompt.append(lambda _turn, messages: sent.append(messages[-1]["content"]))
    made = app.chat.send_if_fits(cid, QUESTION)
    assert not isinstance(made, FitReport), f"the first question does not fit: {made}"
    turn, prompt = made
    res = app.chat.run(turn, prompt=prompt)
    assert res.engine is not None and not res.error
    passages = app.engine.count_tokens(sent[-1]) - app.engine.count_tokens(QUESTION)
    return res.engine.prompt_tokens - res.engine.cached_tokens, passages


def test_a_long_documents_summary_chat_is_restored_and_its_first_question_fits(tmp_path: Path,
                                                                                 default_model_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages())
    app = app_for(N_CTX)
    try:
        result = app.documents.job([pdf], summary_tokens=24, final_tokens=32).run()
        assert result.documents[0].mode == "map_reduce" and not result.cancelled
        job_read = result.tokens_read
        cid, _ = app.documents.open_result(result)
        assert cid is not None
        prefix = len(app.engine.tokenize(messages=app.chat.prompt_messages(cid), add_generation_prompt=False))
        assert prefix > 100 and prefix + question_room(N_CTX) <= N_CTX
        # Opening read at most 5 % of the chat's prefix: the rest is what the job left saved, restored exactly.
        assert result.tokens_read - job_read <= 0.05 * prefix
        assert result.chat_prefix_tokens == prefix
        # The summary is the chat's first answer, once (not in the system prompt as well).
        conv = app.store.get(cid)
        assert result.summary.strip()[:40] not in conv.system_prompt
        read, passages = first_question(app, cid)
        assert 0 < passages <= N_CTX // PASSAGE_SHARE
        assert read <= passages + app.engine.count_tokens(QUESTION) + 40
        # Summarizing the same file again opens that chat (restored again), not a second "Summary: report.pdf".
        again = app.documents.job([pdf], summary_tokens=24, final_tokens=32).run()
        cid2, _ = app.documents.open_result(again)
        assert cid2 == cid and again.tokens_read <= 0.05 * prefix
        assert [c.title for c in app.store.conversations()].count("Summary: report.pdf") == 1
    finally:
        app.close()


def test_a_summary_too_long_for_questions_opens_as_its_overview(tmp_path: Path, default_model_path: Path) -> None:
    """The part-by-part list would leave no room for a question with its pages: the chat holds the overview."""
    doc = extract(make_pdf(tmp_path / "report.pdf", pages()))
    overview = "The town report covers thirty districts: councils, markets, libraries, rain and bridges [pp. 1–30]."
    lines = [f"- [p. {p}] The council of district {p} met; the library lent {p * 31} books, the school has "
             f"{p * 7} pupils and {40 + p} millimetres of rain fell; the bridge was painted." for p in range(1, 31)]
    summary = overview + "\n\nBy part:\n" + "\n".join(lines)
    app = app_for(N_CTX)
    try:
        assert app.engine.count_tokens(summary) > N_CTX // 2
        result = JobResult(summary=summary, extracted=[doc], parts=[(f"report.pdf, {s.ref}", s.text)
                                                                     for s in doc.sections])
        result.documents.append(DocResult("report.pdf", summary, "map_reduce", 30, 0, 6000, 1, []))
        cid, note = app.documents.open_result(result)
        assert cid is not None and "short summary" in note
        held = [m.content for m in app.store.branch(cid)]
        assert held[-1] == overview
        read, passages = first_question(app, cid)
        assert passages > 0
    finally:
        app.close()
