"""Machine facts and budgets from recorded device lists (tests/fixtures/devices)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hisho.core.errors import UserError
from hisho.core.machine import detect, from_dict, from_fixture
from hisho.core.planner import check_budget

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "devices"
GIB = 1024**3


def test_windows_igpu_is_one_pool_with_half_of_ram() -> None:
    m = from_fixture(FIX / "windows_igpu.json")
    assert m.unified
    # The driver said free 9 GiB of a total 8 GiB: clamped.
    assert m.gpus[0].free == m.gpus[0].total == 8 * GIB
    b = m.budget()
    assert b.unified and b.metric == "committed"
    assert b.gpu == min(8 * GIB, b.ram)  # half of 16 GiB RAM, within the one pool
    assert b.ram == min(16 * GIB - b.headroom, 11 * GIB)
    assert "one pool" in b.explain


def test_linux_amd_apu_gtt_from_sysfs() -> None:
    m = from_fixture(FIX / "linux_amd_apu.json")
    b = m.budget()
    assert b.unified and b.metric == "resident"
    # 512 MiB carve-out + 15 GiB GTT, not the 18 GiB the device claims nor the 40 GiB "free".
    assert b.gpu == 512 * 1024**2 + 15 * GIB


def test_apple_recommended_working_set() -> None:
    m = from_fixture(FIX / "apple_m2_16g.json")
    assert m.unified
    assert m.budget().gpu == min(11453251584, m.budget().ram)


def test_discrete_gpu_is_its_own_pool() -> None:
    m = from_fixture(FIX / "discrete_rtx4060_laptop.json")
    b = m.budget()
    assert not b.unified
    assert b.gpu == 7784628224
    assert b.ram == min(16 * GIB - b.headroom, 12 * GIB)


def test_cpu_only_has_no_gpu_budget() -> None:
    b = from_fixture(FIX / "cpu_only_8g.json").budget()
    assert b.gpu == 0 and not b.unified


def test_headroom_bounds() -> None:
    small = from_dict({"ram_total": 1 * GIB})
    big = from_dict({"ram_total": 128 * GIB})
    mid = from_dict({"ram_total": 16 * GIB})
    assert small.headroom() == 256 * 1024**2
    assert big.headroom() == 4 * GIB
    assert mid.headroom() == int(16 * GIB * 0.15)
    assert from_dict({"ram_total": 300 * 1024**2}).headroom() == 150 * 1024**2  # never more than half


def test_available_never_exceeds_total() -> None:
    m = from_dict({"ram_total": 8 * GIB, "ram_available": 12 * GIB})
    assert m.ram_available == 8 * GIB


def test_detect_this_machine_without_probe() -> None:
    m = detect(probe_devices=False)
    assert m.ram_total > 0 and 0 < m.ram_available <= m.ram_total and m.cpu_threads >= 1
    assert m.budget().ram > 0


@pytest.mark.parametrize("ram", [0.0, -1.0, float("nan")])
def test_absurd_ram_budget_refused(ram: float) -> None:
    m = from_fixture(FIX / "cpu_only_8g.json")
    with pytest.raises(UserError, match="positive"):
        check_budget(m, ram, None, None)


def test_budget_larger_than_machine_refused() -> None:
    m = from_fixture(FIX / "cpu_only_8g.json")
    with pytest.raises(UserError, match="more than this machine"):
        check_budget(m, 64.0, None, None)
    with pytest.raises(UserError, match="GPU"):
        check_budget(m, None, 4.0, None)
    with pytest.raises(UserError, match="zero or a positive"):
        check_budget(m, None, -2.0, None)


def test_pretend_uma_budget() -> None:
    m = from_fixture(FIX / "cpu_only_8g.json")
    b = check_budget(m, 4.0, 2.0, True)
    assert b.unified and b.gpu == 2 * GIB and b.ram == 4 * GIB - b.headroom
