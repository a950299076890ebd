"""A chat's images on disk: each image a user attaches is checked (``hisho.core.images.prepare``) and kept as a
plain PNG in the data folder's ``images/``, named by its content's hash, so the same picture is one file; the
user message keeps the names (``Message.images``, a JSON list). No Qt.

Rules of use:
- ``keep(data)`` checks and stores image bytes from outside (a pasted or dropped picture) and returns its name;
  it raises ``hisho.core.images.ImageError`` (one clear line) for an image Hisho will not take.
- ``names(message)`` reads a message's list; ``path(name)`` is where the file is (a name that is not one this
  module made is refused, so a damaged row can never point outside the folder).
- ``parts(text, names)``: the engine's content for a user message with images (``{"type": "image", "path": …}``
  parts, then the text), as the API's image parts are; the engine reads only files inside the data folder. On a
  model that cannot see (``seeing=False``) each picture is a line of text saying so.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from hisho.core import paths
from hisho.core.images import prepare

NAME = re.compile(r"[0-9a-f]{32}\.png")


def folder() -> Path:
    out = paths.data_dir() / "images"
    out.mkdir(parents=True, exist_ok=True)
    return out


def keep(data: bytes) -> str:
    """Check ``data`` and store it as a plain PNG; its name (the same picture twice: the same name)."""
    png = prepare(data).png
    name = hashlib.sha256(png).hexdigest()[:32] + ".png"
    target = folder() / name
    if not target.exists():
        tmp = target.with_suffix(".part")
        tmp.write_bytes(png)
        tmp.replace(target)
    return name


def path(name: str) -> Path:
    if not NAME.fullmatch(name):
        raise ValueError(f"not an image name: {name!r}")
    return folder() / name


def names(images: str) -> list[str]:
    """A message's ``images`` column as names ('' or damaged JSON: none)."""
    try:
        value = json.loads(images) if images else []
    except ValueError:
        return []
    return [n for n in value if isinstance(n, str) and NAME.fullmatch(n)] if isinstance(value, list) else []


UNSEEN = "[a picture the current model cannot see]"


def parts(text: str, image_names: list[str], seeing: bool = True) -> str | list[dict[str, Any]]:
    """A user message's content for the engine: its images, then its text. For a model without a projector
    (``seeing`` False: a chat with pictures continued on a text-only model) each picture is a line saying so,
    so the chat goes on and the model knows something was there."""
    if not seeing:
        return "\n".join([UNSEEN] * len(image_names) + [text])
    out: list[dict[str, Any]] = [{"type": "image", "path": str(path(n))} for n in image_names]
    return out + [{"type": "text", "text": text}]
