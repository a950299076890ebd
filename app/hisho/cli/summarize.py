"""``hisho summarize FILE… [--json]``: summaries of documents (the command line contract, docs/architecture.md).

JSON: summary, chunks, input_tokens, seconds, truncated, plus chunks_cached / chunks_generated (a rerun after a
kill resumes), skipped files and per-document details. ``truncated`` is false unless the user asked for a cut
(``--pages 1-20`` of a PDF); then it is true and ``cut`` lists what was not read ("report.pdf: pp. 21–500"),
which the summary's "Not included" list repeats.
A file that cannot be read is reported on stderr and in the summary; the others are still summarized. Exit 2
when no file could be read.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hisho.core.documents.job import JobResult
from hisho.core.documents.model import PageSpan
from hisho.core.documents.plan import CHUNK_TARGET, FINAL_TOKENS, MAX_PARALLEL, SUMMARY_TOKENS


def register(sub: Any) -> None:
    p = sub.add_parser("summarize", help="summarize documents (PDF, DOCX, TXT, MD, RST, HTML)")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--model", help="model store name or GGUF path (default: the bundled model)")
    p.add_argument("--n-ctx", type=int, default=None, help="context length (default: settings)")
    p.add_argument("--parallel", type=int, default=MAX_PARALLEL, help="chunk summaries decoded at once")
    p.add_argument("--summary-tokens", type=int, default=SUMMARY_TOKENS, help="reply budget per chunk")
    p.add_argument("--final-tokens", type=int, default=FINAL_TOKENS, help="reply budget of the final summary")
    p.add_argument("--chunk-tokens", type=int, default=CHUNK_TARGET, help="largest chunk (tokens)")
    p.add_argument("--password", help="password of an encrypted PDF")
    p.add_argument("--pages", type=_span, metavar="A-B",
                   help="read only these pages of each PDF (1-20, 5, 30-); the JSON then says truncated and what "
                        "was cut")
    p.add_argument("--yes", action="store_true",
                   help="start long jobs without asking (more than a few hundred chunks)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_summarize)


def _span(spec: str) -> PageSpan:
    from hisho.core.errors import UserError

    try:
        return PageSpan.parse(spec)
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cut_of(result: JobResult) -> list[str]:
    """What a user-requested cut left out, per document ("report.pdf: pp. 21–500")."""
    return [f"{d.name}: {d.cut}" for d in result.extracted if d.cut]


def cmd_summarize(args: argparse.Namespace) -> int:
    from hisho.cli.output import emit_json
    from hisho.cli.progress import StderrProgress
    from hisho.core import services

    parallel = max(1, args.parallel)
    app = services.build(args.model, "summarize", n_ctx=args.n_ctx)

    # Ctrl+C and SIGTERM cancel: finished chunks stay cached, the exit code is 130. The engine runs in its own
    # session (core.spawn), so the terminal's SIGINT reaches only this process. Caught from the start: a Ctrl+C
    # while the model loads cancels the job before it begins; a second one then interrupts at once.
    asked = threading.Event()
    running: list[Any] = []

    def on_signal(*_: object) -> None:
        if asked.is_set() and not running:
            raise KeyboardInterrupt
        asked.set()
        for job in running:
            job.cancel()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    progress = StderrProgress()  # lines on stderr, a bar on a terminal; stdout keeps only the result
    try:
        with progress:
            progress.note(f"loading {Path(str(app.model_path)).stem}…")
            started = time.monotonic()
            app.load()
            progress.note(f"model loaded in {time.monotonic() - started:.1f} s")
            job = app.documents.job(args.files, password=args.password, max_parallel=parallel,
                                    summary_tokens=args.summary_tokens, final_tokens=args.final_tokens,
                                    chunk_target=args.chunk_tokens, on_progress=progress, pages=args.pages,
                                    confirm=lambda name, chunks, eta: asked_on(progress, args.yes, name, chunks, eta))
            running.append(job)
            if asked.is_set():
                job.cancel()
            result = app.documents.run(job)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        app.close()
    for line in result.skipped:
        sys.stderr.write(f"hisho: error: {line}\n")
    if result.quality_warning:
        sys.stderr.write(f"hisho: note: {result.quality_warning}\n")
    if result.context_note:
        sys.stderr.write(f"hisho: note: {result.context_note}\n")
    if args.pages is not None:
        whole = [Path(f).name for f in args.files if Path(f).suffix.lower() != ".pdf"]
        if whole:
            sys.stderr.write(f"hisho: note: --pages applies to PDFs; read whole: {', '.join(whole)}\n")
    if args.json:
        emit_json({**result.as_dict(), "cut": cut_of(result)})
    else:
        sys.stdout.write(result.summary + "\n")
    if result.cancelled:
        return 130
    return 0 if result.documents else 2


def asked_on(progress: Any, yes: bool, name: str, chunks: int, eta_s: float) -> bool:
    """``confirm_long`` with the progress bar held while the question is on the terminal."""
    with progress.held():
        return confirm_long(yes, name, chunks, eta_s)


def confirm_long(yes: bool, name: str, chunks: int, eta_s: float) -> bool:
    """A long job runs with --yes, or when the person at the terminal says so."""
    from hisho.core.documents.job import duration

    if yes:
        return True
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    sys.stderr.write(f"\r{name}: about {chunks:,} chunks, roughly {duration(eta_s)}. Start it? [y/N] \033[K")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")
