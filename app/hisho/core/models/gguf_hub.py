"""GGUF facts of a file that can only be read by ranges: a file on the Hugging Face hub, before any download.

``read_hub_facts(repo, filename)`` fetches the header with HTTP range requests (huggingface_hub's HfFileSystem; the
weights are never read) and gives the same ``ModelFacts`` as ``gguf_facts.read_facts`` of the downloaded file;
the header's bytes are kept (``hub_header_path``) for the planner's dry run. ``list_hub_ggufs`` names a
repository's GGUF files. Failures (no such file, network down, a damaged header) raise ``ModelFileError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from hisho.core.errors import ModelFileError
from hisho.core.models import gguf_header
from hisho.core.models.gguf_facts import FACTS_VERSION, ModelFacts, facts_from_reader

log = logging.getLogger("hisho.planner")

HEADER_FIRST_FETCH = 1 << 20
HEADER_MAX_FETCH = 256 << 20  # a 256k-token vocabulary with merges stays well under this


def facts_from_ranges(fetch: Any, size: int, *, source: str) -> ModelFacts:
    """Facts of a GGUF file of ``size`` bytes that can only be read by ranges: ``fetch(start, end)`` returns
    bytes ``[start, end)``. Fetches 1 MiB, then 4x more until the whole header is in hand (the header walk
    stops with "cut short" otherwise); the weights are never read."""
    return header_from_ranges(fetch, size, source=source)[0]


def header_from_ranges(fetch: Any, size: int, *, source: str) -> tuple[ModelFacts, bytes]:
    """``facts_from_ranges`` and the header's bytes (up to the tensor data): what a dry run of the file needs."""
    want = min(HEADER_FIRST_FETCH, size)
    while True:
        data = fetch(0, want)
        if data[:4] != b"GGUF":
            raise ModelFileError(f"not a GGUF model file (wrong magic bytes): {source}")
        try:
            header = gguf_header.parse(data)
        except gguf_header.HeaderError as exc:
            if want >= size or want >= HEADER_MAX_FETCH:
                raise ModelFileError(f"GGUF header is damaged or truncated ({exc}): {source}") from None
            want = min(size, want * 4)
            continue
        head = bytes(data[:header.data_offset])
        if len(head) < header.data_offset:  # the walk ended inside the last fetch, its alignment padding after it
            head = bytes(fetch(0, header.data_offset))
        facts = facts_from_reader(header, source=source, file_size=size)
        return replace(facts, header_sha=hashlib.sha256(head).hexdigest()), head


def read_hub_facts(repo: str, filename: str, *, revision: str | None = None, fs: Any = None) -> ModelFacts:
    """Facts of ``filename`` in hub repository ``repo`` by HTTP range requests (huggingface_hub's HfFileSystem).
    ``fs`` may be any object with fsspec's ``info(path)`` and ``cat_file(path, start, end)`` (tests pass a local
    fake). Results are cached per repo, file and size in paths.cache_dir()/hub_headers."""
    from hisho.core import paths

    if fs is None:
        from huggingface_hub import HfFileSystem

        fs = HfFileSystem()
    path = f"{repo}@{revision}/{filename}" if revision else f"{repo}/{filename}"
    try:
        size = int(fs.info(path)["size"])
    except FileNotFoundError:
        raise ModelFileError(f"no file {filename} in hub repository {repo}") from None
    except Exception as exc:  # network down, auth, hub errors: one line for the user
        raise ModelFileError(f"cannot read {filename} from the hub ({type(exc).__name__}: {exc})") from None
    cache = paths.cache_dir() / "hub_headers" / re.sub(r"[^A-Za-z0-9._-]+", "_", f"{path}-{size}-v{FACTS_VERSION}")
    facts_file = cache.with_suffix(".json")
    if facts_file.is_file():
        try:
            facts = ModelFacts.from_dict(json.loads(facts_file.read_text(encoding="utf-8")))
            if hub_header_path(facts).is_file():
                return facts
        except (OSError, ValueError, TypeError):
            log.warning("hub header cache %s unreadable; fetching again", facts_file)

    def fetch(start: int, end: int) -> bytes:
        return bytes(fs.cat_file(path, start=start, end=end))

    facts, head = header_from_ranges(fetch, size, source=f"hf:{repo}/{filename}")
    facts_file.parent.mkdir(parents=True, exist_ok=True)
    hub_header_path(facts).write_bytes(head)  # for the dry run of the file before it is downloaded
    facts_file.write_text(json.dumps(facts.to_dict()), encoding="utf-8")
    return facts


def hub_header_path(facts: ModelFacts) -> Path:
    """Where ``read_hub_facts`` keeps the header bytes of a hub file (by their digest)."""
    from hisho.core import paths

    return paths.cache_dir() / "hub_headers" / f"{facts.header_sha or 'unknown'}.head"


def list_hub_ggufs(repo: str, *, fs: Any = None) -> list[str]:
    """GGUF file names in a hub repository (projector files for vision models left out)."""
    if fs is None:
        from huggingface_hub import HfFileSystem

        fs = HfFileSystem()
    try:
        names = [str(p).split("/", 2)[-1] for p in fs.glob(f"{repo}/**/*.gguf")]
    except Exception as exc:  # network down, no such repo
        raise ModelFileError(f"cannot list hub repository {repo} ({type(exc).__name__}: {exc})") from None
    return sorted(n for n in names if "mmproj" not in n.lower())
