"""A bench's own data folder: ``HISHO_HOME`` pointed at a temporary folder for the bench's run, so nothing it
saves (KV, conversations, calibrations) touches the user's data or another run's, and put back afterwards."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def temporary_home(prefix: str) -> Iterator[str]:
    """``HISHO_HOME`` set to a fresh temporary folder (removed after) for the ``with`` block."""
    old = os.environ.get("HISHO_HOME")
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        os.environ["HISHO_HOME"] = home
        try:
            yield home
        finally:
            if old is None:
                os.environ.pop("HISHO_HOME", None)
            else:
                os.environ["HISHO_HOME"] = old
