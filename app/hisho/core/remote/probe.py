"""What is behind an OpenAI-compatible address: server kind, version, models, context size, round-trip time,
and which of Hisho's resume helpers it offers. No Qt.

Rules of use:
- ``probe(endpoint)`` is "Test connection": it never raises, it returns a ``ServerInfo`` whose ``error`` is the
  one line to show when something is wrong.
- Kinds: ``llama.cpp`` (llama-server: ``/props`` with ``build_info``, models ``owned_by: llamacpp``),
  ``llama-cpp-python`` (``owned_by: me``), ``vllm`` (``/version``, ``owned_by: vllm``), ``sglang``
  (``owned_by: sglang``), ``openai`` (anything else that lists models).
- The context size comes from the server where it tells (llama-server ``/props``
  ``default_generation_settings.n_ctx`` or ``/v1/models`` ``meta.n_ctx``, vLLM ``max_model_len``); 0 means
  unknown (the caller uses the user's setting).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from hisho.core.remote.http import Endpoint, RemoteError, call
from hisho.core.remote.pool import shown

log = logging.getLogger("hisho.remote")


@dataclass
class ServerInfo:
    kind: str = ""
    version: str = ""
    models: list[str] = field(default_factory=list)
    n_ctx: int = 0
    rtt_ms: float = 0.0
    slots: int = 0                 # llama-server's parallel slots (0: unknown / not llama-server)
    slot_save: bool = False        # llama-server started with --slot-save-path
    chat_template: str = ""
    proxy: str = ""                # the proxy the requests went through ('' for directly), shown without a password
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def summary(self) -> str:
        if self.error:
            return self.error
        ctx = f", context {self.n_ctx}" if self.n_ctx else ""
        resume = ", slot save/restore" if self.slot_save else ""
        route = f" through the proxy {self.proxy}" if self.proxy else ""
        return (f"{self.kind} {self.version}".strip() + f" — {len(self.models)} model(s): "
                f"{', '.join(self.models[:4])}{ctx}{resume}; round trip {self.rtt_ms:.0f} ms{route}")


def _kind_of(models: list[dict[str, Any]], props: dict[str, Any] | None) -> str:
    owners = {str(m.get("owned_by", "")).lower() for m in models}
    if props is not None and "build_info" in props or "llamacpp" in owners:
        return "llama.cpp"
    if "vllm" in owners:
        return "vllm"
    if "sglang" in owners:
        return "sglang"
    if "me" in owners:
        return "llama-cpp-python"
    return "openai"


def probe(ep: Endpoint, timeout: float = 10.0) -> ServerInfo:
    info = ServerInfo()
    try:
        proxy = ep.proxy
        info.proxy = shown(proxy) if proxy else ""
        started = time.perf_counter()
        listed = call(ep, "GET", "/v1/models", timeout=timeout)
        info.rtt_ms = (time.perf_counter() - started) * 1000
        data = listed.get("data") if isinstance(listed, dict) else None
        if not isinstance(data, list):
            raise RemoteError(f"{ep.name} ({ep.root}) is not an OpenAI-compatible server (no model list)")
        models = [m for m in data if isinstance(m, dict) and m.get("id")]
        info.models = [str(m["id"]) for m in models]
        props = _optional(ep, "/props", timeout)
        info.kind = _kind_of(models, props)
        if props is not None and info.kind == "llama.cpp":
            info.version = str(props.get("build_info", ""))
            info.n_ctx = int((props.get("default_generation_settings") or {}).get("n_ctx", 0) or 0)
            info.slots = int(props.get("total_slots", 0) or 0)
            info.chat_template = str(props.get("chat_template", ""))
            info.slot_save = _slot_save_enabled(ep, timeout)
        elif info.kind == "vllm":
            ver = _optional(ep, "/version", timeout)
            info.version = str((ver or {}).get("version", ""))
        for m in models:
            meta: dict[str, Any] = m["meta"] if isinstance(m.get("meta"), dict) else {}
            n = int(meta.get("n_ctx", 0) or m.get("max_model_len", 0) or 0)  # llama-server / vLLM
            info.n_ctx = info.n_ctx or n
    except RemoteError as exc:
        info.error = str(exc)
    log.info("probe %s (%s): %s", ep.name, ep.root, info.summary())
    return info


def _optional(ep: Endpoint, path: str, timeout: float) -> dict[str, Any] | None:
    try:
        got = call(ep, "GET", path, timeout=timeout)
    except RemoteError:
        return None
    return got if isinstance(got, dict) else None


def _slot_save_enabled(ep: Endpoint, timeout: float) -> bool:
    """llama-server answers a slot action with "not supported" unless started with --slot-save-path; an
    unknown action is refused *after* that check, so this changes nothing on the server."""
    try:
        call(ep, "POST", "/slots/0?action=hisho-probe", {}, timeout=timeout)
    except RemoteError as exc:
        return "--slot-save-path" not in str(exc) and "not support" not in str(exc).lower()
    return True
