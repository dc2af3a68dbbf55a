#!/usr/bin/env bash
# Builds drift with CUDA on a GPU machine, runs the GPU tests and the GPU
# benchmarks, writes every log under $OUT and prints a summary table last.
#
#   PREFIX=$PWD/.debs/root OUT=/some/dir bash tests/gpu/run.sh
#   DEBS=$PWD/.debs OUT=/some/dir bash tests/gpu/run.sh     (unpacks the .debs itself)
#
# Environment:
#   OUT      where the logs go (default: <repo>/gpu-out). At most four files:
#            build.log, tests.log, bench.log, summary.txt.
#   PREFIX   a folder holding unpacked Debian packages (dpkg -x pkg.deb PREFIX)
#            for what the machine lacks: libcmocka-dev/libcmocka0,
#            libopenblas-dev (+ libopenblas-pthread-dev, libopenblas0-pthread,
#            libgfortran5), libncurses-dev. Headers and libraries are searched
#            under it; its library folders go on LD_LIBRARY_PATH for the build,
#            the tests and the C benchmarks (not for python3/torch).
#   DEBS     alternatively a folder of those .deb files: unpacked into PREFIX
#            (default /tmp/drift-gpu-prefix) first, e.g. DEBS=$PWD/.debs
#   BUILD    build folder (default: /tmp/drift-gpu-build)
#   ARCH     CMAKE_CUDA_ARCHITECTURES (default: 90)
#   STAGES   any of "build test bench demo scripts" (default: all five);
#            "scripts" runs every other tests/gpu/*.sh (multi-GPU, recorder,
#            intercept acceptance jobs) with BUILD and OUT set, one log each
#   SCRIPTS  which of those scripts (default: all of them, by name order)
#   TESTS    which GPU tests the test stage runs (default: every tests/gpu/test_*.c)
#   JOBS     build parallelism (default: nproc)
#   BUILD_TARGETS  what the build stage builds (default: drift, every GPU test and
#            benchmark; libdrift_recorder.so and the interposer are always built)
#   TEST_TIMEOUT, BENCH_TIMEOUT  seconds per test / benchmark (900 / 600)
#   DRIFT_TUI ON|OFF: build the TUI (default: ON when ncurses headers are found)
# Without cmocka (none found) the GPU tests still build (they do not use it):
# an empty stand-in library satisfies tests/CMakeLists.txt. OpenBLAS is
# required (the cpu backend the tests compare against uses it).
# Exit status: 0 when the build and every test passed, 1 otherwise.
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$SRC/gpu-out}
BUILD=${BUILD:-/tmp/drift-gpu-build}
ARCH=${ARCH:-90}
STAGES=${STAGES:-build test bench demo scripts}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 8)}
mkdir -p "$OUT" "$BUILD"
BUILD_LOG=$OUT/build.log
TEST_LOG=$OUT/tests.log
BENCH_LOG=$OUT/bench.log
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
T0=$(date +%s)

say() { echo "[run.sh $(($(date +%s) - T0))s] $*"; }
summ() { printf '%s\n' "$*" >>"$SUMMARY"; }
has_stage() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# ---------------------------------------------------------------- toolchain
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

CMAKE_ARGS=(-DDRIFT_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" -DDRIFT_TESTS=ON)

# first file under $1 matching name $2 (prefers paths containing $3)
find_one() {
  local hit
  [ -d "$1" ] || return 1
  if [ -n "${3:-}" ]; then
    hit=$(find "$1" -name "$2" 2>/dev/null | grep -- "$3" | head -n1)
    [ -n "$hit" ] && { echo "$hit"; return 0; }
  fi
  hit=$(find "$1" -name "$2" 2>/dev/null | head -n1)
  [ -n "$hit" ] && { echo "$hit"; return 0; }
  return 1
}

# A CMakeLists.txt passing nvcc the invalid "--use_fast_math=false" cannot
# build any .cu file: build from a patched copy then (and say so).
BUILD_SRC=$SRC
if grep -q -- '--use_fast_math=false' "$SRC/CMakeLists.txt"; then
  say "WARNING: CMakeLists.txt passes '--use_fast_math=false' (nvcc rejects it); building from a patched copy"
  BUILD_SRC=/tmp/drift-gpu-src
  rm -rf "$BUILD_SRC"
  mkdir -p "$BUILD_SRC"
  (cd "$SRC" && tar --exclude='./build*' --exclude='./.git' --exclude='./gpu-out' -cf - .) | (cd "$BUILD_SRC" && tar xf -)
  sed -i 's/ --use_fast_math=false//' "$BUILD_SRC/CMakeLists.txt"
  summ "WARNING: built from a copy with '--use_fast_math=false' removed from CMakeLists.txt"
fi

# a build folder configured from another source folder cannot be reused
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$BUILD_SRC\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
fi

# DEBS: a folder of .deb files to unpack into PREFIX first
if [ -n "${DEBS:-}" ]; then
  PREFIX=${PREFIX:-/tmp/drift-gpu-prefix}
  mkdir -p "$PREFIX"
  for f in "$DEBS"/*.deb; do
    [ -f "$f" ] && dpkg -x "$f" "$PREFIX"
  done
fi

ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
LIBDIRS=""
if [ -n "${PREFIX:-}" ]; then
  PREFIX=$(cd "$PREFIX" && pwd)
  say "using PREFIX=$PREFIX"
  CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$PREFIX/usr;$PREFIX")
  LIBDIRS=$(find "$PREFIX" \( -name '*.so' -o -name '*.so.*' \) -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
  export LIBRARY_PATH="${LIBDIRS}${LIBRARY_PATH:-}" # the link sees every one; the loader not the terminal libraries
  . "$SRC/tests/gpu/lib_torch_libs.sh"
  export LD_LIBRARY_PATH="$(prefix_lib_dirs "$PREFIX")${LD_LIBRARY_PATH:-}"
fi

# cmocka: PREFIX, else system, else an empty stand-in (GPU tests don't use it)
CMOCKA_H=$( { [ -n "${PREFIX:-}" ] && find_one "$PREFIX" cmocka.h; } || ls /usr/include/cmocka.h 2>/dev/null || true)
CMOCKA_SO=$( { [ -n "${PREFIX:-}" ] && find_one "$PREFIX" 'libcmocka.so*'; } || true)
if [ -n "$CMOCKA_H" ] && [ -n "$CMOCKA_SO" ]; then
  CMAKE_ARGS+=("-DCMOCKA_INCLUDE=$(dirname "$CMOCKA_H")" "-DCMOCKA_LIB=$CMOCKA_SO")
elif [ -z "$CMOCKA_H" ] || ! ldconfig -p 2>/dev/null | grep -q libcmocka; then
  say "cmocka not found: using an empty stand-in (GPU tests do not need it)"
  mkdir -p "$BUILD/fake-cmocka/include"
  ar rc "$BUILD/fake-cmocka/libcmocka.a"
  CMAKE_ARGS+=("-DCMOCKA_INCLUDE=$BUILD/fake-cmocka/include" "-DCMOCKA_LIB=$BUILD/fake-cmocka/libcmocka.a")
fi

# OpenBLAS: PREFIX, else system (find_library in CMake)
if [ -n "${PREFIX:-}" ]; then
  BLAS_H=$(find_one "$PREFIX" cblas.h openblas || true)
  BLAS_SO=$(find_one "$PREFIX" 'libopenblas.so*' pthread || true)
  [ -n "$BLAS_H" ] && CMAKE_ARGS+=("-DDRIFT_BLAS_INCLUDE=$(dirname "$BLAS_H")")
  [ -n "$BLAS_SO" ] && CMAKE_ARGS+=("-DDRIFT_BLAS_LIB=$BLAS_SO")
fi

# ncurses: the TUI only when its headers are there (DRIFT_TUI=ON|OFF overrides)
TUI=${DRIFT_TUI:-}
if [ -z "$TUI" ]; then
  TUI=OFF
  if [ -f /usr/include/ncurses.h ] || [ -f /usr/include/ncursesw/ncurses.h ] ||
     { [ -n "${PREFIX:-}" ] && find_one "$PREFIX" ncurses.h >/dev/null; }; then
    TUI=ON
  fi
fi
CMAKE_ARGS+=("-DDRIFT_TUI=$TUI")

GPU_TESTS=()
for f in "$BUILD_SRC"/tests/gpu/test_*.c; do
  GPU_TESTS+=("gpu_$(basename "$f" .c)")
done
[ -n "${TESTS:-}" ] && read -r -a GPU_TESTS <<<"$TESTS"  # a subset, e.g. TESTS="gpu_test_parity"
BENCHES=(bench_cuda_metrics bench_cuda_gemm bench_cuda_attention bench_cuda_forward bench_seed)

# TORCH_LIBS=1: tests and benches run with torch's own cuBLASLt / cuDNN
# wheels first on LD_LIBRARY_PATH (the build links the toolkit's copies)
. "$SRC/tests/gpu/lib_torch_libs.sh"
use_torch_libs() {
  [ "${TORCH_LIBS:-0}" = 1 ] || return 0
  local tl; tl=$(torch_lib_dirs)
  [ -n "$tl" ] && export LD_LIBRARY_PATH="$tl:${LD_LIBRARY_PATH:-}" && say "TORCH_LIBS: torch's libraries first: $tl"
}

# ---------------------------------------------------------------- build
BUILD_OK=1
if has_stage build; then
  say "configure + build (log: $BUILD_LOG)"
  {
    echo "== $(date -u) on $(hostname)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
    "$CUDACXX" --version 2>&1 | tail -n2
    cmake --version | head -n1
    echo "== cmake ${CMAKE_ARGS[*]}"
  } >"$BUILD_LOG" 2>&1
  if cmake -S "$BUILD_SRC" -B "$BUILD" "${CMAKE_ARGS[@]}" >>"$BUILD_LOG" 2>&1 &&
     cmake --build "$BUILD" -j"$JOBS" --target ${BUILD_TARGETS:-drift "${GPU_TESTS[@]}" "${BENCHES[@]}"} >>"$BUILD_LOG" 2>&1 &&
     { EXTRA=(); for t in drift_recorder_shared drift_intercept drift_intercept_writer; do
         cmake --build "$BUILD" --target help 2>/dev/null | grep -q "\.\.\. $t\$" && EXTRA+=("$t"); done
       [ ${#EXTRA[@]} = 0 ] || cmake --build "$BUILD" -j"$JOBS" --target "${EXTRA[@]}" >>"$BUILD_LOG" 2>&1; }; then
    summ "build                         OK   (TUI=$TUI, arch $ARCH)"
  else
    BUILD_OK=0
    summ "build                         FAIL (see build.log)"
    tail -n 40 "$BUILD_LOG"
  fi
fi

# ---------------------------------------------------------------- tests
ALL_OK=$BUILD_OK
[ $BUILD_OK = 1 ] && use_torch_libs
if has_stage test && [ $BUILD_OK = 1 ]; then
  say "GPU tests (log: $TEST_LOG)"
  : >"$TEST_LOG"
  for t in "${GPU_TESTS[@]}"; do
    exe=$BUILD/tests/$t
    cur=$BUILD/current-test.log
    s=$(date +%s%N)
    if [ -x "$exe" ]; then
      mkdir -p "$BUILD/testtmp/$t"
      (cd "$BUILD" && DRIFT_TMP=$BUILD/testtmp/$t DRIFT_SRC=$BUILD_SRC DRIFT_TESTDATA=$BUILD_SRC/tests/data DRIFT_BIN=$BUILD/drift \
         timeout "${TEST_TIMEOUT:-900}" "$exe") >"$cur" 2>&1
      rc=$?
    else
      echo "missing executable $exe" >"$cur"
      rc=127
    fi
    e=$(date +%s%N)
    ms=$(((e - s) / 1000000))
    { echo "===== $t"; cat "$cur"; echo "===== $t: rc $rc, ${ms} ms"; } >>"$TEST_LOG"
    line=$(grep -E "^test_[a-z0-9_]+: [0-9]+ passed, [0-9]+ failed" "$cur" | tail -n1)
    [ -z "$line" ] && line=$(grep -m1 '^SKIP' "$cur")
    case $rc in
      0) res=PASS ;;
      77) res=SKIP ;;
      124) res=TIMEOUT; ALL_OK=0 ;;
      *) res="FAIL($rc)"; ALL_OK=0 ;;
    esac
    summ "$(printf '%-29s %-9s %4d.%ds  %s' "$t" "$res" $((ms / 1000)) $(((ms % 1000) / 100)) "${line#*: }")"
    say "$t: $res"
  done
  # the CLI's library identity and kernel profile on the GPU (a script, part of this stage)
  s=$(date +%s)
  (cd "$SRC" && PY_LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH BUILD=$BUILD OUT=$BUILD/testtmp/identity \
     timeout "${TEST_TIMEOUT:-900}" bash tests/gpu/identity.sh) >"$BUILD/current-test.log" 2>&1
  rc=$?
  { echo "===== identity.sh"; cat "$BUILD/current-test.log"; echo "===== identity.sh: rc $rc"; } >>"$TEST_LOG"
  case $rc in 0) res=PASS ;; 77) res=SKIP ;; 124) res=TIMEOUT; ALL_OK=0 ;; *) res="FAIL($rc)"; ALL_OK=0 ;; esac
  summ "$(printf '%-29s %-9s %4ds  %s' "identity.sh" "$res" $(($(date +%s) - s)) "$(grep -c '^PASS' "$BUILD/current-test.log") PASS, $(grep -c '^FAIL' "$BUILD/current-test.log") FAIL")"
  grep -E '^(FAIL|RESULT)' "$BUILD/current-test.log" | head -n 20 | sed 's/^/  identity: /' >>"$SUMMARY"
  say "identity.sh: $res"
fi

# ---------------------------------------------------------------- benchmarks
if has_stage bench && [ $BUILD_OK = 1 ]; then
  say "benchmarks (log: $BENCH_LOG)"
  : >"$BENCH_LOG"
  for b in "${BENCHES[@]}"; do
    echo "===== $b" >>"$BENCH_LOG"
    (cd "$BUILD" && timeout "${BENCH_TIMEOUT:-600}" "./$b") >>"$BENCH_LOG" 2>&1 || echo "===== $b failed (rc $?)" >>"$BENCH_LOG"
  done
  # the same forward under the torch kernel profile (issue 16's speed figure)
  echo "===== bench_cuda_forward (kernels=torch)" >>"$BENCH_LOG"
  (cd "$BUILD" && timeout "${BENCH_TIMEOUT:-600}" ./bench_cuda_forward "" 10 cuda:0:kernels=torch) >>"$BENCH_LOG" 2>&1 ||
    echo "===== bench_cuda_forward (kernels=torch) failed (rc $?)" >>"$BENCH_LOG"
  for py in cuda_forward_torch.py recorder_overhead.py; do
    [ -f "$SRC/bench/$py" ] || continue
    echo "===== $py" >>"$BENCH_LOG"
    (cd "$SRC" && LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH DRIFT_RECORDER_LIB=$BUILD/libdrift_recorder.so PYTHONUNBUFFERED=1 \
       timeout 600 python3 "bench/$py") >>"$BENCH_LOG" 2>&1 ||
      echo "===== $py failed (rc $?)" >>"$BENCH_LOG"
  done
  echo "===== cuda_metrics_torch.py" >>"$BENCH_LOG"
  (cd "$SRC" && LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH PYTHONUNBUFFERED=1 timeout 600 python3 bench/cuda_metrics_torch.py) >>"$BENCH_LOG" 2>&1 ||
    echo "===== cuda_metrics_torch.py failed (rc $?)" >>"$BENCH_LOG"
  while IFS= read -r l; do summ "bench: ${l#BENCH }"; done < <(grep '^BENCH ' "$BENCH_LOG")
  grep -q '^BENCH ' "$BENCH_LOG" || summ "bench: no results (see bench.log)"
fi

# ---------------------------------------------------------------- demo
if has_stage demo && [ $BUILD_OK = 1 ]; then
  say "drift demo --device cuda (log: $OUT/demo.log)"
  if (cd "$BUILD" && timeout 600 ./drift demo --device cuda --out "$BUILD/demo") >"$OUT/demo.log" 2>&1; then
    first=$(grep -m1 '<- first divergence' "$OUT/demo.log" | awk '{print $1}')
    summ "demo --device cuda            PASS      first divergence $first"
  else
    ALL_OK=0
    summ "demo --device cuda            FAIL (see demo.log)"
    tail -n 20 "$OUT/demo.log"
  fi
fi

# ---------------------------------------------------------------- scripts
if has_stage scripts && [ $BUILD_OK = 1 ]; then
  for f in "$SRC"/tests/gpu/*.sh; do
    n=$(basename "$f" .sh)
    case $n in run|probe|identity) continue ;; esac # identity.sh runs in the test stage
    if [ -n "${SCRIPTS:-}" ] && [[ " $SCRIPTS " != *" $n "* ]]; then continue; fi
    say "script $n (log: $OUT/$n.log)"
    s=$(date +%s)
    mkdir -p "$OUT/$n"
    # BUDGET: time-bounded scripts (scale.sh) fit themselves into the timeout
    (cd "$SRC" && LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH BUILD=$BUILD OUT=$OUT/$n PYTHONUNBUFFERED=1 \
       BUDGET=$((${SCRIPT_TIMEOUT:-420} - 20)) timeout "${SCRIPT_TIMEOUT:-420}" bash "$f") >"$OUT/$n.log" 2>&1
    rc=$?
    case $rc in 0) res=PASS ;; 77) res=SKIP ;; 124) res=TIMEOUT; ALL_OK=0 ;; *) res="FAIL($rc)"; ALL_OK=0 ;; esac
    summ "$(printf '%-29s %-9s %4ds  %s' "$n.sh" "$res" $(($(date +%s) - s)) "$(grep -c '^PASS' "$OUT/$n.log") PASS lines, $(grep -c '^FAIL' "$OUT/$n.log") FAIL lines")"
    grep -E '^(PASS|FAIL|SKIP|RESULT)' "$OUT/$n.log" | head -n 40 | sed "s/^/  $n: /" >>"$SUMMARY"
  done
fi

summ "total $(($(date +%s) - T0))s; logs in $OUT"
echo
echo "================ summary ================"
cat "$SUMMARY"
[ $ALL_OK = 1 ]
