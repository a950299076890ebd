"""``hisho serve``: the local OpenAI-compatible API on loopback (hisho.api), from the same composition root as the
window. Prints the URL and where the key is; runs until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

log = logging.getLogger("hisho.cli.main")

DEFAULT_PARALLEL = 4


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n}: use 0 (any free port) to 65535")
    return n


def _parallel(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of sequences, got {text!r}") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"{n} parallel sequences: use 1 to 64")
    return n


def _seconds(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole seconds, got {text!r}") from None
    if not 1 <= n <= 3600:
        raise argparse.ArgumentTypeError(f"{n} s: use 1 to 3600")
    return n


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="OpenAI-compatible API and Anthropic's Messages API on 127.0.0.1 (same "
                                     "engine and KV store as the window)")
    p.add_argument("--port", type=_port, default=0, help="port (default: a free one, printed)")
    p.add_argument("--api-key", default=None, help="key clients must send (default: the one in Settings → API)")
    p.add_argument("--model", help="model store name or GGUF path (default: the settings' model)")
    p.add_argument("--parallel", type=_parallel, default=DEFAULT_PARALLEL,
                   help=f"requests decoded at once; more wait in order (default {DEFAULT_PARALLEL})")
    p.add_argument("--n-ctx", "--ctx", type=int, default=None,
                   help="context per request (default: the model's own choice on the Memory planner page, else "
                        "the settings' context capped at what the model was trained on)")
    p.add_argument("--force", action="store_true", help="load even if the memory plan says it will not fit")
    p.add_argument("--max-wait-s", type=_seconds, default=None,
                   help="longest a request waits while the engine works on something sent before it; then 503 "
                        "with Retry-After (default: the api_max_wait_s setting, 30)")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from hisho.api import keys
    from hisho.api.launch import build_api
    from hisho.core import settings as settings_mod
    from hisho.core.errors import UserError

    if args.api_key is not None and not args.api_key.strip():
        raise UserError("--api-key is empty")
    key = args.api_key.strip() if args.api_key else keys.api_key()
    settings = settings_mod.load()
    if args.max_wait_s is not None:  # this run only: not saved
        settings.set("api_max_wait_s", args.max_wait_s)
    app, server, per_seq = build_api(args.model, parallel=args.parallel, n_ctx=args.n_ctx, key=key,
                                     port=args.port, force=args.force, settings=settings)
    try:
        where = "given with --api-key" if args.api_key else f"in {keys.key_file()}"
        sys.stdout.write(f"hisho serve: {server.url} (model {server.backend.model_id}, {args.parallel} parallel "
                         f"sequences of {per_seq} tokens); API key {where}\n")
        sys.stdout.flush()
        server.run()
    finally:
        server.stop()
        app.close()
    return 0
