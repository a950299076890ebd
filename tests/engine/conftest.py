"""Engine fixtures: one engine process per module on the real bundled model (loading takes ~0.3 s, but starting
Python + llama_cpp takes ~1 s, so tests that do not break the engine share it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams


@pytest.fixture(scope="module")
def engine_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine_home")


@pytest.fixture(scope="module")
def engine(engine_home: Path, default_model_path: Path) -> Iterator[EngineClient]:
    mp = pytest.MonkeyPatch()
    mp.setenv("HISHO_HOME", str(engine_home))
    client = EngineClient(test_hooks=True)
    client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048))
    yield client
    client.close()
    mp.undo()
