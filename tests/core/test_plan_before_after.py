"""One plan before and after a download: a true-shape file served by a hub-shaped server is planned from its header
(``hisho plan hf:…``, the Hub tab's badge, the planner page), from the downloaded file and as its load is judged,
at 4K and 32K tokens, f16 and q8_0 KV, and every figure agrees within 1 %. They agree because one search, one
calibration (found by the header's digest: the hub file is dry-run from its header alone) and one set of load
rules price all of them, and the budget is the machine's, whatever the app already holds."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hisho.bench.shapes import model_file
from hisho.core import settings as settings_mod
from hisho.core.hub import fit_files, repo_files
from hisho.core.hub.fit import file_facts
from hisho.core.machine import Machine, own_children_memory
from hisho.core.models.gguf_facts import read_facts
from hisho.core.planner import as_loaded, calibration_for, explain, make_plan, plan_facts
from hisho.core.planner.calibrate import cached, calibrate
from hisho.core.planner.launch import planned_load
from hisho.core.planner.profiles import SHAPES, requested
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import environ_for_child, hub  # noqa: F401  (the fixture)

GIB = 1024**3
REPO = "org/Gemma-3-GGUF"
# A laptop-sized machine with the CPU features this build repacks for (as the detected one has).
MACHINE = Machine(platform="linux", ram_total=16 * GIB, ram_available=16 * GIB, cpu_threads=2,
                  cpu=frozenset({"AVX", "AVX2", "F16C", "FMA", "SSE3", "SSSE3"}))


@pytest.fixture
def served(hub: FakeHub, default_model_path: Path) -> Iterator[tuple[Path, str]]:  # noqa: F811
    """gemma-3-tiny (trained on 32,768 tokens, sliding-window layers and full ones) in Q4_0, on the hub."""
    path = model_file("gemma-3-tiny", "Q4_0")
    hub.add_file(REPO, path.name, path, sha256="5" * 64)  # the hash is not what this test is about
    yield path, path.name


def test_same_file_same_figure_from_header_file_and_load(served: tuple[Path, str]) -> None:
    path, name = served
    hub_facts = file_facts(repo_files(REPO)[0])[0]
    file = read_facts(path)
    assert hub_facts.header_sha and hub_facts.header_sha == file.header_sha
    # The hub file's dry run comes from its header in a stand-in of the file's size; the file then finds it.
    from_header = calibration_for(hub_facts)
    assert from_header is not None and calibration_for(file, run=False) == from_header
    # And it is the dry run the file itself gets (the figures llama.cpp reports do not depend on the data).
    own = calibrate(file, force=True)
    assert own.points == from_header.points and own.repacked == from_header.repacked
    budget = MACHINE.budget()
    settings = settings_mod.Settings()
    window = SHAPES["window"]
    for n_ctx in (4096, 32768):
        for kv in ("f16", "q8_0"):
            ask = requested(window, n_ctx=n_ctx, kv_type=kv)
            before = as_loaded(hub_facts, ask, budget, calibration_for(hub_facts, run=False), cpu=MACHINE.cpu)
            after = as_loaded(file, ask, budget, calibration_for(file, run=False), cpu=MACHINE.cpu)
            settings.choose(path, n_ctx=n_ctx, kv_type=kv)
            params, loaded = planned_load(path, settings=settings, n_seq_max=window.n_seq_max, saves_kv=True,
                                          machine=MACHINE)
            assert loaded is not None and params.n_ctx == n_ctx and params.type_k == kv
            for other in (after, loaded):
                assert abs(other.need - before.need) <= 0.01 * before.need, (n_ctx, kv, other.need, before.need)
                assert other.config.flash_attn == before.config.flash_attn  # one rule for flash attention
                assert other.config.n_ubatch == before.config.n_ubatch
            assert sum(r.bytes for r in explain.rows(before)) == before.need


def test_search_from_header_badge_and_page_agree_with_the_file(served: tuple[Path, str]) -> None:
    path, _name = served
    budget = MACHINE.budget()
    header = file_facts(repo_files(REPO)[0])[0]
    for target in (4096, 32768):
        from_file = make_plan([str(path)], MACHINE, budget, min_ctx=4096, target_ctx=target)
        badge = fit_files(repo_files(REPO), budget, target_ctx=target, machine=MACHINE)[0]
        assert badge.plan is not None and badge.plan["n_ctx"] == from_file.config.n_ctx
        assert badge.plan["flash_attn"] == from_file.config.flash_attn
        assert abs(badge.plan["resident"] - from_file.need) <= 0.01 * from_file.need
        page = plan_facts([header], MACHINE, budget, min_ctx=4096, target_ctx=target)
        assert page.config == from_file.config
        assert abs(page.need - from_file.need) <= 0.01 * from_file.need


def test_hisho_plan_hf_and_hisho_plan_file_agree(served: tuple[Path, str], hub: FakeHub) -> None:  # noqa: F811
    """``hisho plan hf:REPO/FILE`` and ``hisho plan FILE``, each in a child process (huggingface_hub reads
    HF_ENDPOINT when it is imported), on this machine as detected."""
    path, name = served
    figures = []
    for target in (4096, 32768):
        for spec in (f"hf:{REPO}/{name}", str(path)):
            out = subprocess.run([sys.executable, "-m", "hisho.cli.main", "plan", spec, "--json", "--ctx", str(target),
                                  "--ram-gib", "2"], env=environ_for_child(hub), capture_output=True, text=True,
                                 timeout=300)
            assert out.returncode == 0, out.stderr
            figures.append(json.loads(out.stdout))
    for hub_plan, file_plan in zip(figures[::2], figures[1::2], strict=True):
        assert hub_plan["n_ctx"] == file_plan["n_ctx"] and hub_plan["flash_attn"] == file_plan["flash_attn"]
        assert abs(hub_plan["resident"] - file_plan["resident"]) <= 0.01 * file_plan["resident"]
        assert hub_plan["profile"] == "window" and hub_plan["parts"] == file_plan["parts"]


def test_a_repositorys_other_quants_plan_from_the_same_dry_run(served: tuple[Path, str]) -> None:
    """One dry run per model shape: the Hub tab's badges of a repository's other quants use it (their compute
    buffers are the same; their repack buffers come from their own tensor tables) and agree with each file's
    own dry run within 1 %."""
    path, _name = served
    calibration_for(read_facts(path))
    sibling = read_facts(model_file("gemma-3-tiny", "Q8_0"))
    borrowed = cached(sibling)
    assert borrowed is not None and borrowed.repacked == -1
    own = calibrate(sibling, force=True)
    for n_ctx in (4096, 32768):
        ask = requested(SHAPES["window"], n_ctx=n_ctx, kv_type="f16")
        a = as_loaded(sibling, ask, MACHINE.budget(), borrowed, cpu=MACHINE.cpu)
        b = as_loaded(sibling, ask, MACHINE.budget(), own, cpu=MACHINE.cpu)
        assert abs(a.need - b.need) <= 0.01 * b.need


def test_breakdown_rows_name_what_each_part_is_for(served: tuple[Path, str]) -> None:
    path, _name = served
    facts = read_facts(path)
    ask = requested(SHAPES["window"], n_ctx=32768, kv_type="f16")
    p = as_loaded(facts, ask, MACHINE.budget(), calibration_for(facts), cpu=MACHINE.cpu)
    labels = {r.key: r.label for r in explain.rows(p)}
    assert labels["kv"].startswith("KV cache for 32K tokens, f16, shared by 2 sequences")
    attention = "without flash attention" if not p.config.flash_attn else "with flash attention"
    assert labels["compute"].startswith(f"compute buffers for 32K context {attention}")
    assert "saving a chat's KV" in labels["kept"]  # the window saves chats: its save buffer is named


def test_a_loaded_model_is_not_taken_from_the_budget_it_is_judged_against() -> None:
    """What this app's own children hold (the engine and its model) counts as available: a child holding
    160 MiB raises the figure by at least most of that."""
    code = "import sys, time; x = b'x' * (160 << 20); print('ready', flush=True); time.sleep(60)"
    before = own_children_memory()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        held = own_children_memory() - before
        while held < 150 << 20 and time.monotonic() < deadline:
            time.sleep(0.1)
            held = own_children_memory() - before
        assert held >= 150 << 20
    finally:
        child.kill()
        child.wait(timeout=10)
