#!/usr/bin/env bash
# Start-up to first paint: the installed app against the venv's, alternated in one run, each from a fresh
# process on an empty user folder. Prints one JSON line. Needs an X display (DISPLAY) and HISHO_FIRST_PAINT_FILE
# support in the app (gui/shell/app.py).
#   packaging/linux/startup-bench.sh INSTALLED_CMD VENV_CMD [REPEAT]
# HISHO_BENCH_COLD=1 (root only) drops the page cache before every start: a cold start, as after a reboot.
set -euo pipefail
INSTALLED=${1:?installed command}
VENV=${2:?venv command}
REPEAT=${3:-3}
WORK=$(mktemp -d /tmp/hisho-startup.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cold=false
if [ "${HISHO_BENCH_COLD:-0}" = 1 ] && [ -w /proc/sys/vm/drop_caches ]; then cold=true; fi

one_start() {  # CMD -> seconds from exec to first paint
    local cmd=$1 home mark pid t0 t1
    home=$(mktemp -d "$WORK/home.XXXX")
    mark="$home/painted"
    if $cold; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
    t0=$(date +%s.%N)
    env -u QT_QPA_PLATFORM HISHO_HOME="$home" HISHO_FIRST_PAINT_FILE="$mark" $cmd gui >"$home/out.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do
        [ -s "$mark" ] && break
        kill -0 "$pid" 2>/dev/null || { echo "startup-bench: '$cmd gui' exited before its first paint:" >&2
                                        tail -5 "$home/out.log" >&2; return 1; }
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    [ -s "$mark" ] || { echo "startup-bench: no first paint from '$cmd gui' in 120 s" >&2; return 1; }
    t1=$(cat "$mark")
    python3 -c "print(round($t1 - $t0, 3))"
}

installed_runs=() venv_runs=()
for i in $(seq 1 "$REPEAT"); do
    if [ $((i % 2)) = 1 ]; then  # alternate which goes first: the box's speed drifts
        installed_runs+=("$(one_start "$INSTALLED")"); venv_runs+=("$(one_start "$VENV")")
    else
        venv_runs+=("$(one_start "$VENV")"); installed_runs+=("$(one_start "$INSTALLED")")
    fi
done
python3 - "$cold" "${installed_runs[*]}" "${venv_runs[*]}" <<'PY'
import json, statistics, sys
cold, inst, venv = sys.argv[1] == "true", [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
ratios = [a / b for a, b in zip(inst, venv)]
print(json.dumps({"cold": cold, "repeat": len(inst), "installed_first_paint_s": statistics.median(inst),
                  "venv_first_paint_s": statistics.median(venv),
                  "start_vs_venv": round(statistics.median(ratios), 3),
                  "start_vs_venv_of_medians": round(statistics.median(inst) / statistics.median(venv), 3),
                  "installed_runs": inst, "venv_runs": venv}))
PY
