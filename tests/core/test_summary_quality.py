"""A summary that is the source handed back, or a loop, is called out: the model is too small for summaries,
and a model that fits this machine is named."""

from __future__ import annotations

from dataclasses import replace

from hisho.core.documents.quality import judge, warning
from hisho.core.hub.suggest import CANDIDATES, suggest
from hisho.core.machine import Budget
from hisho.core.planner import speed
from hisho.core.units import GIB
from tests.core.test_speed import slow

SOURCE = ("The harbour board met on Tuesday to discuss the budget for the coming year. Spending on the new "
          "breakwater will rise by twelve percent, while dredging is postponed until the spring. The board also "
          "agreed to hire two more pilots and to publish its accounts every quarter from now on. ") * 3


def budget(gib: float) -> Budget:
    return Budget(ram=int(gib * GIB), gpu=0, unified=False, headroom=0, metric="resident", explain="")


def fast() -> speed.SpeedProfile:
    """A machine where every candidate answers at 8 tok/s or faster: memory alone decides."""
    return replace(slow(), bandwidth=200e9)


def test_a_copied_summary_is_called_copied() -> None:
    q = judge(SOURCE[:500] + " " + SOURCE[:400], SOURCE)
    assert q.verdict == "copied" and q.copied > 0.9


def test_a_loop_is_called_repetitive() -> None:
    loop = "The report says that the company is doing well and will grow next year. " * 12
    q = judge(loop, SOURCE)
    assert q.verdict == "repetitive" and q.repeated > 0.8 and q.copied == 0.0


def test_a_real_summary_passes() -> None:
    summary = ("The harbour board set next year's budget: breakwater spending goes up 12 %, dredging waits "
               "for spring. It will add two pilots and report its accounts quarterly. Overall the plan is "
               "cautious, keeping costs predictable while the port's main works continue as scheduled.")
    q = judge(summary, SOURCE)
    assert q.ok and q.copied < 0.2 and q.repeated == 0.0


def test_the_warning_names_a_model_that_fits() -> None:
    q = judge(SOURCE, SOURCE)
    pick = suggest(budget(16), fast())
    assert pick is not None and pick is CANDIDATES[-1]
    text = warning(q, "SmolLM2-135M-Instruct.Q4_1", pick.line())
    assert "too small for summaries" in text and pick.title in text and "copied" in text
    small = suggest(budget(2.5), fast())
    assert small is not None and small.params_b < pick.params_b
    assert suggest(budget(0.5), fast()) is None
    assert "little memory" in warning(q, "m", None)
    assert warning(judge("short", SOURCE), "m", None) == ""


def test_a_job_result_carries_the_advice_in_its_json() -> None:
    from hisho.core.documents.job import DocResult, JobResult
    from hisho.core.documents.quality import advice

    copied = DocResult("lease.docx", SOURCE, "single", 1, 0, 200, 1, [], judge(SOURCE, SOURCE).to_dict())
    fine = DocResult("b.txt", "ok", "single", 1, 0, 10, 1, [], judge("ok", SOURCE).to_dict())
    text, model = advice([fine.quality, copied.quality], "SmolLM2-135M-Instruct.Q4_1", budget(16), fast())
    assert model is not None and model["title"] in text and model["spec"] == CANDIDATES[-1].spec
    out = JobResult(SOURCE, [fine, copied], quality_warning=text, suggested_model=model).as_dict()
    assert out["quality_warning"] == text and out["suggested_model"] == model
    assert out["documents"][1]["quality"]["verdict"] == "copied"
    assert advice([fine.quality], "m", budget(16), fast()) == ("", None)
