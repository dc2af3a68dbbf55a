#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, -fsanitize=fuzzer,address,undefined)
# directly from the project's sources, one binary per harness:
#
#   fuzz/build.sh [HARNESS...]          (default: every harness below)
#
# Binaries go to $FUZZ_OUT (default build-fuzz/fuzz). A harness whose
# sources are not in the tree yet is skipped with a message (exit 0), unless
# FUZZ_STRICT=1. Needs clang with compiler-rt (Debian: clang, libclang-rt-dev).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${FUZZ_OUT:-$root/build-fuzz/fuzz}"
CC="${FUZZ_CC:-clang}"
mkdir -p "$out"

# Exactly the sources each harness links (plus fuzz/fuzz_<name>.c).
F_BASE="formats/err.c formats/alloc.c"
F_JSON="formats/json.c $F_BASE"
F_PLAN="formats/plan.c formats/fnmatch.c formats/params.c formats/dtype.c $F_JSON"
declare -A SRCS=(
  [fuzz_json]="$F_JSON"
  [fuzz_plan]="$F_PLAN replay/models/family.c"
  [fuzz_plan_flags]="$F_PLAN"
  [fuzz_params]="formats/params.c $F_BASE"
  [fuzz_family_spec]="replay/models/family.c formats/params.c $F_BASE"
  [fuzz_safetensors]="formats/safetensors.c formats/dtype.c $F_JSON"
  # graph.c infers shapes through kernels/backend.c, which links the CPU and
  # reference backends: the kernels module is taken whole (a glob), so that a
  # new kernels/cpu/*.c file needs no edit here.
  [fuzz_graph]="replay/graph.c replay/graph_json.c kernels/backend.c KERNELS_GLOB $F_PLAN"
  # the trace module (writer, reader, tables, check/repair) is taken whole, as
  # the kernels module is for fuzz_graph; formats/trace_reader.c must exist.
  [fuzz_trace]="formats/trace_reader.c TRACE_GLOB formats/dtype.c $F_JSON"
)
# Harnesses that link HDF5 (shared, as the project does).
declare -A NEEDS_HDF5=([fuzz_trace]=1)
declare -A NEEDS_BLAS=([fuzz_graph]=1)
ALL="fuzz_json fuzz_plan fuzz_plan_flags fuzz_params fuzz_family_spec fuzz_safetensors fuzz_graph fuzz_trace"

blas_flags() {
  pkg-config --cflags --libs openblas 2>/dev/null ||
    echo "-I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas"
}

# Expands KERNELS_GLOB in a source list.
expand() {
  local s
  for s in $1; do
    if [ "$s" = KERNELS_GLOB ]; then
      (cd "$root" && ls kernels/cpu/*.c kernels/ref/*.c 2>/dev/null) || true
    elif [ "$s" = TRACE_GLOB ]; then
      (cd "$root" && ls formats/trace_*.c 2>/dev/null | grep -v '^formats/trace_reader.c$') || true
    else
      echo "$s"
    fi
  done
}

hdf5_flags() {
  if pkg-config --exists hdf5 2>/dev/null; then
    pkg-config --cflags --libs hdf5
  else
    # h5cc -show prints the compile line of the wrapper; keep -I/-L/-l and
    # link the shared library (filter plugins need it).
    h5cc -show -shlib 2>/dev/null | tr ' ' '\n' | grep -E '^-(I|L|l)' | tr '\n' ' '
    echo " -lhdf5"
  fi
}

CFLAGS=(-std=c11 -g -O1 -fno-omit-frame-pointer -ffp-contract=off
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
        -D_POSIX_C_SOURCE=200809L -DDRIFT_VERSION=\"fuzz\" -DDRIFT_FUZZING=1
        -I"$root" -Wall -Wextra -Wno-unused-parameter)

harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] && read -r -a harnesses <<<"$ALL"
built=0
for h in "${harnesses[@]}"; do
  h="${h#fuzz/}"; h="${h%.c}"; [[ "$h" == fuzz_* ]] || h="fuzz_$h"
  if [ -z "${SRCS[$h]+x}" ]; then
    echo "fuzz/build.sh: unknown harness '$h' (known: $ALL)" >&2; exit 2
  fi
  list="fuzz/$h.c $(expand "${SRCS[$h]}" | tr '\n' ' ')"
  missing=""
  for s in $list; do [ -f "$root/$s" ] || missing="$missing $s"; done
  if [ -n "$missing" ]; then
    echo "SKIP $h: not in the tree yet:$missing" >&2
    [ "${FUZZ_STRICT:-0}" = 1 ] && exit 2
    continue
  fi
  extra=()
  [ -n "${NEEDS_HDF5[$h]+x}" ] && read -r -a extra <<<"$(hdf5_flags)"
  if [ -n "${NEEDS_BLAS[$h]+x}" ]; then read -r -a b <<<"$(blas_flags)"; extra+=("${b[@]}"); fi
  srcs=()
  for s in $list; do srcs+=("$root/$s"); done
  echo "CC $h" >&2
  "$CC" "${CFLAGS[@]}" "${srcs[@]}" "${extra[@]}" -lm -lpthread -o "$out/$h.tmp"
  mv -f "$out/$h.tmp" "$out/$h"
  built=$((built + 1))
done
echo "fuzz/build.sh: $built harness(es) in $out" >&2
