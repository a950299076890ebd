"""The meters that turn the engine's reading progress into named phases: pages, tokens, never back, never
100 % while reading; a map batch's bar counts tokens read and finished replies."""

from __future__ import annotations

from pathlib import Path

from hisho.core.documents.model import Document, Section
from hisho.core.documents.progress import JobProgress, MapMeter, WholeMeter
from hisho.core.engine.protocol import Progress


def report_doc(pages: int = 60) -> Document:
    return Document(Path("report.pdf"), "pdf", "sha", [Section(f"Page {p} text. " * 20, f"p. {p}", p)
                                                       for p in range(1, pages + 1)])


def test_the_reading_names_its_page_and_counts_tokens_held() -> None:
    seen: list[JobProgress] = []
    meter = WholeMeter(seen.append, report_doc(), prompt_tokens=10_000, reply_tokens=400, speeds=(200.0, 20.0))
    meter.tick(None, 0.0)
    # 1,000 tokens were restored from disk: the engine reads 9,000 and reports against those.
    for done in (0, 2_000, 4_600, 8_900):
        meter.tick(Progress(1, "generate", done, 9_000), 10.0)
    reading = [p for p in seen if p.stage == "reading"]
    assert [p.done for p in reading] == [0, 1_000, 3_000, 5_600, 9_900]
    assert all(p.done < p.total == 10_000 for p in reading)
    assert reading[0].message == "Reading page 1 of 60" and reading[-1].message == "Reading page 60 of 60"
    assert reading[3].message == "Reading page 34 of 60" and reading[3].detail == "5,600 of 10,000 tokens"
    assert reading[0].eta_s > reading[-1].eta_s > 0
    meter.token(1)
    meter.tick(Progress(1, "generate", 8_900, 9_000), 11.0)   # a late tick once writing started: not shown
    assert seen[-1].stage == "writing" and seen[-1].message == "Writing the summary"
    meter.saving()
    assert seen[-1].message == "Saving for follow-up questions"


def test_a_map_batch_moves_while_its_chunks_are_read() -> None:
    seen: list[JobProgress] = []
    meter = MapMeter(seen.append, "summarizing", "report.pdf", "chunk", 0, 8, 200, 120.0)
    meter.tick(None, 0.5)
    meter.tick(Progress(2, "batch_generate", 1_000, 8_800), 1.0)
    meter.tick(Progress(2, "batch_generate", 4_000, 8_800), 5.0)
    meter.item_done(1, 80.0)
    values = [p.done for p in seen[1:]]
    assert values == sorted(values) and seen[-1].total == 8_800 + 8 * 200
    assert seen[-1].message == "chunk 1 of 8" and seen[-1].detail == "4,000 of 8,800 tokens read"
