#!/usr/bin/env bash
# drift top --batch: the JSON and CSV output carry the trace's numbers
# exactly (compared with == against the same file read with h5py), the
# aggregations, CFG normalisation, --steps, --filter/--sort and --ref do what
# the help says, and the command-line contract holds (exit 0/2, messages
# naming the file, no terminal needed for --batch, one needed without it).
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
BENCH="$(dirname "$DRIFT_BIN")/bench_tui"
[ -x "$BENCH" ] || { echo "SKIP: $BENCH not built"; exit 77; }
"$PY" -c "import h5py" 2>/dev/null || { echo "SKIP: h5py not available"; exit 77; }
T="$DRIFT_TMP/tui_batch"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$T/plan.json" <<'EOF'
{"name": "reduce_bf16", "fsdp_reduce_dtype": "bf16", "diffusion_forward_dtype": "bf16", "sglang_dit_precision": "bf16"}
EOF
"$BENCH" --write-only "$T/a.h5" --steps 15 --sites 47 --guidance 4.5 --run-id batch-a --plan "$T/plan.json"
"$BENCH" --write-only "$T/ref.h5" --steps 6 --sites 47 --guidance 2.0 --run-id batch-ref --start-step 100

"$DRIFT_BIN" top "$T/a.h5" --batch >"$T/all.json"
"$DRIFT_BIN" top "$T/a.h5" --json --agg mean --cfg >"$T/mean_cfg.json"
"$DRIFT_BIN" top "$T/a.h5" --batch --format json --agg max --steps 3:9 >"$T/max_3_9.json"
"$DRIFT_BIN" top "$T/a.h5" --batch --format json --step 4 --filter '*.norm2:*' --sort mean --desc >"$T/filter.json"
"$DRIFT_BIN" top "$T/a.h5" --batch --format json --agg mean --ref "$T/ref.h5" --cfg >"$T/ref.json"
"$DRIFT_BIN" top "$T/a.h5" --batch --format csv --steps 10: >"$T/tail.csv"
"$DRIFT_BIN" top "$T/a.h5" --batch --format csv --agg mean >"$T/mean.csv"

"$PY" - "$T" <<'EOF'
import csv, h5py, json, math, sys
T = sys.argv[1]
f = h5py.File(T + "/a.h5", "r")
names = [n.decode() for n in f["/metrics/site_names"]["name"]]
steps = [int(s) for s in f["/steps"]["step"]]
K = ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine")
cells = {}
for r in f["/metrics/rows"][:]:
    assert int(r["variant"]) == 0 and int(r["denoise_index"]) == -1
    cells[(int(r["site"]), int(r["step"]))] = r
sm = {int(r["step"]): r for r in f["/metrics/steps"][:]}
s_cfg = float(f.attrs["guidance_scale"])
def fail(msg):
    print("FAIL:", msg); sys.exit(1)
def same(a, b, what):
    # exact: NaN only where NaN, otherwise bit-for-bit equal doubles
    if a is None and (b is None or math.isnan(b)): return
    if a is None or b is None or a != b: fail("%s: drift %r, trace %r" % (what, a, b))
def agg(i, k, kind, keep):
    vals = [float(cells[(i, s)][k]) for s in keep if (i, s) in cells and not math.isnan(float(cells[(i, s)][k]))]
    if not vals: return float("nan")
    if kind == "mean":
        acc = 0.0
        for v in vals: acc += v
        return acc / len(vals)
    if kind == "max": return min(vals) if k == "cosine" else max(vals)

# --- everything, latest step
J = json.load(open(T + "/all.json"))
if J["run_id"] != "batch-a" or J["side"] != "trainer" or J["guidance_scale"] != 4.5: fail("root attributes")
if J["plan"]["name"] != "reduce_bf16" or J["plan"]["warnings"] != ["reduce dtype bf16"]: fail("plan warnings %r" % J["plan"])
if J["steps"] != steps or J["steps_committed"] != len(steps): fail("steps")
if J["query"]["agg"] != "step" or J["query"]["step"] != steps[-1]: fail("query")
if J["first_divergent"] != "input:cond:post_cast": fail("first divergent %r" % J["first_divergent"])
if [L["name"] for L in J["layers"]] != names: fail("layers not in execution order")
n_hist = 0
for L in J["layers"]:
    i = L["order"]
    if names[i] != L["name"]: fail("order of %s" % L["name"])
    for k in K: same(L["value"][k], float(cells[(i, steps[-1])][k]), "%s value %s" % (L["name"], k))
    if [h["step"] for h in L["history"]] != steps: fail("history steps of %s" % L["name"])
    for h in L["history"]:
        r = cells[(i, h["step"])]
        for k in K: same(h[k], float(r[k]), "%s step %d %s" % (L["name"], h["step"], k))
        if h["max_ulp_diff"] != int(r["max_ulp_diff"]): fail("ulp")
        want = [n for b, n in ((1, "first_divergent"), (2, "bitwise_equal")) if int(r["flags"]) & b]
        if h["flags"] != want: fail("flags %r vs %r" % (h["flags"], want))
        n_hist += 1
if n_hist != len(f["/metrics/rows"]): fail("history holds %d cells, the trace %d rows" % (n_hist, len(f["/metrics/rows"])))
if [p["step"] for p in J["step_metrics"]] != steps: fail("step metrics steps")
for p in J["step_metrics"]:
    for k in ("log_prob_mean_abs_diff", "ratio_abs_minus_1", "approx_kl"): same(p[k], float(sm[p["step"]][k]), "step %d %s" % (p["step"], k))

# --- mean over steps, divided by the guidance scale (abs-diff columns only)
J = json.load(open(T + "/mean_cfg.json"))
if not J["query"]["cfg_normalise"] or J["query"]["agg"] != "mean": fail("mean/cfg query")
for L in J["layers"]:
    i = L["order"]
    for k in K:
        want = agg(i, k, "mean", steps)
        if k in ("mean_abs_diff", "max_abs_diff"): want = want / s_cfg
        same(L["value"][k], want, "%s mean/s %s" % (L["name"], k))

# --- max over steps 3..8 (cosine: the minimum)
J = json.load(open(T + "/max_3_9.json"))
keep = [s for s in steps if 3 <= s <= 9]  # --steps A:B includes B (docs/cli.md)
if J["steps"] != keep: fail("--steps 3:9 kept %r" % J["steps"])
for L in J["layers"]:
    i = L["order"]
    if [h["step"] for h in L["history"]] != keep: fail("history outside --steps")
    for k in K: same(L["value"][k], agg(i, k, "max", keep), "%s max %s" % (L["name"], k))
if [p["step"] for p in J["step_metrics"]] != keep: fail("step metrics outside --steps")

# --- one step, filtered, sorted by mean |diff| descending
J = json.load(open(T + "/filter.json"))
sel = [i for i in range(len(names)) if names[i].endswith(".norm2:out")]
sel.sort(key=lambda i: (-float(cells[(i, 4)]["mean_abs_diff"]), i))
if [L["name"] for L in J["layers"]] != [names[i] for i in sel]: fail("filter/sort: %r" % [L["name"] for L in J["layers"]])
if J["query"]["step"] != 4: fail("--step 4")
for L in J["layers"]:
    for k in K: same(L["value"][k], float(cells[(L["order"], 4)][k]), "step 4 %s" % k)
if J["layers"][0]["name"] != "blocks.1.norm2:out" or J["layers"][0]["row_class"] != "warn":
    fail("the odd layer should lead with a warning, got %r %r" % (J["layers"][0]["name"], J["layers"][0]["row_class"]))

# --- against a reference run: ref values = the reference's mean over its steps, / its own scale
g = h5py.File(T + "/ref.h5", "r")
rnames = [n.decode() for n in g["/metrics/site_names"]["name"]]
rcells = {(int(r["site"]), int(r["step"])): r for r in g["/metrics/rows"][:]}
rsteps = [int(s) for s in g["/steps"]["step"]]
J = json.load(open(T + "/ref.json"))
if J["reference"]["run_id"] != "batch-ref": fail("reference run id")
for L in J["layers"]:
    j = rnames.index(L["name"])
    for k in K:
        vals = [float(rcells[(j, s)][k]) for s in rsteps]
        acc = 0.0
        for v in vals: acc += v
        want = acc / len(vals)
        if k in ("mean_abs_diff", "max_abs_diff"): want = want / 2.0
        same(L["ref"][k], want, "%s ref %s" % (L["name"], k))
    # classes follow the documented ratios
    for k in K:
        v, r = L["value"][k], L["ref"][k]
        if v is None: continue
        x, xr = (1 - v, 1 - r) if k == "cosine" else (v, r)
        want = "equal" if x == 0 else ("bad" if xr <= 0 else ("ok" if x / xr <= 2 else ("warn" if x / xr <= 10 else "bad")))
        if x < 0: want = "ok"
        if L["class"][k] != want: fail("%s class %s: %s, expected %s (%r vs %r)" % (L["name"], k, L["class"][k], want, v, r))

# --- CSV: the tail of the run, exact values, one table with a kind column
rows = list(csv.DictReader(open(T + "/tail.csv")))
keep = [s for s in steps if s >= 10]
hist = [r for r in rows if r["kind"] == "history"]
if len(hist) != len(names) * len(keep): fail("csv history rows %d" % len(hist))
for r in hist:
    c = cells[(int(r["order"]), int(r["step"]))]
    if names[int(r["order"])] != r["layer"]: fail("csv layer name")
    for k in K: same(float(r[k]), float(c[k]), "csv %s %s %s" % (r["layer"], r["step"], k))
    if int(r["max_ulp_diff"]) != int(c["max_ulp_diff"]): fail("csv ulp")
lay = [r for r in rows if r["kind"] == "layer"]
if [r["layer"] for r in lay] != names: fail("csv layer rows")
for r in lay:
    if int(r["step"]) != keep[-1]: fail("csv layer step")
    for k in K: same(float(r[k]), float(cells[(int(r["order"]), keep[-1])][k]), "csv layer %s" % k)
st = [r for r in rows if r["kind"] == "step"]
if [int(r["step"]) for r in st] != keep: fail("csv step rows")
for r in st:
    for k in ("log_prob_mean_abs_diff", "ratio_abs_minus_1", "approx_kl"): same(float(r[k]), float(sm[int(r["step"])][k]), "csv step %s" % k)
rows = list(csv.DictReader(open(T + "/mean.csv")))
for r in (r for r in rows if r["kind"] == "layer"):
    if r["step"] != "": fail("a mean row names no step")
    for k in K: same(float(r[k]) if r[k] != "" else None, agg(int(r["order"]), k, "mean", steps), "csv mean %s" % k)
print("batch output matches the trace exactly")
EOF

# --- command-line contract
"$DRIFT_BIN" top --help | grep -q -- "--batch" || fail "--help"
set +e
"$DRIFT_BIN" top "$T/missing.h5" --batch >"$T/out" 2>"$T/err"; rc=$?
set -e
[ "$rc" = 2 ] || fail "a missing trace exits $rc, expected 2"
grep -q "missing.h5" "$T/err" || fail "the error names the file: $(cat "$T/err")"
[ ! -s "$T/out" ] || fail "nothing on stdout on error"
expect_usage() { # args...: exit 2 and a message
    set +e
    "$DRIFT_BIN" top "$@" >"$T/out" 2>"$T/err" </dev/null; local rc=$?
    set -e
    [ "$rc" = 2 ] || fail "drift top $* exits $rc, expected 2"
    [ -s "$T/err" ] || fail "drift top $*: no message"
}
expect_usage "$T/a.h5" --batch --format xml
expect_usage "$T/a.h5" --batch --steps 9:3
expect_usage "$T/a.h5" --batch --agg median
expect_usage "$T/a.h5" --batch --sort colour
expect_usage "$T/a.h5" --batch --step 999
expect_usage "$T/a.h5" --batch --bogus
expect_usage "$T/a.h5" "$T/a.h5" --batch
expect_usage
expect_usage "$T/a.h5" # stdout is not a terminal here: the dashboard needs one
grep -q -- "--batch" "$T/err" || fail "the no-terminal message points to --batch"
echo "ok: tui_batch"
