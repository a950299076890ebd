"""Nobody else on the machine can read the user's data: files 600 and folders 700, for what
a session creates (database, WAL, logs, engine log) and for what an older version left readable."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path


def readable_by_others(home: Path) -> list[str]:
    out = []
    for folder, _dirs, files in os.walk(home):
        for name in [folder, *(os.path.join(folder, f) for f in files)]:
            if stat.S_IMODE(os.lstat(name).st_mode) & 0o077:
                out.append(os.path.relpath(name, home))
    return out


def test_data_is_private_and_old_modes_are_fixed(hisho_home: Path) -> None:
    old_umask = os.umask(0o022)  # what a desktop session usually has
    try:
        for sub in ("data/kv/0123456789abcdef", "logs", "config", "cache"):
            (hisho_home / sub).mkdir(parents=True, exist_ok=True)
            (hisho_home / sub).chmod(0o755)
        left = hisho_home / "data/kv/0123456789abcdef/old.hkv"
        left.write_bytes(b"token ids of an old conversation")
        left.chmod(0o644)
        (hisho_home / "logs/hisho.log.1").write_text("an old log\n")
        assert readable_by_others(hisho_home)
        done = subprocess.run([sys.executable, "-m", "hisho.cli.main", "chat"], input="Hello there.\n/quit\n",
                              capture_output=True, text=True, timeout=300)
    finally:
        os.umask(old_umask)
    assert done.returncode == 0, done.stderr
    created = {p.name for p in hisho_home.rglob("*")}
    assert {"hisho.sqlite3", "hisho.log", "engine.log"} <= created
    assert readable_by_others(hisho_home) == []
    print(f"\nfiles and folders readable by others after a session: {len(readable_by_others(hisho_home))}")
