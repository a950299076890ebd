"""Answers you can check, in the window: a question about a 30-page PDF (made here; known sentences on known
pages) whose answer is on page 17 is sent with the bundled model; the answer shows "[1] report.pdf, p. 17"
first among its sources (the passages the model was given, in that order), and clicking it opens the document's
text with exactly that passage highlighted and in view. The summary over it lists its pages."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.conversations.store import ChatSettings
from hisho.core.documents.ask import given_for, open_conversation, question_key
from hisho.core.documents.extract import extract
from hisho.core.documents.quality import TOO_SMALL
from hisho.gui.chat.doc_sources import SourcesRow
from tests.core.test_document_answers import FACT, FACT_PAGE, N_CTX, QUESTION, passages_of, report_pdf, words
from tests.gui.conftest import make_window, message_ids, wait_for, wait_reply
from tests.gui.test_chat_window import type_and_enter

VERDICT = f"This summary is mostly repetition (61% repeats itself): the model tiny {TOO_SMALL}. A model that " \
          "fits this machine: Qwen3 1.7B, on the Models page."
SUMMARY = ("A report on the town's works.\n\nBy part:\n- [pp. 1–15] Harbour and ferries.\n"
           f"- [pp. 16–30] The lighthouse and schools.\n\n⚠ {VERDICT}")


def test_the_page_17_answer_opens_its_passage_highlighted(qtbot: QtBot, tmp_path: Path,
                                                         default_model_path: Path) -> None:
    s = settings_mod.load()
    s.set("n_ctx", N_CTX)   # the 30 pages do not fit: each question is given its best passages
    s.save()
    doc = extract(report_pdf(tmp_path))
    w = make_window(qtbot)
    try:
        db = w.ctx.documents.cache().db
        cid, att = open_conversation(w.ctx.store, db, [doc], SUMMARY, words, N_CTX, passages_of(doc))
        assert att.approach == "chunks"
        w.ctx.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=8, repeat_penalty=1.0))
        w.controller.refresh(cid)
        w.controller.select(cid)
        wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == cid)
        known = message_ids(w, cid)
        type_and_enter(qtbot, w, QUESTION)
        wait_reply(qtbot, w, cid, known)
        # What the chat kept is what the engine was given (the hook ran on the turn's real prompt).
        given = given_for(db, cid)[question_key(QUESTION)]
        assert given and given[0][0] == f"report.pdf, p. {FACT_PAGE}"
        answer_id = w.ctx.store.branch(cid)[-1].id

        def row() -> SourcesRow | None:
            widget = w.view.widgets.get(answer_id)
            found = widget.extras.get("sources") if widget is not None else None
            return found if isinstance(found, SourcesRow) else None

        wait_for(qtbot, lambda: row() is not None, 60_000)
        sources = row()
        assert sources is not None
        assert [b.text() for b in sources.buttons] == [f"[{n}] {ref}" for n, (ref, _) in enumerate(given, 1)]
        assert sources.buttons[0].text() == f"[1] report.pdf, p. {FACT_PAGE}"

        sources.buttons[0].click()
        viewer = sources.dialog
        assert viewer is not None and viewer.isVisible()
        marked = viewer.highlighted()
        # the passage as given to the model, its printed lines joined into paragraphs for reading
        assert FACT in " ".join(marked.split()) and marked.split() == given[0][1].split()
        # In view: the highlighted passage starts inside the visible part of the text.
        assert 0 <= viewer.mark_top() < viewer.text.viewport().height() // 2
        assert viewer.text.verticalScrollBar().value() > 0   # page 17 of 30: scrolled down to it
        assert "p. 17" in viewer.where.text()
        viewer.close()

        # The summary turn lists the pages it came from, and its verdict stays over it as a banner.
        summary_id = w.ctx.store.branch(cid)[1].id
        wait_for(qtbot, lambda: "sources" in w.view.widgets[summary_id].extras, 60_000)
        extras = w.view.widgets[summary_id].extras
        pages = extras["sources"]
        assert isinstance(pages, SourcesRow) and [b.text() for b in pages.buttons] == [
            "[1] report.pdf, pp. 1–15", "[2] report.pdf, pp. 16–30"]
        banner = extras.get("banner")
        assert isinstance(banner, QLabel) and banner.objectName() == "SummaryBanner"
        assert banner.text() == VERDICT and banner.isVisible()
        shown = w.view.widgets[summary_id]   # said once, in the banner; Copy still takes the stored text whole
        assert VERDICT not in "".join(s.text() for s in shown._segments if isinstance(s, QLabel))
        assert "pp. 16–30" in "".join(s.text() for s in shown._segments if isinstance(s, QLabel))
        assert shown.text.endswith(VERDICT)
    finally:
        w.close()
