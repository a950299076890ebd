"""One recommender: the first-run card, the Hub tab's suggestions and the summary's "too small" note all ask
``core.hub.suggest`` and say the same model at the same speed; nothing is offered before this machine's speed is
measured; the list is sorted by what the person gets (fits, then fast enough, then quality)."""

from __future__ import annotations

from dataclasses import replace

from hisho.core.documents.quality import advice, judge
from hisho.core.hub.suggest import CANDIDATES, offer_line, ranked, speed_of, suggest
from hisho.core.machine import Budget
from hisho.core.planner import speed
from tests.core.test_speed import ROOMY, slow

GIB = 1024**3
ONE_POINT_FIVE, THREE, SEVEN = CANDIDATES
SOURCE = " ".join(f"The harbour board met on day {i} and set the budget for the breakwater and dredging."
                  for i in range(12))


def slower() -> speed.SpeedProfile:
    """A machine where only the 1.5B answers at 8 tok/s or faster: the 3B at ~6, the 7B at ~3."""
    return replace(slow(), bandwidth=12e9)


def test_nothing_is_suggested_before_the_machine_is_measured() -> None:
    assert suggest(ROOMY, None) is None
    assert suggest(ROOMY, slow()) is THREE


def test_ranked_puts_what_fits_then_what_is_fast_enough_then_quality() -> None:
    profile = slower()
    assert [speed_of(c, profile).decode_short >= speed.SPEED_FLOOR for c in CANDIDATES] == [True, False, False]
    # The slow ones come faster first: the 3B (~6 tok/s) before the 7B (~3 tok/s).
    assert ranked(ROOMY, profile) == [ONE_POINT_FIVE, THREE, SEVEN]
    assert suggest(ROOMY, profile) is ONE_POINT_FIVE
    # Fast enough: the larger first (better answers), the slow 7B last.
    assert ranked(ROOMY, slow()) == [THREE, ONE_POINT_FIVE, SEVEN]
    # What does not fit comes after what fits, however fast.
    small = Budget(ram=4 * GIB, gpu=0, unified=False, headroom=0, metric="resident", explain="test")
    assert ranked(small, slow())[-1] is SEVEN and ranked(small, None) == [THREE, ONE_POINT_FIVE, SEVEN]


def test_the_too_small_note_names_the_cards_pick_and_speed() -> None:
    bad = judge(SOURCE, SOURCE).to_dict()
    assert bad["verdict"] != "ok"
    for profile in (slow(), slower()):
        pick = suggest(ROOMY, profile)
        assert pick is not None
        text, model = advice([bad], "SmolLM2-135M", ROOMY, profile)
        assert offer_line(pick, profile) in text and "tok/s" in text
        assert model is not None and model["spec"] == pick.spec
        assert model["decode_tps"] == round(speed_of(pick, profile).decode_short, 1)
    text, model = advice([bad], "SmolLM2-135M", ROOMY, None)
    assert model is None and SEVEN.title not in text and "measured" in text
