#!/usr/bin/env bash
# Issue 34 item 10: a trace does not choose where drift reads. Without
# --weights-root, the checkpoint folder a trace's /params_ref names must lie
# in the trace's own folder (real paths); a folder elsewhere (a stranger's
# "/etc") is refused before any file of it is opened, and no byte of such a
# file reaches a message; a symbolic link inside the checkpoint folder that
# leads out of it is refused even under --weights-root.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_weights_root.$$"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import h5py' 2>/dev/null || { echo "skip: no h5py"; exit 0; }
mkdir -p "$W/run" "$W/elsewhere"; trap 'rm -rf "$W"' EXIT
S="$(dirname "$0")"; PL="$T/plans"
timeout 60 "$D" weights --model tiny-dit -o "$W/run/ck" >/dev/null 2>&1 || fail "weights"
timeout 60 "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json" \
  --params-ref "$W/run/ck" -o "$W/run/t.h5" >/dev/null 2>&1 || fail "record --params-ref"
timeout 60 "$D" replay "$W/run/t.h5" --plan "$PL/wan2_2.json" --output-only >/dev/null 2>"$W/err" || fail "replay beside its checkpoint: $(cat "$W/err")"
echo "ok   a checkpoint inside the trace's folder is read"
# a stranger's trace pointing at a folder of secrets
printf 'SECRETBYTES-%.0s' $(seq 20) >"$W/elsewhere/shadow"
cp "$W/run/t.h5" "$W/run/evil.h5"
"$PY" "$S/integrity_params_ref.py" "$W/run/evil.h5" "$W/elsewhere" shadow || fail "crafting"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -qq -e trace=openat,open -o "$W/st" timeout 60 "$D" replay "$W/run/evil.h5" --plan "$PL/wan2_2.json" --output-only \
  >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "replay of a trace naming $W/elsewhere exited $rc (expected 2): $(cat "$W/err")"
grep -q "outside the trace's folder" "$W/err" && grep -q -- "--weights-root" "$W/err" || fail "the refusal: $(cat "$W/err")"
grep -q 'elsewhere/shadow' "$W/st" && fail "drift opened the file the trace named: $(grep shadow "$W/st")"
grep -q 'SECRET\|4991' "$W/err" && fail "bytes of the refused file reached the message"
echo "ok   a trace naming a folder outside its own: exit 2, the file never opened (strace), the remedy named"
# the same checkpoint moved away: --weights-root names it, and the user's word is taken
mv "$W/run/ck" "$W/moved"
timeout 60 "$D" replay "$W/run/t.h5" --plan "$PL/wan2_2.json" --output-only >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "replay of a trace whose checkpoint is gone exited $rc"
timeout 60 "$D" replay "$W/run/t.h5" --plan "$PL/wan2_2.json" --output-only --weights-root "$W/moved" >/dev/null 2>"$W/err" ||
  fail "replay --weights-root of the moved checkpoint: $(cat "$W/err")"
echo "ok   --weights-root DIR reads a checkpoint the user names"
# a symbolic link inside the checkpoint folder that leads out of it
mkdir -p "$W/out2"; mv "$W/moved/diffusion_pytorch_model-00001-of-00001.safetensors" "$W/out2/"
ln -s "$W/out2" "$W/moved/link"
cp "$W/run/t.h5" "$W/run/lnk.h5"
"$PY" "$S/integrity_params_ref.py" "$W/run/lnk.h5" "$W/moved" link/diffusion_pytorch_model-00001-of-00001.safetensors || fail "crafting"
timeout 60 "$D" replay "$W/run/lnk.h5" --plan "$PL/wan2_2.json" --output-only --weights-root "$W/moved" >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "replay through a symlinked folder inside --weights-root exited $rc (expected 2)"
grep -q "resolves outside the checkpoint folder" "$W/err" || fail "the refusal: $(cat "$W/err")"
echo "ok   a symlinked folder inside --weights-root: refused (the real path is checked)"
