#!/usr/bin/env bash
# drift top INDEX#rank=N --against ROLLOUT --follow (issue 17, "the same
# against a merged 2-rank index"): the trainer's two rank files are merged
# into an index (a merge is a snapshot of closed files), and rank 1's rollout
# is recorded by another process, slowed so that its steps commit over
# several seconds, while the dashboard follows it in tmux. At 160x45: new
# steps appear while the rollout writer runs, the header says the --against
# writer is recording and then finished, per-layer values equal `drift compare
# INDEX#rank=1 ROLLOUT`'s for the same step, the first divergent layer is
# marked; the heatmap renders at 160x45 and 80x24; q quits with 0. Every
# rank of the index (and the index itself, its lowest rank) gives compare's
# first divergence per step in --batch. Bounded polls only.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
T="$DRIFT_TMP/top_against_index"
rm -rf "$T" && mkdir -p "$T/B"
PLANS="${DRIFT_TESTDATA:-$(dirname "$0")/../data}/plans"
SOCK="drift-against-index-$$"
. "$(dirname "$0")/lib/tmux_top.bash"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    tm kill-server 2>/dev/null || true
}
trap cleanup EXIT
# the index (A) holds every step from the start: the compared steps show as the latest step
latest_shown() { cap && sed -n 's/^step \([0-9]*\) (latest).*/\1/p' "$T/screen.txt" | head -1; }
N=6
rec() { # rec RANK OUT [--step-delay-ms MS]
    local r="$1" out="$2"; shift 2
    "$DRIFT_BIN" record --synthetic tiny-dit --steps $N --trainer-plan "$PLANS/wan2_2.json" \
        --rollout-plan "$PLANS/wan2_2_no_norm2.json" --rank "$r" --world-size 2 --seed 7 -o "$out" "$@"
}
rec 0 "$T/rank0.h5" 2>/dev/null
rec 1 "$T/rank1.h5" 2>/dev/null
"$DRIFT_BIN" merge "$T/rank0.h5" "$T/rank1.h5" -o "$T/index.h5" 2>/dev/null

# rank 1's rollout, recorded live by its own process
tm new-session -d -s top -x 160 -y 45 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/index.h5#rank=1' --against '$T/B/run.rollout.h5' --follow --interval 150 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
sleep 0.3
rec 1 "$T/B/run.h5" --step-delay-ms 900 2>"$T/B/record.err" &
PIDS+=($!)
wait_for "a first compared step" screen_re "^step [0-9]+ \(latest\)"
first=$(latest_shown)
wait_for "a layer row" screen_has "blocks.0.norm2:out"
screen_has "rank 1/2" || fail "the header names the index's rank 1 of 2"
more() { local n; n=$(latest_shown); [ -n "$n" ] && [ "$n" -gt "$first" ]; }
wait_for "more steps than $first while the rollout writer runs" more
kill -0 "${PIDS[0]}" 2>/dev/null || fail "the rollout writer finished before a second step was seen (not live)"
screen_re "vs .*run\.rollout\.h5 recording" || fail "the header says the --against writer is recording"
wait "${PIDS[0]}" || fail "the rollout writer failed: $(cat "$T/B/record.err")"
PIDS=()
wait_for "all $N steps" screen_has "step $((N - 1)) (latest)"
wait_for "the --against writer finished" screen_re "vs .*run\.rollout\.h5 finished"
screen_re "first divergent blocks\.0\.norm2:out" || fail "the header names the first divergent layer"
screen_re "▶ ?blocks\.0\.norm2:out" || fail "the first divergent layer is marked"
cp "$T/screen.txt" "$T/table160.txt"
"$DRIFT_BIN" compare "$T/index.h5#rank=1" "$T/B/run.rollout.h5" --steps $((N - 1)) --json >"$T/cmp_last.json"
"$PY" - "$T" <<'EOF' || fail "the screen disagrees with drift compare"
import json, re, sys
T = sys.argv[1]
fv = lambda v: "-" if v is None else ("0" if v == 0 else "%.3e" % v)
cmp_last = {s["site"]: s for s in json.load(open(T + "/cmp_last.json"))["sites"]}
screen = {}
for line in open(T + "/table160.txt", encoding="utf-8"):
    m = re.match(r"^.\s(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", line)
    if m and m.group(1) in cmp_last:
        screen[m.group(1)] = m.groups()[1:]
assert len(screen) >= 20, "too few layer rows on screen: %d" % len(screen)
assert any(v[0] != "0" for v in screen.values()), "no divergent layer on screen"
for name, (mean, mx, rel, cos) in screen.items():
    c = cmp_last[name]
    assert (mean, mx, rel) == (fv(c["mean_abs_diff"]), fv(c["max_abs_diff"]), fv(c["rel_max"])), (name, mean, mx, rel, c)
    assert cos == "%.8f" % c["cosine"], (name, cos, c["cosine"])
EOF
# the heatmap at 160x45 and at 80x24, the first divergent cell of every step marked
tm send-keys -t top H
wait_for "the heatmap" screen_has "heatmap mean|d|"
row_marks() { cap && grep -E "^blocks\.0\.norm2:out " "$T/screen.txt" | grep -o "◆" | wc -l; }
[ "$(row_marks)" = $N ] || fail "the heatmap marks blocks.0.norm2:out first divergent at each of $N steps"
tm resize-window -t top -x 80 -y 24
wait_for "the heatmap at 80x24" screen_re "^blocks\.0\.norm2:out +◆"
[ "$(wc -L <"$T/screen.txt")" -le 80 ] || fail "the heatmap is wider than 80 columns"
tm send-keys -t top q
wait_for "the dashboard to quit" test -s "$T/exit"
[ "$(cat "$T/exit")" = 0 ] || fail "q exits 0, got $(cat "$T/exit")"

# every rank of the index, and the index itself (its lowest rank), in --batch: compare's first divergence per step
for spec in "index.h5#rank=0:rank0.rollout.h5" "index.h5#rank=1:rank1.rollout.h5" "index.h5:rank0.rollout.h5"; do
    a="$T/${spec%%:*}" b="$T/${spec#*:}"
    "$DRIFT_BIN" top "$a" --against "$b" --batch >"$T/batch.json" 2>/dev/null || fail "top --batch $a"
    "$DRIFT_BIN" compare "$a" "$b" --json >"$T/cmp.json" 2>/dev/null || fail "compare $a"
    "$PY" - "$T/batch.json" "$T/cmp.json" $N <<'EOF' || fail "$a: top --batch and compare disagree"
import json, sys
b, c, N = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
fd = {f["step"]: f["site"] for f in c["first_divergent"]}
assert b["steps"] == list(range(N)) and len(b["layers"]) == len(c["sites"]), (b["steps"], len(b["layers"]))
assert set(fd.values()) == {"blocks.0.norm2:out"}, fd
for L in b["layers"]:
    for h in L["history"]:
        assert ("first_divergent" in h["flags"]) == (fd[h["step"]] == L["name"]), (L["name"], h)
EOF
done
echo "ok: top INDEX#rank=1 --against a live rollout at 160x45 and 80x24, equal to compare; every rank in --batch"
