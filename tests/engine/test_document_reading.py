"""A document read once: the summary is written on the prefix the conversation keeps, a follow-up reads only
the question, and after a restart neither a re-summary nor the reopened conversation reads the document
again (the KV index restores it from disk). Token counts are the engine's own figures. Also: a reading shows
progress and a stop keeps what was read; a model trained on less context than is loaded gets no chunk over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hisho.core import services
from hisho.core.conversations.schema import ChatSettings
from hisho.core.documents.job import JobProgress
from hisho.core.kv.session import document_owner
from tests.fixtures.docs.make import make_pdf

QUESTION = "When does the harbour ferry leave on page 17?"


def pages(n: int = 30) -> list[str]:
    """Known sentences on known pages: page 17 alone names the ferry's hour 4 and a red boat."""
    out = []
    for p in range(1, n + 1):
        extra = "The harbour ferry leaves at four o'clock on a red boat." if p == 17 else \
            f"The market of district {p} sold {p * 13} apples."
        out.append(f"Page {p} of the town report.\nThe council of district {p} met on day {p + 2}.\n{extra}\n"
                   f"The library of district {p} lent {p * 31} books and the school has {p * 7} pupils.\n"
                   f"Rainfall in district {p} was {40 + p} millimetres; the farmers planted {p * 3} fields.\n"
                   f"The bridge of district {p} was painted on day {p + 9} and the clinic saw {p * 11} people.")
    return out


def app_for(n_ctx: int = 8192) -> Any:
    app = services.build(None, "chat", n_ctx=n_ctx)
    app.load()
    return app


def ask(app: Any, cid: int) -> tuple[int, Any]:
    """One follow-up: (prompt tokens the engine read for it, the KV restore report of the send)."""
    app.store.update(cid, settings=ChatSettings(temperature=0.0, max_tokens=8))
    res = app.chat.run(app.chat.send(cid, QUESTION))
    assert res.engine is not None and not res.error
    return res.engine.prompt_tokens - res.engine.cached_tokens, app.kv.last_restore


def test_a_document_that_fits_is_read_once_even_after_a_restart(tmp_path: Path, default_model_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages())
    seen: list[JobProgress] = []
    app = app_for()
    try:
        result = app.documents.job([pdf], final_tokens=48, on_progress=seen.append).run()
        assert result.chat_prompt and result.documents[0].mode == "whole" and not result.cancelled
        doc_tokens = result.documents[0].input_tokens
        job_read = result.tokens_read
        cid, note = app.documents.open_result(result)
        assert cid is not None and "read once" in note
        assert result.tokens_read - job_read <= 8  # opening read only the turn's end: the sequence held the rest
        question_read, _ = ask(app, cid)
        assert question_read < 40
        # One reading: the document with its prompt wrapping, the question, nothing twice.
        assert result.tokens_read + question_read <= 1.05 * doc_tokens
        stages = [p.stage for p in seen]
        assert "reading" in stages and "writing" in stages and "saving" in stages
        assert any(p.message == "Reading page 1 of 30" for p in seen)
        reading = [p for p in seen if p.stage == "reading"]
        assert all(p.total == reading[0].total for p in reading)
        assert [p.done for p in reading] == sorted(p.done for p in reading)
    finally:
        app.close()

    app = app_for()  # a new engine process: summarize the same file again (the summary is stored)
    try:
        again = app.documents.job([pdf], final_tokens=48).run()
        assert again.documents[0].chunks_cached == 1 and again.tokens_read == 0
        cid2, _ = app.documents.open_result(again)
        assert cid2 is not None
        # Opening restored the document's prefix from disk: only the tail the saved sequence lacked was read.
        assert again.tokens_read < 0.05 * doc_tokens
        owners = {str(r["owner"]) for r in app.store.db.query("SELECT owner FROM kv_entries")}
        assert document_owner(result.extracted[0].sha256) in owners
    finally:
        app.close()

    app = app_for()  # and again: reopen the first conversation and ask
    try:
        question_read, report = ask(app, cid)
        assert report is not None and report.from_disk and report.restored > doc_tokens
        assert question_read < 40
    finally:
        app.close()


def test_a_stopped_reading_keeps_what_was_read(tmp_path: Path, default_model_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages())
    app = app_for()
    try:
        job = app.documents.job([pdf], final_tokens=48)
        job.on_progress = lambda p: job.cancel() if p.stage == "reading" and p.done > 0 else None
        first = job.run()
        assert first.cancelled and 0 < first.tokens_read
        prompt = app.engine.count_tokens(messages=first.chat_prompt)
        assert first.tokens_read < prompt   # stopped inside the reading
        again = app.documents.job([pdf], final_tokens=48).run()
        assert not again.cancelled
        # The rest only (the sequence still held the part read; a restore from disk gives the same).
        assert again.tokens_read <= prompt - first.tokens_read + 8
    finally:
        app.close()


def test_a_model_trained_on_8k_loaded_at_16k_gets_no_chunk_over_8k(tmp_path: Path) -> None:
    """The loaded context may be larger than the trained one (a planner's "Use this context"): documents are
    cut within the trained one, and the result says so."""
    from hisho.core.db import Database
    from hisho.core.documents.cache import SummaryCache
    from hisho.core.documents.job import SummaryJob
    from hisho.core.engine.client import EngineClient
    from hisho.core.engine.protocol import LoadParams
    from tests.fixtures.gguf_shapes import true_model

    text = tmp_path / "long.txt"
    text.write_text("\n".join(f"Line {i}: the harbour ferry of district {i % 97} leaves at {i % 12 + 1} o'clock."
                              for i in range(1400)))
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(true_model("llama-tiny", "Q8_0")), n_ctx=16384, n_seq_max=2))
        assert client.load_info["n_ctx_train"] == 8192
        assert client.count_tokens(text.read_text()) > 12000   # one chunk of 12K would fit the loaded context
        job = SummaryJob(client, [text], cache=SummaryCache(Database(tmp_path / "h.sqlite3")),
                         chunk_target=12000, summary_tokens=8, final_tokens=8)
        result = job.run()
    sizes = [c.tokens for plan in job.plans for c in plan.chunks]
    assert not result.cancelled and result.n_ctx == 8192 and "8,192" in result.context_note
    assert len(sizes) >= 2 and max(sizes) <= 8192 and max(sizes) > 6000


def test_the_reading_progress_moves_every_few_seconds_and_ends_with_the_reading(tmp_path: Path,
                                                                                  default_model_path: Path) -> None:
    """Small prompt slices (n_batch 64) make a long reading of many steps: the value moves at least every 5 s
    and the reading phase never says 100 % (it ends when the summary starts being written)."""
    import time

    from hisho.core.db import Database
    from hisho.core.documents.cache import SummaryCache
    from hisho.core.documents.job import SummaryJob
    from hisho.core.engine.client import EngineClient
    from hisho.core.engine.protocol import LoadParams

    pdf = make_pdf(tmp_path / "report.pdf", pages())
    seen: list[tuple[float, JobProgress]] = []
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=8192, n_batch=64, n_seq_max=2))
        job = SummaryJob(client, [pdf], cache=SummaryCache(Database(tmp_path / "h.sqlite3")), final_tokens=16,
                         on_progress=lambda p: seen.append((time.monotonic(), p)))
        result = job.run()
    assert not result.cancelled and result.documents[0].mode == "whole"
    reading = [(t, p) for t, p in seen if p.stage == "reading"]
    assert len({p.done for _, p in reading}) > 10
    assert all(p.done < p.total for _, p in reading)
    # A report at least every few seconds (the ticker's, whatever the engine's speed) ...
    times = [t for t, _ in reading] + [next(t for t, p in seen if p.stage == "writing")]
    assert max(b - a for a, b in zip(times, times[1:])) <= 5.0
    # ... and the value moves with the engine's slices, never back.
    assert [p.done for _, p in reading] == sorted(p.done for _, p in reading)
    assert any(p.eta_s > 0 for _, p in reading[1:])
    assert [p.message for _, p in reading][-1].startswith("Reading page ")


def test_a_document_longer_than_the_context_is_read_once_in_chunks(tmp_path: Path,
                                                                     default_model_path: Path) -> None:
    """Each chunk is read once; the summary's conversation holds the summary, not the document; a follow-up
    reads only the question and its passages (a page about it among them), and all of it stays within 1.1x."""
    pdf = make_pdf(tmp_path / "report.pdf", pages())
    app = app_for(2048)
    try:
        result = app.documents.job([pdf], summary_tokens=24, final_tokens=32).run()
        assert result.documents[0].mode == "map_reduce" and not result.cancelled
        doc_tokens = result.documents[0].input_tokens
        assert result.document_tokens_read == doc_tokens   # every chunk once
        cid, _ = app.documents.open_result(result)
        assert cid is not None
        system = app.store.get(cid).system_prompt
        assert "red boat" not in system and app.engine.count_tokens(system) < 400
        sent: list[str] = []
        app.chat.before_prompt.append(lambda _turn, messages: sent.append(messages[-1]["content"]))
        question_read, _ = ask(app, cid)
        passages = app.engine.count_tokens(sent[-1]) - app.engine.count_tokens(QUESTION)
        assert 0 < passages <= 2048 // 8
        assert "p. 17" in sent[-1] or "pp. 16–17" in sent[-1] or "pp. 17–" in sent[-1]
        # The question read: its passages, the question and the chat template's wrapping of them, nothing more
        # (the summary turn was read when the conversation opened or is held).
        assert question_read <= passages + app.engine.count_tokens(QUESTION) + 40
        assert result.document_tokens_read + passages <= 1.1 * doc_tokens
    finally:
        app.close()
