"""Deleting a model names its KV snapshots, with their size, and deletes them (issue 13, Installed → Delete);
unless another registered model is the same file. Real engine saves on the bundled model, a real KV index."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hisho.core import paths
from hisho.core.db import Database
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.kv.index import KVIndex
from hisho.core.kv.session import KVSession
from hisho.core.models.removal import plan_removal, remove_model
from hisho.core.models.store import ModelStore
from tests.engine.test_model_change import flip_ffn_down_byte

HISTORY = [{"role": "user", "content": " ".join(f"Box {i} holds {i * 7 % 13} apples." for i in range(30))},
           {"role": "assistant", "content": "Noted."}]


def save_as(engine: EngineClient, index: KVIndex, model: Path, owners: list[str]) -> str:
    """Load ``model`` and save the same conversation under each owner (the second owner's chunks are the
    first's: stored once). Returns the fingerprint."""
    engine.load(LoadParams(model_path=str(model), n_ctx=1024, n_seq_max=2))
    tokens = engine.tokenize(messages=HISTORY, add_generation_prompt=False)
    engine.call("prefill", {"seq": 0, "tokens": tokens})
    session = KVSession(engine, index, chunk_tokens=64, budget_bytes=1 << 40)
    try:
        for owner in owners:
            session.save(owner)
            assert session.flush(60)
        return session.fingerprint()
    finally:
        session.close()


def files_of(index: KVIndex, fp: str) -> list[Path]:
    return [p for p in (index.kv_dir / fp[:16]).glob("*") if p.is_file()]


@pytest.fixture
def saved(default_model_path: Path, tmp_path: Path) -> tuple[ModelStore, KVIndex, str, str]:
    """Model "edited" (the bundled file with one weight byte changed: its own identity) in the models folder with
    two saved chats, and one chat saved under the bundled model."""
    edited = tmp_path / "Edited.gguf"
    shutil.copyfile(default_model_path, edited)
    flip_ffn_down_byte(edited)
    db = Database()  # the data folder's: `hisho models rm` below opens the same one
    store = ModelStore(db)
    entry = store.add(edited, name="edited", copy=True)
    assert entry.owned and Path(entry.path).parent == paths.models_dir()
    index = KVIndex(db)
    with EngineClient() as engine:
        fp = save_as(engine, index, Path(entry.path), ["conv:1", "conv:2"])
        other = save_as(engine, index, default_model_path, ["conv:3"])
    assert fp != other and files_of(index, fp) and files_of(index, other)
    return store, index, fp, other


def test_deleting_a_model_names_its_snapshots_and_deletes_them(saved: tuple[ModelStore, KVIndex, str, str]) -> None:
    store, index, fp, other = saved
    path = Path(store.get("edited").path)  # type: ignore[union-attr]
    on_disk = sum(p.stat().st_size for p in files_of(index, fp))

    plan = plan_removal("edited", store, index)
    assert plan.fingerprints == [fp]
    assert (plan.snapshots, plan.kv_bytes) == (2, on_disk)
    assert plan.file_bytes == path.stat().st_size
    assert "2 KV snapshots" in plan.message() and "go with it" in plan.message()
    print(f"\n{plan.message()}")

    remove_model("edited", store, index)
    assert not path.exists() and store.get("edited") is None
    assert files_of(index, fp) == []
    assert set(index.usage_all()) == {"conv:3"}  # the bundled model's chat keeps its KV
    assert files_of(index, other)


def test_snapshots_stay_while_another_entry_is_the_same_file(saved: tuple[ModelStore, KVIndex, str, str],
                                                             tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from hisho.cli.main import main

    store, index, fp, _other = saved
    twin = tmp_path / "elsewhere" / "Twin.gguf"
    twin.parent.mkdir()
    shutil.copyfile(store.get("edited").path, twin)  # type: ignore[union-attr]
    store.add(twin, name="twin")  # another path, the same bytes: it restores the same snapshots

    plan = plan_removal("edited", store, index)
    assert (plan.snapshots, plan.kept_for) == (2, "twin")
    assert "stay" in plan.message() and "twin is the same file" in plan.message()
    remove_model("edited", store, index)
    assert len(files_of(index, fp)) > 0 and {"conv:1", "conv:2"} <= set(index.usage_all())

    # The twin was never loaded, but its identity is the saved one: deleting it now takes the snapshots
    # (through the command line, which says so).
    assert main(["models", "rm", "twin", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["kv_snapshots"], done["kv_kept_for"], done["file_bytes"]) == (2, "", 0)  # imported in place
    assert done["kv_bytes"] > 0 and done["freed_bytes"] == done["kv_bytes"]
    assert files_of(index, fp) == [] and twin.exists() and store.get("twin") is None
