#!/usr/bin/env bash
# A low address-space limit is an error, not a hang (issue 23, item 13):
# OpenBLAS maps a 128 MiB buffer per GEMM thread and retries a failed mmap
# forever, so under `ulimit -v` drift once hung in --version (128 MiB: the
# threads OpenBLAS starts at load) and in record / replay (256 MiB). Now:
# --version and --help exit 0 under 128 MiB; record and replay under 128,
# 256 and 384 MiB, with the default thread count and with
# DRIFT_CPU_THREADS=1, either succeed or exit 2 with a message naming the
# limit and OpenBLAS; every command finishes within 60 s (a hang fails).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/hostile_limits.$$"
fail() { echo "FAIL: $*"; exit 1; }
# AddressSanitizer maps terabytes of shadow memory at start: nothing runs under ulimit -v
if ldd "$D" 2>/dev/null | grep -q 'libasan'; then echo "SKIP: an ASan build cannot run under ulimit -v"; exit 77; fi
mkdir -p "$W"
P="$T/plans"
# The limits are above what loading drift's own shared objects maps (a CUDA
# build links cuBLASLt, ~0.5 GB of file): BASE MiB = binary + libraries.
BASE=$(stat -Lc %s "$D" $(ldd "$D" | awk '$3 ~ /^\// {print $3}') | awk '{s += $1} END {print int(s / 1048576) + 16}')
echo "info base mapping of $D and its libraries: $BASE MiB (added to every limit below)"
LIMIT_S=60

# a clean trace to replay, recorded without a limit
"$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" \
  -o "$W/base.h5" >/dev/null 2>"$W/err" || fail "record without a limit: $(tail -c 300 "$W/err")"

for a in --version --help; do
  (ulimit -v $(((BASE + 128) * 1024)); timeout $LIMIT_S "$D" $a >/dev/null 2>"$W/err"); rc=$?
  [ $rc -eq 0 ] || fail "drift $a under ulimit -v BASE+128 MiB exited $rc (124: hung): $(tail -c 300 "$W/err")"
done
echo "ok   --version and --help under ulimit -v BASE+128 MiB: exit 0"

ok=0; refused=0
for th in "" 1; do
  for mb in 128 256 384; do
    for cmd in record replay; do
      rm -f "$W"/out*.h5
      if [ $cmd = record ]; then
        args=(record --synthetic tiny-dit --steps 2 --trainer-plan "$P/wan2_2.json"
              --rollout-plan "$P/wan2_2_no_norm2.json" -o "$W/out.h5")
      else
        args=(replay "$W/base.h5" --plan "$P/wan2_2.json" --ref rollout)
      fi
      tag="drift $cmd under ulimit -v BASE+$mb MiB${th:+, DRIFT_CPU_THREADS=$th}"
      (ulimit -v $(((BASE + mb) * 1024)); env ${th:+DRIFT_CPU_THREADS=$th} timeout $LIMIT_S "$D" "${args[@]}" >/dev/null 2>"$W/err")
      rc=$?
      case $rc in
        0) ok=$((ok + 1)) ;;
        2) grep -q "address-space limit" "$W/err" && grep -q "OpenBLAS" "$W/err" ||
             fail "$tag: exit 2 without naming the limit: $(tail -c 300 "$W/err")"
           refused=$((refused + 1)) ;;
        124) fail "$tag: hung (killed after $LIMIT_S s)" ;;
        *) fail "$tag: exit $rc: $(tail -c 300 "$W/err")" ;;
      esac
    done
  done
done
# the cases that fit must run: one thread under 256 MiB records (measured: it does)
(ulimit -v $(((BASE + 256) * 1024)); DRIFT_CPU_THREADS=1 timeout $LIMIT_S "$D" record --synthetic tiny-dit --steps 2 \
  --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" -o "$W/out1.h5" >/dev/null 2>"$W/err") ||
  fail "record with one thread under ulimit -v 256 MiB failed: $(tail -c 300 "$W/err")"
echo "ok   record / replay under ulimit -v BASE+128..384 MiB: $ok ran, $refused refused with exit 2 naming the limit, none hung (limit $LIMIT_S s)"
rm -rf "$W"
