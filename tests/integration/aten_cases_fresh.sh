#!/usr/bin/env bash
# The committed ATen parity cases (tests/data/parity/aten_cases.jsonl) are what
# their generator (tests/parity/aten_cases.py) writes: a case edited in one
# and not the other fails here, with the command that regenerates the file.
set -euo pipefail
: "${DRIFT_SRC:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
out="$DRIFT_TMP/aten_cases.jsonl"
"$PY" "$DRIFT_SRC/tests/parity/aten_cases.py" >"$out"
if ! cmp -s "$out" "$DRIFT_SRC/tests/data/parity/aten_cases.jsonl"; then
  echo "FAIL: tests/data/parity/aten_cases.jsonl is not what tests/parity/aten_cases.py writes; regenerate it:" >&2
  echo "  python3 tests/parity/aten_cases.py > tests/data/parity/aten_cases.jsonl" >&2
  diff <(cut -c1-200 "$out") <(cut -c1-200 "$DRIFT_SRC/tests/data/parity/aten_cases.jsonl") | head -n 10 >&2 || true
  exit 1
fi
echo "PASS: $(wc -l <"$out") cases, as generated"
