"""Secrets (the API key, the hub token, remote engines' keys) are written by one function, readable by this user
only from the first byte on, atomically."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hisho.api.keys import key_file, regenerate_key
from hisho.core import secrets
from hisho.core.atomic import TMP_MARK, write_private_text
from hisho.core.hub import token
from hisho.core.remote import endpoints
from hisho.core.tools import config as tools_config


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_private_text_is_user_only_even_over_a_leftover_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "secret"
    target.parent.mkdir()
    leftover = target.with_name(f"{target.name}{TMP_MARK}{os.getpid()}")
    leftover.write_text("old")
    leftover.chmod(0o644)  # a crash's leftover under the very temp name, readable by others
    write_private_text(target, "s3cret")
    assert target.read_text() == "s3cret"
    assert _mode(target) == 0o600
    assert not leftover.exists()


def test_every_secret_file_is_user_only(hisho_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "keyring_module", lambda: None)   # no OS keyring: the private-file path
    key = regenerate_key()
    assert key_file().read_text() == key and _mode(key_file()) == 0o600
    where = token.set_token("hf_example")
    assert _mode(Path(where)) == 0o600 and token.get_token() == "hf_example"
    where = endpoints.set_key("workstation", "sk-example")
    assert _mode(Path(where)) == 0o600 and endpoints.get_key("workstation") == "sk-example"
    where = tools_config.set_token("notes", "bearer-example")
    assert _mode(Path(where)) == 0o600 and tools_config.get_token("notes") == "bearer-example"
