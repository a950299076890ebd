"""The sidebar's KV badge: its seconds come only from a measured prefill speed (a widget-free helper of the
window, tested with the window's tests because it lives in hisho.gui)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.db import Database
from hisho.core.kv.index import KVIndex
from tests.core.test_kv_index import FP, save


@pytest.fixture
def index(tmp_path: Path) -> KVIndex:
    return KVIndex(Database(tmp_path / "db.sqlite3"), tmp_path / "kv")


def test_without_a_measured_prefill_speed_no_seconds_are_claimed(index: KVIndex) -> None:
    """A model whose prefill was never measured here (just switched to) gets its size shown, not a guess that
    reads like a measurement (it was: seconds equal to MiB for every row)."""
    from hisho.gui.chat.kv_status import badge, describe

    save(index, "conv:1", list(range(1000)), chunk=256)
    guessed = index.usage("conv:1")
    assert guessed.measured is False
    text, tip = badge(guessed)
    assert text.startswith("KV ") and "·" not in text and "not measured" in tip
    assert describe(guessed.bytes, guessed.seconds_saved, guessed.measured).count("s faster") == 0
    index.record_speed(FP, prefill_tok_s=100.0, restore_bytes_s=1e9)
    measured = index.usage("conv:1")
    assert measured.measured is True
    assert badge(measured)[0] == f"KV {text[3:]} · saves 10 s"
    assert index.prefill_speed(FP) == pytest.approx(100.0)
