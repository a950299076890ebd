#!/usr/bin/env bash
# Wrap the PyInstaller folder (dist/hisho) into a .deb: /opt/hisho, a launcher in /usr/bin, desktop entry, icon.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=$(.venv/bin/python -c "import hisho; print(hisho.__version__)")
STAGE=build/deb/hisho_${VERSION}_amd64
rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/opt" "$STAGE/usr/bin" "$STAGE/usr/share/applications" \
         "$STAGE/usr/share/icons/hicolor/scalable/apps"
cp -r dist/hisho "$STAGE/opt/hisho"
ln -s /opt/hisho/hisho "$STAGE/usr/bin/hisho"
cp resources/hisho.desktop "$STAGE/usr/share/applications/"
cp resources/icons/hisho.svg "$STAGE/usr/share/icons/hicolor/scalable/apps/hisho.svg"
cat > "$STAGE/DEBIAN/control" <<CTRL
Package: hisho
Version: ${VERSION}
Architecture: amd64
Maintainer: Hisho developers <dev@hisho.invalid>
Depends: libegl1, libgl1, libxkbcommon0, libfontconfig1
Description: Local LLM desktop app that keeps KV caches on SSD
 Chat with GGUF models offline, summarize documents, plan memory to fit the machine.
CTRL
dpkg-deb --build --root-owner-group "$STAGE" dist/
