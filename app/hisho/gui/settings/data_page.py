"""Settings → "Your data": where Hisho keeps the user's things, and "Remove all my data…".

Uninstalling never deletes conversations, KV snapshots, models or settings (they live in the user's folders, not
in the install); this page is the way to remove them. After a confirmation the window closes and ``run_app``
deletes the folders once the database, the KV session and the engine are shut (``paths.remove_user_data``).

Rules of use: GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QWidget

from hisho.core import paths
from hisho.gui.settings.settings_page import confirm_destructive, page_layout
from hisho.gui.shell.protocols import DataWindow


class DataPage(QWidget):
    def __init__(self, window: DataWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_ = window
        folders = "\n".join(str(p) for p in paths.user_folders())
        where = QLabel(folders)
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.remove = QPushButton("Remove all my data…")
        self.remove.setObjectName("RemoveAllData")
        self.remove.clicked.connect(self.confirm_remove)
        lay = page_layout(self, "Your data",
                          "Your conversations, KV snapshots, models, settings and logs are kept in these folders, "
                          "outside the installed app. Upgrading or uninstalling Hisho keeps them.")
        lay.addWidget(where)
        lay.addWidget(self.remove, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addStretch(1)

    def confirm_remove(self) -> bool:
        if not confirm_destructive(self, "Remove all my data",
                                   "Delete every conversation, KV snapshot, downloaded or imported model, setting "
                                   "and log of Hisho?\n\nThis cannot be undone. Hisho closes and removes them.",
                                   "Remove and close", "ConfirmRemoveData"):
            return False
        self.window_.remove_data_on_exit = True
        dialog = self.window()
        if dialog is not self.window_.window():
            dialog.close()
        self.window_.close()
        return True
