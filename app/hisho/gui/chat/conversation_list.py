"""The conversation list and the chat on screen: listing, selecting, new, rename, delete with Undo, search,
drafts, export and import.

Rules of use: store work runs on the ``store`` lane; what comes back is shown only if it still concerns the chat
on screen. Selecting a chat shows its branch, then the streaming reply (if it is this chat's) and its waiting
messages (``Sending.show_in_view``), its own context figure, and its draft.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import SignalInstance
from PySide6.QtWidgets import QFileDialog, QLabel, QLineEdit, QWidget

from hisho.core.conversations.store import Conversation, ConversationStore, Message
from hisho.core.documents import exchange as conversation_io
from hisho.gui.chat.send_screen import PresenterBase

if TYPE_CHECKING:
    from hisho.gui.chat.chat_view import ChatView
    from hisho.gui.chat.composer import Composer
    from hisho.gui.chat.context_fit import ContextFit
    from hisho.gui.chat.sending import Sending
    from hisho.gui.chat.sidebar import Sidebar
    from hisho.gui.chat.title_edit import InlineTitle

log = logging.getLogger("hisho.gui")

Loaded = tuple[Conversation, list[Message], dict[int, list[int]]]


class ListWindow(Protocol):
    """What the list and the chat on screen use of the window: the chat list, the chat, its title, the
    message box, Find, the empty state, the signals that say which chat is on screen and its draft, and the
    window as the file dialogs' parent."""

    @property
    def sidebar(self) -> Sidebar: ...

    @property
    def view(self) -> ChatView: ...

    @property
    def composer(self) -> Composer: ...

    @property
    def title(self) -> QLabel: ...

    @property
    def find_edit(self) -> QLineEdit: ...

    @property
    def find_status(self) -> QLabel: ...

    @property
    def conversation_selected(self) -> SignalInstance: ...

    @property
    def draft_changed(self) -> SignalInstance: ...

    def show_empty(self, empty: bool) -> None: ...

    def window(self) -> QWidget: ...


class ListHost(PresenterBase, Protocol):
    """What the list uses of the chat presenter: the store, the chat's context figures, its title editor, the
    send (a chat with a reply streaming or messages waiting)."""

    @property
    def sending(self) -> Sending: ...

    @property
    def store(self) -> ConversationStore: ...

    @property
    def fit(self) -> ContextFit: ...

    @property
    def title_editor(self) -> InlineTitle: ...


class ConversationList:
    def __init__(self, chat: ListHost, window: ListWindow) -> None:
        self.c = chat
        self.w = window
        self.store = chat.store
        self.titles: dict[int, str] = {}
        self.find_after: int | None = None
        w = self.w
        w.sidebar.selected.connect(self.select)
        w.sidebar.new_requested.connect(self.new_chat)
        w.sidebar.rename_requested.connect(self.rename)
        w.sidebar.pin_requested.connect(lambda cid, p: self.c.store_job(lambda: self.store.update(cid, pinned=p),
                                                                        lambda _c: self.refresh()))
        w.sidebar.delete_requested.connect(self.delete_chat)
        w.sidebar.export_requested.connect(self.export_chat)
        w.sidebar.search_changed.connect(self.search)

    # ----- the list ----------------------------------------------------------------------------------------

    def listed_first(self, convs: list[Conversation]) -> None:
        self._listed(convs, None)
        if convs:
            self.select(convs[0].id)
        else:
            self.w.show_empty(True)
            self.w.composer.focus()

    def refresh(self, select: int | None = None) -> None:
        current = select if select is not None else (self.c.current.id if self.c.current else None)
        self.c.store_job(lambda: self.store.conversations(), lambda convs: self._listed(convs, current))

    def _listed(self, convs: list[Conversation], current: int | None) -> None:
        self.titles = {c.id: c.title for c in convs}
        cur = self.c.current
        if cur is not None and cur.id in self.titles:
            self._show_title(cur, self.titles[cur.id])
        if not self.w.sidebar.query().strip():
            self.w.sidebar.set_conversations(convs, current)

    def _show_title(self, cur: Conversation, title: str) -> None:
        """The chat on screen got a new title (renamed, or its first message edited): the header and what Chat
        settings and toasts call it follow at once, not when the chat is next opened."""
        cur.title = title
        if not self.c.title_editor.editing and self.w.title.text() != title:
            self.w.title.setText(title)

    def search(self, text: str) -> None:
        if not text.strip():
            self.refresh()
            return
        current = self.c.current.id if self.c.current else None
        self.c.store_job(lambda: self.store.search(text),
                         lambda hits: self.w.sidebar.set_search_results(hits, current))

    # ----- the chat on screen ----------------------------------------------------------------------------

    def select(self, cid: int) -> None:
        self.save_draft()
        self.w.view.detach_stream()
        self.c.store_job(lambda: self._load_chat(cid), self._show_chat)

    def reload(self) -> None:
        if self.c.current is not None:
            cid = self.c.current.id
            self.c.store_job(lambda: self._load_chat(cid), self._show_chat)

    def _load_chat(self, cid: int) -> Loaded:
        conv = self.store.get(cid)
        branch = self.store.branch(cid)
        return conv, branch, {m.id: self.store.siblings(m.id) for m in branch}

    def _show_chat(self, data: Loaded) -> None:
        conv, branch, siblings = data
        c, w = self.c, self.w
        if conv.deleted_at is not None:
            return  # deleted while it loaded
        switched = c.current is None or c.current.id != conv.id
        c.current = conv
        self.titles[conv.id] = conv.title
        self.find_after = None
        if switched or not c.title_editor.editing:
            c.title_editor.cancel()
            w.title.setText(conv.title)
        w.sidebar.current_id = conv.id  # first, so selecting the row does not re-enter select()
        w.sidebar.select(conv.id)
        visible = c.sending.hide_streaming_row(branch)
        w.view.show_branch(conv.id, visible, siblings)
        c.sending.show_in_view(conv.id, visible)
        w.show_empty(not visible and w.view.stream_widget is None and not w.view.queued)
        query = w.sidebar.search.text().split()
        if switched and query:  # opened from a search result: show the matching message
            self.find_after = w.view.find(query[-1])
        if switched:  # a reload of the same chat must not overwrite what is being typed
            w.composer.end_edit()
            w.composer.set_text(conv.draft)
            c.fit.show_for(conv.id)
            w.conversation_selected.emit(conv.id)
        c.fit.update()

    def title_of(self, cid: int) -> str:
        return self.titles.get(cid, "another chat")

    # ----- new, rename, delete ---------------------------------------------------------------------------

    def new_chat(self) -> None:
        c = self.c
        if c.current is not None and not self.w.view.messages and not self.w.view.queued and \
                not c.sending.generating_here():
            self.w.composer.focus()  # already on an empty chat
            return
        self.save_draft()
        model = c.current.model if c.current else ""
        c.store_job(lambda: c.service.new_conversation(model=model), lambda conv: self.created(conv.id))

    def created(self, cid: int) -> None:
        self.refresh(cid)
        self.select(cid)
        self.w.composer.focus()

    def rename(self, cid: int, title: str) -> None:
        self.c.store_job(lambda: self.store.update(cid, title=title), self._renamed)

    def _renamed(self, conv: Conversation) -> None:
        """A new title shows wherever the old one did: the list or the search results, and for the chat on
        screen its header and what Chat settings and toasts name it by (renamed from the list's
        Rename…, the header kept the old title, and search results did too)."""
        self.titles[conv.id] = conv.title
        cur = self.c.current
        if cur is not None and cur.id == conv.id:
            self._show_title(cur, conv.title)
        query = self.w.sidebar.query()
        if query.strip():
            self.search(query)
        self.refresh(conv.id)

    def rename_current(self, title: str) -> None:
        """The header title was edited in place (double-click or F2)."""
        cur = self.c.current
        if cur is None or not title.strip():
            return
        cur.title = title.strip()
        self.rename(cur.id, cur.title)

    def start_rename(self) -> None:
        """F2 / Chat → Rename: edit the title where it is shown."""
        if self.c.current is None:
            self.c.toast("Start a chat first.")
            return
        self.c.title_editor.start()

    def delete_chat(self, cid: int) -> None:
        """Soft delete with Undo (the toast's button or Ctrl+Z). Messages waiting to be sent in it become its
        draft, so Undo brings them back too."""
        c = self.c
        turn = c.sending.active or c.sending.running
        if turn is not None and turn.conversation_id == cid:
            c.sending.stop()
        waiting = [q.text for q in c.sending.forget(cid)]
        title = self.title_of(cid)

        def job() -> None:
            if waiting:
                draft = self.store.get(cid).draft
                self.store.update(cid, draft="\n\n".join([*waiting, draft] if draft.strip() else waiting))
            self.store.delete(cid)

        def done(_: object) -> None:
            if c.current is not None and c.current.id == cid:
                c.current = None
                self.w.view.clear()
                self.w.show_empty(True)
                self.w.title.setText("New chat")
                self.w.composer.set_text("")
                c.fit.show_for(None)
            self.refresh()
            c.toast(f"Deleted “{title}”.", undo=lambda: self.undelete(cid))

        self.save_draft()  # the chat keeps what was typed in it; Undo brings it back
        c.store_job(job, done)

    def undelete(self, cid: int) -> None:
        def restored(_: object) -> None:
            self.refresh(cid)
            self.select(cid)

        self.c.store_job(lambda: self.store.restore(cid), restored)

    # ----- find, drafts, files -----------------------------------------------------------------------------

    def find_next(self, backwards: bool = False) -> None:
        text = self.w.find_edit.text()
        hit = self.w.view.find(text, self.find_after, backwards)
        self.find_after = hit
        found = self.w.view.matches(text)
        self.w.find_status.setText(f"{found.index(hit) + 1} of {len(found)}" if hit in found else "No match")

    def find_previous(self) -> None:
        self.find_next(backwards=True)

    def draft_changed(self, text: str) -> None:
        cur = self.c.current
        if cur is not None and self.w.composer.editing_id is None:  # type-ahead: new messages only
            self.w.draft_changed.emit(cur.id, text)
        self.save_draft()
        self.c.fit.update(text)

    def save_draft(self) -> None:
        cur = self.c.current
        if cur is None or self.store.read_only:
            return
        cid, text = cur.id, self.w.composer.draft_text()
        if text != cur.draft:
            cur.draft = text
            self.c.store_job(lambda: self.store.update(cid, draft=text))

    def export_chat(self, cid: int | None) -> None:
        cid = cid if cid is not None else (self.c.current.id if self.c.current else None)
        if cid is None:
            return
        path, _ = QFileDialog.getSaveFileName(self.w.window(), "Export chat", str(Path.home() / "chat.md"),
                                              "Markdown (*.md);;JSON, re-importable (*.json)")
        if path:
            self.c.store_job(lambda: conversation_io.export_file(self.store, cid, Path(path)),
                             lambda p: self.c.toast(f"Exported to {p}"))

    def import_chat(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w.window(), "Import chat", str(Path.home()),
                                              "Hisho chat (*.json)")
        if path:
            self.c.store_job(lambda: conversation_io.import_file(self.store, Path(path)), self.created)
