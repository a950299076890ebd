"""``hisho models``: the model store and the Hugging Face hub from the command line.

    hisho models list [--json]                 name, path, arch, quant, size_bytes, n_ctx_train, source, base_model
    hisho models search TEXT [--sort S] [--page N] [--json]
    hisho models files REPO [--ram-gib X] [--json]   GGUF files grouped by quant, each with its fit verdict
    hisho models pull REPO[:FILE]              progress on a terminal; Ctrl+C pauses, the same command resumes
    hisho models downloads [--json]            unfinished downloads
    hisho models import PATH [--name N] [--copy | --link]
    hisho models rm NAME                       its KV snapshots go too, unless another entry is the same file
    hisho models token [--clear]               store a Hugging Face token (read from stdin, never echoed)
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from hisho.core.units import GIB, MIB

ACTIONS = ("list", "search", "files", "pull", "downloads", "import", "rm", "token")


def register(sub: Any) -> None:
    p = sub.add_parser("models", help="model store and hub: " + " | ".join(ACTIONS))
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("target", nargs="?", help="search text, REPO, REPO[:FILE], a path or a model name")
    p.add_argument("--name", help="name for an imported model")
    p.add_argument("--copy", action="store_true", help="import: copy the file into the models folder")
    p.add_argument("--link", action="store_true", help="import: link the file from the models folder")
    p.add_argument("--sort", choices=("downloads", "likes", "updated"), default="downloads")
    p.add_argument("--page", type=int, default=0, help="search: page number (20 results a page)")
    p.add_argument("--ram-gib", type=float, default=None, help="files: judge fit as if the machine had this RAM")
    p.add_argument("--clear", action="store_true", help="token: forget the stored token")
    p.add_argument("--no-projector", action="store_true",
                   help="pull: leave a vision model's projector (mmproj) behind: the model reads text only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)


def _emit(data: Any) -> None:
    from hisho.cli.output import emit_json

    emit_json(data)


def _out(text: str) -> None:
    sys.stdout.write(text + "\n")


def cmd_models(args: argparse.Namespace) -> int:
    from hisho.core.errors import UserError

    action = args.action
    if action in ("search", "files", "pull", "import", "rm") and not args.target:
        raise UserError(f"'models {action}' needs an argument")
    handler = {"list": _list, "search": _search, "files": _files, "pull": _pull, "downloads": _downloads,
               "import": _import, "rm": _rm, "token": _token}[action]
    return handler(args)


def _list(args: argparse.Namespace) -> int:
    from hisho.core.models.names import entry_name
    from hisho.core.models.projector import projector_for
    from hisho.core.models.store import is_base_model
    from hisho.core.services import open_models

    entries = open_models().list()
    base = {e.name for e in entries if is_base_model(e.path)}
    eyes = {e.name: str(p) for e in entries if (p := projector_for(e.path)) is not None}
    if args.json:
        _emit([{**e.to_dict(), "id": entry_name(e).id, "display_name": entry_name(e).display,
                "base_model": e.name in base, "projector": eyes.get(e.name, "")} for e in entries])
        return 0
    for e in entries:
        mark = "  base model (no chat template: plain completion)" if e.name in base else ""
        mark += "  sees images" if e.name in eyes else ""
        _out(f"{entry_name(e).display:40s} {e.arch or '?':10s} {e.quant or '?':8s} {e.size / MIB:9.1f} MiB  "
             f"ctx {e.n_ctx_train or '?':>7}  {e.source}{mark}")
    return 0


def _search(args: argparse.Namespace) -> int:
    from hisho.core.hub import search

    if args.page < 0:
        from hisho.core.errors import UserError

        raise UserError("--page must be 0 or more")
    rows = search(args.target, sort=args.sort, page=args.page)
    if args.json:
        _emit([r.to_dict() for r in rows])
        return 0
    for r in rows:
        _out(f"{r.repo:60s} {r.downloads:>10,} downloads {r.likes:>6,} likes"
             f"{'  (gated)' if r.gated else ''}")
    if not rows:
        _out("no GGUF repositories match")
    return 0


def _budget(ram_gib: float | None) -> tuple[Any, dict[str, Any]]:
    from hisho.core import machine as machine_mod
    from hisho.core import settings as settings_mod
    from hisho.core.planner import check_budget

    s = settings_mod.load()
    machine = machine_mod.detect()
    budget = check_budget(machine, ram_gib, None, None)
    return budget, {"min_ctx": int(s["min_ctx"]), "target_ctx": max(int(s["n_ctx"]), int(s["min_ctx"])),
                    "n_batch": int(s["n_batch"]), "machine": machine}


def _files(args: argparse.Namespace) -> int:
    from hisho.core.hub import fit_files, repo_files

    files = repo_files(args.target)
    budget, opts = _budget(args.ram_gib)
    fits = fit_files(files, budget, calibrate=True, **opts)
    if args.json:
        _emit([f.to_dict() for f in fits])
        return 0
    for f in fits:
        mark = "*" if f.recommended else " "
        parts = f" ({len(f.file.parts)} parts)" if len(f.file.parts) > 1 else ""
        _out(f"{mark} {f.file.quant:8s} {f.file.size / GIB:7.2f} GiB  {f.label:9s}  {f.file.name}{parts}")
        if f.file.mmproj:
            _out(f"    sees images: projector {f.file.mmproj} ({f.file.mmproj_size / MIB:,.0f} MiB, downloaded with it)")
        _out(f"    {f.why}")
    if not fits:
        _out("no GGUF files in this repository")
    return 0


class _Bar:
    """A one-line progress bar on stderr (only on a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, p: Any) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if now - self.last < 0.2 and p.done < p.total:
            return
        self.last = now
        pct = 100 * p.done / p.total if p.total else 0
        width = 30
        fill = int(width * pct / 100)
        eta = f"{int(p.eta_s) // 60}:{int(p.eta_s) % 60:02d}" if p.eta_s is not None else "--:--"
        unit, div = ("GiB", GIB) if p.total >= GIB else ("MiB", MIB)
        sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {pct:5.1f}%  {p.done / div:.2f}/"
                         f"{p.total / div:.2f} {unit}  {p.speed / MIB:6.1f} MiB/s  ETA {eta} ")
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def _pull(args: argparse.Namespace) -> int:
    from hisho.core.hub import fit_files, pull
    from hisho.core.hub.download import resolve_spec
    from hisho.core.services import open_downloads, open_models

    def choose(files: list[Any]) -> Any:
        budget, opts = _budget(None)
        best = next(f for f in fit_files(files, budget, calibrate=True, **opts) if f.recommended)
        sys.stderr.write(f"hisho: {args.target} has {len(files)} models; taking {best.file.name}: {best.why}\n")
        return best.file

    bar = _Bar()
    downloads = open_downloads(open_models())
    try:
        entry = pull(args.target, downloads, progress=bar, choose=choose,
                     with_projector=not args.no_projector)
    except KeyboardInterrupt:
        bar.end()
        repo, _ = resolve_spec(args.target)
        done = [j for j in downloads.jobs() if j.repo == repo and j.state == "paused"]
        got = f" ({done[-1].done_bytes / MIB:,.0f} MiB kept)" if done else ""
        sys.stderr.write(f"hisho: download paused{got}; run the same command again to continue\n")
        return 130
    bar.end()
    if args.json:
        _emit(entry.to_dict())
    else:
        _out(f"downloaded {entry.name} ({entry.path}), sha256 verified")
    return 0


def _downloads(args: argparse.Namespace) -> int:
    from hisho.core.services import open_downloads, open_models

    jobs = open_downloads(open_models()).unfinished()
    if args.json:
        _emit([j.to_dict() for j in jobs])
        return 0
    for j in jobs:
        pct = 100 * j.done_bytes / j.size if j.size else 0
        _out(f"#{j.id} {j.spec}  {j.state}  {pct:.0f}% of {j.size / GIB:.2f} GiB  {j.error}")
    if not jobs:
        _out("no unfinished downloads")
    return 0


def _import(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hisho.core.services import open_models

    entry = open_models().add(Path(args.target), name=args.name, copy=args.copy, link=args.link)
    if args.json:
        _emit(entry.to_dict())
    else:
        _out(f"imported {entry.name} ({entry.path})")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from hisho.core.models.removal import remove_model
    from hisho.core.services import open_models

    store = open_models()
    entry = store.get(args.target)
    done = remove_model(args.target, store)
    if args.json:
        _emit({**(entry.to_dict() if entry else {}), **done.to_dict()})
    else:
        _out(done.done_line())
    return 0


def _token(args: argparse.Namespace) -> int:
    import getpass

    from hisho.core.errors import UserError
    from hisho.core.hub import token

    if args.clear:
        token.clear_token()
        _out("Hugging Face token forgotten")
        return 0
    value = getpass.getpass("Hugging Face token: ") if sys.stdin.isatty() else sys.stdin.readline()
    if not value.strip():
        raise UserError("no token given")
    where = token.set_token(value)
    _out(f"token {token.masked(value.strip())} stored in {where}")
    return 0
