"""The window on a Gemma-3-shape model (sliding window of 512, 5 local : 1 global layers): regenerating the last
reply and editing-and-resending the last message give exactly the tokens a fresh prefill of the same history
gives, though the replies are longer than the window cache holds (so the engine keeps nothing it cannot continue
exactly: it restores the checkpoint before the prompt's last token, or the one at the turn boundary).

The model is the tiny true-shape file (random weights: a missing cell changes greedy output). The reference is the
same history replayed in the same pieces (docs/kv-format.md "Numerics"): the original reply for a regenerate (it
came from an empty sequence), and for the edit a second chat where the same first turn is sent on an empty
sequence and the edited message is sent as an ordinary next turn.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from hisho.core import settings
from hisho.core.conversations.store import DONE, ChatSettings
from hisho.gui.shell.app import open_window
from hisho.gui.shell.main_window import MainWindow
from tests.fixtures.gguf_shapes import true_model
from tests.gui.conftest import message_ids, wait_for, wait_reply
from tests.gui.test_chat_window import open_chat, type_and_enter

# Replies of 1200 tokens: with the chat's two sequences the window layers cache ~512 x 2 + n_ubatch cells, so
# after a second such reply the cells the last prompt's window needs are overwritten.
# A repeat penalty keeps greedy decoding on random weights out of a one-token loop, so every reply token depends
# on what the cache holds (the sampler is the same on both sides of each comparison).
GREEDY = ChatSettings(temperature=0.0, max_tokens=1200, repeat_penalty=1.5)
WORDS = ("harbour lamp keeper storm granite fog beacon tide gull rope lantern reef compass spray signal "
         "cliff wave night ship light").split()


def words(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * i * 3 + i) % len(WORDS)] for i in range(n))


FIRST = "Tell me about lighthouses: " + words(1, 60)
SECOND = "And about the sea: " + words(2, 80)
EDITED = "And about the mountains: " + words(3, 80)


@pytest.fixture
def gemma_window(qtbot: QtBot) -> Iterator[MainWindow]:
    # One thread: a thread change moves the last bits of flash attention over 512+ cells (docs/threads.md).
    stored = settings.load()
    stored.set("n_threads", 1)
    stored.save()
    w = open_window(str(true_model("gemma-3-tiny", "Q8_0")))
    # No type-ahead: it prefills a draft in pieces that depend on timing, and the comparisons below need the
    # same pieces on both sides (type-ahead's own exactness: tests/engine/test_exact_reuse.py (d)).
    assert w.ctx.kv is not None
    w.draft_changed.disconnect(w.ctx.kv.draft)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.model_ready, timeout=300_000)
    assert w.ctx.engine.load_params is not None and w.ctx.engine.load_params.n_threads == 1
    yield w
    w.close()


def chat(qtbot: QtBot, w: MainWindow) -> int:
    return open_chat(qtbot, w, GREEDY, "Gemma chat")


def send(qtbot: QtBot, w: MainWindow, cid: int, text: str) -> None:
    """Send ``text`` in chat ``cid`` and wait for its finished reply (a lasting state: a short reply may begin
    and end between two looks at ``controller.active``)."""
    known = message_ids(w, cid)
    type_and_enter(qtbot, w, text)
    wait_reply(qtbot, w, cid, known)


def last_reply(w: MainWindow, cid: int) -> str:
    msg = w.ctx.store.branch(cid)[-1]
    assert msg.role == "assistant" and msg.status == DONE
    return msg.content


def test_gemma3_chat_regenerates_and_edits_exactly(qtbot: QtBot, gemma_window: MainWindow) -> None:
    w = gemma_window
    cid = chat(qtbot, w)
    send(qtbot, w, cid, FIRST)
    first = last_reply(w, cid)
    send(qtbot, w, cid, SECOND)
    second = last_reply(w, cid)
    assert len(w.ctx.store.branch(cid)) == 4 and len(second) > 1000
    # Whole replies are compared: a window cell in another slot of the ring changes only the last bits, and
    # those part greedy output at a near tie hundreds of tokens on (docs/kv-format.md "Numerics").
    # Regenerate the last reply: the same prompt again.
    reply = w.ctx.store.branch(cid)[-1]
    known = message_ids(w, cid)
    qtbot.mouseClick(w.view.widgets[reply.id].buttons["regenerate"], Qt.MouseButton.LeftButton)
    wait_reply(qtbot, w, cid, known)
    assert last_reply(w, cid) == second
    # Edit and resend the last message.
    user = w.ctx.store.branch(cid)[-2]
    qtbot.mouseClick(w.view.widgets[user.id].buttons["edit"], Qt.MouseButton.LeftButton)
    wait_for(qtbot, lambda: w.composer.editing_id == user.id)
    send(qtbot, w, cid, EDITED)
    assert [m.content for m in w.ctx.store.branch(cid)][:3] == [FIRST, first,
                                                                 EDITED]
    edited = last_reply(w, cid)
    # The reference: the same history on an empty sequence, turn by turn.
    assert w.ctx.engine.seq_rm(0, 0) == 0
    other = chat(qtbot, w)
    send(qtbot, w, other, FIRST)
    assert last_reply(w, other) == first
    send(qtbot, w, other, EDITED)
    assert last_reply(w, other) == edited
