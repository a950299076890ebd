"""First start measures this computer (the probe child's ``speed`` on the bundled model) and keeps a speed
profile in the home. Asserted on presence and shape, never on speed values (a shared, loaded box)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner import first_speed, speed


def test_a_fresh_home_gets_a_profile_from_a_real_measurement(monkeypatch: pytest.MonkeyPatch,
                                                             default_model_path: Path) -> None:
    monkeypatch.setenv(first_speed.ENV_OFF, "1")
    assert speed.load_profile() is None and first_speed.wanted()
    profile = first_speed.measure_and_keep(default_model_path)
    kept = speed.load_profile()
    assert kept == profile and not first_speed.wanted()  # measured once
    assert kept.source == first_speed.SOURCE and kept.threads >= 1
    assert kept.bandwidth > 0 and kept.step_s >= 0.0 and kept.prompt_step_s >= 0.0
    facts = read_facts(default_model_path)
    assert set(kept.prompt_rate) == {"all", speed.main_type(facts)} and all(r > 0 for r in kept.prompt_rate.values())
    guess = speed.predict(facts, kept)
    assert guess.decode_short > 0 and guess.prompt > 0


def test_one_model_gives_two_sizes_by_its_output_layer(default_model_path: Path) -> None:
    """With and without the output layer: the figures of a known machine give its profile back."""
    facts = read_facts(default_model_path)
    out_bytes, out_mults = first_speed.output_layer(facts)
    weights, mults = speed.weights_read_per_token(facts), speed.matmul_elements(facts)
    assert 0 < out_bytes < weights and 0 < out_mults < mults
    bw, step, rate, per_token = 10e9, 5e-3, 5e10, 1e-3
    answer = {"decode_tok_s": 1 / (step + weights / bw), "decode_no_logit_tok_s": 1 / (step + (weights - out_bytes) / bw),
              "prompt_tok_s": 1 / (per_token + mults / rate),
              "prompt_every_logit_tok_s": 1 / (per_token + (mults + out_mults) / rate), "threads": 2}
    profile = first_speed.profile_from_one(facts, answer)
    assert profile.bandwidth == pytest.approx(bw) and profile.step_s == pytest.approx(step)
    assert profile.prompt_rate["all"] == pytest.approx(rate) and profile.prompt_step_s == pytest.approx(per_token)


def test_lost_in_noise_the_fit_falls_back_to_lower_bounds(default_model_path: Path) -> None:
    """No difference measured (or a wrong-way one): the whole step is reading, the whole prompt token
    multiply-adds; the model's own speeds come back."""
    facts = read_facts(default_model_path)
    profile = first_speed.profile_from_one(facts, {"decode_tok_s": 100.0, "decode_no_logit_tok_s": 90.0,
                                                   "prompt_tok_s": 400.0, "threads": 2})
    assert profile.step_s == 0.0 and profile.prompt_step_s == 0.0
    guess = speed.predict(facts, profile)
    assert guess.decode_short == pytest.approx(100.0) and guess.prompt == pytest.approx(400.0)
    with pytest.raises(ValueError):
        first_speed.profile_from_one(facts, {"decode_tok_s": 0.0, "prompt_tok_s": 400.0})
