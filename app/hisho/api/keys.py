"""The API key: generated once, kept in ``config_dir()/api_key`` readable by this user only (mode 0600, like
the hub token's file), regenerable from Settings → API. Never logged."""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

from hisho.core import paths
from hisho.core.atomic import write_private_text

log = logging.getLogger("hisho.api")


def key_file() -> Path:
    return paths.config_dir() / "api_key"


def regenerate_key() -> str:
    """A new random key (the old one stops working at the server's next start)."""
    key = "hisho-" + secrets.token_urlsafe(24)
    write_private_text(key_file(), key)
    log.info("new API key stored in %s (readable by this user only)", key_file())
    return key


def api_key() -> str:
    """The stored key, made on first use."""
    try:
        key = key_file().read_text(encoding="utf-8").strip()
    except OSError:
        key = ""
    return key or regenerate_key()
