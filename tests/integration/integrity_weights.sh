#!/usr/bin/env bash
# Issue 34 item 9: `drift weights -o DIR` replaces an existing checkpoint only
# with --force, never leaves stale shards of another count, excludes a second
# writer (DIR.lock) and, killed, leaves DIR as it was (the new checkpoint is
# written under a temporary folder and swapped in whole). Bounded: 120 s.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/integrity_weights.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
run() { timeout 120 "$D" "$@"; }
run weights --model tiny-dit -o "$W/ck" >/dev/null 2>&1 || fail "weights ck"
cp -r "$W/ck" "$W/ck.orig"
run weights --model tiny-dit --seed 3 -o "$W/ck" >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "weights over an existing checkpoint without --force exited $rc (expected 2)"
grep -q -- "--force" "$W/err" || fail "the refusal does not name --force: $(cat "$W/err")"
diff -r "$W/ck" "$W/ck.orig" >/dev/null || fail "the refused weights changed the checkpoint"
echo "ok   weights -o over a checkpoint without --force: exit 2, unchanged"
run weights --model tiny-dit -o "$W/ck" --force --shard-size 20K >/dev/null 2>&1 || fail "weights --force --shard-size 20K"
n=$(ls "$W/ck" | grep -c 'safetensors$'); want=$(ls "$W/ck" | grep -o 'of-[0-9]*' | sort -u)
[ "$(echo "$want" | wc -l)" = 1 ] || fail "shards of two counts in ck after --force: $(ls "$W/ck")"
[ "$n" = "$((10#${want#of-}))" ] || fail "ck holds $n shards, its names say ${want#of-}"
run weights --model tiny-dit -o "$W/ck" --force >/dev/null 2>&1 || fail "weights --force back to 1 shard"
[ "$(ls "$W/ck" | wc -l)" = 2 ] || fail "stale shards after --force with one shard: $(ls "$W/ck")"
diff -r "$W/ck" "$W/ck.orig" >/dev/null || fail "the same weights written again differ"
echo "ok   weights --force with another shard count: no stale shard ($n shards, then 1)"
echo x >"$W/other"; mkdir "$W/mixed"; cp "$W/ck"/* "$W/mixed"; cp "$W/other" "$W/mixed/notes.txt"
run weights --model tiny-dit -o "$W/mixed" --force >/dev/null 2>&1 && fail "weights --force replaced a folder holding another file"
[ -e "$W/mixed/notes.txt" ] || fail "weights --force removed a file that is not the checkpoint's"
echo "ok   weights --force over a folder holding other files: refused, nothing removed"
# a slow writer (one seeding thread, 3 blocks of dim 1024): a second one is refused, a kill leaves ck whole
big="wan2.2:layers=3,dim=1024,heads=8,ffn_dim=4096"
DRIFT_SEED_THREADS=1 "$D" weights --model "$big" -o "$W/ck" --force --shard-size 4M >/dev/null 2>&1 & p=$!
for _ in $(seq 100); do ls -d "$W"/ck.drift-tmp.* >/dev/null 2>&1 && break; sleep 0.02; done
sleep 0.3
run weights --model tiny-dit -o "$W/ck" --force >/dev/null 2>"$W/err2"; rc=$?
kill -9 $p 2>/dev/null; wait $p 2>/dev/null
[ $rc = 2 ] || fail "a second writer of ck exited $rc (expected 2): $(cat "$W/err2")"
grep -q "another drift is writing" "$W/err2" || fail "the second writer does not say why: $(cat "$W/err2")"
diff -r "$W/ck" "$W/ck.orig" >/dev/null || fail "a killed weights --force left ck changed: $(ls "$W/ck" | head)"
ls "$W" | grep -q '\.tmp\.[0-9]*$' && fail "a killed weights left a part file: $(ls "$W")"
echo "ok   a second writer: exit 2 ('another drift is writing'); a killed writer: ck byte for byte as before"
run record --synthetic tiny-dit --steps 2 --trainer-plan "$T/plans/wan2_2.json" --rollout-plan "$T/plans/wan2_2.json" \
  --params-ref "$W/ck" -o "$W/r.h5" >/dev/null 2>"$W/err" || fail "record --params-ref ck after the kill: $(cat "$W/err")"
echo "ok   record --params-ref of the checkpoint after the kill"
