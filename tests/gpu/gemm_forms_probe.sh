#!/usr/bin/env bash
# Issue 31, the cpu noise floor: which form cuBLASLt computes for every bf16 GEMM shape of the
# zoo on this GPU (docs/gemm-forms.md), so that kernels/gemm_forms.c's table can grow. Needs
# torch (no drift build):
#
#   OUT=$OUT bash tests/gpu/gemm_forms_probe.sh        (or STAGES=scripts SCRIPTS=gemm_forms_probe bash tests/gpu/run.sh)
#
# $OUT/gemm_forms.jsonl (one row per shape), $OUT/gemm_forms_rows.c (the rows to add), PASS/FAIL
# lines (a shape no candidate form explains; a table row this GPU does not compute as listed).
# Env: PY (python3 with torch), REC (a folder of <Model>/trainer.h5 to probe too; needs h5py).
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
PY="${PY:-python3}"
mkdir -p "$OUT"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 77)" || { echo "SKIP: no CUDA torch"; exit 77; }
exec "$PY" "$S/tests/gpu/gemm_forms_probe.py" --out "$OUT" ${REC:+--rec "$REC"}
