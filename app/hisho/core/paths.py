"""Every path Hisho writes to comes from here.

The roots come from platformdirs; ``HISHO_HOME`` replaces all of them with one folder (tests always set it to a
temporary directory, so a test can never touch a user's data). Accessors create their folder on first use.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from pathlib import Path

import platformdirs

APP_NAME = "Hisho"
ENV_HOME = "HISHO_HOME"


def _home_override() -> Path | None:
    value = os.environ.get(ENV_HOME, "").strip()
    return Path(value).expanduser().resolve() if value else None


def _ensure(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def protect() -> int:
    """Keep the user's data private, as browsers and password managers do: from now on this process
    and the engine it starts create folders 700 and files 600 (umask 077), and what already exists under the
    data, config, cache and log folders loses its group and other permissions. Returns how many were fixed.
    Call once at start, before anything is written."""
    os.umask(0o077)
    if os.name != "posix":
        return 0
    fixed = 0
    roots: list[Path] = []
    for folder_of in (data_dir, config_dir, cache_dir, log_dir):
        try:
            roots.append(folder_of())
        except OSError as exc:  # not creatable (a file in the way, no space): whoever needs it says so
            logging.getLogger("hisho.store").info("cannot protect %s: %s", folder_of.__name__, exc)
    for root in dict.fromkeys(roots):
        for folder, _dirs, files in os.walk(root):
            for name in [folder, *(os.path.join(folder, f) for f in files)]:
                try:
                    st = os.lstat(name)
                    if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
                        continue
                    os.chmod(name, stat.S_IMODE(st.st_mode) & ~0o077)
                    fixed += 1
                except OSError as exc:  # a file of another user, a read-only mount: say so, go on
                    logging.getLogger("hisho.store").warning("cannot make %s private: %s", name, exc)
    if fixed:
        logging.getLogger("hisho.store").info("made %d files and folders private (go-rwx)", fixed)
    return fixed


def data_dir() -> Path:
    """Databases, models and KV snapshots: what must survive."""
    home = _home_override()
    return _ensure(home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)))


def config_dir() -> Path:
    home = _home_override()
    return _ensure(home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)))


def cache_dir() -> Path:
    """Things that can be rebuilt (calibration results, hub headers)."""
    home = _home_override()
    return _ensure(home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)))


def log_dir() -> Path:
    home = _home_override()
    return _ensure(home / "logs" if home else Path(platformdirs.user_log_dir(APP_NAME, appauthor=False)))


def models_dir() -> Path:
    """Downloaded and imported GGUF files."""
    return _ensure(data_dir() / "models")


def kv_dir() -> Path:
    """KV-cache snapshots. A cache: losing a file costs time, never data."""
    return _ensure(data_dir() / "kv")


def database_path() -> Path:
    return data_dir() / "hisho.sqlite3"


def settings_path() -> Path:
    return config_dir() / "settings.json"


def log_file() -> Path:
    return log_dir() / "hisho.log"


def engine_log_file() -> Path:
    """llama.cpp's own log (the engine process's stderr)."""
    return log_dir() / "engine.log"


def resources_dir() -> Path:
    """Icons, styles and the desktop entry, from a PyInstaller bundle, an installed wheel or a checkout."""
    bundle = getattr(sys, "_MEIPASS", None)
    candidates = [Path(bundle) / "resources"] if bundle else []
    candidates += [
        Path(sys.prefix) / "share" / "hisho" / "resources",     # wheel: [tool.setuptools.data-files]
        Path(__file__).resolve().parents[3] / "resources",     # checkout / editable install
    ]
    for candidate in candidates:
        if (candidate / "icons").is_dir():
            return candidate
    return candidates[-1]


def user_folders() -> list[Path]:
    """Every folder that holds the user's things (data, settings, cache, logs), none of them inside the install.
    With ``HISHO_HOME`` set, that folder's subfolders."""
    home = _home_override()
    if home:
        return [home / "data", home / "config", home / "cache", home / "logs"]
    return [Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
            Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))]


def remove_user_data() -> list[Path]:
    """Delete every user folder ("Remove all my data"): conversations, KV snapshots, imported and downloaded
    models, settings, calibration cache and logs. Call it only once nothing has them open (the app runs it after
    its window has closed). Returns the folders that were removed."""
    import shutil

    removed = []
    for folder in user_folders():
        if folder.exists():
            shutil.rmtree(folder)
            removed.append(folder)
    return removed
