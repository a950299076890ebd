"""OpenAI ``image_url`` message parts on ``/v1/chat/completions`` (docs/images.md). No Qt.

Rules of use:
- ``image_part(part, where)`` turns one part into the engine's ``{"type": "image", "data": <base64 PNG>}``:
  only ``data:`` URLs are taken (the server fetches nothing: an ``http(s)`` URL is a 400 that says so), and the
  bytes go through ``hisho.core.images.prepare`` (limits before decoding, a plain RGB PNG out). Every refusal is
  an ``ApiError`` 400 naming the part.
- Whether the model can see images is the engine's to say (a model without a projector: 400 "this model cannot
  see images").
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from hisho.api.errors import ApiError
from hisho.core.images import MAX_BYTES, ImageError, prepare

MAX_URL_CHARS = MAX_BYTES * 4 // 3 + 1024  # a data URL of the largest image taken, base64 and its header


def image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An ``{"type": "image_url", "image_url": {"url": ...}}`` part (or ``"image_url": "<url>"``) as the
    engine's image part. ``where``: the part's place in the body, for errors."""
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where}.image_url.url must be a data: URL", param=f"{where}.image_url")
    if url.startswith(("http://", "https://")):
        raise ApiError(400, f"{where}: image URLs are not fetched (fetching is off); send the image as a "
                            "data: URL (data:image/png;base64,...)", param=f"{where}.image_url")
    if not url.startswith("data:"):
        raise ApiError(400, f"{where}.image_url.url must be a data: URL", param=f"{where}.image_url")
    if len(url) > MAX_URL_CHARS:
        raise ApiError(400, f"{where}: the image is over {MAX_BYTES >> 20} MiB", param=f"{where}.image_url")
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64") or not head[5:].startswith("image/"):
        raise ApiError(400, f"{where}: expected data:image/<type>;base64,<data>", param=f"{where}.image_url")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: the image's base64 data is not valid", param=f"{where}.image_url") from None
    try:
        png = prepare(data).png
    except ImageError as exc:
        raise ApiError(400, f"{where}: {exc}", param=f"{where}.image_url") from None
    return {"type": "image", "data": base64.b64encode(png).decode("ascii")}


def text_chars(content: str | list[dict[str, Any]]) -> int:
    """A message content's characters of text (an image's tokens are the engine's to count)."""
    if isinstance(content, str):
        return len(content)
    return sum(len(p.get("text") or "") for p in content if p.get("type") == "text")
