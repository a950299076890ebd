"""``hisho bench agent --json``: a coding agent's session replayed through each wire format the API speaks (chat
completions, Responses, Messages), against ``hisho serve`` and, on the same file, upstream ``llama-server`` (it
serves all three), then both servers restarted and one more turn sent.

The session (``bench/agent_session.py``): a system prompt of about 16K tokens with 24 tool schemas, then
``turns`` turns, each a user step, a grammar-forced tool call (``tool_choice`` required, or Messages' ``any``), a
~400-token tool result and a short reply. Every request re-sends the whole conversation, as agents do. Each
protocol's session opens with its own tag, so no protocol finds another's prompt in a cache; the two servers
take turns request by request, so drift on a shared machine falls on both alike.

Rows ``{"system", "protocol", "turn", "step", "prompt_tokens", "cached_tokens", "ttft_s"}`` (step "call" or
"reply"; the turn after the restart is ``turns + 1``), then per system and protocol:
- ``tokens_read_total``: prompt tokens the server read (not from its cache) over the turns before the restart;
- ``tokens_new_total``: the tokens new in each request (its prompt less the previous request's prompt and reply:
  what a perfect cache reads), and ``read_over_new``, the first over the second;
- ``restart_ttft_s``: the first-token time of the turn after both servers restarted (Hisho restores from its disk
  prompt cache; llama-server keeps prompts in RAM only), and for Hisho ``restart_speedup`` (llama-server's over
  Hisho's) and ``identical_after_restart`` (Hisho's answer equals a fresh prefill's: the same request sent to a
  new ``hisho serve`` on an empty store).

The model: a true shape (``--model shape:llama-3.2-1b:Q4_0``, the default) written with a Hermes-style
``<tool_call>`` chat template, so both servers read and force tool calls. ``--quick``: a tiny session on a tiny
shape (a smoke run).
"""

from __future__ import annotations

import argparse
import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from hisho.api.launch import build_api
from hisho.bench import agent_session as session
from hisho.bench.agent_session import BODIES, Call, Session, Sizes
from hisho.bench.agent_wire import Answer, send
from hisho.bench.homes import temporary_home
from hisho.bench.servers import NOT_BUILT, Peer, llama_server_binary, llama_server_peer

log = logging.getLogger("hisho.bench")

KEY = "bench"
PROTOCOLS = ("chat", "responses", "messages")
SYSTEMS = ("hisho", "llama-server")
CONTEXT = {"full": 24576, "quick": 2048}

# A Hermes-style tool template (the ``<tool_call>`` family Qwen 2.5/3 and Hermes write), ChatML turns: the
# markers of SmolLM2's vocabulary, which the true shapes carry.
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n"
    "{% endif %}# Tools\n\nYou may call one or more functions. Their signatures:\n<tools>\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\nFor each call, return a JSON object "
    "with the function name and arguments within <tool_call></tool_call> tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'assistant' and not m.tool_calls) %}"
    "\n<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>"
    "{%- elif m.role == 'assistant' %}\n<|im_start|>assistant"
    "{%- if m.content %}\n{{ m.content }}{%- endif %}"
    "{%- for tc in m.tool_calls %}{%- set f = tc.function if tc.function else tc %}\n<tool_call>\n"
    "{\"name\": \"{{ f.name }}\", \"arguments\": {{ f.arguments if f.arguments is string else f.arguments | tojson }}"
    "}\n</tool_call>{%- endfor %}<|im_end|>"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}\n<|im_start|>user{%- endif %}"
    "\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{%- endif %}"
)


def model_file(name: str | None, quick: bool) -> Path:
    from hisho.bench.shapes import model_file as shape_file

    spec = (name or ("shape:llama-tiny:Q8_0" if quick else "shape:llama-3.2-1b:Q4_0")).removeprefix("shape:")
    shape, _, quant = spec.partition(":")
    return shape_file(shape, quant or "Q4_0", chat_template=TOOL_TEMPLATE)


class _Hisho:
    """``hisho serve`` in this process over the current HISHO_HOME; ``restart`` keeps the store."""

    def __init__(self, model: Path, n_ctx: int) -> None:
        self.model, self.n_ctx = model, n_ctx
        self.app: Any = None
        self.server: Any = None

    def start(self) -> _Hisho:
        self.app, self.server, _ = build_api(str(self.model), parallel=1, n_ctx=self.n_ctx, key=KEY)
        self.server.start()
        return self

    @property
    def url(self) -> str:
        return str(self.server.url).removesuffix("/v1")

    @property
    def model_id(self) -> str:
        return str(self.server.backend.model_id)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.app.close()
        self.server = self.app = None


def _step(client: httpx.Client, url: str, model: str, protocol: str, s: Session, *, call: bool,
          sizes: Sizes) -> Answer:
    body = BODIES[protocol](s, model, call=call, max_tokens=sizes.call_tokens if call else sizes.reply_tokens)
    answer = send(client, url, KEY, protocol, body)
    if answer.error:
        raise RuntimeError(f"{protocol} request failed: {answer.error}")
    return answer


def _row(system: str, protocol: str, turn: int, step: str, a: Answer) -> dict[str, Any]:
    return {"system": system, "protocol": protocol, "turn": turn, "step": step, "prompt_tokens": a.prompt_tokens,
            "cached_tokens": a.cached_tokens, "ttft_s": round(a.ttft_s, 3),
            "completion_tokens": a.completion_tokens}


def _turn(client: httpx.Client, target: tuple[str, str], protocol: str, s: Session, turn: int,
          sizes: Sizes) -> list[Answer]:
    """One turn on one server: the call (forced), its result, the reply. The call the server wrote goes into
    its own transcript (a call cut short is replaced by a well-formed one, which the next request then reads)."""
    url, model = target
    s.user(session.user_text(turn))
    called = _step(client, url, model, protocol, s, call=True, sizes=sizes)
    call = called.calls[0] if called.calls else Call(f"call_{turn}", s.tools[turn % len(s.tools)].name,
                                                     '{"file": "README.md", "mode": "quick"}')
    if not call.id:
        call = Call(f"call_{turn}", call.name, call.arguments)
    s.call(call)
    s.result(call.id, session.result_text(turn, sizes))
    replied = _step(client, url, model, protocol, s, call=False, sizes=sizes)
    s.assistant(replied.text)
    return [called, replied]


def _new_tokens(rows: list[dict[str, Any]]) -> int:
    total, before = 0, 0
    for r in rows:
        total += max(0, r["prompt_tokens"] - before)
        before = r["prompt_tokens"] + r["completion_tokens"]
    return total


def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    sizes = session.QUICK if quick else session.FULL
    n_ctx = CONTEXT["quick" if quick else "full"]
    path = model_file(args.model, quick)
    out: dict[str, Any] = {"model": path.name, "turns": sizes.turns, "tools": sizes.tools, "n_ctx": n_ctx}
    rows: list[dict[str, Any]] = []
    binary = llama_server_binary()
    systems = SYSTEMS if binary is not None else SYSTEMS[:1]
    if binary is None:
        out["llama_server"] = NOT_BUILT
    sessions = {(sy, p): session.make_session(sizes, tag=p) for sy in systems for p in PROTOCOLS}
    with temporary_home("hisho-bench-agent-") as home, ExitStack() as stack, httpx.Client() as client:
        hisho = _Hisho(path, n_ctx).start()
        stack.callback(hisho.stop)
        peer: Peer | None = None
        if binary is not None:
            peer = llama_server_peer(binary, path, Path(home) / "llama-server.log", parallel=1, ctx_size=n_ctx,
                                     extra=["--jinja"]).start()
            stack.callback(peer.stop)

        def target(system: str) -> tuple[str, str]:
            return (hisho.url, hisho.model_id) if system == "hisho" else (peer.url if peer else "", "model")

        for protocol in PROTOCOLS:
            for turn in range(1, sizes.turns + 1):
                for system in systems:   # in turns, so a drift of the machine's speed falls on both
                    called, replied = _turn(client, target(system), protocol, sessions[(system, protocol)], turn,
                                            sizes)
                    rows += [_row(system, protocol, turn, "call", called), _row(system, protocol, turn, "reply",
                                                                                 replied)]
                    log.info("agent bench: %s %s turn %d", system, protocol, turn)
        # The restart: both servers stopped and started again; one more turn each, a reply.
        hisho.stop()
        hisho.start()
        if peer is not None:
            peer.restart()
        after = sizes.turns + 1
        answers: dict[str, str] = {}
        for protocol in PROTOCOLS:
            for system in systems:
                s = sessions[(system, protocol)]
                s.user(session.user_text(after))
                a = _step(client, *target(system), protocol, s, call=False, sizes=sizes)
                rows.append(_row(system, protocol, after, "reply", a))
                if system == "hisho":
                    answers[protocol] = a.text
        hisho.stop()
        if peer is not None:
            peer.stop()
    # A fresh prefill of the same requests, on an empty store, for the answers to compare with.
    fresh: dict[str, str] = {}
    with temporary_home("hisho-bench-agent-fresh-"), httpx.Client() as client:
        server = _Hisho(path, n_ctx).start()
        try:
            for protocol in PROTOCOLS:
                fresh[protocol] = _step(client, server.url, server.model_id, protocol,
                                        sessions[("hisho", protocol)], call=False, sizes=sizes).text
        finally:
            server.stop()
    out["rows"] = rows
    out["summary"] = _summary(rows, systems, sizes.turns, answers, fresh)
    return out


def _summary(rows: list[dict[str, Any]], systems: tuple[str, ...], turns: int, answers: dict[str, str],
             fresh: dict[str, str]) -> list[dict[str, Any]]:
    summary = []
    for protocol in PROTOCOLS:
        restart: dict[str, float] = {}
        for system in systems:
            mine = [r for r in rows if r["system"] == system and r["protocol"] == protocol]
            before = [r for r in mine if r["turn"] <= turns]
            read = sum(r["prompt_tokens"] - r["cached_tokens"] for r in before)
            new = _new_tokens(before)
            last = [r for r in mine if r["turn"] == turns + 1]
            restart[system] = last[0]["ttft_s"] if last else 0.0
            entry: dict[str, Any] = {"system": system, "protocol": protocol, "tokens_read_total": read,
                                     "tokens_new_total": new, "read_over_new": round(read / max(new, 1), 3),
                                     "restart_ttft_s": restart[system],
                                     "restart_prompt_tokens": last[0]["prompt_tokens"] if last else 0,
                                     "restart_cached_tokens": last[0]["cached_tokens"] if last else 0}
            if system == "hisho":
                entry["identical_after_restart"] = answers.get(protocol) == fresh.get(protocol)
            summary.append(entry)
        if "llama-server" in restart:
            for entry in summary:
                if entry["protocol"] == protocol and entry["system"] == "hisho":
                    entry["restart_speedup"] = round(restart["llama-server"] / max(restart["hisho"], 1e-9), 2)
    return summary
