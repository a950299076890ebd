"""``python -m hisho_dev.waits_shots OUT_DIR``: the waits, rendered from a real run (offscreen, real model).

A scripted run of what a newcomer meets: a long paste sent at once (the reply's reading: "reading your
message · N %", then Stop), a long paste sent while type-ahead still reads it (the waiting message says how far
it is, Stop gives the text back), a long message read to the end (a measured prefill speed), then a restart
whose resume says what it saved, and the labelled KV badges. Each state at 1280×720 and 700 px wide, light
and dark. Prompts are read in batches of 32 tokens so the progress is seen between them. It prints one line
per step with what it saw (the scripted-run record).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PASTE = "Please read these notes. " + " ".join(f"Note {i % 89} is about topic {i % 13}." for i in range(150))
SIZES = ((1280, 720), (700, 720))


def wait_until(app: Any, until: Callable[[], bool], timeout: float = 600.0) -> bool:
    end = time.monotonic() + timeout
    while not until() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)
    for _ in range(10):
        app.processEvents()
    return until()


def say(text: str) -> None:
    sys.stdout.write(f"{time.strftime('%H:%M:%S')} {text}\n")
    sys.stdout.flush()


def shoot(app: Any, window: Any, out: Path, name: str) -> None:
    """``name``-{1280,700}-{light,dark}.png of the window as it is now (the wait keeps running meanwhile)."""
    from hisho.gui.shell import theme

    for dark in (False, True):
        theme.apply(app, theme.choose("dark" if dark else "light"))
        for w, h in SIZES:
            window.resize(w, h)
            wait_until(app, lambda: False, 0.3)
            window.grab().save(str(out / f"{name}-{w}-{'dark' if dark else 'light'}.png"))
    theme.apply(app, theme.choose("light"))
    window.resize(*SIZES[0])


def open_chat(app: Any, window: Any, title: str) -> int:
    from hisho.core.conversations.store import ChatSettings

    c = window.controller
    conv = c.store.create(title, settings=ChatSettings(max_tokens=24, temperature=0.0, repeat_penalty=1.0))
    c.refresh(conv.id)
    c.select(conv.id)
    wait_until(app, lambda: c.current is not None and c.current.id == conv.id and not c.ctx.executor.busy("engine"))
    return int(conv.id)


def stream_state(window: Any) -> str:
    widget = window.view.stream_widget
    return str(widget.meta.text()) if widget is not None else ""


def idle(app: Any, window: Any) -> None:
    c = window.controller
    wait_until(app, lambda: c.active is None and c.sending.starting is None and not c.ctx.executor.busy("engine")
               and not c.ctx.executor.busy("store"))


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "shots-waits").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["HISHO_HOME"] = tempfile.mkdtemp(prefix="hisho-waits-")
    from hisho.core import settings as settings_mod
    from hisho.gui.shell.app import application, open_window

    s = settings_mod.load()
    s.set("n_batch", 32)
    s.save()
    app = application()
    window = open_window(None)
    window.resize(*SIZES[0])
    window.show()
    c = window.controller
    wait_until(app, lambda: c.model_ready)
    say(f"model loaded; status bar: {window.status.model.text()!r}")

    # 1. Sent at once: the reply reads the paste, says how far, and Stop stops it.
    first = open_chat(app, window, "Long paste, sent at once")
    c.send(PASTE)
    wait_until(app, lambda: stream_state(window).startswith("reading your message"))
    say(f"reply reading: {stream_state(window)!r}; button {window.composer.button.text()!r}")
    shoot(app, window, out, "1-reply-reading")
    started = time.monotonic()
    window.composer.button.click()
    idle(app, window)
    last = c.store.branch(first)[-1]
    say(f"Stop: reply {last.status!r}, {len(last.content)} chars, after {time.monotonic() - started:.1f} s; "
        f"engine progress now {c.ctx.engine.progress()}")

    # 2. Pasted, type-ahead reading it, then sent: the waiting message says how far, Stop gives it back.
    second = open_chat(app, window, "Long paste, sent while read ahead")
    window.composer.set_text(PASTE)
    wait_until(app, lambda: (p := c.ctx.engine.progress()) is not None and p.op == "prefill")
    window.composer.submit()
    wait_until(app, lambda: any(q.meta.text().startswith("Reading your message") for q in window.view.queued.values()))
    say(f"waiting message: {[q.meta.text() for q in window.view.queued.values()]}; "
        f"button {window.composer.button.text()!r}")
    shoot(app, window, out, "2-send-reading")
    began = c.active is not None  # the reading may have ended while the shots were taken: then a reply stops
    window.composer.button.click()
    wait_until(app, lambda: window.composer.text() == PASTE or (c.active is None and c.sending.starting is None))
    idle(app, window)
    say(f"Stop ({'after the reply began' if began else 'while the message was read'}): message box holds "
        f"{len(window.composer.text())} chars, chat has {len(c.store.branch(second))} messages")
    window.composer.clear()

    # 3. Read to the end: the TTFT counts from Send; the prefill speed is measured and the save lands.
    cid = open_chat(app, window, "Long paste, answered")
    sent = time.monotonic()
    c.send(PASTE)
    idle(app, window)
    reply = c.store.branch(cid)[-1]
    say(f"answered: stored TTFT {reply.ttft_s:.2f} s (Send → first token {time.monotonic() - sent:.1f} s ago); "
        f"status bar {window.status.ttft.text()!r}")
    kv = window.ctx.kv
    wait_until(app, lambda: kv is not None and kv.usage(cid).bytes > 0 and kv.usage(cid).measured)
    wait_until(app, lambda: (window.sidebar.kv_badge(cid) or ("", ""))[0].startswith("KV "), 30)
    say(f"badge: {window.sidebar.kv_badge(cid)}")
    window.close()

    # 4. A restart: the chat comes back from disk and says what that saved.
    window = open_window(None)
    window.resize(*SIZES[0])
    window.show()
    c = window.controller
    wait_until(app, lambda: c.model_ready)
    c.select(cid)
    wait_until(app, lambda: getattr(window, "last_restore_notice", "").startswith("Restored "))
    say(f"after restart: {getattr(window, 'last_restore_notice', '')!r}; toast {window.toast.text()!r}")
    shoot(app, window, out, "3-resumed")
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
