"""The flash-attention choice measured on this machine (docs/flash-attention.md, "Measured here"): the rule that
weighs recorded timings per front end, and the plan and the load taking the same kept answer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hisho.core.engine.protocol import LoadParams
from hisho.core.machine import from_fixture
from hisho.core.planner import attention, make_plan
from hisho.core.planner.gate import planned
from hisho.core.planner.layout import Config

DEVICES = Path(__file__).resolve().parents[1] / "fixtures" / "devices"

# A 2-core EPYC with slow memory (ratios of the raw llama-cpp-python figures the rule was asked about): a prompt
# reads ~20 % faster with flash attention, a decode step at depth ~40 % slower.
READS_FASTER_ON = attention.AttentionProbe(
    depth=4096, ubatch_on=512, ubatch_off=256, prompt_on_s=[2.61, 2.55, 2.70], prompt_off_s=[1.58, 1.60, 1.57],
    decode_on_s=[0.041, 0.040, 0.043], decode_off_s=[0.0293, 0.030, 0.029])
# The machine the fixed rule was written on: off wins both.
OFF_WINS_BOTH = attention.AttentionProbe(
    depth=4096, ubatch_on=512, ubatch_off=256, prompt_on_s=[16.1, 16.3, 15.9], prompt_off_s=[6.35, 6.5, 6.4],
    decode_on_s=[0.206, 0.21, 0.20], decode_off_s=[0.092, 0.095, 0.09])


def test_reads_faster_on_decodes_slower_on() -> None:
    probe = READS_FASTER_ON
    assert probe.choose("serve") and probe.choose("one-shot")
    assert not probe.choose("window")
    summary = probe.summary("serve")
    assert "reads prompts" in summary and "faster" in summary and "slower" in summary and "on for serve" in summary


def test_off_wins_both_means_off_everywhere() -> None:
    assert not any(OFF_WINS_BOTH.choose(kind) for kind in attention.WORKLOADS)


def test_a_tie_keeps_the_rule() -> None:
    same = dataclasses.replace(OFF_WINS_BOTH, prompt_on_s=[12.8], prompt_off_s=[6.4], decode_on_s=[0.09],
                               decode_off_s=[0.09])
    assert not any(same.choose(kind) for kind in attention.WORKLOADS)


def test_workload_follows_the_front_ends_shape() -> None:
    assert attention.workload(Config(n_ctx=4096, n_seq_max=2, saves_kv=True)) == "window"
    assert attention.workload(Config(n_ctx=4096, n_seq_max=1)) == "one-shot"
    assert attention.workload(Config(n_ctx=4096, n_seq_max=2, kv_unified=False, saves_kv=True)) == "serve"


def test_kept_per_model_context_bucket_and_ubatches(default_model_path: Path) -> None:
    path = str(default_model_path)
    attention.remember(path, 4096, READS_FASTER_ON)
    assert attention.recall(path, 4096, (512, 256)) == READS_FASTER_ON
    assert attention.recall(path, 3000, (512, 256)) == READS_FASTER_ON   # same bucket
    assert attention.recall(path, 8192, (512, 256)) is None             # another bucket
    assert attention.recall(path, 4096, (512, 128)) is None             # another ubatch off
    assert attention.recall("hf:owner/repo/file.gguf", 4096, (512, 256)) is None


def test_an_unreadable_record_leaves_the_rule(default_model_path: Path) -> None:
    path = attention.remember(str(default_model_path), 4096, READS_FASTER_ON)
    path.write_text("{not json", encoding="utf-8")
    assert attention.recall(str(default_model_path), 4096, (512, 256)) is None


@pytest.mark.parametrize(("profile", "shape", "on"), [
    ("serve", {"n_seq_max": 1, "kv_unified": False}, True),
    ("summarize", {"n_seq_max": 1}, True),
    ("window", {"n_seq_max": 2}, False),
])
def test_plan_and_load_agree_on_the_measured_choice(default_model_path: Path, profile: str,
                                                    shape: dict[str, object], on: bool) -> None:
    """`hisho plan --profile P` and the load of P's front end take the same kept measurement."""
    laptop = from_fixture(DEVICES / "cpu_only_8g.json")
    shown = make_plan([str(default_model_path)], laptop, laptop.budget(), min_ctx=4096, target_ctx=4096,
                      calibrate_missing=False, profile=profile, parallel=1)
    assert shown.fits and not shown.config.flash_attn and shown.attention is None  # nothing measured: the rule
    ub = shown.config.n_ubatch
    scaled = [t * ub / READS_FASTER_ON.ubatch_off for t in READS_FASTER_ON.prompt_off_s]  # same per token
    attention.remember(str(default_model_path), 4096,
                       dataclasses.replace(READS_FASTER_ON, ubatch_off=ub, prompt_off_s=scaled))
    shown = make_plan([str(default_model_path)], laptop, laptop.budget(), min_ctx=4096, target_ctx=4096,
                      calibrate_missing=False, profile=profile, parallel=1)
    params = LoadParams(model_path=str(default_model_path), n_ctx=shown.config.n_ctx, **shape)  # type: ignore[arg-type]
    loaded, plan = planned(params, want_gpu_layers=0, machine=laptop, saves_kv=profile != "summarize")
    assert plan is not None and plan.attention == shown.attention and shown.attention is not None
    assert shown.config.flash_attn is loaded.flash_attn is on
    assert loaded.n_ubatch == shown.config.n_ubatch == (512 if on else ub)
    assert "measured here" in shown.reason and shown.to_dict()["attention_measured"]["choices"]["serve"] is True
