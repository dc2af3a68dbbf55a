#!/usr/bin/env bash
# Which GEMM calls PyTorch and drift make for a zoo model at two batch sizes (issue 33: where the
# two disagree on whether a GEMM's algorithm moves with the batch). After zoo.sh record:
#
#   MODELS=A,B BATCHES=1,4 BUILD=... OUT=$OUT bash tests/gpu/gemm_log_probe.sh
#
# For each model and batch: tests/gpu/gemm_log_probe.py (PyTorch, one forward) under
# CUBLASLT_LOG_LEVEL=5 and CUBLAS_LOGINFO_DBG=1, then `drift invariance --kernels torch --batch
# BATCHES` under the same logs. One archive $OUT/${GEMM_LOG_TGZ:-gemm_logs.tgz} (the device tool brings
# back 8 files) holds summary.txt, MODEL.torch.bB.{lt,cublas}.log, MODEL.drift.{lt,cublas}.log and
# MODEL.drift.json.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
W="${WORK:-/tmp/zoo}"
PY="${PY:-python3}"
L="$W/gemm_logs"
rm -rf "$L"; mkdir -p "$L" "$W/glog" "$OUT"
export PYTHONPATH="$S/.pydeps:$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export DIFFUSERS_TESTS="$S/.pydeps/dtests"
logged() { # logged PREFIX CMD...: CMD under both API logs, written to $W/glog/PREFIX.{lt,cublas}.log
  local p="$1"; shift
  rm -f "$W/glog/$p".*
  CUBLASLT_LOG_LEVEL=5 CUBLASLT_LOG_FILE="$W/glog/$p.lt.log" CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG="$W/glog/$p.cublas.log" \
    timeout -s KILL 150 "$@"
}
for m in ${MODELS//,/ }; do
  tr="$W/rec/$m/trainer.h5"
  [ -f "$tr" ] || { echo "gemm_log_probe: no trace $tr" | tee -a "$L/summary.txt"; continue; }
  isl=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1])).get('island') or '')" "$W/rec/$m/info.json" 2>/dev/null)
  for b in ${BATCHES//,/ }; do
    logged "$m.torch.b$b" "$PY" "$S/tests/gpu/gemm_log_probe.py" --model "$m" --batch "$b" ${isl:+--island "$isl"} \
      > "$W/glog/$m.torch.b$b.out" 2>&1
    echo "torch $m b$b rc=$?: $(tail -1 "$W/glog/$m.torch.b$b.out")" | tee -a "$L/summary.txt"
  done
  logged "$m.drift" "$BUILD/drift" invariance "$tr" --device cuda --kernels torch --batch "$BATCHES" --json \
    > "$L/$m.drift.json" 2> "$W/glog/$m.drift.err"
  echo "drift $m rc=$?: $(tail -c 300 "$W/glog/$m.drift.err")" | tee -a "$L/summary.txt"
  # a log over 60 MB is cut (the archive must stay under the device tool's 16 MiB per file)
  for f in "$W/glog/$m".*; do head -c 60000000 "$f" > "$L/$(basename "$f")"; done
done
ls -la "$L" >> "$L/summary.txt"
tar czf "$OUT/${GEMM_LOG_TGZ:-gemm_logs.tgz}" -C "$W" gemm_logs
