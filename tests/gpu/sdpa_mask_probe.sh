#!/usr/bin/env bash
# Masked SDPA under torch 2.11 on the GPU machine (issue 31): which backend torch picks
# for the masked attention shapes of the zoo models that are not bitwise (Ernie-Image,
# Lumina-Next, plain_mmdit, HunyuanVideo-1.5), whether its output equals each backend
# forced alone, and cuDNN's API log plus cudnn-frontend's graph log of one masked call,
# so that drift's cuDNN graph with a bias can be built as torch's is.
#   OUT=$OUT bash tests/gpu/sdpa_mask_probe.sh
# Output: $OUT/sdpa_mask_probe.txt, $OUT/sdpa_mask_cudnn_logs.tgz (raw logs, gzipped).
set -u
OUT="${OUT:?set OUT}"; mkdir -p "$OUT"
L=/tmp/sdpa_mask_logs; rm -rf "$L"; mkdir -p "$L"
PY="${PY:-python3}"
cat > "$L/probe.py" <<'PY'
import sys, torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.manual_seed(0)
BF = torch.bfloat16
# name: (B, H, Sq, Sk, D, mask shape, mask kind)
CASES = {
    "ernie":  (1, 1, 272, 272, 16, (1, 1, 1, 272), "ones"),
    "lumina": (2, 3, 64, 16, 8, (2, 3, 64, 16), "ones"),
    "mmdit":  (1, 4, 76, 76, 16, (1, 1, 1, 76), "tail"),
    "hy15":   (1, 2, 77, 77, 8, (1, 1, 77, 77), "tail"),
    "d64":    (1, 2, 272, 272, 64, (1, 1, 1, 272), "tail"),
}
names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable", -1: "error"}
only = sys.argv[1] if len(sys.argv) > 1 else None
for nm, (B, H, Sq, Sk, D, ms, kind) in CASES.items():
    if only and nm != only:
        continue
    q = torch.randn(B, H, Sq, D, device="cuda", dtype=BF)
    k = torch.randn(B, H, Sk, D, device="cuda", dtype=BF)
    v = torch.randn(B, H, Sk, D, device="cuda", dtype=BF)
    m = torch.ones(ms, device="cuda", dtype=torch.bool)
    if kind == "tail":
        m[..., -5:] = False
    ch = torch._fused_sdp_choice(q, k, v, m)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    fm = torch.where(m, 0.0, -65504.0).to(BF)
    row = ["SDPA %s choice=%s" % (nm, names.get(ch, ch))]
    row.append("float_mask_same=%s" % torch.equal(ref, F.scaled_dot_product_attention(q, k, v, attn_mask=fm)))
    row.append("nomask_same=%s" % torch.equal(ref, F.scaled_dot_product_attention(q, k, v)))
    for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([be]):
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            row.append("%s=%s" % (be.name.lower(), "same" if torch.equal(o, ref) else "differs(%d)" % int((o != ref).sum())))
        except Exception as e:
            row.append("%s=refused(%s)" % (be.name.lower(), str(e).split("\n")[0][:80]))
    print(" ".join(row), flush=True)
PY
"$PY" "$L/probe.py" > "$OUT/sdpa_mask_probe.txt" 2>&1
# one masked call per shape family with the logs on
for c in ernie d64; do
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$L/cudnn_api_$c.log" CUDNN_FRONTEND_LOG_INFO=1 \
    CUDNN_FRONTEND_LOG_FILE="$L/cudnn_frontend_$c.log" timeout 60 "$PY" "$L/probe.py" $c >> "$L/logged_runs.txt" 2>&1
done
for f in "$L"/*.log; do echo "$(basename "$f"): $(wc -l < "$f") lines" >> "$OUT/sdpa_mask_probe.txt"; done
(cd /tmp && tar czf "$OUT/sdpa_mask_cudnn_logs.tgz" sdpa_mask_logs)
cat "$OUT/sdpa_mask_probe.txt"
