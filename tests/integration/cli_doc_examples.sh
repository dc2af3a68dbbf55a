#!/usr/bin/env bash
# Every example of docs/cli.md is what the binary prints (issue 22: the
# progress example had drifted from the binary). Each example is read from
# the page itself (an inline code span, or a fenced block, located by its
# opening words), then looked for in what the command prints: error
# messages verbatim (the page's example is a substring of the stderr line;
# the --json error document compared as JSON), the timing-dependent
# examples (progress, bisect's probe lines, the worst element) as patterns in
# which every number of the page's example matches any number.
# progress_tty.sh checks the progress example on a terminal the same way.
# The "another process has the file open" message is checked when h5py is
# there to hold the file open for writing.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/cli_doc_examples"
rm -rf "$T" && mkdir -p "$T"
DOC="$(cd "$(dirname "$0")/../.." && pwd)/docs/cli.md"
PLANS="$(cd "$(dirname "$0")/../data/plans" && pwd)"
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$T" # the page's examples name run.h5, a.h5, b.h5, r1.h5 in the current folder
rec() { # rec OUT STEPS SPEC [ARGS...]
    local out="$1" steps="$2" spec="$3"; shift 3
    "$DRIFT_BIN" record --synthetic "$spec" --steps "$steps" --trainer-plan "$PLANS/wan2_2.json" \
        --rollout-plan "$PLANS/wan2_2_no_norm2.json" -o "$out" "$@" >/dev/null 2>"$T/rec.err" || fail "record $out: $(cat "$T/rec.err")"
}
rec run.h5 8 tiny-dit
rec a.h5 8 tiny-dit
rec b.h5 4 tiny-dit
rec r0.h5 2 tiny-dit --rank 0 --world-size 2
rec r1.h5 2 tiny-dit:layers=1 --rank 1 --world-size 2
out() { "$@" >"$T/stdout" 2>"$T/stderr" || true; }

# name | command | how: "sub" (the example is in stderr), "json" (stdout is the example's JSON), "pat" (numbers free)
out "$DRIFT_BIN" replay run.h5 --stpes 2;                  cp stderr e_unknown
out "$DRIFT_BIN" replay run.h5 --ref rolout;               cp stderr e_enum
out "$DRIFT_BIN" replay run.h5 --steps 2:5 --steps 3;      cp stderr e_twice
out "$DRIFT_BIN" record --synthetic tiny-dit --steps 2 --trainer-plan "$PLANS/wan2_2.json" --rollout-plan "$PLANS/wan2_2.json"
cp stderr e_missing
out "$DRIFT_BIN" replay run.h5 --steps 20:30 --json;       cp stdout e_json; cp stderr e_range
out "$DRIFT_BIN" record --synthetic tiny-dit --steps 2 --trainer-plan "$PLANS/wan2_2.json" --rollout-plan "$PLANS/wan2_2.json" -o run.h5
cp stderr e_exists
out "$DRIFT_BIN" replay a.h5 --ref b.h5;                   cp stderr e_mismatch
out "$DRIFT_BIN" merge r0.h5 r1.h5 -o idx.h5;              cp stderr e_merge
# a file another process holds open for writing (HDF5's file lock), when h5py is there to hold it
if "$PY" -c "import h5py" 2>/dev/null; then
    "$PY" - "$DRIFT_BIN" <<'EOF' >e_locked
import h5py, subprocess, sys
f = h5py.File("a.h5", "r+")
sys.stdout.write(subprocess.run([sys.argv[1], "ls", "a.h5"], capture_output=True, text=True).stderr)
f.close()
EOF
fi
"$DRIFT_BIN" replay run.h5 --ref rollout >"$T/replay.txt" 2>/dev/null || fail "replay run.h5 --ref rollout failed"
"$DRIFT_BIN" bisect run.h5 --good "$PLANS/wan2_2_no_norm2.json" --bad "$PLANS/wan2_2.json" --granularity param --all --threshold 0 \
    >"$T/bisect.txt" 2>"$T/bisect.err" || fail "bisect failed: $(tail -3 "$T/bisect.err")"

"$PY" - "$DOC" "$T" <<'EOF'
import json, re, sys
doc_path, T = sys.argv[1], sys.argv[2]
md = open(doc_path, encoding="utf-8").read()
fences = re.findall(r"```[a-z]*\n(.*?)```", md, re.S)
flat = re.sub(r"```.*?```", "", md, flags=re.S)
flat = re.sub(r"\s*\n\s*", " ", flat)            # an inline span may wrap across lines
spans = re.findall(r"`([^`]+)`", flat)
bad = []
def span(start):
    hits = [s for s in spans if s.startswith(start)]
    if len(hits) == 0: bad.append("docs/cli.md has no example starting %r (update this test with the page)" % start)
    return hits
def fence(start):
    hits = [f for f in fences if f.lstrip().startswith(start)]
    if not hits: bad.append("docs/cli.md has no block starting %r" % start)
    return hits[0] if hits else None
def read(name): return open(T + "/" + name, encoding="utf-8", errors="replace").read()
NUM = r"[-+]?[0-9][0-9.]*(?:e[-+]?[0-9]+)?"
def pattern(example):
    """the example as a regex: numbers free, runs of spaces free, '...' and '…' any text"""
    out, pos = [], 0
    for m in re.finditer(r"\s*(?:\.\.\.|\u2026)|[-+]?[0-9][0-9.]*(?:e[-+]?[0-9]+)?|\s+", example):
        out.append(re.escape(example[pos:m.start()]))
        t = m.group(0)
        out.append(r"\s+" if t.isspace() else (r".*" if t.strip() in ("...", "\u2026") else NUM))
        pos = m.end()
    out.append(re.escape(example[pos:]))
    return "".join(out)
checked = [0]
def sub(start, file, fix=lambda s: s):
    for ex in span(start):
        checked[0] += 1
        if fix(ex) not in read(file): bad.append("%s: the page says %r, the binary printed %r" % (file, fix(ex), read(file).strip()))
def pat(example, file):
    checked[0] += 1
    if not re.search(pattern(example), read(file)):
        bad.append("%s: no line like the page's %r; the binary printed:\n%s" % (file, example, read(file)[-1500:]))

sub("drift CMD: unknown option", "e_unknown", lambda s: s.replace("CMD", "replay"))
sub("--ref: expected trainer", "e_enum")
sub("--steps given twice", "e_twice")
sub("missing -o", "e_missing")
sub("--steps 20:30: out of range", "e_range")
sub("-o: run.h5 exists", "e_exists")
sub("--ref b.h5: has no committed step", "e_mismatch")
for ex in span('r1.h5:/: attribute "family" is'): pat(ex, "e_merge")
import os
if os.path.exists(T + "/e_locked"):
    for ex in span("another process has the file open"): pat(ex, "e_locked")
j = fence('{"error"')
if j is not None:
    want, got = json.loads(j), json.loads(read("e_json"))
    checked[0] += 1
    if want != got: bad.append("--json error: the page has %s, the binary printed %s" % (want, got))
b = fence("probe ")
if b is not None:
    for line in b.strip().split("\n"): pat(line, "bisect.err")
w = fence("worst element")
if w is not None:
    for line in w.strip().split("\n"): pat(line.strip(), "replay.txt")
for ex in span("drift replay: "):
    if "step" in ex and "ETA" in ex:
        sys.stderr.write("(the progress example %r is checked by progress_tty.sh)\n" % ex)
if bad:
    print("\n".join(bad)); sys.exit(1)
print("ok: %d examples of docs/cli.md match the binary" % checked[0])
EOF
