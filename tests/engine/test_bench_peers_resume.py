"""``hisho bench peers-resume --quick``: Hisho, hearth-llm and stillwarm (each in front of llama-server) on the
bundled model at a few hundred tokens, one run shared by the tests. Every row has the figures; Hisho's resumed and
branched answers equal a fresh server's, and its resume reads only the new turn from the disk cache. A peer that
is not installed (the ``bench`` extra) or without llama-server is skipped with the row's reason. Behaviour only:
no figure is compared with a speed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from hisho.bench.peers_resume import run as bench_peers_resume

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
FIELDS = {"system", "model", "resume_ttft_s", "branch_ttft_s", "resume_speedup", "branch_speedup", "exact_resume",
          "exact_branch", "disk_bytes", "reused_tokens"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("peers-resume-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HISHO_HOME", str(home))
        return bench_peers_resume(argparse.Namespace(model=None, quick=True, tokens=None, repeat=1))


def _row(report: dict[str, Any], system: str) -> dict[str, Any]:
    rows = [r for r in report["rows"] if r["system"] == system]
    assert len(rows) == 1, report["rows"]
    return rows[0]


def test_hisho_resumes_and_branches_exactly(report: dict[str, Any], default_model_path: Path) -> None:
    row = _row(report, "hisho")
    assert FIELDS <= set(row), row
    assert row["model"] == default_model_path.name
    assert row["exact_resume"] and row["exact_branch"], row
    assert row["disk_bytes"] > 0
    # The conversation's prompt came back from disk after the restart: at least the cold request's tokens.
    assert row["reused_tokens"] >= row["cold_prompt_tokens"] - 1, row
    assert 0 < row["branch_reused_tokens"] < row["branch_prompt_tokens"], row
    assert row["resume_speedup"] > 0 and row["branch_speedup"] > 0


@pytest.mark.parametrize("system", ["hearth", "stillwarm"])
def test_peer_row(report: dict[str, Any], system: str) -> None:
    row = _row(report, system)
    if "skipped" in row:
        pytest.skip(row["skipped"])
    assert FIELDS <= set(row), row
    assert isinstance(row["exact_resume"], bool) and isinstance(row["exact_branch"], bool)
    assert row["disk_bytes"] > 0, row   # each keeps its slot files on disk
    assert row["resume_ttft_s"] > 0 and row["branch_ttft_s"] > 0
