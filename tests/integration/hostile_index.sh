#!/usr/bin/env bash
# Merge indexes from strangers (issue 23, items 8 and 16): an index reads
# only rank files inside its own folder (a source rewritten to an absolute
# path of another trace is refused, exit 2 naming index_source, unless
# --allow-outside), merge refuses inputs outside the index's folder, and a
# rank file rewritten after the merge, even within the same second and with
# the same run id, is noticed by its content digest (exit 2), never read
# under the index's old description.
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/hostile_index.$$"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import h5py' 2>/dev/null || { echo "SKIP: $PY lacks h5py"; exit 77; }
mkdir -p "$W/run" "$W/elsewhere"
PL="$T/plans"
rec() { "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/$2" --rollout-plan "$PL/wan2_2_no_norm2.json" -o "$1" "${@:3}" >/dev/null 2>&1; }
rec "$W/run/r0.h5" wan2_2.json || fail "record"
rec "$W/elsewhere/other.h5" wan2_2.json || fail "record other"
"$D" merge "$W/run/r0.h5" -o "$W/run/idx.h5" >/dev/null || fail "merge"
"$D" ls "$W/run/idx.h5" >/dev/null || fail "ls of a clean index"

# merge of an input outside the index's folder
"$D" merge "$W/elsewhere/other.h5" -o "$W/run/idx2.h5" >/dev/null 2>"$W/err"; rc=$?
[ $rc -eq 2 ] && grep -q "outside the index's folder" "$W/err" || fail "merge of an outside input: exit $rc: $(cat "$W/err")"
"$D" merge "$W/elsewhere/other.h5" -o "$W/run/idx2.h5" --allow-outside >/dev/null || fail "merge --allow-outside"
"$D" ls "$W/run/idx2.h5" >/dev/null 2>"$W/err" && fail "ls of an index with an outside source exited 0"
"$D" ls "$W/run/idx2.h5" --allow-outside >/dev/null || fail "ls --allow-outside"
DRIFT_INDEX_ALLOW_OUTSIDE=1 "$D" replay "$W/run/idx2.h5" --plan "$PL/wan2_2.json" --ref trainer >/dev/null 2>"$W/err" ||
  fail "replay with DRIFT_INDEX_ALLOW_OUTSIDE=1: $(tail -c 300 "$W/err")"
"$D" replay "$W/run/idx2.h5" --plan "$PL/wan2_2.json" --ref trainer >/dev/null 2>"$W/err" && fail "replay of an index with an outside source exited 0"
echo "ok   merge and ls refuse rank files outside the index's folder; --allow-outside (DRIFT_INDEX_ALLOW_OUTSIDE=1 for replay) accepts them"

# a crafted index whose source is an absolute path of another trace
cp "$W/run/idx.h5" "$W/run/evil.h5"
"$PY" - "$W/run/evil.h5" "$W/elsewhere/other.h5" <<'PYEOF'
import h5py, sys, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f["ranks/0"].attrs["index_source"] = np.bytes_(sys.argv[2].encode())
PYEOF
for c in "ls" "check" "top --batch --format json"; do
  "$D" $c "$W/run/evil.h5" >/dev/null 2>"$W/err"; rc=$?
  [ $rc -eq 2 ] || fail "$c of an index pointing outside exited $rc"
  grep -q "index_source" "$W/err" || fail "$c does not name index_source: $(cat "$W/err")"
done
echo "ok   an index whose source names another folder's trace: ls / check / top exit 2 naming index_source"

# the rank file rewritten after the merge, same second, same run id, another plan
rec "$W/run/r0.h5" all_bf16.json --force || fail "re-record"
"$D" ls "$W/run/idx.h5" >/dev/null 2>"$W/err"; rc=$?
[ $rc -eq 2 ] || fail "ls of an index whose rank file was rewritten exited $rc"
grep -q "content digest" "$W/err" || fail "the message does not say the content changed: $(cat "$W/err")"
echo "ok   a rank file rewritten after the merge (same run id, same second) is noticed by its content digest"
rm -rf "$W"
