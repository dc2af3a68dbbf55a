# Rewrites /params_ref of a drift trace (issue 34 item 10): its weights_root
# and, optionally, every tensor's file. python3 integrity_params_ref.py TRACE ROOT [FILE]
import json, sys
import h5py, numpy as np
path, root = sys.argv[1], sys.argv[2]
with h5py.File(path, "r+", libver="latest") as f:
    doc = json.loads(f["params_ref"][()].rstrip(b"\0").decode())
    doc["weights_root"] = root
    if len(sys.argv) > 3:
        for t in doc["tensors"]:
            t["file"] = sys.argv[3]
    b = json.dumps(doc, separators=(",", ":")).encode()
    del f["params_ref"]
    tid = h5py.h5t.C_S1.copy(); tid.set_size(len(b)); tid.set_strpad(h5py.h5t.STR_NULLPAD); tid.set_cset(h5py.h5t.CSET_UTF8)
    ds = h5py.h5d.create(f.id, b"params_ref", tid, h5py.h5s.create(h5py.h5s.SCALAR))
    ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.frombuffer(b, dtype="S%d" % len(b)).reshape(()), mtype=tid)
