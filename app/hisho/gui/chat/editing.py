"""Per-message actions: copy, regenerate, edit (a new version), switch versions, delete with Undo.

Rules of use: deleting a message that has later messages asks first and says how many go with it (every
version below it); every delete offers Undo (the toast's button or Ctrl+Z), which puts the same messages back.
Nothing in a chat whose reply is streaming can be deleted until the reply ends or is stopped.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from PySide6.QtWidgets import QMessageBox

from hisho.core.conversations.store import ConversationStore, DeletedMessages
from hisho.gui.chat.send_screen import PresenterBase

if TYPE_CHECKING:
    from hisho.gui.chat.chat_view import ChatView
    from hisho.gui.chat.composer import Composer
    from hisho.gui.chat.conversation_list import ConversationList
    from hisho.gui.chat.sending import Sending

log = logging.getLogger("hisho.gui")


class EditHost(PresenterBase, Protocol):
    """What the message actions use of the chat presenter: the store, the list (to show a chat again) and the
    send (a reply streaming here blocks deletes)."""

    @property
    def store(self) -> ConversationStore: ...

    @property
    def listing(self) -> ConversationList: ...

    @property
    def sending(self) -> Sending: ...


class Editing:
    """Acts on the messages of the chat ``view``; an edit happens in the ``composer``."""

    def __init__(self, chat: EditHost, view: ChatView, composer: Composer) -> None:
        self.c = chat
        self.view, self.composer = view, composer
        self.store = chat.store
        self.edited: int | None = None      # the message shown highlighted while the composer edits it
        view.action.connect(self.message_action)
        composer.edit_cancelled.connect(self.edit_ended)

    def message_action(self, name: str, mid: int) -> None:
        c = self.c
        if name == "copy":
            c.toast("Copied to the clipboard.", ms=2500)
        elif name in ("regenerate", "retry"):
            c.sending.regenerate(mid)
        elif name == "edit":
            c.store_job(lambda: (self.store.message(mid), len(self.store.siblings(mid))),
                        lambda r: self.begin_edit(mid, r[0].content, r[1] + 1))
        elif name == "delete":
            self.delete_message(mid)
        elif name == "branch":
            c.store_job(lambda: self.store.switch_branch(mid), lambda _c: c.listing.reload())

    # ----- edit ------------------------------------------------------------------------------------------

    def begin_edit(self, mid: int, text: str, versions: int) -> None:
        """Edit mode: the composer holds the message (banner, Esc cancels) and the message is highlighted."""
        self.edit_ended()
        self.composer.begin_edit(mid, text, versions)
        if self.view.highlight(mid, True):
            self.edited = mid

    def edit_ended(self) -> None:
        self.view.highlight(self.edited, False)
        self.edited = None

    def regenerate_last(self) -> None:
        last = next((m for m in reversed(self.view.messages) if m.role == "assistant"), None)
        if last is not None:
            self.message_action("regenerate", last.id)

    # ----- delete ----------------------------------------------------------------------------------------

    def delete_message(self, mid: int) -> None:
        if self.c.sending.generating_here():
            self.c.toast("A reply is being written in this chat: stop it (Esc) before deleting messages.")
            return
        self.c.store_job(lambda: self.store.subtree_size(mid), lambda n: self._confirm_delete(mid, n))

    def _confirm_delete(self, mid: int, count: int) -> None:
        if count > 1 and not self._ask(count - 1):
            return
        self.c.store_job(lambda: self.store.take_messages(mid), self._deleted)

    def _ask(self, later: int) -> bool:
        box = QMessageBox(self.view.window())   # on the window
        box.setIcon(QMessageBox.Icon.Question)
        box.setWindowTitle("Delete messages")
        box.setText(f"Delete this message and the {later:,} message{'s' if later != 1 else ''} after it?")
        box.setInformativeText("Every reply and version that follows it goes too. You can undo right after.")
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is delete

    def _deleted(self, deleted: DeletedMessages) -> None:
        self.c.listing.reload()
        n = deleted.count
        self.c.toast(f"Deleted {n} message{'s' if n != 1 else ''}.", undo=lambda: self._undo(deleted))

    def _undo(self, deleted: DeletedMessages) -> None:
        def done(_: object) -> None:
            cur = self.c.current
            if cur is not None and cur.id == deleted.conversation_id:
                self.c.listing.reload()
            self.c.toast("Messages restored.", ms=2500)

        self.c.store_job(lambda: self.store.put_back(deleted), done)
