"""``hisho bench soak`` for half a minute: the server survives every kind of client, a kill -9 of the engine
included; nothing runs in the engine for clients that left; the user's chats and KV snapshots are unchanged;
the chat service (the window's path) answers meanwhile. The 10-minute run is the bench's (docs/api.md)."""

from __future__ import annotations

import argparse

import pytest

from hisho.bench import soak


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_short_soak() -> None:
    out = soak.run(argparse.Namespace(minutes=0.5, model=None))
    assert out["server_alive"] and out["threads_still_running"] == 0
    assert out["busy_after"] == 0
    assert out["user_data_intact"], out["user_data"]
    assert out["user_data"]["conversations_before"] == soak.SEED_CHATS and out["user_data"]["kv_files_before"] > 0
    assert out["window_chat"]["answered"] >= 1, out["window_chat"]
    assert "engine_pid" in out["kill_9"] and out["kill_9"]["new_engine_pid"] != out["kill_9"]["engine_pid"]
    assert out["engine_restarts"] == 1
    # Malformed and oversized bodies got their 400 and 413, never a 500.
    assert not [k for k in out["unexpected"] if k.startswith(("malformed", "oversized"))], out["unexpected"]
    assert not [k for k in out["unexpected"] if "http_500" in k or "server_error" in k], out["unexpected"]
