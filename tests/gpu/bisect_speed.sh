#!/usr/bin/env bash
# drift bisect speed (issue 35): the time and probe count of a bisection
# against one replay of the same trace, and against the old behaviour.
#
#   MODE=param25 DEVICE=cuda:0 BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/bisect_speed.sh
#
# MODE
#   param25  (default) a 1.3B Wan (Wan2.1-1.3B widths, 30 blocks, 1280
#            tokens as scale.sh's 1.3B-wide trace, seeded weights, STEPS
#            steps, only output:* sites recorded); the bad
#            plan sets 25 parameters to fp32 through two globs
#            (blocks.[0-9].norm2.* and blocks.1[0-4].norm2.weight); bisect
#            --granularity param --all. Target: < 20 s (the issue: 145
#            probes, 48 s, 16 one-member sets).
#   one      the same trace, one pattern difference (*.norm2.*): target
#            <= 3x one replay (drift replay of the bad plan).
# It also runs the same bisection with --no-prefix-cache (every probe from the
# inputs: the same answer is checked, the time reported), and the bitwise question (--threshold 0, the old default
# threshold) with the same binary, and OLD_BUILD's drift (a build of main
# before issue 35) when OLD_BUILD is set, for the old time and probes.
# Prints PASS/FAIL lines and a RESULT table; logs and JSON under $OUT/bisect_speed.
#
# Knobs: BUILD (default /tmp/drift-gpu-build), OLD_BUILD (unset: skipped),
# DEVICE (default cuda:0; cpu to dry-run), SPEC (the model), STEPS
# (default 2), RUN_TIMEOUT (seconds per command, default 300), KEEP=1 keeps
# the trace (else it is deleted at the end: ~11 GB for the 1.3B model),
# SWEEP ("name:args;...": the same bisection with other options, timed and
# checked against the default's answer), SKIP_BITWISE=1.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
D="$BUILD/drift"
OUT="${OUT:-$(mktemp -d)}"
W="$OUT/bisect_speed"
P="$S/tests/data/plans"
MODE="${MODE:-param25}"
DEVICE="${DEVICE:-cuda:0}"
STEPS="${STEPS:-2}"
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
SPEC="${SPEC:-wan2.2:layers=30,dim=1536,heads=12,ffn_dim=8960,in_channels=16,out_channels=16,text_dim=4096,text_len=512,frames=5,height=32,width=32}"
PY="${PYTHON3:-python3}"
case "$MODE" in param25|one) ;; *) echo "bisect_speed: MODE must be param25 or one, got '$MODE'" >&2; exit 2 ;; esac
[ -x "$D" ] || { echo "bisect_speed: $D is missing or not executable: build drift with CUDA first (BUILD=dir)" >&2; exit 2; }
if [ -n "${OLD_BUILD:-}" ] && [ ! -x "$OLD_BUILD/drift" ]; then
  echo "bisect_speed: OLD_BUILD=$OLD_BUILD has no drift binary" >&2; exit 2
fi
rm -rf "$W"; mkdir -p "$W" || { echo "bisect_speed: cannot create $W" >&2; exit 2; }
FAILS=0
out() { echo "$*" | tee -a "$W/summary.txt"; }
check() { if eval "$2"; then out "PASS $1"; else out "FAIL $1"; FAILS=$((FAILS + 1)); fi; }
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; } # no bc on the GPU machine
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
# timed NAME CMD...: runs CMD (stdout to $W/NAME.out, stderr to $W/NAME.err), sets SECS and RC
timed() {
  local n=$1; shift
  local t0; t0=$(now)
  timeout "$RUN_TIMEOUT" "$@" >"$W/$n.out" 2>"$W/$n.err"; RC=$?
  SECS=$(sub "$(now)" "$t0")
  echo "[$n] exit $RC in $SECS s: $*" >>"$W/commands.txt"
}
jget() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2" 2>/dev/null || echo "?"; }

# the plans: good without patterns; bad with 25 parameters in fp32 through two globs
"$PY" - "$W" <<'EOF'
import json, sys
base = {"fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "bf16",
        "sglang_dit_precision": "bf16", "input_dtype_policy": {"latents": None, "cond": None, "timestep": None}}
w = sys.argv[1]
json.dump(dict(base, name="good", param_dtype_patterns=[]), open(w + "/good.json", "w"), indent=1)
json.dump(dict(base, name="bad25", param_dtype_patterns=[["blocks.[0-9].norm2.*", "fp32"],
          ["blocks.1[0-4].norm2.weight", "fp32"]]), open(w + "/bad25.json", "w"), indent=1)
json.dump(dict(base, name="bad1", param_dtype_patterns=[["*.norm2.*", "fp32"]]), open(w + "/bad1.json", "w"), indent=1)
EOF
BAD="$W/bad25.json"; GRAN=(--granularity param --all)
[ "$MODE" = one ] && { BAD="$W/bad1.json"; GRAN=(); }

TR="$W/t.h5"
timed record "$D" record --synthetic "$SPEC" --steps "$STEPS" --device "$DEVICE" --sites 'output:*' \
  --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" -o "$TR" --force
check "record $SPEC, $STEPS steps on $DEVICE (exit $RC, $SECS s)" "[ $RC -eq 0 ]"
[ $RC -eq 0 ] || { tail -5 "$W/record.err"; exit 1; }

# one replay of the bad plan (twice: the first warms the page cache and the device)
timed replay_warm "$D" replay "$TR" --plan "$BAD" --device "$DEVICE" --ref trainer --output-only
timed replay "$D" replay "$TR" --plan "$BAD" --device "$DEVICE" --ref trainer --output-only
REPLAY=$SECS
check "one replay (exit $RC, $REPLAY s)" "[ $RC -eq 0 ]"

bisect() { # NAME BIN extra-args...
  local n=$1 bin=$2; shift 2
  timed "$n" "$bin" bisect "$TR" --good "$W/good.json" --bad "$BAD" --device "$DEVICE" "${GRAN[@]}" --json "$@"
}
bisect new "$D"
NEW=$SECS; NEW_RC=$RC
check "bisect ($MODE, exit $NEW_RC, $NEW s)" "[ $NEW_RC -eq 0 ]"
NDIFF=$(jget "$W/new.out" 'len(d["differences"])')
NPROBES=$(jget "$W/new.out" 'd["probes"]')
NREPLAYS=$(jget "$W/new.out" 'd["replays"]')
NSETS=$(jget "$W/new.out" 'len(d["culprit_sets"])')
NHARM=$(jget "$W/new.out" 'len(d["harmless"] or [])')
BYPAT=$(jget "$W/new.out" '"; ".join("%s: %d culprits, %s harmless of %d" % (p["pattern"], len(p["culprits"]), p["harmless"], p["differences"]) for p in d["patterns"])')
out "new: $NDIFF differences, $NPROBES probes, $NREPLAYS replays, $NSETS culprit sets, $NHARM harmless; by pattern: $BYPAT"
# prefix reuse (the good and bad replays' activations at each difference's first node)
PFX=$(jget "$W/new.out" '"%d of %d replays reused, %.1f%% skipped, %.1f MiB" % (d["prefix_cache"]["reused"], d["prefix_cache"]["replays"], 100 * d["prefix_cache"]["skipped_fraction"], d["prefix_cache"]["bytes"] / 1048576)')
out "prefix reuse: $PFX"
if [ "$MODE" = param25 ]; then
  check "25 parameter differences (got $NDIFF)" "[ '$NDIFF' = 25 ]"
  check "bisect of 25 parameter differences < 20 s (got $NEW s)" "le $NEW 19.999"
else
  check "one difference, no probe (got $NDIFF differences, $NPROBES probes)" "[ '$NDIFF' = 1 ] && [ '$NPROBES' = 0 ]"
  check "one difference <= 3x one replay ($NEW s vs $REPLAY s)" "le $NEW $(awk -v r="$REPLAY" 'BEGIN { print 3 * r }')"
fi

# the same bisection replaying every probe from the inputs: the same answer, bit for bit
bisect noprefix "$D" --no-prefix-cache
NOPFX=$SECS
out "--no-prefix-cache: exit $RC, $NOPFX s"
SAME=$(jget "$W/noprefix.out" '[d[k] for k in ("culprit_sets", "harmless", "differences", "good_metric", "bad_metric", "noise_floor")] == [json.load(open("'"$W/new.out"'"))[k] for k in ("culprit_sets", "harmless", "differences", "good_metric", "bad_metric", "noise_floor")]')
check "--no-prefix-cache gives the same answer (culprits, effects, metrics: $SAME)" "[ '$SAME' = True ]"

# SWEEP="name:extra args;...": the same bisection with other options (--parallel N, --kernels
# torch), each timed and checked against the default's answer
IFS=';' read -r -a SW <<< "${SWEEP:-}"
for e in "${SW[@]}"; do
  [ -n "$e" ] || continue
  n=${e%%:*}; read -r -a xa <<< "${e#*:}"
  bisect "sweep_$n" "$D" "${xa[@]}"
  SAME=$(jget "$W/sweep_$n.out" '[d[k] for k in ("culprit_sets", "harmless")] == [json.load(open("'"$W/new.out"'"))[k] for k in ("culprit_sets", "harmless")]')
  out "sweep $n (${e#*:}): exit $RC, $SECS s, $(jget "$W/sweep_$n.out" 'd["probes"]') probes, $(jget "$W/sweep_$n.out" 'd["replays"]') replays, same culprits and harmless as the default: $SAME"
done

# the bitwise question (the old default threshold), same binary (SKIP_BITWISE=1 skips it)
BIT="-"
if [ "${SKIP_BITWISE:-0}" != 1 ]; then
  bisect bitwise "$D" --threshold 0
  BIT=$SECS
  out "bitwise (--threshold 0): exit $RC, $BIT s, $(jget "$W/bitwise.out" 'd["probes"]') probes, $(jget "$W/bitwise.out" 'len(d["culprit_sets"])') culprit sets"
fi

# the old binary, when given
OLD="-"; OLDP="-"; OLDS="-"
if [ -n "${OLD_BUILD:-}" ]; then
  bisect old "$OLD_BUILD/drift"
  OLD=$SECS
  OLDP=$(jget "$W/old.out" 'd["probes"]'); OLDS=$(jget "$W/old.out" 'len(d["culprit_sets"])')
  out "old ($OLD_BUILD): exit $RC, $OLD s, $OLDP probes, $OLDS culprit sets"
fi
out "RESULT mode=$MODE device=$DEVICE replay=${REPLAY}s new=${NEW}s probes=$NPROBES replays=$NREPLAYS sets=$NSETS harmless=$NHARM no_prefix_cache=${NOPFX}s prefix=\"$PFX\" bitwise=${BIT}s old=${OLD}s old_probes=$OLDP old_sets=$OLDS"
[ "${KEEP:-0}" = 1 ] || rm -f "$TR" "${TR%.h5}.rollout.h5"
[ $FAILS -eq 0 ]
