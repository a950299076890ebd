"""The Models page's screenshots for ``make screenshots``: Installed (and what Delete says goes with a model), Hub
(a repository with its fit badges, also at 1280×720; a gated one asking for a token) and Downloads (a download
running, then paused at about 45 %).

The hub is the hub-shaped test server (hisho_dev.hub_server) on 127.0.0.1 with files written here: sparse
GGUFs whose headers declare Llama-2-13B's tensors (the badges are this machine's real verdicts for them) and a
small real file to download. Nothing comes from the internet.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hisho_dev.qt_wait import wait_until
from hisho_dev.shots_common import place

REPO = "TheBlock/Llama-2-13B-chat-GGUF"
TINY = "TheBlock/TinyStories-GGUF"
OTHERS = [("bartowski/Qwen2.5-7B-Instruct-GGUF", 412_000, 310), ("unsloth/gemma-3-4b-it-GGUF", 298_000, 402),
          ("lmstudio/Mistral-7B-Instruct-v0.3-GGUF", 187_000, 151), ("TheBlock/Llama-2-7B-GGUF", 120_500, 98),
          ("ggml-org/SmolLM2-1.7B-Instruct-GGUF", 64_000, 37), ("meta-like/Llama-3.1-8B-Gated-GGUF", 51_000, 80)]


CARD = """---
license: llama2
---
# Llama 2 13B Chat — GGUF

GGUF conversions of a 13-billion-parameter chat model, in three sizes:

| file | bits per weight | use |
|---|---|---|
| `Q4_K_M` | 4.8 | the usual choice: small, good quality |
| `Q8_0` | 8.5 | near-lossless |
| `F16` | 16 | reference; needs a lot of memory |

Run it with any llama.cpp-based app.
"""


# Downloads and hub plans take longer than the chat screens' waits.
_wait = functools.partial(wait_until, timeout=60.0)


def _on_modal(app: Any, then: Callable[[Any], None]) -> None:
    """Run ``then(dialog)`` once a modal dialog is up (the page opens them itself and waits in them)."""
    from PySide6.QtCore import QTimer

    def check() -> None:
        dialog = app.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(50, check)
        else:
            then(dialog)

    QTimer.singleShot(50, check)


def _grab_and_reject(out: Path, name: str) -> Callable[[Any], None]:
    def then(dialog: Any) -> None:
        dialog.grab().save(str(out / name))
        dialog.reject()
    return then


def _delete_shot(app: Any, page: Any, out: Path) -> None:
    """Delete asks what goes with the model: a copy of the bundled model (its KV snapshots, saved by the chat
    screens, stay: the bundled model is the same file)."""
    from hisho.core.models.store import ModelStore, bundled_model_path

    bundled = bundled_model_path()
    if bundled is None:
        return
    ModelStore().add(bundled, name="smollm2-135m-copy", copy=True)
    page.refresh()
    _wait(app, lambda: any(e.name == "smollm2-135m-copy" for e in page.entries))
    page.model_table.selectRow(next(i for i, e in enumerate(page.entries) if e.name == "smollm2-135m-copy"))
    _on_modal(app, _grab_and_reject(out, "7b-models-delete.png"))
    page.delete_button.click()
    _wait(app, lambda: (out / "7b-models-delete.png").exists() and app.activeModalWidget() is None)


def _gated_shots(app: Any, window: Any, page: Any, out: Path, hub: Any, files: Path) -> None:
    """A gated repository without a token: the token dialog, then (cancelled) the one line."""
    from hisho.bench.hub import LLAMA2_13B, write_llama

    repo = next(r for r, _d, _l in OTHERS if "Gated" in r)
    p = write_llama(files / "gated.Q4_K_M.gguf", LLAMA2_13B, "Q4_K")
    hub.add_file(repo, "llama-3.1-8b.Q4_K_M.gguf", p, sha256="c" * 64)
    _on_modal(app, _grab_and_reject(out, "8c-models-hub-token.png"))
    results = page.hub.results
    results.setCurrentRow(next(i for i in range(results.count()) if repo in results.item(i).text()))
    _wait(app, lambda: "gated" in page.hub.status.text() and app.activeModalWidget() is None)
    window.grab().save(str(out / "8d-models-hub-gated.png"))


def models_shots(app: Any, window: Any, out: Path) -> None:
    from hisho.bench.hub import LLAMA2_13B, write_llama, write_payload
    from hisho.gui.models.downloads_tab import PAUSED_BY_USER
    from hisho.gui.models.models_page import open_models
    from hisho_dev.hub_server import FakeHub

    files = Path(os.environ["HISHO_HOME"]) / "hub-files"
    files.mkdir(parents=True, exist_ok=True)
    hub = FakeHub().start()
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        hub.add_repo(REPO, downloads=523_000, likes=611)
        for wtype, label in (("Q4_K", "Q4_K_M"), ("Q8_0", "Q8_0"), ("F16", "F16")):
            p = write_llama(files / f"llama-2-13b-chat.{label}.gguf", LLAMA2_13B, wtype)
            hub.add_file(REPO, p.name, p, sha256=f"{len(label):064x}")  # shown, never downloaded
        card = files / "README.md"
        card.write_text(CARD, encoding="utf-8")
        hub.add_file(REPO, "README.md", card, lfs=False)
        hub.add_repo(TINY, downloads=9_800, likes=12)
        hub.add_file(TINY, "tinystories-Q8_0.gguf", write_payload(files / "tinystories-Q8_0.gguf", 48))
        for repo, downloads, likes in OTHERS:
            hub.add_repo(repo, downloads=downloads, likes=likes, gated="Gated" in repo)
        page = open_models(window)
        place(window, 1280, 720)
        _wait(app, lambda: bool(page.entries) and page.model_table.cellWidget(0, 7) is not None
              and page.model_table.cellWidget(0, 7).objectName() == "FitBadge")
        page.model_table.selectRow(0)
        window.grab().save(str(out / "7-models-installed.png"))
        _delete_shot(app, page, out)

        page.tabs.setCurrentWidget(page.hub)
        page.hub.query.setText("GGUF")
        page.hub.search()
        _wait(app, lambda: page.hub.results.count() >= 8)
        row = next(i for i in range(page.hub.results.count()) if REPO in page.hub.results.item(i).text())
        page.hub.results.setCurrentRow(row)
        _wait(app, lambda: len(page.hub.fits) == 3 and "GGUF conversions" in page.hub.card.toPlainText())
        window.grab().save(str(out / "8-models-hub.png"))
        place(window, 1280, 720)
        _wait(app, lambda: False, timeout=0.3)
        window.grab().save(str(out / "8b-models-hub-1280x720.png"))
        place(window, 1280, 720)
        _gated_shots(app, window, page, out, hub, files)

        from hisho.core.hub import repo_files

        hub.throttle = 12 * 2**20
        page.download(repo_files(TINY)[0])
        _wait(app, lambda: any(p.done > 20 * 2**20 and p.eta_s for p in page.downloads.live.values()))
        page.downloads.job_table.selectRow(0)
        window.grab().save(str(out / "9-models-downloading.png"))
        for job_id in list(page.downloads.queued):
            page.downloads.pause(job_id)
        _wait(app, lambda: not page.downloads.queued and page.downloads.job_table.rowCount() == 1
              and page.downloads.state_text(0) == PAUSED_BY_USER)
        window.grab().save(str(out / "9b-models-download-paused.png"))
        for job_id in list(page.downloads.jobs):
            page.downloads.cancel(job_id)
        page.close()
    finally:
        hub.stop()
