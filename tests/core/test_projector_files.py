"""Which projector goes with a model (hisho.core.models.projector), and a projector is never taken for a model."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.errors import ModelFileError
from hisho.core.models.projector import not_a_projector, projector_for


def test_the_projector_beside_a_model_is_found_by_name(tmp_path: Path) -> None:
    model = tmp_path / "SmolVLM-256M.Q8_0.gguf"
    model.write_bytes(b"GGUF")
    assert projector_for(model) is None
    (tmp_path / "mmproj-SmolVLM-256M.Q8_0.gguf").write_bytes(b"GGUF")
    assert projector_for(model) == tmp_path / "mmproj-SmolVLM-256M.Q8_0.gguf"
    (tmp_path / "SmolVLM-256M.Q8_0.mmproj.gguf").write_bytes(b"GGUF")
    assert projector_for(model) == tmp_path / "SmolVLM-256M.Q8_0.mmproj.gguf"


def test_a_projector_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="vision projector"):
        not_a_projector(tmp_path / "mmproj-model-f16.gguf")
    not_a_projector(tmp_path / "model.gguf")
