"""A summary's wait in the window: one bar from the first page to the chat (the combine step does not restart it,
opening the chat is its last share), an ETA that does not swing, and a line in the chat area ("Summarizing
a.pdf · 40 %") while it runs."""

from __future__ import annotations

from pytestqt.qtbot import QtBot

from hisho.core.documents.progress import JobProgress
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import make_window


def test_one_bar_a_steady_eta_and_a_row_in_the_chat_area(qtbot: QtBot) -> None:
    w = make_window(qtbot)
    try:
        assert isinstance(w, MainWindow)
        w.resize(1280, 720)
        w.show()
        docs = w.documents
        panel = docs.panel
        begin = getattr(panel, "begin", None)
        if begin is not None:
            begin(1, "a.pdf")
        values: list[float] = []
        etas: list[str] = []

        def feed(p: JobProgress) -> None:
            panel.show_progress(p)
            values.append(panel.bar.value() / max(1, panel.bar.maximum()))
            etas.append(panel.eta.text())

        for done in (0, 50, 100):
            feed(JobProgress("summarizing", done, 100, 180.0, "a.pdf", f"chunk {done} of 100"))
        feed(JobProgress("combining", 0, 10, 420.0, "a.pdf", "combine step 0 of 10"))  # the job's swing up
        feed(JobProgress("combining", 5, 10, 60.0, "a.pdf", "combine step 5 of 10"))   # and down
        assert values == sorted(values) and values[-1] < 1.0, values   # never back to 0 %
        row = docs.row  # type: ignore[attr-defined]
        assert row.isVisible() and row.text().startswith("Summarizing a.pdf · ") and row.text().endswith(" %")
        percent = int(row.text().split("· ")[1].rstrip(" %"))
        assert abs(percent - values[-1] * 100) <= 1
        minutes = [e for e in etas if "min" in e]
        assert etas[0].startswith("about 3 min") and not any(e.startswith(("about 7", "about 6")) for e in etas)
        assert minutes and "about 1 min" not in etas[-1] and "finishing" not in "".join(etas)
        feed(JobProgress("done", 1, 1, 0.0))
        feed(JobProgress("opening", 0, 1, 0.0))
        assert values[-1] >= values[-3] and "Opening the summary" in panel.stage.text()
        panel.finish()
        assert not row.isVisible() and panel.eta.text() == ""
    finally:
        w.close()
