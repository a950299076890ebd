"""The ready snippets Settings → API offers each client: filled with this server's address, key and model, and
valid in the format the client reads (TOML for Codex, JSON for OpenCode)."""

from __future__ import annotations

import json

import pytest

from hisho.api.clients import bases, snippets

ROOT, KEY, MODEL = "http://127.0.0.1:8765", "sk-local-123", "smollm2-135m-instruct-q4_1"


def by_client() -> dict[str, str]:
    return {s.client: s.text for s in snippets(ROOT, KEY, MODEL)}


def test_base_addresses_per_wire_format() -> None:
    assert dict(bases(ROOT)) == {"OpenAI (chat, Responses)": ROOT + "/v1", "Anthropic (Messages)": ROOT}


def test_claude_code_points_at_the_root_with_the_key_and_model() -> None:
    text = by_client()["Claude Code"]
    env = dict(line.removeprefix("export ").split("=", 1) for line in text.splitlines() if line)
    assert env["ANTHROPIC_BASE_URL"] == ROOT      # the SDK adds /v1/messages itself
    assert env["ANTHROPIC_AUTH_TOKEN"] == KEY and env["ANTHROPIC_MODEL"] == MODEL


def test_codex_config_is_toml_speaking_responses() -> None:
    tomllib = pytest.importorskip("tomllib")   # Python 3.11 on
    config = tomllib.loads(by_client()["Codex"])
    provider = config["model_providers"][config["model_provider"]]
    assert config["model"] == MODEL
    assert provider["base_url"] == ROOT + "/v1" and provider["wire_api"] == "responses"
    assert f"export {provider['env_key']}={KEY}" in by_client()["Codex"]


def test_opencode_config_is_json_with_the_model() -> None:
    config = json.loads(by_client()["OpenCode"])
    hisho = config["provider"]["hisho"]
    assert hisho["options"] == {"baseURL": ROOT + "/v1", "apiKey": KEY} and MODEL in hisho["models"]


def test_every_snippet_names_where_it_goes_and_carries_the_key() -> None:
    for s in snippets(ROOT, KEY, MODEL):
        assert s.where and KEY in s.text and (ROOT in s.text), s.client
