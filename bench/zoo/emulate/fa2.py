"""FlashAttention-2 forward (sm80 kernel as torch 2.11 runs it for head dims that cuDNN refuses),
emulated in numpy: key blocks of BN in reverse order, exp2 with the scale folded (fmaf), per-thread
row sums over the quad's columns, quad allreduce at the end, acc * (1 / l)."""
import numpy as np, math
f32 = np.float32
def fma32(a, b, c):  # exactly rounded a*b+c in fp32 (float64 is exact for fp32*fp32, then one add rounding ~ ok)
    return (a.astype(np.float64) * b + c.astype(np.float64)).astype(np.float32)
def fa2(q, k, v, scale=None, BN=128, out_dtype=None, exp_fn=None, inv_mul=True, mma_chunk=16, reverse=True, fold=True, quad=True):
    # q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] (fp32 holding bf16 values)
    D = q.shape[-1]
    if scale is None: scale = 1.0 / math.sqrt(D)
    sl2 = f32(float(scale) * (1 / math.log(2)))   # M_LOG2E
    Lk = k.shape[-2]
    s_all = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)).astype(np.float32)
    nb = (Lk + BN - 1) // BN
    shp = s_all.shape[:-1]
    row_max = None
    rs = [None] * 4  # per quad lane row sums
    acc = np.zeros(shp + (v.shape[-1],), np.float32)
    e2 = exp_fn or (lambda x: np.exp2(x.astype(np.float64)).astype(np.float32))
    for bi, nbk in enumerate(range(nb - 1, -1, -1) if reverse else range(nb)):
        c0 = nbk * BN; c1 = min(Lk, c0 + BN)
        s = s_all[..., c0:c1]
        if bi == 0:
            row_max = s.max(-1, keepdims=True)
        else:
            prev = row_max
            row_max = np.maximum(prev, s.max(-1, keepdims=True))
            sc = e2(((prev - row_max).astype(np.float32) * sl2).astype(np.float32))
            for t in range(4): rs[t] = (rs[t] * sc).astype(np.float32)
            acc = (acc * sc).astype(np.float32)
        ms = (row_max * sl2).astype(np.float32)
        p = e2(fma32(s, sl2, -ms)) if fold else np.exp((s*f32(scale)).astype(np.float32) - (row_max*f32(scale)).astype(np.float32)).astype(np.float32)
        # per-thread sums: lane t holds cols 8j+2t, 8j+2t+1 of the block
        for t in range(4):
            cols = [c for j in range(BN // 8) for c in (8 * j + 2 * t, 8 * j + 2 * t + 1) if c < c1 - c0] if quad else (list(range(c1 - c0)) if t == 0 else [])
            ssum = rs[t] if bi > 0 else None
            for ci, c in enumerate(cols):
                x = p[..., c:c + 1]
                ssum = x.copy() if ssum is None else (ssum + x).astype(np.float32)
            if ssum is None: ssum = np.zeros(shp + (1,), np.float32)
            rs[t] = ssum
        pb = bf16(p)
        vb = v[..., c0:c1, :]
        # P V as k16 MMAs chained into acc
        for k0 in range(0, c1 - c0, mma_chunk):
            d = pb[..., k0:k0 + mma_chunk].astype(np.float64) @ vb[..., k0:k0 + mma_chunk, :].astype(np.float64)
            acc = (acc.astype(np.float64) + d).astype(np.float32)
    l = ((rs[0] + rs[2]).astype(np.float32) + (rs[1] + rs[3]).astype(np.float32)).astype(np.float32)
    if inv_mul:
        inv = (f32(1) / l).astype(np.float32)
        y = (acc * inv).astype(np.float32)
    else:
        y = (acc / l).astype(np.float32)
    return y
def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)

def _core(q, k, v, s_all, sl2, BN, c_lo, c_hi, e2, reverse=True):
    """one FA2 row-block pass over keys [c_lo, c_hi) in tiles of BN aligned at c_lo; returns (acc*inv, m, l)."""
    shp = s_all.shape[:-1]
    nb = (c_hi - c_lo + BN - 1) // BN
    rs = [None] * 4; row_max = None
    acc = np.zeros(shp + (v.shape[-1],), np.float32)
    order = range(nb - 1, -1, -1) if reverse else range(nb)
    for bi, nbk in enumerate(order):
        c0 = c_lo + nbk * BN; c1 = min(c_hi, c0 + BN)
        s = s_all[..., c0:c1]
        if bi == 0:
            row_max = s.max(-1, keepdims=True)
        else:
            prev = row_max
            row_max = np.maximum(prev, s.max(-1, keepdims=True))
            sc = e2(((prev - row_max).astype(np.float32) * sl2).astype(np.float32))
            for t in range(4): rs[t] = (rs[t] * sc).astype(np.float32)
            acc = (acc * sc).astype(np.float32)
        ms = (row_max * sl2).astype(np.float32)
        p = e2(fma32(s, sl2, -ms))
        for t in range(4):
            cols = [c for j in range(BN // 8) for c in (8 * j + 2 * t, 8 * j + 2 * t + 1) if c < c1 - c0]
            ssum = rs[t] if bi > 0 else None
            for c in cols:
                x = p[..., c:c + 1]
                ssum = x.copy() if ssum is None else (ssum + x).astype(np.float32)
            if ssum is None: ssum = np.zeros(shp + (1,), np.float32)
            rs[t] = ssum
        pb = bf16(p)
        vb = v[..., c0:c1, :]
        for k0 in range(0, c1 - c0, 16):
            d = pb[..., k0:k0 + 16].astype(np.float64) @ vb[..., k0:k0 + 16, :].astype(np.float64)
            acc = (acc.astype(np.float64) + d).astype(np.float32)
    l = ((rs[0] + rs[2]).astype(np.float32) + (rs[1] + rs[3]).astype(np.float32)).astype(np.float32)
    inv = (f32(1) / l).astype(np.float32)
    return (acc * inv).astype(np.float32), row_max, l

def fa2_split(q, k, v, splits, scale=None, BN=256):
    """FA2's split-KV kernel (flash-decoding) + combine: splits of ceil(nblocks/splits) key blocks of BN."""
    D = q.shape[-1]
    if scale is None: scale = 1.0 / math.sqrt(D)
    sl2 = f32(float(scale) * (1 / math.log(2)))
    e2 = lambda x: np.exp2(x.astype(np.float64)).astype(np.float32)
    Lk = k.shape[-2]
    s_all = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)).astype(np.float32)
    nb = (Lk + BN - 1) // BN
    nbps = (nb + splits - 1) // splits
    outs, lses = [], []
    for sp in range(splits):
        lo = sp * nbps * BN; hi = min(Lk, (sp + 1) * nbps * BN)
        if lo >= hi: continue
        o, m, l = _core(q, k, v, s_all, sl2, BN, lo, hi, e2)
        lse = (m * f32(scale)).astype(np.float32) + np.log(l.astype(np.float64)).astype(np.float32)
        outs.append(o); lses.append(lse.astype(np.float32))
    if len(outs) == 1: return outs[0]
    L = np.stack(lses)
    mx = L.max(0)
    ssum = np.zeros_like(mx)
    for x in lses: ssum = (ssum + np.exp((x - mx).astype(np.float64)).astype(np.float32)).astype(np.float32)
    lsum = (np.log(ssum.astype(np.float64)).astype(np.float32) + mx).astype(np.float32)
    out = np.zeros_like(outs[0])
    for o, x in zip(outs, lses):
        sc = np.exp((x - lsum).astype(np.float64)).astype(np.float32)
        out = (out + (sc * o).astype(np.float32)).astype(np.float32)
    return out

def fa2_auto(q, k, v, scale=None, sms=132):
    """torch 2.11's FA2 forward: num_splits from flash_api's heuristic (SMs x 2 'slots'), split-KV when > 1."""
    B, H, Lq, D = q.shape; Lk = k.shape[-2]
    block_n = 256 if D <= 64 else (128 if D <= 128 else 64)
    nmb = (Lq + 63) // 64; nnb = (Lk + block_n - 1) // block_n
    s = num_splits(B * H * nmb, sms * 2, nnb, 128)
    if s <= 1: return fa2(q, k, v, scale=scale)
    return fa2_split(q, k, v, s, scale=scale, BN=block_n)

def num_splits(bnm, slots, nnb, maxs):
    if bnm >= 0.8 * slots: return 1
    maxs = min(maxs, slots, nnb)
    eff = []; me = 0.0
    ceil = lambda a, b: (a + b - 1) // b
    elig = lambda s: s == 1 or ceil(nnb, s) != ceil(nnb, s - 1)
    for s in range(1, maxs + 1):
        if not elig(s): eff.append(0.0); continue
        w = bnm * s / slots; e = w / math.ceil(w); me = max(me, e); eff.append(e)
    for s in range(1, maxs + 1):
        if not elig(s): continue
        if eff[s - 1] >= 0.85 * me: return s
    return 1
