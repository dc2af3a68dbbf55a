#!/usr/bin/python3
"""Copy a trace and add the emulator's value of every module's output as a site, so that
`drift replay OUT.h5 --device cpu` compares drift with the emulator at every module site
(the recorded sites keep the recording). Usage: emulate_sites.py TRACE OUT.h5 [KEY=VALUE ...]
(emulator options, e.g. sdpa_tile=128)."""
import os, sys, shutil
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_emulate import *
src, dst = sys.argv[1], sys.argv[2]
opts = {}
for a in sys.argv[3:]:
    k, v = a.split('='); opts[k] = eval(v)
shutil.copy(src, dst)
import os; os.chmod(dst, 0o644)
envs = []
for step in (0, 1):
    e = Emu(src, step, opts); e.run(); envs.append(e)
e = envs[0]
mods = []
for n in e.doc['nodes']:
    for m in (n.get('module_stack') or []):
        if m not in mods: mods.append(m)
f = h5py.File(dst, 'r+')
bftype = None
for s_ in f['sites']:
    if f['sites'][s_].attrs['dtype'] == b'bf16': bftype = f['sites'][s_]['data'].id.get_type()
sid = max(int(f['sites'][s].attrs['site_id']) for s in f['sites']) + 1
added = 0
for m in mods:
    s = m + ':out'
    if s in f['sites']:
        continue
    nn = site_node(e, m)
    if nn is None: continue
    vals = [ee.env.get(nn) for ee in envs]
    if any(v is None or isinstance(v, list) for v in vals): continue
    dt = e.meta[nn]['val']['dtype']
    if dt not in ('bfloat16', 'float32', 'float16'): continue
    g = f['sites'].create_group(s)
    g.attrs['dtype'] = np.bytes_({'bfloat16': 'bf16', 'float32': 'fp32', 'float16': 'fp16'}[dt])
    g.attrs['name'] = np.bytes_(s)
    shp = np.asarray(vals[0]).shape
    g.attrs['shape'] = np.array(shp, dtype=np.int64)
    g.attrs['site_id'] = sid; sid += 1
    data = np.stack([np.asarray(v, np.float32) for v in vals])
    if dt == 'float32':
        g.create_dataset('data', data=data, chunks=(1,) + shp, maxshape=(None,) + shp)
    else:
        tid = bftype.copy()
        sp = h5py.h5s.create_simple(data.shape, (h5py.h5s.UNLIMITED,) + shp)
        pl = h5py.h5p.create(h5py.h5p.DATASET_CREATE); pl.set_chunk((1,) + shp)
        ds = h5py.h5d.create(g.id, b'data', tid, sp, pl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data, np.float32), mtype=h5py.h5t.NATIVE_FLOAT)
    ref = f['sites/output:noise_pred']
    g.create_dataset('index', data=ref['index'][()], maxshape=(None,))
    st = ref['stats'][()].copy()
    for i in range(2):
        x = data[i].astype(np.float64)
        st[i] = (x.min(), x.max(), x.mean(), np.abs(x).mean(), np.sqrt((x * x).sum()), 0, 0)
    g.create_dataset('stats', data=st, maxshape=(None,))
    added += 1
# the emulator's own values at the recorded sites too, under another name is not possible: keep recorded ones
steps = f['steps'][()]
steps['n_records'] += added
del f['steps']; f.create_dataset('steps', data=steps, maxshape=(None,))
f.close()
print('added', added, 'sites')
