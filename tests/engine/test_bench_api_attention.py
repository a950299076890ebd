"""``hisho bench api`` serves with the flash-attention choice this machine measured for the serve load, as the
app's engine does once it has measured when idle (docs/flash-attention.md, "Measured here"): the bench measures
first, and the load it then times takes the answer."""

from __future__ import annotations

from pathlib import Path

from hisho.api.launch import build_api
from hisho.bench.api import KEY, PARALLEL, PER_SEQ, _measure_attention
from hisho.bench.homes import temporary_home
from hisho.core.planner import attention


def test_the_bench_loads_what_the_measurement_chose(default_model_path: Path) -> None:
    with temporary_home("hisho-test-bench-api-"):
        said = _measure_attention(str(default_model_path))
        assert said is not None and said.startswith("measured here at") and "for serve requests" in said
        app, server, _ = build_api(str(default_model_path), parallel=PARALLEL, n_ctx=PER_SEQ, key=KEY)
        try:
            params = app.load_params
            assert params is not None and not params.kv_unified
            assert f"at {attention.SHALLOW_DEPTH}:" in said  # both ends measured
            assert f"decodes {PARALLEL} sequences at once" in said  # the serving load's steps
            assert params.flash_attn is said.endswith("on for serve requests")
        finally:
            server.stop()
            app.close()
