# Replaces /graph of a drift trace (issue 34 item 17): "deep" (65 nested arrays) or N (a valid JSON object of about N bytes).
import h5py, sys, numpy as np
path, kind = sys.argv[1], sys.argv[2]
if kind == "deep":
    s = "[" * 65 + "]" * 65
else:
    n = int(kind)
    s = '{"pad": "' + "x" * n + '"}'
b = s.encode()
with h5py.File(path, "r+", libver="latest") as f:
    old = f["graph"]
    t = old.id.get_type()
    del f["graph"]
    tid = h5py.h5t.C_S1.copy(); tid.set_size(len(b)); tid.set_strpad(h5py.h5t.STR_NULLPAD); tid.set_cset(h5py.h5t.CSET_UTF8)
    sp = h5py.h5s.create(h5py.h5s.SCALAR)
    ds = h5py.h5d.create(f.id, b"graph", tid, sp)
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.frombuffer(b, dtype=f"S{len(b)}").reshape(()), mtype=tid)
