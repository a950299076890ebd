"""A real base model in the window (Gemma-3-270M from its PyPI chunk packages: no chat template): the header and
the model picker say it is a base model, the empty chat says what that means, and its replies (plain completion)
never show one of its control tokens as text (``<start_of_image>``, ``<eos>``, ``<unused…>``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gguf import GGUFReader
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from hisho.core.conversations.store import ChatSettings
from hisho.gui.shell.main_window import MainWindow
from tests.gui.conftest import wait_for, wait_idle, wait_reply

CONTROL, USER_DEFINED = 3, 4  # gguf TokenType
# Gemma's own markers among its user-defined tokens (its HTML tags, "<table>", are text and may be shown).
MARKER = re.compile(r"<[a-z0-9]+(?:_[a-z0-9]+)+>")


def control_texts(path: Path) -> set[str]:
    """The texts of the model's control tokens and of its user-defined markers."""
    r = GGUFReader(str(path))
    types, toks = r.fields["tokenizer.ggml.token_type"], r.fields["tokenizer.ggml.tokens"]
    out = set()
    for t, k in zip(toks.data, types.data):
        text, kind = bytes(toks.parts[t]).decode("utf-8", "replace"), int(types.parts[k][0])
        if kind == CONTROL or (kind == USER_DEFINED and MARKER.fullmatch(text)):
            out.add(text)
    return out


@pytest.mark.timeout(1200)
def test_a_base_model_is_marked_and_never_shows_its_control_tokens(qtbot: QtBot, window: MainWindow,
                                                                    real_gemma_path: Path) -> None:
    w = window
    controls = {t for t in control_texts(real_gemma_path) if len(t) > 2}
    assert "<start_of_image>" in controls
    w.status.set_reply_figures(118.4, 0.42)  # the last model's figures, as after a reply
    w.controller.switch_model(str(real_gemma_path), override=True)
    wait_for(qtbot, lambda: w.controller.model_ready and w.ctx.engine.load_params is not None
             and w.ctx.engine.load_params.model_path == str(real_gemma_path), 300_000)
    wait_idle(qtbot, w)
    assert w.ctx.engine.load_info["base_model"] is True
    assert w.status.speed.text() == "— tok/s" and w.status.ttft.text() == "TTFT —"  # not the last model's
    assert w.model_label.text().endswith("· base model")
    assert "base model" in w.empty_subtitle.text()
    conv = w.ctx.store.create("Base", settings=ChatSettings(temperature=1.0, max_tokens=160, seed=7))
    w.controller.refresh(conv.id)
    w.controller.select(conv.id)
    wait_for(qtbot, lambda: w.controller.current is not None and w.controller.current.id == conv.id)
    for text in ("Hello, who are you?", "Describe a picture of a cat."):
        known = {m.id for m in w.ctx.store.branch(conv.id)}
        w.composer.set_text(text)
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
        wait_reply(qtbot, w, conv.id, known)
        reply = w.ctx.store.branch(conv.id)[-1]
        shown = w.view.widgets[reply.id].text
        assert reply.content.strip(), "a base model continues the text"
        leaked = [t for t in controls if t in shown or t in reply.content]
        assert not leaked, leaked
    # installed, the picker lists it as a base model (and the bundled chat model as it is)
    from hisho.core.models.store import ModelStore

    ModelStore().add(real_gemma_path, name="gemma-3-270m")
    picker = w.model_picker
    assert picker is not None
    picker.refresh()
    wait_for(qtbot, lambda: any("gemma-3-270m" in a.text() for a in picker.menu_.actions()), 60_000)
    labels = [a.text() for a in picker.menu_.actions()]
    assert any("gemma-3-270m" in t and t.endswith("base model") for t in labels), labels
    assert any("smollm2" in t.lower() and "base model" not in t for t in labels), labels
