#!/usr/bin/env python3
"""Hostile trace seeds for fuzz_trace (issue 23): the small clean seed with
one structural attack each (external links, soft/hard links, external raw
storage, a virtual dataset, an unknown filter, an extended table), made with
h5py. Each stays under fuzz_trace's 64 KiB input limit. The same attacks at
full size are tests/integration/hostile_files.py.

usage: gen_hostile_seeds.py CLEAN_SEED OUT_DIR
"""
import os
import shutil
import sys

import h5py
import numpy as np

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)


def replace(f, path, obj):
    del f[path]
    f[path] = obj


def vds(f):
    d = f["sites/blocks.0.ffn:out/data"]
    shape, dt = d.shape, d.dtype
    lay = h5py.VirtualLayout(shape=shape, dtype=dt)
    lay[...] = h5py.VirtualSource("other.h5", "/sites/blocks.0.ffn:out/data", shape=shape, dtype=dt)
    del f["sites/blocks.0.ffn:out/data"]
    f["sites/blocks.0.ffn:out"].create_virtual_dataset("data", lay, fillvalue=0)


def ext_storage(f):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_external(b"/etc/passwd", 0, 512)
    t = h5py.h5t.C_S1.copy()
    t.set_size(512)
    h5py.h5d.create(f.id, b"status", t, h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)


def unknown_filter(f):
    d = f["sites/blocks.0.ffn:out/data"]
    shape, dt = d.shape, d.dtype
    del f["sites/blocks.0.ffn:out/data"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((1,) + shape[1:])
    dcpl.set_filter(40000, h5py.h5z.FLAG_OPTIONAL, ())
    sp = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED,) + shape[1:])
    ds = h5py.h5d.create(f["sites/blocks.0.ffn:out"].id, b"data", h5py.h5t.py_create(dt), sp, dcpl=dcpl)
    raw = np.zeros((1,) + shape[1:], dtype=dt).tobytes()
    for i in range(shape[0]):
        ds.write_direct_chunk((i,) + (0,) * (len(shape) - 1), raw, 0)


attacks = {
    "elink-site": lambda f: replace(f, "sites/blocks.0.ffn:out", h5py.ExternalLink("other.h5", "/sites/x")),
    "elink-data": lambda f: replace(f, "sites/blocks.0.ffn:out/data", h5py.ExternalLink("/etc/passwd", "/x")),
    "elink-steps": lambda f: replace(f, "steps", h5py.ExternalLink("../other.h5", "/steps")),
    "elink-graph": lambda f: replace(f, "graph", h5py.ExternalLink("/etc/passwd", "/graph")),
    "elink-param": lambda f: replace(f, "params/proj_out.weight", h5py.ExternalLink("other.h5", "/p")),
    "softlink-stats": lambda f: replace(f, "sites/blocks.0.ffn:out/stats", h5py.SoftLink("/sites/output:noise_pred/stats")),
    "hardlink-stats": lambda f: replace(f, "sites/blocks.0.ffn:out/stats", f["sites/output:noise_pred/stats"]),
    "external-status": ext_storage,
    "vds-data": vds,
    "unknown-filter": unknown_filter,
    "steps-extended": lambda f: f["steps"].resize((19_000_000,)),
}
for name, fn in attacks.items():
    p = os.path.join(out, "hostile-" + name + ".h5")
    shutil.copy(src, p)
    with h5py.File(p, "r+") as f:
        fn(f)
    size = os.path.getsize(p)
    if size > 65536:
        print("%s: %d bytes, above fuzz_trace's 64 KiB limit: dropped" % (p, size))
        os.unlink(p)
    else:
        print("%s: %d bytes" % (p, size))
