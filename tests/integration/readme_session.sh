#!/usr/bin/env bash
# The README's "A session" runs as written (issue 35): every line of its sh
# block, continuation lines joined, in one shell from the repository root,
# `drift` being the built binary (a shell function ahead of the PATH the
# first line sets). A line whose comment says "exit 2" must exit 2, one
# that says "exit 1" may exit 0 or 1, every other line exits 0. `drift top`
# runs in a real terminal (tmux, 80x24): its header names both traces and
# q ends it. report.html and fix.json are written.
set -u
S="${DRIFT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
DRIFT="${DRIFT_BIN:-$S/build/drift}"
PY="${PYTHON3:-python3}"
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
W="${DRIFT_TMP:-$(mktemp -d)}/readme_session"; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# the logical lines of the block after "## A session", with their expected exit codes
"$PY" - "$S/README.md" > "$W/lines.txt" <<'PY' || { echo "FAIL: README.md has no sh block under '## A session'"; exit 1; }
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^## A session\n.*?```sh\n(.*?)```", text, re.S | re.M)
if not m:
    sys.exit(1)
lines, cur = [], ""
for raw in m.group(1).splitlines():
    code = raw.split("  #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
    comment = raw[len(code):]
    cur += (" " if cur else "") + code.rstrip("\\").strip()
    if code.endswith("\\"):
        continue
    want = "2" if "exit 2" in comment else "01" if "exit 1" in comment else "0"
    if cur:
        print(f"{want}\t{cur}")
    cur = ""
PY
n=$(wc -l < "$W/lines.txt")
[ "$n" -ge 10 ] || { echo "FAIL: only $n lines found in the README session"; exit 1; }

drift() { "$DRIFT" "$@"; }
export TMPDIR="$W"   # the session's mktemp -d lands inside the test's folder
SOCK="readme$$"
cd "$S" || exit 1
while IFS=$'\t' read -r want line; do
  case "$line" in
    "drift top "*)
      if ! command -v tmux >/dev/null || ! "$DRIFT" top --help >/dev/null 2>&1; then
        echo "SKIP: $line (no tmux or no dashboard in this build)"; continue
      fi
      args=${line#drift top }
      tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 80 -y 24 "cd '$PWD' && '$DRIFT' top $args 2>'$W/top.err'; echo \$? > '$W/top.rc'"
      ok=0
      for _ in $(seq 300); do  # up to 30 s on a loaded machine
        tmux -L "$SOCK" capture-pane -p -t top > "$W/top.screen" 2>/dev/null
        grep -q "run.h5" "$W/top.screen" && grep -q "ollout.h5" "$W/top.screen" && { ok=1; break; }
        sleep 0.1
      done
      tmux -L "$SOCK" send-keys -t top q 2>/dev/null
      for _ in $(seq 100); do [ -s "$W/top.rc" ] && break; sleep 0.1; done
      tmux -L "$SOCK" kill-server 2>/dev/null
      rc=$(cat "$W/top.rc" 2>/dev/null || echo none)
      if [ $ok = 1 ] && [ "$rc" = 0 ]; then pass "$line (tmux 80x24: both traces on screen, q quits with 0)"
      else fail "$line: screen ok=$ok rc=$rc: $(cat "$W/top.screen" "$W/top.err" 2>/dev/null | head -30)"; fi
      continue ;;
  esac
  eval "$line" > "$W/out.txt" 2> "$W/err.txt"
  rc=$?
  case "$want" in *"$rc"*) pass "$line (exit $rc)" ;;
    *) fail "$line: exit $rc, expected ${want/01/0 or 1}: $(tail -5 "$W/err.txt")" ;; esac
done < "$W/lines.txt"
[ -s report.html ] && pass "report.html written" || fail "no report.html in $PWD"
[ -s fix.json ] && pass "fix.json written" || fail "no fix.json in $PWD"
case "$PWD" in "$W"/*) ;; *) fail "the session's scratch folder $PWD is not under TMPDIR" ;; esac

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
