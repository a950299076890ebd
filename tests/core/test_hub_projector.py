"""A vision model from the hub arrives with its projector (docs/hub.md "Vision models"): the repository's
``mmproj`` file is listed as the model's projector, downloaded in the same job, saved beside the model as
``<stem>.mmproj.gguf`` (so the app pairs them), and refused with the reason when it does not fit the model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hisho.bench import projector as bench_projector
from hisho.bench import shapes
from hisho.core.errors import UserError
from hisho.core.hub import fit_files, pull, repo_files
from hisho.core.hub.catalog import group_files, match_projector
from hisho.core.hub.download import target_dir
from hisho.core.machine import from_fixture
from hisho.core.models.projector import projector_for
from hisho.core.models.projector_facts import read_projector_facts
from hisho.core.services import open_downloads, open_models
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub

__all__ = ["hub"]
REPO = "org/Tiny-VL-GGUF"


def serve_pair(hub: FakeHub, tmp_path: Path, lm_embd: int = 128) -> tuple[Path, Path]:
    """The tiny LLaVA pair's files served as a hub repository: a model and its projector (F16), plus a Q8_0
    projector the matcher should pass over."""
    folder = tmp_path / "served"
    folder.mkdir()
    model = folder / "tiny-vl-Q8_0.gguf"
    shutil.copyfile(shapes.model_file("llama-tiny", "Q8_0"), model)
    proj = folder / "mmproj-tiny-vl-f16.gguf"
    shutil.copyfile(bench_projector.projector_file("clip-tiny", lm_embd), proj)
    hub.add_file(REPO, model.name, model)
    hub.add_file(REPO, proj.name, proj)
    return model, proj


def test_the_matcher_prefers_the_named_then_f16_projector() -> None:
    projs = [("mmproj-Q8_0.gguf", 10, ""), ("mmproj-BF16.gguf", 30, ""), ("mmproj-F16.gguf", 30, "")]
    assert match_projector("gemma-3-4b-it-Q4_K_M.gguf", projs) == ("mmproj-F16.gguf", 30, "")
    projs.append(("mmproj-gemma-3-4b-it-Q8_0.gguf", 40, ""))
    assert match_projector("gemma-3-4b-it-Q4_K_M.gguf", projs) == ("mmproj-gemma-3-4b-it-Q8_0.gguf", 40, "")
    files = group_files("o/r", [("m-Q4_K_M.gguf", 100, "a"), ("mmproj-F16.gguf", 30, "b")])
    assert [(f.name, f.mmproj) for f in files] == [("m-Q4_K_M.gguf", "mmproj-F16.gguf")]


def test_a_vision_repository_downloads_the_model_with_its_projector(hub: FakeHub, tmp_path: Path) -> None:
    model, proj = serve_pair(hub, tmp_path)
    files = repo_files(REPO)
    assert [f.name for f in files] == [model.name]  # the projector is not a model to load
    assert files[0].mmproj == proj.name and files[0].mmproj_size == proj.stat().st_size
    laptop = from_fixture(Path(__file__).resolve().parents[1] / "fixtures" / "devices" / "cpu_only_8g.json")
    fit = fit_files(files, laptop.budget(), machine=laptop)[0]  # planned with its projector, from the headers
    assert fit.plan is not None and fit.plan["vision"]["image_tokens"] == 16
    assert 0.97 * proj.stat().st_size <= fit.plan["vision"]["weights_bytes"] <= proj.stat().st_size
    seen: list[int] = []
    entry = pull(f"{REPO}:{model.name}", open_downloads(open_models()), progress=lambda p: seen.append(p.total))
    got = projector_for(entry.path)
    assert got is not None and got.name == "tiny-vl-Q8_0.mmproj.gguf"
    assert got.read_bytes() == proj.read_bytes() and Path(entry.path).read_bytes() == model.read_bytes()
    assert set(seen) == {model.stat().st_size + proj.stat().st_size}  # one download from the person's view
    assert entry.sha256 == hub.repos[REPO].files[model.name].sha256
    assert read_projector_facts(got).image_tokens == 16
    open_models().remove(entry.name)  # the projector goes with the model it came with
    assert not got.exists() and not Path(entry.path).exists()


def test_a_projector_for_another_model_is_refused_before_the_download(hub: FakeHub, tmp_path: Path) -> None:
    model, proj = serve_pair(hub, tmp_path, lm_embd=576)  # SmolLM2's width onto a 128-wide model
    dl = open_downloads(open_models())
    with pytest.raises(UserError, match="576-wide embeddings, but tiny-vl-Q8_0.gguf is 128 wide"):
        pull(f"{REPO}:{model.name}", dl)
    folder = target_dir(REPO)
    assert not folder.exists() or not list(folder.iterdir())  # refused from the headers: nothing was saved
    assert "576-wide" in dl.jobs()[-1].error and dl.jobs()[-1].state == "failed"
    entry = pull(f"{REPO}:{model.name}", dl, with_projector=False)  # the model alone, text only
    assert projector_for(entry.path) is None
