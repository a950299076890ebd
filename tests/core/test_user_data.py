"""The user's folders: all of them outside the install, all of them removed by "Remove all my data"."""

from __future__ import annotations

from pathlib import Path

from hisho.core import paths


def test_user_folders_are_the_homes_and_removal_takes_them_all(hisho_home: Path) -> None:
    made = [paths.data_dir(), paths.config_dir(), paths.cache_dir(), paths.log_dir(), paths.kv_dir()]
    paths.database_path().write_bytes(b"conversations")
    assert set(paths.user_folders()) == {hisho_home / "data", hisho_home / "config", hisho_home / "cache",
                                         hisho_home / "logs"}
    assert all(any(m == f or f in m.parents for f in paths.user_folders()) for m in made)
    removed = paths.remove_user_data()
    assert set(removed) == set(paths.user_folders())
    assert not any(f.exists() for f in paths.user_folders())
    assert paths.remove_user_data() == []  # nothing left: a second call removes nothing and does not fail
