"""``python -m hisho_dev.screenshots OUT_DIR``: render the main screens to PNG (``make screenshots``).

Runs offscreen in a throw-away HISHO_HOME with the real bundled model loaded (the status bar shows real
figures). The sample conversation is written into the store by this script, so the pictures show the same
content every time; it is marked "Sample" in its title.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
from pathlib import Path

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import (
    SAMPLE_FOLLOWUP,
    SAMPLE_REPLY,
    SAMPLE_REPLY2,
    SAMPLE_USER,
    offscreen_1280x720,
    place,
)

OTHER_TITLES = [("Trip ideas for a long weekend", 0), ("Explain attention in transformers", 1),
                ("Regex for ISO dates", 3), ("Birthday message for Sam", 12), ("Rust lifetimes, simply", 40)]


def _seed(store: object) -> int:
    from hisho.core.conversations.store import ConversationStore

    assert isinstance(store, ConversationStore)
    now = time.time()
    for title, days in OTHER_TITLES:
        c = store.create(title)
        u = store.add_message(c.id, "user", title, created_at=now - days * 86400)
        store.add_message(c.id, "assistant", "…", parent_id=u.id)
        store.db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", [now - days * 86400 - 60, c.id])
    conv = store.create("Reading a large CSV in Python (sample)")
    u = store.add_message(conv.id, "user", SAMPLE_USER)
    a = store.add_message(conv.id, "assistant", SAMPLE_REPLY, parent_id=u.id, tokens=236, tokens_per_s=118.4)
    u2 = store.add_message(conv.id, "user", SAMPLE_FOLLOWUP, parent_id=a.id)
    store.add_message(conv.id, "assistant", SAMPLE_REPLY2, parent_id=u2.id, tokens=52, tokens_per_s=121.0)
    store.update(conv.id, pinned=True)
    return conv.id


def _kv_shots(app: object, window: object, out: Path, cids: list[int]) -> None:
    """A short real reply in each chat saves its KV: the sidebar shows the badges, Settings → KV cache the list."""
    from hisho.core.conversations.store import ChatSettings
    from hisho.gui.settings.preferences import open_preferences
    from hisho.gui.shell.main_window import MainWindow

    assert isinstance(window, MainWindow)
    c = window.controller
    for cid in cids:
        c.store.update(cid, settings=ChatSettings(max_tokens=24, temperature=0.0))
        c.select(cid)
        wait_until(app, functools.partial(lambda n: c.current is not None and c.current.id == n, cid))
        c.send("One more tip, briefly?")
        wait_until(app, functools.partial(
            lambda n: c.active is None and bool((window.sidebar.kv_badge(n) or ("", ""))[0]), cid), timeout=120)
    window.grab().save(str(out / "5-kv-sidebar.png"))
    dialog = open_preferences(window)
    wait_until(app, lambda: dialog.kv_page.refreshes > 0)
    window.grab().save(str(out / "6-settings-kv-cache.png"))   # a page of the window
    dialog.close()


def _use_shots(app: object, window: object, out: Path, cid: int) -> None:
    """Daily-use screens: a message queued while another chat's reply streams, the narrow window (1280×720 at
    150 % is 853×480 logical px) with the list hidden, and the dark theme chosen from the View menu."""
    from hisho.core.conversations.store import ChatSettings
    from hisho.gui.shell.main_window import MainWindow

    assert isinstance(window, MainWindow)
    c = window.controller
    story = c.store.create("A long story (sample)", settings=ChatSettings(max_tokens=300, temperature=0.0))
    c.refresh(story.id)
    c.select(story.id)
    wait_until(app, lambda: c.current is not None and c.current.id == story.id)
    c.send("Write a long story about a lighthouse keeper.")
    wait_until(app, lambda: window.view.stream_widget is not None and len(window.view.stream_widget.text) > 200,
          timeout=120)
    c.select(cid)
    wait_until(app, lambda: c.current is not None and c.current.id == cid)
    window.composer.set_text("Can you show the pandas version as code too?")
    window.composer.submit()
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / "7-queued-send.png"))
    c.stop()
    wait_until(app, lambda: c.active is None and not window.view.queued, timeout=120)
    wait_until(app, lambda: c.active is None, timeout=120)
    c.stop()
    wait_until(app, lambda: c.active is None and not c.sending.queue and c.sending.starting is None, timeout=120)
    window.resize(853, 480)
    window.toggle_sidebar()
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / "8-narrow-window.png"))
    window.toggle_sidebar()
    place(window, 1280, 720)
    dark = next(a for a in window.theme_menu.actions() if a.text() == "Dark")
    dark.trigger()
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / "9-dark-from-menu.png"))
    next(a for a in window.theme_menu.actions() if a.text() == "System").trigger()


def _attach_shots(app: object, window: object, out: Path, cid: int) -> None:
    """At 1280×720: a document attached to the chat on screen (chip on the message box, the toast saying how
    it is read), a search whose results show the matching text, and Settings → System prompts with a preset."""
    from hisho.gui.settings.preferences import open_preferences
    from hisho.gui.shell.main_window import MainWindow

    assert isinstance(window, MainWindow)
    c = window.controller
    place(window, 1280, 720)
    c.select(cid)
    wait_until(app, lambda: c.current is not None and c.current.id == cid)
    notes = Path(tempfile.mkdtemp(prefix="hisho-shots-doc-")) / "sales-notes.md"
    notes.write_text("# Sales notes\n\nThe March export has 2.4 million rows; the amount column is in cents.\n",
                     encoding="utf-8")
    window.attach.attach([notes])
    wait_until(app, lambda: window.attach.attached_count > 0, timeout=120)
    window.grab().save(str(out / "10-attach-to-chat.png"))
    window.sidebar.search.setText("chunks")
    wait_until(app, lambda: len(window.sidebar.ids()) >= 1 and window.sidebar.list.count() <= 3, timeout=10)
    window.grab().save(str(out / "11-search-snippets.png"))
    window.sidebar.search.clear()
    settings = window.ctx.settings
    settings.set("system_prompt_presets", [{"name": "Concise Python", "prompt": "You are a concise assistant "
                                            "for Python questions. Show code first."},
                                           {"name": "Plain English", "prompt": "Explain simply, without jargon."}])
    dialog = open_preferences(window)
    dialog.nav.setCurrentRow(dialog.pages.indexOf(dialog.prompts_page))
    dialog.prompts_page.reload()
    wait_until(app, lambda: False, timeout=0.3)
    window.grab().save(str(out / "12-settings-system-prompts.png"))
    dialog.close()
    place(window, 1280, 720)


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    offscreen_1280x720()
    os.environ["HISHO_HOME"] = tempfile.mkdtemp(prefix="hisho-shots-")
    from hisho.gui.settings.settings_dialog import ConversationSettingsDialog
    from hisho.gui.shell import theme
    from hisho.gui.shell.app import application, open_window

    app = application()
    window = open_window(None)
    place(window, 1280, 720)
    window.show()
    c = window.controller
    wait_until(app, lambda: c.model_ready, timeout=600)  # a loaded machine: the shots must show the model loaded
    window.grab().save(str(out / "1-empty-state.png"))
    cid = _seed(c.store)
    c.store.update(cid, draft="Can you show the pandas version as code too?")
    c.refresh(cid)
    c.select(cid)
    wait_until(app, lambda: c.current is not None and c.current.id == cid and window.view.built_count() == 4
          and window.meter_label.text() != "")
    window.grab().save(str(out / "2-conversation.png"))
    theme.apply(app, theme.DARK)
    c.reload()
    wait_until(app, lambda: False, timeout=0.5)
    window.grab().save(str(out / "3-conversation-dark.png"))
    theme.apply(app, theme.LIGHT)
    assert c.current is not None
    from hisho.core.units import MIB

    models = [(e.name, f"{e.name}  ({e.size / MIB:,.0f} MiB)") for e in window.ctx.models.list()]
    dialog = ConversationSettingsDialog(c.current, models, window, answering=window.ctx.state.now)
    dialog.system.setPlainText("You are a concise assistant for Python questions.")
    dialog.show()
    wait_until(app, lambda: False, timeout=0.3)
    dialog.grab().save(str(out / "4-settings.png"))
    dialog.close()
    _kv_shots(app, window, out, [c.store.conversations()[1].id, cid])
    _use_shots(app, window, out, cid)
    _attach_shots(app, window, out, cid)
    from hisho_dev.models_shots import models_shots

    models_shots(app, window, out)
    from hisho_dev.page_shots import page_shots

    problems = page_shots(app, window, out)
    from hisho_dev.recommend_shots import recommend_shots

    recommend_shots(app, window, out)
    from hisho_dev.docs_shots import docs_shots

    docs_shots(app, window, out)
    from hisho_dev.answer_shots import answer_shots

    answer_shots(app, window, out)
    from hisho_dev.reasoning_shots import reasoning_shots

    reasoning_shots(app, window, out)
    from hisho_dev.api_shots import api_shots

    api_shots(app, window, out)
    from hisho_dev.image_shots import image_shots

    image_shots(app, window, out)   # last: it loads the vision test pair in place of the bundled model
    window.close()
    sys.stdout.write(f"wrote {len(list(out.glob('*.png')))} screenshots to {out}\n")
    for line in problems:
        sys.stderr.write(f"off screen: {line}\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
