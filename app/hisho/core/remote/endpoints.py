"""The user's remote engines (Settings → Engines): names, addresses, TLS and proxy choice in
``config_dir()/engines.json``; API keys stored like the Hugging Face token — the OS keyring when one is usable,
else a file only the user can read (``config_dir()/engine-keys/<name>``, mode 0600). No Qt.

Rules of use:
- ``load_endpoints()`` never raises: an unreadable file gives an empty list and a log line.
- Keys are read only when an ``Endpoint`` is made for a request (``with_key``); they are never written to
  ``engines.json``, a log line or an error message.
- ``use_proxy`` is stored only when the user set it against what the address suggests (``Endpoint.proxied``):
  absent, a LAN address goes direct and any other through the system proxy.
- ``LOCAL`` is the name of the built-in engine; a remote one may not take it.
- The engine (and model) last chosen in the chat header's picker is kept in the same file (``"chosen"``), so the
  window starts on it after a restart (``load_choice`` / ``save_choice``). A choice naming an engine that is no
  longer configured reads as ``LOCAL``.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from hisho.core import paths, secrets
from hisho.core.atomic import write_text_atomic
from hisho.core.remote.http import Endpoint

log = logging.getLogger("hisho.remote")

LOCAL = "local"
SERVICE = "hisho"


def engines_file() -> Path:
    return paths.config_dir() / "engines.json"


def _key_file(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return paths.config_dir() / "engine-keys" / safe


def check(name: str, base_url: str, existing: list[Endpoint], replacing: str | None = None) -> str:
    """'' when ``name``/``base_url`` may be saved, else the one line saying why not."""
    name = name.strip()
    if not name:
        return "give the engine a name"
    if name.lower() == LOCAL:
        return f"{LOCAL!r} is the built-in engine's name"
    if any(e.name == name and e.name != replacing for e in existing):
        return f"there is already an engine named {name!r}"
    if not re.match(r"^https?://[^/\s]+", base_url.strip()):
        return "the address must start with http:// or https:// (for example http://workstation:8080)"
    return ""


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("engines file %s unreadable (%s); no remote engines", path, exc)
        return {}
    return raw if isinstance(raw, dict) else {}


def _write(data: dict[str, Any], path: Path) -> None:
    write_text_atomic(path, json.dumps({**data, "schema_version": 1}, indent=2))


def load_endpoints(path: Path | None = None) -> list[Endpoint]:
    out = []
    for item in _read(path or engines_file()).get("engines", []):
        if isinstance(item, dict) and item.get("name") and item.get("base_url"):
            proxy = item.get("use_proxy")
            out.append(Endpoint(str(item["name"]), str(item["base_url"]), bool(item.get("verify_tls", True)),
                                use_proxy=proxy if isinstance(proxy, bool) else None))
    return out


def save_endpoints(endpoints: list[Endpoint], path: Path | None = None) -> None:
    path = path or engines_file()
    data = _read(path)
    data["engines"] = [{"name": e.name, "base_url": e.base_url, "verify_tls": e.verify_tls,
                        **({"use_proxy": e.use_proxy} if e.use_proxy is not None else {})} for e in endpoints]
    _write(data, path)


def load_choice(path: Path | None = None) -> tuple[str, str]:
    """(engine name, model) chosen last in the model picker; (LOCAL, "") when none was, or when that engine has
    since been removed in Settings → Engines."""
    path = path or engines_file()
    chosen = _read(path).get("chosen")
    if not isinstance(chosen, dict):
        return LOCAL, ""
    name, model = str(chosen.get("engine") or LOCAL), str(chosen.get("model") or "")
    if name == LOCAL or not model or name not in {e.name for e in load_endpoints(path)}:
        return LOCAL, ""
    return name, model


def save_choice(engine: str, model: str = "", path: Path | None = None) -> None:
    """Remember the engine that answers (``LOCAL``: this computer, with the default or last loaded model)."""
    path = path or engines_file()
    data = _read(path)
    data["chosen"] = {"engine": engine, "model": model if engine != LOCAL else ""}
    _write(data, path)


def get_key(name: str) -> str:
    return secrets.read(f"engine:{name}", _key_file(name))


def set_key(name: str, key: str) -> str:
    """Store (or, with an empty ``key``, remove) an engine's API key; returns where it went."""
    return secrets.write(f"engine:{name}", key, _key_file(name))


def with_key(ep: Endpoint) -> Endpoint:
    """``ep`` carrying its stored API key (for a request; never keep it around longer)."""
    return ep.with_(api_key=get_key(ep.name))


def masked(key: str) -> str:
    return "none" if not key else f"…{key[-4:]}"
