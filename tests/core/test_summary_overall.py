"""One bar for a whole summary: weighted stages that never go back (the combine step does not restart it at 0 %,
the chat opening is part of it), and an ETA that follows the job's estimates smoothly, never jumping by more
than a bounded factor per update."""

from __future__ import annotations

from hisho.core.documents.overall import MAX_STEP, Overall, SmoothEta
from hisho.core.documents.progress import JobProgress


def test_a_map_summary_moves_one_bar_forward_through_combining_and_opening() -> None:
    o = Overall(files=1, started=0.0)
    reports = [JobProgress("extracting", 0, 1, 0.0, "a.pdf"), JobProgress("extracting", 1, 1, 0.0, "a.pdf"),
               JobProgress("planning", 0, 1, 0.0, "a.pdf")]
    reports += [JobProgress("summarizing", d, 100, 180.0, "a.pdf") for d in range(0, 101, 10)]
    reports += [JobProgress("combining", d, 10, 40.0, "a.pdf") for d in (0, 5, 10)]
    reports += [JobProgress("combining", d, 4, 10.0, "a.pdf") for d in (0, 2, 4)]   # a second round from 0
    reports += [JobProgress("done", 1, 1, 0.0), JobProgress("opening", 0, 1, 0.0),
                JobProgress("opened", 1, 1, 0.0)]
    shown = [o.update(p, float(t)) for t, p in enumerate(reports)]
    fractions = [s.fraction for s in shown]
    assert fractions == sorted(fractions)                      # never back
    combining = [s for s in shown if s.stage == "combining"]
    read = [s for s in shown if s.stage == "summarizing"][-1]
    assert combining[0].fraction >= read.fraction > 0.65       # combining starts where reading ended, not at 0 %
    assert shown[-2].percent == 97 and shown[-1].percent == 100  # the chat opening is the bar's last share
    assert all(s.percent < 100 for s in shown[:-1])


def test_two_documents_share_the_bar() -> None:
    o = Overall(files=2, started=0.0)
    a = o.update(JobProgress("reading", 50, 100, 60.0, "a.pdf"), 1.0)
    b = o.update(JobProgress("reading", 0, 100, 60.0, "b.pdf"), 2.0)
    assert 0.2 < a.fraction < 0.4 and b.fraction > 0.5


def test_the_eta_follows_estimates_without_jumping() -> None:
    """The job's estimates swing 3 min → 7 min → 1 min; what is shown moves by at most MAX_STEP a report."""
    eta = SmoothEta()
    assert eta.update(180.0, 0.0) == 180.0
    shown = [eta.update(420.0, 10.0), eta.update(60.0, 20.0), eta.update(60.0, 30.0)]
    before = 180.0
    for t, value in zip((10.0, 20.0, 30.0), shown, strict=True):
        expected = max(1.0, before - 10.0)
        assert expected / MAX_STEP - 1e-9 <= value <= expected * MAX_STEP + 1e-9, (t, value)
        before = value
    assert shown[0] < 250 and shown[1] > 100                   # not 7 min, then not 1 min
    assert eta.left(40.0) == shown[2] - 10.0                   # counts down between reports


def test_with_no_estimate_the_bars_own_rate_gives_one() -> None:
    o = Overall(files=1, started=0.0)
    start = o.update(JobProgress("reading", 0, 1000, 0.0, "a.txt"), 0.0)
    assert start.eta_s == 0.0                                  # nothing measured yet: no figure made up
    first = o.update(JobProgress("reading", 100, 1000, 0.0, "a.txt"), 10.0)
    rate = (first.fraction - start.fraction) / 10.0
    assert first.eta_s > 0 and abs(first.eta_s - (1 - first.fraction) / rate) < 1
    assert o.update(JobProgress("cancelled", 1, 1, 0.0), 11.0).eta_s == 0.0
