"""Times a person waited read in the unit they think in: milliseconds under 10 s, seconds, then minutes."""

from __future__ import annotations

import pytest

from hisho.core.units import wait_text


@pytest.mark.parametrize("seconds, text", [
    (0.135, "135 ms"), (2.34, "2,340 ms"), (9.9994, "9,999 ms"), (10.0, "10.0 s"), (72.504, "72.5 s"),
    (89.9, "89.9 s"), (90.0, "1 min 30 s"), (733.0, "12 min 13 s"), (7300.0, "2 h 1 min"),
])
def test_wait_text(seconds: float, text: str) -> None:
    assert wait_text(seconds) == text
