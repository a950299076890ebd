"""Render resources/icons/hisho.svg into what each platform wants: PNGs for the Linux icon theme, .ico for the
Windows executable and installer, .icns for the macOS app. Qt's SVG renderer draws them (no other tool needed).

    python packaging/icons.py OUT_DIR
"""

from __future__ import annotations

import os
import pathlib
import struct
import sys

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINUX_SIZES = (16, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 256)
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}


def render(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data.data())


def ico(pngs: dict[int, bytes]) -> bytes:
    """ICO with PNG-compressed images (Windows Vista and later read them at every size)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        blob = pngs[size]
        dim = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset + len(blobs))
        blobs += blob
    return header + entries + blobs


def icns(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(ICNS_TYPES[s] + struct.pack(">I", 8 + len(pngs[s])) + pngs[s] for s in sorted(pngs))
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main(out: pathlib.Path) -> int:
    _app = QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(ROOT / "resources" / "icons" / "hisho.svg"))
    if not renderer.isValid():
        sys.stderr.write("icons: resources/icons/hisho.svg is not a valid SVG\n")
        return 1
    out.mkdir(parents=True, exist_ok=True)
    pngs = {size: render(renderer, size) for size in sorted({*LINUX_SIZES, *ICO_SIZES, *ICNS_TYPES})}
    for size in LINUX_SIZES:
        folder = out / "hicolor" / f"{size}x{size}" / "apps"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hisho.png").write_bytes(pngs[size])
    (out / "hisho.ico").write_bytes(ico({s: pngs[s] for s in ICO_SIZES}))
    (out / "hisho.icns").write_bytes(icns({s: pngs[s] for s in ICNS_TYPES}))
    return 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "icons"))
