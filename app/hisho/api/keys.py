"""The API key: generated once, kept in ``config_dir()/api_key`` readable by this user only (mode 0600, like
the hub token's file), regenerable from Settings → API. Never logged."""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from hisho.core import paths

log = logging.getLogger("hisho.api")


def key_file() -> Path:
    return paths.config_dir() / "api_key"


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def regenerate_key() -> str:
    """A new random key (the old one stops working at the server's next start)."""
    key = "hisho-" + secrets.token_urlsafe(24)
    _write_private(key_file(), key)
    log.info("new API key stored in %s (readable by this user only)", key_file())
    return key


def api_key() -> str:
    """The stored key, made on first use."""
    try:
        key = key_file().read_text(encoding="utf-8").strip()
    except OSError:
        key = ""
    return key or regenerate_key()
