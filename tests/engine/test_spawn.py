"""Children started the way a PyInstaller bundle starts them: ``sys.executable`` is the ``hisho`` program itself
(here a launcher script that runs ``hisho.cli.main``, as packaging/entry.py does), which knows no ``-m``."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hisho.core import spawn
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from hisho.core.planner.calibrate import run_probe


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A frozen-style ``hisho`` executable, and this process made to look like it runs inside it."""
    launcher = tmp_path / "hisho"
    launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom hisho.cli.main import main\nsys.exit(main())\n")
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(launcher))
    return launcher


def test_bundle_command_has_no_python_flags(bundle: Path) -> None:
    assert spawn.command("probe", "devices") == [str(bundle), spawn.CHILD_FLAG, "probe", "devices"]
    assert spawn.command("engine") == [str(bundle), spawn.CHILD_FLAG, "engine"]
    assert spawn.command("download", "7") == [str(bundle), spawn.CHILD_FLAG, "download", "7"]


def test_bundle_refuses_python_module_flag(bundle: Path) -> None:
    """What calibration used to run in a bundle: the CLI rejects it (exit 2), so plans had no calibration."""
    proc = subprocess.run([str(bundle), "-m", "hisho.engine.measure.probe", "devices"], input="{}", capture_output=True,
                          text=True, timeout=60, env=spawn.child_env())
    assert proc.returncode == 2


def test_probe_runs_from_a_bundle(bundle: Path) -> None:
    answer = run_probe("devices", {}, timeout=120)
    assert any(d["type"] == "cpu" for d in answer["devices"])


def test_engine_runs_from_a_bundle(bundle: Path, default_model_path: Path) -> None:
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=512))
        assert client.pid is not None and client.tokenize("hello")


def test_download_child_runs_from_a_bundle(bundle: Path, tmp_path: Path) -> None:
    """The window's download process (hisho.core.hub.child) used to be ``sys.executable -m …``: in a bundle the
    CLI refused it (exit 2) and every download from the window failed. Through its role it runs and answers."""
    env = spawn.child_env(HISHO_HOME=str(tmp_path / "home"))
    proc = subprocess.run(spawn.command("download", "999999"), input="", capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"error": "no download #999999", "type": "UserError",
                                                          "user": True}


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError):
        spawn.command("shell")
    assert spawn.child_role(["--hisho-child", "shell"]) is None
    assert spawn.child_role(["--engine-process"]) == ("engine", [])


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in interpreter is a shell script")
def test_engine_runs_under_another_interpreter(tmp_path: Path) -> None:
    """``hisho bench decode --cpu-python``: the engine child run by the interpreter named (there, the CPU build's
    venv beside a Vulkan one); here a wrapper around this one that leaves a mark of having been run."""
    mark = tmp_path / "ran"
    other = tmp_path / "python-other"
    other.write_text(f'#!/bin/sh\necho "$@" > {mark}\nexec {sys.executable} "$@"\n')
    other.chmod(other.stat().st_mode | stat.S_IXUSR)
    assert spawn.command("engine", python=str(other)) == [str(other), "-m", "hisho.engine"]
    with EngineClient(python=str(other)) as client:
        client.start()
        assert client.engine_info["pid"]
    assert mark.read_text().split() == ["-m", "hisho.engine"]


def test_a_probe_in_flight_ends_at_once_when_the_app_stops_its_children(default_model_path: Path) -> None:
    """The app quits during the first start's measurement: ``stop_running`` ends the probe child and the waiting
    ``run`` returns at once with what it had, so no worker thread holds the exit for the probe's timeout."""
    import threading
    import time

    from hisho.core.planner.calibrate import ProbeFailed
    from hisho.core.planner.first_speed import measure

    failed: list[BaseException] = []

    def work() -> None:
        try:
            measure(default_model_path, timeout=600)
        except ProbeFailed as exc:
            failed.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    end = time.monotonic() + 60
    while not spawn._RUNNING and time.monotonic() < end:
        time.sleep(0.01)
    assert spawn.stop_running() == 1
    worker.join(30)
    assert not worker.is_alive(), "the measurement still waits on a child that was stopped"
    assert failed and "probe 'speed' failed" in str(failed[0])
    assert spawn.stop_running() == 0
