"""A quit is not a crash: a reply the quit ends is recorded as stopped when Hisho closed (never "Engine
crashed"), and an engine killed during the quit (the window's last resort when a reply does not stop in time) is
not started and loaded again by the work still finishing (a KV save after the turn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core import services
from hisho.core.conversations.schema import STOPPED_AT_CLOSE
from hisho.core.conversations.store import STOPPED
from hisho.core.errors import EngineError


def test_a_reply_ended_by_the_quit_is_stopped_and_the_engine_is_not_restarted(tmp_path: Path,
                                                                              default_model_path: Path) -> None:
    app = services.build(None, "chat", n_ctx=2048)
    app.load()
    try:
        cid = app.chat.new_conversation().id
        turn = app.chat.send(cid, "Tell me a long story about a lighthouse keeper and her cat.")
        quit_: list[bool] = []

        def first_text(_text: str) -> None:
            if not quit_:  # the user quits while the reply streams; the reply did not stop in time
                quit_.append(True)
                app.begin_close()
                app.engine.kill()

        res = app.chat.run(turn, first_text)
        assert quit_
        saved = app.store.message(res.message.id)
        assert saved.status == STOPPED and saved.error == STOPPED_AT_CLOSE
        assert app.kv is not None and app.kv.session.wait_idle(30)
        with pytest.raises(EngineError):
            app.engine.count_tokens("anything")   # refused: not started again during the quit
        assert app.engine.restarts == 0 and not app.engine.running
    finally:
        app.close()
