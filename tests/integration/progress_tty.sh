#!/usr/bin/env bash
# Progress of long work (issue 17.6): replay, compare and bisect print one
# line on stderr with the count, the rate and (for a known total) the time
# left, when stderr is a terminal (script's pty); nothing with --json, nothing when
# stderr is a file. bisect's counter runs on over the --all rounds.
# (The status line of cli/progress.c, docs/cli.md "Progress and size".)
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
command -v script >/dev/null || { echo "SKIP: script (util-linux) not installed"; exit 77; }
T="$DRIFT_TMP/progress_tty"
rm -rf "$T" && mkdir -p "$T"
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
# run_in_tty NAME SHELL-COMMANDS: runs them with stderr on a pseudo-terminal
# (script), everything the terminal got in $T/pane.txt, one line per redraw:
# the status line is redrawn in place (\r, erase to the end of the line) and
# erased when the work ends, so its successive states are read from the
# byte stream rather than from the final screen
run_in_tty() {
    timeout 300 script -qfec "$2" "$T/$1.raw" >/dev/null 2>&1 </dev/null || fail "$1 exited $?"
    tr '\r' '\n' <"$T/$1.raw" | sed 's/\x1b\[K//g' >"$T/pane.txt"
}
run_in_tty tty "$REPLAY >'$T/r.txt'; $COMPARE >'$T/c.txt'; $BISECT >'$T/b.txt'"
# the last count of a known total: N/N, a rate (items/s or s each) and no time left
RATE='([0-9.]+/s|[0-9.]+ s each)'
grep -qE "^drift replay: step ([0-9]+)/\1, $RATE, ETA 0s \([0-9hms]+ elapsed\)" "$T/pane.txt" ||
    fail "no replay progress line with rate and time left"
# the example of docs/cli.md ("Progress and size") is a line the terminal got, every number free
DOC="$(cd "$(dirname "$0")/../.." && pwd)/docs/cli.md"
"${PYTHON3:-/usr/bin/python3}" - "$DOC" "$T/pane.txt" <<'EOF' || fail "docs/cli.md's progress example is not what replay prints"
import re, sys
flat = re.sub(r"\s*\n\s*", " ", re.sub(r"```.*?```", "", open(sys.argv[1], encoding="utf-8").read(), flags=re.S))
ex = [s for s in re.findall(r"`([^`]+)`", flat) if s.startswith("drift replay: ") and "ETA" in s]
if len(ex) != 1: sys.exit("docs/cli.md: expected one progress example, found %r" % ex)
NUM = r"[0-9][0-9.]*"
pat = "^" + "".join(NUM if re.fullmatch(r"[0-9][0-9.]*", t) else re.escape(t) for t in re.split(r"([0-9][0-9.]*)", ex[0]))
pat = pat.replace(NUM + re.escape(" s each"), "(?:%s s each|%s/s)" % (NUM, NUM))  # the rate's two forms
pane = open(sys.argv[2], encoding="utf-8", errors="replace").read().split("\n")
if not any(re.match(pat, l) for l in pane):
    sys.exit("the page says %r; the terminal got e.g. %r" % (ex[0], [l for l in pane if l.startswith("drift replay:")][-1:]))
EOF
grep -qE "^drift compare: step ([0-9]+)/\1, $RATE, ETA 0s \([0-9hms]+ elapsed\)" "$T/pane.txt" || fail "no compare progress line"
# bisect: every phase with a count, a rate and the time left (issue 35): the
# trace's steps load, the reference replays (good, noise floor, bad) count their steps, the probes
# count against a total estimated per --all round, the culprit effects their steps
grep -qE "^drift bisect: loading the trace: step ([0-9]+)/\1" "$T/pane.txt" || fail "no bisect progress line for loading the trace"
grep -qE "^drift bisect: reference replays \(good, noise floor, bad\): step ([0-9]+)/\1, $RATE, ETA 0s" "$T/pane.txt" ||
    fail "no bisect progress line for the reference replays"
grep -qE "^drift bisect: probe [0-9]+/[0-9]+, $RATE, ETA [0-9hms]+ \([0-9hms]+ elapsed\)" "$T/pane.txt" ||
    fail "no bisect probe line with a total, rate and time left"
grep -qE "^drift bisect: culprit effects: replay step [0-9]+/[0-9]+" "$T/pane.txt" || fail "no bisect culprit effects line"
if grep -qE "^drift bisect: (probes [0-9]+ \(|replaying the good and the bad plan)" "$T/pane.txt"; then
    fail "a bisect phase without a total"
fi
# the probe count runs on over the --all rounds: the last shown count is the total the result reports
last=$(grep -oE "^drift bisect: probe [0-9]+" "$T/pane.txt" | tail -1 | grep -oE "[0-9]+$")
total=$(sed -n 's/^\([0-9]*\) probes (.*/\1/p' "$T/b.txt")
[ -n "$last" ] && [ "$last" = "$total" ] || fail "bisect's last progress count $last is not its $total probes overall"
# with --json: the same commands show no progress
run_in_tty json "$REPLAY --json >'$T/r.json'; $COMPARE --format json >'$T/c.json' 2>/dev/null; $BISECT --json >'$T/b.json'"
if grep -qE "elapsed\)|^probe [0-9]" "$T/pane.txt"; then fail "progress shown with --json"; fi
# stderr not a terminal: no progress either
eval "$REPLAY" >/dev/null 2>"$T/r.err"
eval "$BISECT" >/dev/null 2>"$T/b.err"
if grep -qE "elapsed\)" "$T/r.err" "$T/b.err"; then fail "progress written to a file"; fi
echo "ok: progress lines on a terminal only, with rate and time left; none with --json or into a file"
