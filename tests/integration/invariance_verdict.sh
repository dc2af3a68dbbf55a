#!/usr/bin/env bash
# drift invariance says one thing (issue 35): the verdict line is "invariant"
# (exit 0), "output changes with ..." when some configuration's output
# differs, or "values inside the forward change with ..., the output does
# not" when only inner values do (exit 1 both) - never "output changes"
# beside "the output itself is bitwise equal". The text's last line is the
# JSON's summary. On a terminal a status line counts the configurations
# (N/N at the end); none with --json.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/invariance_verdict"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
# a forward long enough (> 1 s over 4 batch sizes) for the status line to show
"$DRIFT_BIN" record --synthetic wan2.2:layers=2,dim=256,heads=4,frames=1,height=32,width=32,text_len=16 --steps 1 \
    --trainer-plan "$D/trainer_plan.json" --rollout-plan "$D/rollout_plan.json" -o "$T/w.h5" >/dev/null 2>&1 ||
    fail "record"
for tr in "$D/demo.h5" "$T/w.h5"; do
    set +e
    "$DRIFT_BIN" invariance "$tr" --batch 1,2,4 >"$T/out.txt" 2>/dev/null; rc_t=$?
    "$DRIFT_BIN" invariance "$tr" --batch 1,2,4 --json >"$T/out.json" 2>/dev/null; rc_j=$?
    set -e
    "$PY" - "$T/out.txt" "$T/out.json" "$rc_t" "$rc_j" <<'PYEOF' || fail "the verdict of $tr"
import json, sys
text, j, rc_t, rc_j = open(sys.argv[1]).read().rstrip("\n").split("\n"), json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
s = j["summary"]
assert text[-1] == s, (text[-1], s)
assert rc_t == rc_j == (0 if j["invariant"] else 1), (rc_t, rc_j, j["invariant"])
out = any(c["output_n_diff"] for c in j["configurations"])
if j["invariant"]:
    assert s.startswith("invariant:"), s
elif out:
    assert s.startswith("output changes with ") and "bitwise equal" not in s, s
else:
    assert s.startswith("values inside the forward change with ") and ", the output does not: first at " in s, s
    assert "output changes" not in s, s
print("ok", s[:60])
PYEOF
done
# progress on a terminal (script's pty): the configurations counted to the end
if command -v script >/dev/null; then
    timeout 300 script -qfec "'$DRIFT_BIN' invariance '$T/w.h5' --batch 1,2,4,8 >'$T/p.txt'" "$T/tty.raw" >/dev/null 2>&1 </dev/null || true
    tr '\r' '\n' <"$T/tty.raw" | sed 's/\x1b\[K//g' >"$T/pane.txt"
    grep -qE "^drift invariance: configurations ([0-9]+)/\1" "$T/pane.txt" ||
        { cat "$T/pane.txt" >&2; fail "no invariance progress line counting the configurations"; }
    timeout 300 script -qfec "'$DRIFT_BIN' invariance '$T/w.h5' --batch 1,2,4,8 --json >'$T/p.json'" "$T/tty2.raw" >/dev/null 2>&1 </dev/null || true
    if grep -q "elapsed)" "$T/tty2.raw"; then fail "progress shown with --json"; fi
else
    echo "note: script (util-linux) missing: progress not checked"
fi
echo "ok: drift invariance's verdict says one thing; progress counts the configurations"
