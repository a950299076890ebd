"""Images are untrusted input (hisho.core.images): bombs, huge, truncated, SVG and animated files are refused
with a clear message before they cost time or memory; EXIF orientation and transparency are honoured."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from hisho.core import images
from hisho.core.images import ImageError, prepare


def _save(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` × ``height`` and holds a small zlib stream of zeros (a decompression bomb's
    shape: tiny on disk, huge once inflated)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"\0" * (1 + 3 * width) * 64, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def _refused(data: bytes, words: str) -> None:
    with pytest.raises(ImageError) as info:
        prepare(data)
    assert words in str(info.value)


def test_a_plain_png_comes_back_as_rgb_png() -> None:
    out = prepare(_save(Image.new("RGB", (40, 30), (1, 2, 3)), "PNG"))
    img = Image.open(io.BytesIO(out.png))
    assert (img.format, img.mode, img.size) == ("PNG", "RGB", (40, 30))
    assert img.getpixel((0, 0)) == (1, 2, 3)


def test_a_20000_square_png_is_refused_unread() -> None:
    _refused(_png_header_only(20_000, 20_000), "million in all")
    _refused(_png_header_only(13_000, 100), "13000 × 100 pixels")


def test_a_bomb_within_the_side_limit_is_refused_by_its_pixel_count() -> None:
    _refused(_png_header_only(11_000, 11_000), "million in all")


def test_a_truncated_jpeg_is_refused() -> None:
    whole = _save(Image.effect_noise((256, 256), 64).convert("RGB"), "JPEG", quality=90)
    _refused(whole[: len(whole) // 2], "damaged or cut short")


def test_svg_is_refused() -> None:
    _refused(b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', "SVG")


def test_an_animated_gif_is_refused() -> None:
    frames = [Image.new("RGB", (20, 20), (80 * i, 0, 0)) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100)
    _refused(buf.getvalue(), "animated")


def test_too_many_bytes_and_not_an_image() -> None:
    _refused(b"\0" * (images.MAX_BYTES + 1), "MiB")
    _refused(b"hello, this is text", "not an image")
    _refused(b"", "empty")


def test_exif_orientation_is_honoured() -> None:
    img = Image.new("RGB", (40, 20), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    out = prepare(_save(img, "JPEG", exif=exif.tobytes()))
    assert (out.width, out.height) == (20, 40)


def test_transparency_is_laid_on_white_and_large_images_scaled_down() -> None:
    out = prepare(_save(Image.new("RGBA", (3000, 1000), (0, 0, 0, 0)), "PNG"))
    img = Image.open(io.BytesIO(out.png))
    assert img.mode == "RGB" and img.getpixel((5, 5)) == (255, 255, 255)
    assert img.size == (images.OUT_SIDE, 683)
