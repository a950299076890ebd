"""The real app process, quit from outside while an API client streams: SIGTERM (a logout, ``kill``) closes the
window as its close button does and the process ends within seconds, its engine with it; the next launch opens a
window. Driven as a user's system drives it: ``hisho gui`` in its own process, the real ``openai`` client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

from hisho.bench.servers import free_port
from hisho.core import settings as settings_mod

LAUNCH = "import sys; from hisho.cli.main import main; sys.exit(main(['gui']))"


def launch(home: Path, painted: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, HISHO_HOME=str(home), QT_QPA_PLATFORM="offscreen", HISHO_FIRST_PAINT_FILE=str(painted))
    return subprocess.Popen([sys.executable, "-c", LAUNCH], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        text = (task / "children").read_text() if (task / "children").exists() else ""
        found += [int(c) for c in text.split()]
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_until(cond: object, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if callable(cond) and cond():
            return
        time.sleep(0.1)
    pytest.fail(f"{what} did not happen within {timeout:.0f} s")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc")
def test_sigterm_during_an_api_stream_ends_the_app_and_its_engine_within_seconds(
        hisho_home: Path, tmp_path: Path, default_model_path: Path) -> None:
    port = free_port()
    prefs = settings_mod.load()
    prefs.set("api_enabled", True)
    prefs.set("api_port", port)
    prefs.save()
    proc = launch(hisho_home, tmp_path / "painted-1")
    try:
        wait_until(lambda: (tmp_path / "painted-1").exists(), 300, "the first window's first paint")
        key_file = hisho_home / "config" / "api_key"  # made at the API's first start (Settings → API shows it)
        wait_until(key_file.exists, 120, "the API key being stored")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key_file.read_text().strip(),
                               timeout=60, max_retries=0)

        def models_listed() -> bool:
            try:
                return bool(client.models.list().data)
            except openai.APIError:
                return False

        wait_until(models_listed, 300, "the window's API answering")
        first_chunk = threading.Event()
        ended: list[BaseException | None] = []

        def stream() -> None:
            try:
                chunks = client.chat.completions.create(
                    model="local", stream=True, max_tokens=4000, temperature=0,
                    messages=[{"role": "user", "content": "Write a very long story about a lighthouse keeper."}])
                for _chunk in chunks:
                    first_chunk.set()
                ended.append(None)
            except BaseException as exc:  # the server went away mid-stream: what the client sees
                ended.append(exc)
            finally:
                first_chunk.set()

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        assert first_chunk.wait(300), "no token streamed"
        engines = children(proc.pid)
        assert engines, "the app has no engine process"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
        assert took < 5.0, f"the app took {took:.1f} s to end"
        assert code == 0, proc.stderr.read().decode(errors="replace") if proc.stderr else code
        wait_until(lambda: not any(alive(p) for p in engines), 5, "the engine process ending")
        reader.join(30)
        assert ended, "the client is still waiting on a server that went away"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    log = (hisho_home / "logs" / "hisho.log").read_text(encoding="utf-8")
    assert "quitting on SIGTERM" in log

    again = launch(hisho_home, tmp_path / "painted-2")  # the next launch: the single-instance lock was let go
    try:
        wait_until(lambda: (tmp_path / "painted-2").exists(), 300, "the next launch's window")
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=60) == 0
    finally:
        if again.poll() is None:
            again.kill()
            again.wait(30)
