"""Decode speed while the chat view renders the stream (``hisho bench decode`` reports it as ``gui_vs_raw``).

The engine streams into a ``StreamText`` from a producer thread exactly as in the window; the GUI thread runs
the event loop, and the ``ChatView`` reads the streamed text at display rate and renders Markdown offscreen. Tokens
per second are measured on the producer side, the same way as the plain engine run.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import Sampling


def _app() -> Any:
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    if app is None:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"  # a benchmark never opens a window on the user's screen
        app = QApplication([])
    return app


def gui_decode(client: EngineClient, prompt: list[int], sampling: Sampling) -> dict[str, float]:
    """One greedy run streamed into a visible (offscreen) ChatView. Returns tokens_per_s and render figures."""
    from PySide6.QtCore import QEventLoop

    from hisho.gui.chat.chat_view import ChatView, StreamText
    from hisho.gui.shell import theme

    app = _app()
    theme.apply(app, theme.LIGHT)
    view = ChatView()
    view.resize(900, 700)
    view.show()
    buffer = StreamText()
    view.begin_stream(1, buffer)
    out: dict[str, float] = {}

    def produce() -> None:
        client.seq_rm(0)  # fresh sequence, as the raw run does
        stream = client.generate(tokens=prompt, sampling=sampling)
        first = last = 0.0
        n = 0
        for ev in stream:
            last = time.perf_counter()
            first = first or last
            n += 1
            buffer.append(str(ev["text"]))
        out["tokens_per_s"] = (n - 1) / (last - first) if n > 1 and last > first else 0.0

    worker = threading.Thread(target=produce, name="hisho-bench-producer")
    start = time.perf_counter()
    worker.start()
    while worker.is_alive():  # as app.exec() does: sleep until the next event (the view's flush timer)
        app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
    worker.join()
    view.append(1, buffer.text[len(view.stream_widget.text):] if view.stream_widget else "")
    wall = time.perf_counter() - start
    out.update(render_s=view.render_s, flushes=float(view.flushes), render_share=view.render_s / wall)
    view.detach_stream()
    view.close()
    view.deleteLater()
    app.processEvents()
    return out
