"""The ``hisho`` command line. Same core as the window, no Qt unless ``hisho gui`` is asked for.

Contract (docs/architecture.md, "The command line"): figures via ``--json``; errors as one line on stderr;
exit 2 for bad input, 1 for an internal failure; never a traceback for a user mistake.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from hisho import __version__
from hisho.cli.output import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, emit_json, fail
from hisho.core import instance, logs, paths, spawn
from hisho.core.errors import EngineError, UserError

log = logging.getLogger("hisho.cli.main")

Handler = Callable[[argparse.Namespace], int]


# ----- generate ----------------------------------------------------------------------------------------


def cmd_generate(args: argparse.Namespace) -> int:
    from hisho.core import services
    from hisho.core.engine.protocol import Sampling

    app = services.build(args.model, "generate", n_ctx=args.n_ctx, override=args.force)
    sampling = Sampling(temperature=args.temperature, seed=args.seed, max_tokens=args.max_tokens)
    messages = [{"role": "user", "content": args.prompt}]
    try:
        app.load()
        client = app.engine
        start = time.perf_counter()
        stream = client.generate(messages=messages, sampling=sampling)
        first = last = 0.0
        for ev in stream:
            last = time.perf_counter()
            if not first:
                first = last
            if not args.json:
                sys.stdout.write(ev["text"])
                sys.stdout.flush()
        result = stream.result
        assert result is not None
    finally:
        app.close()
    n = result.completion_tokens
    out = {
        "text": result.text,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": n,
        "ttft_s": (first - start) if first else None,
        "tokens_per_s": (n - 1) / (last - first) if n > 1 and last > first else 0.0,
        "stop_reason": result.stop_reason,
        "model": str(app.model_path),
        "model_id": app.model_name.id,
    }
    if args.json:
        emit_json(out)
    else:
        sys.stdout.write("\n")
    return EXIT_OK




# ----- bench ------------------------------------------------------------------------------------------


def _busy_count(text: str) -> int:
    """``--background N``: 0 to 64 busy processes."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of busy processes, got {text!r}") from None
    if not 0 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{n} busy processes: use 0 to 64")
    return n


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    module = importlib.import_module(f"hisho.bench.{args.which.replace('-', '_')}")
    if args.repeat is None:
        args.repeat = REPEAT_DEFAULT.get(args.which, 3)
    result: dict[str, Any] = module.run(args)
    if args.json:
        emit_json(result)
    else:
        for key, value in result.items():
            if not isinstance(value, (list, dict)):
                sys.stdout.write(f"{key:28s} {value}\n")
    return EXIT_OK


# A decode run is seconds long and its rate moves by 5-10 % from one run to the next on a busy 2-core laptop: the
# median of 3 paired ratios moved by as much, 6 keep it within ~2 % (docs/speed.md). Other benches' runs are
# minutes long.
REPEAT_DEFAULT = {"decode": 6}

BENCHES = ("decode", "resume", "summarize", "plan", "hub", "api", "remote", "identity", "soak", "peers", "reasoning",
           "speed", "peers-resume", "agent", "tools")


# ----- self-test --------------------------------------------------------------------------------------


def cmd_self_test(args: argparse.Namespace) -> int:
    from hisho.cli import selftest

    report = selftest.run(args)
    if args.json:
        emit_json(report)
    else:
        for step in report["steps"]:
            mark = "ok  " if step["ok"] else "FAIL"
            detail = step.get("error") or ", ".join(f"{k}={v}" for k, v in step.items()
                                                    if k not in ("step", "ok", "seconds"))
            sys.stdout.write(f"{mark} {step['step']:10s} {step['seconds']:7.3f}s  {detail}\n")
    return EXIT_OK if report["ok"] else EXIT_INTERNAL


# ----- gui --------------------------------------------------------------------------------------------


def cmd_gui(args: argparse.Namespace) -> int:
    try:
        from hisho.gui.shell.app import run_app
    except ImportError as exc:
        return fail(f"the window needs PySide6 ({exc}); the command line works without it", EXIT_INTERNAL)
    return run_app(model=getattr(args, "model", None))


def _bring_forward(running: instance.AlreadyRunning, model: str | None) -> bool:
    """A second window launch: bring the first window forward (hisho.gui.shell.single). False when the folder is held
    by a terminal chat, PySide6 is missing or the window did not answer (the caller then refuses as before)."""
    if running.role not in ("gui", ""):
        return False
    try:
        from hisho.gui.shell.single import hand_over
    except ImportError:
        return False
    if not hand_over(running.folder, model):
        return False
    log.info("the running window (process %s) was brought to the front", running.pid)
    if sys.stderr is not None:
        sys.stderr.write(f"hisho: Hisho is already open (process {running.pid}); its window was brought to the "
                         "front\n")
    return True


# ----- parser -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hisho", description="Local LLM app: chat, plan, summarize, bench.")
    parser.add_argument("--version", action="version", version=f"hisho {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("gui", help="open the window (the default)")
    p.add_argument("--model", help="model store name or GGUF path")
    p.set_defaults(func=cmd_gui)

    p = sub.add_parser("generate", help="one chat turn")
    p.add_argument("prompt")
    p.add_argument("--model", help="model store name or GGUF path (default: the bundled model)")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=-1)
    p.add_argument("--n-ctx", type=int, default=None, help="context length (default: settings)")
    p.add_argument("--force", action="store_true", help="load even if the memory plan says it will not fit")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("bench", help="side-by-side benchmarks (ratios in JSON)")
    p.add_argument("which", choices=BENCHES)
    p.add_argument("--tokens", type=int, default=None, help="tokens to generate / build (bench-specific)")
    p.add_argument("--repeat", type=int, default=None,
                   help="interleaved repetitions (median reported; default 6 for decode, else 3)")
    p.add_argument("--cold", action="store_true", help="resume: drop the KV files from the page cache first")
    p.add_argument("--image", action="store_true",
                   help="resume: the conversation holds an image (a model with its projector; default "
                        "shape:llava-smollm2): restored without encoding it again")
    p.add_argument("--kv-type", choices=("f16", "q8_0"), default=None, help="resume, plan --profiles: KV cache type")
    p.add_argument("--background", type=_busy_count, default=0, metavar="N",
                   help="decode, resume: also measure beside N busy processes (other programs using the CPU)")
    p.add_argument("--model", help="model store name or GGUF path (default: the bundled model); reasoning: a "
                                   "chat template file (.jinja)")
    p.add_argument("--gpu-layers", type=int, default=None, metavar="N",
                   help="decode: layers to offload (default: what the plan says)")
    p.add_argument("--cpu-python", default=None, metavar="PYTHON",
                   help="decode: also read the long prompt on an engine run by this interpreter (the CPU build's "
                        "venv beside a GPU build), taken in turns: prompt_vs_cpu_build")
    p.add_argument("--matrix", action="store_true",
                   help="plan: every generated true-shape model x quant x 2 contexts x f16/q8_0 KV")
    p.add_argument("--only", help="plan --matrix: a subset, e.g. llama-3.2-1b:Q4_0,gemma-3-1b; --kept also "
                                  "takes cells, e.g. granite-4.0-h-1b@8192/f16; peers: one configuration "
                                  "(defaults or matched)")
    p.add_argument("--kept", action="store_true",
                   help="plan --matrix: sliding-window and hybrid shapes, the peak with the engine's checkpoints "
                        "and one KV save + restore")
    p.add_argument("--profiles", action="store_true",
                   help="plan: each front end's plan (window, serve --parallel 2, generate, summarize) against its "
                        "own load's peak, on the 1B, 3B and Gemma-3-270M files (--only picks, e.g. gemma-3-270m@serve)")
    p.add_argument("--fa-both", action="store_true",
                   help="plan: measure f16 cells with flash attention on AND off (default: as the plan loads them)")
    p.add_argument("--quick", action="store_true", help="peers, peers-resume, agent: tiny sizes (a smoke run)")
    p.add_argument("--minutes", type=float, default=None, help="soak: how long the clients run (default 2)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("self-test", help="prove the installation works (what the packaged app runs)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_self_test)

    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[Any], None]]:
    """Feature modules add their sub-commands here (each exposes ``register(subparsers)``)."""
    from hisho.cli.chat import register as register_chat
    from hisho.cli.models import register as register_models
    from hisho.cli.plan import register as register_plan
    from hisho.cli.serve import register as register_serve
    from hisho.cli.summarize import register as register_summarize

    return [register_summarize, register_plan, register_chat, register_models, register_serve]


def run_child(role: str, args: list[str]) -> int:
    """The entry point of a child role (``hisho.core.spawn.ROLES``) when the bundle's binary is the child."""
    if role == "engine":
        from hisho.engine.server import main as engine_main

        return engine_main()
    if role == "download":
        from hisho.core.hub.child import main as download_main

        return download_main(args)
    if role in ("kept-probe", "attention-probe"):  # measurement children with a main(args) of their own
        import importlib

        return int(importlib.import_module(spawn.ROLES[role]).main(args))
    from hisho.engine.measure.probe import main as probe_main

    return probe_main(args)


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    child = spawn.child_role(raw)
    if child is not None:  # a frozen bundle re-started as one of its own children (hisho.core.spawn)
        return run_child(*child)
    parser = build_parser()
    args = parser.parse_args(argv)
    paths.protect()  # before the log file or anything else is written: nothing of the user's readable by others
    logs.setup(stderr_level=logging.INFO if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        args = parser.parse_args(["gui", *(argv if argv is not None else sys.argv[1:])])
    try:
        if args.command in (None, "gui", "chat"):  # the two that write conversations: one per data folder
            try:
                instance.acquire(role="chat" if args.command == "chat" else "gui")
            except instance.AlreadyRunning as running:
                if args.command == "chat" or not _bring_forward(running, getattr(args, "model", None)):
                    raise
                return EXIT_OK
        code: int = args.func(args)
        return code
    except UserError as exc:
        return fail(str(exc), EXIT_BAD_INPUT)
    except EngineError as exc:
        log.exception("engine error")
        return fail(f"engine: {exc}", EXIT_INTERNAL)
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        log.exception("internal error")
        return fail(f"internal error: {type(exc).__name__}: {exc} (details in the log)", EXIT_INTERNAL)


if __name__ == "__main__":
    sys.exit(main())
