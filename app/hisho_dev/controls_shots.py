"""``python -m hisho_dev.controls_shots OUT_DIR``: the waits that can be stopped and the screens around them,
light and dark, at 1280×720 and at 700 px: the first-start card with its fit badges (offline), the Hub tab's
files, a chat with a document chip and a toast over its end, a document being read ("Reading … · N %" with
Stop), a model load with its Stop, and what the window says after that Stop.

Offscreen, in a throw-away HISHO_HOME, on the bundled model; the hub is the hub-shaped test server
(hisho_dev.hub_server) with files written here, the model being loaded is a true-shape 1B file
(hisho.bench.shapes), and the PDF is written here. Nothing comes from the internet. Each PNG is named
``<screen>-<theme>-<size>.png``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import place

SIZES = (("1280x720", 1280, 720), ("700px", 700, 720))
REPO = "TheBlock/Llama-2-13B-chat-GGUF"
PAGE_S = 0.05    # the PDF's pages are read slowly, as from a slow disk, so its progress can be seen


def pause(app: Any, seconds: float = 0.3) -> None:
    wait_until(app, lambda: False, timeout=seconds)


def shoot(window: Any, out: Path, name: str) -> None:
    window.grab().save(str(out / f"{name}.png"))


def first_start(app: Any, window: Any, out: Path, tag: str, blank: int) -> None:
    card = getattr(window, "first_start", None)
    if card is None:
        return
    c = window.controller
    window.host.back()
    c.select(blank)
    wait_until(app, lambda: c.current is not None and c.current.id == blank and window.empty.isVisible())
    wait_until(app, lambda: card.candidate is not None and card.isVisible(), timeout=60)
    pause(app)
    shoot(window, out, f"first-start-{tag}")


def hub_tab(app: Any, window: Any, out: Path, tag: str) -> None:
    from hisho.gui.models.models_page import open_models

    page = open_models(window, "Hub")
    if page.hub.repo != REPO:
        page.hub.query.setText("llama")
        page.hub.search()
        wait_until(app, lambda: page.hub.results.count() >= 3, timeout=60)
        results = page.hub.results
        results.setCurrentRow(next(i for i in range(results.count()) if REPO in results.item(i).text()))
    wait_until(app, lambda: len(page.hub.fits) == 3 and "GGUF" in page.hub.card.toPlainText(), timeout=60)
    pause(app, 0.5)
    shoot(window, out, f"hub-{tag}")
    window.host.back()


def chat_with_toast(app: Any, window: Any, out: Path, tag: str, cid: int) -> None:
    c = window.controller
    window.host.back()
    c.select(cid)
    wait_until(app, lambda: c.current is not None and c.current.id == cid and window.view.built_count() >= 2)
    window.composer.set_attachments([(1, "sales-notes.md", "sales-notes.md · 40 tokens")])
    c.toast("Restored 2,730 tokens from disk in 0.1 s · saved ~55 s", ms=60_000)
    pause(app, 0.5)
    shoot(window, out, f"toast-chip-{tag}")
    window.toast.dismiss()
    window.composer.set_attachments([])


def reading(app: Any, window: Any, out: Path, tag: str, pdf: Path) -> None:
    from hisho.core.documents import binary

    att = window.attach
    before = att.attached_count
    page_text = binary._page_text

    def slow(doc: Any, index: int) -> tuple[str, bool]:
        time.sleep(PAGE_S)
        return page_text(doc, index)

    binary._page_text = slow  # type: ignore[assignment]
    try:
        att.attach([pdf])
        wait_until(app, lambda: any(" %" in n for n in window.composer.attachment_names()), timeout=60)
        pause(app, 0.6)
        shoot(window, out, f"reading-{tag}")
        att.stop_reading()
        wait_until(app, lambda: att.attached_count > before, timeout=60)
        pause(app)
        shoot(window, out, f"reading-stopped-{tag}")
    finally:
        binary._page_text = page_text  # type: ignore[assignment]
    window.toast.dismiss()


def load_stop(app: Any, window: Any, out: Path, tag: str, big: Path) -> None:
    c = window.controller
    progress = window.ctx.engine.progress
    c.switch_model(str(big), override=True)
    wait_until(app, lambda: (p := progress()) is not None and p.op == "load" and p.done > 50, timeout=120)
    pause(app, 0.7)
    shoot(window, out, f"loading-{tag}")
    window.status.stop_load.click()
    wait_until(app, lambda: c.model_ready, timeout=120)
    pause(app)
    shoot(window, out, f"load-stopped-{tag}")
    window.toast.dismiss()


def text_pdf(path: Path, pages: list[str]) -> Path:
    """A plain PDF, one line of Helvetica per page, written by hand (objects, then the cross-reference table)."""
    n = len(pages)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
               + b"] /Count %d >>" % n,
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    for i, text in enumerate(pages):
        line = text.replace("\\", "").replace("(", "").replace(")", "").encode("latin-1", "replace")
        stream = b"BT /F1 12 Tf 50 740 Td (" + line + b") Tj ET"
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> "
                       b">> /Contents %d 0 R >>" % (5 + 2 * i))
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    body, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(body))
        body += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref = len(body)
    body += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    body += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    body += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(body))
    return path


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "screenshots").resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if os.environ["QT_QPA_PLATFORM"] == "offscreen":  # a 1280×720 screen, as hisho_dev.screenshots makes
        screens = Path(tempfile.mkdtemp(prefix="hisho-shots-screen-")) / "screens.json"
        screens.write_text('{"screens": [{"name": "shots", "x": 0, "y": 0, "width": 1280, "height": 720, '
                           '"logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}', encoding="utf-8")
        os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={screens}"
    home = Path(tempfile.mkdtemp(prefix="hisho-shots-"))
    os.environ["HISHO_HOME"] = str(home)
    from hisho.bench.hub import LLAMA2_13B, write_llama
    from hisho.bench.shapes import model_file
    from hisho.gui.shell.app import application, open_window
    from hisho_dev.hub_server import FakeHub
    from hisho_dev.shots_common import SAMPLE_REPLY, SAMPLE_USER

    big = model_file("llama-3.2-1b", "Q4_0")
    files = home / "hub-files"
    files.mkdir()
    hub = FakeHub().start()
    os.environ["HF_ENDPOINT"] = hub.url
    hub.add_repo(REPO, downloads=523_000, likes=611)
    for other, downloads in (("TheBlock/Llama-2-7B-GGUF", 120_500), ("bartowski/Llama-3.2-3B-Instruct-GGUF", 98_000),
                             ("meta-like/Llama-3.1-8B-GGUF", 51_000)):
        hub.add_repo(other, downloads=downloads, likes=downloads // 900)
    for wtype, label in (("Q4_K", "Q4_K_M"), ("Q8_0", "Q8_0"), ("F16", "F16")):
        p = write_llama(files / f"llama-2-13b-chat.{label}.gguf", LLAMA2_13B, wtype)
        hub.add_file(REPO, p.name, p, sha256=f"{len(label):064x}")
    (files / "README.md").write_text("# Llama 2 13B Chat — GGUF\n\nGGUF conversions in three sizes.\n")
    hub.add_file(REPO, "README.md", files / "README.md", lfs=False)
    pdf = text_pdf(home / "annual-report.pdf", [f"Page {i} of the annual report. Revenue line {i}."
                                                 for i in range(1, 161)])
    app = application()
    window = open_window(None)
    place(window, 1280, 720)
    window.show()
    c = window.controller
    wait_until(app, lambda: c.model_ready, timeout=600)
    conv = c.store.create("Sample: reading a large CSV")
    user = c.store.add_message(conv.id, "user", SAMPLE_USER)
    c.store.add_message(conv.id, "assistant", SAMPLE_REPLY, parent_id=user.id)
    blank = c.store.create("New chat")
    c.refresh(conv.id)
    try:
        for theme_name in ("light", "dark"):
            c.set_theme(theme_name)
            for size, width, height in SIZES:
                place(window, width, height)
                pause(app)
                tag = f"{theme_name}-{size}"
                first_start(app, window, out, tag, blank.id)
                hub_tab(app, window, out, tag)
                chat_with_toast(app, window, out, tag, conv.id)
                reading(app, window, out, tag, pdf)
                load_stop(app, window, out, tag, big)
        c.set_theme("system")
    finally:
        window.close()
        hub.stop()
    sys.stdout.write(f"wrote {len(list(out.glob('*.png')))} screenshots to {out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
