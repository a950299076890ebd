"""Screenshots of the newcomer's screens (``make screenshots``, after the others), each at 1280×720 and at 700 px
wide, light and dark:

- ``20b-first-start-before-asking-*``: the empty chat page with the first-start card as it opens (the bundled
  model is a demo; a model that fits, estimated offline; nothing asked of the hub yet);
- ``20a-first-start-offline-*``: after Download when the hub cannot be reached (the estimate, Try again);
- ``20-first-start-*``: after Download with the hub answering (the planner's badge from the file's header);
- ``21-downloads-*``: the Downloads tab with a finished row ("Verified (sha256) · Load now") and a row the user
  paused ("Paused by you"), buttons on each row;
- ``22-hub-installed-*``: a hub repository whose file is already installed ("✓ Installed · Load");
- ``23-sources-*``: a chat with a document attached: the sent bubble shows it, the answer lists its sources.

The hub is the hub-shaped test server on 127.0.0.1; the first-start candidates are served as sparse GGUFs whose
headers declare Llama-2-7B's tensors (so the badge is this machine's real verdict for a 7B Q4_K file), the
downloads are small real files. Nothing comes from the internet; no reply is generated (the chat is seeded).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.recommend_shots import LAPTOP
from hisho_dev.shots_common import run_alone

SIZES = ((1280, 720, "1280x720"), (700, 720, "700px"))
TINY = "TheBlock/TinyStories-GGUF"
BIG = "TheBlock/Story-Writer-GGUF"
NOTES = ("# Harbour notes\n\nThe ferry to Tern Island leaves at 7:15 every morning from pier 4; on Sundays the "
         "first one is at 9:00.\n\n# Museum\n\nThe museum on the quay opens at ten on weekdays and is closed on "
         "Mondays.\n")
QUESTION = "When does the first ferry to Tern Island leave on a Sunday?"
ANSWER = ("On Sundays the first ferry to Tern Island leaves at **9:00** from pier 4 [§ Harbour notes]; on other "
          "days it leaves at 7:15.")


def _variants(app: Any, widget: Any, out: Path, stem: str, settle: Callable[[], None] | None = None) -> None:
    from hisho.gui.shell import theme

    for name, th in (("light", theme.LIGHT), ("dark", theme.DARK)):
        theme.apply(app, th)
        for w, h, label in SIZES:
            widget.resize(w, h)
            if settle is not None:
                settle()
            wait_until(app, lambda: False, timeout=0.4)
            widget.grab().save(str(out / f"{stem}-{label}-{name}.png"))
    theme.apply(app, theme.LIGHT)


def docs_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.bench.hub import LLAMA2_7B, write_llama, write_payload
    from hisho.core.hub import repo_files
    from hisho.core.hub.suggest import CANDIDATES
    from hisho.core.planner import speed
    from hisho.gui.models.downloads_tab import PAUSED_BY_USER, VERIFIED
    from hisho.gui.models.first_start import attach_first_start
    from hisho.gui.models.models_page import open_models
    from hisho_dev.hub_server import FakeHub

    old = getattr(window, "first_start", None)
    if speed.load_profile() is None:  # the card offers a model once this computer's speed is known
        profile = speed.SpeedProfile.from_dict(LAPTOP)
        speed.save_profile(profile)
        if old is not None:
            old.speed_landed(profile)
    if old is not None and not old.isHidden():  # the window's own card, made before any hub was reachable
        window.show_empty(True)
        wait_until(app, lambda: old.candidate is not None, timeout=120)
        _variants(app, window, out, "20b-first-start-before-asking")
        old.download.click()  # the hub is not reachable yet: the calm offline line
        wait_until(app, lambda: old.lookups > 0, timeout=120)
        _variants(app, window, out, "20a-first-start-offline")
    files = Path(os.environ["HISHO_HOME"]) / "docs-shot-files"
    files.mkdir(parents=True, exist_ok=True)
    hub = FakeHub().start()
    os.environ["HF_ENDPOINT"] = hub.url
    os.environ.pop("HF_HUB_OFFLINE", None)
    try:
        stand_in = write_llama(files / "stand-in-7b.Q4_K_M.gguf", LLAMA2_7B, "Q4_K")
        for cand in CANDIDATES:
            hub.add_file(cand.repo, cand.file, stand_in)
        hub.add_repo(TINY, downloads=9_800, likes=12)
        hub.add_file(TINY, "tinystories-Q8_0.gguf", write_payload(files / "tinystories-Q8_0.gguf", 24))
        hub.add_repo(BIG, downloads=4_100, likes=7)
        hub.add_file(BIG, "story-writer-Q4_K_M.gguf", write_payload(files / "story-writer-Q4_K_M.gguf", 96))

        # The first-start card, made again now that the hub answers (the window's own one looked offline).
        if old is not None:
            old.dismissed = True
            old.hide()
        card = attach_first_start(window)
        if card is not None:
            window.show_empty(True)
            wait_until(app, lambda: card.candidate is not None, timeout=120)
            card.start_download = lambda: None  # type: ignore[method-assign]  # the stand-in is 4 GB (sparse)
            card.download.click()
            wait_until(app, lambda: card.fit is not None or card.lookups > 0, timeout=120)
            _variants(app, window, out, "20-first-start")

        page = open_models(window, "Downloads")
        page.download(repo_files(TINY)[0])
        wait_until(app, lambda: page.downloads.state_text(0) == VERIFIED, timeout=120)
        hub.throttle = 8 * 2**20
        page.download(repo_files(BIG)[0])
        wait_until(app, lambda: any(p.done > 30 * 2**20 for p in page.downloads.live.values()), timeout=120)
        for job_id in list(page.downloads.queued):
            page.downloads.pause(job_id)
        wait_until(app, lambda: not page.downloads.queued
                   and PAUSED_BY_USER in [page.downloads.state_text(r) for r in range(2)], timeout=120)
        _variants(app, page, out, "21-downloads")

        page.tabs.setCurrentWidget(page.hub)
        page.hub.query.setText("TinyStories")
        page.hub.search()
        wait_until(app, lambda: page.hub.results.count() >= 1, timeout=60)
        page.hub.results.setCurrentRow(0)
        wait_until(app, lambda: page.hub.files.rowCount() == 1 and page.hub.files.cellWidget(0, 5) is not None
                   and page.hub.files.cellWidget(0, 5).objectName() == "Installed", timeout=60)
        _variants(app, page, out, "22-hub-installed")
        for job_id in list(page.downloads.jobs):
            page.downloads.cancel(job_id)
        page.close()
    finally:
        hub.stop()
    _sources_shots(app, window, out)


def _sources_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.core.documents.extract import extract

    c = window.controller
    store = c.store
    conv = store.create("Island trip (sample)")
    notes = Path(os.environ["HISHO_HOME"]) / "harbour-notes.md"
    notes.write_text(NOTES, encoding="utf-8")
    window.ctx.documents.chat_documents().add(conv.id, extract(notes))
    now = time.time() + 1
    u = store.add_message(conv.id, "user", QUESTION, created_at=now)
    store.add_message(conv.id, "assistant", ANSWER, parent_id=u.id, tokens=38, tokens_per_s=96.0,
                      created_at=now + 2)
    c.refresh(conv.id)
    c.select(conv.id)
    sources = window.attach.sources

    def ready() -> bool:
        widgets = list(window.view.widgets.values())
        return any("sources" in w.extras for w in widgets) and any("attachments" in w.extras for w in widgets)

    wait_until(app, lambda: c.current is not None and c.current.id == conv.id and ready(), timeout=60)
    window.toast.hide()  # the Models page's last toast
    def redraw() -> None:
        """Chips and sources drawn again in the theme just applied (their icons take its text colour)."""
        sources.refresh()
        window.attach.show_for(conv.id)
        wait_until(app, lambda: False, timeout=0.3)
        wait_until(app, ready, timeout=10)

    _variants(app, window, out, "23-sources", settle=redraw)
    assert sources.reads > 0


def main(argv: list[str]) -> int:
    """These screenshots alone (``python -m hisho_dev.docs_shots OUT_DIR``), in a throw-away HISHO_HOME."""
    return run_alone(argv, docs_shots, "2[0-3]*.png")


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
