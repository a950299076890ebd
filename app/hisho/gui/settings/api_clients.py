"""Settings → API's two lower tabs: how to point a client at the API (base addresses and a ready snippet per
client, each with Copy) and the requests it served lately (wire format, prompt tokens and how many came from the
cache).

Rules of use: GUI thread only. Both take the page's window and read the running server through
``api_page.serving``-like callables given to them, so they follow a restart or a switch of the server;
``ConnectTab.refresh()`` and ``RequestsTab.refresh()`` re-read it (the page calls them when the server changes;
the requests tab also every ``REFRESH_MS`` while it is shown).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication, QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from hisho.api.backend import Served
from hisho.api.clients import bases, snippets
from hisho.api.server import ApiServer

REFRESH_MS = 1500


def _copy_button(source: Callable[[], str], tip: str) -> QPushButton:
    button = QPushButton("Copy")
    button.setToolTip(tip)
    button.clicked.connect(lambda: QGuiApplication.clipboard().setText(source()))
    return button


def root_of(server: ApiServer | None, port: int) -> str:
    """The server's root address (no ``/v1``): the running server's, else where it will listen."""
    return server.url.removesuffix("/v1") if server is not None else f"http://127.0.0.1:{port}"


class ConnectTab(QWidget):
    """Base addresses and one snippet per client, filled with the address, the key and the model served."""

    def __init__(self, server: Callable[[], ApiServer | None], port: Callable[[], int], key: Callable[[], str],
                 model: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._server, self._port, self._key, self._model = server, port, key, model
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 8, 0, 0)
        form = QFormLayout()
        self.bases: list[QLineEdit] = []
        for what, _ in bases(self._root()):
            line = QLineEdit()
            line.setReadOnly(True)
            self.bases.append(line)
            row = QHBoxLayout()
            row.addWidget(line, 1)
            row.addWidget(_copy_button(line.text, f"Copy the base address for {what}"))
            form.addRow(what, row)
        self.client = QComboBox()
        self.client.setObjectName("ApiClient")
        self.where = QLabel()
        self.where.setObjectName("Hint")
        self.where.setWordWrap(True)
        self.snippet = QPlainTextEdit()
        self.snippet.setObjectName("ApiSnippet")
        self.snippet.setReadOnly(True)
        self.snippet.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.snippet.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        pick = QHBoxLayout()
        pick.addWidget(self.client, 1)
        pick.addWidget(_copy_button(self.snippet.toPlainText, "Copy this snippet"))
        form.addRow("Client", pick)
        lay.addLayout(form)
        lay.addWidget(self.where)
        lay.addWidget(self.snippet, 1)
        self.client.currentIndexChanged.connect(lambda _i: self._show_snippet())
        self.refresh()

    def _root(self) -> str:
        return root_of(self._server(), self._port())

    def refresh(self) -> None:
        root = self._root()
        for line, (_, base) in zip(self.bases, bases(root), strict=True):
            line.setText(base)
            line.setCursorPosition(0)   # the start of the address shows where the field is narrow
        self._snippets = snippets(root, self._key(), self._model())
        chosen = self.client.currentText()
        self.client.blockSignals(True)
        self.client.clear()
        self.client.addItems([s.client for s in self._snippets])
        self.client.setCurrentIndex(max(0, self.client.findText(chosen)))
        self.client.blockSignals(False)
        self._show_snippet()

    def _show_snippet(self) -> None:
        snippet = self._snippets[max(0, self.client.currentIndex())]
        self.where.setText(f"Goes in: {snippet.where}. The key shown is this server's; regenerating it means "
                           "pasting again.")
        self.snippet.setPlainText(snippet.text)


COLUMNS = ("When", "Protocol", "Prompt", "From cache", "Reply", "Took")


def row_texts(served: Served, now: float) -> list[str]:
    ago = max(0.0, now - served.at)
    when = f"{ago:.0f} s ago" if ago < 90 else f"{ago / 60:.0f} min ago" if ago < 5400 else \
        time.strftime("%H:%M", time.localtime(served.at))
    # Rounded down: a prompt read all but one token from the cache is not "100 %".
    share = f" ({100 * served.cached_tokens // served.prompt_tokens} %)" if served.prompt_tokens else ""
    reply = f"{served.completion_tokens:,}" + ("" if served.outcome == "done" else f" · {served.outcome}")
    took = f"{served.seconds:.1f} s" if served.seconds < 100 else f"{served.seconds / 60:.1f} min"
    return [when, served.protocol, f"{served.prompt_tokens:,}", f"{served.cached_tokens:,}{share}", reply, took]


class RequestsTab(QWidget):
    """The last requests the engine ran for the API, newest first."""

    def __init__(self, server: Callable[[], ApiServer | None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._server = server
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 8, 0, 0)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.table = QTreeWidget()
        self.table.setObjectName("ApiRequests")
        self.table.setRootIsDecorated(False)
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.header().setStretchLastSection(True)
        lay.addWidget(self.summary)
        lay.addWidget(self.table, 1)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self.refresh()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt naming
        super().showEvent(event)
        self.refresh()
        self._timer.start()

    def hideEvent(self, event: QHideEvent) -> None:  # noqa: N802 - Qt naming
        self._timer.stop()
        super().hideEvent(event)

    def refresh(self) -> None:
        server = self._server()
        recent = list(server.backend.recent) if server is not None else []
        prompt = sum(s.prompt_tokens for s in recent)
        cached = sum(s.cached_tokens for s in recent)
        if server is None:
            self.summary.setText("The API is off.")
        elif not recent:
            self.summary.setText("No requests yet.")
        else:
            self.summary.setText(f"Last {len(recent)} requests: {cached:,} of {prompt:,} prompt tokens came from "
                                 "the cache (memory or disk) instead of being read again.")
        now = time.time()
        self.table.clear()
        for served in reversed(recent):
            item = QTreeWidgetItem(row_texts(served, now))
            for column in range(2, len(COLUMNS)):
                item.setTextAlignment(column, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.addTopLevelItem(item)
