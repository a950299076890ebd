"""The plan's image cost is what the engine reports when it loads the pair (docs/planner.md "Vision")."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.bench import projector
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import from_fixture
from hisho.core.planner import make_plan

DEVICES = Path(__file__).resolve().parents[1] / "fixtures" / "devices"


def test_the_plan_s_image_tokens_match_the_engine_s(engine_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    monkeypatch.setenv("HISHO_HOME", str(engine_home))
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    plan = make_plan([str(pair[0])], laptop, laptop.budget(), min_ctx=512, target_ctx=512, calibrate_missing=False)
    assert plan.vision is not None
    client = EngineClient()
    try:
        info = client.load(LoadParams(model_path=str(pair[0]), n_ctx=512, n_threads=1, mmproj_path=str(pair[1])))
    finally:
        client.close()
    assert info["vision"] is True
    assert abs(plan.vision.image_tokens - info["image_tokens"]) <= 0.03 * info["image_tokens"]
    assert plan.vision.images_fit(512) == 512 // info["image_tokens"]
