#!/usr/bin/env bash
# macOS: Hisho.app (made by packaging/hisho.spec's BUNDLE step) in a drag-to-Applications .dmg.
# NOT RUN on our Linux machines (packaging/README.md says what is untested). On a Mac with Xcode's command line
# tools:   make package-venv && build/pkg-venv/bin/python packaging/icons.py build/icons
#          build/pkg-venv/bin/pyinstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/hisho.spec
#          bash packaging/macos/build-dmg.sh
# The .app is ad-hoc signed only: a downloaded copy needs right-click → Open once, until a Developer ID signs and
# notarizes it (codesign --sign "Developer ID Application: …" --options runtime; xcrun notarytool submit).
# User data is in ~/Library/Application Support/Hisho, ~/Library/Caches/Hisho and ~/Library/Logs/Hisho, never in
# the .app: replacing the .app upgrades, dragging it to the Bin uninstalls, and both keep the data.
set -euo pipefail
cd "$(dirname "$0")/../.."
APP=dist/Hisho.app
[ -d "$APP" ] || { echo "build-dmg: $APP is missing (run pyinstaller packaging/hisho.spec on macOS first)" >&2; exit 1; }
VERSION=$("$APP/Contents/MacOS/hisho" --version | awk '{print $2}')
# The bundle proves itself before it is packed (fresh user folder).
HISHO_HOME=$(mktemp -d) "$APP/Contents/MacOS/hisho" self-test
codesign --force --deep --sign - "$APP"
STAGE=$(mktemp -d)
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "Hisho $VERSION" -srcfolder "$STAGE" -ov -format UDZO "dist/Hisho-$VERSION.dmg"
rm -rf "$STAGE"
echo "dist/Hisho-$VERSION.dmg"
