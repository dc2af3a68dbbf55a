#!/usr/bin/env bash
# drift report as a user reads it (issue 35), checked on the DOM headless
# Chromium builds from the page: the bisect section's noise floor is the
# JSON's (not "0"); drift's version, the command line, the date and both
# traces' run ids are on the page; a report of a bisect document alone names
# the trace (not "0 sites, 0 steps"); the fix is a -/+ diff against the bad
# plan and the fixed plan is indented over many wrapped lines; an empty list
# and an absent one are no plan difference; the heatmap takes the page's
# width (steps wider than the old 16 px); the site table has worst element
# and max ULP columns, a large ULP in powers of ten.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/report_page"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
CHROME="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$CHROME" ] || { echo "SKIP: chromium not installed (scripts/setup.sh installs it)"; exit 77; }
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
(cd "$T" && "$DRIFT_BIN" bisect demo/demo.h5 --good demo/rollout_plan.json --bad demo/trainer_plan.json --all \
    --json --fix-out fix.json >bisect.json 2>/dev/null) || fail "bisect --json"
(cd "$T" && "$DRIFT_BIN" report demo/demo.h5 --against demo/demo.rollout.h5 --bisect bisect.json -o pair.html) \
    2>"$T/report.err" || fail "report: $(cat "$T/report.err")"
(cd "$T" && "$DRIFT_BIN" report bisect.json -o alone.html) 2>"$T/alone.err" || fail "report of a bisect alone"
export HOME="$T/home"; mkdir -p "$HOME"
dom() { timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --user-data-dir="$T/profile" \
    --dump-dom "file://$T/$1" >"$T/$1.dom" 2>"$T/chrome.err" || fail "chromium --dump-dom $1: $(tail -3 "$T/chrome.err")"; }
dom pair.html
dom alone.html
VERSION="$("$DRIFT_BIN" --version | awk '{print $2}')"
"$PY" - "$T" "$VERSION" <<'EOF'
import json, re, sys
from html.parser import HTMLParser
T, version = sys.argv[1], sys.argv[2]
bis = json.load(open(f"{T}/bisect.json"))

class P(HTMLParser):
    """text per element class, the provenance rows, the heatmap's svg and cells"""
    def __init__(s):
        super().__init__(); s.stack = []; s.text = {}; s.prov = {}; s.th = None; s.svg = None; s.cells = []
        s.heads = []; s.plans = []; s.row = None; s.in_plans = False
    def handle_starttag(s, tag, attrs):
        a = dict(attrs); s.stack.append((tag, a))
        if tag == "svg" and a.get("id") == "heatmap": s.svg = a
        if tag == "rect" and "cell" in (a.get("class") or "").split(): s.cells.append(a)
        if tag == "table" and a.get("class") == "plans": s.in_plans = True
        if tag == "tr" and s.in_plans: s.row = []
    def handle_endtag(s, tag):
        if tag == "table": s.in_plans = False
        if tag == "tr" and s.row is not None: s.plans.append(s.row); s.row = None
        while s.stack and s.stack.pop()[0] != tag: pass
    def handle_data(s, d):
        tags = [t for t, _ in s.stack]
        for t, a in s.stack:
            for c in (a.get("class") or "").split(): s.text[c] = s.text.get(c, "") + d
            if t == "p" and "p" not in s.text: s.text["p1"] = s.text.get("p1", "") + d
        if tags and tags[-1] == "th":
            s.th = d; s.heads.append(d)
        if "td" in tags and s.th is not None and any(a.get("class") == "prov" for _, a in s.stack):
            s.prov[s.th] = s.prov.get(s.th, "") + d
        if s.row is not None and "td" in tags: s.row.append(d)

def parse(name):
    p = P(); p.feed(open(f"{T}/{name}.dom", encoding="utf-8").read()); return p, open(f"{T}/{name}.dom", encoding="utf-8").read()

p, html = parse("pair.html")
bad = []
def check(cond, what):
    if not cond: bad.append(what)
# the bisect section: the JSON's noise floor (2.825e-03), not "noise floor 0."
floor = "%.3e" % bis["noise_floor"]
check(f"noise floor {floor}." in html, f"bisect noise floor: expected 'noise floor {floor}.'")
# provenance
check(p.prov.get("drift version") == version, f"drift version on the page: {p.prov.get('drift version')!r}")
check(p.prov.get("command line", "").startswith("drift report demo/demo.h5 --against"), f"command line: {p.prov.get('command line')!r}")
check(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", p.prov.get("date (UTC)", "")), f"date: {p.prov.get('date (UTC)')!r}")
check(p.prov.get("run id (candidate)") and p.prov.get("run id (reference)"), f"both run ids: {p.prov}")
# the fix: a diff against the bad plan, and the fixed plan over many lines that wrap
fd = p.text.get("fixdiff", "")
check("--- bad plan" in fd and "- param_dtype_patterns['*.norm2.*']: fp32" in fd and
      "+ param_dtype_patterns['*.norm2.*']: absent" in fd, f"fix diff: {fd!r}")
fp = p.text.get("fixplan", "")
check(fp.count("\n") >= 8 and '\n  "name": ' in fp, f"the fixed plan pretty-printed: {fp[:200]!r}")
check("white-space:pre-wrap" in html, "pre wraps")
# absent vs empty list: no false difference
check(not any(r[1:] in (["(absent)", "[]"], ["[]", "(absent)"]) for r in p.plans), f"absent vs []: {p.plans}")
# the heatmap takes the page's width
vb = [float(x) for x in (p.svg or {}).get("viewbox", (p.svg or {}).get("viewBox", "0 0 0 0")).split()]
check(p.svg and p.svg.get("width") == "100%" and vb[2] >= 1000, f"heatmap width: {p.svg}")
check(p.cells and min(int(c["width"]) for c in p.cells) > 16, "heatmap cells wider than 16 px for 4 steps")
# the site table: worst element, max ULP (readable)
check("worst element (step, flat index)" in p.heads and "max ULP" in p.heads, f"site table heads: {p.heads[-12:]}")
ulps = re.findall(r'class="num ulp">([^<]*)<', html)
check(ulps and not any(re.search(r"\d{7}", u) for u in ulps), f"max ULP readable: {ulps}")
# a bisect document alone: names the trace
q, alone = parse("alone.html")
check("0 sites, 0 steps" not in alone and "bisect of trace demo/demo.h5" in re.sub("<[^>]+>", "", alone),
      "a bisect alone names its trace")
check("the bisect of demo/demo.h5" in open(f"{T}/alone.err").read(), "report's message names the bisect's trace")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF
echo "ok: the report page (noise floor, provenance, fix diff, plans, heatmap width, columns) in headless Chromium"
