#!/usr/bin/env bash
# Diagnostic (not a pass/fail test) for the step-parallel replay speedup on a
# machine with 2 GPUs and a CUDA build of drift (NCCL and MPI found at
# configure time): why do two GPUs run the GPU-filling workload of
# multi_gpu.sh (section 2b) only ~1.6x faster than one?
#
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/multi_speed.sh
#
# It records multi_gpu.sh's FILL_SPEC trace (same spec, steps, plans and
# --sites 'output:*'), does one untimed warm-up run of the 1-GPU case, then
# runs each configuration once:
#   a   one process, one GPU: --devices cuda:0 (multi_gpu.sh's 1-GPU
#       baseline; the steps-phase line "drift replay: ... steps X s" is only
#       printed on the --devices / MPI path, so this is the reference)
#   a0  one process, plain --device cuda:0 (no "steps" line on this path:
#       its steps phase is estimated from the DRIFT_REPLAY_PROFILE line as
#       steps x per-step phases; since 2026-11-30 this path keeps the
#       parameters resident too, warmed in setup: before, it re-uploaded
#       them every step and took twice as long)
#   b   one process, --devices cuda:0,cuda:1 (steps dealt to two threads)
#   c   mpirun -n 2 ... --device cuda (two ranks, one GPU each), launched as
#       multi_gpu.sh launches it
#   d   two independent 1-GPU processes started together: --devices cuda:0
#       --steps 0:N/2-1 and --devices cuda:1 --steps N/2:N-1 (no
#       communication at all); the slower one's time counts
#   e   as a, on cuda:1 (a slow GPU?)
# Every run has DRIFT_REPLAY_PROFILE=1 (it only reads clocks: no device
# syncs), so each log keeps the per-phase lines ("replay profile (...)").
# While a run goes, nvidia-smi samples clocks, power, temperature and
# utilisation every 0.5 s into a per-configuration CSV.
#
# Output: per configuration the steps-phase time, wall time, mean SM clock
# and power per GPU, the per-step profile lines of a, b and c, and a table.
# Logs under $OUT/multi_speed/. Exit 0 (failures are reported in the
# table), 2 when the drift binary is missing.
#
# Knobs (environment):
#   BUILD        drift CUDA build directory (default /tmp/drift-gpu-build)
#   OUT          where the logs go (default: a new temporary directory)
#   SPEC, STEPS  the workload (default: multi_gpu.sh's FILL_SPEC and 8 steps)
#   RUN_TIMEOUT  seconds per command (default 300)
#   SINGLE_FLAG  --devices (default) or --device for a, d and e
#   DEV0, DEV1   the two devices (default cuda:0, cuda:1); MPI_DEVICE the
#                --device of the MPI ranks (default cuda): set DEV0=cpu
#                DEV1=cpu MPI_DEVICE=cpu to dry-run the script without a GPU
#   NP           ranks for c (default 2)
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
D="$BUILD/drift"
OUT="${OUT:-$(mktemp -d)}"
W="$OUT/multi_speed"
P="$S/tests/data/plans"
SPEC="${SPEC:-wan2.2:layers=16,dim=1536,heads=12,ffn_dim=6144,frames=1,height=256,width=256,text_len=256,text_dim=1024,in_channels=4,out_channels=4}"
STEPS="${STEPS:-8}"
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
SINGLE_FLAG="${SINGLE_FLAG:---devices}"
DEV0="${DEV0:-cuda:0}"
DEV1="${DEV1:-cuda:1}"
MPI_DEVICE="${MPI_DEVICE:-cuda}"
NP="${NP:-2}"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"  # no NVLink multicast (machine notes), as multi_gpu.sh
# OpenMPI in a container: no cross-memory-attach single copy (as multi_gpu.sh)
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
QUERY="index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu"

if [ ! -x "$D" ]; then
  echo "multi_speed: $D is missing or not executable: build drift with CUDA first (BUILD=dir)" >&2
  exit 2
fi
case "$SINGLE_FLAG" in --devices|--device) ;; *) echo "multi_speed: SINGLE_FLAG must be --devices or --device, got '$SINGLE_FLAG'" >&2; exit 2 ;; esac
case "$STEPS" in ''|*[!0-9]*) echo "multi_speed: STEPS must be a number, got '$STEPS'" >&2; exit 2 ;; esac
case "$RUN_TIMEOUT" in ''|*[!0-9]*) echo "multi_speed: RUN_TIMEOUT must be a number of seconds, got '$RUN_TIMEOUT'" >&2; exit 2 ;; esac
if [ "$STEPS" -lt 2 ]; then echo "multi_speed: STEPS must be at least 2 (got $STEPS)" >&2; exit 2; fi
rm -rf "$W"
mkdir -p "$W" || { echo "multi_speed: cannot create $W" >&2; exit 2; }
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }

echo "multi_speed: drift $D, logs in $W"
echo "multi_speed: workload $SPEC, $STEPS steps, timeout ${RUN_TIMEOUT}s per command"
HAVE_SMI=0
if command -v nvidia-smi >/dev/null 2>&1; then
  HAVE_SMI=1
  timeout 30 nvidia-smi -L >"$W/gpus.txt" 2>&1 || true
  timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,clocks.max.sm,clocks.max.mem,power.limit --format=csv \
    >>"$W/gpus.txt" 2>&1 || true
  timeout 30 nvidia-smi topo -m >"$W/topo.txt" 2>&1 || true
  sed 's/^/   /' "$W/gpus.txt"
  ngpu=$(grep -c '^GPU' "$W/gpus.txt" || true)
  [ "${ngpu:-0}" -ge 2 ] || echo "WARNING: found ${ngpu:-0} GPU(s); configurations on $DEV1 will fail"
else
  echo "WARNING: nvidia-smi not found: no clock/power samples"
fi

# ---- the sampler ----------------------------------------------------------------------
SMI_PID=""
sampler_start() { # $1: csv file
  SMI_PID=""
  [ "$HAVE_SMI" = 1 ] || return 0
  timeout $((RUN_TIMEOUT + 120)) nvidia-smi --query-gpu="$QUERY" --format=csv,noheader -lms 500 >"$1" 2>&1 &
  SMI_PID=$!
  # why the clocks are below their maximum (bit mask; a separate sampler, so
  # that a driver without the field costs nothing but this file)
  timeout $((RUN_TIMEOUT + 120)) nvidia-smi --query-gpu=index,clocks_throttle_reasons.active,utilization.gpu \
    --format=csv,noheader -lms 500 >"${1%.csv}.thr.csv" 2>&1 &
  THR_PID=$!
}
THR_PID=""
sampler_stop() {
  [ -n "$SMI_PID" ] || return 0
  kill "$SMI_PID" "$THR_PID" 2>/dev/null
  wait "$SMI_PID" "$THR_PID" 2>/dev/null
  SMI_PID=""
  THR_PID=""
}
# "gpu0: 0x4 x12, 0x0 x30; gpu1: ..." the clock-event masks seen while busy
thr_summary() { # $1: the sampler's csv file
  local f="${1%.csv}.thr.csv"
  [ -s "$f" ] || { echo "n/a"; return 0; }
  awk -F', *' '$1 ~ /^[0-9]+$/ { u = $3; sub(/ *%/, "", u); if (u + 0 >= 50) { k = "gpu" $1 " " $2; n[k]++ } }
    END { for (k in n) printf "%s x%d; ", k, n[k]; print "" }' "$f"
}
# "gpu0: 1980 MHz 612 W; gpu1: ..." from a sample file (mean over the samples
# where that GPU was busy, utilisation >= 50%: setup and idle time would
# dilute the means)
smi_means() { # $1: csv file; $2: clock|power|both
  [ -s "$1" ] || { echo "n/a"; return 0; }
  awk -F', *' -v what="$2" '
    $1 ~ /^[0-9]+$/ {
      u = $6; sub(/ *%/, "", u); if (u + 0 < 50) next
      g = $1; c = $2; p = $4; sub(/ *MHz/, "", c); sub(/ *W/, "", p)
      if (c ~ /^[0-9.]+$/) { cs[g] += c; cn[g]++ }
      if (p ~ /^[0-9.]+$/) { ps[g] += p; pn[g]++ }
      seen[g] = 1
    }
    END {
      out = ""
      n = 0
      for (g in seen) idx[n++] = g + 0
      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (idx[j] < idx[i]) { t = idx[i]; idx[i] = idx[j]; idx[j] = t }
      for (i = 0; i < n; i++) {
        g = idx[i]
        c = cn[g] ? sprintf("%.0f", cs[g] / cn[g]) : "n/a"
        p = pn[g] ? sprintf("%.0f", ps[g] / pn[g]) : "n/a"
        if (what == "clock") s = "gpu" g ":" c
        else if (what == "power") s = "gpu" g ":" p
        else s = "gpu" g ": SM " c " MHz, " p " W"
        out = out (out == "" ? "" : (what == "both" ? "; " : " ")) s
      }
      print (out == "" ? "n/a" : out)
    }' "$1"
}

# ---- timings from the logs ------------------------------------------------------------
# "setup X s, steps Y s, total Z s" from the stderr summary line (as multi_gpu.sh)
steps_s() { sed -n 's/.*steps \([0-9.]*\) s, total.*/\1/p' "$1" | tail -1; }
# the plain --device path prints no summary line: steps x the per-step phases of
# "replay profile (DEV): N steps: inputs a ms, forward+sites b ms, oracle c ms, after d ms per step"
steps_from_profile() {
  sed -n 's/^replay profile ([^)]*): \([0-9]*\) steps: inputs \([0-9.]*\) ms, forward+sites \([0-9.]*\) ms, oracle \([0-9.]*\) ms, after \([0-9.]*\) ms per step$/\1 \2 \3 \4 \5/p' "$1" \
    | awk '{ t += $1 * ($2 + $3 + $4 + $5) / 1000 } END { if (NR) printf "%.3f", t }'
}
steps_any() { # $1: log; prints "X" (summary line) or "~X" (estimated from the profile) or ""
  local s
  s=$(steps_s "$1")
  if [ -n "$s" ]; then echo "$s"; return 0; fi
  s=$(steps_from_profile "$1")
  [ -n "$s" ] && echo "~$s"
}

# ---- one run ----------------------------------------------------------------------------
# run_cfg NAME CMD...: runs CMD (drift or mpirun) under timeout with the sampler,
# stdout to NAME.json, stderr to NAME.err; sets RC and WALL
RC=0
WALL=""
run_cfg() {
  local name=$1
  shift
  local kill_opt=(-k 15)
  [ "$1" = mpirun ] && kill_opt=(-s KILL) # as multi_gpu.sh: mpirun is killed outright
  sampler_start "$W/$name.smi.csv"
  local t1 t2
  t1=$(now)
  DRIFT_REPLAY_PROFILE=1 timeout "${kill_opt[@]}" "$RUN_TIMEOUT" "$@" >"$W/$name.json" 2>"$W/$name.err"
  RC=$?
  t2=$(now)
  sampler_stop
  WALL=$(sub "$t2" "$t1")
  { echo "# command: $*"; echo "# exit status $RC, wall ${WALL}s"; } >>"$W/$name.err"
  if [ "$RC" -ne 0 ]; then
    local why="exit status $RC"
    if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then why="timed out after ${RUN_TIMEOUT}s (exit $RC)"; fi
    echo "   $name FAILED: $why; last lines of $W/$name.err:"
    grep -v '^#' "$W/$name.err" | tail -4 | sed 's/^/      /'
  fi
}

# results, by configuration
declare -A R_STEPS R_WALL R_CLK R_PWR R_RC R_DESC
NAMES=()
record_cfg() { # name description steps wall rc smi-file stderr-log...
  NAMES+=("$1")
  R_DESC[$1]=$2
  R_STEPS[$1]=${3:-n/a}
  R_WALL[$1]=${4:-n/a}
  R_RC[$1]=$5
  R_CLK[$1]=$(smi_means "$6" clock)
  R_PWR[$1]=$(smi_means "$6" power)
  echo "   $1 ($2): steps phase ${R_STEPS[$1]} s, wall ${R_WALL[$1]} s, exit $5"
  echo "      busy: $(smi_means "$6" both)"
  echo "      clock-event masks while busy: $(thr_summary "$6")"
  shift 6
  [ $# -gt 0 ] && grep -hE '^drift replay: [0-9]+ steps? on ' "$@" 2>/dev/null | sed 's/^/      /'
  return 0
}

# ---- the trace ------------------------------------------------------------------------------
echo "== record ($(el))"
TRACE="$W/fill.h5"
timeout -k 15 "$RUN_TIMEOUT" "$D" record --synthetic "$SPEC" --steps "$STEPS" --trainer-plan "$P/wan2_2.json" \
  --rollout-plan "$P/wan2_2_no_norm2.json" --sites 'output:*' --device "$DEV0" -o "$TRACE" >"$W/record.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$TRACE" ]; then
  echo "multi_speed: recording the trace failed (exit $rc); nothing to measure. Last lines of $W/record.log:"
  tail -5 "$W/record.log" | sed 's/^/   /'
  exit 0
fi
echo "   $TRACE ($(du -sh "$TRACE" 2>/dev/null | cut -f1))"
F=(replay "$TRACE" --plan "$P/wan2_2.json" --ref trainer --output-only --json)

# ---- warm-up ----------------------------------------------------------------------------------
echo "== warm-up: 1 GPU, $SINGLE_FLAG $DEV0, untimed ($(el))"
run_cfg warmup "$D" "${F[@]}" "$SINGLE_FLAG" "$DEV0"

echo "== a: 1 process, $SINGLE_FLAG $DEV0 ($(el))"
run_cfg a "$D" "${F[@]}" "$SINGLE_FLAG" "$DEV0"
record_cfg a "1 proc, $SINGLE_FLAG $DEV0" "$(steps_any "$W/a.err")" "$WALL" "$RC" "$W/a.smi.csv" "$W/a.err"

if [ "$SINGLE_FLAG" != --device ]; then
  echo "== a0: 1 process, plain --device $DEV0 ($(el))"
  run_cfg a0 "$D" "${F[@]}" --device "$DEV0"
  record_cfg a0 "1 proc, --device $DEV0" "$(steps_any "$W/a0.err")" "$WALL" "$RC" "$W/a0.smi.csv" "$W/a0.err"
fi

echo "== b: 1 process, --devices $DEV0,$DEV1 ($(el))"
run_cfg b "$D" "${F[@]}" --devices "$DEV0,$DEV1"
record_cfg b "1 proc, --devices $DEV0,$DEV1" "$(steps_any "$W/b.err")" "$WALL" "$RC" "$W/b.smi.csv" "$W/b.err"

echo "== c: mpirun -n $NP, --device $MPI_DEVICE ($(el))"
if command -v mpirun >/dev/null 2>&1; then
  M=(mpirun --allow-run-as-root --oversubscribe -n "$NP")
  run_cfg c "${M[@]}" "$D" "${F[@]}" --device "$MPI_DEVICE"
  record_cfg c "mpirun -n $NP, --device $MPI_DEVICE" "$(steps_any "$W/c.err")" "$WALL" "$RC" "$W/c.smi.csv" "$W/c.err"
  grep -q '^replay profile' "$W/c.err" || echo "   note: no profile lines from the MPI ranks (DRIFT_REPLAY_PROFILE not passed on by mpirun?)"
else
  echo "   mpirun not found: c skipped"
  record_cfg c "mpirun (not found)" "" "" "n/a" "/nonexistent"
fi

echo "== d: 2 independent processes, $SINGLE_FLAG $DEV0 --steps 0:$((STEPS / 2 - 1)) and $SINGLE_FLAG $DEV1 --steps $((STEPS / 2)):$((STEPS - 1)) ($(el))"
H=$((STEPS / 2))
sampler_start "$W/d.smi.csv"
td0=$(now)
( DRIFT_REPLAY_PROFILE=1 timeout -k 15 "$RUN_TIMEOUT" "$D" "${F[@]}" "$SINGLE_FLAG" "$DEV0" --steps "0:$((H - 1))" \
    >"$W/d0.json" 2>"$W/d0.err"
  echo "$? $(now)" >"$W/d0.end" ) &
p0=$!
( DRIFT_REPLAY_PROFILE=1 timeout -k 15 "$RUN_TIMEOUT" "$D" "${F[@]}" "$SINGLE_FLAG" "$DEV1" --steps "$H:$((STEPS - 1))" \
    >"$W/d1.json" 2>"$W/d1.err"
  echo "$? $(now)" >"$W/d1.end" ) &
p1=$!
wait "$p0"
wait "$p1"
sampler_stop
drc=0
dw=()
ds=()
for k in 0 1; do
  rck=""
  tk=""
  [ -s "$W/d$k.end" ] && read -r rck tk <"$W/d$k.end"
  case "$rck" in ''|*[!0-9]*) rck=1; tk=$(now) ;; esac
  dw[k]=$(sub "$tk" "$td0")
  ds[k]=$(steps_any "$W/d$k.err")
  echo "   d$k: exit $rck, wall ${dw[k]} s (from the common start), own steps phase ${ds[k]:-n/a} s"
  echo "# exit status $rck, wall ${dw[k]}s (from the common start)" >>"$W/d$k.err"
  [ "$rck" -eq 0 ] || { drc=$rck; grep -v '^#' "$W/d$k.err" | tail -4 | sed 's/^/      /'; }
done
# the slower process: the larger wall time and steps phase
dwall=$(awk -v a="${dw[0]}" -v b="${dw[1]}" 'BEGIN { printf "%.3f", (a + 0 > b + 0 ? a : b) }')
dsteps=$(awk -v a="${ds[0]#\~}" -v b="${ds[1]#\~}" 'BEGIN { if (a == "" || b == "") exit; printf "%.3f", (a + 0 > b + 0 ? a : b) }')
case "${ds[0]}${ds[1]}" in *'~'*) [ -n "$dsteps" ] && dsteps="~$dsteps" ;; esac
record_cfg d "2 procs, steps split" "$dsteps" "$dwall" "$drc" "$W/d.smi.csv" "$W/d0.err" "$W/d1.err"

echo "== e: 1 process, $SINGLE_FLAG $DEV1 ($(el))"
run_cfg e "$D" "${F[@]}" "$SINGLE_FLAG" "$DEV1"
record_cfg e "1 proc, $SINGLE_FLAG $DEV1" "$(steps_any "$W/e.err")" "$WALL" "$RC" "$W/e.smi.csv" "$W/e.err"

# ---- summary --------------------------------------------------------------------------------
echo
echo "== per-step profile lines (DRIFT_REPLAY_PROFILE=1) of a, b and c"
for n in a b c; do
  echo "-- $n (${R_DESC[$n]:-})"
  if [ -s "$W/$n.err" ] && grep -q '^replay profile' "$W/$n.err"; then
    grep '^replay profile' "$W/$n.err" | sed 's/^/   /'
  else
    echo "   (none)"
  fi
done

echo
echo "== summary: $SPEC, $STEPS steps (steps phase: the 'drift replay: ... steps X s' line; ~X: estimated from the profile line)"
base=${R_STEPS[a]#\~}
printf '%-4s %-34s %12s %10s %9s %-22s %-22s %s\n' cfg configuration "steps_s" "wall_s" speedup "mean SM MHz" "mean power W" exit
for n in "${NAMES[@]}"; do
  s=${R_STEPS[$n]}
  sp=$(awk -v a="$base" -v b="${s#\~}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else printf "n/a" }')
  printf '%-4s %-34s %12s %10s %9s %-22s %-22s %s\n' "$n" "${R_DESC[$n]}" "$s" "${R_WALL[$n]}" "$sp" "${R_CLK[$n]}" \
    "${R_PWR[$n]}" "${R_RC[$n]}"
done
echo "(speedup: steps phase of a / steps phase of the configuration; d: the slower of its two processes)"
echo "multi_speed: done in $(el); logs, JSON reports and nvidia-smi samples in $W"
exit 0
