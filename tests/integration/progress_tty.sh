#!/usr/bin/env bash
# Progress of long work (issue 17.6): replay, compare and bisect print one
# line on stderr with the count, the rate and (for a known total) the time
# left, when stderr is a terminal (tmux); nothing with --json, nothing when
# stderr is a file. bisect's counter runs on over the --all rounds.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
T="$DRIFT_TMP/progress_tty"
rm -rf "$T" && mkdir -p "$T"
SOCK="drift-progress-$$"
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null || true' EXIT
fail() {
    echo "FAIL: $*" >&2
    [ -f "$T/pane.txt" ] && { echo "--- terminal:" >&2; cat "$T/pane.txt" >&2; }
    exit 1
}
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
REPLAY="'$DRIFT_BIN' replay '$D/demo.h5' --plan '$D/trainer_plan.json' --ref rollout"
COMPARE="'$DRIFT_BIN' compare '$D/demo.h5' '$D/demo.rollout.h5'"
BISECT="'$DRIFT_BIN' bisect '$D/demo.h5' --good '$D/rollout_plan.json' --bad '$D/trainer_plan.json' --granularity param --all"
run_in_tty() { # run_in_tty NAME SHELL-COMMANDS: runs them in a 200x50 terminal, the pane's text in $T/pane.txt
    rm -f "$T/done"
    tm new-session -d -s "$1" -x 200 -y 50 "$2; touch '$T/done'; sleep 600"
    for _ in $(seq 600); do [ -e "$T/done" ] && break; sleep 0.1; done
    [ -e "$T/done" ] || fail "$1 did not finish"
    tm capture-pane -p -J -S - -t "$1" >"$T/pane.txt"
}
run_in_tty tty "$REPLAY >'$T/r.txt'; $COMPARE >'$T/c.txt'; $BISECT >'$T/b.txt'"
grep -qE "^replay: step ([0-9]+)/\1, [0-9.e+]+ steps/s, 0 s left" "$T/pane.txt" || fail "no replay progress line with rate and time left"
grep -qE "^compare: step ([0-9]+)/\1, [0-9.e+]+ steps/s, 0 s left" "$T/pane.txt" || fail "no compare progress line"
grep -qE "^bisect probe [0-9]+ \(of at most [0-9]+\), [0-9.e+]+ probes/s, [0-9.]+ s so far" "$T/pane.txt" ||
    fail "no bisect progress line"
# the probe count runs on over the --all rounds: the last shown count is the total the result reports
last=$(grep -oE "bisect probe [0-9]+" "$T/pane.txt" | tail -1 | grep -oE "[0-9]+$")
total=$(sed -n 's/^\([0-9]*\) probes (.*/\1/p' "$T/b.txt")
[ -n "$last" ] && [ "$last" = "$total" ] || fail "bisect's last progress count $last is not its $total probes overall"
# with --json: the same commands show no progress
run_in_tty json "$REPLAY --json >'$T/r.json'; $COMPARE --format json >'$T/c.json' 2>/dev/null; $BISECT --json >'$T/b.json'"
if grep -qE "step [0-9]+/|bisect probe" "$T/pane.txt"; then fail "progress shown with --json"; fi
# stderr not a terminal: no progress either
eval "$REPLAY" >/dev/null 2>"$T/r.err"
eval "$BISECT" >/dev/null 2>"$T/b.err"
if grep -qE "step [0-9]+/|bisect probe" "$T/r.err" "$T/b.err"; then fail "progress written to a file"; fi
echo "ok: progress lines on a terminal only, with rate and time left; none with --json or into a file"
