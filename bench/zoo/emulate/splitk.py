"""Split-K forms of a bf16 GEMM (A [..., M, K] @ B [..., K, N], fp64 operands holding bf16
values): splitk(A, B, S, mode) with S equal chunks, chunked(A, B, C, mode) with chunks of C;
mode B: the output accumulated in place in bf16 (bias_first: the bias in the first chunk),
A: each chunk rounded to bf16 and the chunks summed in fp32, F: fp32 partials, the sum
rounded, then the bias added and rounded again (cuBLASLt's split-K reduction with a bias)."""
import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_emulate import *
def splitk(A, B, s, mode, o='bfloat16', bias=None):
    # A [..., M, K] B [..., K, N], fp64 exact chunks
    K = A.shape[-1]; ks = K // s
    parts = [A[..., i*ks:(i+1)*ks] @ B[..., i*ks:(i+1)*ks, :] for i in range(s)]
    if mode == 'B':
        acc = None
        for i, p in enumerate(parts):
            base = (bias if bias is not None else 0) if i == 0 else acc
            acc = rnd((p + base).astype(np.float32), o).astype(np.float64)
        return rnd(acc.astype(np.float32), o)
    if mode == 'A':
        pa = sum(rnd(p.astype(np.float32), o).astype(np.float64) for p in parts)
        return rnd((pa + (bias if bias is not None else 0)).astype(np.float32), o)
    if mode == 'T':  # pairwise tree over bf16 partials
        ps = [rnd(p.astype(np.float32), o).astype(np.float64) for p in parts]
        while len(ps) > 1:
            ps = [rnd((ps[i] + ps[i+1]).astype(np.float32), o).astype(np.float64) for i in range(0, len(ps), 2)]
        return ps[0]

def chunked(A, B, c, mode, o='bfloat16', bias=None, bias_first=True):
    K = A.shape[-1]
    parts = [A[..., i:i+c] @ B[..., i:i+c, :] for i in range(0, K, c)]
    if mode == 'B':
        acc = None
        for i, p in enumerate(parts):
            base = ((bias if (bias is not None and bias_first) else 0) if i == 0 else acc)
            acc = rnd((p + base).astype(np.float32), o).astype(np.float64)
        if bias is not None and not bias_first: acc = rnd((acc + bias).astype(np.float32), o).astype(np.float64)
        return rnd(acc.astype(np.float32), o)
    if mode == 'A':
        pa = sum(rnd(p.astype(np.float32), o).astype(np.float64) for p in parts)
        return rnd((pa + (bias if bias is not None else 0)).astype(np.float32), o)
    if mode == 'F':  # fp32 partials, rounded sum, then bias after rounding
        pa = sum(p.astype(np.float32).astype(np.float64) for p in parts)
        r = rnd(pa.astype(np.float32), o).astype(np.float64)
        return rnd((r + (bias if bias is not None else 0)).astype(np.float32), o)
