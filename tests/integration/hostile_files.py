#!/usr/bin/env python3
"""Traces from strangers (issue 23, docs/RELIABILITY.md "Traces from
strangers"): structurally valid HDF5 files crafted with h5py from a real
trace, each one an attack on "drift reads only the files it is given" or on
bounded memory. Every drift command that reads a trace (ls, ls --json,
check, compare, top --batch, replay) must exit 2 naming the object, never
open the other file (checked with strace -e openat when present, and by a
canary that a followed link would read), finish within the time limit and
stay under the memory limit stated below.

usage: hostile_files.py DRIFT_BIN PLANS_DIR WORK_DIR [--keep-corpus DIR]
"""
import os
import resource
import shutil
import stat
import subprocess
import sys
import time
import zlib

import h5py
import numpy as np

DRIFT, PLANS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
CORPUS = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--keep-corpus" else None
TIME_LIMIT_S = 20  # each command, whole file
RSS_LIMIT_MB = 400  # each command (the clean baseline needs ~30 MB)
STRACE = shutil.which("strace")
# An ASan/UBSan build runs ~4x slower and maps shadow memory: the bounds scale; and
# LeakSanitizer cannot run under ptrace, so traced commands run with leak checks off
# (the untraced runs of the same cases keep them).
ASAN = b"libasan" in subprocess.run(["ldd", DRIFT], capture_output=True).stdout
if ASAN:
    TIME_LIMIT_S, RSS_LIMIT_MB = 4 * TIME_LIMIT_S, 4 * RSS_LIMIT_MB
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def run(args, env=None, timeout=TIME_LIMIT_S, trace_open=False):
    """Runs drift; returns (rc, stdout, stderr, seconds, max_rss_mb, opened)."""
    cmd = [DRIFT] + args
    log = None
    if trace_open and STRACE:
        log = os.path.join(WORK, "strace.log")
        cmd = [STRACE, "-f", "-qq", "-e", "trace=openat,open", "-o", log] + cmd
        if ASAN:
            env = dict(env if env is not None else os.environ)
            env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", e.stderr or b""
    dt = time.time() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    opened = []
    if log and os.path.exists(log):
        for line in open(log, errors="replace"):
            if "openat(" in line or "open(" in line:
                q = line.split('"')
                if len(q) > 1:
                    opened.append(q[1])
    # ru_maxrss of children is the max over all children so far: report it only if it grew
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), dt, (rss if rss > before else 0) / 1024.0, opened


def record(path, steps=2):
    rc, out, err, *_ = run(["record", "--synthetic", "tiny-dit", "--steps", str(steps), "--trainer-plan",
                            os.path.join(PLANS, "wan2_2.json"), "--rollout-plan",
                            os.path.join(PLANS, "wan2_2_no_norm2.json"), "-o", path])
    if rc != 0:
        print("cannot record a base trace:", err)
        sys.exit(1)


os.makedirs(WORK, exist_ok=True)
BASE = os.path.join(WORK, "base.h5")
OTHER = os.path.join(WORK, "other", "other.h5")  # another user's trace: must never be opened
os.makedirs(os.path.dirname(OTHER), exist_ok=True)
record(BASE)
record(OTHER)
ROLL = os.path.join(WORK, "base.rollout.h5")
CANARY_DIR = os.path.join(WORK, "canary")
os.makedirs(CANARY_DIR, exist_ok=True)
FIFO = os.path.join(CANARY_DIR, "fifo")
if not os.path.exists(FIFO):
    os.mkfifo(FIFO)

with h5py.File(BASE, "r") as f:
    SITE = sorted(f["sites"].keys())[0]
    SITE2 = sorted(f["sites"].keys())[1]
    PARAM = sorted(f["params"].keys())[0]


FILES = os.path.join(WORK, "files")  # "../other/other.h5" from here is OTHER
os.makedirs(FILES, exist_ok=True)


def craft(name, fn):
    p = os.path.join(FILES, name + ".h5")
    shutil.copy(BASE, p)
    shutil.copy(ROLL, os.path.join(FILES, name + ".rollout.h5"))  # replay --ref rollout reads it
    with h5py.File(p, "r+") as f:
        fn(f)
    if CORPUS and os.path.getsize(p) < 4 << 20:
        shutil.copy(p, os.path.join(CORPUS, "hostile-" + name + ".h5"))
    return p


def replace(f, path, obj):
    del f[path]
    f[path] = obj


cases = []  # (name, file, expected object in the message, expected phrase, foreign paths)


def case(name, fn, obj, phrase, foreign):
    cases.append((name, craft(name, fn), obj, phrase, foreign))


# ---- 6: external links anywhere ------------------------------------------------
case("elink-site", lambda f: replace(f, "sites/" + SITE, h5py.ExternalLink(OTHER, "/sites/" + SITE)),
     "/sites/" + SITE, "external link", [OTHER])
case("elink-site-data", lambda f: replace(f, "sites/%s/data" % SITE, h5py.ExternalLink(OTHER, "/sites/%s/data" % SITE)),
     "/sites/%s/data" % SITE, "external link", [OTHER])
case("elink-param", lambda f: replace(f, "params/" + PARAM, h5py.ExternalLink("../other/other.h5", "/params/" + PARAM)),
     "/params/" + PARAM, "external link", [OTHER])
case("elink-graph", lambda f: replace(f, "graph", h5py.ExternalLink(OTHER, "/graph")), "/graph", "external link", [OTHER])
case("elink-steps", lambda f: replace(f, "steps", h5py.ExternalLink(OTHER, "/steps")), "/steps", "external link", [OTHER])
case("elink-sites", lambda f: replace(f, "sites", h5py.ExternalLink(OTHER, "/sites")), "/sites", "external link", [OTHER])
case("elink-passwd", lambda f: replace(f, "graph", h5py.ExternalLink("/etc/passwd", "/x")), "/graph", "external link",
     ["/etc/passwd"])
case("elink-fifo", lambda f: replace(f, "graph", h5py.ExternalLink(FIFO, "/x")), "/graph", "external link", [FIFO])
# soft link, and a second hard link, where a dataset is expected
case("softlink-stats", lambda f: replace(f, "sites/%s/stats" % SITE, h5py.SoftLink("/sites/%s/stats" % SITE2)),
     "/sites/%s/stats" % SITE, "soft link", [])
case("hardlink-stats", lambda f: replace(f, "sites/%s/stats" % SITE, f["sites/%s/stats" % SITE2]),
     "/stats", "hard links", [])


# ---- 7: external raw storage ------------------------------------------------------
def ext_status(f):
    del f["status"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_external(b"/etc/passwd", 0, 512)
    t = h5py.h5t.C_S1.copy()
    t.set_size(512)
    h5py.h5d.create(f.id, b"status", t, h5py.h5s.create(h5py.h5s.SCALAR), dcpl=dcpl)


case("external-status", ext_status, "/status", "external file", ["/etc/passwd"])


# ---- 8: virtual datasets over another trace / a missing file ------------------------
def vds(src_path):
    def fn(f):
        d = f["sites/%s/data" % SITE]
        shape, dt = d.shape, d.dtype
        lay = h5py.VirtualLayout(shape=shape, dtype=dt)
        lay[...] = h5py.VirtualSource(src_path, "/sites/%s/data" % SITE, shape=shape, dtype=dt)
        del f["sites/%s/data" % SITE]
        f["sites/" + SITE].create_virtual_dataset("data", lay, fillvalue=0)
    return fn


case("vds-other", vds(OTHER), "/sites/%s/data" % SITE, "virtual dataset", [OTHER])
case("vds-missing", vds(os.path.join(CANARY_DIR, "missing.h5")), "/sites/%s/data" % SITE, "virtual dataset",
     [os.path.join(CANARY_DIR, "missing.h5")])


# ---- 9: an unknown filter (a plugin directory with a marker library) ------------------
def unknown_filter(f):
    d = f["sites/%s/data" % SITE]
    shape, dt = d.shape, d.dtype
    del f["sites/%s/data" % SITE]
    g = f["sites/" + SITE]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    chunk = (1,) + shape[1:]
    dcpl.set_chunk(chunk)
    dcpl.set_filter(40000, h5py.h5z.FLAG_OPTIONAL, ())
    sp = h5py.h5s.create_simple(shape, (h5py.h5s.UNLIMITED,) + shape[1:])
    ds = h5py.h5d.create(g.id, b"data", h5py.h5t.py_create(dt), sp, dcpl=dcpl)
    raw = np.zeros(chunk, dtype=dt).tobytes()
    for i in range(shape[0]):
        ds.write_direct_chunk((i,) + (0,) * (len(shape) - 1), raw, 0)  # filter mask 0: "filter 40000 applied"


case("unknown-filter", unknown_filter, "/sites/%s/data" % SITE, "filter 40000", [])


# ---- 10: tables extended but never written; an oversized compressed chunk --------------
case("steps-extended", lambda f: f["steps"].resize((19_000_000,)), "/steps", "rows", [])


def big_chunk(f):
    n = 1 << 25  # 128 MiB of fp32 in one chunk: above the 64 MiB limit
    g = f["sites/" + SITE]
    del g["data"]
    g.attrs["shape"] = np.array([n], dtype=np.int64)
    g.attrs["dtype"] = np.bytes_("fp32")
    ds = g.create_dataset("data", shape=(f["sites/%s/index" % SITE].shape[0], n), maxshape=(None, n),
                          chunks=(1, n), dtype=np.float32, compression="gzip")
    z = zlib.compress(bytes(4 * n), 1)
    for i in range(ds.shape[0]):
        ds.id.write_direct_chunk((i, 0), z, 0)


case("gzip-bomb", big_chunk, "/sites/%s/data" % SITE, "chunks larger", [])

# ---- the commands ----------------------------------------------------------------------------
COMMANDS = [
    ("ls", lambda p: ["ls", p]),
    ("ls --json", lambda p: ["ls", p, "--json"]),
    ("check", lambda p: ["check", p]),
    ("compare", lambda p: ["compare", p, ROLL]),
    ("top --batch", lambda p: ["top", p, "--batch", "--format", "json"]),
    ("replay", lambda p: ["replay", p, "--plan", os.path.join(PLANS, "wan2_2.json"), "--ref", "rollout"]),
]

# the clean base passes every command (else the cases below prove nothing)
for label, mk in COMMANDS:
    rc, out, err, dt, rss, _ = run(mk(BASE))
    if rc not in (0, 1):
        fail("baseline %s exited %s: %s" % (label, rc, err[-300:]))

env_plugin = None
cc = shutil.which("cc") or shutil.which("gcc")
marker = os.path.join(CANARY_DIR, "plugin-ran")
if cc:
    pdir = os.path.join(WORK, "plugins")
    os.makedirs(pdir, exist_ok=True)
    src = os.path.join(pdir, "marker.c")
    with open(src, "w") as fh:
        fh.write('#include <stdio.h>\n__attribute__((constructor)) static void m(void) {'
                 ' FILE *f = fopen("%s", "w"); if (f) fclose(f); }\n' % marker)
    if subprocess.run([cc, "-shared", "-fPIC", "-o", os.path.join(pdir, "libmarker.so"), src]).returncode == 0:
        env_plugin = dict(os.environ, HDF5_PLUGIN_PATH=pdir)
if not env_plugin:
    print("note: no C compiler: the plugin-directory marker is not checked (the filter refusal still is)")

worst_dt, worst_tag = 0.0, ""
for name, path, obj, phrase, foreign in cases:
    nfail = len(failures)
    for label, mk in COMMANDS:
        env = env_plugin if name == "unknown-filter" else None
        if os.path.exists(marker):
            os.unlink(marker)
        rc, out, err, dt, rss, opened = run(mk(path), env=env, trace_open=bool(foreign))
        tag = "%s: drift %s" % (name, label)
        if dt > worst_dt:
            worst_dt, worst_tag = dt, tag
        if rc != 2:
            fail("%s exited %s, expected 2 (stderr: %s)" % (tag, rc, err.strip()[-300:]))
            continue
        if obj not in err or phrase not in err:
            fail("%s: the message does not name %s / say '%s': %s" % (tag, obj, phrase, err.strip()[-400:]))
        if dt > TIME_LIMIT_S:
            fail("%s took %.1f s (limit %d)" % (tag, dt, TIME_LIMIT_S))
        if rss > RSS_LIMIT_MB:
            fail("%s used %.0f MB (limit %d)" % (tag, rss, RSS_LIMIT_MB))
        for fp in foreign:  # every foreign name is unique: other.h5, missing.h5, fifo, /etc/passwd
            if any(os.path.basename(o) == os.path.basename(fp) for o in opened):
                fail("%s opened %s" % (tag, fp))
        if name == "unknown-filter" and os.path.exists(marker):
            fail("%s: a library of the plugin directory was loaded (its constructor ran)" % tag)
        if "\x1b" in out or "\x1b" in err:
            fail("%s printed an escape character" % tag)
    if len(failures) == nfail:
        print("ok   %-16s every command exits 2 naming %s%s" % (name, obj, " (strace: nothing foreign opened)" if foreign and STRACE else ""))

# ---- 2: check --repair of a file that reaches outside: refused, nothing written anywhere ---------
import hashlib


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest() if os.path.isfile(path) else None


nfail, n_repair = len(failures), 0
other_before = digest(OTHER)
for name, path, obj, phrase, foreign in cases:
    before = digest(path)
    rc, out, err, dt, rss, opened = run(["check", "--repair", path], trace_open=True)
    n_repair += 1
    if rc != 2 or obj not in err or "refused" not in err:
        fail("%s: check --repair exited %s, expected 2 naming %s, refused: %s" % (name, rc, obj, err.strip()[-300:]))
    if digest(path) != before:
        fail("%s: check --repair changed the refused file" % name)
    for fp in foreign:
        if any(os.path.basename(o) == os.path.basename(fp) for o in opened):
            fail("%s: check --repair opened %s" % (name, fp))
if digest(OTHER) != other_before:
    fail("check --repair of the crafted files changed the other trace they point to")
if len(failures) == nfail:
    print("ok   check --repair of the %d crafted files: exit 2, nothing touched (the files and %s unchanged)" %
          (n_repair, os.path.basename(OTHER)))

# ---- 14: control characters from a file are escaped ----------------------------------------------
def esc(f):
    f.attrs["run_id"] = np.bytes_(b"run\x1b]0;owned\x07\x1b[2J\x9b1m")
    f.attrs["family"] = np.bytes_(b"tiny-dit\r\x1b[31m")


p = craft("escape-attrs", esc)
nfail = len(failures)
for label, args in (("ls", ["ls", p]), ("ls --json", ["ls", p, "--json"]), ("check", ["check", p])):
    rc, out, err, *_ = run(args)
    if "\x1b" in out or "\x1b" in err or "\x07" in out or "\r" in out:
        fail("escape-attrs: drift %s printed a control character from the file" % label)
    elif rc not in (0, 1):
        fail("escape-attrs: drift %s exited %s" % (label, rc))
if len(failures) == nfail:
    print("ok   escape-attrs     ls / ls --json / check print control characters escaped")

# ---- 15: check finds a plan or graph that is not JSON, a missing /status --------------------------
for name, fn, want in (
        ("plan-not-json", lambda f: f.attrs.__setitem__("plan", np.bytes_(b"{not json")), "plan"),
        ("graph-not-json", lambda f: replace(f, "graph", np.bytes_(b"[1, 2")), "/graph"),
        ("status-missing", lambda f: f.__delitem__("status"), "/status")):
    p = craft(name, fn)
    rc, out, err, *_ = run(["check", p])
    if rc != 1 or want not in out:
        fail("%s: check exited %s, expected 1 with a problem naming %s: %s" % (name, rc, want, (out + err)[-400:]))
    else:
        print("ok   %-16s check reports it (exit 1)" % name)

if failures:
    print("%d failure(s)" % len(failures))
    sys.exit(1)
print("hostile_files: %d crafted files x %d commands, all refused with exit 2 naming the object" %
      (len(cases), len(COMMANDS)))
# the figures of docs/RELIABILITY.md (max RSS: over every drift process of this test, clean baselines included)
print("hostile_files: slowest %.2f s (%s; limit %d s), max RSS %.0f MB (limit %d MB)" %
      (worst_dt, worst_tag, TIME_LIMIT_S, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0,
       RSS_LIMIT_MB))
