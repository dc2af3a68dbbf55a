#!/usr/bin/env python3
"""Hostile trace seeds for fuzz_trace (issue 23): the small clean seed with
one structural attack each (external links, soft/hard links, external raw
storage, a virtual dataset, one whose global heap collection makes HDF5's
H5Dopen2 loop, an unknown filter, an extended table), made with h5py, and
the clean seed rebuilt with version-1 object headers (formats/trace_ohdr.c
parses both versions). Each stays under fuzz_trace's 64 KiB input limit. The same attacks at
full size are tests/integration/hostile_files.py.

usage: gen_hostile_seeds.py CLEAN_SEED OUT_DIR
"""
import os
import shutil
import struct
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


def zero_heap_free_space(p):
    """The free-space object of p's first global heap collection gets size 0:
    HDF5 1.10-1.14 then decodes the collection forever (H5Dopen2 hangs)."""
    b = bytearray(open(p, "rb").read())
    off = b.find(b"GCOL\x01")
    size = struct.unpack_from("<Q", b, off + 8)[0]
    q = 16
    while off >= 0 and q + 16 <= size:
        idx, n = struct.unpack_from("<H", b, off + q)[0], struct.unpack_from("<Q", b, off + q + 8)[0]
        if idx == 0:
            struct.pack_into("<Q", b, off + q + 8, 0)
            open(p, "wb").write(b)
            return
        q += 16 + (n + 7) // 8 * 8
    sys.exit("%s: no global heap free space to patch" % p)


def rebuild_v1(s, d):
    """Copies every group, dataset and attribute of s into d, created anew
    (h5py's copy would keep the version-2 headers)."""
    for k in s.attrs:
        d.attrs.create(k, s.attrs[k], dtype=s.attrs.get_id(k).dtype)
    for k in s:
        o = s[k]
        if isinstance(o, h5py.Group):
            rebuild_v1(o, d.create_group(k))
            continue
        kw = dict(chunks=o.chunks, maxshape=o.maxshape) if o.chunks else {}
        n = d.create_dataset(k, data=o[()], dtype=o.dtype, **kw)
        for a in o.attrs:
            n.attrs.create(a, o.attrs[a], dtype=o.attrs.get_id(a).dtype)


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
    "vds-heap-loop": vds,
    "unknown-filter": unknown_filter,
    "steps-extended": lambda f: f["steps"].resize((19_000_000,)),
}
for name, fn in attacks.items():
    p = os.path.join(out, "hostile-" + name + ".h5")
    shutil.copy(src, p)
    with h5py.File(p, "r+") as f:
        fn(f)
    if name == "vds-heap-loop":
        zero_heap_free_space(p)
    size = os.path.getsize(p)
    if size > 65536:
        print("%s: %d bytes, above fuzz_trace's 64 KiB limit: dropped" % (p, size))
        os.unlink(p)
    else:
        print("%s: %d bytes" % (p, size))

p = os.path.join(out, "v1-headers.h5")
with h5py.File(src, "r") as s, h5py.File(p, "w", libver="earliest") as d:
    rebuild_v1(s, d)
print("%s: %d bytes" % (p, os.path.getsize(p)))
