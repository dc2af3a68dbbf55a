#!/usr/bin/env bash
# Crash consistency in CI: writers killed with SIGKILL at random points (half
# with a live follow-mode reader) and writers stopped by a full disk
# (RLIMIT_FSIZE); after repair every committed step must read back.
# scripts/reliability.sh runs the 200-trial campaign under ASan.
set -u
S="${DRIFT_SRC:?}"; W="${DRIFT_TMP:-$(mktemp -d)}/kill_trials"; rm -rf "$W"; mkdir -p "$W/run"
cc -std=c11 -O1 -g -D_POSIX_C_SOURCE=200809L -DDRIFT_VERSION=\"kill-trials\" -I"$S" $(pkg-config --cflags hdf5) \
  "$S/fuzz/kill_trials.c" "$S"/formats/trace_*.c "$S/formats/outpath.c" "$S/formats/params_ref.c" "$S/formats/hash64.c" "$S/formats/dtype.c" "$S/formats/json.c" "$S/formats/infile.c" "$S/formats/err.c" \
  "$S/formats/alloc.c" $(pkg-config --libs hdf5) -lm -o "$W/kill_trials" || { echo "FAIL: build"; exit 1; }
"$W/kill_trials" --trials "${KILL_TRIALS:-30}" --disk-full 5 --seed 3 --dir "$W/run" --keep-failing || { echo "FAIL: kill trials"; exit 1; }
