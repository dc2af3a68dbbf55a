#!/usr/bin/env bash
# Issue 34 item 11: every string of a bisect JSON that `drift report` puts
# in the page goes through formats/html_escape.c: a crafted result with
# markup in every string field (metric, plans, culprits, paths) yields a page
# with no element or attribute of its own (no <script>, no onerror=).
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_html.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
"$PY" - "$W/b.json" <<'PY'
import json, sys
x = '<script>alert(1)</script><img src=x onerror="alert(2)">\'"&\x01'
e = {"name": x, "kind": x, "good": x, "bad": x, "metric_alone": 1.0, "floor_units": 2.0, "first_divergent": x}
doc = {"trace": x, "run_id": x, "family": x, "good": x, "bad": x, "metric": x, "granularity": x, "reference": x,
       "good_metric": 0.0, "bad_metric": 1.0, "noise_floor": 0.1, "threshold": 0.2,
       "diffs": [{"kind": x, "name": x, "good": x, "bad": x}],
       "culprit_sets": [[e]], "fix": {"path": x, "verified": False, "output_metric": 1.0, "good_output_metric": 0.5}}
json.dump(doc, open(sys.argv[1], "w"))
PY
timeout 60 "$D" report "$W/b.json" -o "$W/r.html" >/dev/null 2>"$W/err" || fail "report: $(cat "$W/err")"
grep -qi '<script' "$W/r.html" && fail "the page holds a <script> element: $(grep -io '.\{40\}<script.\{20\}' "$W/r.html" | head -2)"
grep -qi '<img' "$W/r.html" && fail "the page holds an <img> element from the input"
grep -q 'onerror="' "$W/r.html" && fail "the page holds an attribute from the input"
n=$(grep -o '&lt;script&gt;' "$W/r.html" | wc -l)
[ "$n" -ge 5 ] || fail "the crafted strings are not shown escaped ($n found)"
LC_ALL=C grep -q $'\x01' "$W/r.html" && fail "a control character reached the page"
echo "ok   report of a bisect JSON with markup in every string: $n escaped, no element or attribute of its own"
