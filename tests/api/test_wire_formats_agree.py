"""One request model under three wire formats: the same agent session (system prompt, tools, user turns, calls,
tool results, replies) sent as chat completions, Responses and Messages becomes the same job — the same messages
in the template's form and the same tools — so each protocol renders the same prompt, and the disk prompt cache
finds one protocol's saved prefix for another."""

from __future__ import annotations

import json
from typing import Any

from hisho.api import messages_request, responses_input
from hisho.api.shapes import Job, parse_chat
from hisho.bench import agent_session as session
from hisho.bench.agent_session import Call

DEFAULTS = {"temperature": 0.7, "top_p": 0.95, "top_k": 40}


def transcript() -> session.Session:
    s = session.make_session(session.QUICK, "agree")
    for turn in (1, 2):
        s.user(session.user_text(turn))
        s.call(Call(f"call_{turn}", s.tools[turn].name, json.dumps({"file": "README.md", "mode": "quick"})))
        s.result(f"call_{turn}", session.result_text(turn, session.QUICK))
        s.assistant(f"Found it in step {turn}.")
    s.user(session.user_text(3))
    return s


def jobs(s: session.Session) -> dict[str, Job]:
    return {
        "chat": parse_chat(session.chat_body(s, "m", call=True, max_tokens=64), DEFAULTS, 256),
        "responses": responses_input.parse(session.responses_body(s, "m", call=True, max_tokens=64), None,
                                           DEFAULTS, 256).job,
        "messages": messages_request.parse(session.messages_body(s, "m", call=True, max_tokens=64), DEFAULTS, 256),
    }


def comparable(job: Job) -> list[dict[str, Any]]:
    """The messages as the template reads them, call arguments as parsed JSON (their spacing is the client's)."""
    assert job.messages is not None
    out = []
    for m in job.messages:
        m = {k: v for k, v in m.items() if v not in (None, "") or k == "content"}
        if m.get("tool_calls"):
            m["tool_calls"] = [{"id": c["id"], "name": c["function"]["name"],
                                "arguments": json.loads(c["function"]["arguments"])} for c in m["tool_calls"]]
        out.append(m)
    return out


def test_the_three_wire_formats_make_one_job() -> None:
    got = jobs(transcript())
    chat = comparable(got["chat"])
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant",
                                         "tool", "assistant", "user"]
    for protocol in ("responses", "messages"):
        assert comparable(got[protocol]) == chat, protocol
        assert got[protocol].extras.tools == got["chat"].extras.tools, protocol
        assert got[protocol].extras.tool_choice == got["chat"].extras.tool_choice == "required", protocol
    assert {job.wire for job in got.values()} == {"chat completions", "responses", "messages"}
