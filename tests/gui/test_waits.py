"""Every wait says what it waits for and can be stopped; the first-token time counts from Send; a resume says
what it saved; a load's toast goes when the load ends. The real window on the real model, offscreen.

Prompts are read in batches of 32 tokens here (Settings → n_batch), so a long paste is read in dozens of steps
and its progress is seen between them whatever the machine's speed.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.conversations.store import STOPPED, ChatSettings
from hisho.core.engine.client import EngineClient
from hisho.core.kv.session import PAUSE_S, RestoreReport
from hisho.core.models.store import ModelStore
from hisho.core.units import wait_text
from hisho.gui.chat.waits import reading_text, restored_text
from hisho.gui.shell.main_window import MainWindow
from tests.faults import EngineFreeze
from tests.gui.conftest import make_window, settle, wait_for, wait_idle

SHORT = ChatSettings(temperature=0.0, max_tokens=8, repeat_penalty=1.0)
NOTES = " ".join(f"Note {i % 89} is about topic {i % 13}." for i in range(40))
PASTE = "Please read these notes. " + NOTES
OTHER = "Read these notes, please. " + NOTES  # differs from the first token on: nothing of PASTE is reused
SLOW = 600_000  # ms: reading a few hundred tokens took minutes on a 2-core machine shared with other work
READING = re.compile(r"Reading your message · \d+ %")


def small_batches() -> None:
    s = settings_mod.load()
    s.set("n_batch", 32)
    s.save()


def open_chat(qtbot: QtBot, w: MainWindow, title: str) -> int:
    conv = w.ctx.store.create(title, settings=SHORT)
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    wait_idle(qtbot, w, SLOW)
    return int(conv.id)


def queued_states(w: MainWindow) -> list[str]:
    return [q.meta.text() for q in w.view.queued.values()]


def stream_state(w: MainWindow) -> str:
    widget = w.view.stream_widget
    return widget.meta.text() if widget is not None else ""


def held_tokens(w: MainWindow) -> int:
    return w.ctx.engine.seq_rm(0, 10**6)  # removes nothing: what sequence 0 holds


def engine_client(w: MainWindow) -> EngineClient:
    engine = w.ctx.engine
    assert isinstance(engine, EngineClient)
    return engine


def test_the_resume_notice_says_only_what_was_measured() -> None:
    report = RestoreReport(restored=2730, loaded_bytes=62 << 20, seconds=0.097)
    assert restored_text(report) == "Restored 2,730 tokens from disk in 97 ms"  # no speed measured: no claim
    report.saved_s = 54.6
    assert restored_text(report) == "Restored 2,730 tokens from disk in 97 ms · saved ~55 s"
    report.seconds = 1.25
    assert restored_text(report).startswith("Restored 2,730 tokens from disk in 1.2 s")


def test_reading_text_names_what_is_read() -> None:
    from hisho.core.engine.protocol import Progress

    assert reading_text(None) == ""
    assert reading_text(Progress(7, "generate", 370, 1000)) == "Reading your message · 37 %"
    assert reading_text(Progress(7, "prefill", 1000, 1000)) == "Reading your message · 99 %"
    assert reading_text(Progress(7, "generate", 10, 100), 1) == "Reading your message and the attached document · 10 %"


def test_long_paste_reading_progress_stop_and_ttft(qtbot: QtBot, hisho_home: Path) -> None:
    small_batches()
    w = make_window(qtbot)
    n_prompt = w.ctx.engine.count_tokens(messages=[{"role": "user", "content": PASTE}])
    assert n_prompt > 8 * 32

    # 1. Pasted, then sent while type-ahead still reads it: the message says how far the reading is, the
    #    message box offers Stop, and the first-token time counts from Send, the reading included. The engine
    #    is held mid-reading (a fast machine reads the paste within the window's next tick).
    cid = open_chat(qtbot, w, "ttft")
    with EngineFreeze(engine_client(w), "prefill") as held:
        w.composer.set_text(PASTE)
        wait_for(qtbot, held.frozen.is_set, SLOW)
        sent = time.monotonic()
        w.composer.submit()
        wait_for(qtbot, lambda: any(READING.fullmatch(t) for t in queued_states(w)), SLOW)
        assert w.composer.button.text() == "Stop"
        began = time.monotonic() - sent  # the reading is not done yet: the first token comes after this
    wait_idle(qtbot, w, SLOW)
    reply = w.ctx.store.branch(cid)[-1]
    assert reply.role == "assistant" and reply.ttft_s is not None
    assert reply.ttft_s >= began - 0.1, f"TTFT {reply.ttft_s:.3f} s leaves out the {began:.3f} s of reading"
    assert w.status.ttft.text() == f"TTFT {wait_text(reply.ttft_s)}"

    # 2. Sent at once (no type-ahead): the reply's own reading shows progress on the reply, Stop stops it there.
    cid = open_chat(qtbot, w, "stop")
    with EngineFreeze(engine_client(w), "generate") as held:  # the reply's reading held until Stop was clicked
        w.controller.send(OTHER)
        wait_for(qtbot, held.frozen.is_set, SLOW)
        wait_for(qtbot, lambda: READING.fullmatch(stream_state(w).capitalize()) is not None, SLOW)
        assert w.composer.button.text() == "Stop"
        w.composer.button.click()
    wait_idle(qtbot, w, SLOW)
    reply = w.ctx.store.branch(cid)[-1]
    assert reply.role == "assistant" and reply.status == STOPPED and reply.content == ""
    settle(qtbot, 1.0)
    assert held_tokens(w) < n_prompt, "the prompt was read to the end after Stop"
    assert w.ctx.engine.progress() is None
    w.close()


def test_stop_while_type_ahead_reads_the_message_gives_it_back(qtbot: QtBot, hisho_home: Path) -> None:
    small_batches()
    w = make_window(qtbot)
    cid = open_chat(qtbot, w, "give back")
    n_prompt = w.ctx.engine.count_tokens(messages=[{"role": "user", "content": PASTE}])
    # The engine is held mid-reading until the window has sent its cancel (a fast machine reads the paste
    # within the window's next tick, and there would be nothing left to stop).
    with EngineFreeze(engine_client(w), "prefill") as held:
        w.composer.set_text(PASTE)
        wait_for(qtbot, held.frozen.is_set, SLOW)
        reading = w.ctx.engine.progress()
        assert reading is not None and reading.op == "prefill"
        w.composer.submit()
        assert w.composer.text() == ""
        wait_for(qtbot, lambda: any(READING.fullmatch(t) for t in queued_states(w)), SLOW)
        # as on a slow machine, the typing pause passes while the paste is read: the draft with the template's
        # end-of-turn is queued behind it (and behind the send), and must not be read once Stop is pressed
        settle(qtbot, PAUSE_S + 0.3)
        assert w.composer.button.text() == "Stop"
        w.composer.button.click()
        # the window cancels the type-ahead at its next look at the reading
        wait_for(qtbot, lambda: reading.id in w.controller.sending._cancelled_reads, SLOW)
    wait_for(qtbot, lambda: w.composer.text() == PASTE, SLOW)  # nothing typed is lost
    wait_idle(qtbot, w, SLOW)
    assert w.ctx.store.branch(cid) == []                  # nothing was sent
    assert not w.view.queued and w.composer.button.text() == "Send"
    held = held_tokens(w)
    assert held < n_prompt
    settle(qtbot, 2.0)  # past the draft's debounce and the type-ahead pause: the stopped text is not read again
    wait_idle(qtbot, w, SLOW)
    assert held_tokens(w) == held and w.ctx.engine.progress() is None
    w.close()


def test_restart_says_what_the_resume_saved(qtbot: QtBot, hisho_home: Path) -> None:
    w = make_window(qtbot)
    cid = open_chat(qtbot, w, "resume")
    w.controller.send(PASTE)  # read by the reply itself: a measurement of this model's prefill speed
    wait_idle(qtbot, w, SLOW)
    kv = w.ctx.kv
    assert kv is not None
    wait_for(qtbot, lambda: kv.usage(cid).bytes > 0 and kv.usage(cid).measured, SLOW)
    wait_for(qtbot, lambda: (w.sidebar.kv_badge(cid) or ("", ""))[0].startswith("KV "))
    assert re.fullmatch(r"KV [\d.,]+ [KMG]iB · saves (<1 s|\d+ s|\d+ min)", w.sidebar.kv_badge(cid)[0])
    tokens = kv.usage(cid).n_tokens
    w.close()

    w = make_window(qtbot)  # the same data folder: a restart
    w.controller.select(cid)
    wait_for(qtbot, lambda: getattr(w, "last_restore_notice", "").startswith("Restored "), SLOW)
    text = w.last_restore_notice
    assert w.toast.text() in (text, "")  # shown over the chat (gone if its time is up)
    assert re.fullmatch(r"Restored [\d,]+ tokens from disk in [\d.]+ m?s · saved ~[\d.,]+ m?s", text), text
    restored = int(text.split()[1].replace(",", ""))
    assert 0.9 * tokens <= restored <= tokens  # what this prompt reuses of what was saved (the reply's end aside)
    w.close()


def test_the_loading_toast_goes_when_the_load_ends(qtbot: QtBot, hisho_home: Path, tmp_path: Path,
                                                   default_model_path: Path) -> None:
    w = make_window(qtbot)
    copy = tmp_path / "Second.gguf"
    shutil.copyfile(default_model_path, copy)
    ModelStore().add(copy, name="second")
    picker = w.model_picker
    picker.refresh()
    wait_for(qtbot, lambda: any(e.name == "second" for e in picker.entries))
    picker.choose(next(e for e in picker.entries if e.name == "second"))
    assert w.toast.text().startswith("Loading second")
    wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
             and Path(w.ctx.engine.load_params.model_path).name == "Second.gguf")
    settle(qtbot, 0.1)
    assert not w.toast.text().startswith("Loading"), "the load ended; its toast still covers the chat"
    w.close()
