#!/usr/bin/env bash
# docs/cli.md's rules through the binary (issue 22 defects 2, 6, 9, 10, 11,
# 13, 14): step ranges, outputs and --force, empty selections, messages and
# did-you-mean, --json errors, --atol/--rtol, CSV, the default plan,
# progress and bisect streaming, bisect --fix-out, the size warning, devices.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/cli_rules"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
GOOD="$T/plans/wan2_2_no_norm2.json"; BAD="$T/plans/wan2_2.json"
rec() { "$D" record --synthetic tiny-dit --trainer-plan "$BAD" --rollout-plan "$GOOD" "$@"; }
# expect RC PATTERN CMD...: exit code RC and PATTERN (grep -E) in stderr+stdout
expect() {
  local want=$1 pat=$2; shift 2
  local out rc; out=$("$@" 2>&1 </dev/null); rc=$?
  [ $rc -eq "$want" ] || fail "$* -> rc $rc (want $want): $out"
  echo "$out" | grep -Eq -- "$pat" || fail "$* -> no /$pat/ in: $out"
}

rec --steps 8 -o "$W/t.h5" 2>/dev/null || fail "record exited $?"

# ---- defect 2: --steps A:B is inclusive everywhere; out of range is exit 2
n_steps() { "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["first_divergent"]))'; }
[ "$("$D" replay "$W/t.h5" --plan "$BAD" --output-only --steps 2:5 --json | n_steps)" = 4 ] || fail "replay --steps 2:5 is not 4 steps"
[ "$("$D" replay "$W/t.h5" --plan "$BAD" --output-only --steps 7:7 --json | n_steps)" = 1 ] || fail "replay --steps 7:7 is not step 7"
[ "$("$D" replay "$W/t.h5" --plan "$BAD" --output-only --steps 6: --json | n_steps)" = 2 ] || fail "replay --steps 6: is not 6..7"
expect 2 "out of range; .*t.h5 has steps 0..7" "$D" replay "$W/t.h5" --plan "$BAD" --steps 20:30
expect 2 "out of range" "$D" replay "$W/t.h5" --plan "$BAD" --steps 5:8
expect 2 "out of range" "$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --steps 20:30
expect 2 "expected A:B" "$D" replay "$W/t.h5" --plan "$BAD" --steps 5:2
top_steps() { "$D" top "$W/t.h5" --batch --format json --steps "$1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"])'; }
[ "$(top_steps 2:5)" = "[2, 3, 4, 5]" ] || fail "top --steps 2:5 is not 2..5: $(top_steps 2:5)"
[ "$(top_steps 7:7)" = "[7]" ] || fail "top --steps 7:7 is not step 7: $(top_steps 7:7)"
expect 2 "out of range; .*t.h5 has steps 0..7" "$D" top "$W/t.h5" --batch --steps 20:30

# ---- defect 6: outputs never replace an existing file without --force
sum0=$(md5sum "$W/t.h5" "$W/t.rollout.h5")
expect 2 "t.h5 exists; give --force" rec --steps 1 -o "$W/t.h5"
rm -f "$W/only.h5"; cp "$W/t.rollout.h5" "$W/only.rollout.h5"
expect 2 "only.rollout.h5 exists; give --force" rec --steps 1 -o "$W/only.h5"
[ -e "$W/only.h5" ] && fail "a refused record wrote its trainer trace"
[ "$(md5sum "$W/t.h5" "$W/t.rollout.h5")" = "$sum0" ] || fail "a refused record changed the traces"
rec --steps 1 -o "$W/only.h5" --force 2>/dev/null || fail "record --force exited $?"
expect 2 "is an input of this replay" "$D" replay "$W/t.h5" --plan "$BAD" --ref rollout -o "$W/t.rollout.h5" --force
expect 2 "is an input of this replay" "$D" replay "$W/t.h5" --plan "$BAD" -o "$W/t.h5" --force
# issue 22.6: TRACE's recorded rollout, even when this replay does not compare with it
expect 2 "is an input of this replay" "$D" replay "$W/t.h5" --plan "$BAD" -o "$W/t.rollout.h5" --force
[ "$(md5sum "$W/t.h5" "$W/t.rollout.h5")" = "$sum0" ] || fail "replay -o changed its inputs"
"$D" replay "$W/t.h5" --plan "$BAD" --output-only -o "$W/r.h5" >/dev/null 2>&1 || fail "replay -o exited $?"
expect 2 "r.h5 exists; give --force" "$D" replay "$W/t.h5" --plan "$BAD" --output-only -o "$W/r.h5"
"$D" replay "$W/t.h5" --plan "$BAD" --output-only -o "$W/r.h5" --force >/dev/null 2>&1 || fail "replay -o --force exited $?"
touch "$W/idx.h5"
expect 2 "idx.h5 exists; give --force" "$D" merge "$W/t.h5" -o "$W/idx.h5"
expect 2 "is a directory" "$D" replay "$W/t.h5" --plan "$BAD" -o "$W" --force

# ---- defect 8: replay --ref TRACE2 refuses another family, missing steps, other shapes unless --allow-mismatch
"$D" record --synthetic tiny-dit:layers=3 --trainer-plan "$BAD" --rollout-plan "$GOOD" --steps 8 -o "$W/fam3.h5" 2>/dev/null || fail "record fam3"
rec --steps 4 -o "$W/four.h5" 2>/dev/null || fail "record four"
expect 2 "--ref .*fam3.h5: model family 'tiny-dit:layers=3.*differs from .*t.h5's 'tiny-dit:layers=2.*--allow-mismatch" \
  "$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/fam3.h5" --output-only
expect 2 "--ref .*four.h5: has no committed step 4 \(it has 4, 0..3\)" "$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/four.h5" --output-only
"$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/four.h5" --output-only --steps 0:3 >/dev/null 2>&1 || fail "replay of steps the --ref has"
expect 0 "warning: --ref .*fam3.h5: model family .*compared anyway" "$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/fam3.h5" --output-only --allow-mismatch
if "$PY" -c 'import h5py' 2>/dev/null; then  # the same family name over other shapes
  cp "$W/fam3.h5" "$W/shape.h5"
  "$PY" -c 'import h5py, sys
a = h5py.File(sys.argv[1], "r").attrs["family"]
f = h5py.File(sys.argv[2], "r+"); f.attrs["family"] = a' "$W/t.h5" "$W/shape.h5" || fail "h5py: set family"
  "$PY" - "$W/shape.h5" <<'PY' || fail "h5py: reshape a site"
import h5py, sys
f = h5py.File(sys.argv[1], "r+")
g = next(g for g in f["sites"].values() if g.attrs["name"].decode() == "blocks.0:out")
g.attrs["shape"] = [1, 16, 128]
PY
  out=$("$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/shape.h5" --output-only 2>&1); rc=$?
  # exit 2 either way: this check's message, or a reader that refuses a shape its data does not have
  [ $rc -eq 2 ] || fail "replay --ref with another site shape: rc $rc: $out"
  echo "$out" | grep -q "site 'blocks.0:out' has shape \[1,16,128\] there, \[1,32,64\] in" ||
    echo "$out" | grep -q "shape.h5.*shape" || fail "replay --ref with another site shape: $out"
fi

# ---- defect 9: a selection that matches nothing is exit 2, nothing written
expect 2 "'blocks.9.\*' matches no site" rec --steps 2 --sites 'blocks.9.*' -o "$W/s.h5"
[ -e "$W/s.h5" ] || [ -e "$W/s.rollout.h5" ] && fail "record --sites matching nothing wrote a trace"
rec --steps 1 --sites 'blocks.0.*' -o "$W/s.h5" 2>/dev/null || fail "record --sites blocks.0.* exited $?"
expect 2 "^drift top: --variant: '5' matches no metric row of .*t.h5" "$D" top "$W/t.h5" --batch --variant 5
expect 2 "^drift top: --filter: 'nomatch\*' matches no layer of .*t.h5 \(layers are named like" "$D" top "$W/t.h5" --batch --filter 'nomatch*'
"$D" top "$W/t.h5" --batch --variant 0 --filter norm2 >/dev/null || fail "top --variant 0 --filter norm2 exited $?"

# ---- defect 10: help text
"$D" bisect --help | grep -q '%%' && fail "bisect --help prints '%%'"
"$D" plan --help | grep -q 'DESIGN.md' && fail "plan --help points at DESIGN.md (not in the repository)"
"$D" plan --help | grep -q 'docs/cli.md' || fail "plan --help does not point at docs/cli.md"

# ---- defect 11: messages
long=$(printf 'x%.0s' $(seq 1 1100))
expect 2 "^drift record: --synthetic: model spec too long" "$D" record --synthetic "$long" --steps 1 \
  --trainer-plan "$BAD" --rollout-plan "$GOOD" -o "$W/long.h5"
expect 2 "expected trainer, rollout, oracle or the path of a trace, got 'rolout' \(did you mean 'rollout'\?\)" \
  "$D" replay "$W/t.h5" --plan "$BAD" --ref rolout
expect 2 "expected one of model_output_mean_abs_diff, model_output_max_abs_diff, model_output_rel_max, rmse, got 'mean'" \
  "$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --metric mean
expect 2 "did you mean 'param'" "$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --granularity parm
expect 2 "did you mean '--steps'" "$D" replay "$W/t.h5" --stpes 2
expect 2 "unknown model family 'tiny-dt' \(expected tiny-dit, wan2.2 or graph:FILE.json.*did you mean 'tiny-dit'" \
  "$D" record --synthetic tiny-dt --steps 1 --trainer-plan "$BAD" --rollout-plan "$GOOD" -o "$W/fam.h5"
expect 2 "unknown model key 'lyers' .*did you mean 'layers'" "$D" plan compile --plan "$BAD" --model tiny-dit:lyers=2
expect 2 "did you mean 'replay'" "$D" relpay "$W/t.h5"
expect 2 "missing -o \(required\)" rec --steps 1
out=$(rec --steps 1 2>&1); echo "$out" | grep -q -- "--trainer-plan" && fail "record names present options as missing: $out"
expect 2 "is a directory" "$D" ls "$W"
expect 2 "is a directory" "$D" replay "$W" --plan "$BAD"
# top is still on its own parser, compare on the option table: the same message, the same did-you-mean
expect 2 "^drift top: unknown option '--folow' \(did you mean '--follow'\?\)$" "$D" top "$W/t.h5" --folow
expect 2 "^drift compare: unknown option '--jsn' \(did you mean '--json'\?\)$" "$D" compare "$W/t.h5" "$W/t.rollout.h5" --jsn
expect 2 "^drift report: unknown option '--agaisnt' \(did you mean '--against'\?\)$" "$D" report "$W/t.h5" --agaisnt "$W/t.h5" -o "$W/r.html"
expect 2 "^drift compare: --format: expected one of text, json, csv, got 'jsn' \(did you mean 'json'\?\)$" \
  "$D" compare "$W/t.h5" "$W/t.rollout.h5" --format jsn
expect 2 "^drift top: --sort: expected order, name, mean, max, rel or cos, got 'nme' \(did you mean 'name'\?\)$" \
  "$D" top "$W/t.h5" --batch --sort nme
expect 2 "got 'jsn' \(did you mean 'json'\?\)$" "$D" top "$W/t.h5" --batch --format jsn
for c in "record" "ls $W/t.h5" "check $W/t.h5" "replay $W/t.h5" "bisect $W/t.h5" "merge $W/t.h5" "demo" "plan compile" \
         "top $W/t.h5" "compare $W/t.h5 $W/t.h5" "report $W/t.h5"; do
  expect 2 "^drift ${c%% /*}: unknown option '--bogus'$" "$D" $c --bogus
done
# not a regular file: refused at once (an HDF5 open of a FIFO blocks forever)
mkfifo "$W/fifo.h5" || fail "mkfifo"
expect 2 "fifo.h5: is not a regular file" timeout 20 "$D" ls "$W/fifo.h5"
expect 2 "fifo.h5: is not a regular file" timeout 20 "$D" replay "$W/t.h5" --plan "$BAD" --ref "$W/fifo.h5"
# HDF5's internals (errno numbers, open flags in hex) never reach the user
out=$(rec --steps 1 -o /proc/drift-cli-rules.h5 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -Eq "cannot create the (trace file|writer.s lock file)" || fail "record -o under /proc: rc $rc: $out"
echo "$out" | grep -Eq "o_flags|errno =" && fail "HDF5 internals in the message: $out"
if "$PY" -c 'import h5py' 2>/dev/null; then
  cp "$W/t.h5" "$W/held.h5"
  "$PY" -c 'import h5py, sys, time
f = h5py.File(sys.argv[1], "r+"); open(sys.argv[2], "w").close(); time.sleep(60)' "$W/held.h5" "$W/held.ready" &
  holder=$!
  for _ in $(seq 1 100); do [ -e "$W/held.ready" ] && break; sleep 0.1; done
  out=$("$D" ls "$W/held.h5" 2>&1); rc=$?
  kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
  [ $rc -eq 2 ] && echo "$out" | grep -q "another process has the file open" || fail "ls of a file held open: rc $rc: $out"
  echo "$out" | grep -Eq "errno =|error message =" && fail "HDF5 internals in the message: $out"
fi
# --json: the error is one JSON document on stdout as well as the stderr line
for c in "ls $W/nope.h5" "check $W/nope.h5" "replay $W/t.h5 --steps 99" "bisect $W/t.h5 --good $GOOD" \
         "plan compile --plan $T/plans/wan_controlnet.json --model wan2.2" "replay $W/t.h5 --bogus"; do
  "$D" $c --json >"$W/err.json" 2>"$W/err.txt"; rc=$?
  [ $rc -eq 2 ] || fail "$c --json: rc $rc"
  [ -s "$W/err.txt" ] || fail "$c --json: no stderr line"
  "$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["exit"]==2 and e["message"] and "code" in e and "field" in e, e' \
    "$W/err.json" || fail "$c --json: stdout is not a JSON error: $(cat "$W/err.json")"
done

# ---- replay: the recorded plan by default, --atol/--rtol, CSV
"$D" replay "$W/t.h5" --ref trainer --json >"$W/self.json" 2>"$W/self.err" || fail "replay without --plan exited $?"
grep -q "no --plan given: replaying the plan .* was recorded with ('wan2_2')" "$W/self.err" || fail "replay does not say it uses the recorded plan"
"$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["plan"]=="wan2_2" and all(s["bitwise_equal"] for s in d["sites"]), d["plan"]' \
  "$W/self.json" || fail "the recorded plan does not replay bitwise"
expect 1 "output:noise_pred: max_abs_diff .* exceeds --atol 0" "$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --atol 0
expect 1 "rel_max .* exceeds --rtol 1e-09" "$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --rtol 1e-9
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --atol 10 --rtol 10 >/dev/null 2>&1 || fail "replay within --atol/--rtol exited $?"
"$D" replay "$W/t.h5" --plan "$GOOD" --ref rollout --output-only --atol 0 >/dev/null 2>&1 || fail "replay of the rollout's own plan is over --atol 0"
# --max-floor: the floor replay measures is bisect's noise floor (same nudge, same plan)
expect 1 "exceeds --max-floor 0.5" "$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --max-floor 0.5
"$D" replay "$W/t.h5" --plan "$GOOD" --ref rollout --output-only --max-floor 0 >/dev/null 2>"$W/floor.err" || fail "the rollout's own plan is over --max-floor 0"
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --json >"$W/floor.json" 2>/dev/null || fail "bisect --json exited $?"
"$PY" - "$W/floor.err" "$W/floor.json" <<'PY' || fail "replay's noise floor is not bisect's"
import json, re, sys
f = float(re.search(r"noise floor \(([0-9.e+-]+)\)", open(sys.argv[1]).read()).group(1))
b = json.load(open(sys.argv[2]))["noise_floor"]
assert f > 0 and abs(f - b) <= 1e-5 * b, (f, b)
PY
# an exit 1 keeps the document, and the document says what failed; x floor where the floor is known
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --atol 0 --rtol 10 --max-floor 0.5 --json \
  >"$W/chk.json" 2>/dev/null; rc=$?
[ $rc -eq 1 ] || fail "replay --atol 0 --json: rc $rc"
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --max-floor 0.5 --format csv >"$W/chk.csv" 2>/dev/null
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --max-floor 0.5 >"$W/chk.txt" 2>/dev/null
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --output-only --json >"$W/nochk.json" 2>/dev/null
"$PY" - "$W" <<'PY' || fail "replay's checks and x floor"
import csv, json, re, sys
w = sys.argv[1]
d = json.load(open(w + "/chk.json"))
out = next(s for s in d["sites"] if s["site"] == "output:noise_pred")
floor = d["noise_floor"]["mean_abs_diff"]
assert d["noise_floor"]["site"] == "output:noise_pred" and floor > 0, d["noise_floor"]
assert abs(out["x_floor"] - out["mean_abs_diff"] / floor) <= 1e-12 * out["x_floor"], (out["x_floor"], out["mean_abs_diff"], floor)
ck = {c["option"]: c for c in d["checks"]}
assert sorted(ck) == ["--atol", "--max-floor", "--rtol"], ck
assert ck["--atol"]["exceeded"] is True and ck["--atol"]["value"] == out["max_abs_diff"] and ck["--atol"]["limit"] == 0
assert ck["--rtol"]["exceeded"] is False and ck["--rtol"]["value"] == out["rel_max"]
assert ck["--max-floor"]["exceeded"] is (out["x_floor"] > 0.5) and ck["--max-floor"]["value"] == out["x_floor"], ck
n = json.load(open(w + "/nochk.json"))
assert n["checks"] == [] and "noise_floor" not in n and all("x_floor" not in s for s in n["sites"]), n.get("checks")
row = next(r for r in csv.DictReader(open(w + "/chk.csv")) if r["site"] == "output:noise_pred")
assert float(row["x_floor"]) > 0.5, row
txt = open(w + "/chk.txt").read()
assert re.search(r"^noise floor: output:noise_pred mean\|d\| [0-9.e+-]+ .*= [0-9.]+ x floor$", txt, re.M), txt[-400:]
PY
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --format csv >"$W/t.csv" 2>/dev/null || fail "replay --format csv exited $?"
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --json >"$W/t.json" 2>/dev/null || fail "replay --json exited $?"
"$PY" - "$W/t.csv" "$W/t.json" <<'PY' || fail "CSV does not match the JSON"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sites = json.load(open(sys.argv[2]))["sites"]
assert [r["site"] for r in rows] == [s["site"] for s in sites], "site order"
for r, s in zip(rows, sites):
    assert float(r["mean_abs_diff"]) == float("%.9g" % s["mean_abs_diff"]), (r, s["mean_abs_diff"])
    assert int(r["n_diff"]) == s["n_diff"] and int(r["steps_bitwise_equal"]) == s["steps_bitwise_equal"]
    assert abs(float(r["one_minus_cosine"]) - (1 - s["cosine"])) < 1e-12
PY

# ---- the worst element: a step and a coordinate with both values, read back from the files
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout -o "$W/worst.h5" --json >"$W/worst.json" 2>/dev/null || fail "replay -o --json exited $?"
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout >"$W/worst.txt" 2>/dev/null || fail "replay exited $?"
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout --format csv >"$W/worst.csv" 2>/dev/null || fail "replay --format csv exited $?"
if "$PY" -c 'import h5py, numpy' 2>/dev/null; then
"$PY" - "$W" <<'PY' || fail "the worst element does not match the trace files"
import csv, h5py, json, numpy as np, re, sys
w = sys.argv[1]
d = json.load(open(w + "/worst.json"))
def records(path, name):  # {step: array} of one site
    f = h5py.File(path, "r")
    g = next(g for g in f["sites"].values() if g.attrs["name"].decode() == name)
    return {int(s): np.asarray(g["data"][i], dtype=np.float32) for i, s in enumerate(g["index"]["step"])}
out = {s["site"]: s for s in d["sites"]}
checked = 0
for name, s in out.items():
    if s["bitwise_equal"]:
        assert s["worst"] is None, (name, s["worst"])
        continue
    wv = s["worst"]
    ref = records(w + "/t.rollout.h5", name)
    r = ref[wv["step"]]
    assert list(r.shape) and len(wv["index"]) == r.ndim, (name, wv, r.shape)
    assert np.ravel_multi_index(wv["index"], r.shape) == wv["offset"], (name, wv)
    assert r[tuple(wv["index"])] == np.float32(wv["reference"]), (name, wv, r[tuple(wv["index"])])
    assert abs(wv["candidate"] - wv["reference"]) == s["max_abs_diff"], (name, wv, s["max_abs_diff"])
    # no larger difference anywhere: the reference at every step against the replayed output
    if name == "output:noise_pred":
        cand = records(w + "/worst.h5", name)
        assert cand[wv["step"]][tuple(wv["index"])] == np.float32(wv["candidate"]), (wv,)
        m = max(float(np.max(np.abs(cand[k].astype(np.float64) - ref[k]))) for k in cand)
        assert m == s["max_abs_diff"], (m, s["max_abs_diff"])
    checked += 1
assert checked >= 2, checked
rows = {r["site"]: r for r in csv.DictReader(open(w + "/worst.csv"))}
o = out["output:noise_pred"]["worst"]
c = rows["output:noise_pred"]
assert int(c["worst_step"]) == o["step"] and int(c["worst_offset"]) == o["offset"], c
f32 = lambda x: np.float32(float(x))  # %.9g round-trips an fp32 value
assert f32(c["worst_candidate"]) == f32(o["candidate"]) and f32(c["worst_reference"]) == f32(o["reference"]), c
txt = open(w + "/worst.txt").read()
idx = "[" + ",".join(str(i) for i in o["index"]) + "]"
assert re.search(r"^  output:noise_pred +step %d %s +replay " % (o["step"], re.escape(idx)), txt, re.M), txt[-600:]
PY
fi

# ---- defect 13: progress on a terminal only; bisect streams every probe
script -qfec "$D replay $W/t.h5 --plan $BAD --ref rollout" /dev/null >"$W/tty.txt" 2>&1 || fail "replay under script exited $?"
grep -aq "drift replay: .*elapsed" "$W/tty.txt" || fail "no progress line on a terminal: $(head -c 400 "$W/tty.txt")"
"$D" replay "$W/t.h5" --plan "$BAD" --ref rollout 2>"$W/notty.err" >/dev/null
grep -q "elapsed" "$W/notty.err" && fail "progress printed when stderr is not a terminal"
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --granularity param --all --threshold 0 --steps 0:1 >"$W/b.txt" 2>"$W/b.err" || fail "bisect exited $?"
"$PY" - "$W/b.txt" "$W/b.err" <<'PY' || fail "bisect does not stream its probes"
import re, sys
out, err = open(sys.argv[1]).read(), open(sys.argv[2]).read()
seqs = [int(m) for m in re.findall(r"^probe (\d+) \(round \d+\): \d+ of \d+ differences? applied -> (?:drifts|as good)", err, re.M)]
total = int(re.search(r"^(\d+) probes", out, re.M).group(1))
assert sorted(seqs) == list(range(1, total + 1)), (seqs, total)
rounds = [int(r) for r in re.findall(r"^probe \d+ \(round (\d+)\)", err, re.M)]
sets = re.findall(r"^culprit set (\d+) found: (.*)$", err, re.M)
assert len(sets) == len(re.findall(r"^culprit set \d+ \(1-minimal", out, re.M)) >= 2, sets
assert max(rounds) >= len(sets), (rounds, sets)
# the first set is printed before the later rounds' probes
lines = err.splitlines()
first_set = next(i for i, l in enumerate(lines) if l.startswith("culprit set 1 found"))
assert any(l.startswith("probe") and "(round 2)" in l for l in lines[first_set:]), "set 1 not streamed before round 2"
PY
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --json >/dev/null 2>"$W/bj.err" || fail "bisect --json exited $?"
grep -q "^probe " "$W/bj.err" && fail "bisect --json streams probe lines"

# ls --format csv: the sites table, the JSON's sites
"$D" ls "$W/t.h5" --format csv >"$W/ls.csv" 2>/dev/null || fail "ls --format csv exited $?"
"$D" ls "$W/t.h5" --json >"$W/ls.json" 2>/dev/null || fail "ls --json exited $?"
"$PY" - "$W/ls.csv" "$W/ls.json" <<'PY' || fail "ls CSV does not match its JSON"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sites = json.load(open(sys.argv[2]))["sites"]
assert [r["site"] for r in rows] == [s["name"] for s in sites] and len(rows) > 5, ([r["site"] for r in rows][:3], sites[:1])
for r, s in zip(rows, sites):
    assert r["dtype"] == s["dtype"] and json.loads(r["shape"]) == s["shape"] and int(r["records"]) == s["records"], (r, s)
PY
expect 2 "--format csv and --json: give one" "$D" ls "$W/t.h5" --format csv --json

# plan compile --format csv: one row per override, the JSON's maps
"$D" plan compile --plan "$BAD" --model wan2.2:layers=3 --format csv >"$W/pc.csv" || fail "plan compile --format csv exited $?"
"$D" plan compile --plan "$BAD" --model wan2.2:layers=3 --json >"$W/pc.json" || fail "plan compile --json exited $?"
"$PY" - "$W/pc.csv" "$W/pc.json" <<'PY' || fail "plan compile CSV does not match its JSON"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
want = [(w["wrap"], k, v) for w in d["wraps"] for k, v in w["overrides"].items()] + \
       [("", k, v) for k, v in d["root"]["overrides"].items()]
got = [(r["wrap"], r["local_fqn"], r["dtype"]) for r in rows]
assert got == want and len(rows) == d["override_count"] >= 2, (got, want)
for r in rows:
    assert r["fqn"] == (r["wrap"] + "." if r["wrap"] else "") + r["local_fqn"], r
PY

# bisect --format csv: one row per culprit, the JSON's values
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --granularity param --all --threshold 0 --steps 0:1 --format csv >"$W/b.csv" 2>/dev/null || fail "bisect --format csv exited $?"
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --granularity param --all --threshold 0 --steps 0:1 --json >"$W/b.json" 2>/dev/null || fail "bisect --json exited $?"
"$PY" - "$W/b.csv" "$W/b.json" <<'PY' || fail "bisect CSV does not match its JSON"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
want = [(k + 1, c) for k, s in enumerate(d["culprit_sets"]) for c in s]
assert len(rows) == len(want) >= 2, (len(rows), len(want))
for r, (k, c) in zip(rows, want):
    assert int(r["set"]) == k and r["name"] == c["name"] and r["kind"] == c["kind"], (r, c)
    assert r["good"] == c["good"] and r["bad"] == c["bad"] and r["first_divergent"] == c["first_divergent"], (r, c)
    assert float(r["metric_alone"]) == float("%.9g" % c["metric_alone"]) and float(r["floor_units"]) == float("%.9g" % c["floor_units"]), (r, c)
PY
expect 2 "--format csv and --json: give one" "$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --format csv --json

# ---- bisect --fix-out: the bad plan without the culprits, verified
"$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --all --fix-out "$W/fix.json" --json >"$W/fix.out" 2>/dev/null || fail "bisect --fix-out exited $?"
"$PY" - "$W/fix.out" "$W/fix.json" <<'PY' || fail "bisect --fix-out"
import json, sys
d = json.load(open(sys.argv[1])); f = d["fix"]; p = json.load(open(sys.argv[2]))
assert f["path"] == sys.argv[2] and f["verified"] is True, f
assert f["plan"] == p and p["param_dtype_patterns"] == [], p
assert f["output_mean_abs_diff"] == 0 and f["good_output_mean_abs_diff"] == 0, f
assert d["metric"] == "model_output_mean_abs_diff" and f["output_metric"] == 0 and f["good_output_metric"] == d["good_metric"], f
PY
# independent of bisect's own claim: the fix replays exactly as the good plan
"$D" replay "$W/t.h5" --plan "$W/fix.json" --ref rollout --output-only --atol 0 >/dev/null 2>&1 || fail "the fix plan does not replay as the good plan"
expect 2 "fix.json exists; give --force" "$D" bisect "$W/t.h5" --good "$GOOD" --bad "$BAD" --fix-out "$W/fix.json"

# ---- size warning before writing more than 4 GB (DRIFT_RECORD_WARN_BYTES lowers the limit for the test)
out=$(DRIFT_RECORD_WARN_BYTES=1000 rec --steps 2 -o "$W/warn.h5" 2>&1) || fail "record with a size warning exited $?"
echo "$out" | grep -Eq "warning: about [0-9.]+ GB will be written \([0-9.]+ GB trainer, [0-9.]+ GB rollout\)" || fail "no size warning: $out"
out=$(rec --steps 2 -o "$W/nowarn.h5" 2>&1) || fail "record exited $?"
echo "$out" | grep -q "warning" && fail "a small record warns about its size: $out"
expect 2 "cannot write .*big.h5: no such directory .*/no/such/dir" rec --steps 2 -o "$W/no/such/dir/big.h5"

# ---- defect 14: devices
out=$("$D" demo --device gpu --out "$W/demo" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "expected cpu, cuda or cuda:N, got 'gpu'" || fail "demo --device gpu: rc $rc: $out"
echo "$out" | grep -q "ref" && fail "demo --device gpu lists the undocumented ref backend: $out"
"$D" demo --device cuda --out "$W/demo" >"$W/demo.out" 2>"$W/demo.err"; rc=$?
if grep -q "built without CUDA" "$W/demo.err"; then
  [ $rc -eq 2 ] && [ ! -s "$W/demo.out" ] || fail "demo --device cuda without CUDA printed before failing: $(cat "$W/demo.out")"
fi
echo "cli_rules: ok"
