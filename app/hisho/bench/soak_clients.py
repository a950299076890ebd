"""The clients of ``hisho bench soak``: each action is one request as a careful or a careless client sends it,
and returns what came of it (``Outcome``). Loopback only; every loop in here is bounded (a deadline or a count).
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any

import httpx

QUESTIONS = ("Say hello.", "Name three colours.", "What is two plus two?", "Write one short sentence about rain.",
             "Give a synonym for quick.", "Count: 1, 2, 3,")
# Weighted mix of what the ordinary clients do (the kill and the never-reading client have their own threads).
MIX = (("stream", 30), ("whole", 22), ("long", 10), ("completion", 5), ("abandon_stream", 10),
       ("abandon_whole", 6), ("malformed", 12), ("oversized", 5))
BAD_FIELDS: dict[str, dict[str, Any]] = {
    "bogus_role": {"messages": [{"role": "bogus", "content": "x"}]},
    "null_content": {"messages": [{"role": "user", "content": None}]},
    "n2": {"n": 2}, "empty_stop": {"stop": [""]}, "huge_max_tokens": {"max_tokens": 100_000_000}}
MALFORMED = ("bad_json", "deep", *BAD_FIELDS)


@dataclass
class Outcome:
    action: str
    kind: str                 # "ok", an OpenAI error code, "http_<status>", or a client exception's name
    expected: bool            # what this action should get (a 400 for a malformed body is expected)
    ttft_s: float | None = None


class Client:
    """One loopback client (its own ``httpx.Client``, as a real one keeps)."""

    def __init__(self, url: str, key: str, model: str, seed: int) -> None:
        self.url, self.key, self.model = url, key, model
        self.port = int(url.split(":")[2].split("/")[0])
        self.rng = random.Random(seed)
        self.http = httpx.Client(timeout=httpx.Timeout(120, connect=10))

    def close(self) -> None:
        self.http.close()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def pick(self) -> str:
        return self.rng.choices([a for a, _ in MIX], weights=[w for _, w in MIX])[0]

    def act(self, action: str) -> Outcome:
        try:
            outcome: Outcome = getattr(self, "_" + action)()
            return outcome
        except (httpx.HTTPError, OSError) as exc:
            return Outcome(action, type(exc).__name__, action.startswith("abandon"))

    # ----- well-behaved ----------------------------------------------------------------------------------

    def _chat(self, content: str, max_tokens: int = 24) -> dict[str, Any]:
        return {"model": self.model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0.7}

    def _stream_body(self, action: str, body: dict[str, Any], path: str = "/chat/completions") -> Outcome:
        start = time.perf_counter()
        first: float | None = None
        with self.http.stream("POST", self.url + path, json={**body, "stream": True}, headers=self.headers) as r:
            if r.status_code != 200:
                r.read()
                return Outcome(action, _kind(r), False)
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return Outcome(action, str(chunk["error"].get("code") or "stream_error"), False)
                delta = chunk["choices"][0].get("delta", {}) if chunk.get("choices") else {}
                if first is None and (delta.get("content") or chunk["choices"] and chunk["choices"][0].get("text")):
                    first = time.perf_counter() - start
        return Outcome(action, "ok", True, first)

    def _stream(self) -> Outcome:
        return self._stream_body("stream", self._chat(self.rng.choice(QUESTIONS)))

    def _long(self) -> Outcome:
        rules = "\n".join(f"Rule {i}: a report on site {i} names its author, its date and every figure it measured."
                          for i in range(self.rng.randint(15, 45)))
        return self._stream_body("long", self._chat(f"The handbook:\n{rules}\nWho signs a report?", 16))

    def _whole(self) -> Outcome:
        r = self.http.post(self.url + "/chat/completions", json=self._chat(self.rng.choice(QUESTIONS)),
                           headers=self.headers)
        return Outcome("whole", "ok" if r.status_code == 200 else _kind(r), r.status_code == 200)

    def _completion(self) -> Outcome:
        body = {"model": self.model, "prompt": "1, 2, 3, 4,", "max_tokens": 16, "temperature": 0}
        r = self.http.post(self.url + "/completions", json=body, headers=self.headers)
        return Outcome("completion", "ok" if r.status_code == 200 else _kind(r), r.status_code == 200)

    # ----- careless ------------------------------------------------------------------------------------------

    def _abandon_stream(self) -> Outcome:
        """Reads two events of a long reply, then goes."""
        body = {**self._chat("Count from one to five hundred.", 600), "stream": True}
        with self.http.stream("POST", self.url + "/chat/completions", json=body, headers=self.headers) as r:
            if r.status_code != 200:
                r.read()
                return Outcome("abandon_stream", _kind(r), r.status_code == 429)
            lines = r.iter_lines()
            for _ in range(4):
                next(lines, None)
        return Outcome("abandon_stream", "left", True)

    def _abandon_whole(self) -> Outcome:
        """Asks for a long whole reply and closes the connection before it comes."""
        with self.raw("/chat/completions", json.dumps(self._chat("Count from one to five hundred.", 600)).encode()):
            time.sleep(self.rng.uniform(0.2, 1.5))
        return Outcome("abandon_whole", "left", True)

    def _malformed(self) -> Outcome:
        which = self.rng.choice(MALFORMED)
        good = self._chat("Hi", 4)
        body: bytes
        if which == "bad_json":
            body = b'{"model": "' + self.model.encode() + b'", "messages": [}'
        elif which == "deep":
            body = b'{"model": "m", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
        else:
            body = json.dumps({**good, **BAD_FIELDS[which]}).encode()
        r = self.http.post(self.url + "/chat/completions", content=body,
                           headers={**self.headers, "Content-Type": "application/json"})
        return Outcome("malformed", "ok" if r.status_code == 400 else _kind(r), r.status_code == 400)

    def _oversized(self) -> Outcome:
        """A body over the limit: mostly a declared 50 MB of which only the start is sent, sometimes a real
        9 MiB one sent whole."""
        if self.rng.random() < 0.2:
            big = json.dumps(self._chat("word " * (9 * 1024 * 1024 // 5))).encode()
            r = self.http.post(self.url + "/chat/completions", content=big,
                               headers={**self.headers, "Content-Type": "application/json"})
            return Outcome("oversized", "ok" if r.status_code == 413 else _kind(r), r.status_code == 413)
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(self._head("/chat/completions", 50_000_000) + b'{"model": "' + b"x" * 60_000)
            status = _status_line(sock)
        return Outcome("oversized", "ok" if status == 413 else f"http_{status}", status == 413)

    # ----- raw sockets -------------------------------------------------------------------------------------

    def _head(self, path: str, length: int) -> bytes:
        return (f"POST /v1{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()

    def raw(self, path: str, body: bytes) -> socket.socket:
        """A connection with the request sent and its answer left unread (close it to leave)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        sock.sendall(self._head(path, len(body)) + body)
        return sock


def _kind(r: httpx.Response) -> str:
    try:
        code = r.json()["error"].get("code")
    except (ValueError, KeyError, TypeError, AttributeError):
        code = None
    return str(code or f"http_{r.status_code}")


def _status_line(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data and len(data) < 4096:
        got = sock.recv(4096)
        if not got:
            break
        data += got
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def run_clients(url: str, key: str, model: str, n: int, deadline_wall: float,
                timeout_s: float) -> tuple[list[Outcome], int]:
    """``n`` mixed clients and one that never reads its streams, until ``deadline_wall`` (``time.time()``).
    Returns every outcome and how many streams were left unread."""
    deadline = time.monotonic() + (deadline_wall - time.time())
    outcomes: list[Outcome] = []
    never_read = [0]

    def mixed(i: int) -> None:
        c = Client(url, key, model, seed=i)
        try:
            while time.monotonic() < deadline:
                outcomes.append(c.act(c.pick()))  # list.append is atomic
        finally:
            c.close()

    def never_reads() -> None:
        """Opens a long stream, never reads it, keeps the connection until well past the time limit."""
        c = Client(url, key, model, seed=99)
        body = b'{"model": "%s", "stream": true, "max_tokens": 1500, "messages": [{"role": "user", ' \
               b'"content": "Count from one to two thousand."}]}' % model.encode()
        try:
            while time.monotonic() + timeout_s + 10 < deadline:
                with c.raw("/chat/completions", body):
                    never_read[0] += 1
                    until = min(deadline, time.monotonic() + timeout_s + 10)
                    while (left := until - time.monotonic()) > 0:
                        time.sleep(min(left, 1.0))
        finally:
            c.close()

    threads = [threading.Thread(target=mixed, args=(i,)) for i in range(n)]
    threads.append(threading.Thread(target=never_reads))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes, never_read[0]


def client_process(args: tuple[str, str, str, int, float, float],
                   results: Queue[tuple[list[Outcome], int]]) -> None:
    """The clients' process (``multiprocessing``, spawned): runs them and sends back what came of it."""
    results.put(run_clients(*args))
