"""Secrets the app keeps for the person (the Hugging Face token, remote engines' API keys, MCP servers' bearer
tokens): in the OS keyring when a real backend is usable, otherwise in a file only this user can read (mode
0600). Never logged, never shown back in full.

Rules of use: ``read(account, file)``, ``write(account, value, file)`` (an empty value removes it) and
``forget(account, file)``; ``account`` names the secret in the keyring (``"engine:NAME"``), ``file`` is where it
lives without one. ``HISHO_NO_KEYRING=1`` keeps everything in files (tests).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hisho.core.atomic import write_private_text

log = logging.getLogger("hisho.secrets")

SERVICE = "hisho"


def keyring_module() -> Any | None:
    """The keyring module when a real backend is configured (not the 'fail' or 'null' ones)."""
    if os.environ.get("HISHO_NO_KEYRING"):
        return None
    try:
        import keyring
        from keyring.backends import fail
    except Exception:  # not installed, or a backend that fails to import: use the file
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:
        return None
    name = type(backend).__module__
    if isinstance(backend, fail.Keyring) or "null" in name or "chainer" in name and not backend.backends:
        return None
    return keyring


def read(account: str, file: Path) -> str:
    """The secret, or "" when none is stored."""
    kr = keyring_module()
    if kr is not None:
        try:
            value = kr.get_password(SERVICE, account)
            if value:
                return str(value)
        except Exception as exc:
            log.warning("keyring unreadable (%s); trying the file", type(exc).__name__)
    try:
        return file.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def forget(account: str, file: Path) -> None:
    kr = keyring_module()
    if kr is not None:
        try:
            kr.delete_password(SERVICE, account)
        except Exception:  # absent is fine
            pass
    file.unlink(missing_ok=True)


def write(account: str, value: str, file: Path) -> str:
    """Store ``value`` (stripped; empty: forget it); returns where it went: "keyring", the file's path, or ""."""
    value = value.strip()
    if not value:
        forget(account, file)
        return ""
    kr = keyring_module()
    if kr is not None:
        try:
            kr.set_password(SERVICE, account, value)
            file.unlink(missing_ok=True)
            log.info("%s stored in the OS keyring", account)
            return "keyring"
        except Exception as exc:
            log.warning("keyring refused %s (%s); using a private file", account, type(exc).__name__)
    file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private_text(file, value)
    log.info("%s stored in %s (readable by this user only)", account, file)
    return str(file)
