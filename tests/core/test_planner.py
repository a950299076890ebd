"""The memory model and the search: exact KV for known shapes, committed vs resident, quality-first choices,
explanations, bad input. Property tests live in test_planner_properties.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hisho.core.machine import Budget, from_fixture
from hisho.core.models.gguf_facts import ModelFacts, read_facts
from hisho.core.planner import plan, price
from hisho.core.planner.memory import Calibration, Config, estimate, kv_bytes, padded_cells, weights_split
from hisho.core.planner.quality import score, weights_kl
from tests.fixtures.gguf_shapes import GEMMA3_4B, LLAMA_31_8B, write_shape

FIX = Path(__file__).resolve().parents[1] / "fixtures"
MIB, GIB = 1024**2, 1024**3


def smollm() -> tuple[ModelFacts, Calibration]:
    """Facts and llama.cpp dry-run calibration recorded from the bundled model (llama-cpp-python 0.3.36)."""
    cal = FIX / "calibration"
    facts = ModelFacts.from_dict(json.loads((cal / "smollm2_135m_q4_1.facts.json").read_text()))
    calib = Calibration.from_dict(json.loads((cal / "smollm2_135m_q4_1.json").read_text()))
    return facts, calib


def budget(ram_gib: float, *, gpu_gib: float = 0, unified: bool = False, metric: str = "resident") -> Budget:
    return Budget(ram=int(ram_gib * GIB), gpu=int(gpu_gib * GIB), unified=unified, headroom=0, metric=metric,
                  explain="test")


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> ModelFacts:
    return read_facts(write_shape(tmp_path_factory.mktemp("m") / "l8b.gguf", LLAMA_31_8B), use_cache=False)


def test_kv_llama_31_8b_reference(llama8b: ModelFacts) -> None:
    # Llama-3.1-8B: 128 KiB per token f16; 8192 tokens = 1024 MiB f16, 544 MiB q8_0 (llama.cpp prints the same).
    assert kv_bytes(llama8b, Config(n_ctx=8192)) == 1024 * MIB
    assert kv_bytes(llama8b, Config(n_ctx=8192, type_k="q8_0", type_v="q8_0")) == 544 * MIB
    assert kv_bytes(llama8b, Config(n_ctx=8192, type_k="q4_0", type_v="q4_0")) == 288 * MIB


def test_kv_cells_padded_to_256(llama8b: ModelFacts) -> None:
    assert padded_cells(1000) == 1024 and padded_cells(1024) == 1024 and padded_cells(1) == 256
    assert kv_bytes(llama8b, Config(n_ctx=1000)) == kv_bytes(llama8b, Config(n_ctx=1024))


def test_kv_gemma3_sliding_window(tmp_path: Path) -> None:
    f = read_facts(write_shape(tmp_path / "g3.gguf", GEMMA3_4B), use_cache=False)
    per_layer_cell = 2 * 4 * 256 * 2  # K and V, 4 KV heads of 256, f16
    # 5 global layers hold 8192 cells; 29 sliding layers hold window 1024 + ubatch 512 = 1536 cells.
    # llama.cpp's dry run of this file logs 160.00 MiB + 174.00 MiB (tests/engine/test_probe.py checks it).
    assert kv_bytes(f, Config(n_ctx=8192)) == (5 * 8192 + 29 * 1536) * per_layer_cell == 334 * MIB
    # swa_full: every layer holds the whole context.
    assert kv_bytes(f, Config(n_ctx=8192, swa_full=True)) == 34 * 8192 * per_layer_cell
    # A context shorter than the window: sliding layers hold no more than the context.
    assert kv_bytes(f, Config(n_ctx=1024)) == 34 * 1024 * per_layer_cell


def test_calibrated_matches_llama_cpp_dry_run() -> None:
    facts, calib = smollm()
    b = estimate(facts, Config(n_ctx=512), calib)
    # llama.cpp logs for this load: model 92.10, KV 11.25, compute 98.25, output 0.19 MiB.
    assert b.weights == 96576768 and b.kv == round(11.25 * MIB) and b.compute == round(98.25 * MIB)
    assert not b.estimate
    # Allocated is not resident: the logits space of the compute buffer is never touched.
    assert b.committed - b.resident > 60 * MIB


def test_uncalibrated_is_flagged_estimate() -> None:
    facts, calib = smollm()
    b = estimate(facts, Config(n_ctx=4096))
    assert b.estimate and b.notes
    calibrated = estimate(facts, Config(n_ctx=4096), calib)
    # The formulas land near llama.cpp's figures for this model.
    assert abs(b.committed - calibrated.committed) < 0.15 * calibrated.committed


def test_gpu_split_moves_layers_and_output(llama8b: ModelFacts) -> None:
    ram0, gpu0 = weights_split(llama8b, 0)
    assert gpu0 == 0 and ram0 == llama8b.weights_bytes
    # llama.cpp counts the output layer first: 1 layer is the output, 33 the output and all 32 repeating layers.
    output = llama8b.tensor_bytes["output"] + llama8b.tensor_bytes["output_norm"]
    assert weights_split(llama8b, 1)[1] == output
    _, gpu32 = weights_split(llama8b, 32)
    ram33, gpu33 = weights_split(llama8b, 33)
    assert gpu33 == sum(llama8b.layer_bytes(i) for i in range(32)) + output
    assert gpu32 == gpu33 - llama8b.layer_bytes(0)
    assert ram33 + gpu33 == llama8b.weights_bytes  # an untied output moves, nothing is copied


def quants_of(f: ModelFacts) -> list[ModelFacts]:
    """The same model at several quants: tensor bytes scaled by bits per weight."""
    bpw = {"Q8_0": 8.5, "Q6_K": 6.56, "Q5_K_M": 5.69, "Q4_K_M": 4.89, "Q4_0": 4.55, "IQ4_XS": 4.46, "Q3_K_M": 3.91,
           "Q2_K": 3.35}
    base = 4.89
    return [dataclasses.replace(f, quant=q, source=f"{f.source}:{q}",
                                tensor_bytes={k: int(v * b / base) for k, v in f.tensor_bytes.items()})
            for q, b in bpw.items()]


def test_best_quality_that_fits(llama8b: ModelFacts) -> None:
    cands = quants_of(llama8b)
    p = plan(cands, budget(7.5), min_ctx=4096)
    assert p.fits
    assert p.quant == "Q6_K"
    assert "Q8_0" in p.reason  # why not the next better quant
    assert p.need <= 7.5 * GIB
    bigger = plan(cands, budget(12), min_ctx=4096)
    assert bigger.quant == "Q8_0"
    small = plan(cands, budget(5), min_ctx=4096)
    assert weights_kl(small.quant) > weights_kl(p.quant)


def test_never_a_dominated_type(llama8b: ModelFacts) -> None:
    cands = [q for q in quants_of(llama8b) if q.quant in ("Q4_0", "IQ4_XS")]
    for ram in (5.0, 6.0, 8.0):
        assert plan(cands, budget(ram)).quant == "IQ4_XS"


def test_q8_kv_when_f16_cannot_reach_min_ctx(llama8b: ModelFacts) -> None:
    cands = [q for q in quants_of(llama8b) if q.quant == "Q4_K_M"]
    f16_need = price(cands[0], Config(n_ctx=32768), budget(100)).need
    q8_need = price(cands[0], Config(n_ctx=32768, type_k="q8_0", type_v="q8_0"), budget(100)).need
    mid = (f16_need + q8_need) / 2 / GIB
    p = plan(cands, budget(mid), min_ctx=32768)
    assert p.fits and p.config.type_k == "q8_0" and p.config.n_ctx == 32768
    assert "f16 KV would not reach" in p.reason


def test_a_quantized_cache_on_the_cpu_says_what_it_costs_a_long_prompt(llama8b: ModelFacts) -> None:
    """A q8_0 cache keeps flash attention on (llama.cpp needs it for a quantized V), and ggml-cpu reads it row
    by row: the plan says so where it runs on the CPU, and not where the layers are on a GPU."""
    from hisho.core.planner.search import attention_choice

    q8 = Config(n_ctx=8192, type_k="q8_0", type_v="q8_0")
    cpu = attention_choice(price(llama8b, q8, budget(100)), None)
    assert cpu.config == q8 and "reads long prompts several times slower" in cpu.reason
    gpu = attention_choice(price(llama8b, dataclasses.replace(q8, n_gpu_layers=33), budget(100)), None)
    assert "slower" not in gpu.reason
    f16 = attention_choice(price(llama8b, Config(n_ctx=8192), budget(100)), None)
    assert not f16.config.flash_attn and "slower" not in f16.reason


def test_context_grows_to_target_then_stops() -> None:
    facts, calib = smollm()
    p = plan([facts], budget(4), min_ctx=1024, target_ctx=6000, calibration=lambda f: calib)
    assert p.config.n_ctx == 6000
    tight = price(facts, Config(n_ctx=2048), budget(4), calib).need
    q = plan([facts], budget(tight / GIB), min_ctx=1024, target_ctx=8192, calibration=lambda f: calib)
    assert q.fits and 2048 <= q.config.n_ctx < 8192 and q.config.type_k == "f16"


def test_nothing_fits_is_explained() -> None:
    facts, calib = smollm()
    p = plan([facts], budget(0.05), calibration=lambda f: calib)
    assert not p.fits
    assert "nothing fits" in p.reason and p.alternatives[0]["needs_bytes"] > 0.05 * GIB


def test_plan_json_fields(llama8b: ModelFacts) -> None:
    d = plan(quants_of(llama8b), budget(8)).to_dict()
    for key in ("model", "quant", "n_ctx", "type_k", "type_v", "flash_attn", "n_gpu_layers", "fits", "budget_bytes",
                "committed", "resident", "reason", "alternatives"):
        assert key in d
    assert set(d["breakdown"]) == {"weights", "kv", "compute", "output", "runtime", "kept", "total"}
    assert d["breakdown"]["total"] == sum(v for k, v in d["breakdown"].items() if k != "total")


def test_discrete_gpu_offloads_layers(llama8b: ModelFacts) -> None:
    cands = [q for q in quants_of(llama8b) if q.quant == "Q4_K_M"]
    m = from_fixture(FIX / "devices" / "discrete_rtx4060_laptop.json")
    p = plan(cands, m.budget(), min_ctx=4096)
    assert p.fits and p.config.n_gpu_layers == 33  # 8B Q4_K_M fits an 8 GiB card entirely
    assert p.breakdown.gpu <= m.budget().gpu


def test_uma_pool_counts_gpu_and_cpu_once(llama8b: ModelFacts) -> None:
    cands = [q for q in quants_of(llama8b) if q.quant == "Q4_K_M"]
    m = from_fixture(FIX / "devices" / "windows_igpu.json")
    b = m.budget()
    p = plan(cands, b, min_ctx=4096)
    assert p.fits and p.budget.unified
    # One pool: the whole need (GPU part included) within RAM budget, never RAM + GPU added.
    assert p.need <= b.ram and p.breakdown.gpu <= b.gpu


def test_quality_ladder_orders() -> None:
    assert score("Q8_0", "f16", "f16") < score("Q6_K", "f16", "f16") < score("Q4_K_M", "f16", "f16")
    assert score("Q5_K_M", "q8_0", "q8_0") < score("Q4_K_M", "f16", "f16")
    assert weights_kl("IQ4_XS") < weights_kl("Q4_0")


def test_unknown_architecture_plans_as_estimate(tmp_path: Path) -> None:
    from tests.fixtures.gguf_shapes import Shape

    shape = Shape(arch="mamba9", n_layer=8, n_embd=512, n_ff=1024, n_head=8, n_head_kv=8, head_dim=64, vocab=1000)
    f = read_facts(write_shape(tmp_path / "odd.gguf", shape))
    d = plan([f], budget(4), min_ctx=1024).to_dict()
    assert d["fits"] and d["estimate"]
    assert any("estimate only" in n for n in d["notes"])


def test_hisho_plan_cli_estimate_only_and_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hisho.cli.main import main
    from tests.fixtures.gguf_shapes import Shape

    shape = Shape(arch="mamba9", n_layer=4, n_embd=256, n_ff=512, n_head=4, n_head_kv=4, head_dim=64, vocab=500)
    odd = write_shape(tmp_path / "odd.gguf", shape)
    assert main(["plan", str(odd), "--json", "--min-ctx", "1024", "--no-calibrate"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimate"] is True and out["quant"] == "Q4_K_M"
    assert main(["plan", str(odd), "--ram-gib", "-1"]) == 2
    assert "positive" in capsys.readouterr().err
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(odd.read_bytes()[:100])
    assert main(["plan", str(cut)]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and "Traceback" not in err
