#!/usr/bin/env bash
# drift top TRAINER --against ROLLOUT --follow (issue 17): two `drift record
# --synthetic` processes write while the dashboard runs; process A's trainer
# trace is compared live with process B's rollout trace (each file written by
# its own process, slowed with --step-delay-ms so that steps commit over
# several seconds). In a real terminal (tmux) at 160x45 the screen must show
# new steps while the writers run, per-layer values equal to `drift compare`'s
# for the same step, the first divergent layer marked, the heatmap (one
# glyph per step, the first divergent cells marked); at 80x24 the first
# divergent layer stays on screen in the table and the heatmap; q quits with
# 0. Batch JSON and CSV give the same numbers; a merged 2-rank index works as
# a candidate. Bounded polls only.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
"$DRIFT_BIN" top --help | grep -q -- "--against" || { echo "FAIL: top --help lacks --against"; exit 1; }
T="$DRIFT_TMP/top_against"
rm -rf "$T" && mkdir -p "$T/A" "$T/B"
PLANS="${DRIFT_TESTDATA:-$(dirname "$0")/../data}/plans"
SOCK="drift-against-$$"
. "$(dirname "$0")/lib/tmux_top.bash"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    tm kill-server 2>/dev/null || true
}
trap cleanup EXIT
steps_shown() { cap && sed -n 's/.*steps \([0-9]*\) \[.*/\1/p' "$T/screen.txt" | head -1; }
N=8
rec() { # rec DIR DELAY_MS
    "$DRIFT_BIN" record --synthetic tiny-dit --steps $N --trainer-plan "$PLANS/wan2_2.json" \
        --rollout-plan "$PLANS/wan2_2_no_norm2.json" -o "$1/run.h5" --step-delay-ms "$2" 2>"$1/record.err" &
    PIDS+=($!)
}
# the dashboard starts before the files exist: --follow waits for them
tm new-session -d -s top -x 160 -y 45 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/A/run.h5' --against '$T/B/run.rollout.h5' --follow --interval 150 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
sleep 0.5
rec "$T/A" 900
rec "$T/B" 700
wait_for "a first compared step" screen_re "steps [1-9][0-9]* \["
first=$(steps_shown)
wait_for "a layer row" screen_has "blocks.0.norm2:out"
# new steps appear while both writers still run
more() { local n; n=$(steps_shown); [ -n "$n" ] && [ "$n" -gt "$first" ]; }
wait_for "more steps than $first while the writers run" more
kill -0 "${PIDS[0]}" 2>/dev/null || kill -0 "${PIDS[1]}" 2>/dev/null || fail "the writers finished before a second step was seen (not live)"
screen_re "vs .*top_against/B/run\.rollout\.h5" || fail "the header names the --against trace"
for p in "${PIDS[@]}"; do wait "$p" || fail "a writer failed: $(cat "$T"/*/record.err)"; done
PIDS=()
wait_for "all $N steps" screen_has "steps $N [0..$((N - 1))]"
wait_for "the latest step shown" screen_has "step $((N - 1)) (latest)"
screen_re "first divergent blocks\.0\.norm2:out" || fail "the header names the first divergent layer"
screen_re "▶ ?blocks\.0\.norm2:out" || fail "the first divergent layer is marked"
cp "$T/screen.txt" "$T/table160.txt"
# the screen's values equal drift compare's for the same step
"$DRIFT_BIN" compare "$T/A/run.h5" "$T/B/run.rollout.h5" --steps $((N - 1)) --json >"$T/cmp_last.json"
"$DRIFT_BIN" top "$T/A/run.h5" --against "$T/B/run.rollout.h5" --batch --format json >"$T/batch.json"
"$DRIFT_BIN" top "$T/A/run.h5" --against "$T/B/run.rollout.h5" --batch --format csv >"$T/batch.csv"
"$DRIFT_BIN" compare "$T/A/run.h5" "$T/B/run.rollout.h5" --json >"$T/cmp_all.json"
"$PY" - "$T" $N <<'EOF' || fail "screen, batch and compare disagree"
import csv, json, re, sys
T, N = sys.argv[1], int(sys.argv[2])
fv = lambda v: "-" if v is None else ("0" if v == 0 else "%.3e" % v)
cmp_last = {s["site"]: s for s in json.load(open(T + "/cmp_last.json"))["sites"]}
screen = {}
for line in open(T + "/table160.txt", encoding="utf-8"):
    m = re.match(r"^.\s(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", line)
    if m and m.group(1) in cmp_last:
        screen[m.group(1)] = m.groups()[1:]
assert len(screen) >= 20, "too few layer rows on screen: %d" % len(screen)
for name, (mean, mx, rel, cos) in screen.items():
    c = cmp_last[name]
    assert (mean, mx) == (fv(c["mean_abs_diff"]), fv(c["max_abs_diff"])), (name, mean, mx, c)
    assert rel == fv(c["rel_max"]), (name, rel, c["rel_max"])
    assert cos == "%.8f" % c["cosine"], (name, cos, c["cosine"])
b = json.load(open(T + "/batch.json"))
assert b["against"].endswith("B/run.rollout.h5") and b["steps"] == list(range(N)), b["steps"]
assert b["first_divergent"] == "blocks.0.norm2:out", b["first_divergent"]
rows = {r["layer"]: r for r in csv.DictReader(open(T + "/batch.csv")) if r["kind"] == "layer"}
cmp_all = json.load(open(T + "/cmp_all.json"))
fd = {f["step"]: f["site"] for f in cmp_all["first_divergent"]}
# the trainer's rollout:model_output and logprob:new have no partner in the rollout file: said in the JSON
assert any("without a partner: 2 of" in w for w in cmp_all.get("warnings", [])), cmp_all.get("warnings")
for L in b["layers"]:
    c = cmp_last[L["name"]]
    for k in ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine"):
        assert L["value"][k] == c[k], (L["name"], k, L["value"][k], c[k])      # the same engine: exact
        assert float(rows[L["name"]][k]) == c[k], (L["name"], k, "csv")
    assert L["max_ulp_diff"] == c["max_ulp"], (L["name"], L["max_ulp_diff"], c["max_ulp"])
    if L["name"] in screen: assert screen[L["name"]][0] == fv(L["value"]["mean_abs_diff"])
    for h in L["history"]:  # every step's first divergent site is compare's
        assert ("first_divergent" in h["flags"]) == (fd.get(h["step"]) == L["name"]), (L["name"], h)
# log-prob drift per step: A's logprob:new against B's logprob:old, read with h5py
import h5py, numpy as np
def site(path, name):
    f = h5py.File(path, "r")
    for g in f["/sites"].values():
        n = g.attrs["name"]
        if (n.decode() if isinstance(n, bytes) else n) == name:
            return np.asarray(g["data"][:], dtype=np.float64)
    raise KeyError(name)
lp_new, lp_old = site(T + "/A/run.h5", "logprob:new"), site(T + "/B/run.rollout.h5", "logprob:old")
assert len(b["step_metrics"]) == N, b["step_metrics"]
for s in b["step_metrics"]:
    d = lp_new[s["step"]] - lp_old[s["step"]]
    assert abs(s["log_prob_mean_abs_diff"] - np.mean(np.abs(d))) <= 1e-12, (s, d)
    assert abs(s["approx_kl"] - 0.5 * np.mean(d * d)) <= 1e-15, (s, d)
assert sum(s["log_prob_mean_abs_diff"] for s in b["step_metrics"]) > 0
EOF
# the heatmap at 160x45: one glyph per step, the first divergent cells marked
tm send-keys -t top H
wait_for "the heatmap" screen_has "heatmap mean|d|"
"$PY" - "$T/screen.txt" $N <<'EOF' || fail "heatmap at 160x45"
import sys
N = int(sys.argv[2])
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
row = [l for l in lines if l.startswith("blocks.0.norm2:out")]
assert row, "no heatmap row for blocks.0.norm2:out"
assert row[0].count("\u25c6") == N, row[0]          # first divergent at every step
eq = [l for l in lines if l.startswith("input:latents:pre_cast")]
assert eq and eq[0].count("\u00b7") == N, eq        # bitwise equal: the zero glyph
later = [l for l in lines if l.startswith("blocks.1.ffn:out")]
assert later and sum(later[0].count(g) for g in "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588") == N, later
EOF
tm send-keys -t top m
wait_for "the heatmap metric switch" screen_has "heatmap max|d|"
# 80x24: the heatmap still renders, the first divergent layer on screen
tm resize-window -t top -x 80 -y 24
wait_for "the heatmap at 80x24" screen_has "heatmap max|d|"
screen_re "^blocks\.0\.norm2:out +◆" || fail "the first divergent layer's heatmap row is on screen at 80x24"
[ "$(wc -L <"$T/screen.txt")" -le 80 ] || fail "the heatmap is wider than 80 columns"
tm send-keys -t top H
wait_for "the table at 80x24" screen_re "▶ ?blocks\.0\.norm2:out"
tm send-keys -t top g
wait_for "the top of the table" screen_has "input:latents:pre_cast"
screen_has "blocks.0.norm2:out" || fail "at 80x24 the table shows rows through the first divergent one (19 rows)"
tm send-keys -t top G d
wait_for "d jumps back to the first divergent layer" screen_has "first divergent layer: blocks.0.norm2:out"
# n: the next divergent layer (not bitwise equal at the step shown), in the table's order, wrapping
"$PY" -c 'import json, sys
for s in json.load(open(sys.argv[1]))["sites"]:
    if s["max_abs_diff"] > 0: print(s["site"])' "$T/cmp_last.json" >"$T/divs.txt"
K=$(wc -l <"$T/divs.txt")
[ "$K" -ge 3 ] && [ "$(head -1 "$T/divs.txt")" = blocks.0.norm2:out ] || fail "compare's divergent sites: $(cat "$T/divs.txt")"
tm send-keys -t top n
wait_for "n: the next divergent layer" screen_has "divergent layer 2 of $K: $(sed -n 2p "$T/divs.txt")"
for _ in $(seq 2 "$K"); do tm send-keys -t top n; done
wait_for "n wraps round to the first" screen_has "divergent layer 1 of $K: blocks.0.norm2:out"
tm send-keys -t top q
wait_for "the dashboard to quit" test -s "$T/exit"
[ "$(cat "$T/exit")" = 0 ] || fail "q exits 0, got $(cat "$T/exit")"

# a merged 2-rank index as the candidate: rank N of the index = rank N's own file
for r in 0 1; do
    "$DRIFT_BIN" record --synthetic tiny-dit --steps 3 --trainer-plan "$PLANS/wan2_2.json" \
        --rollout-plan "$PLANS/wan2_2_no_norm2.json" --rank $r --world-size 2 --seed 7 \
        -o "$T/rank$r.h5" 2>/dev/null
done
"$DRIFT_BIN" merge "$T/rank0.h5" "$T/rank1.h5" -o "$T/index.h5" 2>/dev/null
for r in 0 1; do
    "$DRIFT_BIN" top "$T/index.h5#rank=$r" --against "$T/rank$r.rollout.h5" --batch >"$T/idx$r.json"
    "$DRIFT_BIN" compare "$T/rank$r.h5" "$T/rank$r.rollout.h5" --json >"$T/own$r.json"
    "$PY" - "$T/idx$r.json" "$T/own$r.json" <<'EOF' || fail "rank $r of the merged index differs from its own file"
import json, sys
b, c = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
fd = {f["step"]: f["site"] for f in c["first_divergent"]}
assert b["steps"] == [0, 1, 2] and len(b["layers"]) == len(c["sites"]), (b["steps"], len(b["layers"]))
for L in b["layers"]:
    for h in L["history"]:
        assert ("first_divergent" in h["flags"]) == (fd[h["step"]] == L["name"]), (L["name"], h)
EOF
done
# mismatched inputs are refused (exit 2) unless --allow-mismatch
set +e
"$DRIFT_BIN" top "$T/A/run.h5" --against "$T/rank0.rollout.h5" --batch >/dev/null 2>"$T/mm.err"; rc=$?
set -e
[ $rc = 2 ] && grep -q "committed steps differ" "$T/mm.err" || fail "an 8-step vs 3-step pair is exit 2 ($rc): $(cat "$T/mm.err")"
"$DRIFT_BIN" top "$T/A/run.h5" --against "$T/rank0.rollout.h5" --allow-mismatch --batch >/dev/null 2>&1 ||
    fail "--allow-mismatch compares the common steps"
echo "ok: top --against live at 160x45 and 80x24, equal to compare, merged index"
