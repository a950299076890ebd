"""``hisho bench peers --quick``: Hisho's engine, llama-server and raw llama-cpp-python on the bundled model at
tiny sizes, one repetition: every figure present for each contestant and configuration, ratios computed, the
same greedy tokens from the engine and llama-server. Behaviour only: no figure is compared with a speed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hisho.bench.peers import run as bench_peers
from hisho.bench.servers import NOT_BUILT, llama_server_binary

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
FIGURES = {"ttft_chat_s", "decode_short_tps", "first_token_48_s", "first_token_160_s", "decode_deep_tps"}


def test_peers_quick_reports_every_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if llama_server_binary() is None:
        pytest.skip(NOT_BUILT)
    monkeypatch.setenv("HISHO_HOME", str(tmp_path))
    args = argparse.Namespace(model=None, quick=True, repeat=1, tokens=None)
    out = bench_peers(args)
    assert tuple(out["sizes"]["prefill"]) == (48, 160)
    assert set(out["configs"]) == {"defaults", "matched"}
    for name, config in out["configs"].items():
        for who in ("hisho", "llama_server", "raw"):
            assert FIGURES <= set(config[who]), (name, who)
            assert all(config[who][k] > 0 for k in FIGURES), (name, who, config[who])
        assert config["same_tokens_short"], "greedy decode differs between the engine and llama-server"
        ratios = out["ratios"][name]
        for key in FIGURES:
            assert ratios[f"{key}_vs_llama_server"] is not None and ratios[f"{key}_vs_raw"] is not None
    assert out["configs"]["matched"]["n_threads"] == out["physical_cores"]
    assert "--threads" in out["configs"]["matched"]["llama_server_argv"]
    assert "--threads" not in out["configs"]["defaults"]["llama_server_argv"]
