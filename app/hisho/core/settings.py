"""Settings, declared once: name, type, default, bounds. Stored as JSON under the config dir.

Each stored file carries ``schema_version``. Upgrade steps in ``_UPGRADES`` turn version N into N+1; a file
from a newer Hisho is read as far as we understand it and never written back over (we would lose its keys).
Unknown keys are kept so a downgrade-then-upgrade round trip loses nothing.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.atomic import write_text_atomic
from hisho.core.units import GIB

log = logging.getLogger("hisho.settings")

SCHEMA_VERSION = 2  # 2: model_choices (context and KV type per model)


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], Any] | None = None   # for structured values (lists): returns the checked copy

    def coerce(self, value: Any) -> Any:
        """Return ``value`` as this setting's type, or raise ValueError with a message for the user."""
        if self.check is not None:
            return self.check(value)
        if self.type is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                return value.lower() in ("1", "true", "yes", "on")
            raise ValueError(f"{self.name}: expected true or false, got {value!r}")
        try:
            result = self.type(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: expected {self.type.__name__}, got {value!r}") from None
        if self.minimum is not None and result < self.minimum:
            raise ValueError(f"{self.name}: {result} is below the minimum {self.minimum}")
        if self.maximum is not None and result > self.maximum:
            raise ValueError(f"{self.name}: {result} is above the maximum {self.maximum}")
        if self.choices is not None and result not in self.choices:
            raise ValueError(f"{self.name}: {result!r} is not one of {', '.join(self.choices)}")
        return result


PRESET_NAME_MAX = 60


def check_presets(value: Any) -> list[dict[str, str]]:
    """System-prompt presets: a list of {"name", "prompt"}; names non-empty, at most PRESET_NAME_MAX characters
    and unique ignoring case. Returns a clean copy or raises ValueError saying which entry is wrong."""
    if not isinstance(value, list):
        raise ValueError(f"system_prompt_presets: expected a list, got {type(value).__name__}")
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, entry in enumerate(value, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) \
                or not isinstance(entry.get("prompt", ""), str):
            raise ValueError(f"system_prompt_presets: entry {i} is not a name and a prompt")
        name = " ".join(entry["name"].split())
        if not name:
            raise ValueError(f"system_prompt_presets: entry {i} has no name")
        if len(name) > PRESET_NAME_MAX:
            raise ValueError(f"system_prompt_presets: the name {name[:20]!r}… is longer than {PRESET_NAME_MAX} "
                             "characters")
        if name.casefold() in seen:
            raise ValueError(f"system_prompt_presets: there is already a preset named {name!r}")
        seen.add(name.casefold())
        out.append({"name": name, "prompt": str(entry.get("prompt", "")).strip()})
    return out


def _keys(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{name}: expected a list of names")
    return sorted(set(value))


KV_TYPES = ("f16", "q8_0", "q4_0")
MAX_CTX = 1 << 20


def check_model_choices(value: Any) -> dict[str, dict[str, Any]]:
    """Per-model choices: {model file path: {"n_ctx": int, "kv_type": str}}, either key optional. Returns a
    clean copy or raises ValueError saying which entry is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"model_choices: expected an object, got {type(value).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for model, choice in value.items():
        if not isinstance(model, str) or not model or not isinstance(choice, dict):
            raise ValueError(f"model_choices: entry {model!r} is not a model and its choices")
        clean: dict[str, Any] = {}
        if "n_ctx" in choice:
            n = choice["n_ctx"]
            if isinstance(n, bool) or not isinstance(n, int) or not 256 <= n <= MAX_CTX:
                raise ValueError(f"model_choices: {model}: context {n!r} is not 256 to {MAX_CTX} tokens")
            clean["n_ctx"] = n
        if "kv_type" in choice:
            if choice["kv_type"] not in KV_TYPES:
                raise ValueError(f"model_choices: {model}: KV type {choice['kv_type']!r} is not one of "
                                 f"{', '.join(KV_TYPES)}")
            clean["kv_type"] = choice["kv_type"]
        out[model] = clean
    return out


DECLARED: tuple[Setting, ...] = (
    Setting("default_model", str, "", "Model store name used when none is given ('' = bundled default)."),
    Setting("last_model", str, "", "The model the window loaded last: the next window start loads it while it is "
                                   "still in the store ('' = default_model)."),
    Setting("n_ctx", int, 4096, "Context length in tokens for chats, for models without their own "
            "(model_choices).", 256, MAX_CTX),
    Setting("n_threads", int, 0, "CPU threads (0 = automatic: up to the physical cores, fewer while "
            "other programs keep them busy; docs/threads.md).", 0, 512),
    Setting("n_batch", int, 512, "Prompt tokens per llama_decode call.", 32, 8192),
    Setting("flash_attn", bool, True, "Allow flash attention (a quantized V cache needs it); with an f16 cache "
            "on the CPU the plan turns it off where that is faster and costs little memory."),
    Setting("kv_type", str, "f16", "KV cache element type.", choices=KV_TYPES),
    Setting("model_choices", dict, {}, "Context and KV type chosen for one model (the Memory planner's \"Use "
            "this context\"), by model file: {path: {\"n_ctx\": ..., \"kv_type\": ...}}; a model without one "
            "uses n_ctx (capped at what it was trained on) and kv_type.", check=check_model_choices),
    Setting("n_gpu_layers", int, -1, "Layers to offload (-1 = what the plan says).", -1, 1000),
    Setting("min_ctx", int, 4096, "Smallest context the planner may choose.", 256, 1 << 20),
    Setting("temperature", float, 0.7, "Default sampling temperature.", 0.0, 5.0),
    Setting("top_p", float, 0.95, "Default nucleus sampling.", 0.0, 1.0),
    Setting("top_k", int, 40, "Default top-k (0 = off).", 0, 1000),
    Setting("repeat_penalty", float, 1.1, "Default repeat penalty.", 0.5, 3.0),
    Setting("max_tokens", int, 1024, "Default reply length limit.", 1, 1 << 20),
    Setting("kv_disk_budget_bytes", int, 10 * GIB, "Disk space for KV snapshots.", 0, 1 << 50),
    Setting("theme", str, "system", "Window theme.", choices=("system", "light", "dark")),
    Setting("default_system_prompt", str, "", "System prompt every new chat starts with ('' = none)."),
    Setting("system_prompt_presets", list, [], "Named system prompts offered in Chat settings: a list of "
            "{\"name\": ..., \"prompt\": ...}.", check=check_presets),
    Setting("api_enabled", bool, False, "Serve the OpenAI-compatible API while the window is open (docs/api.md)."),
    Setting("api_port", int, 8765, "Loopback port of the window's API.", 1024, 65535),
    Setting("api_cors_origins", str, "", "Web origins allowed to call the API, comma-separated ('' = none)."),
    # What one API request may cost (docs/api.md, "Limits"): each refusal is an OpenAI-shaped error.
    Setting("api_max_body_mb", int, 8, "Largest API request body in MiB; a bigger one is refused (413) before "
            "it is read.", 1, 1024),
    Setting("api_max_prompt_tokens", int, 0, "Longest API prompt in tokens (0 = what one sequence's context "
            "holds); a prompt with more than 8 characters per allowed token is refused before it is tokenized.",
            0, 1 << 20),
    Setting("api_request_timeout_s", int, 600, "Longest an API request may run, queue and prefill included; "
            "then its reply is cancelled (504).", 5, 86400),
    Setting("api_max_queued", int, 16, "API requests a key may have waiting for a free sequence; more are "
            "refused (429 with Retry-After).", 0, 1024),
    Setting("api_max_wait_s", int, 30, "Longest an API request waits while the engine works on something sent "
            "before it (a summary, a reply in the window, a model load); then it is refused (503 with "
            "Retry-After).", 1, 3600),
    # Tools in the chat (docs/tools.md): the MCP servers themselves are in mcp.json beside this file.
    Setting("tool_calls_per_message", int, 10, "Most tool calls one reply may make; a reply asking for more stops "
            "and says so.", 1, 100),
    Setting("tool_timeout_s", int, 60, "Longest one tool call may run; then it fails and its server is started "
            "again on the next call.", 1, 3600),
    Setting("tools_always_allowed", list, [], "Tools the person allowed always (\"server/tool\"); any other call "
            "is asked about.", check=lambda v: _keys(v, "tools_always_allowed")),
    Setting("demo_card_dismissed", bool, False, "The first-start card (the bundled model is a demo; a model that "
            "fits) was dismissed with Not now."),
)

_BY_NAME = {s.name: s for s in DECLARED}


def declared(name: str) -> Setting:
    """A setting's declaration (its bounds and doc, for a form that edits it)."""
    return _BY_NAME[name]

def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had one context and KV type for every model; from 2 they are the default of models without
    their own choice, and each model's own starts empty (which model the old values were chosen for is not
    known)."""
    return {**raw, "model_choices": raw.get("model_choices", {}), "schema_version": 2}


# version N -> N+1. Each takes the raw dict and returns the upgraded one.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


class Settings:
    """Typed access to the declared settings; ``save()`` writes atomically."""

    def __init__(self, values: dict[str, Any] | None = None, *, path: Path | None = None,
                 read_only: bool = False) -> None:
        self._path = path
        self._read_only = read_only
        self._extra: dict[str, Any] = {}
        self._values: dict[str, Any] = {s.name: copy.deepcopy(s.default) for s in DECLARED}
        for key, value in (values or {}).items():
            if key == "schema_version":
                continue
            setting = _BY_NAME.get(key)
            if setting is None:
                self._extra[key] = value
                continue
            try:
                self._values[key] = setting.coerce(value)
            except ValueError as exc:
                log.warning("ignoring stored setting: %s", exc)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def get(self, name: str) -> Any:
        return self._values[name]

    def set(self, name: str, value: Any) -> None:
        setting = _BY_NAME.get(name)
        if setting is None:
            raise KeyError(f"unknown setting {name!r}")
        self._values[name] = setting.coerce(value)

    def choice_for(self, model_path: str | Path) -> dict[str, Any]:
        """The context and KV type chosen for this model file ({} if none): ``n_ctx``, ``kv_type``."""
        return dict(self._values["model_choices"].get(model_key(model_path), {}))

    def choose(self, model_path: str | Path, *, n_ctx: int, kv_type: str) -> None:
        """Keep ``n_ctx`` and ``kv_type`` for this model only (other models keep theirs)."""
        choices = dict(self._values["model_choices"])
        choices[model_key(model_path)] = {"n_ctx": n_ctx, "kv_type": kv_type}
        self.set("model_choices", choices)

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **self._extra, **self._values}

    def save(self) -> None:
        if self._read_only:
            log.warning("settings file is from a newer Hisho; not overwriting it")
            return
        path = self._path or paths.settings_path()
        write_text_atomic(path, json.dumps(self.as_dict(), indent=2, sort_keys=True))


def model_key(model_path: str | Path) -> str:
    """How ``model_choices`` names a model: its file's absolute path (a store entry keeps its path)."""
    return str(Path(model_path).expanduser().absolute())


def upgrade(raw: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Apply upgrade steps. Returns (values, read_only) where read_only means 'from a newer version'."""
    version = int(raw.get("schema_version", 1))
    if version > SCHEMA_VERSION:
        return raw, True
    while version < SCHEMA_VERSION:
        raw = _UPGRADES[version](raw)
        version += 1
    return raw, False


def load(path: Path | None = None) -> Settings:
    """Read settings; a missing or unreadable file gives defaults (and a log line), never an exception."""
    path = path or paths.settings_path()
    if not path.exists():
        return Settings(path=path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        log.warning("settings file %s unreadable (%s); using defaults", path, exc)
        return Settings(path=path)
    values, read_only = upgrade(raw)
    return Settings(values, path=path, read_only=read_only)
