#!/usr/bin/env bash
# drift replay under mpirun on the CPU backend: every rank replays its share
# of the steps, partial sums reduced through MPI_Allreduce, rank 0 prints
# the report (identical to the single-process one) and writes -o.
# Skips (77) without mpirun or without an MPI build of drift.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/multi_mpi_cpu"; rm -rf "$W"; mkdir -p "$W"
P="$T/plans"
fail() { echo "FAIL: $*"; exit 1; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found (install openmpi-bin)"; exit 77; }
MPI=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
# OpenMPI in containers: no shared-memory segment in /dev/shm worth trusting, no network needed
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# In the sanitizer build: OpenMPI (and its plugins, unloaded at MPI_Finalize,
# so their frames are "<unknown module>") leaves allocations LeakSanitizer
# reports; drift's own paths are leak-checked by multi_cpu.sh (same code, no MPI).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
"$D" replay --mpi "$W/none.h5" --plan "$P/wan2_2.json" >/dev/null 2>"$W/probe.err"
grep -q "has no MPI" "$W/probe.err" && { echo "SKIP: this drift was built without MPI"; exit 77; }

"$D" record --synthetic tiny-dit --steps 5 --trainer-plan "$P/wan2_2.json" \
  --rollout-plan "$P/wan2_2_no_norm2.json" -o "$W/t.h5" >/dev/null 2>&1 || fail "record"

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

for ref in rollout oracle; do
  "$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref "$ref" --device cpu --json >"$W/one.json" || fail "replay $ref"
  for n in 2 3; do
    "${MPI[@]}" -n $n "$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref "$ref" --device cpu --json \
      >"$W/mpi.json" 2>"$W/mpi.err" || fail "mpirun -n $n ($ref): $(tail -5 "$W/mpi.err")"
    same_json "$W/one.json" "$W/mpi.json" || fail "mpirun -n $n --ref $ref differs from the single process"
    grep -q "on $n ranks .*reduced through mpi" "$W/mpi.err" || fail "summary line: $(cat "$W/mpi.err")"
    echo "multi_mpi_cpu: mpirun -n $n --ref $ref equals the single-process replay"
  done
done

# -o from rank 0, and --fsdp over ranks
"$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout -o "$W/r1.h5" --json >"$W/one.json" || fail "-o one"
"${MPI[@]}" -n 2 "$D" replay "$W/t.h5" --plan "$P/wan2_2.json" --ref rollout --device cpu --fsdp -o "$W/r2.h5" --json \
  >"$W/mpi.json" 2>"$W/mpi.err" || fail "mpirun --fsdp -o: $(tail -5 "$W/mpi.err")"
same_json "$W/one.json" "$W/mpi.json" || fail "mpirun --fsdp differs"
"$D" compare "$W/r1.h5" "$W/r2.h5" --json >"$W/cmp.json" || fail "compare results"
"$PY" - "$W/cmp.json" <<'PY' || fail "result traces differ"
import json, sys
d = json.load(open(sys.argv[1]))
out = [s for s in d["sites"] if s["site"] == "output:noise_pred"]
assert out and out[0]["steps"] == 5 and out[0]["steps_bitwise_equal"] == 5, out
PY
echo "multi_mpi_cpu: all checks passed"
