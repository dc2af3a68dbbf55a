#!/usr/bin/env bash
# drift merge through the real binary: two rank traces of one synthetic run
# merged into an index of HDF5 virtual datasets; the index is listed rank by
# rank (text and --json), h5dump shows VIRTUAL layout, h5py reads the same
# values through the index as through the rank files, and ls / replay / top
# --batch read the index (from another directory) exactly as the rank file.
# Hostile: missing rank, duplicate rank, a non-HDF5 input, ranks of another
# family, plan or step set (exit 2 unless --allow-mismatch), a deleted rank
# file (exit 2 naming it, never fill values).
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/merge_index.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W/run" "$W/elsewhere"
[ -x "$D" ] || fail "no drift binary at $D"
"$PY" -c 'import h5py, numpy' 2>/dev/null || { echo "SKIP: $PY lacks h5py/numpy"; exit 77; }
command -v h5dump >/dev/null || { echo "SKIP: no h5dump"; exit 77; }
PL="$T/plans"
"$D" merge --help | grep -q "SNAPSHOT" || fail "merge --help does not say the index is a snapshot"
"$D" ls --help | grep -q "#rank=N" || fail "ls --help does not document INDEX#rank=N"

for r in 0 1; do
  "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json" \
    --rank $r --world-size 2 -o "$W/run/trace-trainer.rank$r.h5" 2>/dev/null || fail "record rank $r"
done
"$D" merge "$W/run/trace-trainer.rank0.h5" "$W/run/trace-trainer.rank1.h5" -o "$W/run/idx.h5" || fail "merge exited $?"

# ---- listing ------------------------------------------------------------------
"$D" ls "$W/run/idx.h5" >"$W/ls.txt" || fail "ls index"
grep -q "drift-index" "$W/ls.txt" || fail "ls: no index header"
grep -q "== rank 1:" "$W/ls.txt" || fail "ls: rank 1 not listed"
grep -q "rank 1 of 2" "$W/ls.txt" || fail "ls: rank 1 meta"
"$D" ls "$W/run/idx.h5" --json >"$W/ls.json" || fail "ls --json"
"$D" ls "$W/run/trace-trainer.rank1.h5" --json >"$W/ls1.json" || fail "ls rank1"
"$PY" - "$W" <<'PY' || fail "ls --json of the index differs from the rank files'"
import json, sys
w = sys.argv[1]
d = json.load(open(w + "/ls.json"))
assert d["format"] == "drift-index" and d["world_size"] == 2 and d["missing_ranks"] == [], d
assert [r["rank"] for r in d["ranks"]] == [0, 1]
one = json.load(open(w + "/ls1.json"))
r1 = d["ranks"][1]
for k in set(one) | set(r1):
    if k == "path": continue
    assert r1.get(k) == one.get(k), (k, r1.get(k), one.get(k))
assert r1["steps"]["committed"] == 2 and len(r1["sites"]) > 5
PY

# ---- h5dump: virtual layout; h5py: same values through the index --------------
h5dump -p -d "/ranks/1/sites/output:noise_pred/data" "$W/run/idx.h5" | grep -q "VIRTUAL" || fail "h5dump: no VIRTUAL layout"
"$PY" - "$W/run" <<'PY' || fail "h5py: index and rank files differ"
import h5py, numpy as np, os, sys
os.chdir("/")   # relative VDS sources resolve against the index's directory
d = sys.argv[1]
idx = h5py.File(d + "/idx.h5", "r")
n = 0
for r in (0, 1):
    src = h5py.File("%s/trace-trainer.rank%d.h5" % (d, r), "r")
    g = idx["ranks/%d" % r]
    assert g.attrs["rank"] == r and g.attrs["index_source"] == b"trace-trainer.rank%d.h5" % r
    def visit(name, obj):
        global n
        if not isinstance(obj, h5py.Dataset): return
        a = obj[()]
        b = src[name][()]
        if obj.shape != ():
            assert obj.is_virtual, name
            b = b[: obj.shape[0]]
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), name
        n += 1
    g.visititems(visit)
    x = g["sites/output:noise_pred/data"][()]
    assert np.isfinite(x).all() and np.abs(x).max() > 0    # real values, not the fill value
assert n > 100, n
PY

# ---- replay, top and bisect read the index as the rank file (run from elsewhere) ----
cd "$W/elsewhere"
"$D" replay "$W/run/idx.h5#rank=1" --plan "$PL/wan2_2_no_norm2.json" --ref trainer --json >"$W/rep_idx.json" || fail "replay index"
"$D" replay "$W/run/trace-trainer.rank1.h5" --plan "$PL/wan2_2_no_norm2.json" --ref trainer --json >"$W/rep_r1.json" || fail "replay rank1"
"$D" top "$W/run/idx.h5" --batch --format json >"$W/top_idx.json" || fail "top index"
"$D" top "$W/run/trace-trainer.rank0.h5" --batch --format json >"$W/top_r0.json" || fail "top rank0"
"$D" bisect "$W/run/idx.h5#rank=1" --good "$PL/wan2_2_no_norm2.json" --bad "$PL/wan2_2.json" --json >"$W/bis_idx.json" || fail "bisect index"
"$D" bisect "$W/run/trace-trainer.rank1.h5" --good "$PL/wan2_2_no_norm2.json" --bad "$PL/wan2_2.json" --json >"$W/bis_r1.json" || fail "bisect rank1"
cd - >/dev/null
"$PY" - "$W" <<'PY' || fail "replay/top/bisect of the index differ from the rank file's"
import json, sys
w = sys.argv[1]
def strip(x):
    if isinstance(x, str):   # the trace's own path, wherever it is quoted
        for p in ("/run/idx.h5#rank=1", "/run/idx.h5", "/run/trace-trainer.rank1.h5", "/run/trace-trainer.rank0.h5"):
            x = x.replace(w + p, "TRACE")
        return x
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in ("path", "trace", "seconds", "elapsed", "wall_seconds", "time")}
    if isinstance(x, list): return [strip(v) for v in x]
    return x
for a, b in (("rep_idx", "rep_r1"), ("top_idx", "top_r0"), ("bis_idx", "bis_r1")):
    A = strip(json.load(open("%s/%s.json" % (w, a)))); B = strip(json.load(open("%s/%s.json" % (w, b))))
    assert A == B, (a, json.dumps(A)[:400], json.dumps(B)[:400])
PY

# ---- hostile -------------------------------------------------------------------
out=$("$D" merge "$W/run/trace-trainer.rank1.h5" -o "$W/bad.h5" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "have no input: 0" || fail "missing rank: rc $rc: $out"
"$D" merge "$W/run/trace-trainer.rank1.h5" --allow-missing -o "$W/partial.h5" 2>/dev/null || fail "--allow-missing"
"$D" ls "$W/partial.h5" | grep -q "1 missing: 0" || fail "ls does not name the missing rank"
out=$("$D" merge "$W/run/trace-trainer.rank0.h5" "$W/run/trace-trainer.rank0.h5" -o "$W/bad.h5" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "distinct ranks" || fail "duplicate rank: rc $rc: $out"
echo "not hdf5" >"$W/junk.h5"
out=$("$D" merge "$W/run/trace-trainer.rank0.h5" "$W/junk.h5" -o "$W/bad.h5" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "junk.h5" || fail "non-HDF5 input: rc $rc: $out"
[ -e "$W/bad.h5" ] && fail "a failed merge left an index"
# ranks that do not agree (issue 22.8): another family, plan or step set is exit 2 naming the file and attribute
mis() { # NAME EXPECT-IN-MESSAGE RECORD-ARGS...
  local name=$1 expect=$2; shift 2
  "$D" record --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json" --rank 1 --world-size 2 \
    -o "$W/run/$name.h5" "$@" 2>/dev/null || fail "record $name"
  out=$("$D" merge "$W/run/trace-trainer.rank0.h5" "$W/run/$name.h5" -o "$W/bad.h5" 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "$name.h5:/.*$expect" || fail "merge of a rank with another $expect: rc $rc: $out"
  [ -e "$W/bad.h5" ] && fail "a refused merge ($name) left an index"
  "$D" merge "$W/run/trace-trainer.rank0.h5" "$W/run/$name.h5" -o "$W/mis_$name.h5" --allow-mismatch 2>/dev/null \
    || fail "--allow-mismatch did not merge $name"
}
mis fam 'attribute "family"' --synthetic tiny-dit:layers=3 --steps 2
mis steps 'steps.*committed steps 0..2 (3)' --synthetic tiny-dit --steps 3
# the plan alone differs: the trainer plan is the rank's recorded plan
"$D" record --trainer-plan "$PL/all_bf16.json" --rollout-plan "$PL/wan2_2_no_norm2.json" --rank 1 --world-size 2 \
  --synthetic tiny-dit --steps 2 -o "$W/run/plan.h5" 2>/dev/null || fail "record plan"
out=$("$D" merge "$W/run/trace-trainer.rank0.h5" "$W/run/plan.h5" -o "$W/bad.h5" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q 'plan.h5:/: attribute "plan" differs' || fail "merge of a rank with another plan: rc $rc: $out"

mv "$W/run/trace-trainer.rank1.h5" "$W/run/away.h5"
out=$("$D" ls "$W/run/idx.h5#rank=1" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "trace-trainer.rank1.h5" || fail "deleted rank file: rc $rc: $out"
out=$("$D" ls "$W/run/idx.h5" --json 2>/dev/null); rc=$?
# docs/cli.md: under --json an error is one JSON document {"error": {...}} on stdout
[ $rc -eq 2 ] && echo "$out" | "${PYTHON3:-/usr/bin/python3}" -c 'import json,sys; e=json.load(sys.stdin)["error"]; assert e["exit"]==2 and "rank1" in e["message"], e' \
  || fail "ls --json of an index with a missing rank file: rc $rc, stdout '$out'"
mv "$W/run/away.h5" "$W/run/trace-trainer.rank1.h5"
"$D" ls "$W/run/idx.h5#rank=1" >/dev/null || fail "restored rank file"
echo "PASS"
rm -rf "$W"
