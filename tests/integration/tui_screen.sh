#!/usr/bin/env bash
# drift top in tmux on a demo trace: the first screen shows the expected
# layers and values (computed independently from the file with h5py), and
# sorting, filtering, drill-down, aggregation, CFG normalisation, help and
# resizing (down to 40x12, 20x6, a too-small 10x4, up to 300x100 and back)
# change the screen as expected without crashing or garbling it. Every wait
# is a bounded poll for expected text; nothing asserts on timing.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
BENCH="$(dirname "$DRIFT_BIN")/bench_tui"
[ -x "$BENCH" ] || { echo "SKIP: $BENCH not built"; exit 77; }
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
"$PY" -c "import h5py" 2>/dev/null || { echo "SKIP: h5py not available"; exit 77; }
T="$DRIFT_TMP/tui_screen"
rm -rf "$T" && mkdir -p "$T"
SOCK="drift-test-$$"
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null || true' EXIT
# a session that lives as long as the test: killing the last 'top' session would make the
# server exit, and the next tmux command can reach it while it exits ('server exited
# unexpectedly', seen once under ASan in CI)
tm new-session -d -s keepalive -x 20 -y 5 'sleep 3600'
fail() {
    echo "FAIL: $*" >&2
    echo "--- screen:" >&2
    tm capture-pane -p -t top >&2 2>/dev/null || true
    [ -s "$T/stderr" ] && { echo "--- drift stderr:" >&2; cat "$T/stderr" >&2; }
    exit 1
}
# wait_check KEY: polls (at most 30 s) until the screen satisfies expectation KEY
wait_check() {
    local out=""
    for _ in $(seq 300); do
        tm capture-pane -p -t top >"$T/screen.txt" 2>/dev/null || true
        if out=$("$PY" "$T/check.py" "$T/screen.txt" "$T/expect.json" "$1" 2>&1); then return 0; fi
        sleep 0.1
    done
    echo "$out" >&2
    fail "screen never satisfied '$1'"
}
keys() { tm send-keys -t top "$@"; }

# --- the demo trace: a plan whose forward dtype differs from the rollout's
cat >"$T/plan.json" <<'EOF'
{"name": "demo_mixed", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
 "diffusion_forward_dtype": "bf16", "sglang_dit_precision": "fp32",
 "param_dtype_patterns": [["*.norm2.*", "fp32"]]}
EOF
"$BENCH" --write-only "$T/demo.h5" --steps 12 --sites 40 --guidance 4.5 --run-id demo-run --plan "$T/plan.json"
# a known-good run: same model, without the one bad layer (blocks.1.norm2 40x its neighbours)
"$BENCH" --write-only "$T/good.h5" --steps 6 --sites 40 --outlier 1 --run-id good-run

# --- expectations, from the file itself (h5py), not from drift
"$PY" - "$T/demo.h5" "$T/expect.json" <<'EOF'
import h5py, json, math, sys
path, out = sys.argv[1], sys.argv[2]
f = h5py.File(path, "r")
names = [n.decode() for n in f["/metrics/site_names"]["name"]]
steps = [int(s) for s in f["/steps"]["step"]]
cells = {}
for r in f["/metrics/rows"][:]:
    if int(r["variant"]) == 0 and int(r["denoise_index"]) == -1:
        cells[(int(r["site"]), int(r["step"]))] = [float(r[k]) for k in ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine")]
last = steps[-1]
def fv(v): return "-" if math.isnan(v) else ("0" if v == 0 else "%.3e" % v)
def fc(v): return "-" if math.isnan(v) else "%.8f" % v
def fmt(vals): return [fv(vals[0]), fv(vals[1]), fv(vals[2]), fc(vals[3])]
NAN = float("nan")
def at(i, s): return cells.get((i, s), [NAN] * 4)
def mean_over(i):
    out = []
    for m in range(4):
        acc, n = 0.0, 0
        for s in steps:
            v = at(i, s)[m]
            if not math.isnan(v):
                acc += v; n += 1
        out.append(acc / n if n else NAN)
    return out
def row(i, vals): return [names[i]] + fmt(vals)
def by(key_vals, desc):
    def k(i):
        v = key_vals(i)
        return (math.isnan(v), -v if desc else v, i) if not math.isnan(v) else (True, 0, i)
    return sorted(range(len(names)), key=k)
E = {}
order = list(range(len(names)))
E["first"] = {"contains": ["drift top", "run demo-run", "trainer", "wan2.2:layers=42", "cfg s=4.5",
                           "steps 12 [0..11]", "CLOSED", "plan demo_mixed: fwd bf16  sglang fp32",
                           "! forward bf16 != sglang fp32", "step 11 (latest)", "raw", "40 layers",
                           "first divergent input:cond:post_cast", "log_prob |diff| ", "|ratio-1| ",
                           # defect 22.12: labelled chart axes (y 0..max, the steps under their bars)
                           "y 0..", "0" + " " * 9 + "11 step"],
              "rows": [row(i, at(i, last)) for i in order[:12]]}
# defect 22.12: the two charts carry two signals: the PPO signal (log_prob |diff| with |ratio-1|, one chart),
# and the selected layer's mean |diff| (the first divergent layer at first; j moves the selection and the chart)
fd = names.index("input:cond:post_cast")
E["chart_sel"] = {"contains": ["log_prob |diff| \u2588, |ratio-1| \u2022", "mean|d| input:cond:post_cast  y 0.."],
                  "absent": ["ratio_abs_minus_1"], "once": ["log_prob"]}
E["chart_next"] = {"contains": ["mean|d| %s" % names[fd + 1][:24]], "absent": ["mean|d| input:cond:post_cast"]}
desc_mean = by(lambda i: at(i, last)[0], True)
E["sort_mean"] = {"contains": ["sort mean\u25bc"], "rows": [row(i, at(i, last)) for i in desc_mean[:10]]}
asc_mean = by(lambda i: at(i, last)[0], False)
E["sort_mean_asc"] = {"contains": ["sort mean\u25b2"], "rows": [row(i, at(i, last)) for i in asc_mean[:10]]}
by_name = sorted(order, key=lambda i: (names[i].encode(), i))
E["sort_name"] = {"contains": ["sort name\u25b2"], "rows": [row(i, at(i, last)) for i in by_name[:10]]}
norm2 = [i for i in by_name if names[i].endswith(".norm2:out")]
E["filter"] = {"contains": ['filter "*.norm2:*" %d/40' % len(norm2)], "rows": [row(i, at(i, last)) for i in norm2],
               "absent": ["blocks.0.ffn:out", "input:latents:pre_cast"], "rows_exact": True}
d = norm2[0]
E["drill"] = {"contains": ["layer %s" % names[d], "#%d of 40 in execution order" % (d + 1), "mean |diff| per step",
                           "0" + " " * 9 + "11 step"],
              "drill": [[str(s)] + fmt(at(d, s)) for s in reversed(steps)][:8]}
E["back"] = E["filter"]
# defect 22.12: / starts a fresh filter (the table unfiltered while typing); Esc restores the previous one
E["fresh_filter"] = {"contains": ["filter (glob or substring, Enter apply, Esc cancel):", "40 layers"],
                     "absent": ['filter "*.norm2:*"', "cancel): *"]}
E["agg_mean"] = {"contains": ["mean over 12 steps"], "rows": [row(i, mean_over(i)) for i in norm2]}
def cfg(v): return [v[0] / 4.5, v[1] / 4.5, v[2], v[3]]
E["cfg"] = {"contains": ["|diff|/s (s=4.5)", "mean/s", "max/s"], "rows": [row(i, cfg(mean_over(i))) for i in norm2]}
# defect 22.10: every help line whole inside the box, the mark as the table shows it, the new keys
E["help"] = {"contains": ["sort by order, name, mean, max, rel, cos", "Any other key closes this help.",
                          "per-step chart / dtype census (intercept) ", "heatmap layers x steps / its metric (log scale)",
                          "first divergent layer / one row per block", "Marks: \u25b6 first divergent layer"]}
E["no_help"] = {"absent": ["Any other key closes this help."], "rows": [row(i, cfg(mean_over(i))) for i in norm2]}
E["unfiltered"] = {"contains": ["40 layers"], "rows": [row(i, at(i, last)) for i in order[:12]]}
# narrow screens: names cut to the column width, only the columns that fit
# names longer than the 18-cell column are cut in the middle behind an
# ellipsis (defect 22.12; issue 35: "blocks.7.a\u20262:out", both ends tell)
def mid(n, w=18): return n if len(n) <= w else n[:w - 1 - (w - 1) // 2] + "\u2026" + n[len(n) - (w - 1) // 2:]
E["small_40x12"] = {"size": [40, 12], "contains": ["drift top", "layer", "input:lat\u2026pre_cast"],
                    "rows": [[mid(names[i])] + fmt(at(i, last))[:2] for i in order[:8]]}
E["small_20x6"] = {"size": [20, 6], "contains": ["drift top"]}
E["tiny"] = {"size": [10, 4], "contains": ["terminal t"]}
# at 100 columns a chart label drops what does not fit whole (defect 22.12: titles overlapped, numbers were cut)
E["w100"] = {"size": [100, 40], "contains": ["|ratio-1| \u2022  y 0..", "mean|d| input:latents:pre_cast  "],
             "y_ranges_whole": True}
E["huge"] = {"size": [300, 100], "contains": ["log_prob |diff| ", "mean|d| input:latents:pre_cast  "],
             "rows": [row(i, at(i, last)) for i in order[:40]]}
json.dump(E, open(out, "w"))
EOF

cat >"$T/check.py" <<'EOF'
import json, re, sys
screen = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n")
if screen and screen[-1] == "":
    screen = screen[:-1]
E = json.load(open(sys.argv[2]))[sys.argv[3]]
def die(msg):
    print(msg); sys.exit(1)
text = "\n".join(screen)
for s in E.get("contains", []):
    if s not in text: die("missing %r" % s)
for s in E.get("absent", []):
    if s in text: die("unexpected %r" % s)
for s in E.get("once", []):
    if text.count(s) != 1: die("%r shown %d times, expected once" % (s, text.count(s)))
if E.get("y_ranges_whole"):
    for m in re.finditer(r"y 0\.\.(\S*)", text):
        if not re.fullmatch(r"0|-|[0-9]\.[0-9]{3}e[-+][0-9]{2}", m.group(1)): die("cut y range %r" % m.group(0))
if "size" in E:
    w, h = E["size"]
    if len(screen) != h: die("expected %d lines, got %d" % (h, len(screen)))
    for ln in screen:
        if len(ln.rstrip()) > w: die("line wider than %d: %r" % (w, ln))
def find_header(word):
    for k, ln in enumerate(screen):
        if re.match(r"^\S?\s*" + word + r"\S*\s+mean", ln):
            return k
    die("no table header")
if "rows" in E:
    k = find_header("layer")
    for j, r in enumerate(E["rows"]):
        if k + 1 + j >= len(screen): die("screen ends before row %d" % j)
        ln = screen[k + 1 + j]
        name = re.escape(r[0]) + (r"\S*" if E.get("prefix") else "")
        pat = r"^.\s" + name + r"\s+" + r"\s+".join(re.escape(v) for v in r[1:]) + r"(\s|$)"
        if not re.search(pat, ln): die("row %d: expected %r, got %r" % (j, r, ln))
    if E.get("rows_exact"):
        nxt = screen[k + 1 + len(E["rows"])] if k + 1 + len(E["rows"]) < len(screen) else ""
        if re.match(r"^.\s\S+\s+\S+", nxt) and ":" in nxt: die("extra row after the expected ones: %r" % nxt)
if "drill" in E:
    k = find_header("step")
    for j, r in enumerate(E["drill"]):
        ln = screen[k + 1 + j]
        pat = r"^\s*" + r"\s+".join(re.escape(v) for v in r) + r"(\s|$)"
        if not re.search(pat, ln): die("drill row %d: expected %r, got %r" % (j, r, ln))
EOF

ARGS=""
start() { # start COLS ROWS ENV...: drift top on the demo trace (plus $ARGS) in a fresh tmux session
    local cols="$1" rows="$2"; shift 2
    rm -f "$T/exit" "$T/stderr"
    tm new-session -d -s top -x "$cols" -y "$rows" \
        "env $* '$DRIFT_BIN' top '$T/demo.h5' $ARGS 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
}
# colour_is NAME COLOUR: the layer's name is drawn in SGR colour COLOUR (31 red, 32 green, 33 yellow)
colour_is() {
    tm capture-pane -e -p -t top >"$T/screen_e.txt"
    "$PY" - "$T/screen_e.txt" "$1" "$2" <<'PYEOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
pat = r"\x1b\[([0-9;]*)m((?:\x1b\[[0-9;]*m)*)" + re.escape(sys.argv[2]) + r"\x1b"
for m in re.finditer(pat, text):
    codes = (m.group(1) + ";" + ";".join(re.findall(r"\[([0-9;]*)m", m.group(2)))).split(";")
    if sys.argv[3] in codes: sys.exit(0)
sys.exit(1)
PYEOF
}
quit_ok() { # q, then the exit status must be 0 and stderr empty (sanitizer reports land there)
    keys q
    for _ in $(seq 300); do [ -s "$T/exit" ] && break; sleep 0.1; done
    [ -s "$T/exit" ] || fail "drift top did not exit after q"
    [ "$(cat "$T/exit")" = 0 ] || fail "drift top exited with $(cat "$T/exit")"
    [ ! -s "$T/stderr" ] || fail "drift top wrote to stderr"
    tm kill-session -t top
}

start 120 40 LANG=C.UTF-8 LC_ALL=C.UTF-8
wait_check first
# absolute thresholds: the bad layer (mean |diff| 2.5e-3) is a warning, its neighbours ok
colour_is "blocks.1.norm2:out" 33 || fail "blocks.1.norm2:out should be yellow (warn) without --ref"
colour_is "blocks.1.attn1:out" 32 || fail "blocks.1.attn1:out should be green (ok)"
colour_is "input:latents:pre_cast" 36 || fail "a bitwise-equal layer should be cyan"
wait_check chart_sel
keys j; wait_check chart_next
keys k; wait_check first
keys 3; wait_check sort_mean            # sort by mean |diff|, worst first
keys r; wait_check sort_mean_asc        # reverse
keys 2; wait_check sort_name            # by name
keys / '*.norm2:*' Enter; wait_check filter
keys /; wait_check fresh_filter
keys Escape; wait_check filter
keys Enter; wait_check drill            # the first filtered row's per-step history
keys Escape; wait_check back
keys a; wait_check agg_mean             # this step -> mean over steps
keys c; wait_check cfg                  # divide |diff| by the guidance scale
keys '?'; wait_check help
keys x; wait_check no_help
keys c a a Escape 1; wait_check unfiltered  # raw, back to this step, no filter, execution order
for _ in $(seq 300); do # the screen to come back to after resizing, once the footer message is gone
    tm capture-pane -p -t top >"$T/first.txt"
    tail -1 "$T/first.txt" | grep -q "^q quit" && break
    sleep 0.1
done

# resizing: small, minimal, too small, huge, and back: same screen as before
tm resize-window -t top -x 40 -y 12; wait_check small_40x12
keys Enter Escape j k                   # keys at a small size do not crash
tm resize-window -t top -x 20 -y 6; wait_check small_20x6
tm resize-window -t top -x 10 -y 4; wait_check tiny
tm resize-window -t top -x 100 -y 40; wait_check w100
tm resize-window -t top -x 300 -y 100; wait_check huge
tm resize-window -t top -x 120 -y 40; wait_check first
same=0
for _ in $(seq 300); do # (a footer message may still be showing for a few seconds)
    tm capture-pane -p -t top >"$T/again.txt"
    if cmp -s "$T/first.txt" "$T/again.txt"; then same=1; break; fi
    sleep 0.1
done
[ "$same" = 1 ] || { diff "$T/first.txt" "$T/again.txt" >&2; fail "the screen after resizing back differs from the first screen"; }
quit_ok

# relative to a known-good run: the bad layer is 40x its reference value: red
ARGS="--ref '$T/good.h5'"
start 120 40 LANG=C.UTF-8 LC_ALL=C.UTF-8
wait_check first
grep -qF "ref good-run" "$T/screen.txt" || fail "the header names the reference run"
colour_is "blocks.1.norm2:out" 31 || fail "blocks.1.norm2:out should be red (bad) against the good run"
colour_is "blocks.1.attn1:out" 32 || fail "blocks.1.attn1:out should be green (ok) against the good run"
# defect 22.1: the reference's value and the ratio are columns on screen
grep -qE "ref mean +x ref" "$T/screen.txt" || fail "the ref value and ratio columns are missing with --ref"
r=$(sed -n 's/^.*blocks\.1\.norm2:out .* \([0-9.]*\)x *$/\1/p' "$T/screen.txt")
awk -v r="$r" 'BEGIN { exit !(r > 10) }' || fail "the bad layer shows more than 10x its reference (got '$r')"
quit_ok
ARGS=""

# a non-UTF-8 locale gets ASCII glyphs
start 120 30 LANG=C LC_ALL=C
wait_check first
grep -q 'sort order^' "$T/screen.txt" || fail "ASCII sort arrow missing"
LC_ALL=C grep -q -P '[\x80-\xff]' "$T/screen.txt" && fail "non-ASCII output in the C locale"
quit_ok
# natural sort of names at 160x45 (defect 22.12): blocks.2 right after blocks.1, before blocks.10
"$BENCH" --write-only "$T/many.h5" --steps 2 --sites 100 --run-id many-run
rm -f "$T/exit" "$T/stderr"
tm new-session -d -s top -x 160 -y 45 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/many.h5' --sort name 2>'$T/stderr'; echo \$? >'$T/exit'; sleep 600"
"$DRIFT_BIN" top "$T/many.h5" --batch --format csv >"$T/many.csv"
grep -q "blocks\.10\." "$T/many.csv" || fail "test data: no blocks.10 layer"
for _ in $(seq 300); do tm capture-pane -p -t top >"$T/screen.txt"; grep -q "sort name" "$T/screen.txt" && break; sleep 0.1; done
keys g # the top of the table (the first divergent layer, selected at start, sorts after the blocks)
for _ in $(seq 300); do tm capture-pane -p -t top >"$T/screen.txt"; grep -qE "^. blocks\.0\." "$T/screen.txt" && break; sleep 0.1; done
order=$(grep -oE "^. blocks\.[0-9]+\." "$T/screen.txt" | grep -oE "[0-9]+" | uniq | tr '\n' ' ')
case "$order" in
"0 1 2 "*) ;;
*) fail "sort by name is not natural: blocks in screen order: $order" ;;
esac
quit_ok
echo "ok: tui_screen"
