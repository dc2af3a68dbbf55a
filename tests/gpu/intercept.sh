#!/usr/bin/env bash
# Acceptance job of the zero-code-change census (issue 7 part 3,
# docs/intercept.md), on a machine with 2 GPUs, torch and a build of drift:
#
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/intercept.sh
#
# Runs tests/gpu/intercept_job.py (a Wan-like DiT under FSDP2, bf16 params,
# fp32 reduce, norm2 in an fp32 fully_shard island, bf16 autocast, NVTX
# ranges from module hooks; no drift code) with
#   LD_PRELOAD=$BUILD/libdrift_intercept.so NVTX_INJECTION64_PATH=<same>
# under torchrun --nproc_per_node=2, then checks both rank censuses with
# drift ls --json: bf16 all-gathers for the blocks, fp32 all-gathers for
# norm2 (never bf16), fp32 reduce-scatters, GEMMs with bf16 A/B and fp32
# compute inside the block ranges, communicator rank/size. One PASS/FAIL
# line per check, then the census table of rank 0; exit 1 on any failure,
# 77 without 2 GPUs.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:?set BUILD to the drift build directory}"
DRIFT="$BUILD/drift"
LIB="$BUILD/libdrift_intercept.so"
PY="${PYTHON3:-python3}"
OUT="${OUT:-$(mktemp -d)}"
W="$OUT/intercept"; rm -rf "$W"; mkdir -p "$W"
T0=$(date +%s)

[ -x "$DRIFT" ] || { echo "FAIL: $DRIFT not built"; exit 1; }
[ -f "$LIB" ] || { echo "FAIL: $LIB not built (target drift_intercept)"; exit 1; }
[ -f "$BUILD/libdrift_intercept_writer.so" ] || { echo "FAIL: $BUILD/libdrift_intercept_writer.so not built"; exit 1; }
ngpu=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -lt 2 ]; then echo "SKIP: needs 2 GPUs and torch (found ${ngpu:-0})"; exit 77; fi

# The job, under the interposer. Only the job's environment carries
# LD_PRELOAD (torchrun and its workers inherit it; the launcher itself runs
# no GEMM and writes no census).
( cd "$S" && env LD_PRELOAD="$LIB" NVTX_INJECTION64_PATH="$LIB" DRIFT_INTERCEPT_OUT="$W/census.h5" \
    timeout -s KILL 240 "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 \
    tests/gpu/intercept_job.py ) > "$W/job.log" 2>&1
rc=$?
echo "job: exit $rc after $(($(date +%s) - T0))s (log $W/job.log)"
grep -E "^step |drift intercept:" "$W/job.log" | head -20
fails=0
if [ $rc -ne 0 ]; then echo "FAIL: the job exited $rc under the interposer"; tail -40 "$W/job.log"; fails=1; fi

for r in 0 1; do
  f="$W/census.rank$r.h5"
  if [ ! -f "$f" ]; then echo "FAIL: rank $r census $f missing"; fails=$((fails + 1)); continue; fi
  "$DRIFT" ls --json "$f" > "$W/ls.rank$r.json" 2> "$W/ls.rank$r.err" || {
    echo "FAIL: drift ls --json $f"; cat "$W/ls.rank$r.err"; fails=$((fails + 1)); continue; }
  "$PY" - "$W/ls.rank$r.json" "$r" <<'EOF' || fails=$((fails + 1))
import json, re, sys
doc = json.load(open(sys.argv[1]))
rank = int(sys.argv[2])
c = doc.get("census")
bad = 0
def check(name, ok, detail=""):
    global bad
    print(("PASS" if ok else "FAIL") + f": rank {rank}: {name}" + ("" if ok else f" ({detail})"))
    bad += 0 if ok else 1
check("census present", c is not None)
if c is None:
    sys.exit(1)
G, C = c["gemm"], c["collective"]
blk = re.compile(r"(^|/)blocks\.\d+(/|$)")
ag = [x for x in C if x["op"] == "allgather"]
check("producer drift-intercept, rank/world from torchrun",
      doc["producer"].startswith("drift-intercept") and c["rank"] == rank and c["world_size"] == 2,
      f"producer {doc['producer']} rank {c['rank']} world {c['world_size']}")
check("NVTX injection active", c["nvtx_injected"] and c["nvtx_ranges"] > 0, f"{c['nvtx_injected']} {c['nvtx_ranges']}")
for b in (0, 1):
    rows = [x for x in ag if x["dtype"] == "bf16" and re.search(rf"(^|/)blocks\.{b}$", x["range"])]
    check(f"bf16 all-gather of blocks.{b}'s parameters in range .../blocks.{b}", len(rows) >= 1,
          sorted({(x['range'], x['dtype']) for x in ag}))
n2 = [x for x in ag if x["range"].endswith("norm2")]
check("fp32 all-gather of norm2's parameters in range .../norm2",
      any(x["dtype"] == "fp32" for x in n2), sorted({(x['range'], x['dtype']) for x in ag}))
check("no bf16 all-gather inside a norm2 range", not any(x["dtype"] == "bf16" for x in n2),
      [x for x in n2 if x["dtype"] == "bf16"])
check("fp32 reduce-scatters (reduce_dtype fp32)",
      any(x["op"] == "reducescatter" and x["dtype"] == "fp32" for x in C),
      sorted({(x['op'], x['dtype']) for x in C}))
check("collectives on a 2-rank communicator with this rank",
      bool(C) and all(x["comm_nranks"] == 2 and x["comm_rank"] == rank for x in C if x["comm"] >= 0),
      sorted({(x['comm'], x['comm_rank'], x['comm_nranks']) for x in C}))
gb = [x for x in G if blk.search(x["range"])]
check("GEMMs inside the block ranges", len(gb) > 0, f"{len(G)} GEMM rows, ranges {sorted({x['range'] for x in G})[:12]}")
check("GEMMs in block ranges have bf16 A/B and fp32 compute",
      bool(gb) and all(x["a_type"] == "bf16" and x["b_type"] == "bf16" and x["compute_type"].startswith("fp32") for x in gb),
      [(x["range"], x["api"], x["a_type"], x["b_type"], x["compute_type"]) for x in gb
       if not (x["a_type"] == "bf16" and x["b_type"] == "bf16" and x["compute_type"].startswith("fp32"))][:8])
for lin in ("attn1/to_q", "attn1/to_out.0", "ffn/net.0/proj", "ffn/net.2"):
    check(f"a GEMM attributed to blocks.N/{lin}", any(x["range"].endswith(lin) for x in gb),
          sorted({x['range'] for x in gb})[:12])
check("no census rows dropped", c["gemm_dropped"] == 0 and c["collective_dropped"] == 0)
sys.exit(1 if bad else 0)
EOF
done

echo
echo "census of rank 0 (drift ls):"
"$DRIFT" ls "$W/census.rank0.h5" 2>&1 | sed -n '/^census/,$p'
echo
echo "intercept.sh: $fails failing group(s), $(($(date +%s) - T0))s"
[ $fails -eq 0 ] || exit 1
exit 0
