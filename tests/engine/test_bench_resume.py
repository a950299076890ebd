"""``hisho bench resume`` at its smallest size on the bundled model: one prefill of the conversation (the fresh
send is derived from it), the restored continuation identical to the in-memory one, restores and raw reads in
both page-cache modes, bytes per token. Behaviour only: no figure is compared with a speed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from hisho.bench.resume import _drop_cache, _raw_read, resident_bytes
from hisho.bench.resume import run as bench_resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_resume_prefills_once_and_reports_both_cache_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_HOME", str(tmp_path))
    args = argparse.Namespace(model=None, tokens=256, repeat=1, cold=False, kv_type=None, background=0)
    out = bench_resume(args)
    assert out["ttft_fresh_derived"] is True
    assert out["ttft_fresh_s"] > out["prefill_s"] > 0
    assert "identical_to_one_shot_prefill" not in out
    assert out["identical_continuation"] is True and out["typeahead_identical"] is True
    assert out["kv_bytes_per_token"] > 0 and out["restored_tokens"] > 0
    assert {"memory", "model", "send_round_trips"} <= set(out)
    # Type-ahead's exact promise: the same restore and the same prefill calls give the same continuation.
    assert out["typeahead_replay_identical"] is True and out["typeahead_prefills"] > 0
    modes = ("warm", "cold") if hasattr(os, "posix_fadvise") else ("warm",)
    for mode in modes:
        assert out[f"restore_{mode}_s"] > 0 and out[f"raw_read_{mode}_s"] > 0
        assert out[f"raw_read_serial_{mode}_s"] > 0
        assert out[f"restore_vs_raw_read_{mode}"] is not None
    if "cold" in modes:
        assert out["cold_resident_bytes"] == 0  # the dropped cache really holds none of the chunk files


def test_resident_bytes_sees_a_read_and_a_drop(tmp_path: Path) -> None:
    files = [tmp_path / f"c{i}.bin" for i in range(2)]
    for f in files:
        f.write_bytes(os.urandom(1 << 20))
    _drop_cache(files, True)
    assert resident_bytes(files) == 0
    buf = bytearray(1 << 20)
    _raw_read(files, buf, False)
    assert resident_bytes(files) == 2 << 20


def test_resume_image_restores_without_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HISHO_HOME", str(tmp_path))
    args = argparse.Namespace(model="shape:llava-tiny", tokens=64, repeat=1, cold=False, kv_type=None, background=0,
                              image=True)
    out = bench_resume(args)
    assert out["image_positions"] == out["image_tokens"] == 16
    assert out["restored_tokens"] == out["tokens"]
    assert out["image_encodes_restored"] == 0 and out["image_encodes_fresh"] == 1
    assert out["identical_continuation"] is True
