"""A document that would take hours is not started without asking (issue 16, point 4): the estimate comes from
its size before a single token is counted; the CLI asks on a terminal, takes --yes, and otherwise refuses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from hisho.core.documents import job as job_mod
from hisho.core.documents.job import SummaryJob
from hisho.core.engine.client import EngineClient

CHUNK = 160


def long_text(path: Path, chars: int) -> Path:
    line = "The committee met again and discussed the harbour, the budget and the new school in detail.\n"
    path.write_text((line * (chars // len(line) + 1))[:chars], encoding="utf-8")
    return path


def test_a_huge_document_waits_for_confirmation(tmp_path: Path, engine: EngineClient) -> None:
    big = long_text(tmp_path / "big.txt", 4 * CHUNK * (job_mod.CONFIRM_CHUNKS + 50))
    asked: list[tuple[str, int, float]] = []

    def say_no(name: str, chunks: int, eta: float) -> bool:
        asked.append((name, chunks, eta))
        return False

    started = time.perf_counter()
    result = SummaryJob(engine, [big], chunk_target=CHUNK, confirm=say_no).run()
    assert asked and asked[0][0] == "big.txt" and asked[0][1] > job_mod.CONFIRM_CHUNKS and asked[0][2] > 0
    assert not result.documents and len(result.skipped) == 1
    assert "big.txt: about" in result.skipped[0] and "not started" in result.skipped[0]
    assert "not started" in result.summary  # listed under "Not included", never silent
    print(f"\nrefused {asked[0][1]} chunks (ETA {asked[0][2]:.0f}s) in {time.perf_counter() - started:.2f}s")


def test_a_small_document_is_not_asked_about(tmp_path: Path, engine: EngineClient) -> None:
    small = long_text(tmp_path / "small.txt", 3000)
    asked: list[object] = []
    result = SummaryJob(engine, [small], chunk_target=CHUNK, summary_tokens=8, final_tokens=16,
                        confirm=lambda *a: asked.append(a) or False).run()
    assert not asked and len(result.documents) == 1 and not result.skipped


def test_cli_refuses_without_a_terminal_or_yes(tmp_path: Path) -> None:
    big = long_text(tmp_path / "big.txt", 4 * CHUNK * (job_mod.CONFIRM_CHUNKS + 50))
    done = subprocess.run([sys.executable, "-m", "hisho.cli", "summarize", str(big), "--chunk-tokens", str(CHUNK),
                           "--n-ctx", "1024"], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "big.txt: about" in done.stderr and "confirm to run it" in done.stderr
