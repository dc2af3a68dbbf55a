#!/usr/bin/env bash
# docs/cli.md is the contract: every subcommand's --help (and drift help CMD)
# lists every option the command accepts, an exit line and an example, and
# matches the option lists of docs/cli.md "Per command"; every option a help
# names is accepted by the parser (no "unknown option").
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
W="${DRIFT_TMP:-$(mktemp -d)}/cli_contract"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }

"$D" --help >"$W/top.txt" || fail "drift --help exited $?"
cmds=$(awk '/^commands:/{f=1;next} f&&/^  [a-z]/{print $1} f&&/^$/{f=0}' "$W/top.txt")
[ -n "$cmds" ] || fail "drift --help lists no commands"
for c in $cmds; do
  sub=""; [ "$c" = plan ] && sub=compile
  "$D" $c $sub --help >"$W/$c.help" 2>"$W/$c.err"; rc=$?
  [ $rc -eq 0 ] || fail "drift $c $sub --help exited $rc"
  [ -s "$W/$c.help" ] || fail "drift $c --help printed nothing on stdout"
  "$D" help $c $sub >"$W/$c.help2" 2>/dev/null || fail "drift help $c $sub exited $?"
  cmp -s "$W/$c.help" "$W/$c.help2" || fail "drift help $c differs from drift $c --help"
done
# drift help of an unknown command: exit 2 with a did-you-mean
out=$("$D" help replya 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "did you mean 'replay'" || fail "drift help replya: rc $rc: $out"

"$PY" - "$W" "$SRC/docs/cli.md" $cmds <<'PY' || exit 1
import re, sys, subprocess, os
w, doc_path, cmds = sys.argv[1], sys.argv[2], sys.argv[3:]
D = os.environ["DRIFT_BIN"]
# commands still on their own parsers (owned elsewhere; docs/cli.md says so):
# their help must still have the exit and example lines, and the options on
# its option lines must be docs/cli.md's list
PENDING = {"top", "weights"}
PLAN_FLAGS = ["--fsdp-master-dtype", "--fsdp-reduce-dtype", "--diffusion-forward-dtype", "--sglang-dit-precision",
              "--param-dtype", "--input-dtype", "--rope-provenance", "--plan-name"]
doc = open(doc_path).read()
sections = {}
for m in re.finditer(r"^### `drift ([a-z ]+)`\n(.*?)(?=^### |\Z)", doc, re.S | re.M):
    opts = []
    for line in m.group(2).splitlines():
        if line.strip() == "- PLAN FLAGS":
            opts += PLAN_FLAGS
        mm = re.match(r"- `(?:-\w, )?(--[a-z0-9-]+)", line)
        if mm:
            opts.append(mm.group(1))
    sections[m.group(1).split()[0]] = opts
errors = []
for c in cmds:
    h = open(f"{w}/{c}.help").read()
    if not re.search(r"^exit: .*\b2\b", h, re.M):
        errors.append(f"{c}: --help has no 'exit:' line naming exit 2")
    if not re.search(rf"^example: drift {c}\b", h, re.M):
        errors.append(f"{c}: --help has no 'example: drift {c} ...' line")
    if c not in PENDING:
        m = re.search(r"^options:\n(.*?)(?:\n\n|\Z)", h, re.S | re.M)
        listed = re.findall(r"^  (?:-\w, )?(--[a-z0-9-]+)", m.group(1), re.M) if m else []
        if c not in sections:
            errors.append(f"{c}: no '### `drift {c}`' section in docs/cli.md")
        elif sorted(listed) != sorted(sections[c]):
            errors.append(f"{c}: --help options {sorted(set(listed) ^ set(sections[c]))} differ from docs/cli.md")
    else:
        # the options of a hand-written help: every --name on its option lines
        # (indented lines that start with '-'; prose may name other commands' options)
        opt_lines = [l for l in h.splitlines() if re.match(r"^ {2,}-", l)]
        listed = sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", "\n".join(opt_lines))) - {"--help"})
        if c not in sections:
            errors.append(f"{c}: no '### `drift {c}`' section in docs/cli.md")
        elif set(listed) != set(sections[c]):
            errors.append(f"{c}: --help options {sorted(set(listed) ^ set(sections[c]))} differ from docs/cli.md")
    # every option the help names must be accepted
    sub = ["compile"] if c == "plan" else []
    for o in listed:
        if o == "--help":
            continue
        r = subprocess.run([D, c] + sub + [o, "x"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, TERM="dumb"), stdin=subprocess.DEVNULL)
        if "unknown option" in r.stderr:
            errors.append(f"{c}: --help lists {o} but the parser refuses it: {r.stderr.strip()[:200]}")
for e in errors:
    print("FAIL:", e)
sys.exit(1 if errors else 0)
PY
echo "cli_contract: ok ($(echo $cmds | wc -w) commands)"
