#!/usr/bin/env bash
# formats/trace interop through the real binary: a trace written from
# docs/format.md by an independent writer (h5py, Python) is listed by
# `drift ls --json` with the same numbers and passes `drift check`; hostile
# and non-trace files make `drift check` / `drift ls` exit 2 with a message;
# a corrupted tensor makes `drift check` exit 1.
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TMP:-/tmp}/trace_interop.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T"
[ -x "$D" ] || fail "no drift binary at $D"
"$PY" -c 'import h5py, numpy' 2>/dev/null || { echo "SKIP: $PY lacks h5py/numpy"; exit 77; }

"$D" ls --help >/dev/null || fail "ls --help"
"$D" check --help >/dev/null || fail "check --help"

# ---- 1. an h5py-written v1 trace -------------------------------------------
cat >"$T/pywriter.py" <<'PY'
# A minimal independent writer of drift trace schema v1 (docs/format.md).
import sys, time, numpy as np, h5py
from h5py import h5t, h5s, h5d, h5p

def f16like(fields, bias):
    t = h5t.IEEE_F32LE.copy()
    t.set_fields(*fields); t.set_offset(0); t.set_precision(16); t.set_size(2); t.set_ebias(bias)
    return t

BF16 = f16like((15, 7, 8, 0, 7), 127)
FP16 = f16like((15, 10, 5, 0, 10), 15)
IDX = np.dtype([('step', '<i8'), ('microbatch', '<i4'), ('denoise_index', '<i4'), ('call_index', '<i4'), ('stored', 'u1')])
STATS = np.dtype([('min', '<f8'), ('max', '<f8'), ('mean', '<f8'), ('mean_abs', '<f8'), ('l2', '<f8'),
                  ('nan_count', '<i8'), ('inf_count', '<i8')])
STEPS = np.dtype([('step', '<i8'), ('n_records', '<i8'), ('metrics_rows', '<i8'), ('step_metrics_rows', '<i8'),
                  ('notes_rows', '<i8'), ('time', '<f8'), ('flags', '<u4')])
METRIC = np.dtype([('step', '<i8'), ('site', '<i4'), ('variant', '<i4'), ('denoise_index', '<i4'), ('flags', '<u4'),
                   ('numel', '<i8'), ('mean_abs_diff', '<f8'), ('max_abs_diff', '<f8'), ('rel_max', '<f8'),
                   ('cosine', '<f8'), ('rmse', '<f8'), ('rmse_oracle', '<f8'), ('nan_count', '<i8'),
                   ('inf_count', '<i8'), ('ref_nan_count', '<i8'), ('ref_inf_count', '<i8'), ('worst_index', '<i8'),
                   ('max_ulp_diff', '<u8')])
SMETRIC = np.dtype([('step', '<i8'), ('variant', '<i4'), ('denoise_index', '<i4'), ('n_pairs', '<i8'),
                    ('log_prob_mean_abs_diff', '<f8'), ('ratio_abs_minus_1', '<f8'), ('approx_kl', '<f8')])
NOTE = np.dtype([('step', '<i8'), ('time', '<f8'), ('level', '<i4'), ('text', 'S256')])
NAME = np.dtype([('name', 'S512')])
PDT = np.dtype([('fqn', 'S512'), ('dtype', 'S8')])

def s(v): return np.bytes_(v)

def table(loc, name, dt, chunk, fill=None):
    return loc.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(chunk,), dtype=dt, fillvalue=fill)

def append(ds, rows):
    n = ds.shape[0]; ds.resize((n + len(rows),)); ds[n:] = rows

def to_bits(vals, dt):
    v = np.asarray(vals, dtype=np.float32)
    if dt == 'bf16':
        u = v.view(np.uint32).astype(np.uint64)
        r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)   # RNE (no NaN in this data)
        return r
    if dt == 'fp16':
        return v.astype(np.float16).view(np.uint16)
    return v

def stats(vals):
    x = np.asarray(vals, dtype=np.float64)
    fin = x[np.isfinite(x)]
    return (x[~np.isnan(x)].min(), x[~np.isnan(x)].max(), fin.mean(), np.abs(fin).mean(),
            np.sqrt((fin * fin).sum()), int(np.isnan(x).sum()), int(np.isinf(x).sum()))

def main(path, n_steps, die_mid_step):
    f = h5py.File(path, 'w', libver='latest')
    for k, v in [('format', s('drift-trace')), ('side', s('rollout')), ('run_id', s('py-run')),
                 ('family', s('tiny-dit')), ('plan', s('{"name":"py"}')), ('producer', s('pywriter 1')),
                 ('created', s('2025-01-01T00:00:00Z'))]:
        f.attrs[k] = v
    f.attrs['format_version'] = np.int64(1)
    f.attrs['rank'] = np.int64(0)
    f.attrs['world_size'] = np.int64(1)
    f.attrs['guidance_scale'] = np.float64(1.0)
    sites = [('blocks.0:out', 'bf16', (2, 3)), ('input:latents:post_cast', 'fp16', (4,)), ('output:noise_pred', 'fp32', (5,))]
    g = f.create_group('sites')
    ds = {}
    for i, (name, dt, shape) in enumerate(sites):
        sg = g.create_group(name.replace('%', '%25').replace('/', '%2F'))
        sg.attrs['name'] = s(name); sg.attrs['site_id'] = np.int64(i); sg.attrs['dtype'] = s(dt)
        sg.attrs['shape'] = np.array(shape, dtype='<i8')
        ftype = {'bf16': BF16, 'fp16': FP16, 'fp32': h5t.IEEE_F32LE}[dt]
        space = h5s.create_simple((0,) + shape, (h5s.UNLIMITED,) + shape)
        dcpl = h5p.create(h5p.DATASET_CREATE); dcpl.set_chunk((1,) + shape)
        data = h5d.create(sg.id, b'data', ftype, space, dcpl=dcpl)
        ds[name] = (h5py.Dataset(data), table(sg, 'index', IDX, 256, np.array((-1, -1, -1, -1, 0), IDX)),
                    table(sg, 'stats', STATS, 256), dt, shape, ftype)
    f.create_group('params'); f.create_group('buffers')
    p = f['params'].create_dataset('proj_out.weight', data=np.arange(6, dtype='<f4').reshape(2, 3))
    p.attrs['name'] = s('proj_out.weight'); p.attrs['shape'] = np.array([2, 3], '<i8')
    p.attrs['offset'] = np.array([0, 0], '<i8'); p.attrs['full_shape'] = np.array([2, 3], '<i8')
    pdt = table(f, 'param_dtypes', PDT, 16); append(pdt, np.array([(b'proj_out.weight', b'bf16')], PDT))
    m = f.create_group('metrics')
    steps = table(f, 'steps', STEPS, 64, np.array((-1, 0, 0, 0, 0, 0, 0), STEPS))
    rows = table(m, 'rows', METRIC, 256); msteps = table(m, 'steps', SMETRIC, 64)
    names = table(m, 'site_names', NAME, 64); notes = table(f, 'notes', NOTE, 64)
    append(names, np.array([(n.encode(),) for n, _, _ in sites], NAME))
    status = f.create_dataset('status', data=np.bytes_('recording'), dtype='S512')  # scalar, contiguous
    f.swmr_mode = True
    for step in range(n_steps + (1 if die_mid_step else 0)):
        for i, (name, dt, shape) in enumerate(sites):
            d, ix, st, _, shp, ftype = ds[name]
            vals = (np.arange(int(np.prod(shp)), dtype=np.float32) - 2.5) * (step + 1) * (i + 1) * 0.125
            bits = to_bits(vals, dt).reshape(shp)
            n = d.shape[0]; d.resize((n + 1,) + shp)
            fs = d.id.get_space(); fs.select_hyperslab((n,) + (0,) * len(shp), (1,) + shp)
            d.id.write(h5s.create_simple((1,) + shp), fs, np.ascontiguousarray(bits.reshape((1,) + shp)), mtype=ftype)
            wide = {'bf16': lambda b: (b.astype(np.uint32) << 16).view(np.float32),
                    'fp16': lambda b: b.view(np.float16).astype(np.float32),
                    'fp32': lambda b: b}[dt](bits.reshape(-1))
            append(st, np.array([stats(wide)], STATS))
            append(ix, np.array([(step, 0, -1, 0, 1)], IDX))
            if die_mid_step and step == n_steps and i == 1:
                f.flush()
                import os, signal
                os.kill(os.getpid(), signal.SIGKILL)
        mr = np.zeros(3, METRIC); mr['step'] = step; mr['site'] = [0, 1, 2]; mr['denoise_index'] = -1
        mr['mean_abs_diff'] = [0.5 * step, 1.0, 2.0]; mr['rmse_oracle'] = np.nan
        append(rows, mr)
        append(msteps, np.array([(step, 0, -1, 4, 1e-3, 2e-3, 3e-3)], SMETRIC))
        append(notes, np.array([(step, time.time(), 0, b'ok')], NOTE))
        f.flush()
        append(steps, np.array([(step, 3, rows.shape[0], msteps.shape[0], notes.shape[0], time.time(), 0)], STEPS))
        steps.flush()
    status[()] = np.bytes_('closed'); status.flush()
    f.close()

main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == 'die' if len(sys.argv) > 3 else False)
PY
"$PY" "$T/pywriter.py" "$T/py.h5" 4 || fail "python writer"
"$D" ls --json "$T/py.h5" >"$T/ls.json" || fail "drift ls --json exited $?"
"$PY" - "$T/ls.json" <<'PY' || fail "drift ls --json content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d['format'] == 'drift-trace' and d['format_version'] == 1, d
assert d['side'] == 'rollout' and d['run_id'] == 'py-run' and d['world_size'] == 1, d
assert d['plan'] == {'name': 'py'}, d['plan']
assert d['steps'] == {'committed': 4, 'first': 0, 'last': 3}, d['steps']
sites = {s['name']: s for s in d['sites']}
assert sites['blocks.0:out']['dtype'] == 'bf16' and sites['blocks.0:out']['shape'] == [2, 3], sites
assert sites['input:latents:post_cast']['dtype'] == 'fp16', sites
assert sites['output:noise_pred']['dtype'] == 'fp32', sites
assert all(s['records'] == 4 and s['tensors'] for s in d['sites']), sites
assert d['params'][0]['fqn'] == 'proj_out.weight' and d['params'][0]['forward_dtype'] == 'bf16', d['params']
assert d['metrics'] == {'rows': 12, 'sites': 3, 'step_rows': 4}, d['metrics']
assert d['notes'] == 4, d['notes']
PY
"$D" ls "$T/py.h5" >"$T/ls.txt" || fail "drift ls text"
grep -q 'blocks.0:out' "$T/ls.txt" || fail "ls text lacks the site"
"$D" check "$T/py.h5" >"$T/check.txt"; rc=$?
[ $rc -eq 0 ] || { cat "$T/check.txt"; fail "drift check of the h5py trace exited $rc"; }
"$D" check --json "$T/py.h5" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"] and d["committed_steps"]==4 and d["committed_records"]==12, d' \
  || fail "check --json"

# ---- 2. exit 2: not a trace / unreadable / hostile -------------------------
echo "plain text" >"$T/text.h5"
err=$("$D" check "$T/text.h5" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "check of a text file exited $rc, expected 2"
echo "$err" | grep -q 'not an HDF5 file' || fail "message: $err"
err=$("$D" check "$T/absent.h5" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "check of a missing file exited $rc, expected 2"
err=$("$D" ls "$T/absent.h5" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "ls of a missing file exited $rc, expected 2"
"$D" check >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "check without a file exited $rc, expected 2"
"$D" check "$T/py.h5" --bogus >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "unknown option exited $rc, expected 2"
# site data of int32 instead of bf16
cp "$T/py.h5" "$T/int.h5"
"$PY" - "$T/int.h5" <<'PY' || fail "crafting int.h5"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], 'r+') as f:
    g = f['sites/blocks.0:out']
    del g['data']
    g.create_dataset('data', data=np.zeros((4, 2, 3), dtype='<i4'))
PY
# (one damaged site: the trace opens, the site is reported damaged, the check fails: exit 1)
err=$("$D" check "$T/int.h5" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "check of int32 site data exited $rc, expected 1 (a damaged site)"
echo "$err" | grep -q 'site "blocks.0:out" is damaged' || fail "int32 site not reported damaged: $err"
echo "$err" | grep -q 'int.h5' && echo "$err" | grep -q 'sites/blocks.0:out/data' && echo "$err" | grep -q 'expected bf16' \
  || fail "int32 message does not name file, object and expectation: $err"
# a 16-bit float that is neither bf16 nor fp16
cp "$T/py.h5" "$T/odd.h5"
"$PY" - "$T/odd.h5" <<'PY' || fail "crafting odd.h5"
import sys, h5py, numpy as np
from h5py import h5t, h5s, h5d
with h5py.File(sys.argv[1], 'r+') as f:
    g = f['sites/blocks.0:out']
    del g['data']
    t = h5t.IEEE_F32LE.copy(); t.set_fields(15, 9, 6, 0, 9); t.set_offset(0); t.set_precision(16); t.set_size(2); t.set_ebias(31)
    h5d.create(g.id, b'data', t, h5s.create_simple((4, 2, 3)))
PY
# (one damaged site: ls lists it as DAMAGED with the reason, check fails with exit 1)
err=$("$D" ls "$T/odd.h5" 2>&1); rc=$?
[ $rc -eq 0 ] || fail "ls of odd float exited $rc, expected 0 (the site listed as damaged)"
echo "$err" | grep -q 'blocks.0:out .*DAMAGED: .*bias 31' || fail "odd float not listed as damaged with its reason: $err"
"$D" check "$T/odd.h5" >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "check of odd float exited $rc, expected 1"
# missing root attribute
cp "$T/py.h5" "$T/noside.h5"
"$PY" -c 'import sys,h5py; f=h5py.File(sys.argv[1],"r+"); del f.attrs["side"]; f.close()' "$T/noside.h5" || fail "crafting"
err=$("$D" check "$T/noside.h5" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "missing side exited $rc, expected 2"
echo "$err" | grep -q '"side"' || fail "missing side message: $err"

# ---- 3. exit 1: a tensor that contradicts its stats row --------------------
cp "$T/py.h5" "$T/corrupt.h5"
"$PY" -c 'import sys,h5py,numpy as np; f=h5py.File(sys.argv[1],"r+"); d=f["sites/output:noise_pred/data"]; d[1]=np.full(5,7,"f4"); f.close()' "$T/corrupt.h5" \
  || fail "crafting corrupt.h5"
out=$("$D" check "$T/corrupt.h5"); rc=$?
[ $rc -eq 1 ] || fail "check of a corrupted tensor exited $rc, expected 1"
echo "$out" | grep -q 'does not match its stats row' || fail "corrupt message: $out"

rm -rf "$T"
echo "ok"
