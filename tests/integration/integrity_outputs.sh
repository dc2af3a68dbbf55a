#!/usr/bin/env bash
# Issue 34 items 6-8 (docs/RELIABILITY.md "Outputs"): every -o goes through
# formats/outpath.c. A device or FIFO is never replaced, --force or not; the
# temporary beside the target is created O_CREAT|O_EXCL|O_NOFOLLOW under an
# unpredictable name; a record that fails after its writers started leaves
# the existing traces byte for byte. Bounded: 60 s per command.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/integrity_outputs.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
R=(--synthetic tiny-dit --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json")
run() { timeout 60 "$D" "$@"; }
run record "${R[@]}" --steps 3 -o "$W/a.h5" >/dev/null 2>&1 || fail "record a.h5"

# ---- 7: a FIFO (and, as root, a character device) is never replaced ------------------------------
mkfifo "$W/fifo"
nodes=("$W/fifo")
if [ "$(id -u)" = 0 ] && mknod "$W/null" c 1 3 2>/dev/null; then nodes+=("$W/null"); fi
for node in "${nodes[@]}"; do
  kind=$(stat -c %F "$node")
  for cmd in "record ${R[*]} --steps 2 -o $node --force" "report $W/a.h5 -o $node --force" \
             "merge $W/a.h5 -o $node --force" "replay $W/a.h5 --plan $PL/wan2_2.json -o $node --force" \
             "bisect $W/a.h5 --good $PL/wan2_2.json --bad $PL/wan2_2_no_norm2.json --fix-out $node --force"; do
    # shellcheck disable=SC2086
    run $cmd >/dev/null 2>"$W/err"; rc=$?
    [ $rc = 2 ] || fail "'drift ${cmd%% *} ... $node --force' exited $rc (expected 2): $(tail -c 300 "$W/err")"
    [ "$(stat -c %F "$node")" = "$kind" ] || fail "'drift ${cmd%% *}' replaced the $kind $node"
    grep -q "is a \(FIFO\|character device\)" "$W/err" || fail "'drift ${cmd%% *}' did not say what $node is: $(cat "$W/err")"
  done
done
ls "$W" | grep -q 'tmp' && fail "a refused output left a temporary: $(ls "$W")"
echo "ok   a FIFO$([ ${#nodes[@]} = 2 ] && echo ' and a character device') named by -o/--fix-out --force: exit 2, never replaced (record, report, merge, replay, bisect)"

# ---- 8: the temporary is created O_EXCL|O_NOFOLLOW under an unpredictable name -------------------
if command -v strace >/dev/null; then
  for cmd in "report $W/a.h5 -o $W/r.html" "weights --model tiny-dit -o $W/ck" "merge $W/a.h5 -o $W/m.h5" \
             "bisect $W/a.h5 --good $PL/wan2_2.json --bad $PL/wan2_2_no_norm2.json --fix-out $W/fix.json"; do
    # shellcheck disable=SC2086
    timeout 120 strace -f -qq -e trace=openat,open -o "$W/st" "$D" $cmd >/dev/null 2>"$W/err"
    tmps=$(grep -E 'drift-tmp|\.tmp' "$W/st" | grep -E 'O_CREAT' || true)
    [ -n "$tmps" ] || fail "'drift ${cmd%% *}' opened no temporary file (strace): $(grep -c . "$W/st") opens; $(tail -c 300 "$W/err")"
    # the first open of each temporary creates it (HDF5 may reopen it by name afterwards)
    firsts=$(echo "$tmps" | awk -F'"' '!seen[$2]++')
    bad=$(echo "$firsts" | grep -v 'O_EXCL' || true); bad+=$(echo "$firsts" | grep -v 'O_NOFOLLOW' || true)
    [ -z "$bad" ] || fail "'drift ${cmd%% *}' created a temporary without O_EXCL|O_NOFOLLOW: $bad"
    echo "$tmps" | grep -q "\.$$\"\|\.tmp\.[0-9]*\"" && fail "'drift ${cmd%% *}' used a predictable temporary name: $tmps"
  done
  echo "ok   report / weights / merge / bisect --fix-out temporaries: O_CREAT|O_EXCL|O_NOFOLLOW, unpredictable names (strace)"
fi
# a planted symlink at the old predictable name is not followed
echo secret >"$W/victim"
for p in $(seq $$ $(( $$ + 400 ))); do ln -sf "$W/victim" "$W/r2.html.tmp.$p"; done
run report "$W/a.h5" -o "$W/r2.html" >/dev/null 2>&1 || fail "report -o r2.html failed"
[ "$(cat "$W/victim")" = secret ] || fail "report wrote through a planted symlink"
echo "ok   report -o beside planted symlinks: the symlinks' target untouched"

# ---- 6: a record that fails after its writers started keeps the existing traces ------------------
cp "$W/a.h5" "$W/a.orig"; cp "$W/a.rollout.h5" "$W/a.rorig"
run record "${R[@]}" --steps 3 -o "$W/a.h5" --force --shift inf >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "record --shift inf exited $rc (expected 2)"
cmp -s "$W/a.h5" "$W/a.orig" || fail "a failed record --force replaced a.h5 ($("$D" ls "$W/a.h5" | grep '^steps'))"
cmp -s "$W/a.rollout.h5" "$W/a.rorig" || fail "a failed record --force replaced a.rollout.h5"
ls "$W" | grep -q 'drift-tmp' && fail "a failed record left a temporary: $(ls "$W")"
run record "${R[@]}" --steps 3 -o "$W/new.h5" --shift inf >/dev/null 2>&1
ls "$W" | grep -q '^new' && fail "a failed record left new files: $(ls "$W" | grep '^new')"
echo "ok   a record failing after its writers started (--shift inf): both existing traces byte for byte, nothing new left"
exit 0
