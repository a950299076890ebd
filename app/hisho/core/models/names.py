"""A model's one identity and one display name, for every screen, command and the API.

The identity is the model store's id (``ModelEntry.name``); a file opened by path that is not in the store is
known by its file stem. Every place that names the loaded model says ``ModelName.display`` (the model menu,
the chat header, the status bar, the Models and Engines pages, ``hisho models list``), and the API lists
``ModelName.id``. A request may name the model by any of ``aliases`` (id, display name, file stem): people
copy whichever they see. A model on a remote engine is named as its server names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hisho.core.models.store import ModelEntry, ModelStore


@dataclass(frozen=True)
class ModelName:
    id: str
    display: str
    stem: str = ""

    def aliases(self) -> frozenset[str]:
        return frozenset(n for n in (self.id, self.display, self.stem) if n)

    def accepts(self, requested: str) -> bool:
        """Whether a request naming ``requested`` means this model (exact, or ignoring case and a ``.gguf``)."""
        wanted = requested.strip()
        folded = wanted.lower().removesuffix(".gguf")
        return wanted in self.aliases() or folded in {a.lower() for a in self.aliases()}


NO_MODEL = ModelName("", "")


def name_of(path: str | Path | None, store: ModelStore) -> ModelName:
    """The name of the model in file ``path`` (None: no model), as registry ``store`` knows it."""
    if path is None or not str(path):
        return NO_MODEL
    file = Path(path)
    entry = store.find_path(file)
    return ModelName(file.stem, file.stem, file.stem) if entry is None else entry_name(entry)


def entry_name(entry: ModelEntry) -> ModelName:
    """The name of a store entry. The display name is the id's own words, so that a name seen anywhere (the
    menu, the header, ``hisho models list``) can be typed anywhere (``--model``, the API's ``model``)."""
    return ModelName(entry.name, entry.name, Path(entry.path).stem)


def remote_name(model: str, engine: str) -> ModelName:
    """A model served by remote engine ``engine``: its server's id, shown with the engine's name."""
    return ModelName(model, f"{model} · {engine}", Path(model).stem)
