"""Images are untrusted input: checked before they are decoded, decoded within bounds, and handed to the engine
as a plain RGB PNG (docs/images.md). No Qt.

Rules of use:
- ``prepare(data)`` is the one way image bytes from outside (a dropped file, an API data URL) become what the
  engine reads. It raises ``ImageError`` (a ``UserError``: one clear line) for anything it will not take, and
  does so from the header where it can: a file over ``MAX_BYTES``, a format other than PNG, JPEG, GIF, WebP or
  BMP (an SVG is a program, not pixels), a picture over ``MAX_SIDE`` pixels a side or ``MAX_PIXELS`` in all (a
  decompression bomb declares its size in its header: refused before a byte of it is inflated), an animation,
  a truncated or damaged file.
- What comes out: the picture turned as its EXIF orientation says, transparency laid on white, scaled down to
  at most ``OUT_SIDE`` pixels a side (every projector scales further down anyway), as a PNG. The engine's
  decoder (stb_image in libmtmd) then only ever sees files Pillow wrote.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hisho.core.errors import UserError

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

log = logging.getLogger("hisho.core.images")

MAX_BYTES = 20 << 20         # a file larger than this is refused unread
MAX_SIDE = 12_000            # pixels, either side
MAX_PIXELS = 40_000_000      # pixels in all (a 40 MP photo decodes to 120 MB of RGB)
OUT_SIDE = 2048              # the longest side handed to the engine
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP")


class ImageError(UserError):
    """An image that is refused; the message says why."""


@dataclass(frozen=True)
class Prepared:
    png: bytes
    width: int      # of ``png``
    height: int
    source_format: str


def sniff(data: bytes) -> str:
    """The format by its first bytes: one of FORMATS, "SVG", or "" (unknown)."""
    head = data[:64]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head[:2] == b"BM":
        return "BMP"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<?xml", b"<svg", b"<!doctype svg")) or b"<svg" in data[:1024].lower():
        return "SVG"
    return ""


def prepare(data: bytes) -> Prepared:
    """``data`` (an image file's bytes) as a plain RGB PNG; see the module docstring."""
    if len(data) > MAX_BYTES:
        raise ImageError(f"the image is {len(data) / 2**20:.1f} MiB; the most is {MAX_BYTES >> 20} MiB")
    if not data:
        raise ImageError("the image is empty")
    kind = sniff(data)
    if kind == "SVG":
        raise ImageError("SVG drawings are not read as images; export it as PNG or JPEG")
    if not kind:
        raise ImageError(f"not an image Hisho reads (it reads {', '.join(FORMATS[:-1])} and {FORMATS[-1]})")
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        img = Image.open(io.BytesIO(data), formats=[kind])  # the header only: nothing is decoded yet
    except Image.DecompressionBombError:  # Pillow's own header check, for sizes far past ours
        raise ImageError(f"the image declares hundreds of millions of pixels; the most is {MAX_SIDE} a side and "
                         f"{MAX_PIXELS // 1_000_000} million in all") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageError(f"the {kind} image is damaged ({exc})") from None
    with img:
        width, height = img.size
        if width <= 0 or height <= 0:
            raise ImageError("the image has no pixels")
        if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
            raise ImageError(f"the image is {width} × {height} pixels; the most is {MAX_SIDE} a side and "
                             f"{MAX_PIXELS // 1_000_000} million in all")
        if getattr(img, "is_animated", False) or int(getattr(img, "n_frames", 1)) > 1:
            raise ImageError("animated images are not read; send one frame as PNG or JPEG")
        if kind == "JPEG":  # decode at a reduced scale straight away where the result is scaled down anyway
            img.draft("RGB", (OUT_SIDE, OUT_SIDE))
        try:
            img.load()
            turned = ImageOps.exif_transpose(img)
            rgb = _flatten(turned)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            raise ImageError(f"the {kind} image is damaged or cut short ({exc})") from None
    if max(rgb.size) > OUT_SIDE:
        rgb.thumbnail((OUT_SIDE, OUT_SIDE), Image.Resampling.BICUBIC, reducing_gap=2.0)
    out = io.BytesIO()
    rgb.save(out, "PNG", compress_level=1)
    return Prepared(out.getvalue(), rgb.size[0], rgb.size[1], kind)


def _flatten(img: PILImage) -> PILImage:
    """RGB pixels: transparency laid on white, every other mode converted."""
    from PIL import Image

    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        back = Image.new("RGB", rgba.size, (255, 255, 255))
        back.paste(rgba, mask=rgba.getchannel("A"))
        return back
    return img.convert("RGB") if img.mode != "RGB" else img
