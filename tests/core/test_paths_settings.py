from __future__ import annotations

import json
from pathlib import Path

import pytest

from hisho.core import paths, settings


def test_home_override_redirects_every_path(hisho_home: Path) -> None:
    for accessor in (paths.data_dir, paths.config_dir, paths.cache_dir, paths.log_dir, paths.models_dir,
                     paths.kv_dir):
        p = accessor()
        assert hisho_home in p.parents
        assert p.is_dir()
    assert hisho_home in paths.database_path().parents
    assert hisho_home in paths.settings_path().parents


def test_defaults_when_no_file() -> None:
    s = settings.load()
    assert s["n_ctx"] == 4096
    assert s["kv_type"] == "f16"
    assert s["kv_disk_budget_bytes"] == 10 * 1024**3


def test_round_trip_and_bounds() -> None:
    s = settings.load()
    s.set("n_ctx", "8192")
    s.set("flash_attn", "off")
    s.save()
    again = settings.load()
    assert again["n_ctx"] == 8192
    assert again["flash_attn"] is False
    with pytest.raises(ValueError, match="below the minimum"):
        s.set("n_ctx", 10)
    with pytest.raises(ValueError, match="not one of"):
        s.set("kv_type", "q2_k")
    with pytest.raises(KeyError):
        s.set("nonsense", 1)


def test_bad_stored_values_fall_back_and_unknown_keys_survive() -> None:
    paths.settings_path().write_text(json.dumps({"schema_version": 1, "n_ctx": "lots", "future_key": 7}))
    s = settings.load()
    assert s["n_ctx"] == 4096
    s.save()
    assert json.loads(paths.settings_path().read_text())["future_key"] == 7


def test_corrupt_file_gives_defaults() -> None:
    paths.settings_path().write_text("{not json")
    assert settings.load()["n_ctx"] == 4096


def test_newer_schema_is_read_but_never_overwritten() -> None:
    original = json.dumps({"schema_version": settings.SCHEMA_VERSION + 1, "n_ctx": 2048})
    paths.settings_path().write_text(original)
    s = settings.load()
    assert s["n_ctx"] == 2048
    s.set("n_ctx", 1024)
    s.save()
    assert paths.settings_path().read_text() == original


def test_system_prompt_presets_are_checked_and_round_trip() -> None:
    s = settings.load()
    assert s["system_prompt_presets"] == [] and s["default_system_prompt"] == ""
    s.set("system_prompt_presets", [{"name": "  Concise   English ", "prompt": "Be brief.\n"},
                                    {"name": "Pirate", "prompt": "Talk like a pirate."}])
    s.set("default_system_prompt", "Be brief.")
    s.save()
    again = settings.load()
    assert again["system_prompt_presets"] == [{"name": "Concise English", "prompt": "Be brief."},
                                              {"name": "Pirate", "prompt": "Talk like a pirate."}]
    assert again["default_system_prompt"] == "Be brief."
    for bad, why in (([{"name": "A", "prompt": "x"}, {"name": "a", "prompt": "y"}], "already a preset named 'a'"),
                     ([{"name": "   ", "prompt": "x"}], "entry 1 has no name"),
                     ([{"prompt": "x"}], "entry 1 is not a name"),
                     ("Pirate", "expected a list")):
        with pytest.raises(ValueError, match=why):
            again.set("system_prompt_presets", bad)
    assert len(again["system_prompt_presets"]) == 2  # a refused change changes nothing
    # The default list is not shared between Settings objects.
    fresh = settings.Settings()
    fresh["system_prompt_presets"].append({"name": "x", "prompt": ""})
    assert settings.Settings()["system_prompt_presets"] == []
