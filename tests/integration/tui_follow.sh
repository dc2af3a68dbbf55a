#!/usr/bin/env bash
# drift top --follow tails a trace while a writer appends to it (HDF5 SWMR):
# a writer commits 3 steps and waits at a gate; the dashboard, opened on the
# live file, must show those 3 steps and their values; once the gate opens
# the writer commits 5 more (and a site that appears only from then on), and
# the new steps, values and site must appear on the same screen. Bounded
# polls only; no timed assertions. Values come from the file via h5py.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
BENCH="$(dirname "$DRIFT_BIN")/bench_tui"
[ -x "$BENCH" ] || { echo "SKIP: $BENCH not built"; exit 77; }
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
"$PY" -c "import h5py" 2>/dev/null || { echo "SKIP: h5py not available"; exit 77; }
T="$DRIFT_TMP/tui_follow"
rm -rf "$T" && mkdir -p "$T"
SOCK="drift-test-$$"
WAIT_TENTHS=600 # 60 s
. "$(dirname "$0")/lib/tmux_top.bash"
WRITER=""
cleanup() {
    touch "$T/gate" 2>/dev/null || true
    [ -n "$WRITER" ] && kill "$WRITER" 2>/dev/null || true
    tm kill-server 2>/dev/null || true
}
trap cleanup EXIT
# a session that lives as long as the test (killing the last 'top' session would make the
# server exit while the next tmux command reaches it: 'server exited unexpectedly')
tm new-session -d -s keepalive -x 20 -y 5 'sleep 3600'
# row_is NAME MEAN MAX: the table shows NAME with these mean and max |diff|
row_is() {
    tm capture-pane -p -t top >"$T/screen.txt" 2>/dev/null &&
        grep -qE "^.[[:space:]]$(printf '%s' "$1" | sed 's/[].[^$*+?(){}|\\]/\\&/g')[[:space:]]+$2[[:space:]]+$3([[:space:]]|$)" "$T/screen.txt"
}
# expected "mean max" of a site at a step, formatted as drift prints them, read with h5py
expect() {
    "$PY" - "$T/live.h5" "$1" "$2" <<'EOF'
import h5py, sys
path, site, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = h5py.File(path, "r", swmr=True)
names = [n.decode() for n in f["/metrics/site_names"]["name"]]
rows = f["/metrics/rows"][:]
def fv(v): return "0" if v == 0 else "%.3e" % v
for r in rows:
    if names[int(r["site"])] == site and int(r["step"]) == step and int(r["denoise_index"]) == -1:
        print(fv(float(r["mean_abs_diff"])), fv(float(r["max_abs_diff"])))
        sys.exit(0)
sys.exit(1)
EOF
}

"$BENCH" --write-only "$T/live.h5" --steps 8 --sites 30 --pause-after 3 --gate "$T/gate" --ready "$T/ready" \
    --late-site "late:appears_at_step_3" --slow-ms 100 --run-id follow-run &
WRITER=$!
wait_for "the writer to commit 3 steps" test -e "$T/ready"

tm new-session -d -s top -x 120 -y 60 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/live.h5' --follow --interval 100 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
wait_for "3 steps on screen" screen_has "steps 3 [0..2]"
screen_has "LIVE" || fail "a file being written shows LIVE"
screen_has "step 2 (latest)" || fail "the latest step is 2"
screen_has "30 layers" || fail "30 layers before the late site"
read -r m2 x2 < <(expect "blocks.0.ffn:out" 2)
wait_for "blocks.0.ffn:out at step 2 ($m2 $x2)" row_is "blocks.0.ffn:out" "$m2" "$x2"
screen_has "late:appears_at_step_3" && fail "the late site shows before it exists"

touch "$T/gate" # the writer commits steps 3..7
wait_for "8 steps on screen" screen_has "steps 8 [0..7]"
wait "$WRITER" || fail "the writer failed"
WRITER=""
read -r m7 x7 < <(expect "blocks.0.ffn:out" 7)
[ "$m7 $x7" != "$m2 $x2" ] || fail "test data: step 7 should differ from step 2"
wait_for "blocks.0.ffn:out at step 7 ($m7 $x7)" row_is "blocks.0.ffn:out" "$m7" "$x7"
read -r ml xl < <(expect "late:appears_at_step_3" 7)
wait_for "the late site at step 7" row_is "late:appears_at_step_3" "$ml" "$xl"
screen_has "31 layers" || fail "31 layers after the late site"
screen_has "step 7 (latest)" || fail "the latest step is 7"

# the drill-down of a layer follows too: step 7 on top
tm send-keys -t top G Enter
wait_for "drill-down of the late site" screen_has "layer late:appears_at_step_3"
wait_for "its step 7 row" screen_re "^[[:space:]]+7[[:space:]]+$ml[[:space:]]+$xl"

# defect 22.5: the writer closed while followed: CLOSED and 'writer finished', not IDLE
wait_for "the closed writer seen as finished" screen_has "writer finished"
screen_re "CLOSED *$" || fail "a writer that closed while followed shows CLOSED"

tm send-keys -t top q
wait_for "drift top to exit" test -s "$T/exit"
[ "$(cat "$T/exit")" = 0 ] || fail "drift top exited with $(cat "$T/exit")"
[ ! -s "$T/stderr" ] || fail "drift top wrote to stderr"
tm kill-session -t top

# a killed writer never closes, and its lock dies with it: followed, it reads 'stopped without
# closing' with a STOPPED badge (issue 22.5), never 'recording' with an IDLE badge for ever, nor CLOSED
rm -f "$T/ready" "$T/gate" "$T/exit"
"$BENCH" --write-only "$T/killed.h5" --steps 8 --sites 10 --pause-after 2 --gate "$T/gate" --ready "$T/ready" \
    --run-id killed-run &
WRITER=$!
wait_for "the second writer to commit 2 steps" test -e "$T/ready"
kill -9 "$WRITER"
wait "$WRITER" 2>/dev/null || true
WRITER=""
tm new-session -d -s top -x 120 -y 40 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/killed.h5' --follow --interval 100 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
wait_for "the killed writer's 2 steps" screen_has "steps 2 [0..1]"
wait_for "the killed writer seen as stopped" screen_has "writer stopped without closing"
screen_re "STOPPED *$" || fail "a killed writer shows the STOPPED badge"
sleep 1.5 # ten refreshes: it stays stopped
screen_has "writer recording" && fail "a killed writer reads as 'recording'"
screen_re "IDLE|LIVE|CLOSED" && fail "a killed writer shows IDLE, LIVE or CLOSED"
tm send-keys -t top q
wait_for "drift top to exit" test -s "$T/exit"
echo "ok: tui_follow"
