#!/usr/bin/env bash
# drift report (issue 17): on the demo (trace pair + bisect JSON) and on a
# replay result, one self-contained HTML file: no script, no external
# reference; the page names the first divergent site of every step (equal to
# drift compare's), the heatmap has exactly one cell per (site, step) with
# one framed cell per divergent step; headless Chromium parses and renders
# it (the screenshot is a non-blank PNG). An existing -o is kept without
# --force (exit 2); a file that is neither a pair nor a replay result nor a
# bisect document is exit 2.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/report_html"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
"$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$D/trainer_plan.json" --all --json \
    >"$T/bisect.json" 2>/dev/null || fail "bisect --json"
"$DRIFT_BIN" report "$D/demo.h5" --against "$D/demo.rollout.h5" --bisect "$T/bisect.json" -o "$T/pair.html" \
    2>"$T/report.err" || fail "report: $(cat "$T/report.err")"
"$DRIFT_BIN" compare "$D/demo.h5" "$D/demo.rollout.h5" --json >"$T/compare.json"
"$DRIFT_BIN" replay "$D/demo.h5" --plan "$D/trainer_plan.json" --ref rollout -o "$T/replay.h5" >/dev/null 2>&1 ||
    fail "replay -o"
"$DRIFT_BIN" report "$T/replay.h5" -o "$T/replay.html" 2>/dev/null || fail "report of a replay result"
"$DRIFT_BIN" replay "$D/demo.h5" --plan "$D/trainer_plan.json" --ref rollout --json >"$T/replay.json" 2>/dev/null

check() { # check HTML REFERENCE_JSON: structure of the page against drift's own JSON
    "$PY" - "$1" "$2" <<'EOF'
import json, re, sys
from html.parser import HTMLParser
html, ref = open(sys.argv[1], encoding="utf-8").read(), json.load(open(sys.argv[2]))
class P(HTMLParser):
    def __init__(s):
        super().__init__(); s.cells = []; s.first = []; s.tags = []; s.in_site = False; s.fd = []; s.row_step = None
    def handle_starttag(s, tag, attrs):
        a = dict(attrs); s.tags.append((tag, a))
        cls = (a.get("class") or "").split()
        if tag == "rect" and "cell" in cls:
            s.cells.append((a["data-site"], int(a["data-step"])))
            if "first" in cls: s.first.append((a["data-site"], int(a["data-step"])))
        if tag == "tr" and "firststep" in cls: s.row_step = int(a["data-step"])
        if tag == "td" and "site" in cls: s.in_site = True
    def handle_endtag(s, tag):
        if tag == "td": s.in_site = False
    def handle_data(s, d):
        if s.in_site: s.fd.append((s.row_step, d))
p = P(); p.feed(html)
# self-contained: no script, nothing loaded from elsewhere
assert not any(t == "script" for t, _ in p.tags), "a <script> in the page"
for t, a in p.tags:
    for k in ("src", "href"):
        assert k not in a or a[k].startswith("#"), (t, a)
assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html
steps = ref["steps"]
fd = {f["step"]: f["site"] for f in ref["first_divergent"]}
sites = [s["site"] for s in ref["sites"]]
# one cell per (site, step), no duplicates
assert len(p.cells) == len(set(p.cells)) == len(sites) * len(steps), (len(p.cells), len(sites), len(steps))
assert set(p.cells) == {(s, t) for s in sites for t in steps}
# the first divergent site of every step, named in the table and framed in the heatmap
assert dict(p.fd) == {t: (fd[t] or "none (bitwise equal)") for t in steps}, (p.fd, fd)
assert sorted(p.first) == sorted((fd[t], t) for t in steps if fd[t]), p.first
print("ok", len(p.cells), "cells,", len(steps), "steps, first divergent", sorted(set(fd.values())))
EOF
}
check "$T/pair.html" "$T/compare.json" || fail "the pair report"
check "$T/replay.html" "$T/replay.json" || fail "the replay-result report"
grep -q 'id="curve-logprob"' "$T/pair.html" || fail "the log-prob curve"
grep -q 'class="plans"' "$T/pair.html" && grep -q '<tr class="diff"><td>param_dtype_patterns\[\*.norm2.\*\]' "$T/pair.html" ||
    fail "the plans side by side, the norm2 pattern marked as a difference"
# ' is written &#39; (formats/html_escape.c)
grep -qF "<tr class=\"culprit\"><td>1</td><td>param_dtype_patterns[&#39;*.norm2.*&#39;]</td>" "$T/pair.html" ||
    fail "the bisect culprit"
# an existing -o is kept; bad inputs are exit 2
set +e
"$DRIFT_BIN" report "$D/demo.h5" --against "$D/demo.rollout.h5" -o "$T/pair.html" 2>/dev/null; rc1=$?
"$DRIFT_BIN" report "$D/demo.rollout.h5" -o "$T/x.html" 2>"$T/x.err"; rc2=$?
echo '{"a": 1}' >"$T/notbisect.json"
"$DRIFT_BIN" report "$T/notbisect.json" -o "$T/y.html" 2>/dev/null; rc3=$?
set -e
[ $rc1 = 2 ] || fail "an existing -o without --force is exit 2 (got $rc1)"
[ $rc2 = 2 ] && grep -q "no /metrics rows" "$T/x.err" || fail "a trace without /metrics alone is exit 2 ($rc2)"
[ $rc3 = 2 ] || fail "a JSON that is not a bisect result is exit 2 ($rc3)"
[ ! -e "$T/x.html" ] && [ ! -e "$T/y.html" ] || fail "a failed report leaves no file"
"$DRIFT_BIN" report "$D/demo.h5" --against "$D/demo.rollout.h5" -o "$T/pair.html" --force 2>/dev/null ||
    fail "--force replaces"

# headless Chromium: the page parses and renders
CHROME="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$CHROME" ] || { echo "SKIP: chromium not installed (scripts/setup.sh installs it); structure checks passed"; exit 77; }
export HOME="$T/home"; mkdir -p "$HOME"
timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$T/profile" \
    --dump-dom "file://$T/pair.html" >"$T/dom.html" 2>"$T/chrome_dom.err" || fail "chromium --dump-dom: $(tail -3 "$T/chrome_dom.err")"
grep -q 'id="heatmap"' "$T/dom.html" || fail "chromium's DOM lacks the heatmap"
timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$T/profile" \
    --screenshot="$T/shot.png" --window-size=1200,1600 "file://$T/pair.html" >/dev/null 2>"$T/chrome.err" ||
    fail "chromium --screenshot: $(tail -3 "$T/chrome.err")"
"$PY" - "$T/shot.png" <<'EOF' || fail "the screenshot"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", b[16:24])
assert (w, h) == (1200, 1600), (w, h)
i, idat = 8, b""
while i < len(b):
    n, t = struct.unpack(">I4s", b[i:i + 8]); i += 8
    if t == b"IDAT": idat += b[i:i + n]
    i += n + 4
raw = zlib.decompress(idat)
# rendered content: many distinct byte values (a blank page has a handful)
assert len(set(raw)) > 64, "the screenshot looks blank"
print("ok screenshot", w, "x", h, len(set(raw)), "distinct bytes")
EOF
echo "ok: drift report renders in headless Chromium; one cell per (site, step); first divergence per step named"
