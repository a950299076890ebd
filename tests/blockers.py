"""pytest plugin (``-p tests.blockers``): make PySide6, shiboken6 and llama_cpp unimportable.

The core must work where neither is installed; ``make test-core`` runs tests/core under this plugin, and
tests/core/test_architecture.py checks the block is really in force there.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

BLOCKED = ("PySide6", "shiboken6", "llama_cpp")


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname.split(".")[0] in BLOCKED:
            raise ImportError(f"{fullname} is blocked for core tests")
        return None


for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED:
        del sys.modules[name]
sys.meta_path.insert(0, _Blocker())
os.environ["HISHO_TEST_BLOCKED"] = ",".join(BLOCKED)
