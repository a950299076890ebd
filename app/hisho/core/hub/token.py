"""The Hugging Face token for gated repositories: in the OS keyring when one is usable, otherwise in a file
only the user can read (``config_dir()/hf_token``, mode 0600). Never logged, never shown back in full.

Without a stored token, huggingface_hub's own (``HF_TOKEN``, ``hf auth login``) is used.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hisho.core import paths, secrets

log = logging.getLogger("hisho.hub")

SERVICE, ACCOUNT = secrets.SERVICE, "huggingface-token"


def token_file() -> Path:
    return paths.config_dir() / "hf_token"


def get_token() -> str | None:
    return secrets.read(ACCOUNT, token_file()) or None


def set_token(token: str) -> str:
    """Store ``token``; returns where ("keyring" or the file's path)."""
    if not token.strip():
        raise ValueError("empty token")
    return secrets.write(ACCOUNT, token, token_file())


def clear_token() -> None:
    secrets.forget(ACCOUNT, token_file())


def masked(token: str | None) -> str:
    return "none" if not token else f"hf_…{token[-4:]}"
