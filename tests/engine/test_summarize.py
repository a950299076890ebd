"""``hisho summarize`` end to end on the real model: map-reduce with page references, resume after a kill,
cancel and resume in-process, several files with one bad, never silent."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hisho.core import paths
from hisho.core.documents.job import JobProgress, SummaryJob
from hisho.core.engine.client import EngineClient
from hisho.core.engine.protocol import LoadParams
from tests.fixtures.docs.make import make_pdf

# Small budgets keep the tiny model fast; the planner still has to cut the document into ~10 chunks.
SMALL = ["--n-ctx", "1024", "--chunk-tokens", "160", "--summary-tokens", "20", "--final-tokens", "40"]
TOWNS = ["Riverton", "Lakeside", "Hillcrest", "Brookfield", "Oakdale", "Pinewood", "Fairview", "Maple Grove",
         "Stonebridge", "Ashford"]


def report_pdf(path: Path, pages: int = 10) -> Path:
    texts = []
    for i in range(pages):
        town = TOWNS[i % len(TOWNS)]
        lines = [f"Page {i + 1}: the council of {town} met on day {i + 3}.",
                 f"They approved {1000 + 37 * i} dollars for road repair in {town}.",
                 f"The library of {town} gets {200 + 11 * i} new books this year.",
                 f"Mayor {town[:3]}son said the budget of {town} is balanced.",
                 f"Rainfall in {town} was {40 + i} millimetres, so farmers are happy.",
                 f"The bridge over the {town} river will be painted green in spring."]
        texts.append("\n".join(lines))
    return make_pdf(path, texts)


def hisho(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hisho.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


def errors(stderr: str) -> list[str]:
    """The error lines of stderr (progress lines go there too)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("hisho: error")]


def stored_rows() -> list[tuple[Any, ...]]:
    db = paths.database_path()
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT chunk_key, created, summary FROM doc_summaries WHERE level = 0").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def test_progress_lines_on_stderr_when_it_is_not_a_terminal(tmp_path: Path) -> None:
    """A captured stderr (a pipe, a log) gets a line per step: the model load, every chunk, the end; the JSON on
    stdout is untouched."""
    pdf = report_pdf(tmp_path / "steps.pdf", pages=10)
    res = hisho("summarize", str(pdf), "--json", *SMALL)
    assert res.returncode == 0, res.stderr
    json.loads(res.stdout)
    lines = res.stderr.splitlines()
    assert lines[0].startswith("hisho: loading ") and lines[1].startswith("hisho: model loaded in ")
    chunks = [ln for ln in lines if ln.startswith("hisho: summarizing steps.pdf: chunk ")]
    assert len(chunks) >= 3 and re.search(r" · \d+ %", chunks[-1])
    assert any(ln.endswith("ETA") is False and " · ETA " in ln for ln in chunks[1:])
    assert lines[-1].startswith("hisho: done in ")
    assert not any("\r" in ln or "\033" in ln for ln in lines)  # no terminal codes in a log


def test_map_reduce_cites_pages_and_second_run_is_all_cached(tmp_path: Path) -> None:
    pdf = report_pdf(tmp_path / "council.pdf")
    first = hisho("summarize", str(pdf), "--json", *SMALL)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["truncated"] is False and out["cancelled"] is False
    assert out["chunks"] >= 5 and out["chunks_cached"] == 0 and out["chunks_generated"] == out["chunks"]
    assert out["input_tokens"] > 900 and out["seconds"] > 0
    doc = out["documents"][0]
    assert doc["mode"] == "map_reduce" and doc["n_parallel"] >= 2
    assert "By part:\n- [p" in out["summary"]
    assert "Not included" not in out["summary"]
    again = json.loads(hisho("summarize", str(pdf), "--json", *SMALL).stdout)
    assert again["chunks_cached"] == out["chunks"] and again["chunks_generated"] == 0
    assert again["summary"] == out["summary"]  # the combine steps came from the cache too


def test_resume_after_kill_redoes_no_finished_chunk(tmp_path: Path) -> None:
    pdf = report_pdf(tmp_path / "resume.pdf", pages=12)
    # One sequence at a time, so chunks finish one by one and the kill lands between them (12 pages of ~90
    # tokens and 160-token chunks: one page per chunk).
    proc = subprocess.Popen([sys.executable, "-m", "hisho.cli.main", "summarize", str(pdf), "--json", "--parallel", "1",
                             *SMALL], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    deadline = time.monotonic() + 400
    while len(stored_rows()) < 6:  # 6 of 12 chunks: killed at 50 %
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited early"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {key: (created, text) for key, created, text in stored_rows()}
    done = hisho("summarize", str(pdf), "--json", "--parallel", "1", *SMALL)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert 6 <= len(before) < out["chunks"], "the kill should land halfway"
    assert out["chunks_cached"] == len(before)
    assert out["chunks_generated"] == out["chunks"] - len(before)
    after = {key: (created, text) for key, created, text in stored_rows()}
    for key, row in before.items():
        assert after[key] == row, "a finished chunk was generated again"
    assert len(after) == out["chunks"]


def test_cancel_mid_job_then_resume(tmp_path: Path, default_model_path: Path) -> None:
    pdf = report_pdf(tmp_path / "cancel.pdf")
    params = LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, kv_unified=True)
    stages: list[JobProgress] = []
    with EngineClient() as client:
        client.load(params)
        kw: dict[str, Any] = {"summary_tokens": 20, "final_tokens": 40, "chunk_target": 160}

        def progress(p: JobProgress) -> None:
            stages.append(p)
            # The bar counts tokens read; the message counts finished chunks ("chunk 2 of 12").
            if p.stage == "summarizing" and p.message.startswith("chunk ") and int(p.message.split()[1]) >= 2:
                job.cancel()

        job = SummaryJob(client, [pdf], on_progress=progress, **kw)
        result = job.run()
        assert result.cancelled and "cancelled before it finished" in result.summary
        assert stages[0].stage == "extracting" and any(p.message.startswith("chunk ") for p in stages)
        assert all(p.eta_s >= 0 for p in stages) and job.eta_s > 0
        cached_rows = len(stored_rows())
        assert 2 <= cached_rows
        resumed = SummaryJob(client, [pdf], **kw).run().as_dict()
    assert not resumed["cancelled"] and resumed["chunks_cached"] == cached_rows
    assert resumed["chunks_generated"] == resumed["chunks"] - cached_rows


def test_a_cancel_while_the_batch_is_sent_stops_it(tmp_path: Path, default_model_path: Path) -> None:
    """The CLI's Ctrl+C handler calls ``job.cancel()`` on the main thread, which may be inside the job's lock
    sending the map batch: that deadlocked (a plain Lock), and a cancel with no stream yet to stop let the batch
    run to its end. Here the cancel comes from inside the real client's ``batch`` call, as the handler would."""
    pdf = report_pdf(tmp_path / "signal.pdf")
    params = LoadParams(model_path=str(default_model_path), n_ctx=1024, n_seq_max=2, kv_unified=True)
    with EngineClient() as client:
        client.load(params)
        job = SummaryJob(client, [pdf], summary_tokens=20, final_tokens=40, chunk_target=160)
        send = client.batch

        def batch_then_signal(*args: Any, **kw: Any) -> Any:
            stream = send(*args, **kw)
            job.cancel()  # what on_signal does when Ctrl+C lands here
            return stream

        client.batch = batch_then_signal  # type: ignore[method-assign]
        result = job.run()  # returns at all: the old lock deadlocked here (the suite's timeout fails it)
        assert result.cancelled and "cancelled before it finished" in result.summary


def test_several_files_one_bad_and_notes(tmp_path: Path) -> None:
    good = tmp_path / "notes.md"
    good.write_text("# Plan\nThe team ships the app in May.\n\n# Risks\nThe printer is broken.\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    scanned = make_pdf(tmp_path / "scan.pdf", ["The harbour opens at six.", ""], image_pages=(2,))
    res = hisho("summarize", str(good), str(tmp_path / "empty.txt"), str(scanned), "--json")
    assert res.returncode == 0, res.stderr
    assert errors(res.stderr) == ["hisho: error: empty.txt: the file is empty (0 bytes)"]
    out = json.loads(res.stdout)
    assert [d["file"] for d in out["documents"]] == ["notes.md", "scan.pdf"]
    assert all(d["mode"] == "single" for d in out["documents"])
    assert out["summary"].startswith("## notes.md\n")
    assert "## scan.pdf" in out["summary"]
    tail = out["summary"].split("Not included:\n", 1)[1]
    assert "- scan.pdf: p. 2 have no text layer" in tail
    assert "- empty.txt: the file is empty (0 bytes) — not summarized" in tail
    assert out["truncated"] is False and out["cut"] == []  # skipped files and scanned pages are not a cut


def test_pages_cut_is_reported_as_truncated_with_what_was_cut(tmp_path: Path) -> None:
    pdf = report_pdf(tmp_path / "cut.pdf", pages=10)
    res = hisho("summarize", str(pdf), "--pages", "1-3", "--json", *SMALL)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["truncated"] is True and out["cut"] == ["cut.pdf: pp. 4–10"]
    assert out["documents"][0]["mode"] == "single" and out["chunks"] == 1
    assert out["summary"].endswith("Not included:\n- cut.pdf: pp. 4–10 not read, as asked (--pages 1-3)")
    bad = hisho("summarize", str(pdf), "--pages", "7-2")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith(
        "argument --pages: --pages '7-2': pages start at 1 and the range must not run backwards")
    past = hisho("summarize", str(pdf), "--pages", "40-")
    assert past.returncode == 2
    assert errors(past.stderr) == ["hisho: error: cut.pdf: --pages 40- is past the end (the PDF has 10 pages)"]


def test_only_bad_files_exit_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.bin.txt").write_bytes(bytes(range(256)) * 16)
    res = hisho("summarize", str(tmp_path / "x.bin.txt"))
    assert res.returncode == 2
    assert [ln.split(" (")[0] for ln in errors(res.stderr)] == [
        "hisho: error: x.bin.txt: this looks like a binary file, not text"]


@pytest.mark.parametrize("name", ["locked.pdf"])
def test_encrypted_pdf_message_from_cli(tmp_path: Path, name: str) -> None:
    from tests.fixtures.docs.make import make_encrypted_pdf

    path = make_encrypted_pdf(tmp_path / name, "pw")
    res = hisho("summarize", str(path))
    assert res.returncode == 2
    assert "locked.pdf: the PDF is encrypted; give its password (--password)" in res.stderr
    ok = hisho("summarize", str(path), "--password", "pw", "--json", "--final-tokens", "16")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["documents"][0]["input_tokens"] > 0


def test_followup_question_prefills_only_the_question(tmp_path: Path, default_model_path: Path) -> None:
    from hisho.core.conversations.store import ConversationStore
    from hisho.core.db import Database
    from hisho.core.documents.ask import open_conversation, precompute_kv
    from hisho.core.documents.cache import SummaryCache
    from hisho.core.documents.extract import extract
    from hisho.core.engine.protocol import Sampling

    note = tmp_path / "minutes.md"
    note.write_text("# Budget\nThe council approved 4,000 dollars for the bridge.\n\n# Library\n"
                    "The library opens at nine on Saturdays from June.\n" * 3)
    db = Database(tmp_path / "h.sqlite3")
    store, cache = ConversationStore(db), SummaryCache(db)
    with EngineClient() as client:
        client.load(LoadParams(model_path=str(default_model_path), n_ctx=2048, n_seq_max=2))
        cid, att = open_conversation(store, cache.db, [extract(note)], "The council funds the bridge [§ Budget].",
                                     client.count_tokens, 2048)
        assert att.approach == "whole"
        prefix = [{"role": "system", "content": store.get(cid).system_prompt}]
        prefix += [{"role": m.role, "content": m.content} for m in store.branch(cid)]
        n_prefix = precompute_kv(client, prefix)
        assert n_prefix > 100
        question = prefix + [{"role": "user", "content": "When does the library open?"}]
        n_question = client.count_tokens(messages=question) - n_prefix
        reply = client.generate(messages=question, sampling=Sampling(temperature=0.0, max_tokens=8)).collect()
    assert reply.cached_tokens == n_prefix  # the document and the summary turn were not read again
    assert reply.prompt_tokens - reply.cached_tokens == n_question
