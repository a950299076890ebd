"""A model file with no chat template and no ChatML tokens is a base model: the engine talks to it in plain
completion (no markers it would read as text), the load result says so in one line, and ``hisho models list``
marks it. The file is a generated true-shape one (random weights) with its template key and ChatML token texts
renamed in place (same lengths: every offset stays valid)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.models.gguf_facts import read_facts
from hisho.engine.model.chat import BASE_MODEL_NOTICE
from tests.fixtures.gguf_shapes import true_model

RENAMES = ((b"tokenizer.chat_template", b"tokenizer.chat_templatX"),
           (b"<|im_start|>", b"<|im_stbrt|>"), (b"<|im_end|>", b"<|im_enf|>"))


def base_model_file(dest: Path) -> Path:
    data = bytearray(true_model("llama-tiny", "Q8_0").read_bytes())
    for old, new in RENAMES:
        assert data.find(old) > 0
        data = data.replace(old, new)
    dest.write_bytes(bytes(data))
    return dest


@pytest.fixture(scope="module")
def base_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return base_model_file(tmp_path_factory.mktemp("base") / "base-model.gguf")


@pytest.fixture(scope="module")
def base_engine(base_file: Path) -> object:
    client = EngineClient()
    client.load(LoadParams(model_path=str(base_file), n_ctx=1024))
    yield client
    client.close()


def test_the_header_says_base_model(base_file: Path) -> None:
    assert read_facts(true_model("llama-tiny", "Q8_0")).chat == "template"
    facts = read_facts(base_file)
    assert facts.chat == "none" and facts.base_model


def test_engine_uses_plain_completion(base_engine: EngineClient) -> None:
    info = base_engine.load_info
    assert info["chat_template_source"] == "none" and info["base_model"] is True
    assert info["has_chat_template"] is False and info["notice"] == BASE_MODEL_NOTICE
    messages = [{"role": "system", "content": "A story about a cat."},
                {"role": "user", "content": "Once upon a time"}]
    tokens = base_engine.tokenize(messages=messages)
    text = base_engine.detokenize(tokens)
    assert "<|im_" not in text and "assistant" not in text  # no ChatML markers as text
    # The texts one after another, a blank line apart; the reply continues the last one.
    assert text.endswith("A story about a cat.\n\nOnce upon a time")
    plain = base_engine.tokenize(text="A story about a cat.\n\nOnce upon a time")
    assert tokens[-len(plain):] == plain


def test_models_list_marks_the_base_model(base_file: Path, tmp_path: Path) -> None:
    env_home = tmp_path / "home"
    run = [sys.executable, "-m", "hisho.cli", "models"]
    env = {**__import__("os").environ, "HISHO_HOME": str(env_home)}
    subprocess.run(run + ["import", str(base_file)], check=True, env=env, capture_output=True, timeout=600)
    listed = json.loads(subprocess.run(run + ["list", "--json"], check=True, env=env, capture_output=True,
                                       text=True, timeout=600).stdout)
    marks = {Path(e["path"]).name: e["base_model"] for e in listed}
    assert marks["base-model.gguf"] is True
    assert not any(v for k, v in marks.items() if k != "base-model.gguf")  # the bundled chat model is not
    text = subprocess.run(run + ["list"], check=True, env=env, capture_output=True, text=True, timeout=600).stdout
    assert "base model" in next(line for line in text.splitlines() if line.startswith("base-model"))
