#!/usr/bin/env bash
# Regenerates the seed corpora that are made by programs rather than by hand:
#   fuzz/corpus/fuzz_trace/        traces written by the real trace writer
#                                  (fuzz/gen_trace_seeds.c): clean, killed by
#                                  SIGKILL mid-step, empty, a drift merge index,
#                                  an intercept census trace. Except empty.h5
#                                  they are written with every chunk of
#                                  every table shrunk to 4 rows / 512 bytes
#                                  (a copy of formats/trace_internal.h with the
#                                  TR_CHUNK_* sizes edited), which keeps them
#                                  ~20x smaller and the fuzzer ~10x faster; the
#                                  reader must accept any chunking.
#   fuzz/corpus/fuzz_safetensors/  files laid out as the reference writer does,
#                                  built byte by byte by Python (numpy only).
# Usage: fuzz/seeds.sh   (needs cc, HDF5, /usr/bin/python3 with numpy)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cc="${CC:-cc}"
hdf5="$(pkg-config --cflags --libs hdf5)"
cflags=(-std=c11 -O1 -g -D_POSIX_C_SOURCE=200809L -DDRIFT_VERSION=\"seed\")
srcs=("$root"/formats/trace_*.c "$root"/formats/outpath.c "$root"/formats/census.c "$root"/formats/params_ref.c "$root"/formats/hash64.c "$root"/formats/dtype.c "$root"/formats/json.c "$root"/formats/infile.c "$root"/formats/err.c "$root"/formats/alloc.c)
out="$root/fuzz/corpus/fuzz_trace"
mkdir -p "$out" "$tmp/real" "$tmp/small/formats"

# shellcheck disable=SC2086
"$cc" "${cflags[@]}" -I"$root" "$root/fuzz/gen_trace_seeds.c" "${srcs[@]}" $hdf5 -lm -o "$tmp/gen_real"
"$tmp/gen_real" "$tmp/real"
# With the writer's own chunk sizes a 3-step trace is ~290 KB: only the empty
# one is small enough to commit as a seed.
cp "$tmp/real/empty.h5" "$out/empty.h5"

# Same writer, small chunks: the copied sources include "formats/trace_internal.h"
# from $tmp/small first.
sed -E -e 's/(#define TR_CHUNK_[A-Z]+) [0-9]+/\1 4/' -e 's/(#define TR_DATA_CHUNK_BYTES) [0-9]+/\1 512/' \
  "$root/formats/trace_internal.h" >"$tmp/small/formats/trace_internal.h"
for f in "$root"/formats/trace_*.c; do
  # any literal chunk size passed to tr_create_table (the param dtype table)
  sed -E 's/(tr_create_table\([^;]*, )[0-9]+\);/\14);/' "$f" >"$tmp/small/formats/$(basename "$f")"
done
small_srcs=("$tmp"/small/formats/trace_*.c "$root"/formats/outpath.c "$root"/formats/census.c "$root"/formats/params_ref.c "$root"/formats/hash64.c "$root"/formats/dtype.c "$root"/formats/json.c "$root"/formats/infile.c "$root"/formats/err.c "$root"/formats/alloc.c)
# shellcheck disable=SC2086
"$cc" "${cflags[@]}" -I"$tmp/small" -I"$root" "$root/fuzz/gen_trace_seeds.c" "${small_srcs[@]}" $hdf5 -lm -o "$tmp/gen_small"
mkdir -p "$tmp/smallout"
"$tmp/gen_small" "$tmp/smallout"
for f in clean killed empty index census; do cp "$tmp/smallout/$f.h5" "$out/${f}_small.h5"; done

/usr/bin/python3 "$root/fuzz/gen_safetensors_seeds.py" "$root/fuzz/corpus/fuzz_safetensors"
ls -l "$out" "$root/fuzz/corpus/fuzz_safetensors"
