"""What the window works on: the app's services from the composition root (``hisho.core.services``), with
callbacks delivered through the window's bridge. The wiring itself lives in the root, not here.

Opening the store never crashes the app: a corrupt, locked or too-new database is reported in ``problem`` and
the window gets a read-only view of it when possible, else an empty temporary store.
"""

from __future__ import annotations

from pathlib import Path

from hisho.core import services
from hisho.core.services import Services
from hisho.gui.shell.bridge import Bridge

AppContext = Services  # the window's name for it


def build(model: str | None, *, bridge: Bridge, db_path: Path | None = None) -> AppContext:
    # n_seq_max=2: KV saves use the second sequence as scratch (docs/kv-format.md).
    return services.build(model, db_path=db_path, post=bridge.post, n_seq_max=2)
