"""DESIGN.md s7 comparison metrics, computed where the tensors live.

compare_metrics(t, r) works on torch tensors (on their device, sums in
fp64) and on numpy arrays (the tests without torch), with the semantics of
replay/analysis/metrics.h so that a recorder row and a replay row mean the same:

  * values widened to fp32, viewed as (batch, -1); d = t - r in fp64;
  * a pair enters the sums and maxima only when t and r are both finite;
    non-finite pairs are counted (nan/inf of each side) and still count in
    numel (mean = sum |d| / numel);
  * rel_max = max over rows of max|d| / (max|r| + 1e-30);
  * cosine = sum t r / sqrt(sum t^2 sum r^2), 1 when both are zero, 0 when
    exactly one is, clamped to [-1, 1];
  * worst_index = first flat index of max |d| (-1 when no finite pair);
  * max_ulp_diff: |t - r| in ULPs of the reference's magnitude in the site's
    dtype (the candidate's: bf16, fp16, else fp32), rounded up, as
    drift_metrics_ulp_of_ref; an infinity on one side counts the values
    between; a zero reference (no magnitude) is left out, as in C;
    2^64-1 when some element is NaN on exactly one side.
"""
import math

from . import _lib

UINT64_MAX = (1 << 64) - 1
REL_EPS = 1e-30


def is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _finish(numel, sum_abs, max_abs, rel_max, s_tr, s_tt, s_rr, s_sq, nan_t, inf_t, nan_r, inf_r, worst, ulp,
            n_diff):
    if s_tt == 0.0 and s_rr == 0.0:
        cos = 1.0
    elif s_tt == 0.0 or s_rr == 0.0:
        cos = 0.0
    else:
        cos = max(-1.0, min(1.0, s_tr / math.sqrt(s_tt * s_rr)))
    return {
        "numel": int(numel),
        "mean_abs_diff": sum_abs / numel if numel else 0.0,
        "max_abs_diff": float(max_abs),
        "rel_max": float(rel_max),
        "cosine": float(cos),
        "rmse": math.sqrt(s_sq / numel) if numel else float("nan"),
        "rmse_oracle": float("nan"),
        "nan_count": int(nan_t),
        "inf_count": int(inf_t),
        "ref_nan_count": int(nan_r),
        "ref_inf_count": int(inf_r),
        "worst_index": int(worst),
        "max_ulp_diff": int(ulp),
        "n_diff": int(n_diff),
        "bitwise_equal": int(n_diff) == 0,
    }


def _ulp_params(dtype):
    mant = 7 if dtype == _lib.DT_BF16 else (10 if dtype == _lib.DT_FP16 else 23)
    return mant, (-14 if dtype == _lib.DT_FP16 else -126)


def _rows(n, batch, shape):
    if batch is None:
        batch = int(shape[0]) if len(shape) >= 2 else 1
    if batch < 1 or n % batch:
        batch = 1
    return batch


# --- torch ----------------------------------------------------------------
def _torch_ordered(x, dtype):
    import torch
    if dtype == _lib.DT_BF16:
        b = x.to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
        mag, neg = b & 0x7FFF, (b >> 15) != 0
    elif dtype == _lib.DT_FP16:
        b = x.to(torch.float16).view(torch.int16).to(torch.int64) & 0xFFFF
        mag, neg = b & 0x7FFF, (b >> 15) != 0
    else:
        b = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        mag, neg = b & 0x7FFFFFFF, (b >> 31) != 0
    return torch.where(neg, -mag, mag)


def _torch_ulp_of_ref(tf, rf, dtype):
    import torch
    mant, emin = _ulp_params(dtype)
    t64, r64 = tf.double(), rf.double()
    m = r64.abs()
    e = torch.frexp(m)[1].to(torch.int64) - 1
    e = torch.where((m == 0) | (e < emin), torch.full_like(e, emin), e)
    q = ((t64 - r64).abs() / torch.ldexp(torch.ones_like(m), e - mant)).ceil()
    q = torch.where(q < 9.2e18, q, torch.full_like(q, float(2 ** 63 - 1)))
    inf = tf.isinf() | rf.isinf()
    ordered = (_torch_ordered(tf, dtype) - _torch_ordered(rf, dtype)).abs().double()
    q = torch.where(inf, ordered, q)
    skip = (tf == rf) | (tf.isnan() & rf.isnan()) | ((rf == 0) & tf.isfinite())
    q = torch.where(skip, torch.zeros_like(q), q)
    return int(q.max()) if q.numel() else 0


def _compare_torch(t, r, batch, dtype):
    import torch
    t = t.detach()
    r = r.detach().to(t.device)
    if t.numel() != r.numel():
        raise ValueError(f"candidate has {t.numel()} elements, reference {r.numel()}")
    n = t.numel()
    rows = _rows(n, batch, tuple(t.shape))
    tf = t.reshape(rows, -1).float()
    rf = r.reshape(rows, -1).float()
    fin = torch.isfinite(tf) & torch.isfinite(rf)
    td = torch.where(fin, tf.double(), 0.0)
    rd = torch.where(fin, rf.double(), 0.0)
    d = td - rd
    ad = d.abs()
    any_fin = bool(fin.any())
    row_max = ad.amax(1) if n else ad.new_zeros(rows)
    row_ref = rd.abs().amax(1) if n else ad.new_zeros(rows)
    rel = (row_max / (row_ref + REL_EPS)).max() if n else ad.new_zeros(())
    flat = torch.where(fin, ad, -1.0).reshape(-1)  # non-finite pairs never win
    if any_fin:
        # first index attaining the max (torch.argmax's tie rule is not
        # documented for CUDA: take the smallest index explicitly)
        mx = flat.max()
        idx = torch.nonzero(flat == mx)[0, 0]
        worst = int(idx)
        max_abs = float(mx)
    else:
        worst, max_abs = -1, 0.0
    nan_t = tf.isnan()
    nan_r = rf.isnan()
    one_nan = nan_t ^ nan_r
    if bool(one_nan.any()):
        ulp = UINT64_MAX
    elif n:
        ulp = _torch_ulp_of_ref(tf, rf, dtype)
    else:
        ulp = 0
    differ = (tf.view(torch.int32) != rf.view(torch.int32)) & ~(nan_t & nan_r)
    sums = torch.stack([ad.sum(), (td * rd).sum(), (td * td).sum(), (rd * rd).sum(), (d * d).sum()]).tolist()
    counts = torch.stack([nan_t.sum(), tf.isinf().sum(), nan_r.sum(), rf.isinf().sum(), differ.sum()]).tolist()
    return _finish(n, sums[0], max_abs, float(rel), sums[1], sums[2], sums[3], sums[4], counts[0], counts[1],
                   counts[2], counts[3], worst, ulp, counts[4])


# --- numpy ----------------------------------------------------------------
def _np_ordered(x, dtype):
    import numpy as np
    if dtype in (_lib.DT_BF16, _lib.DT_FP16):
        from ._tensor import f32_to_bf16_bits
        if dtype == _lib.DT_BF16:
            b = f32_to_bf16_bits(x).astype(np.int64)
        else:
            b = x.astype(np.float16).view(np.uint16).astype(np.int64)
        mag, neg = b & 0x7FFF, (b >> 15) != 0
    else:
        b = x.view(np.uint32).astype(np.int64)
        mag, neg = b & 0x7FFFFFFF, (b >> 31) != 0
    return np.where(neg, -mag, mag)


def _np_ulp_of_ref(tf, rf, dtype):
    import numpy as np
    mant, emin = _ulp_params(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        t64, r64 = tf.astype(np.float64), rf.astype(np.float64)
        m = np.abs(r64)
        e = np.frexp(m)[1].astype(np.int64) - 1
        e = np.where((m == 0) | (e < emin), emin, e)
        q = np.ceil(np.abs(t64 - r64) / np.ldexp(1.0, e - mant))
        q = np.where(q < 9.2e18, q, float(2 ** 63 - 1))
        inf = np.isinf(tf) | np.isinf(rf)
        q = np.where(inf, np.abs(_np_ordered(tf, dtype) - _np_ordered(rf, dtype)).astype(np.float64), q)
        skip = (tf == rf) | (np.isnan(tf) & np.isnan(rf)) | ((rf == 0) & np.isfinite(tf))
        q = np.where(skip, 0.0, q)
    return int(q.max()) if q.size else 0


def _compare_numpy(t, r, batch, dtype):
    import numpy as np
    from ._tensor import as_f32
    tf = as_f32(t, dtype)
    rf = as_f32(r, dtype if getattr(r, "dtype", None) == np.uint16 else None)
    if tf.size != rf.size:
        raise ValueError(f"candidate has {tf.size} elements, reference {rf.size}")
    n = tf.size
    rows = _rows(n, batch, np.shape(t))
    tf = tf.reshape(rows, -1)
    rf = rf.reshape(rows, -1)
    fin = np.isfinite(tf) & np.isfinite(rf)
    td = np.where(fin, tf.astype(np.float64), 0.0)
    rd = np.where(fin, rf.astype(np.float64), 0.0)
    d = td - rd
    ad = np.abs(d)
    if n:
        rel = float((ad.max(1) / (np.abs(rd).max(1) + REL_EPS)).max())
    else:
        rel = 0.0
    if fin.any():
        worst = int(np.argmax(np.where(fin, ad, -1.0).reshape(-1)))  # non-finite pairs never win
        max_abs = float(ad.max())
    else:
        worst, max_abs = -1, 0.0
    nt, nr = np.isnan(tf), np.isnan(rf)
    if (nt ^ nr).any():
        ulp = UINT64_MAX
    elif n:
        ulp = _np_ulp_of_ref(tf, rf, dtype)
    else:
        ulp = 0
    differ = (np.ascontiguousarray(tf).view(np.uint32) != np.ascontiguousarray(rf).view(np.uint32)) & ~(nt & nr)
    return _finish(n, float(ad.sum()), max_abs, rel, float((td * rd).sum()), float((td * td).sum()),
                   float((rd * rd).sum()), float((d * d).sum()), int(nt.sum()), int(np.isinf(tf).sum()),
                   int(nr.sum()), int(np.isinf(rf).sum()), worst, ulp, int(differ.sum()))


def compare_metrics(t, r, batch=None, dtype=None):
    """Metrics of candidate t against reference r (both torch tensors or
    both numpy arrays). dtype: the site dtype for ULPs (drift dtype code);
    default: t's (bf16/fp16), else fp32. Returns a dict keyed like
    drift_trace_metric's fields."""
    from ._tensor import dtype_code
    if dtype is None:
        dtype = dtype_code(t)
    if is_torch(t):
        return _compare_torch(t, r, batch, dtype)
    return _compare_numpy(t, r, batch, dtype)


def logprob_metrics(lp_new, lp_old):
    """Per-step log-prob metrics over pairs (fp64; non-finite pairs count in
    n_pairs and add 0), as drift_metrics_finish_logprob."""
    if is_torch(lp_new):
        import torch
        a = lp_new.detach().reshape(-1).double()
        b = lp_old.detach().reshape(-1).to(a.device).double()
        fin = torch.isfinite(a) & torch.isfinite(b)
        d = torch.where(fin, a - b, 0.0)
        s = torch.stack([d.abs().sum(), torch.expm1(d).abs().sum(), (d * d).sum()]).tolist()
        n = a.numel()
    else:
        import numpy as np
        a = np.asarray(lp_new, dtype=np.float64).reshape(-1)
        b = np.asarray(lp_old, dtype=np.float64).reshape(-1)
        fin = np.isfinite(a) & np.isfinite(b)
        d = np.where(fin, a - b, 0.0)
        s = [float(np.abs(d).sum()), float(np.abs(np.expm1(d)).sum()), float((d * d).sum())]
        n = a.size
    if n == 0:
        return {"n_pairs": 0, "log_prob_mean_abs_diff": 0.0, "ratio_abs_minus_1": 0.0, "approx_kl": 0.0}
    return {"n_pairs": int(n), "log_prob_mean_abs_diff": s[0] / n, "ratio_abs_minus_1": s[1] / n,
            "approx_kl": 0.5 * (s[2] / n)}
