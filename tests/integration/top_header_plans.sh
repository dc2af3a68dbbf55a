#!/usr/bin/env bash
# drift top as a user reads it (issue 35), in tmux at 80x24 and 160x45, on a
# pair whose rollout plan has 6 patterns and whose trainer plan differs only
# in blocks.7: the header shows both plans with their patterns (B's line:
# "B plan rollout_six ... 6 patterns: blocks.0.*=bf16"), the plan's
# sglang_dit_precision labelled "sglang" (not "rollout"); at 80x24 `p` shows
# the per-step chart (the PPO signal) and hides it again; a name longer than
# its column is cut in the middle ("blocks.7.a…" with its end kept); the
# first divergent row (blocks.7.attn1:out) has the layers after it below it,
# not on the table's last line.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
command -v tmux >/dev/null || { echo "SKIP: tmux not installed"; exit 77; }
T="$DRIFT_TMP/top_header_plans"
rm -rf "$T" && mkdir -p "$T"
SOCK="drift-plans-$$"
. "$(dirname "$0")/lib/tmux_top.bash"
WAIT_TENTHS=300
trap 'tm kill-server 2>/dev/null || true' EXIT
cat >"$T/tp.json" <<'EOF2'
{"name": "trainer_b7", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "bf16",
 "sglang_dit_precision": "bf16", "param_dtype_patterns": [["blocks.7.*", "fp32"]]}
EOF2
cat >"$T/rp.json" <<'EOF2'
{"name": "rollout_six", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "bf16",
 "sglang_dit_precision": "bf16", "param_dtype_patterns": [["blocks.0.*", "bf16"], ["blocks.1.*", "bf16"],
 ["blocks.2.*", "bf16"], ["blocks.3.*", "bf16"], ["blocks.4.*", "bf16"], ["blocks.5.*", "bf16"]]}
EOF2
"$DRIFT_BIN" record --synthetic wan2.2:layers=8,dim=64,heads=4,frames=1,height=8,width=8,text_len=8 --steps 3 \
    --trainer-plan "$T/tp.json" --rollout-plan "$T/rp.json" -o "$T/run.h5" >/dev/null 2>"$T/record.err" ||
    { cat "$T/record.err"; exit 1; }
tm new-session -d -s top -x 80 -y 24 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT_BIN' top '$T/run.h5' --against '$T/run.rollout.h5' 2>'$T/stderr'; sleep 600"
wait_for "the first divergent layer" screen_re "first divergent blocks\.7\.attn1:out"
cp "$T/screen.txt" "$T/s80.txt"
screen_re "^A plan trainer_b7: fwd bf16  sglang bf16 " || fail "A's plan line (sglang, not rollout) at 80x24"
screen_re "^B plan rollout_six: fwd bf16  sglang bf16 " || fail "B's plan line at 80x24"
if grep -q "rollout bf16" "$T/screen.txt"; then fail "the plan's sglang_dit_precision labelled 'rollout'"; fi
# the first divergent row: the layers after it are on screen below it
rows_below() { # rows of the table under the marked row, before the footer / chart title
    awk '/▶/ {m=1; next} m && /^  [a-z]/ {n++} m && !/^  [a-z]/ {exit} END {print n+0}' "$T/screen.txt"
}
below=$(rows_below)
[ "$below" -ge 4 ] || fail "the first divergent row has $below rows below it at 80x24 (want >= 4: its context)"
grep -qE "^  blocks\.7\.attn1\.[a-z_]|^  blocks\.7\.(norm2|attn2|ffn)" "$T/screen.txt" ||
    grep -qE "^  blocks\.7\." <(awk '/▶/ {m=1; next} m' "$T/screen.txt") || fail "no blocks.7 layer after the first divergent row"
# the chart: hidden at 80x24 by default, p shows it, p hides it again
if screen_has "per step"; then fail "the chart shown at 80x24 before p (the table keeps the lines)"; fi
tm send-keys -t top p
wait_for "the per-step chart after p at 80x24" screen_has "log_prob |diff|"
tm send-keys -t top p
wait_for "the chart hidden again by p" bash -c "! { tmux -L '$SOCK' -f /dev/null capture-pane -p -t top | grep -qF 'log_prob |diff|'; }"
# 160x45: both plans, B's patterns listed
tm resize-window -t top -x 160 -y 45
wait_for "the 160x45 screen" screen_re "6 patterns: blocks\.0\.\*=bf16, blocks\.1\.\*=bf16"
screen_re "^A plan trainer_b7: .*1 pattern: blocks\.7\.\*=fp32" || fail "A's patterns at 160x45"
# a resize keeps the first divergent row's context
tm resize-window -t top -x 80 -y 24
small_with_context() { # the 24-row screen drawn, the marked row with >= 4 rows below
    cap && [ "$(wc -l <"$T/screen.txt")" -le 24 ] && screen_has "B plan rollout_six" && [ "$(rows_below)" -ge 4 ]
}
wait_for "80x24 again, the first divergent row with rows below it" small_with_context
# names cut in the middle: at 40 columns the name column is 18 cells
tm resize-window -t top -x 40 -y 24
tm send-keys -t top / condition_embedder Enter
wait_for "a name cut in the middle" screen_re "condition…[a-z_]*:out"
echo "ok: drift top shows both plans, p toggles the chart at 80x24, names cut in the middle, the first divergence with context"
