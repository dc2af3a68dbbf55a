#!/usr/bin/python3
"""numpy emulator of a drift-aten-graph under torch-CUDA-autocast semantics as
written in the val dtypes (export ran under autocast). GEMMs: bf16 operands,
exact (fp64) sums rounded to fp32 then to the output dtype. Elementwise: fp32
opmath, one rounding to the val dtype."""
import json, os, sys, math
import numpy as np
import h5py

def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)

def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)

FLOAT = {'float32', 'bfloat16', 'float16', 'float64'}

def rnd(x, dt):
    if dt == 'bfloat16': return bf16(np.asarray(x, np.float32))
    if dt == 'float16': return f16(x)
    if dt == 'float32': return np.asarray(x, np.float32)
    if dt == 'float64': return np.asarray(x, np.float64)
    if dt in ('int64', 'int32'): return np.asarray(x).astype(np.int64)
    if dt == 'bool': return np.asarray(x).astype(bool)
    raise ValueError(dt)

class Emu:
    def __init__(self, trace, step=0, opts=None):
        self.opts = opts or {}
        self.f = h5py.File(trace, 'r')
        g = self.f['graph'][()]
        if isinstance(g, np.ndarray): g = g.tobytes()
        self.doc = json.loads(bytes(g).rstrip(b'\0'))
        self.step = step
        self.env = {}
        self.meta = {}

    def site(self, name):
        return self.f['sites'][name]['data'][self.step]

    def arg(self, a):
        if isinstance(a, dict):
            if 'node' in a: return self.env[a['node']]
            if 'dtype' in a: return ('dtype', a['dtype'])
            if 'float' in a: return float(a['float'])
            return a
        if isinstance(a, list): return [self.arg(x) for x in a]
        return a

    def run(self):
        d = self.doc
        inputs = {i['node']: i for i in d['inputs']}
        dv = d.get('device_values', {})
        for n in d['nodes']:
            name = n['name']
            self.meta[name] = n
            if n['op'] == 'placeholder':
                inp = inputs[name]
                v = n['val']
                if 'scalar' in v: self.env[name] = v['scalar']; continue
                k = inp['kind']
                if k == 'parameter':
                    x = self.f['params'][inp['target']][()]
                elif k == 'buffer':
                    x = self.f['buffers'][inp['target']][()]
                elif k == 'constant':
                    c = d.get('constants', {}).get(inp['target'])
                    x = np.array(c['data']).reshape(c['shape']) if c else self.f['buffers']['constant:' + inp['target']][()]
                else:
                    x = self.site(inp['site'])
                x = np.asarray(x).reshape(v['shape'])
                self.env[name] = rnd(x, v['dtype'])
                continue
            if n['op'] == 'output':
                self.out = [self.arg(a) for a in n['args'][0]]
                continue
            if name in dv and self.opts.get('device_values', True):
                self.env[name] = self.f['buffers'][dv[name]][()].reshape(n['val']['shape']).astype(np.float32)
                continue
            ov = self.opts.get('override', {})
            self.env[name] = ov[name] if name in ov else self.call(n)
        return self.env

    def call(self, n):
        t = n['target']
        op = t.split('.')[1] if t.startswith('aten.') else t.replace('.', '_')
        args = [self.arg(a) for a in n['args']]
        kw = {k: self.arg(v) for k, v in n['kwargs'].items()}
        val = n['val']
        odt = val['dtype'] if isinstance(val, dict) else None
        if n['name'] in self.opts.get('force32', ()): odt = 'float32'
        fn = getattr(self, 'op_' + op, None)
        if fn is None:
            raise NotImplementedError(f"{n['name']}: {t}")
        r = fn(args, kw, odt, n)
        if isinstance(val, dict) and r is not None and not isinstance(r, (list, tuple)):
            r = np.asarray(r)
            if tuple(r.shape) != tuple(val['shape']):
                r = np.broadcast_to(r, val['shape']) if r.size == 1 else r
                assert tuple(r.shape) == tuple(val['shape']), (n['name'], r.shape, val['shape'])
        return r

    # ---- no-value / views ----
    def op__assert_tensor_metadata(self, a, k, o, n): return None
    def op_getitem(self, a, k, o, n): return a[0][a[1]]
    def op_view(self, a, k, o, n): return np.reshape(a[0], a[1])
    op_reshape = op_view
    op__unsafe_view = op_view
    def op_flatten(self, a, k, o, n):
        x = a[0]; s = a[1] if len(a) > 1 else 0; e = a[2] if len(a) > 2 else -1
        s %= x.ndim; e %= x.ndim
        return x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1:])
    def op_unflatten(self, a, k, o, n):
        x = a[0]; d = a[1] % x.ndim
        return x.reshape(x.shape[:d] + tuple(a[2]) + x.shape[d + 1:])
    def op_transpose(self, a, k, o, n): return np.swapaxes(a[0], a[1], a[2])
    def op_permute(self, a, k, o, n): return np.transpose(a[0], a[1])
    def op_unsqueeze(self, a, k, o, n): return np.expand_dims(a[0], a[1] if a[1] >= 0 else a[0].ndim + 1 + a[1])
    def op_squeeze(self, a, k, o, n):
        x = a[0]
        if len(a) == 1: return np.squeeze(x)
        dims = a[1] if isinstance(a[1], list) else [a[1]]
        dims = [d % x.ndim for d in dims if x.shape[d] == 1]
        return np.squeeze(x, tuple(dims))
    def op_expand(self, a, k, o, n):
        x = a[0]; s = list(a[1]); nd = len(s)
        xs = (1,) * (nd - x.ndim) + x.shape
        s = [xs[i] if s[i] == -1 else s[i] for i in range(nd)]
        return np.broadcast_to(x.reshape(xs), s)
    def op_slice(self, a, k, o, n):
        x = a[0]; d = a[1] if len(a) > 1 else 0
        st = a[2] if len(a) > 2 else None; en = a[3] if len(a) > 3 else None
        sp = a[4] if len(a) > 4 else 1
        if en is not None and en > 2**62: en = None
        idx = [slice(None)] * x.ndim; idx[d] = slice(st, en, sp)
        return x[tuple(idx)]
    def op_select(self, a, k, o, n):
        idx = [slice(None)] * a[0].ndim; idx[a[1]] = a[2]
        return a[0][tuple(idx)]
    def _sl(self, x, d, i, j):
        idx = [slice(None)] * x.ndim; idx[d] = slice(i, j)
        return x[tuple(idx)]
    def op_chunk(self, a, k, o, n):
        x = a[0]; c = a[1]; d = a[2] if len(a) > 2 else 0
        sz = -(-x.shape[d] // c)
        return [self._sl(x, d, i, min(i + sz, x.shape[d])) for i in range(0, x.shape[d], sz)]
    def op_split(self, a, k, o, n):
        x = a[0]; sz = a[1]; d = a[2] if len(a) > 2 else 0
        if isinstance(sz, list): return self.op_split_with_sizes(a, k, o, n)
        return [np.take(x, range(i, min(i + sz, x.shape[d])), axis=d) for i in range(0, x.shape[d], sz)]
    def op_split_with_sizes(self, a, k, o, n):
        x = a[0]; d = a[2] if len(a) > 2 else 0; out = []; i = 0
        for s in a[1]: out.append(self._sl(x, d, i, i + s)); i += s
        return out
    def op_unbind(self, a, k, o, n):
        d = a[1] if len(a) > 1 else 0
        return [self.op_select([a[0], d, i], k, o, n) for i in range(a[0].shape[d])]
    def op_alias(self, a, k, o, n): return a[0]
    op_detach = op_alias
    op_lift_fresh_copy = op_alias
    op_clone = op_alias
    op_contiguous = op_alias
    def op_dropout(self, a, k, o, n): return a[0]
    # ---- casts ----
    def op_to(self, a, k, o, n): return rnd(a[0], o)
    op__to_copy = op_to
    def op_type_as(self, a, k, o, n): return rnd(a[0], o)
    # ---- fills ----
    def op_arange(self, a, k, o, n):
        if len(a) == 1: return rnd(np.arange(a[0]), o)
        return rnd(np.arange(*a), o)
    def op_zeros(self, a, k, o, n): return rnd(np.zeros(a[0]), o)
    def op_ones(self, a, k, o, n): return rnd(np.ones(a[0]), o)
    def op_full(self, a, k, o, n): return rnd(np.full(a[0], a[1]), o)
    def op_zeros_like(self, a, k, o, n): return rnd(np.zeros(a[0].shape), o)
    def op_ones_like(self, a, k, o, n): return rnd(np.ones(a[0].shape), o)
    def op_full_like(self, a, k, o, n): return rnd(np.full(a[0].shape, a[1]), o)
    def op_new_zeros(self, a, k, o, n): return rnd(np.zeros(a[1]), o)
    def op_new_ones(self, a, k, o, n): return rnd(np.ones(a[1]), o)
    def op_cat(self, a, k, o, n):
        d = a[1] if len(a) > 1 else 0
        xs = [x for x in a[0] if x.size]
        return rnd(np.concatenate([x.astype(np.float64) if o == 'float64' else x for x in xs], axis=d), o)
    def op_stack(self, a, k, o, n):
        return rnd(np.stack(a[0], axis=a[1] if len(a) > 1 else 0), o)
    # ---- elementwise ----
    def _c(self, x, o):
        # opmath: fp32 for float outputs (fp64 for fp64)
        if isinstance(x, np.ndarray):
            return x.astype(np.float64) if o == 'float64' else x.astype(np.float32)
        return np.float64(x) if o == 'float64' else np.float32(x)
    def _bin(self, a, k, o, f):
        x = self._c(a[0], o); y = self._c(a[1], o)
        if 'alpha' in k: y = y * self._c(k['alpha'], o)
        elif len(a) > 2: y = y * self._c(a[2], o)
        return rnd(f(x, y), o)
    def op_add(self, a, k, o, n): return self._bin(a, k, o, lambda x, y: x + y)
    def op_sub(self, a, k, o, n): return self._bin(a, k, o, lambda x, y: x - y)
    def op_rsub(self, a, k, o, n): return self._bin(a, k, o, lambda x, y: y - x)
    def op_mul(self, a, k, o, n): return self._bin(a, k, o, lambda x, y: x * y)
    def op_div(self, a, k, o, n):
        x = self._c(a[0], o); y = a[1]
        if k.get('rounding_mode'): raise NotImplementedError('div rounding')
        if not isinstance(y, np.ndarray) and self.opts.get('div_recip', True):
            # torch CUDA: a CPU scalar divisor is a multiply by its reciprocal (opmath)
            return rnd(x * (self._c(1.0, o) / self._c(y, o)), o)
        return rnd(x / self._c(y, o), o)
    def op_pow(self, a, k, o, n):
        x = self._c(a[0], o); y = a[1]
        if isinstance(y, (int, float)) and y == 2: return rnd(x * x, o)
        return rnd(np.power(x, self._c(y, o)), o)
    def _un(self, a, o, f): return rnd(f(self._c(a[0], o)), o)
    def op_exp(self, a, k, o, n): return self._un(a, o, np.exp)
    def _trig(self, a, o, f64, name):
        if self.opts.get('cuda_trig') and o == 'float32':
            import cudatrig
            fn = getattr(cudatrig, name)
            x = np.asarray(a[0], np.float32)
            return np.array([fn(v) for v in x.ravel()], np.float32).reshape(x.shape)
        return self._un(a, o, f64)
    def op_sin(self, a, k, o, n): return self._trig(a, o, np.sin, 'sinf')
    def op_cos(self, a, k, o, n): return self._trig(a, o, np.cos, 'cosf')
    def op_rsqrt(self, a, k, o, n): return self._un(a, o, lambda x: 1 / np.sqrt(x))
    def op_sqrt(self, a, k, o, n): return self._un(a, o, np.sqrt)
    def op_neg(self, a, k, o, n): return self._un(a, o, np.negative)
    def op_tanh(self, a, k, o, n): return self._un(a, o, np.tanh)
    def op_sigmoid(self, a, k, o, n): return self._un(a, o, lambda x: 1 / (1 + np.exp(-x)))
    def op_relu(self, a, k, o, n): return self._un(a, o, lambda x: np.maximum(x, 0))
    def op_silu(self, a, k, o, n): return self._un(a, o, lambda x: x / (1 + np.exp(-x)))
    def op_abs(self, a, k, o, n): return self._un(a, o, np.abs)
    def op_gelu(self, a, k, o, n):
        appr = k.get('approximate', a[1] if len(a) > 1 else 'none')
        if appr == 'tanh':
            f = lambda x: 0.5 * x * (1 + np.tanh(np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)))
        else:
            from math import erf
            ve = np.vectorize(erf)
            f = lambda x: (0.5 * x * (1 + ve(x / np.sqrt(2)))).astype(np.float32)
        return self._un(a, o, f)
    def op_clamp(self, a, k, o, n):
        x = self._c(a[0], o)
        lo = a[1] if len(a) > 1 else k.get('min'); hi = a[2] if len(a) > 2 else k.get('max')
        if lo is not None: x = np.maximum(x, lo)
        if hi is not None: x = np.minimum(x, hi)
        return rnd(x, o)
    def op_clip(self, a, k, o, n): return self.op_clamp(a, k, o, n)
    def op_where(self, a, k, o, n): return rnd(np.where(a[0], a[1], a[2]), o)
    # ---- reductions ----
    def op_mean(self, a, k, o, n):
        x = a[0].astype(np.float64)
        dims = a[1] if len(a) > 1 else None
        keep = a[2] if len(a) > 2 else k.get('keepdim', False)
        return rnd(np.mean(x, axis=tuple(dims) if dims is not None else None, keepdims=keep), o)
    def op_sum(self, a, k, o, n):
        x = a[0].astype(np.float64)
        dims = a[1] if len(a) > 1 else None
        keep = a[2] if len(a) > 2 else k.get('keepdim', False)
        return rnd(np.sum(x, axis=tuple(dims) if dims is not None else None, keepdims=keep), o)
    def op_layer_norm(self, a, k, o, n):
        x = a[0].astype(np.float64); ns = a[1]
        w = a[2] if len(a) > 2 else None; b = a[3] if len(a) > 3 else None
        eps = a[4] if len(a) > 4 else 1e-5
        ax = tuple(range(x.ndim - len(ns), x.ndim))
        m = x.mean(axis=ax, keepdims=True); v = ((x - m) ** 2).mean(axis=ax, keepdims=True)
        y = (x - m) / np.sqrt(v + eps)
        y = y.astype(np.float32)
        if w is not None: y = y * w.astype(np.float32)
        if b is not None: y = y + b.astype(np.float32)
        return rnd(y, o)
    def op_rms_norm(self, a, k, o, n):
        x = a[0].astype(np.float64); ns = a[1]
        w = a[2] if len(a) > 2 else None; eps = a[3] if len(a) > 3 else None
        if eps is None: eps = float(np.finfo(np.float32).eps)
        ax = tuple(range(x.ndim - len(ns), x.ndim))
        v = self.opts.get('rms_variant')
        if v:
            x32 = a[0].astype(np.float32); N = np.float32(np.prod([x.shape[d] for d in ax]))
            ss = (x32.astype(np.float64) ** 2).sum(axis=ax, keepdims=True).astype(np.float32)
            ms = (ss * (np.float32(1) / N)).astype(np.float32) if 'recipN' in v else (ss / N).astype(np.float32)
            t = (ms + np.float32(eps)).astype(np.float32)
            r = (1 / np.sqrt(t.astype(np.float64))).astype(np.float32) if 'crrsqrt' in v else (np.float32(1) / np.sqrt(t)).astype(np.float32)
            if w is not None and 'rw' in v:
                y = (x32 * (r * w.astype(np.float32)).astype(np.float32)).astype(np.float32)
            else:
                y = (x32 * r).astype(np.float32)
                if w is not None: y = (y * w.astype(np.float32)).astype(np.float32)
            return rnd(y, o)
        y = (x / np.sqrt((x * x).mean(axis=ax, keepdims=True) + eps)).astype(np.float32)
        if w is not None: y = y * w.astype(np.float32)
        return rnd(y, o)
    def op_softmax(self, a, k, o, n):
        x = a[0].astype(np.float64); d = a[1]
        e = np.exp(x - x.max(axis=d, keepdims=True))
        return rnd(e / e.sum(axis=d, keepdims=True), o)
    op__softmax = op_softmax
    # ---- GEMMs ----
    def _mm_in(self, x, o):
        if self.opts.get('mm32'): return rnd(x, o).astype(np.float32)
        return rnd(x, o).astype(np.float64)
    def op_linear(self, a, k, o, n):
        x = self._mm_in(a[0], o); w = self._mm_in(a[1], o)
        sp = self.opts.get('lin_split', {}).get(n['name'])
        if sp:
            from splitk import splitk, chunked
            b = a[2] if len(a) > 2 else None
            bb = None if b is None else rnd(b, o).astype(np.float64)
            if sp[0] == 'c':
                return chunked(x, w.T, sp[1], sp[2], o, bias=bb, bias_first=sp[3] if len(sp) > 3 else True)
            return splitk(x, w.T, sp[0], sp[1], o, bb)
        y = (x @ w.T).astype(np.float32)
        b = a[2] if len(a) > 2 else None
        if b is not None:
            if n['name'] in self.opts.get('lin_unfused', ()) or self.opts.get('lin_unfused_all'):
                return rnd(rnd(y, o).astype(np.float32) + rnd(b, o).astype(np.float32), o)
            y = (y.astype(np.float64) + rnd(b, o).astype(np.float64)).astype(np.float32)
        return rnd(y, o)
    def op_matmul(self, a, k, o, n):
        sp = self.opts.get('lin_split', {}).get(n['name'])
        if sp and sp[0] == 'c':
            from splitk import chunked
            return chunked(self._mm_in(a[0], o), self._mm_in(a[1], o), sp[1], sp[2], o)
        return rnd(np.matmul(self._mm_in(a[0], o), self._mm_in(a[1], o)).astype(np.float32), o)
    op_bmm = op_matmul
    op_mm = op_matmul
    def op_conv2d(self, a, k, o, n):
        x = self._mm_in(a[0], o); w = self._mm_in(a[1], o)
        b = a[2] if len(a) > 2 else None
        st = a[3] if len(a) > 3 else [1, 1]; pd = a[4] if len(a) > 4 else [0, 0]
        dl = a[5] if len(a) > 5 else [1, 1]; g = a[6] if len(a) > 6 else 1
        if isinstance(st, int): st = [st, st]
        if isinstance(pd, int): pd = [pd, pd]
        if isinstance(dl, int): dl = [dl, dl]
        N, C, H, W = x.shape; O, Cg, KH, KW = w.shape
        xp = np.pad(x, ((0, 0), (0, 0), (pd[0], pd[0]), (pd[1], pd[1])))
        OH = (H + 2 * pd[0] - dl[0] * (KH - 1) - 1) // st[0] + 1
        OW = (W + 2 * pd[1] - dl[1] * (KW - 1) - 1) // st[1] + 1
        y = np.zeros((N, O, OH, OW))
        og = O // g
        for gi in range(g):
            xs = xp[:, gi * Cg:(gi + 1) * Cg]
            ws = w[gi * og:(gi + 1) * og]
            for i in range(KH):
                for j in range(KW):
                    patch = xs[:, :, i * dl[0]: i * dl[0] + st[0] * (OH - 1) + 1: st[0],
                               j * dl[1]: j * dl[1] + st[1] * (OW - 1) + 1: st[1]]
                    y[:, gi * og:(gi + 1) * og] += np.einsum('nchw,oc->nohw', patch, ws[:, :, i, j])
        if b is not None and n['name'] in self.opts.get('conv_fused', ()):
            return rnd((y + rnd(b, o).astype(np.float64)[None, :, None, None]).astype(np.float32), o)
        if g == C and g == O and b is not None and self.opts.get('dw_fused', False):
            # CudaDepthwise2d: bias first, then the taps in fp32, one rounding
            return rnd((y + rnd(b, o).astype(np.float64)[None, :, None, None]).astype(np.float32), o)
        y = rnd(y.astype(np.float32), o)
        if b is not None:
            # cuDNN's conv then a separate bias add: two roundings
            y = rnd(y.astype(np.float32) + rnd(b, o).astype(np.float32)[None, :, None, None], o)
        return y
    def op_conv3d(self, a, k, o, n):
        x = self._mm_in(a[0], o); w = self._mm_in(a[1], o)
        b = a[2] if len(a) > 2 else None
        nd = x.ndim - 2
        def tup(v, d):
            return [v] * nd if isinstance(v, int) else list(v)
        st = tup(a[3] if len(a) > 3 else 1, 1); pd = tup(a[4] if len(a) > 4 else 0, 0)
        dl = tup(a[5] if len(a) > 5 else 1, 1); g = a[6] if len(a) > 6 else 1
        xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pd])
        ks = w.shape[2:]
        osz = [(x.shape[2 + i] + 2 * pd[i] - dl[i] * (ks[i] - 1) - 1) // st[i] + 1 for i in range(nd)]
        N, C = x.shape[:2]; O, Cg = w.shape[:2]; og = O // g
        y = np.zeros([N, O] + osz)
        for gi in range(g):
            xs = xp[:, gi * Cg:(gi + 1) * Cg]; ws = w[gi * og:(gi + 1) * og]
            for kk in np.ndindex(*ks):
                sl = tuple(slice(kk[i] * dl[i], kk[i] * dl[i] + st[i] * (osz[i] - 1) + 1, st[i]) for i in range(nd))
                patch = xs[(slice(None), slice(None)) + sl]
                y[:, gi * og:(gi + 1) * og] += np.tensordot(patch, ws[(slice(None), slice(None)) + kk], axes=([1], [1])).transpose([0, nd + 1] + list(range(1, nd + 1)))
        y = rnd(y.astype(np.float32), o)
        if b is not None:
            y = rnd(y.astype(np.float32) + rnd(b, o).astype(np.float32).reshape([1, -1] + [1] * nd), o)
        return y
    op_conv1d = op_conv3d
    def op_convolution(self, a, k, o, n):
        assert not a[6], 'transposed'
        return self.op_conv3d([a[0], a[1], a[2], a[3], a[4], a[5], a[8]], k, o, n)
    def op_group_norm(self, a, k, o, n):
        x = a[0].astype(np.float64); G = a[1]
        w = a[2] if len(a) > 2 else None; b = a[3] if len(a) > 3 else None
        eps = a[4] if len(a) > 4 else 1e-5
        sh = x.shape; xg = x.reshape(sh[0], G, -1)
        m = xg.mean(-1, keepdims=True); v = ((xg - m) ** 2).mean(-1, keepdims=True)
        y = ((xg - m) / np.sqrt(v + eps)).reshape(sh).astype(np.float32)
        bc = [1, -1] + [1] * (len(sh) - 2)
        if w is not None: y = (y * w.astype(np.float32).reshape(bc)).astype(np.float32)
        if b is not None: y = (y + b.astype(np.float32).reshape(bc)).astype(np.float32)
        return rnd(y, o)
    def op_meshgrid(self, a, k, o, n):
        idx = k.get('indexing', a[1] if len(a) > 1 else 'ij')
        return list(np.meshgrid(*a[0], indexing=idx))
    def op_embedding(self, a, k, o, n):
        return a[0][np.asarray(a[1]).astype(np.int64)]
    def op_linspace(self, a, k, o, n):
        st, en, num = a[0], a[1], a[2]
        # torch: step = (end - start) / (steps - 1); first half start + i*step, second half end - (steps-1-i)*step
        i = np.arange(num)
        if num == 1: return rnd(np.array([st]), o)
        step = (np.float32(en) - np.float32(st)) / np.float32(num - 1)
        half = num // 2
        v = np.where(i < half, np.float32(st) + step * i, np.float32(en) - step * (num - 1 - i))
        return rnd(v.astype(np.float32), o)
    def op_reciprocal(self, a, k, o, n): return self._un(a, o, lambda x: np.float32(1) / x if o != 'float64' else 1 / x)
    def op_einsum(self, a, k, o, n):
        ops = a[1]
        if len(ops) == 2 and o in ('bfloat16', 'float16'):
            return rnd(np.einsum(a[0], *[self._mm_in(x, o) for x in ops]).astype(np.float32), o)
        return rnd(np.einsum(a[0], *[x.astype(np.float64) for x in ops]), o)
    def op_detach_(self, a, k, o, n): return a[0]
    def op_empty_like(self, a, k, o, n): return rnd(np.zeros(a[0].shape), o)
    def op_empty(self, a, k, o, n): return rnd(np.zeros(a[0]), o)
    def op_sym_size(self, a, k, o, n): return a[0].shape[a[1]]
    def op_outer(self, a, k, o, n): return rnd(np.outer(self._c(a[0], o), self._c(a[1], o)), o)
    def op_repeat(self, a, k, o, n):
        x = a[0]; r = a[1]; x = x.reshape((1,) * (len(r) - x.ndim) + x.shape)
        return np.tile(x, r)
    def op_nonzero(self, a, k, o, n): return np.argwhere(a[0]).astype(np.int64)
    def op_copy_(self, a, k, o, n):
        dst = a[0]; np.copyto(dst, rnd(np.broadcast_to(a[1], dst.shape), n['val']['dtype']).astype(dst.dtype))
        return dst
    def op_view_as_real(self, a, k, o, n): return a[0]
    def op_drift_tuple(self, a, k, o, n): return list(a[0]) if len(a) == 1 and isinstance(a[0], list) else list(a)
    def op_drift_constant(self, a, k, o, n):
        v = n['val']; return rnd(np.full(v['shape'], a[0]), v['dtype'])
    def op_bitwise_and(self, a, k, o, n): return np.logical_and(a[0], a[1]) if o == 'bool' else (np.asarray(a[0]) & np.asarray(a[1]))
    def op_bitwise_or(self, a, k, o, n): return np.logical_or(a[0], a[1]) if o == 'bool' else (np.asarray(a[0]) | np.asarray(a[1]))
    def op_logical_not(self, a, k, o, n): return np.logical_not(a[0])
    def op_eq(self, a, k, o, n): return np.asarray(a[0]) == a[1]
    def op_ne(self, a, k, o, n): return np.asarray(a[0]) != a[1]
    def op_lt(self, a, k, o, n): return np.asarray(a[0]) < a[1]
    def op_gt(self, a, k, o, n): return np.asarray(a[0]) > a[1]
    def op_le(self, a, k, o, n): return np.asarray(a[0]) <= a[1]
    def op_ge(self, a, k, o, n): return np.asarray(a[0]) >= a[1]
    def op_repeat_interleave(self, a, k, o, n):
        d = a[2] if len(a) > 2 else k.get('dim'); return np.repeat(a[0], a[1], axis=d)
    def op_index(self, a, k, o, n):
        idx = tuple(slice(None) if i is None else (np.asarray(i).astype(bool) if np.asarray(i).dtype == bool else np.asarray(i).astype(np.int64)) for i in a[1])
        return a[0][idx]
    def op_leaky_relu(self, a, k, o, n):
        sl = a[1] if len(a) > 1 else 0.01
        return self._un(a, o, lambda x: np.where(x > 0, x, x * np.float32(sl)))
    def op_masked_fill(self, a, k, o, n): return rnd(np.where(a[1], a[2], self._c(a[0], o)), o)
    def op_softplus(self, a, k, o, n): return self._un(a, o, lambda x: np.log1p(np.exp(x)))
    def op_amax(self, a, k, o, n): return rnd(np.max(a[0], axis=tuple(a[1]), keepdims=a[2] if len(a) > 2 else False), o)
    def op_fill_(self, a, k, o, n):
        dst = a[0]; np.copyto(dst, np.broadcast_to(np.asarray(a[1], dst.dtype), dst.shape)); return dst
    def op_fill(self, a, k, o, n): return rnd(np.full(a[0].shape, a[1]), o)
    def op_pad(self, a, k, o, n):
        x = a[0]; p = a[1]; mode = a[2] if len(a) > 2 else 'constant'; v = a[3] if len(a) > 3 else 0.0
        assert mode in ('constant', 'replicate', 'reflect'), mode
        pw = [(0, 0)] * x.ndim
        for i in range(len(p) // 2):
            pw[x.ndim - 1 - i] = (p[2 * i], p[2 * i + 1])
        if mode != 'constant':
            return rnd(np.pad(x, pw, mode='edge' if mode == 'replicate' else 'reflect'), o)
        return rnd(np.pad(x, pw, constant_values=v), o)
    op_constant_pad_nd = op_pad
    def op_avg_pool3d(self, a, k, o, n):
        # kernel == stride, no padding: the mean of each window (fp32, sum in index order, / count)
        x = np.asarray(a[0], np.float32); kk = a[1]; st = a[2] if len(a) > 2 and a[2] else kk
        assert list(kk) == list(st), 'avg_pool3d: kernel != stride'
        N, C, D, H, W = x.shape; kd, kh, kw = kk
        y = x[:, :, :D // kd * kd, :H // kh * kh, :W // kw * kw].reshape(N, C, D // kd, kd, H // kh, kh, W // kw, kw)
        y = y.transpose(0, 1, 2, 4, 6, 3, 5, 7).reshape(N, C, D // kd, H // kh, W // kw, kd * kh * kw)
        acc = np.zeros(y.shape[:-1], np.float32)
        for i in range(y.shape[-1]): acc = (acc + y[..., i]).astype(np.float32)
        return rnd(acc / np.float32(kd * kh * kw), o)
    def op_scaled_dot_product_attention(self, a, k, o, n):
        q, kk, v = [rnd(x, o).astype(np.float32) for x in a[:3]]
        mask = a[3] if len(a) > 3 else k.get('attn_mask')
        if k.get('enable_gqa') and kk.shape[-3] != q.shape[-3]:
            r = q.shape[-3] // kk.shape[-3]
            kk = np.repeat(kk, r, axis=-3); v = np.repeat(v, r, axis=-3)
        scale = k.get('scale') or 1 / math.sqrt(q.shape[-1])
        masked8 = self.opts.get('sdpa_math_masked8') and mask is not None and (q.shape[-1] % 8 or v.shape[-1] % 8)
        if (masked8 or self.opts.get('sdpa_math8', False) and (q.shape[-1] % 8 or v.shape[-1] % 8)) and o in ('bfloat16', 'float16'):
            # torch's math backend: fp32 operands, q and k each scaled by sqrt(scale)
            sf = np.float32(math.sqrt(scale))
            qs = (q * sf).astype(np.float32); ks = (kk * sf).astype(np.float32)
            s = (qs.astype(np.float64) @ np.swapaxes(ks, -1, -2).astype(np.float64)).astype(np.float32)
            if mask is not None:
                s = (s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask.astype(np.float32))).astype(np.float32)
            m = s.max(-1, keepdims=True)
            e = np.exp(s - m).astype(np.float32)
            p = (e / e.sum(-1, keepdims=True, dtype=np.float64).astype(np.float32)).astype(np.float32)
            return rnd((p.astype(np.float64) @ v.astype(np.float64)).astype(np.float32), o)
        s = (q.astype(np.float64) @ np.swapaxes(kk, -1, -2).astype(np.float64)).astype(np.float32) * np.float32(scale)
        if k.get('is_causal'):
            L, S = s.shape[-2:]
            s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf).astype(np.float32)
        if mask is not None:
            s = (s + (np.where(mask, 0, -np.inf) if mask.dtype == bool else mask.astype(np.float32))).astype(np.float32)
        tile = self.opts.get('sdpa_tile')
        if isinstance(tile, dict): tile = tile.get(n['name'])
        if tile and o in ('bfloat16', 'float16'):
            return self._flash_tiled(s, v, tile, o, scale)
        m = s.max(-1, keepdims=True); m = np.where(np.isinf(m), 0, m)
        e = np.exp(s - m).astype(np.float32)
        if self.opts.get('sdpa_exp2'):
            # flash kernels: exp2(s * scale*log2e - m * scale*log2e) with the raw scores
            s0 = s / np.float32(scale)
            sl = np.float32(scale * math.log2(math.e))
            mm = s0.max(-1, keepdims=True)
            e = np.exp2((s0.astype(np.float64) * sl - (mm * sl).astype(np.float32)).astype(np.float32)).astype(np.float32)
        l = e.sum(-1, keepdims=True, dtype=np.float64).astype(np.float32)
        p = rnd(e, o) if o in ('bfloat16', 'float16') and not self.opts.get('sdpa_exact') else e
        y = (p.astype(np.float64) @ v.astype(np.float64)).astype(np.float32) / l
        return rnd(y, o)

    def _flash_tiled(self, s, v, tile, o, scale):
        # online softmax over key tiles (a flash kernel's order); tile ('split', T, S): S key splits of
        # T-key tiles each, every split normalised alone, combined through their log-sum-exp (flash-decoding)
        Lk = s.shape[-1]
        exp2 = self.opts.get('sdpa_exp2')
        def one(s, v, T):
            m = np.full(s.shape[:-1] + (1,), -np.inf, np.float32); l = np.zeros_like(m)
            acc = np.zeros(s.shape[:-1] + (v.shape[-1],), np.float32)
            for c0 in range(0, s.shape[-1], T):
                st = s[..., c0:c0 + T]
                mt = np.maximum(m, st.max(-1, keepdims=True))
                ms = np.where(np.isinf(mt), 0, mt).astype(np.float32)
                if exp2:
                    sl = np.float32(math.log2(math.e))
                    a = np.where(np.isinf(m), 0, np.exp2(((m - ms) * sl).astype(np.float32))).astype(np.float32)
                    p = np.exp2(((st - ms) * sl).astype(np.float32)).astype(np.float32)
                else:
                    a = np.where(np.isinf(m), 0, np.exp(m - ms)).astype(np.float32)
                    p = np.exp(st - ms).astype(np.float32)
                l = (l * a + p.sum(-1, keepdims=True, dtype=np.float32)).astype(np.float32)
                pv = (rnd(p, o).astype(np.float64) @ v[..., c0:c0 + T, :].astype(np.float64)).astype(np.float32)
                acc = (acc * a + pv).astype(np.float32)
                m = mt
            return acc, l, m
        if isinstance(tile, tuple):
            T, S = tile[1], tile[2]
            per = -(-Lk // S); per = -(-per // T) * T
            outs = [one(s[..., i:i + per], v[..., i:i + per, :], T) for i in range(0, Lk, per)]
            lse = [np.log(l) + m for acc, l, m in outs]
            L = np.logaddexp.reduce(np.stack(lse), axis=0)
            y = sum((acc / l) * np.exp(ls - L) for (acc, l, m), ls in zip(outs, lse))
            return rnd(y.astype(np.float32), o)
        acc, l, m = one(s, v, tile)
        return rnd((acc / l).astype(np.float32), o)

def cmp(tr, opts):
    for step in (0, 1):
        e = Emu(tr, step, opts); e.run()
        out = []
        for s in e.f['sites']:
            if not s.endswith(':out'): continue
            nn = site_node(e, s[:-4]); rec = e.site(s)
            x = np.asarray(e.env[nn], np.float32).reshape(rec.shape)
            out.append((s, int((x != rec).sum()), rec.size))
        rec = e.site('output:noise_pred'); x = np.asarray(e.out[0], np.float32).reshape(rec.shape)
        out.append(('output', int((x != rec).sum()), rec.size))
        print(step, opts, out)


def site_node(emu, module):
    mo = emu.doc.get('module_outputs', {})
    if module in mo: return mo[module][0]
    nodes = emu.doc['nodes']
    inside = set()
    last = None
    users = {}
    for n in nodes:
        def walk(x):
            if isinstance(x, dict) and 'node' in x: yield x['node']
            elif isinstance(x, list):
                for y in x: yield from walk(y)
            elif isinstance(x, dict):
                for y in x.values(): yield from walk(y)
        for u in list(walk(n['args'])) + list(walk(n['kwargs'])):
            users.setdefault(u, []).append(n)
    def within(n):
        st = n.get('module_stack') or []
        return module in st or n.get('module') == module
    for n in nodes:
        if n['op'] != 'call_function' or not within(n): continue
        if any(not within(u) or u['op'] == 'output' for u in users.get(n['name'], [])):
            last = n['name']
    return last


if __name__ == '__main__':
    tr = sys.argv[1]
    for step in (0, 1):
        e = Emu(tr, step)
        e.run()
        for s in e.f['sites']:
            if not s.endswith(':out'): continue
            mod = s[:-4]
            nn = site_node(e, mod)
            if nn is None or e.env.get(nn) is None: continue
            rec = e.site(s)
            x = np.asarray(e.env[nn], np.float32).reshape(rec.shape)
            dd = np.abs(x - rec)
            print(f"step {step} {s:40s} {nn:20s} ndiff {int((dd > 0).sum()):7d}/{dd.size} mean|d| {dd.mean():.3e} max {dd.max():.3e}")
        rec = e.site('output:noise_pred')
        x = np.asarray(e.out[0], np.float32).reshape(rec.shape)
        dd = np.abs(x - rec)
        print(f"step {step} {'output:noise_pred':40s} ndiff {int((dd > 0).sum()):7d}/{dd.size} mean|d| {dd.mean():.3e} max {dd.max():.3e}")
