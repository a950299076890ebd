"""``hisho bench soak --minutes M``: the API under careful and careless clients at once, for M minutes.

In a throw-away HISHO_HOME, ``hisho serve``'s server (``build_api``, in this process, on loopback) over the
model loaded for ``PARALLEL`` sequences; first a few chats are made through the chat service (the window's
path), which leaves conversations and KV snapshots in the store. Then, until the deadline:
- ``CLIENTS`` clients, each mixing streamed and whole chats, long prompts, completions, streams and whole
  requests abandoned mid-reply, malformed bodies and oversized ones (``soak_clients.MIX``);
- one client that opens a stream and never reads it (the time limit, set to ``TIMEOUT_S`` here, must end its
  engine work);
- once, at 40 % of the time, a ``kill -9`` of the engine process while a request streams;
- every ``WINDOW_EVERY_S``, a chat turn through the chat service, as the window sends one.
Afterwards: nothing may still run in the engine, and every conversation row, KV index row and KV file made
before the soak must be unchanged. Reports requests served, outcomes by kind, first-token p50/p99, this
process's (the server's) and the engine's RSS after the warm-up and at the end, and those checks.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import multiprocessing
import os
import signal
import sqlite3
import statistics
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from hisho.api.launch import build_api
from hisho.bench.homes import temporary_home
from hisho.bench.soak_clients import Outcome, client_process
from hisho.core import paths
from hisho.core import settings as settings_mod
from hisho.core.conversations.schema import ChatSettings
from hisho.core.services import Services

log = logging.getLogger("hisho.bench")

KEY = "soak"
PARALLEL = 4
PER_SEQ = 2048
CLIENTS = 4
TIMEOUT_S = 20
WINDOW_EVERY_S = 20.0
WARMUP_S = 20.0
SEED_CHATS = 3
UNEXPECTED_OK = ("engine_crashed",)  # what a request in flight at the kill may get


def rss_kib(pid: int | None) -> int:
    if not pid:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _user_state(db: Path, kv_dir: Path) -> dict[str, Any]:
    """What the user owns: every conversation and message row, the chats' KV index rows, each KV file's hash."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        convs = {r[0]: r for r in con.execute("SELECT * FROM conversations")}
        msgs = {r[0]: r for r in con.execute("SELECT * FROM messages")}
        entries = {(r[0], r[1]): r[2:4] for r in con.execute(
            "SELECT owner, fingerprint, tip, n_tokens FROM kv_entries WHERE owner LIKE 'conv:%'")}
    finally:
        con.close()
    files = {str(p.relative_to(kv_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(kv_dir.rglob("*")) if p.is_file()}
    return {"conversations": convs, "messages": msgs, "kv_entries": entries, "kv_files": files}


def _compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Rows and files present before the soak that are gone or different after it."""
    out = {}
    for part in ("conversations", "messages", "kv_entries", "kv_files"):
        old, new = before[part], after[part]
        out[f"{part}_before"] = len(old)
        out[f"{part}_lost_or_changed"] = sum(1 for k, v in old.items() if new.get(k) != v)
    return out


def _seed(app: Services) -> int:
    """A few chats through the chat service (the window's path): conversations and their KV snapshots."""
    for i in range(SEED_CHATS):
        conv = app.executor.call("store", partial(app.store.create, f"Seed {i}",
                                                  settings=ChatSettings(max_tokens=24, temperature=0.0)))
        for text in (f"Tell me about the number {i}.", "And one more fact, please."):
            app.chat.run(app.chat.send(conv.id, text))
    if app.kv is not None:
        app.kv.session.flush()
    return SEED_CHATS


class Soak:
    def __init__(self, app: Services, url: str, model: str, minutes: float) -> None:
        self.app, self.url, self.model = app, url, model
        self.start = time.monotonic()
        self.deadline = self.start + minutes * 60
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []
        self.window: list[dict[str, Any]] = []
        self.never_read = 0
        self.kill: dict[str, Any] = {}

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def killer(self) -> None:
        """Once, at 40 % of the time: kill -9 the engine while a request streams; time until it answers again."""
        _sleep_until(self.start + 0.4 * (self.deadline - self.start))
        engine = self.app.engine
        body = {"model": self.model, "messages": [{"role": "user", "content": "Count from one to five hundred."}],
                "max_tokens": 600, "stream": True}
        with httpx.Client(timeout=120) as http:
            for _ in range(10):  # until a stream is under way (the box may be busy: a few tries)
                with http.stream("POST", self.url + "/chat/completions", json=body,
                                 headers={"Authorization": f"Bearer {KEY}"}) as r:
                    lines = r.iter_lines()
                    if r.status_code != 200 or not any('"content": "' in line and '"content": ""' not in line
                                                       for line in lines):
                        time.sleep(2)
                        continue
                    pid = engine.pid
                    killed_at = time.monotonic()
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                    rest = list(lines)
                    break
            else:
                self.kill = {"skipped": "no stream got under way in 10 tries"}
                return
            self.kill = {"engine_pid": pid,
                         "stream_ended_with_error": any('"error"' in x for x in rest),
                         "stream_ended_after_s": round(time.monotonic() - killed_at, 2), "tries": []}
            for _ in range(600):  # bounded: up to ~10 minutes of retries, once a second
                sent = time.monotonic()
                r2 = http.post(self.url + "/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                               json={"model": self.model, "messages": [{"role": "user", "content": "Hi"}],
                                     "max_tokens": 2})
                self.kill["tries"].append([r2.status_code, round(time.monotonic() - sent, 2)])
                if r2.status_code == 200:
                    self.kill["answering_again_after_s"] = round(time.monotonic() - killed_at, 2)
                    break
                time.sleep(1)
            self.kill["tries"] = self.kill["tries"][:10]
        self.kill["new_engine_pid"] = self.app.engine.pid

    def window_chat(self) -> None:
        """A chat turn through the chat service every ``WINDOW_EVERY_S``: the window's own path."""
        app = self.app
        conv = app.executor.call("store", lambda: app.store.create(
            "Soak window", settings=ChatSettings(max_tokens=16, temperature=0.0)))
        n = 0
        while time.monotonic() + 5 < self.deadline:
            n += 1
            began = time.monotonic()
            try:
                result = app.chat.run(app.chat.send(conv.id, f"Window question {n}: say a word."))
                ok = result.message.status == "done" and bool(result.message.content)
                self.window.append({"ok": ok, "s": round(time.monotonic() - began, 2),
                                    "error": result.error or result.message.error})
            except Exception as exc:  # a turn that fails is counted, the soak goes on
                self.window.append({"ok": False, "s": round(time.monotonic() - began, 2), "error": repr(exc)})
            _sleep_until(min(self.deadline, began + WINDOW_EVERY_S))


def _sleep_until(t: float) -> None:
    while (left := t - time.monotonic()) > 0:
        time.sleep(min(left, 1.0))


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 3)


def _settings() -> settings_mod.Settings:
    s = settings_mod.load()
    s.set("api_request_timeout_s", TIMEOUT_S)
    return s


def run(args: argparse.Namespace) -> dict[str, Any]:
    minutes = float(getattr(args, "minutes", None) or 2.0)
    out: dict[str, Any] = {"minutes": minutes, "clients": CLIENTS, "parallel": PARALLEL, "n_ctx_per_seq": PER_SEQ,
                           "request_timeout_s": TIMEOUT_S}
    with temporary_home("hisho-bench-soak-"):
        app, server, _ = build_api(args.model, parallel=PARALLEL, n_ctx=PER_SEQ, key=KEY, settings=_settings())
        try:
            server.start()
            backend = server.backend
            out["model"] = model = backend.model_id
            out["seeded_chats"] = _seed(app)
            before = _user_state(paths.database_path(), paths.kv_dir())
            rss0 = {"server": rss_kib(os.getpid()), "engine": rss_kib(app.engine.pid)}
            soak = Soak(app, server.url, model, minutes)
            # The clients run in their own process, so this one's RSS is the server's (and the window chat's).
            spawn = multiprocessing.get_context("spawn")
            results: multiprocessing.Queue[tuple[list[Outcome], int]] = spawn.Queue()
            clients = spawn.Process(target=client_process, name="soak-clients", args=(
                (server.url, KEY, model, CLIENTS, time.time() + minutes * 60, TIMEOUT_S), results))
            clients.start()
            threads = [threading.Thread(target=f, name=f"soak-{f.__name__}") for f in (soak.killer, soak.window_chat)]
            for t in threads:
                t.start()
            _sleep_until(soak.start + min(WARMUP_S, minutes * 15))
            rss_warm = {"server": rss_kib(os.getpid()), "engine": rss_kib(app.engine.pid)}
            soak.outcomes, soak.never_read = results.get(timeout=minutes * 60 + 900)
            out["clients_rss_kib_end"] = rss_kib(clients.pid)
            clients.join(60)
            for t in threads:
                t.join(minutes * 60 + 900)
            out["threads_still_running"] = sum(t.is_alive() for t in threads) + clients.is_alive()
            # Nothing may still run in the engine for clients that are gone (a generous bound: a loaded box).
            idle_deadline = time.monotonic() + 60
            while backend.busy and time.monotonic() < idle_deadline:
                time.sleep(0.1)
            health = httpx.get(server.url.removesuffix("/v1") + "/health", timeout=30).json()
            rss_end = {"server": rss_kib(os.getpid()), "engine": rss_kib(app.engine.pid)}
            out.update(_report(soak, backend.cancelled, backend.timed_out))
            out.update(server_alive=health.get("status") == "ok", busy_after=backend.busy,
                       engine_restarts=app.engine.restarts,
                       server_rss_kib={"before": rss0["server"], "after_warmup": rss_warm["server"],
                                       "end": rss_end["server"]},
                       engine_rss_kib={"before": rss0["engine"], "after_warmup": rss_warm["engine"],
                                       "end": rss_end["engine"]})
            out["server_rss_end_vs_warmup"] = round(rss_end["server"] / max(1, rss_warm["server"]), 3)
            out["engine_rss_end_vs_warmup"] = round(rss_end["engine"] / max(1, rss_warm["engine"]), 3)
        finally:
            server.stop()
            app.close()
        out["user_data"] = _compare(before, _user_state(paths.database_path(), paths.kv_dir()))
    out["user_data_intact"] = all(v == 0 for k, v in out["user_data"].items() if k.endswith("_lost_or_changed"))
    return out


def _report(soak: Soak, cancelled: int, timed_out: int) -> dict[str, Any]:
    by_action: dict[str, Counter[str]] = {}
    unexpected: Counter[str] = Counter()
    for o in soak.outcomes:
        by_action.setdefault(o.action, Counter())[o.kind] += 1
        if not o.expected and o.kind not in UNEXPECTED_OK:
            unexpected[f"{o.action}:{o.kind}"] += 1
    ttfts = [o.ttft_s for o in soak.outcomes if o.ttft_s is not None]
    served = sum(1 for o in soak.outcomes if o.kind == "ok" and o.action in ("stream", "whole", "long", "completion"))
    return {
        "requests": len(soak.outcomes) + soak.never_read + len(soak.window),
        "requests_served": served,
        "outcomes": {a: dict(c) for a, c in sorted(by_action.items())},
        "unexpected": dict(unexpected),
        "first_token_s": {"p50": _pct(ttfts, 50), "p99": _pct(ttfts, 99), "n": len(ttfts)},
        "never_read_streams": soak.never_read, "cancelled_in_engine": cancelled, "timed_out_in_engine": timed_out,
        "kill_9": soak.kill,
        "window_chat": {"turns": len(soak.window), "answered": sum(1 for w in soak.window if w["ok"]),
                        "seconds_p50": _pct([w["s"] for w in soak.window], 50),
                        "failures": [w["error"] for w in soak.window if not w["ok"]][:5]},
    }
