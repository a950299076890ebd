"""First start: the bundled model is named a demo, and the best model that fits this computer is offered with a
fit badge from the planner and a one-click download (no hub request before the click); offline, the card stays calm and keeps its estimate."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from hisho.core import settings as settings_mod
from hisho.core.hub.suggest import CANDIDATES
from hisho.gui.models.downloads_tab import VERIFIED
from hisho.gui.models.first_start import FirstStartCard
from hisho.gui.shell.main_window import MainWindow
from hisho_dev.hub_server import FakeHub
from tests.core.hub_fixtures import hub, write_payload_gguf
from tests.gui.conftest import QT_NOISE, make_window, wait_for

__all__ = ["hub"]


def card_of(w: MainWindow) -> FirstStartCard:
    card = getattr(w, "first_start", None)
    assert isinstance(card, FirstStartCard)
    return card


def measured(bandwidth: float = 200e9) -> None:
    """This computer's speed is known (a recorded profile; at 200 GB/s every candidate answers fast enough)."""
    from dataclasses import replace

    from hisho.core.planner import speed
    from tests.core.test_speed import slow

    speed.save_profile(replace(slow(), bandwidth=bandwidth))


def test_before_the_machine_is_measured_the_card_offers_nothing(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch,
                                                                 default_model_path: Path) -> None:
    """No speed profile yet: the card says it is measuring, names no model, shows no "Fits" badges and no
    Download; once the profile lands it offers the pick the Hub tab stars, in the same words and speed."""
    import threading

    from hisho.core.planner import first_speed, speed
    from hisho.gui.models.models_page import planner_budget

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # The start's measurement runs, and is held until the test is done with the "measuring" card (the suite's
    # homes measure nothing by themselves: a measurement that ends at once would race the check).
    measuring = threading.Event()
    monkeypatch.setattr(first_speed, "wanted", lambda: True)
    monkeypatch.setattr(first_speed, "measure_and_keep", lambda _model: measuring.wait(300) and None)
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: "Measuring this computer" in card.offer.text() and not card.isHidden(), 300_000)
        assert card.candidate is None and ladder_texts(card) == [] and card.download.isHidden()
        assert not any(c.title in card.offer.text() for c in CANDIDATES)
        from hisho.core.hub.suggest import offer_line, suggest

        measured(12e9)  # only the 1.5B answers at 8 tok/s or faster here
        profile = speed.load_profile()
        assert profile is not None
        card.speed_landed(profile)
        wait_for(qtbot, lambda: card.candidate is not None, 60_000)
        pick = suggest(planner_budget()[0], profile)
        assert pick is not None and card.candidate is pick is CANDIDATES[0]
        assert html.unescape(card.offer.text().replace("<b>", "").replace("</b>", "")).find(
            offer_line(pick, profile)) >= 0
        assert not card.download.isHidden() and "1.5B Fits" in ladder_texts(card)
    finally:
        measuring.set()
        w.close()


def test_offline_the_card_names_the_demo_and_keeps_an_estimate(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch,
                                                               default_model_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    measured()
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: card.candidate is not None and not card.isHidden(), 60_000)
        assert "demo" in card.demo.text() and "SmolLM2-135M" in card.demo.text()
        assert card.candidate.title in card.offer.text()
        assert card.badge.text() == "Estimate" and card.lookups == 0  # nothing asked of the hub by itself
        card.download.click()
        wait_for(qtbot, lambda: card.lookups >= 1, 60_000)
        assert card.badge.text() == "Estimate"
        assert card.status.text().startswith("Offline") and "\n" not in card.status.text()
        assert card.download.isHidden() and not card.retry.isHidden()
        card.dismiss.click()
        assert card.isHidden()
        wait_for(qtbot, lambda: bool(settings_mod.load()["demo_card_dismissed"]), 30_000)
    finally:
        w.close()


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")  # the Models page's window
def test_online_the_planner_badges_the_offer_and_one_click_downloads_it(
        qtbot: QtBot, hub: FakeHub, tmp_path: Path, default_model_path: Path) -> None:
    for cand in CANDIDATES:  # small stand-ins under the real names: the planner reads their headers
        hub.add_file(cand.repo, cand.file, write_payload_gguf(tmp_path / cand.file, 2))
    measured()
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: card.candidate is not None and not card.download.isHidden(), 60_000)
        assert card.lookups == 0 and hub.served == {}  # no request until the click
        card.download.click()  # one click: the header is read, the planner judges, the download starts
        wait_for(qtbot, lambda: card.fit is not None, 60_000)
        assert card.fit is not None and card.fit.verdict == "fits" and card.badge.text() == "Fits"
        assert card.file is not None and card.candidate is not None and card.file.name == card.candidate.file
        wait_for(qtbot, lambda: getattr(w, "_models_page", None) is not None, 30_000)
        page = w._models_page  # type: ignore[attr-defined]
        wait_for(qtbot, lambda: page.downloads.state_text(0) == VERIFIED, 120_000)
        page.close()
    finally:
        w.close()


def small_machine(monkeypatch: pytest.MonkeyPatch, gib: float = 4.0) -> None:
    """A 4 GiB budget: the 1.5B and 3B candidates fit, the 7B does not."""
    from hisho.core.machine import Budget
    from hisho.gui.models import models_page

    budget = Budget(ram=int(gib * 2**30), gpu=0, unified=False, headroom=0, metric="resident", explain="test")
    monkeypatch.setattr(models_page, "planner_budget",
                        lambda: (budget, {"min_ctx": 2048, "target_ctx": 4096, "n_batch": 512}))


def ladder_texts(card: FirstStartCard) -> list[str]:
    return [b.text() for b in card.ladder.values() if not b.isHidden()]


def test_the_card_offers_the_best_fit_with_a_badge_per_candidate_offline(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, default_model_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    small_machine(monkeypatch)
    measured()
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: card.candidate is not None and not card.isHidden(), 60_000)
        assert card.candidate is CANDIDATES[1]                 # the largest that fits 4 GiB: Llama 3.2 3B
        assert ladder_texts(card) == ["1.5B Fits", "3.2B Fits", "7.6B Won't fit"]
        assert all("estimated" in b.toolTip() for b in card.ladder.values())
        card.download.click()                                  # offline: the estimates stay, calmly
        wait_for(qtbot, lambda: card.lookups >= 1, 60_000)
        assert ladder_texts(card) == ["1.5B Fits", "3.2B Fits", "7.6B Won't fit"]
        assert card.status.text().startswith("Offline")
    finally:
        w.close()


@pytest.mark.qt_log_ignore(*QT_NOISE, r"This plugin does not support raise\(\)")  # the Models page's window
def test_online_the_checked_candidate_gets_the_planners_badge(
        qtbot: QtBot, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        default_model_path: Path) -> None:
    small_machine(monkeypatch)
    measured()
    for cand in CANDIDATES:
        hub.add_file(cand.repo, cand.file, write_payload_gguf(tmp_path / cand.file, 2))
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: card.candidate is not None and not card.download.isHidden(), 60_000)
        card.download.click()
        wait_for(qtbot, lambda: card.fit is not None, 60_000)
        checked = card.ladder[CANDIDATES[1].file]
        assert checked.text() == "3.2B Fits" and "the planner" in checked.toolTip()
        assert "estimated" in card.ladder[CANDIDATES[2].file].toolTip()   # not read: still the estimate
        wait_for(qtbot, lambda: getattr(w, "_models_page", None) is not None, 30_000)
        page = w._models_page  # type: ignore[attr-defined]
        wait_for(qtbot, lambda: page.downloads.state_text(0) == VERIFIED, 120_000)
    finally:
        w.close()


def test_on_a_slow_machine_the_card_offers_a_smaller_model_and_says_why(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, default_model_path: Path) -> None:
    """A recorded speed profile of a 2-core laptop where the 7B answers at ~4 tok/s, on a machine whose memory
    fits the 7B: the card offers the best model that answers at 8 tok/s or faster, says its speed, and names the
    7B as too slow here."""
    from hisho.core.machine import Machine
    from hisho.core.planner import speed
    from tests.core.test_speed import FIXTURE

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    profile = speed.load_profile(FIXTURE)
    assert profile is not None
    speed.save_profile(profile)
    roomy = Machine(platform="linux", ram_total=32 << 30, ram_available=32 << 30, cpu_threads=2)
    monkeypatch.setattr("hisho.core.machine.detect", lambda **_kw: roomy)
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: card.candidate is not None and not card.isHidden(), 60_000)
        seven = CANDIDATES[-1]
        assert card.candidate is not seven
        text = card.offer.text()
        assert card.candidate.title in text and "tok/s on this computer" in text
        assert f"{seven.title} fits too, but would answer at about" in text
    finally:
        w.close()


def test_a_fresh_home_measures_this_computer_and_the_card_says_a_speed(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, default_model_path: Path) -> None:
    """No speed profile kept: once the bundled model answers, the machine is measured in a probe child (the card
    says so meanwhile), the profile is kept in the home and the card offers again with a speed."""
    from hisho.core.planner import first_speed, speed

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(first_speed.ENV_OFF, "1")
    assert speed.load_profile() is None
    w = make_window(qtbot)
    try:
        card = card_of(w)
        wait_for(qtbot, lambda: not card.isHidden(), 60_000)
        if speed.load_profile() is None:  # not landed yet: the card says what runs, and offers nothing
            wait_for(qtbot, lambda: "Measuring this computer" in card.offer.text()
                     or speed.load_profile() is not None, 120_000)
        wait_for(qtbot, lambda: card.speed_profile is not None, 300_000)
        kept = speed.load_profile()
        assert kept is not None and kept.source == first_speed.SOURCE and kept == card.speed_profile
        assert card.speed_note.isHidden()
        assert "tok/s on this computer" in card.offer.text() and card.candidate is not None
    finally:
        w.close()
