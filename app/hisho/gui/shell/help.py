"""Help → Keyboard shortcuts and Help → About Hisho.

The shortcuts list is read from the window's own menu actions (and the few keys that are not menu items), so it
cannot fall out of step with what the keys do. About says which Hisho this is, which llama.cpp build answers
(from the engine's hello: llama-cpp-python's version and llama.cpp's system line) and where the data lives.

Rules of use: GUI thread; ``show_shortcuts(window)`` / ``show_about(window)`` open a small non-modal dialog on
the window (one of each; a second call raises it).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Protocol

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QAction, QKeySequence, QScreen
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMenu, QMenuBar, QVBoxLayout, QWidget

import hisho
from hisho.core import paths
from hisho.gui.shell.protocols import HasContext

# Keys that are not menu items (the menus' own shortcuts are read from the actions).
OTHER_KEYS = (("Enter", "Send the message"), ("Shift+Enter", "New line in the message"),
              ("Esc", "Stop the reply · close Find · clear the search · leave a page"),
              ("Delete", "Delete the chat selected in the list (Undo brings it back)"),
              ("Up", "Edit your last message (in an empty message box)"))


class HelpHost(HasContext, Protocol):
    """What these dialogs read from the window: its menus, and the engine's hello (``ctx.engine``)."""

    def menuBar(self) -> QMenuBar: ...  # noqa: N802 - Qt naming


class DialogHost(HelpHost, Protocol):
    """Where they open: on the window (its parent, ``window()``), centred on it, within its screen. Each dialog
    is kept on the window under its own name (one of each)."""

    def window(self) -> QWidget: ...

    def screen(self) -> QScreen: ...

    def frameGeometry(self) -> QRect: ...  # noqa: N802 - Qt naming


def shortcut_rows(window: HelpHost) -> list[tuple[str, str]]:
    """(keys, what) for every menu action that has a shortcut, then the other keys."""
    rows: list[tuple[str, str]] = []

    def walk(actions: list[QAction], prefix: str) -> None:
        for act in actions:
            menu = act.menu()
            name = act.text().replace("&", "")
            if isinstance(menu, QMenu):
                walk(menu.actions(), f"{prefix}{name} → ")
            elif not act.shortcut().isEmpty():
                keys = act.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
                rows.append((keys, f"{prefix}{name.rstrip('…')}"))

    walk(window.menuBar().actions(), "")
    return rows + list(OTHER_KEYS)


def about_lines(window: HelpHost) -> list[tuple[str, str]]:
    info = dict(window.ctx.engine.engine_info)
    engine = f"llama-cpp-python {info.get('llama_cpp_version', '?')}"
    if info.get("remote"):
        engine = f"{info.get('engine', '')} ({info.get('kind', '')} {info.get('version', '')})".strip()
    system = str(info.get("system_info", "")).strip()
    return [("Version", f"Hisho {hisho.__version__}"), ("Engine", engine),
            ("llama.cpp build", system or "not reported yet (the engine is starting)"),
            ("Conversations and settings", str(paths.data_dir())), ("Models", str(paths.models_dir())),
            ("KV cache", str(paths.kv_dir())), ("Log file", str(paths.log_file()))]


class InfoDialog(QDialog):
    """A heading and a two-column table of text; Close."""

    def __init__(self, parent: QWidget, title: str, heading: str, rows: list[tuple[str, str]]) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.rows = rows
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 18, 20, 14)
        head = QLabel(heading)
        head.setObjectName("DialogTitle")
        cells = "".join(f"<tr><td style='padding:3px 18px 3px 0'><b>{html.escape(a)}</b></td>"
                        f"<td style='padding:3px 0'>{html.escape(b)}</td></tr>" for a, b in rows)
        self.table = QLabel(f"<table>{cells}</table>")
        self.table.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.table.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(head)
        lay.addWidget(self.table, 1)
        lay.addWidget(buttons)
        self.setMinimumWidth(460)


def _open(window: DialogHost, key: str, make: Callable[[], InfoDialog], *, fresh: bool = False) -> InfoDialog:
    """The dialog kept on the window under ``key``, made on first use (or again, ``fresh``), shown and raised."""
    dialog = getattr(window, key, None)
    if fresh and isinstance(dialog, InfoDialog):
        dialog.close()
        dialog.deleteLater()
        dialog = None
    if not isinstance(dialog, InfoDialog):
        dialog = make()
        setattr(window, key, dialog)
    free = window.screen().availableGeometry()
    dialog.resize(min(dialog.sizeHint().width(), free.width() - 40), min(dialog.sizeHint().height(),
                                                                         free.height() - 60))
    dialog.show()
    frame = dialog.frameGeometry()
    frame.moveCenter(window.frameGeometry().center())
    frame.moveLeft(max(free.left(), min(frame.left(), free.right() - frame.width())))
    frame.moveTop(max(free.top(), min(frame.top(), free.bottom() - frame.height())))
    dialog.move(frame.topLeft())
    dialog.raise_()
    return dialog


def show_shortcuts(window: DialogHost) -> InfoDialog:
    return _open(window, "_shortcuts_dialog", lambda: InfoDialog(window.window(), "Keyboard shortcuts",
                                                                 "Keyboard shortcuts", shortcut_rows(window)))


def show_about(window: DialogHost) -> InfoDialog:
    # Made again each time: the engine's build may have come in (or changed) since.
    return _open(window, "_about_dialog", lambda: InfoDialog(window.window(), "About Hisho",
                                                             f"Hisho {hisho.__version__}", about_lines(window)),
                 fresh=True)
