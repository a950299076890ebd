"""The vision projector that comes with a hub model (docs/hub.md "Vision models"): where it is saved and whether
it fits the model, checked from both headers by HTTP range requests before any byte of the download moves.

Rules of use: ``check`` blocks on the network (a few MiB at most); the download runs it on its own thread.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hisho.core.errors import UserError
from hisho.core.hub.errors import hub_call
from hisho.core.models.projector_facts import ProjectorFacts, mismatch, projector_from_ranges

log = logging.getLogger("hisho.hub")


def saved_name(model_part: str) -> str:
    """The projector's file name beside the model whose first part is ``model_part``: ``<stem>.mmproj.gguf``,
    the name ``hisho.core.models.projector.projector_for`` looks for."""
    return Path(model_part).name.removesuffix(".gguf") + ".mmproj.gguf"


def _filesystem() -> Any:
    """An HfFileSystem on the current endpoint and token (fsspec caches instances by their arguments: one made
    for another endpoint must not answer)."""
    from huggingface_hub import HfFileSystem

    from hisho.core.hub.errors import endpoint
    from hisho.core.hub.token import get_token

    return HfFileSystem(endpoint=endpoint(), token=get_token(), skip_instance_cache=True)


def hub_projector_facts(repo: str, path: str, revision: str = "", fs: Any = None) -> ProjectorFacts:
    """The header facts of projector ``path`` in ``repo``, read by ranges."""
    fs = fs or _filesystem()
    where = f"{repo}@{revision}/{path}" if revision else f"{repo}/{path}"
    with hub_call(f"{repo} projector {path}"):
        size = int(fs.info(where)["size"])

    def fetch(start: int, end: int) -> bytes:
        with hub_call(f"{repo} projector {path}"):
            return bytes(fs.cat_file(where, start=start, end=end))

    return projector_from_ranges(fetch, size, source=f"hf:{repo}/{path}")


def check(repo: str, model: str, projector: str, revision: str = "") -> ProjectorFacts:
    """The projector's facts when it fits the model; UserError with the reason when it does not."""
    from hisho.core.models.gguf_hub import read_hub_facts

    fs = _filesystem()
    facts = read_hub_facts(repo, model, revision=revision or None, fs=fs)
    proj = hub_projector_facts(repo, projector, revision, fs=fs)
    why = mismatch(proj, facts.n_embd, Path(model).name)
    if why:
        raise UserError(f"the projector was refused: {why}. Download the model without it "
                        f"(hisho models pull {repo}:{Path(model).name} --no-projector) for text only")
    log.info("projector %s fits %s (%s, %d tokens an image)", projector, model, proj.projector_type,
             proj.image_tokens)
    return proj
