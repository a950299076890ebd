"""``hisho summarize FILE… [--json]``: summaries of documents (DESIGN.md command contract).

JSON: summary, chunks, input_tokens, seconds, truncated (false: nothing is ever cut without being asked), plus
chunks_cached / chunks_generated (a rerun after a kill resumes), skipped files and per-document details.
A file that cannot be read is reported on stderr and in the summary; the others are still summarized. Exit 2
when no file could be read.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from typing import Any

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
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_summarize)


def cmd_summarize(args: argparse.Namespace) -> int:
    from hisho.cli import emit_json, load_model
    from hisho.core.documents.job import JobProgress, SummaryJob
    from hisho.core.engine_client import EngineClient
    from hisho.core.launch import load_params_for, open_model

    model_path = open_model(args.model)
    parallel = max(1, args.parallel)
    params = dataclasses.replace(load_params_for(model_path, n_ctx=args.n_ctx, n_seq_max=parallel),
                                 kv_unified=True)

    def progress(p: JobProgress) -> None:
        if not args.json and sys.stderr.isatty():
            sys.stderr.write(f"\r{p.stage}: {p.message or ''} (ETA {p.eta_s:.0f}s)\033[K")

    with EngineClient() as client:
        load_model(client, params)
        job = SummaryJob(client, args.files, password=args.password, max_parallel=parallel,
                         summary_tokens=args.summary_tokens, final_tokens=args.final_tokens,
                         chunk_target=args.chunk_tokens, on_progress=progress)
        previous = signal.signal(signal.SIGINT, lambda *_: job.cancel())
        try:
            result = job.run()
        finally:
            signal.signal(signal.SIGINT, previous)
    for line in result.skipped:
        sys.stderr.write(f"hisho: error: {line}\n")
    if args.json:
        emit_json(result.as_dict())
    else:
        if sys.stderr.isatty():
            sys.stderr.write("\n")
        sys.stdout.write(result.summary + "\n")
    return 130 if result.cancelled else 0
