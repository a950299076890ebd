"""OpenAI ``image_url`` message parts on ``/v1/chat/completions`` (docs/images.md). No Qt.

Rules of use:
- ``image_part(part, where)`` turns one part into the engine's ``{"type": "image", "data": <base64 PNG>}``:
  only ``data:`` URLs are taken (the server fetches nothing: an ``http(s)`` URL is a 400 that says so), and the
  bytes go through ``hisho.core.images.prepare`` (limits before decoding, a plain RGB PNG out). Every refusal is
  an ``ApiError`` 400 naming the part.
- ``base64_part(data, where)``: the same from base64 bytes (Anthropic's ``source.type == "base64"`` blocks);
  ``data_url_part(url, where, param)``: from a data URL (Responses' ``input_image``). The parts made here are
  ``ImagePart`` (a dict subclass no JSON body can produce): ``shapes.parse_chat`` passes them through as checked;
  a plain ``{"type": "image"}`` dict from a client is refused there.
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


class ImagePart(dict[str, Any]):
    """An engine image part this server made from a checked image (``core.images.prepare``)."""


def image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """An ``{"type": "image_url", "image_url": {"url": ...}}`` part (or ``"image_url": "<url>"``) as the
    engine's image part. ``where``: the part's place in the body, for errors."""
    if isinstance(part, ImagePart):
        return part
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    return data_url_part(url, f"{where}.image_url", f"{where}.image_url")


def data_url_part(url: Any, where: str, param: str) -> ImagePart:
    """A ``data:image/...;base64,`` URL as the engine's image part; ``http(s)`` URLs are refused (nothing is
    fetched)."""
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where} must be a data: URL", param=param)
    if url.startswith(("http://", "https://")):
        raise ApiError(400, f"{where}: image URLs are not fetched (fetching is off); send the image as a "
                            "data: URL (data:image/png;base64,...)", param=param)
    if not url.startswith("data:"):
        raise ApiError(400, f"{where} must be a data: URL", param=param)
    if len(url) > MAX_URL_CHARS:
        raise ApiError(400, f"{where}: the image is over {MAX_BYTES >> 20} MiB", param=param)
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64") or not head[5:].startswith("image/"):
        raise ApiError(400, f"{where}: expected data:image/<type>;base64,<data>", param=param)
    return base64_part(payload, where, param)


def base64_part(payload: Any, where: str, param: str) -> ImagePart:
    """Base64 image bytes (PNG, JPEG, WebP, GIF's first frame refused as core.images says) as the engine's
    image part."""
    if not isinstance(payload, str) or not payload:
        raise ApiError(400, f"{where}: the image's base64 data is missing", param=param)
    if len(payload) > MAX_URL_CHARS:
        raise ApiError(400, f"{where}: the image is over {MAX_BYTES >> 20} MiB", param=param)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: the image's base64 data is not valid", param=param) from None
    try:
        png = prepare(data).png
    except ImageError as exc:
        raise ApiError(400, f"{where}: {exc}", param=param) from None
    return ImagePart(type="image", data=base64.b64encode(png).decode("ascii"))


def stored_parts(content: Any) -> Any:
    """A message's content read back from this server's own store: its image parts (checked when they came in)
    as ``ImagePart`` again."""
    if not isinstance(content, list):
        return content
    return [ImagePart(p) if isinstance(p, dict) and p.get("type") == "image" and isinstance(p.get("data"), str)
            else p for p in content]


def text_chars(content: str | list[dict[str, Any]]) -> int:
    """A message content's characters of text (an image's tokens are the engine's to count)."""
    if isinstance(content, str):
        return len(content)
    return sum(len(p.get("text") or "") for p in content if p.get("type") == "text")
