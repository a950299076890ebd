"""What a person pastes to point a coding agent or an editor at the local API: the base addresses of each wire
format and one ready snippet per client, filled with this server's address, key and model. Text only, no I/O.

Rules of use: ``bases(root)`` and ``snippets(root, key, model)`` take the server's root (``http://127.0.0.1:PORT``,
no ``/v1``). Each snippet names the file or the shell it goes in (``Snippet.where``); Settings → API shows them
with a Copy button, and docs/api.md lists the same clients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Snippet:
    client: str      # who reads it: "Claude Code", "Codex", ...
    where: str       # where it goes: "shell", "~/.codex/config.toml", ...
    text: str


def bases(root: str) -> list[tuple[str, str]]:
    """(what, base address) for each wire format: OpenAI's clients add ``/chat/completions`` or ``/responses``
    to theirs; Anthropic's add ``/v1/messages`` to the root."""
    return [("OpenAI (chat, Responses)", f"{root}/v1"), ("Anthropic (Messages)", root)]


def snippets(root: str, key: str, model: str) -> list[Snippet]:
    v1 = f"{root}/v1"
    opencode = {"$schema": "https://opencode.ai/config.json", "provider": {"hisho": {
        "npm": "@ai-sdk/openai-compatible", "name": "Hisho",
        "options": {"baseURL": v1, "apiKey": key}, "models": {model: {"name": model}}}}}
    return [
        Snippet("Claude Code", "shell, before starting claude",
                f"export ANTHROPIC_BASE_URL={root}\n"
                f"export ANTHROPIC_AUTH_TOKEN={key}\n"
                f"export ANTHROPIC_MODEL={model}\n"
                f"export ANTHROPIC_SMALL_FAST_MODEL={model}\n"),
        Snippet("Codex", "~/.codex/config.toml",
                f'model = "{model}"\nmodel_provider = "hisho"\n\n'
                "[model_providers.hisho]\n"
                'name = "Hisho"\n'
                f'base_url = "{v1}"\n'
                'env_key = "HISHO_API_KEY"\n'
                'wire_api = "responses"\n\n'
                f"# and in the shell: export HISHO_API_KEY={key}\n"),
        Snippet("OpenAI Agents SDK", "Python",
                "from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled\n"
                "from openai import AsyncOpenAI\n\n"
                f'set_default_openai_client(AsyncOpenAI(base_url="{v1}", api_key="{key}"))\n'
                "set_tracing_disabled(True)  # traces go to OpenAI's servers otherwise\n"
                f'agent = Agent(name="Assistant", model="{model}")\n'),
        Snippet("Continue", "~/.continue/config.yaml",
                "models:\n"
                "  - name: Hisho\n"
                "    provider: openai\n"
                f"    model: {model}\n"
                f"    apiBase: {v1}\n"
                f"    apiKey: {key}\n"),
        Snippet("OpenCode", "opencode.json", json.dumps(opencode, indent=2) + "\n"),
        Snippet("curl", "shell",
                f"curl {v1}/chat/completions -H 'Authorization: Bearer {key}' "
                "-H 'Content-Type: application/json' \\\n"
                f"  -d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'\n"),
    ]
