#!/usr/bin/env bash
# Multi-device replay and bisect with host devices (--devices cpu,cpu,...):
# the report, the -o trace and the culprits are the one-device ones bit for
# bit; --fsdp (shard, cast, all-gather in host memory) changes nothing; bad
# usage exits 2. The same code paths run on GPUs with NCCL (tests/gpu/multi_gpu.sh).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/multi_cpu"; rm -rf "$W"; mkdir -p "$W"
P="$T/plans"; B="$T/bisect"
fail() { echo "FAIL: $*"; exit 1; }

"$D" record --synthetic tiny-dit --steps 5 --trainer-plan "$P/wan2_2.json" \
  --rollout-plan "$P/wan2_2_no_norm2.json" -o "$W/t.h5" >/dev/null || fail "record"

# same JSON but for the wall time and the backend's name
same_json() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in (a, b):
    d.pop("seconds", None); d.pop("backend", None)
if a != b:
    for k in a:
        if a.get(k) != b.get(k): print("differs:", k)
    sys.exit(1)
PY
}

n=0
for ref in trainer rollout oracle; do
  for plan in wan2_2 wan2_2_no_norm2; do
    "$D" replay "$W/t.h5" --plan "$P/$plan.json" --ref "$ref" --json >"$W/one.json" || fail "replay $ref $plan"
    for devs in cpu,cpu cpu,cpu,cpu; do
      "$D" replay "$W/t.h5" --plan "$P/$plan.json" --ref "$ref" --devices "$devs" --json >"$W/multi.json" 2>"$W/multi.err" \
        || fail "replay --devices $devs $ref $plan: $(cat "$W/multi.err")"
      same_json "$W/one.json" "$W/multi.json" || fail "--devices $devs --ref $ref --plan $plan differs from one device"
      grep -q "partial sums reduced through local" "$W/multi.err" || fail "no summary line: $(cat "$W/multi.err")"
      n=$((n + 1))
    done
  done
done
echo "multi_cpu: $n multi-device replays equal the one-device replay"

# K rounds per exchange (5 steps on 2 devices = 3 rounds): 1, 2 (the last
# exchange partial) and 8 give the one-device report, in 3, 2 and 1 exchanges
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout --json >"$W/one.json" || fail "replay for exchanges"
for kx in 1:3:1 2:2:2 8:1:3; do # K : exchanges : K as used (at most the 3 rounds)
  k=${kx%%:*} nx=${kx#*:} ku=${kx##*:} nx=${nx%:*}
  DRIFT_REPLAY_EXCHANGE_ROUNDS=$k DRIFT_REPLAY_PROFILE=1 "$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout \
    --devices cpu,cpu --json >"$W/multi.json" 2>"$W/multi.err" || fail "exchange every $k rounds: $(cat "$W/multi.err")"
  same_json "$W/one.json" "$W/multi.json" || fail "exchange every $k rounds differs from one device"
  [ "$(grep -c "3 rounds in $nx exchanges of up to $ku:" "$W/multi.err")" = 2 ] \
    || fail "exchange every $k rounds: expected $nx exchanges on both workers: $(grep 'rounds in' "$W/multi.err")"
done
echo "multi_cpu: exchanges every 1, 2 and 8 rounds equal the one-device replay"

# steps subset and output-only
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout --steps 1:3 --output-only --json >"$W/one.json" || fail "steps"
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout --steps 1:3 --output-only --devices cpu,cpu --json >"$W/multi.json" 2>/dev/null || fail "steps multi"
same_json "$W/one.json" "$W/multi.json" || fail "--steps 1:3 --output-only differs"

# --fsdp: uneven shards over 3 workers, fp32 and bf16 parameters, masters in bf16 too
for plan in wan2_2 wan2_2_no_norm2 all_bf16; do
  "$D" replay "$W/t.h5" --plan "$P/$plan.json" --ref rollout --json >"$W/one.json" || fail "replay $plan"
  "$D" replay "$W/t.h5" --plan "$P/$plan.json" --ref rollout --devices cpu,cpu,cpu --fsdp --json >"$W/fsdp.json" 2>"$W/fsdp.err" \
    || fail "--fsdp $plan: $(cat "$W/fsdp.err")"
  same_json "$W/one.json" "$W/fsdp.json" || fail "--fsdp $plan differs from the unsharded replay"
  grep -q "fsdp: [1-9][0-9]* parameters gathered" "$W/fsdp.err" || fail "no fsdp line: $(cat "$W/fsdp.err")"
done
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --fsdp-master-dtype bf16 --ref rollout --json >"$W/one.json" || fail "bf16 masters"
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --fsdp-master-dtype bf16 --ref rollout --devices cpu,cpu --fsdp --json >"$W/fsdp.json" 2>/dev/null || fail "bf16 masters fsdp"
same_json "$W/one.json" "$W/fsdp.json" || fail "--fsdp with bf16 masters differs"
echo "multi_cpu: --fsdp equals the unsharded replay"

# -o: the result traces hold the same per-step output and metrics
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout -o "$W/r1.h5" --json >/dev/null || fail "-o one"
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout -o "$W/r3.h5" --devices cpu,cpu,cpu --json >/dev/null 2>&1 || fail "-o multi"
"$D" compare "$W/r1.h5" "$W/r3.h5" --json >"$W/cmp.json" || fail "compare results"
"$PY" - "$W/cmp.json" <<'PY' || fail "result traces differ"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["steps"] == [0, 1, 2, 3, 4], d["steps"]
out = [s for s in d["sites"] if s["site"] == "output:noise_pred"]
assert out and out[0]["steps"] == 5 and out[0]["steps_bitwise_equal"] == 5, out
PY
"$D" ls "$W/r3.h5" | grep -q "metrics .* rows" || fail "no metrics rows in the multi-device result"
[ "$("$D" ls "$W/r1.h5" | grep metrics)" = "$("$D" ls "$W/r3.h5" | grep metrics)" ] || fail "metric row counts differ"

# bisect: probes on two devices at once, same answer
"$D" bisect "$W/t.h5" --good "$B/good.json" --bad "$B/bad16.json" --json >"$W/b1.json" || fail "bisect one"
"$D" bisect "$W/t.h5" --good "$B/good.json" --bad "$B/bad16.json" --devices cpu,cpu --json >"$W/b2.json" 2>"$W/b2.log" || fail "bisect devices"
"$PY" - "$W/b1.json" "$W/b2.json" <<'PY' || fail "bisect --devices found other culprits"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda d: [[c["name"] for c in s] for s in d["culprit_sets"]]
assert key(a) == key(b) and key(a), (key(a), key(b))
assert b["max_concurrent_probes"] == 2, b["max_concurrent_probes"]
PY
grep -q "probe [0-9]* on cpu\[slot 1\] started" "$W/b2.log" || fail "probe log does not name slot 1: $(head -3 "$W/b2.log")"
# (whether two probes' runs overlap in time is the scheduler's: on a loaded machine one may end
# before the other starts; the dispatch of two at once is max_concurrent_probes above)

# bad usage: exit 2 with a message
u() { "$D" replay "$W/t.h5" --plan "$P/wan2_2.json" "$@" >/dev/null 2>"$W/u.err"; echo $?; }
[ "$(u --fsdp)" = 2 ] && grep -q -- "--fsdp" "$W/u.err" || fail "--fsdp without --devices"
[ "$(u --devices '')" = 2 ] || fail "--devices ''"
[ "$(u --devices cpu,,cpu)" = 2 ] && grep -q "empty item" "$W/u.err" || fail "--devices with an empty item"
[ "$(u --device cpu --devices cpu,cpu)" = 2 ] || fail "--device with --devices"
[ "$(u --devices cuda:0,cpu)" = 2 ] && grep -q "mix" "$W/u.err" || fail "mixed devices"
[ "$(u --devices cpu,nonesuch)" = 2 ] && grep -q "worker 1" "$W/u.err" || fail "a bad device: $(cat "$W/u.err")"
"$D" replay --help | grep -q -- "--devices" || fail "--help lacks --devices"
"$D" bisect --help | grep -q -- "--devices" || fail "bisect --help lacks --devices"
echo "multi_cpu: all checks passed"
