"""The contestants of ``hisho bench peers-resume``: each keeps a conversation across a restart its own way.

- ``HishoSystem``: ``hisho serve``'s server (``build_api``, in this process, one sequence) in its own
  HISHO_HOME; its disk prompt cache is the store. Reuse: ``usage.prompt_tokens_details.cached_tokens``.
- ``HearthSystem``: upstream ``llama-server`` (``--parallel 1 --slot-save-path``) behind the hearth-llm proxy
  (``python -m hearth serve --upstream``, a child process): it restores the longest saved message prefix into
  the slot and saves the slot after each reply. Reuse: llama-server's ``timings.cache_n``.
- ``StillwarmSystem``: the same llama-server driven by the stillwarm library (``Session.ask``: restore the
  session's file, ``/completion`` on the chat rendered by the server's ``/apply-template``, save after the
  reply). Its first-token time is the time until the completion request left plus the server's ``prompt_ms``
  (the library waits for the whole reply and then saves and probes; both are after the first token).
- ``FreshLlama`` / a fresh ``HishoSystem``: the baseline; a new process with nothing kept for every request.
All of them answer greedily; ``restart()`` stops every process of a contestant and starts it again on the same
files (the in-process Hisho server is closed and built again, which stops its engine process).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hisho.bench.servers import Peer, free_port, llama_server_peer

KEY = "bench"
SEED = 1
PEERS = {"hearth": ("hearth", "hearth-llm==0.1.1"), "stillwarm": ("stillwarm", "stillwarm==0.1.1")}
INSTALL = "pip install -e '.[bench]' (hearth-llm and stillwarm, for this bench only)"


def missing_peer(name: str) -> str | None:
    """Why a peer cannot run here (not installed: the one line that says how), or None."""
    module, pin = PEERS[name]
    return None if importlib.util.find_spec(module) else f"{pin} is not installed: {INSTALL}"


@dataclass
class Answer:
    ttft_s: float
    text: str
    reused: int       # prompt tokens the server reports it did not compute
    prompt_tokens: int


def disk_bytes(folder: Path, skip: tuple[str, ...] = (".log",)) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.endswith(skip))


def chat(url: str, model: str, messages: list[dict[str, str]], max_tokens: int) -> Answer:
    """One streamed greedy chat request to an OpenAI-compatible ``url`` (ending in /v1), timed from the send."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "seed": SEED,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first, parts = 0.0, []
    timings: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    with httpx.Client() as client, client.stream("POST", url + "/chat/completions", json=body, timeout=1800,
                                                 headers={"Authorization": f"Bearer {KEY}"}) as r:
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"{url} answered {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            timings = chunk.get("timings") or timings
            usage = chunk.get("usage") or usage
            piece = chunk["choices"][0]["delta"].get("content") if chunk.get("choices") else None
            if piece:
                first = first or time.perf_counter()
                parts.append(piece)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    reused = int(timings["cache_n"]) if "cache_n" in timings else int(cached or 0)
    return Answer((first or time.perf_counter()) - start, "".join(parts), reused, int(usage.get("prompt_tokens", 0)))


class HishoSystem:
    name = "hisho"

    def __init__(self, model: Path, n_ctx: int, home: Path) -> None:
        self.model, self.n_ctx, self.home = model, n_ctx, home
        self.app: Any = None
        self.server: Any = None
        self._old_home: str | None = None

    def start(self) -> HishoSystem:
        from hisho.api.launch import build_api

        self.home.mkdir(parents=True, exist_ok=True)
        self._old_home = os.environ.get("HISHO_HOME")
        os.environ["HISHO_HOME"] = str(self.home)
        self.app, self.server, _ = build_api(str(self.model), parallel=1, n_ctx=self.n_ctx, key=KEY)
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.app.close()
        self.app = self.server = None
        if self._old_home is None:
            os.environ.pop("HISHO_HOME", None)
        else:
            os.environ["HISHO_HOME"] = self._old_home

    def restart(self) -> None:
        self.stop()
        self.start()

    def ask(self, messages: list[dict[str, str]], max_tokens: int) -> Answer:
        return chat(self.server.url, self.server.backend.model_id, messages, max_tokens)

    def disk_bytes(self) -> int:
        return disk_bytes(self.home)


def llama(binary: Path, model: Path, n_ctx: int, threads: int, folder: Path, slots: bool) -> Peer:
    folder.mkdir(parents=True, exist_ok=True)
    extra = ["--threads", str(threads), "--cache-ram", "0", "--flash-attn", "on"]
    if slots:
        extra += ["--slot-save-path", str(folder / "slots") + os.sep]
        (folder / "slots").mkdir(exist_ok=True)
    return llama_server_peer(binary, model, folder / "llama-server.log", parallel=1, ctx_size=n_ctx, extra=extra)


class FreshLlama:
    """The peers' baseline: llama-server started anew for each request, nothing saved anywhere."""
    name = "llama-server"

    def __init__(self, binary: Path, model: Path, n_ctx: int, threads: int, folder: Path) -> None:
        self.peer = llama(binary, model, n_ctx, threads, folder, slots=False)

    def ask(self, messages: list[dict[str, str]], max_tokens: int) -> Answer:
        self.peer.restart()
        try:
            return chat(self.peer.url + "/v1", "model", messages, max_tokens)
        finally:
            self.peer.stop()


class HearthSystem:
    name = "hearth"

    def __init__(self, binary: Path, model: Path, n_ctx: int, threads: int, folder: Path) -> None:
        self.upstream = llama(binary, model, n_ctx, threads, folder, slots=True)
        self.cache = folder / "slots"
        port = free_port()
        argv = [sys.executable, "-m", "hearth", "serve", "--upstream", self.upstream.url, "--cache-dir",
                str(self.cache), "--port", str(port)]
        self.proxy = Peer(argv, port, "/hearth/stats", folder / "hearth.log")

    def start(self) -> HearthSystem:
        self.upstream.start()
        self.proxy.start()
        return self

    def stop(self) -> None:
        self.proxy.stop()
        self.upstream.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def _snapshots(self) -> int:
        return int(httpx.get(self.proxy.url + "/hearth/stats", timeout=30).json().get("snapshots", 0))

    def ask(self, messages: list[dict[str, str]], max_tokens: int) -> Answer:
        before = self._snapshots()
        answer = chat(self.proxy.url + "/v1", "model", messages, max_tokens)
        deadline = time.monotonic() + 120   # the proxy saves the slot after the reply has been sent
        while self._snapshots() <= before and time.monotonic() < deadline:
            time.sleep(0.2)
        return answer

    def disk_bytes(self) -> int:
        return disk_bytes(self.cache, skip=(".log", ".tmp"))


class StillwarmSystem:
    name = "stillwarm"
    SESSION = "bench"

    def __init__(self, binary: Path, model: Path, n_ctx: int, threads: int, folder: Path) -> None:
        self.server = llama(binary, model, n_ctx, threads, folder, slots=True)
        self.cache, self.model, self.n_ctx = folder / "slots", model, n_ctx
        self.session: Any = None
        self._sha = ""

    def start(self) -> StillwarmSystem:
        import stillwarm  # type: ignore[import-not-found,unused-ignore]

        self.server.start()
        if not self._sha:
            with open(self.model, "rb") as fh:
                self._sha = hashlib.file_digest(fh, "sha256").hexdigest()
        profile = stillwarm.ServerProfile(model_sha256=self._sha, flash_attn="on", cache_type_k="f16",
                                          cache_type_v="f16", swa_full=False, ctx_size=self.n_ctx)
        self.client = _TimedServer(self.server.url)
        self.session = stillwarm.Session(self.client, profile, cache_dir=self.cache)
        return self

    def stop(self) -> None:
        self.server.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def ask(self, messages: list[dict[str, str]], max_tokens: int) -> Answer:
        prompt = str(httpx.post(self.server.url + "/apply-template", json={"messages": messages},
                                timeout=60).json()["prompt"])
        self.client.first = None
        start = time.perf_counter()
        result = self.session.ask(self.SESSION, prompt, n_predict=max_tokens)
        timed: tuple[float, dict[str, Any]] = self.client.first or (start, {})
        sent, timings = timed
        ttft = sent - start + float(timings.get("prompt_ms", 0.0)) / 1000
        return Answer(ttft, str(result.content), int(timings.get("cache_n", 0)),
                      int(timings.get("cache_n", 0)) + int(timings.get("prompt_n", 0)))

    def disk_bytes(self) -> int:
        return disk_bytes(self.cache, skip=(".log", ".tmp"))


def _TimedServer(url: str) -> Any:  # noqa: N802 - a class made on first use: stillwarm is optional
    """stillwarm's server client that notes when the first ``/completion`` of an ask left, and its timings."""
    import stillwarm

    class Timed(stillwarm.LlamaServer):  # type: ignore[misc,name-defined,unused-ignore]
        first: tuple[float, dict[str, Any]] | None = None

        def completion(self, *args: Any, **kwargs: Any) -> Any:
            sent = time.perf_counter()
            out = super().completion(*args, **kwargs)
            if self.first is None:
                self.first = (sent, dict(out.get("timings") or {}))
            return out

    return Timed(url)
