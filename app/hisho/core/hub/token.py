"""The Hugging Face token for gated repositories: in the OS keyring when one is usable, otherwise in a file
only the user can read (``config_dir()/hf_token``, mode 0600). Never logged, never shown back in full.

Without a stored token, huggingface_hub's own (``HF_TOKEN``, ``hf auth login``) is used.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.atomic import write_private_text

log = logging.getLogger("hisho.hub")

SERVICE, ACCOUNT = "hisho", "huggingface-token"


def _keyring() -> Any | None:
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


def token_file() -> Path:
    return paths.config_dir() / "hf_token"


def get_token() -> str | None:
    kr = _keyring()
    if kr is not None:
        try:
            value = kr.get_password(SERVICE, ACCOUNT)
            if value:
                return str(value)
        except Exception as exc:
            log.warning("keyring unreadable (%s); trying the token file", type(exc).__name__)
    try:
        value = token_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return value or None


def set_token(token: str) -> str:
    """Store ``token``; returns where ("keyring" or the file's path)."""
    token = token.strip()
    if not token:
        raise ValueError("empty token")
    kr = _keyring()
    if kr is not None:
        try:
            kr.set_password(SERVICE, ACCOUNT, token)
            token_file().unlink(missing_ok=True)
            log.info("Hugging Face token stored in the OS keyring")
            return "keyring"
        except Exception as exc:
            log.warning("keyring refused the token (%s); using a private file", type(exc).__name__)
    path = token_file()
    write_private_text(path, token)
    log.info("Hugging Face token stored in %s (readable by this user only)", path)
    return str(path)


def clear_token() -> None:
    kr = _keyring()
    if kr is not None:
        try:
            kr.delete_password(SERVICE, ACCOUNT)
        except Exception:  # absent is fine
            pass
    token_file().unlink(missing_ok=True)


def masked(token: str | None) -> str:
    return "none" if not token else f"hf_…{token[-4:]}"
