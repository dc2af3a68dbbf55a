"""How often do torch's CUDA fp32 transcendental kernels (pow, exp, sin, cos,
rsqrt, sqrt) differ from the host's libm (glibc, through ctypes: what drift's
cpu backend calls) and from the correctly rounded result (fp64, rounded once)?
Issue 15: LTX-2's captured graph builds its RoPE frequencies (pow of a scalar
base by a linspace) and its timestep frequencies (exp of an arange) on the GPU;
a --device cpu replay builds them with libm.
    python3 tests/gpu/math_probe.py
"""
import ctypes, math
import numpy as np
import torch

libm = ctypes.CDLL("libm.so.6")
for n in ("powf", "expf", "sinf", "cosf", "sqrtf"):
    f = getattr(libm, n)
    f.restype = ctypes.c_float
    f.argtypes = [ctypes.c_float] * (2 if n == "powf" else 1)


def host(name, xs, base=None):
    f = getattr(libm, name)
    if name == "powf":
        return np.array([f(base, float(x)) for x in xs], dtype=np.float32)
    return np.array([f(float(x)) for x in xs], dtype=np.float32)


def cr(fn, xs):  # correctly rounded (fp64 evaluation, one rounding; fine away from ties)
    return np.array([fn(float(x)) for x in xs], dtype=np.float64).astype(np.float32)


def ulps(a, b):
    ai = a.view(np.int32).astype(np.int64); bi = b.view(np.int32).astype(np.int64)
    return np.abs(ai - bi)


def report(tag, xs, dev, hostv, crv):
    d_h = ulps(dev, hostv); d_c = ulps(dev, crv); h_c = ulps(hostv, crv)
    print("MATH %-34s n=%7d cuda!=libm %6d (max %d ulp)  cuda!=cr %6d (max %d)  libm!=cr %6d" % (
        tag, len(xs), (d_h > 0).sum(), d_h.max(), (d_c > 0).sum(), d_c.max(), (h_c > 0).sum()), flush=True)


rng = np.random.default_rng(0)
# pow(Scalar base, Tensor exponent): theta ** linspace (LTX-2 / Flux-style RoPE frequencies)
for base in (10000.0, 500.0, 20.0):
    for n in (16, 64, 1000):
        e = torch.linspace(0.0, 1.0, n, device="cuda", dtype=torch.float32)
        dev = torch.pow(base, e).cpu().numpy()
        xs = e.cpu().numpy()
        report("pow(%g, linspace(0,1,%d))" % (base, n), xs, dev, host("powf", xs, base),
               cr(lambda x: base ** x, xs))
xs = rng.uniform(-1, 1, 200000).astype(np.float32)
dev = torch.pow(10000.0, torch.from_numpy(xs).cuda()).cpu().numpy()
report("pow(10000, U(-1,1))", xs, dev, host("powf", xs, 10000.0), cr(lambda x: 10000.0 ** x, xs))
# exp of -log(10000) * arange(half) / half (diffusers get_timestep_embedding)
for half in (128, 64, 8):
    a = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device="cuda") / half
    dev = torch.exp(a).cpu().numpy(); xs = a.cpu().numpy()
    report("exp(-ln(1e4)*arange(%d)/%d)" % (half, half), xs, dev, host("expf", xs), cr(math.exp, xs))
xs = rng.uniform(-10, 10, 200000).astype(np.float32)
dev = torch.exp(torch.from_numpy(xs).cuda()).cpu().numpy()
report("exp(U(-10,10))", xs, dev, host("expf", xs), cr(math.exp, xs))
for lo, hi in ((-3.2, 3.2), (-1000, 1000)):
    xs = rng.uniform(lo, hi, 200000).astype(np.float32)
    t = torch.from_numpy(xs).cuda()
    report("sin(U(%g,%g))" % (lo, hi), xs, torch.sin(t).cpu().numpy(), host("sinf", xs), cr(math.sin, xs))
    report("cos(U(%g,%g))" % (lo, hi), xs, torch.cos(t).cpu().numpy(), host("cosf", xs), cr(math.cos, xs))
xs = rng.uniform(1e-6, 10, 200000).astype(np.float32)
t = torch.from_numpy(xs).cuda()
report("rsqrt(U(1e-6,10))", xs, torch.rsqrt(t).cpu().numpy(),
       (1.0 / host("sqrtf", xs)).astype(np.float32), cr(lambda x: 1.0 / math.sqrt(x), xs))
report("sqrt(U(1e-6,10))", xs, torch.sqrt(t).cpu().numpy(), host("sqrtf", xs), cr(math.sqrt, xs))
