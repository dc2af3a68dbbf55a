#!/usr/bin/env bash
# The README's test command: installs what is missing, builds the normal and
# the sanitizer (ASan + UBSan) configurations, and runs the test suite in
# both. GPU tests skip with a message here; tests/gpu/run.sh runs them on a GPU.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
jobs="$(nproc 2>/dev/null || echo 2)"
werror=OFF; [ "${CI:-}" = "true" ] && werror=ON

echo "== build: normal (WERROR=$werror)"
scripts/build.sh build -DDRIFT_WERROR=$werror
# Where a CUDA compiler exists the normal build must have compiled every .cu
# file (kernels, recorder stats): a CUDA change that breaks them fails here.
grep -h "drift: CUDA=" build.configure.log
if grep -q "drift: CUDA=ON" build.configure.log; then
  n_cu=$(find kernels recorder -name "*.cu" | wc -l)
  n_obj=$(find build -name '*.cu.o' | wc -l)
  echo "== cuda: $n_obj of $n_cu .cu files compiled"
  [ "$n_obj" -ge "$n_cu" ] || { echo "FAIL: not every .cu file was compiled"; exit 1; }
elif command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "FAIL: nvcc exists but the build has CUDA=OFF"; exit 1
else
  echo "== cuda: no CUDA compiler on this machine: CUDA code not compiled"
fi
echo "== test: normal"
ctest --test-dir build --output-on-failure -j"$jobs" 2>&1 | tee build/ctest-summary.log

echo "== build: sanitizer (ASan + UBSan)"
scripts/build.sh build-asan -DDRIFT_SANITIZE=ON -DDRIFT_WERROR=$werror -DDRIFT_CUDA=OFF
echo "== test: sanitizer"
ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE slow 2>&1 | tee build-asan/ctest-summary.log

# Bounded fuzzing of every parser of untrusted input (docs/RELIABILITY.md):
# a fixed seed and a bounded time per harness, 9 harnesses (the trace harness
# runs ~600 inputs/s, the others thousands, so a time bound keeps CI's cost
# fixed); scripts/reliability.sh runs the million-execution campaigns.
echo "== fuzz: ${DRIFT_FUZZ_SECONDS:-15} s per harness, seed 1"
FUZZ_ARGS="-seed=1 ${FUZZ_ARGS:-}" fuzz/run.sh "${DRIFT_FUZZ_SECONDS:-15}"

# One closing line over both test runs (each aborted the script on a failure).
total() { sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$1" | tail -n1; }
echo "tests: $(( $(total build/ctest-summary.log) + $(total build-asan/ctest-summary.log) )) passed, 0 failed"
