"""The planner counts a model's vision projector (docs/planner.md "Vision"): its weights and a compute buffer are
held out of the budget, and the plan says what an image costs and how many fit the context."""

from __future__ import annotations

from pathlib import Path

from hisho.bench import projector, shapes
from hisho.cli.plan import render
from hisho.core.machine import from_fixture
from hisho.core.models.projector_facts import mismatch, read_projector_facts
from hisho.core.planner import make_plan

DEVICES = Path(__file__).resolve().parents[1] / "fixtures" / "devices"


def test_the_plan_counts_the_projector_and_the_images_that_fit() -> None:
    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    model, mmproj = pair
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    plan = make_plan([str(model)], laptop, laptop.budget(), min_ctx=4096, target_ctx=4096, calibrate_missing=False)
    v = plan.vision
    assert v is not None and plan.fits
    size = mmproj.stat().st_size
    assert 0.97 * size <= v.weights <= size  # the tensors: the file less its header
    assert v.image_tokens == projector.VISION["clip-tiny"].n_patches == 16
    assert v.images_fit(plan.config.n_ctx) == plan.config.n_ctx // 16
    assert plan.budget.ram == laptop.budget().ram - v.total  # held out of what the model may use
    data = plan.to_dict()
    assert data["vision"]["image_tokens"] == 16 and data["vision"]["weights_bytes"] == v.weights
    assert "costs 16 tokens: 256 fit the 4,096-token context" in render(data)

    text_only = make_plan([str(shapes.model_file("llama-tiny", "Q8_0"))], laptop, laptop.budget(), min_ctx=4096,
                          target_ctx=4096, calibrate_missing=False)
    assert text_only.vision is None and text_only.budget.ram == laptop.budget().ram


def test_the_full_size_tower_s_image_cost_comes_from_its_header(tmp_path: Path) -> None:
    # LLaVA-1.5's tower (336 pixels, 14-pixel patches) onto a 4096-wide model: 576 tokens an image. Only the
    # header matters here, so one small tensor stands in for the ~600 MiB of weights.
    import numpy as np
    from gguf import GGUFWriter

    v = projector.VISION["clip-vit-l-336"]
    path = tmp_path / "mmproj-header.gguf"
    w = GGUFWriter(str(path), "clip")
    w.add_clip_projector_type("mlp")
    w.add_clip_has_vision_encoder(True)
    w.add_vision_image_size(v.image_size)
    w.add_vision_patch_size(v.patch_size)
    w.add_vision_embedding_length(v.n_embd)
    w.add_vision_feed_forward_length(v.n_ff)
    w.add_vision_projection_dim(4096)
    w.add_tensor("v.class_embd", np.zeros(v.n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    facts = read_projector_facts(path)
    assert (facts.image_tokens, facts.projection_dim) == (576, 4096)
    assert "4096-wide embeddings, but the model is 576 wide" in mismatch(facts, 576)
    assert mismatch(facts, 4096) == ""


def test_the_load_s_gate_holds_the_projector_out_of_the_budget() -> None:
    from hisho.core.engine.protocol import LoadParams
    from hisho.core.planner.gate import planned

    pair = projector.pair("shape:llava-tiny")
    assert pair is not None
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    with_eyes = planned(LoadParams(model_path=str(pair[0]), n_ctx=512, mmproj_path=str(pair[1])),
                        want_gpu_layers=0, machine=laptop)[1]
    blind = planned(LoadParams(model_path=str(pair[0]), n_ctx=512), want_gpu_layers=0, machine=laptop)[1]
    assert with_eyes is not None and blind is not None and with_eyes.vision is not None and blind.vision is None
    assert with_eyes.budget.ram == blind.budget.ram - with_eyes.vision.total
