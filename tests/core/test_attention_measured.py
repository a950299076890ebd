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


def test_the_shallow_end_counts_where_it_was_measured() -> None:
    """A tie at depth (a small model at 4K cells) with flash attention ahead near an empty context: on where the
    shallow end was measured too (the mean of both ends), off (the tie) where only the deep one was."""
    tie_deep = dataclasses.replace(OFF_WINS_BOTH, prompt_on_s=[4.1, 4.0, 4.2], prompt_off_s=[2.05, 2.0, 2.1],
                                   decode_on_s=[0.0186], decode_off_s=[0.0186])
    assert not any(tie_deep.choose(kind) for kind in attention.WORKLOADS)
    both = dataclasses.replace(tie_deep, shallow=256, prompt_on_shallow_s=[2.4, 2.5, 2.3],
                               prompt_off_shallow_s=[1.6, 1.55, 1.65], decode_on_shallow_s=[0.0090],
                               decode_off_shallow_s=[0.0110])
    assert all(both.choose(kind) for kind in attention.WORKLOADS)
    summary = both.summary("serve")
    assert "at 4096 tokens" in summary and "at 256:" in summary and summary.endswith("on for serve requests")
    # Ahead near empty but far behind at depth: the deep end still decides a decode-heavy front end.
    mixed = dataclasses.replace(both, decode_on_s=[0.041], decode_off_s=[0.0293])
    assert not mixed.choose("window")


def test_a_record_of_the_deep_end_alone_still_reads() -> None:
    record = READS_FASTER_ON.to_dict()
    for key in ("shallow", "prompt_on_shallow_s", "prompt_off_shallow_s", "decode_on_shallow_s",
                "decode_off_shallow_s"):
        record.pop(key)
    assert attention.AttentionProbe.from_dict(record) == READS_FASTER_ON
    with pytest.raises(ValueError, match="shallow"):  # a shallow depth named without its timings
        attention.AttentionProbe.from_dict({**record, "shallow": 256})
    assert attention.shallow_for(4096) == attention.shallow_for(1024) == attention.SHALLOW_DEPTH
    assert attention.shallow_for(512) == 0


def test_a_serving_load_is_measured_with_its_sequences() -> None:
    """One KV stream per sequence (the API's server): the decode step carries one token for each sequence, and
    the depth is half the bucket of one sequence's share of the context."""
    assert attention.sequences(4, kv_unified=False) == 4
    assert attention.sequences(2, kv_unified=True) == attention.sequences(1, kv_unified=False) == 1
    assert attention.depth_for(18432, 4) == 4096 and attention.depth_for(8192, 4) == 1024
    # Four short streams decode faster with flash attention on, four deep ones at half the speed: off.
    serving = dataclasses.replace(READS_FASTER_ON, seqs=4, prompt_on_s=[3.58], prompt_off_s=[1.80],
                                  decode_on_s=[0.122], decode_off_s=[0.064], shallow=256,
                                  prompt_on_shallow_s=[1.73], prompt_off_shallow_s=[0.95],
                                  decode_on_shallow_s=[0.0239], decode_off_shallow_s=[0.029])
    assert not serving.choose("serve")
    assert "decodes 4 sequences at once" in serving.summary("serve")
    assert attention.AttentionProbe.from_dict(serving.to_dict()) == serving


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
    assert attention.recall(path, 4096, (512, 256), seqs=4) is None     # a serving load's steps: not measured
    serving = dataclasses.replace(READS_FASTER_ON, seqs=4)
    attention.remember(path, 4096, serving)
    assert attention.recall(path, 4096, (512, 256), seqs=4) == serving
    assert attention.recall(path, 4096, (512, 256)) == READS_FASTER_ON
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
