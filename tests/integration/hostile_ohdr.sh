#!/usr/bin/env bash
# Dataset headers read before HDF5 decodes them (formats/trace_ohdr.c,
# docs/RELIABILITY.md "Traces from strangers"): HDF5 1.10-1.14's H5Dopen2
# loops forever on a virtual dataset whose global heap collection has a
# free-space object of size 0. drift finds the layout in the object header
# itself first and exits 2 naming the dataset, never calling H5Dopen2 on it:
#   1. the fuzz_trace reproducer (tests/data/regress/fuzz_trace/
#      timeout-h5dopen-global-heap-loop.h5, cut short; padded to its stored
#      end as repair does): every command exits 2, check --repair touches
#      nothing and leaves nothing behind;
#   2. a merge index (virtual datasets allowed) whose global heap collection
#      is patched that way: h5dump itself hangs on it (the file is a real
#      trap), every drift command exits 2 naming the collection's fault;
#   3. version-1 object headers and a version-0 superblock (a trace rebuilt
#      by h5py with libver="earliest"): nothing in them is checksummed and
#      HDF5 1.10 crashes on corrupt ones (fuzz_trace), so they are refused.
# Bounds: every command under `timeout 20` (each took < 0.1 s here) and
# `ulimit -v` 2 GiB (not under ASan, which reserves more).
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/hostile_ohdr.$$"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import h5py' 2>/dev/null || { echo "SKIP: $PY lacks h5py"; exit 77; }
mkdir -p "$W"
PL="$T/plans"
REPRO="$T/regress/fuzz_trace/timeout-h5dopen-global-heap-loop.h5"
[ -f "$REPRO" ] || fail "missing $REPRO"
asan=0; ldd "$D" 2>/dev/null | grep -q libasan && asan=1

# run NAME EXPECTED_RC PATTERN CMD...: CMD under timeout 20 (and a memory
# limit), its exit status EXPECTED_RC and stderr matching PATTERN.
run() {
  local name="$1" want="$2" pat="$3" rc
  shift 3
  ( [ $asan = 1 ] || ulimit -v 2097152; timeout 20 "$@" >"$W/out" 2>"$W/err" ); rc=$?
  [ $rc -eq 124 ] && fail "$name: still running after 20 s (the H5Dopen2 loop)"
  [ $rc -eq "$want" ] || fail "$name: exit $rc, expected $want: $(head -c 400 "$W/err")"
  [ -z "$pat" ] || grep -q -- "$pat" "$W/err" || fail "$name: stderr lacks \"$pat\": $(head -c 400 "$W/err")"
}

# 1. the reproducer
cp "$REPRO" "$W/cut.h5"
cp "$REPRO" "$W/padded.h5"
truncate -s 32768 "$W/padded.h5" # its superblock's end of file: what repair's copy is extended to
OBJ='padded.h5:/sites/blocks.0.ffn:out/data'
for c in "ls" "ls --json" "check" "compare $W/padded.h5" "top --batch --format json" "replay --ref trainer"; do
  # shellcheck disable=SC2086
  run "$c of the reproducer" 2 "found in its object header; not opened" "$D" $c "$W/padded.h5"
  grep -qF "$OBJ" "$W/err" || fail "$c does not name $OBJ: $(head -c 300 "$W/err")"
done
sum="$(sha256sum <"$W/cut.h5")"
run "check --repair of the cut-short reproducer" 2 "found in its object header" "$D" check --repair "$W/cut.h5"
[ "$(sha256sum <"$W/cut.h5")" = "$sum" ] || fail "check --repair changed the reproducer"
left="$(cd "$W" && ls | grep -E 'drift-repair|drift-tmp|\.lock$' || true)"
[ -z "$left" ] || fail "check --repair left $left behind"
echo "ok   the H5Dopen2-loop reproducer: ls, ls --json, check, compare, top, replay exit 2 naming $OBJ; repair touches nothing"

# 2. a merge index whose global heap loops
"$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json" \
  -o "$W/r0.h5" >/dev/null 2>&1 || fail "record"
"$D" merge "$W/r0.h5" -o "$W/idx.h5" >/dev/null 2>&1 || fail "merge"
run "ls of the clean index" 0 "" "$D" ls "$W/idx.h5"
"$PY" - "$W/idx.h5" "$W/loop.h5" <<'PYEOF' || fail "crafting the looping heap"
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
off = b.find(b"GCOL\x01")                       # the first global heap collection
assert off > 0, "no global heap collection in the index"
size = struct.unpack_from("<Q", b, off + 8)[0]
p = 16                                          # collection header: GCOL, version, 3 reserved, size
while p + 16 <= size:
    idx = struct.unpack_from("<H", b, off + p)[0]
    n = struct.unpack_from("<Q", b, off + p + 8)[0]
    if idx == 0:                                # the free-space object: its size set to 0
        struct.pack_into("<Q", b, off + p + 8, 0)
        open(sys.argv[2], "wb").write(b)
        sys.exit(0)
    p += 16 + (n + 7) // 8 * 8
sys.exit("no free-space object")
PYEOF
if command -v h5dump >/dev/null; then
  timeout 3 h5dump -H "$W/loop.h5" >/dev/null 2>&1
  [ $? -eq 124 ] || fail "h5dump did not hang on the crafted index: the file does not exercise the loop"
fi
for c in "ls" "check" "top --batch --format json" "replay --ref trainer"; do
  # shellcheck disable=SC2086
  run "$c of the looping index" 2 "HDF5 would loop forever" "$D" $c "$W/loop.h5"
done
echo "ok   a merge index whose global heap has a zero-size free-space object (h5dump hangs): ls, check, top, replay exit 2"

# 3. version-1 object headers: nothing in them (or in a version-0 superblock) is checksummed
"$PY" - "$W/r0.h5" "$W/v1.h5" <<'PYEOF' || fail "rebuilding with v1 headers"
import h5py, sys
def rebuild(s, d):
    for k in s.attrs: d.attrs.create(k, s.attrs[k], dtype=s.attrs.get_id(k).dtype)
    for k in s:
        o = s[k]
        if isinstance(o, h5py.Group):
            rebuild(o, d.create_group(k))
            continue
        kw = dict(chunks=o.chunks, maxshape=o.maxshape) if o.chunks else {}
        n = d.create_dataset(k, data=o[()], dtype=o.dtype, **kw)
        for a in o.attrs: n.attrs.create(a, o.attrs[a], dtype=o.attrs.get_id(a).dtype)
with h5py.File(sys.argv[1], "r") as s, h5py.File(sys.argv[2], "w", libver="earliest") as d:
    rebuild(s, d)
PYEOF
grep -q OHDR "$W/v1.h5" && fail "the rebuilt trace still has version-2 object headers"
for c in "ls" "check" "merge $W/v1.h5 -o $W/v1idx.h5"; do
  # shellcheck disable=SC2086
  run "$c of a trace with a version-0 superblock and v1 headers" 2 "superblock version 0, expected 2 or 3" "$D" $c "$W/v1.h5"
done
[ -e "$W/v1idx.h5" ] && fail "merge of a v1 trace wrote an index"
echo "ok   a trace with a version-0 superblock and version-1 object headers: ls, check, merge exit 2 naming the superblock"
rm -rf "$W"
