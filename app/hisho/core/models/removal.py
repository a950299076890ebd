"""Deleting a model, and what goes with it: its file (when it lives in our models folder) and its saved KV
snapshots ("delete says how much space comes back and what KV snapshots go with it"). No Qt.

A snapshot belongs to a model through its fingerprint: every save records which file (path, size, xxh3-128 of
every byte; ``hisho.core.models.identity``) the fingerprint was computed from (``kv_models``,
``hisho.core.kv.index``). The model's snapshots are those whose file has this entry's identity, or was saved
from this entry's path (a file changed since: its snapshots can never be restored anyway). They are kept when
another registered model is the same file (a copy under another name loads them just as well).

Rules of use: ``plan_removal`` then, after the user agreed, ``remove_model``, both on a worker lane (the store
lane in the window: they read and write the registry and the KV index, and the identity of a file the engine
never loaded is a hash of the whole file). A file whose size no snapshot was saved from is never hashed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from hisho.core.errors import UserError
from hisho.core.kv.index import KVIndex
from hisho.core.models import identity as model_identity
from hisho.core.models.store import ModelEntry, ModelStore
from hisho.core.units import format_bytes

log = logging.getLogger("hisho.store")


@dataclass
class Removal:
    """What deleting one model entry does."""

    name: str
    path: str
    file_bytes: int                 # disk space the file gives back (0: not ours, it stays where it is)
    fingerprints: list[str] = field(default_factory=list)
    snapshots: int = 0              # saved prefixes (chats, documents, API prompts) under this model
    kv_bytes: int = 0               # their chunk files
    kept_for: str = ""              # another registered model is the same file: the snapshots stay for it

    def file_line(self) -> str:
        if self.file_bytes:
            return f"This frees {format_bytes(self.file_bytes)} of disk space."
        return f"The file stays where it is ({self.path}); only the entry is removed."

    def count(self) -> str:
        """"1 KV snapshot", "3 KV snapshots"."""
        return f"{self.snapshots} KV snapshot{'' if self.snapshots == 1 else 's'}"

    def kv_line(self) -> str:
        if not self.snapshots:
            return "No saved KV snapshots belong to it."
        what = f"{self.count()} ({format_bytes(self.kv_bytes)})"
        if self.kept_for:
            return f"Its {what} stay: {self.kept_for} is the same file."
        return f"{what} go with it."

    def message(self) -> str:
        """The confirmation text, two lines."""
        return f"{self.file_line()}\n{self.kv_line()}"

    def done_line(self) -> str:
        """What was done, one line (``hisho models rm``)."""
        freed = f", {format_bytes(self.file_bytes)} freed" if self.file_bytes else ", the file was left in place"
        kv = ""
        if self.snapshots:
            kv = (f"; its {self.count()} stay ({self.kept_for} is the same file)" if self.kept_for
                  else f"; {self.count()} ({format_bytes(self.kv_bytes)}) deleted with it")
        return f"removed {self.name} ({self.path}){freed}{kv}"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "path": self.path, "file_bytes": self.file_bytes,
                "kv_snapshots": self.snapshots, "kv_bytes": self.kv_bytes, "kv_kept_for": self.kept_for,
                "freed_bytes": self.freed_bytes()}

    def freed_bytes(self) -> int:
        return self.file_bytes + (0 if self.kept_for else self.kv_bytes)


def _entry_identity(entry: ModelEntry, sizes: set[int]) -> dict[str, object] | None:
    """The file's identity when a snapshot could belong to it (its size is one a snapshot was saved from)."""
    try:
        size = os.stat(entry.path).st_size
    except OSError:
        return None
    if size not in sizes:
        return None
    try:
        return model_identity.identity(entry.path)
    except OSError as exc:
        log.warning("identity of %s not read (%s); its KV snapshots are found by path only", entry.path, exc)
        return None


def plan_removal(name: str, store: ModelStore, index: KVIndex | None = None) -> Removal:
    """What deleting ``name`` frees and which KV snapshots go with it. Changes nothing."""
    index = index or KVIndex()
    entry = store.get(name)
    if entry is None:
        raise UserError(f"no model named {name!r} in the store")
    sizes = index.model_sizes()
    ident = _entry_identity(entry, sizes)
    real = os.path.realpath(entry.path)
    fps = index.model_fingerprints(ident, real)
    kept_for = ""
    if fps:
        for other in store.list():
            if other.name == entry.name:
                continue
            if os.path.realpath(other.path) == real or (ident is not None and _entry_identity(other, sizes) == ident):
                kept_for = other.name
                break
    n, kv_bytes = index.snapshots(fps)
    file_bytes = entry.size if entry.owned else 0
    return Removal(entry.name, entry.path, file_bytes, fps, n, kv_bytes, kept_for)


def remove_model(name: str, store: ModelStore, index: KVIndex | None = None) -> Removal:
    """Delete the entry (and its file when it is ours) and, unless another registered model is the same file,
    its KV snapshots. Returns what was done (asked again here: the KV may have changed since the question)."""
    index = index or KVIndex()
    plan = plan_removal(name, store, index)
    store.remove(name)
    if plan.fingerprints and not plan.kept_for:
        freed = index.delete_fingerprints(plan.fingerprints)
        log.info("model %s deleted with %d KV snapshots (%d bytes of KV files)", name, plan.snapshots, freed)
    return plan
