"""The window opens on the model it answered with last, while that model is still in the store; other front
ends, and a model since removed, fall back to the default model."""

from __future__ import annotations

from pathlib import Path

from hisho.core import settings as settings_mod
from hisho.core.models.store import ModelStore
from hisho.core.services import PROFILES, _last_model
from tests.core.test_models_store import write_tiny_gguf


def test_the_window_opens_on_the_last_model_while_it_exists(tmp_path: Path) -> None:
    models = ModelStore()
    models.add(write_tiny_gguf(tmp_path / "owl.gguf"), name="owl")
    settings = settings_mod.Settings()
    assert _last_model(PROFILES["window"], settings, models) == ""       # none yet: the default model
    settings.set("last_model", "owl")
    assert _last_model(PROFILES["window"], settings, models) == "owl"
    assert _last_model(PROFILES["chat"], settings, models) == ""         # the command line keeps its default
    models.remove("owl")
    assert _last_model(PROFILES["window"], settings, models) == ""       # gone: the default, not a failed start
