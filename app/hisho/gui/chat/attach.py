"""Attaching documents to the chat on screen: the composer's paperclip and files dropped on the message box.

The reading, counting and prompt rules are ``hisho.core.documents.attached`` (through the root's ``Documents``);
this module only wires the window to them: it runs the attach on the ``engine`` lane (tokens are counted there;
a reply or summary in progress finishes first), asks for an encrypted PDF's password with the summary's prompt
(``DocumentsController.ask_password``), shows the chat's documents as chips on the composer, and says what was
refused in the toast, where the user is looking. A file being read shows as "Reading report.pdf · 37 %" (pages of
a PDF, the body of a DOCX) with a Stop, which leaves it and the files after it unattached.

Rules of use: ``AttachController(window, host, composer, summary)`` once, after the window's composer and
``DocumentsController`` exist. It sees the window only as ``SourcesWindow`` (the message view, the chat on screen
changing, a parent for its dialog), the chat presenter as ``AttachHost`` and the summary as ``SummaryState``.
GUI thread only; the work goes through the app's executor.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from hisho.core.conversations import images as chat_images
from hisho.core.conversations.store import Conversation
from hisho.core.documents.attached import ChatDocument
from hisho.core.errors import UserError
from hisho.core.models.projector import projector_for
from hisho.core.models.store import ModelEntry
from hisho.core.units import format_bytes
from hisho.gui import ops
from hisho.gui.chat.composer import Composer
from hisho.gui.chat.doc_sources import DocSources, SourcesWindow
from hisho.gui.chat.documents import FILTER
from hisho.gui.chat.send_screen import FitMemory, PresenterBase

log = logging.getLogger("hisho.gui")

ERROR_MS = 20_000
PROGRESS_S = 0.2    # a file's reading progress reaches the window at most this often


def no_vision_line(models: list[ModelEntry]) -> str:
    """What the composer says when the model on screen has no projector (and which installed one sees)."""
    seeing = next((m.name for m in models if projector_for(m.path) is not None), None)
    return "This model cannot see images" + (f"; {seeing} can (switch to it in the model menu)." if seeing else ".")


class NewChats(Protocol):
    def created(self, cid: int) -> None: ...   # a chat just made: listed, shown, the message box focused


class AttachHost(PresenterBase, Protocol):
    """What attaching uses of the chat presenter, beyond ``PresenterBase``."""

    @property
    def listing(self) -> NewChats: ...

    @property
    def fit(self) -> FitMemory: ...

    @property
    def replying(self) -> bool: ...


class SummaryState(Protocol):
    """What attaching uses of the summary (``hisho.gui.chat.documents.DocumentsController``)."""

    running: bool

    def ask_password(self, name: str, wrong: bool) -> str | None: ...


class AttachController(QObject):
    def __init__(self, window: SourcesWindow, host: AttachHost, composer: Composer, summary: SummaryState) -> None:
        super().__init__(window.window())
        self.w = window
        self.c = host
        self.composer = composer
        self.summary = summary
        self.ctx = window.ctx
        self.pending: dict[int, list[str]] = {}    # conversation id -> names being read
        self.shown: dict[int, list[ChatDocument]] = {}
        self.attached_count = 0                    # attaches finished (tests wait on it)
        self.reading: dict[str, str] = {}          # name being read -> how far ("37 %"; "" before any page)
        self.stops: dict[int, threading.Event] = {}  # conversation id -> its attach's Stop
        composer.stop_reading_requested.connect(self.stop_reading)
        composer.attach_requested.connect(self.choose_files)
        composer.files_dropped.connect(self.attach)
        composer.images_given.connect(self.take_images)
        composer.detach_requested.connect(self.detach)
        window.conversation_selected.connect(self.show_for)
        self.sources = DocSources(window)          # the documents on the messages: attachments and sources

    # ----- entry points ----------------------------------------------------------------------------------

    def choose_files(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(self.w.window(), "Attach documents or pictures to this chat", "",
                                                f"Pictures (*.png *.jpg *.jpeg *.webp);;{FILTER}")
        if names:
            self.composer.take_files([Path(n) for n in names])

    def take_images(self, given: list[bytes | Path]) -> None:
        """Pictures pasted or dropped: checked and kept in the data folder (``conversations.images``) off the
        GUI thread, then shown on the composer; a model that cannot see them says so instead."""
        vision = self.ctx.chat.engine.load_info.get("vision")
        if not vision:
            self.composer.images.note(no_vision_line(self.ctx.models.list()))
            return
        self.composer.images.note("Reading the picture…")

        def keep() -> list[tuple[str, Path] | str]:
            out: list[tuple[str, Path] | str] = []
            for item in given:
                try:
                    data = item.read_bytes() if isinstance(item, Path) else item
                    name = chat_images.keep(data)
                    out.append((name, chat_images.path(name)))
                except (UserError, OSError) as exc:
                    where = item.name if isinstance(item, Path) else "The pasted picture"
                    out.append(f"{where}: {exc}")
            return out

        def shown(out: list[tuple[str, Path] | str]) -> None:
            self.composer.images.note("")
            refused = [x for x in out if isinstance(x, str)]
            for x in out:
                if not isinstance(x, str):
                    self.composer.images.add(*x)
            if refused:
                self.composer.images.note(refused[0])

        ops.database(self.ctx.executor, keep).success(shown).failure(self.c.report).run()

    def attach(self, files: list[Path]) -> None:
        """Attach ``files`` to the chat on screen (a new chat is made first when there is none)."""
        c = self.c
        if not files:
            return
        if c.current is None:
            def created(conv: Conversation) -> None:
                c.listing.created(conv.id)
                self._start(conv.id, files)

            c.store_job(lambda: c.service.new_conversation(), created)
            return
        self._start(c.current.id, files)

    def detach(self, document_id: int) -> None:
        c = self.c
        if c.current is None:
            return
        cid = c.current.id
        gone = next((d.name for d in self.shown.get(cid, []) if d.id == document_id), "the document")
        ops.database(self.ctx.executor, lambda: self.ctx.documents.chat_documents().remove(document_id)) \
            .success(lambda _: self._removed(cid, gone)).failure(c.report).run()

    # ----- the work --------------------------------------------------------------------------------------

    def _start(self, cid: int, files: list[Path]) -> None:
        c = self.c
        names = [f.name for f in files]
        self.pending.setdefault(cid, []).extend(names)
        self._show(cid)
        busy = "after the reply" if c.replying else \
            "after the summary" if self.summary.running else ""
        if busy:
            c.toast(f"Reading {', '.join(names)} {busy}…", ms=4000)
        prompt = self.ctx.chat.prompt_messages
        stop = self.stops.setdefault(cid, threading.Event())
        stop.clear()
        post, last = self.ctx.executor.post, [0.0]

        def progress(name: str, done: int, total: int) -> None:   # the engine lane: paced, then posted
            now = time.monotonic()
            if total and done < total and now - last[0] < PROGRESS_S:
                return
            last[0] = now
            post(lambda: self._progressed(cid, name, done, total))

        def job() -> tuple[list[ChatDocument], list[str]]:
            self.ctx.ensure_loaded()   # nothing answers (the app's state): load the planned model
            return self.ctx.documents.attach_to_chat(cid, files, ask_password=self.summary.ask_password,
                                                      prompt=prompt, progress=progress, stop=stop.is_set)

        ops.engine(self.ctx.executor, job).success(lambda out: self._attached(cid, names, out)) \
            .failure(lambda exc: self._failed(cid, names, exc)).run()
        log.info("attaching %s to conversation %s", ", ".join(names), cid)

    def stop_reading(self) -> None:
        """The reading chip's Stop: the chat on screen's attach stops at its next page or block."""
        current = self.c.current
        stop = self.stops.get(current.id) if current is not None else None
        if stop is not None and self.pending.get(current.id if current else -1):
            stop.set()

    def _progressed(self, cid: int, name: str, done: int, total: int) -> None:
        if name not in self.pending.get(cid, []):
            return   # a late report of a file already done
        self.reading[name] = f"{min(99, done * 100 // total)} %" if total else ""
        self._show(cid)

    def _attached(self, cid: int, names: list[str], out: tuple[list[ChatDocument], list[str]]) -> None:
        added, refused = out
        self._done_reading(cid, names)
        self.attached_count += 1
        c = self.c
        note = self.ctx.documents.chat_documents().note(cid) if added else ""
        stopped = self.stops.get(cid) is not None and self.stops[cid].is_set()
        if stopped:
            ok = f"Attached {', '.join(d.name for d in added)}. " if added else ""
            left = ", ".join(n for n in names if n not in {d.name for d in added})
            c.toast(f"{ok}Stopped reading {left}: not attached.", ms=6000)
        elif refused:
            ok = f"Attached {', '.join(d.name for d in added)}. " if added else ""
            c.toast(f"{ok}Not attached: {'; '.join(refused)}", ms=ERROR_MS)
        elif added:
            c.toast(f"Attached to this chat. {note}", ms=8000)
        self.show_for(cid)
        self.sources.refresh()
        if c.current is not None and c.current.id == cid:
            c.fit.update()   # the meter counts the documents now in the prompt

    def _failed(self, cid: int, names: list[str], exc: BaseException) -> None:
        self._done_reading(cid, names)
        self.attached_count += 1
        self._show(cid)
        self.c.report(exc)

    def _done_reading(self, cid: int, names: list[str]) -> None:
        waiting = self.pending.get(cid, [])
        for n in names:
            if n in waiting:
                waiting.remove(n)
            self.reading.pop(n, None)

    def _removed(self, cid: int, name: str) -> None:
        self.c.toast(f"{name} removed from this chat; the next question is asked without it.",
                                ms=5000)
        self.show_for(cid)
        self.sources.refresh()
        self.c.fit.update()

    # ----- chips -----------------------------------------------------------------------------------------

    def show_for(self, cid: int) -> None:
        """Read the chat's documents (store lane) and show them on the composer if it is still on screen."""
        def read() -> list[ChatDocument]:
            return self.ctx.documents.chat_documents().attached(cid)

        def shown(docs: list[ChatDocument]) -> None:
            self.shown[cid] = docs
            self._show(cid)

        ops.database(self.ctx.executor, read).success(shown).quiet("no attachments").run()

    def _show(self, cid: int) -> None:
        current = self.c.current
        if current is None or current.id != cid:
            return
        chips = [(d.id, d.name, f"{d.name} · {d.tokens:,} tokens · {format_bytes(len(d.text.encode()))} of text")
                 for d in self.shown.get(cid, [])]
        chips += [(0, f"Reading {n} · {self.reading[n]}" if self.reading.get(n) else f"Reading {n}…",
                   "Being read; questions sent meanwhile wait for it. Stop leaves it unattached")
                  for n in self.pending.get(cid, [])]
        self.composer.set_attachments(chips)
