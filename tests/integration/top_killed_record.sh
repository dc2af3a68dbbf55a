#!/usr/bin/env bash
# Issue 22 (defects 5 and 12, the header): a real `drift record --synthetic`
# followed by `drift top --against --follow` in tmux, then killed with
# SIGKILL. While it runs both writers read "recording" (LIVE); once killed
# both read "stopped without closing" (badge STOPPED) and stay so, never
# "recording" with an IDLE badge; at 80x24, 120x40 and 160x45 the run line
# holds both writers' state and the steps per second, and the first
# divergent layer is on screen; the two charts show two signals (the PPO
# signal with |ratio-1|, the selected layer's history, which follows the
# selection). `drift ls` of the killed file does not say "status recording".
# A record that finishes reads "finished" (CLOSED). Bounded polls only.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
T="$DRIFT_TMP/top_killed_record"
rm -rf "$T" && mkdir -p "$T"
SOCK="drift-test-$$"
WAIT_TENTHS=600 # 60 s
. "$(dirname "$0")/lib/tmux_top.bash"
PLANS="$(cd "$(dirname "$0")/../data/plans" && pwd)"
REC=""
cleanup() {
    [ -n "$REC" ] && kill -9 "$REC" 2>/dev/null || true
    tm kill-server 2>/dev/null || true
}
trap cleanup EXIT
record() { # record OUT STEPS [ARGS...]: the README's synthetic run (exec: $! of `record ... &` is drift itself)
    local out="$1" steps="$2"; shift 2
    exec "$DRIFT_BIN" record --synthetic tiny-dit --steps "$steps" --trainer-plan "$PLANS/wan2_2.json" \
        --rollout-plan "$PLANS/wan2_2_no_norm2.json" -o "$out" "$@"
}
line1() { sed -n 1p "$T/screen.txt"; }

# --- a record killed while followed
# paced (hidden --step-delay-ms): at most 10 steps a second, so a slow machine writes no gigabytes before the kill
record "$T/run.h5" 100000 --step-delay-ms 100 >"$T/record.out" 2>"$T/record.err" &
REC=$!
# the listing is read whole first: under pipefail, grep -q closing the pipe early fails the pipeline (SIGPIPE)
committed() { local l; l=$("$DRIFT_BIN" ls "$T/run.rollout.h5" 2>/dev/null) || return 1; grep -qE "^steps +[0-9]{2,} committed" <<<"$l"; }
wait_for "the record to commit 10 steps on both sides" committed
tm new-session -d -s top -x 120 -y 40 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/run.h5' --against '$T/run.rollout.h5' --follow --interval 100 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
wait_for "both writers recording" screen_re "run\.h5 recording  vs .*rollout\.h5 recording"
screen_re "LIVE *$" || fail "a pair being written shows LIVE"
screen_re "[0-9.]+ steps/s" || fail "the header shows steps per second"
kill -0 "$REC" 2>/dev/null || fail "the record finished before it was killed (test data: more steps)"
kill -9 "$REC"
wait "$REC" 2>/dev/null || true
REC=""
wait_for "both writers stopped" screen_re "run\.h5 stopped without closing  vs .*rollout\.h5 stopped without closing"
screen_re "STOPPED *$" || fail "a killed pair shows the STOPPED badge"
sleep 1.5 # fifteen refreshes later it still reads so
cap
grep -qE "recording|IDLE|LIVE|CLOSED" <(line1) && fail "a killed writer reads recording / IDLE / LIVE / CLOSED: $(line1)"

# every width: both states (whole, or 'stopped' at 80) and the rate on the first line, the first divergent layer on screen
for size in "80 24" "120 40" "160 45"; do
    set -- $size
    tm resize-window -t top -x "$1" -y "$2"
    drawn() { cap && [ "$(wc -l <"$T/screen.txt")" -eq "$2" ] && sed -n "${2}p" "$T/screen.txt" | grep -q "^q quit" &&
        [ "$(sed -n 1p "$T/screen.txt" | LC_ALL=C.UTF-8 wc -m)" -gt $(($1 - 12)) ]; } # redrawn at the new size
    wait_for "the screen redrawn at $1x$2" drawn "$1" "$2"
    wait_for "the first divergent row at $1x$2" screen_re "^▶ blocks\.0\.norm2:out"
    [ "$(wc -l <"$T/screen.txt")" -eq "$2" ] || fail "$1x$2: $(wc -l <"$T/screen.txt") lines"
    l=$(line1)
    [ "$(printf "%s" "$l" | LC_ALL=C.UTF-8 wc -m)" -le "$1" ] || fail "$1x$2: the first line is wider than the screen: $l"
    printf '%s' "$l" | grep -qE "[0-9.]+ steps/s" || fail "$1x$2: no steps/s on the run line: $l"
    printf '%s' "$l" | grep -qE "stopped( without closing)?  vs .*stopped( without closing)?" ||
        fail "$1x$2: the run line lacks a writer's state: $l"
    printf '%s' "$l" | grep -qE "STOPPED *$" || fail "$1x$2: no STOPPED badge: $l"
    # the history column says how many of the steps it holds (defect 22.12: 8 of 20 read as all of them)
    if [ "$1" = 80 ]; then grep -qE "cosine last [0-9]+" "$T/screen.txt" || fail "80x24: the history column does not say 'last N'"; fi
done
# 160x45: two charts, two signals; the second follows the selection (the first divergent layer, then the next row)
screen_has "log_prob |diff| █, |ratio-1| •" || fail "the PPO chart names its two series"
[ "$(grep -c "log_prob" "$T/screen.txt")" -eq 1 ] || fail "log_prob is charted twice"
screen_re "mean\|d\| blocks\.0\.norm2:out +now" || fail "the second chart shows the selected layer (the first divergent one)"
tm send-keys -t top j
wait_for "the second chart follows the selection" screen_re "mean\|d\| blocks\.0\.attn2:out +now"
tm send-keys -t top q
wait_for "drift top to exit" test -s "$T/exit"
[ "$(cat "$T/exit")" = 0 ] || fail "drift top exited $(cat "$T/exit")"

# drift ls of the killed file: how its writer ended, not its last word 'recording'
"$DRIFT_BIN" ls "$T/run.h5" >"$T/ls.txt" || fail "ls of the killed trace failed"
grep -qE "^status +recording" "$T/ls.txt" && fail "ls of a killed trace says 'status recording'"
grep -qE "^status +stopped without closing" "$T/ls.txt" || fail "ls of a killed trace: $(grep -E '^(status|format)' "$T/ls.txt")"
grep -qE "^format .*writer killed" "$T/ls.txt" || fail "ls of a killed trace does not say its writer was killed"
"$DRIFT_BIN" ls "$T/run.h5" --json >"$T/ls.json" || fail "ls --json of the killed trace failed"
grep -q '"ended": *"killed"' "$T/ls.json" || fail "ls --json: ended is not killed"

# a record that finishes: both 'finished', CLOSED
(record "$T/done.h5" 4) >/dev/null 2>"$T/record.err" || fail "record: $(cat "$T/record.err")"
rm -f "$T/exit"
tm new-session -d -s top2 -x 120 -y 40 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/done.h5' --against '$T/done.rollout.h5' --follow --interval 100 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
capd() { tm capture-pane -p -t top2 >"$T/screen.txt" 2>/dev/null && sed -n 1p "$T/screen.txt" | grep -qE "done\.h5 finished  vs .*rollout\.h5 finished.*CLOSED *$"; }
wait_for "a finished pair reads finished, CLOSED" capd
tm send-keys -t top2 q
wait_for "drift top to exit" test -s "$T/exit"
echo "ok: top_killed_record"
