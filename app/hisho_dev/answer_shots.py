"""Screenshots of answers you can check (``make screenshots``, after the others; alone: ``python -m
hisho_dev.answer_shots OUT_DIR``), each at 1280×720 and at 700 px wide, light and dark:

- ``24-answer-sources-*``: a 30-page report's summary chat: an answer with its numbered sources (the passages
  it was given, in that order) and an answer made up beside its passages, with "the document may not say this";
- ``25-passage-open-*``: source 1 opened: the document's text scrolled to page 17, the passage highlighted;
- ``26-summary-pages-*``: the summary with the pages each part came from and the "too small for summaries"
  banner naming a model that fits;
- ``27-summary-read-whole-*``: a summary of a document read whole: the pages of the passages it rests on.

Seeded: no reply is generated. The passages are chosen by the real prompt hook (a word count stands in for the
tokenizer) and kept as a send keeps them; the report is built as sections, as the PDF reader returns them.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hisho_dev.docs_shots import SIZES, _variants
from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import run_alone

TOPICS = ["harbour dues", "ferry timetable", "fish market", "school roof", "bus shelter", "library books"]
FACT = "The lighthouse keeper Marta Olsen painted the tower blue in 1987 after the winter storm."
GROUNDED = ("Who painted the lighthouse tower blue?",
            "The lighthouse keeper, **Marta Olsen**, painted the tower blue in 1987, after the winter storm "
            "[report.pdf, p. 17].")
MADE_UP = ("Who built the lighthouse?",
           "The lighthouse was built by Captain Henrik Dahl in 1902, with granite shipped from Bergen.")
SUMMARY = ("The town report reviews the year's public works: harbour dues and the ferry timetable, the fish "
           "market, repairs to the school roof and bus shelters, and the library's books. The lighthouse was "
           "repainted after the winter storm.\n\nBy part:\n"
           "- [pp. 1–10] Harbour dues were raised; the ferry timetable adds a Sunday crossing.\n"
           "- [pp. 11–20] The fish market moved; the lighthouse tower was painted blue.\n"
           "- [pp. 21–30] The school roof and two bus shelters were repaired; the library bought new books.\n\n"
           "⚠ This summary is mostly text copied from the document (64%): the model SmolLM2-135M-Instruct "
           "is too small for summaries. A model that fits this machine: Qwen3 1.7B (Q4_K_M, 1.1 GB), on the "
           "Models page.")

WHOLE_SUMMARY = ("The town report reviews the year's works. Key points:\n\n"
                 "- The lighthouse keeper Marta Olsen painted the tower blue in 1987.\n"
                 "- The lighthouse is closed to visitors in winter.\n"
                 "- The fish market and the school roof are to be reviewed in spring.")


def _words(text: str) -> int:
    return len(text.split())


def report(lines_per_page: int = 10) -> Any:
    """The 30-page report as the PDF reader returns it; fewer filler lines make one short enough to read whole."""
    from hisho.core.documents.model import Document, Section

    sections = []
    for n in range(1, 31):
        topic = TOPICS[n % len(TOPICS)]
        lines = [f"Page {n} of the town report covers the {topic}."] + ([FACT] if n == 17 else [])
        lines += ["The lighthouse is closed to visitors in winter."] if n == 5 else []
        lines += [f"Line {k}: the council noted progress on the {topic} and agreed to review it in spring."
                  for k in range(1, lines_per_page + 1)]
        sections.append(Section("\n".join(lines), f"p. {n}", n))
    return Document(Path("report.pdf"), "pdf", "shots-report", sections, pages=30)


def _seed(window: Any) -> int:
    from hisho.core.documents import plan as P
    from hisho.core.documents.ask import PASSAGE_TOKENS, DocumentContext, open_conversation, record_given

    store, db = window.ctx.store, window.ctx.documents.cache().db
    doc = report()
    parts = [(f"{doc.name}, {c.refs}", c.text) for c in P.pack_sections(doc.sections, _words, PASSAGE_TOKENS)]
    cid, _ = open_conversation(store, db, [doc], SUMMARY, _words, 4096, parts)
    now = time.time()
    for i, (question, answer) in enumerate((GROUNDED, MADE_UP)):
        messages = [{"role": "user", "content": question}]
        given = DocumentContext(db, _words, lambda: 4096).shape(SimpleNamespace(conversation_id=cid), messages)
        record_given(db, cid, question, given or [])
        leaf = store.get(cid).leaf_id
        u = store.add_message(cid, "user", question, parent_id=leaf, created_at=now + 2 * i)
        store.add_message(cid, "assistant", answer, parent_id=u.id, tokens=31, tokens_per_s=88.0,
                          created_at=now + 2 * i + 1)
    return cid


def answer_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.gui.chat.doc_sources import SourcesRow

    c = window.controller
    cid = _seed(window)
    c.refresh(cid)
    c.select(cid)
    sources = window.attach.sources
    branch = c.store.branch(cid)
    summary_id, answer_id, made_up_id = branch[1].id, branch[3].id, branch[5].id

    def ready() -> bool:
        widgets = window.view.widgets
        return all(i in widgets for i in (summary_id, answer_id, made_up_id)) \
            and "sources" in widgets[answer_id].extras and "note" in widgets[made_up_id].extras \
            and "banner" in widgets[summary_id].extras

    wait_until(app, lambda: c.current is not None and c.current.id == cid and ready(), timeout=60)
    window.toast.hide()

    def redraw(at_top: bool) -> None:
        sources.refresh()
        wait_until(app, lambda: False, timeout=0.3)
        wait_until(app, ready, timeout=10)
        bar = window.view.verticalScrollBar()
        wait_until(app, lambda: False, timeout=0.2)
        bar.setValue(0 if at_top else bar.maximum())

    _variants(app, window, out, "24-answer-sources", settle=lambda: redraw(False))
    _variants(app, window, out, "26-summary-pages", settle=lambda: redraw(True))
    row = window.view.widgets[answer_id].extras["sources"]
    assert isinstance(row, SourcesRow)
    _viewer_shots(app, row, out)
    _whole_shots(app, window, out)


def _whole_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.core.documents.ask import open_conversation

    c = window.controller
    cid, att = open_conversation(c.store, window.ctx.documents.cache().db, [report(1)], WHOLE_SUMMARY,
                                 window.ctx.engine.count_tokens, window.ctx.documents.n_ctx())
    assert att.approach == "whole"
    c.refresh(cid)
    c.select(cid)
    summary_id = c.store.branch(cid)[1].id

    def ready() -> bool:
        widget = window.view.widgets.get(summary_id)
        return widget is not None and "sources" in widget.extras

    wait_until(app, lambda: c.current is not None and c.current.id == cid and ready(), timeout=60)

    def redraw() -> None:
        window.attach.sources.refresh()
        wait_until(app, lambda: False, timeout=0.3)
        wait_until(app, ready, timeout=10)

    _variants(app, window, out, "27-summary-read-whole", settle=redraw)


def _viewer_shots(app: Any, row: Any, out: Path) -> None:
    from hisho.gui.shell import theme

    for name, th in (("light", theme.LIGHT), ("dark", theme.DARK)):
        theme.apply(app, th)
        for w, h, label in SIZES:
            row.buttons[0].click()
            viewer = row.dialog
            viewer.resize(w, h)
            wait_until(app, lambda: False, timeout=0.3)
            viewer.show_passages(row.shown[0].first, row.shown[0].last, f"Source 1: {row.shown[0].label}")
            wait_until(app, lambda: False, timeout=0.3)
            viewer.grab().save(str(out / f"25-passage-open-{label}-{name}.png"))
            viewer.close()
    theme.apply(app, theme.LIGHT)


def main(argv: list[str]) -> int:
    """These screenshots alone, in a throw-away HISHO_HOME."""
    return run_alone(argv, answer_shots, "2[4-7]*.png")


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
