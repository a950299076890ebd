"""An image chat in the window: a sent message with its picture's thumbnail, the reply, and a second picture
waiting in the composer, at 1280×720 and 700 px wide, light and dark: ``python -m hisho_dev.image_shots OUT_DIR``.
The chat is written into the store (a user message with its kept picture, a reply), so the shots are the same
every time; the pictures are drawn here.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import place, run_alone

SIZES = (("1280x720", 1280, 720), ("700px", 700, 600))
QUESTION = "What is in this picture?"
ANSWER = ("A sunset over the sea: an orange sun low on the horizon, a band of warm sky above it and dark blue "
          "water below.")


def _picture(sky: tuple[int, int, int], sea: tuple[int, int, int]) -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (640, 420), sky)
    draw = ImageDraw.Draw(img)
    for y in range(210):   # the sky fades toward the horizon
        t = y / 210
        draw.line([(0, y), (640, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(sky, (250, 190, 120),
                                                                                         strict=True)))
    draw.rectangle([0, 250, 640, 420], fill=sea)
    draw.ellipse([270, 170, 370, 270], fill=(250, 150, 40))
    draw.rectangle([0, 250, 640, 420], fill=sea)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def image_shots(app: Any, window: Any, out: Path) -> None:
    """Write images-<theme>-<size>.png."""
    from hisho.bench import projector
    from hisho.core.conversations import images as chat_images

    c = window.controller
    pair = projector.pair("shape:llava-tiny")   # a model that sees images (true shape, random weights)
    assert pair is not None
    c.switch_model(str(pair[0]), override=True)
    wait_until(app, lambda: c.model_ready and window.ctx.engine.load_params is not None
               and window.ctx.engine.load_params.model_path == str(pair[0]), timeout=600)
    sent = chat_images.keep(_picture((60, 70, 160), (20, 40, 90)))
    waiting = chat_images.keep(_picture((120, 170, 220), (30, 90, 120)))
    store = c.store
    conv = store.create("A sunset (picture sample)")
    u = store.add_message(conv.id, "user", QUESTION, images=f'["{sent}"]')
    store.add_message(conv.id, "assistant", ANSWER, parent_id=u.id, tokens=31, tokens_per_s=38.0, ttft_s=0.9)
    c.refresh(conv.id)
    c.select(conv.id)
    wait_until(app, lambda: c.current is not None and c.current.id == conv.id and window.view.built_count() == 2)
    for theme in ("light", "dark"):
        c.set_theme(theme)
        c.reload()
        wait_until(app, lambda: window.view.built_count() == 2)
        window.composer.images.clear()
        window.composer.images.add(waiting, chat_images.path(waiting))
        window.composer.set_text("And this one?")
        for size, width, height in SIZES:
            place(window, width, height)
            wait_until(app, lambda: False, timeout=0.4)
            window.grab().save(str(out / f"images-{theme}-{size}.png"))
    c.set_theme("system")


if __name__ == "__main__":
    raise SystemExit(run_alone(sys.argv[1:], image_shots, "images-*.png"))
