"""Speed in the plan: predictions from a header and the machine's profile, the fit of a profile from two
measured models, measured figures replacing predictions, and the recommendations that use them (a recorded
profile of a slow laptop: the 7B fits but is slow, so a smaller model is offered and the card says why)."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from gguf import GGMLQuantizationType

from hisho.core.hub import fit_files, repo_files
from hisho.core.hub.suggest import CANDIDATES, speed_of, suggest, why_not_larger
from hisho.core.machine import Budget
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner import speed
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import big_model, hub  # noqa: F401  (the fixture)
from tests.core.test_hub import machine, serve_tiny
from tests.fixtures.gguf_shapes import LLAMA_31_8B, TINY_LLAMA, write_shape

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "speed" / "slow_laptop.json"
GIB = 1024**3
ROOMY = Budget(ram=12 * GIB, gpu=0, unified=False, headroom=0, metric="resident", explain="test")


def slow() -> speed.SpeedProfile:
    profile = speed.load_profile(FIXTURE)
    assert profile is not None
    return profile


def test_predictions_follow_size_depth_and_weight_type(tmp_path: Path) -> None:
    big = read_facts(write_shape(tmp_path / "big.gguf", LLAMA_31_8B))
    small = read_facts(write_shape(tmp_path / "small.gguf", TINY_LLAMA))
    a, b = speed.predict(big, slow()), speed.predict(small, slow())
    assert b.decode_short > a.decode_short and b.prompt > a.prompt  # a smaller file is faster
    assert a.decode_4k < a.decode_short  # 4K tokens of KV are read by every step
    assert 2.5 < a.decode_short < 6  # an 8B at ~4.6 GB on a 21.5 GB/s machine
    assert a.how == "predicted" and "tok/s" in a.label() and "reads 1,000 tokens" in a.label()


def test_a_profile_is_fitted_from_two_sizes() -> None:
    bandwidth, step_s = 20e9, 0.004
    points = [(size, 1 / (step_s + size / bandwidth)) for size in (100 << 20, 800 << 20, 2 << 30)]
    got_bw, got_step = speed.fit_decode(points)
    assert abs(got_bw - bandwidth) / bandwidth < 1e-6 and abs(got_step - step_s) < 1e-9


def test_measured_speeds_replace_predictions(tmp_path: Path) -> None:
    facts = read_facts(write_shape(tmp_path / "m.gguf", TINY_LLAMA))
    before = speed.for_model(facts, slow())
    assert before is not None and before.how == "predicted"
    speed.record(facts, "decode_short", 123.0)
    after = speed.for_model(facts, slow())
    assert after is not None and after.how == "measured" and after.decode_short == 123.0
    assert after.prompt == before.prompt  # not measured yet: still the prediction
    assert speed.for_model(facts, None) is None  # neither a full measurement nor a profile: no guess


def test_first_run_card_offers_a_smaller_model_on_a_slow_machine_and_says_why() -> None:
    seven = CANDIDATES[-1]
    assert suggest(ROOMY, None) is None  # not measured: nothing offered (memory alone would offer the 7B)
    assert speed_of(seven, slow()).decode_short < speed.SPEED_FLOOR
    pick = suggest(ROOMY, slow())
    assert pick is not None and pick is not seven and speed_of(pick, slow()).decode_short >= speed.SPEED_FLOOR
    why = why_not_larger(pick, ROOMY, slow())
    assert seven.title in why and "tok/s" in why
    # What is installed is not offered again.
    assert suggest(ROOMY, slow(), frozenset({pick.file})) is not pick


def test_hub_badges_say_the_speed_and_recommend_what_answers_fast_enough(hub: FakeHub,  # noqa: F811
                                                                          tmp_path: Path) -> None:
    big = big_model(tmp_path / "big")
    hub.add_file("org/Llama-8B-GGUF", big.name, big, sha256="a" * 64)
    q2k = replace(TINY_LLAMA, weight_type=GGMLQuantizationType.Q2_K, file_type=10)  # worse quality than Q4_K_M
    tiny = serve_tiny(hub, tmp_path, 1, repo="org/Llama-8B-GGUF", name="Llama-8B-Q2_K.gguf", shape=q2k)
    files = repo_files("org/Llama-8B-GGUF")
    by_memory = {f.file.name: f for f in fit_files(files, machine(64).budget(), speed_profile=None)}
    assert by_memory[big.name].recommended and by_memory[big.name].speed is None
    by_speed = {f.file.name: f for f in fit_files(files, machine(64).budget(), speed_profile=slow())}
    assert by_speed[big.name].verdict == "fits" and not by_speed[big.name].fast_enough
    assert "tok/s" in by_speed[big.name].why and "reads 1,000 tokens" in by_speed[big.name].why
    assert by_speed[tiny.name].recommended and "would be slower" in by_speed[tiny.name].why


def test_bench_speed_fits_its_profile_from_the_models_it_measured(tmp_path: Path) -> None:
    from hisho.bench.speed import profile_from

    small = read_facts(write_shape(tmp_path / "small.gguf", TINY_LLAMA))
    big = read_facts(write_shape(tmp_path / "big.gguf", LLAMA_31_8B))
    truth = slow()
    truth = speed.SpeedProfile(bandwidth=truth.bandwidth, step_s=truth.step_s, prompt_rate={"all": 6e10},
                               prompt_step_s=0.002, kv_factor=2.5)
    runs = [(f, {"decode_short": speed.predict(f, truth).decode_short, "prompt": speed.predict(f, truth).prompt,
                 "decode_4k": speed.predict(f, truth).decode_4k}) for f in (small, big)]
    got = profile_from(runs)
    assert abs(got.bandwidth - truth.bandwidth) / truth.bandwidth < 1e-6
    assert abs(got.step_s - truth.step_s) < 1e-9
    assert abs(got.prompt_rate["all"] - 6e10) / 6e10 < 1e-6 and abs(got.prompt_step_s - 0.002) < 1e-9
    assert abs(got.kv_factor - 2.5) < 1e-6


def test_a_weight_type_measured_once_predicts_other_sizes_of_it(tmp_path: Path) -> None:
    """A k-quant's kernels do more work per byte than Q4_0's: one model of the type measured here gives its own
    decode bandwidth and prompt rate, which then predict another size of that type; other types keep the
    machine's figures."""
    q4_0 = GGMLQuantizationType.Q4_0
    small_k = read_facts(write_shape(tmp_path / "small_k.gguf", TINY_LLAMA))          # Q4_K by default
    big_k = read_facts(write_shape(tmp_path / "big_k.gguf", LLAMA_31_8B))
    big_0 = read_facts(write_shape(tmp_path / "big_0.gguf", replace(LLAMA_31_8B, weight_type=q4_0, file_type=2)))
    base = speed.SpeedProfile(bandwidth=20e9, step_s=0.004, prompt_rate={"all": 6e10}, prompt_step_s=0.002)
    truth = replace(base, prompt_rate={"all": 6e10, "Q4_K": 3e10}, type_bandwidth={"Q4_K": 12e9})
    seen = speed.predict(small_k, truth)
    got = speed.with_type(base, small_k, seen.decode_short, seen.prompt)
    assert abs(got.type_bandwidth["Q4_K"] - 12e9) / 12e9 < 1e-6 and abs(got.prompt_rate["Q4_K"] - 3e10) / 3e10 < 1e-6
    for figure in speed.FIGURES:
        assert abs(getattr(speed.predict(big_k, got), figure) / getattr(speed.predict(big_k, truth), figure) - 1) < 1e-6
        assert getattr(speed.predict(big_0, got), figure) == getattr(speed.predict(big_0, base), figure)
    assert speed.predict(big_k, got).prompt < speed.predict(big_k, base).prompt     # slower than Q4_0's rate said
    assert speed.SpeedProfile.from_dict(got.to_dict()) == got


def test_bench_speed_ratio_is_measured_over_predicted() -> None:
    from hisho.bench.speed import row

    r = row("m.gguf", "decode_short", predicted=10.0, measured=12.0, fitted=False)
    assert r["ratio"] == 1.2  # faster than predicted reads above 1
    assert row("m.gguf", "prompt", predicted=0.0, measured=5.0, fitted=False)["ratio"] is None


def test_a_real_replys_figures_are_kept_by_depth(tmp_path: Path) -> None:
    facts = read_facts(write_shape(tmp_path / "m.gguf", TINY_LLAMA))
    speed.observe(facts, prompt_tokens=600, cached_tokens=0, completion_tokens=64, ttft_s=2.0, tokens_per_s=40.0)
    speed.observe(facts, prompt_tokens=4100, cached_tokens=4000, completion_tokens=64, ttft_s=0.5,
                  tokens_per_s=25.0)  # 100 tokens read: too few to say the prompt speed
    speed.observe(facts, prompt_tokens=2000, cached_tokens=0, completion_tokens=8, ttft_s=1.0,
                  tokens_per_s=99.0)  # 8 tokens: too short a reply to time; 2,000 read: a prompt figure
    got = speed.for_model(facts, None)
    assert got is not None and got.how == "measured"
    assert (got.decode_short, got.decode_4k, got.prompt) == (40.0, 25.0, 2000.0)


def test_a_full_context_answers_slower_the_more_kv_it_reads(tmp_path: Path) -> None:
    facts = read_facts(write_shape(tmp_path / "big.gguf", LLAMA_31_8B))
    fast = speed.predict(facts, slow())
    at = functools.partial(speed.decode_when_full, facts, fast)
    assert abs(at(4096) - fast.decode_4k) < 1e-9 * fast.decode_4k  # the 4K figure itself
    assert fast.decode_short > at(2048) > at(4096) > at(32768)
    assert at(32768, "q8_0") > at(32768, "f16")  # half the KV bytes read per step
