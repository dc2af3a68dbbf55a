/* formats/safetensors: round trip through the writer, files built by hand in
 * Python/numpy read back bit for bit, and hostile files (overflowing shapes,
 * offsets out of range / overlapping / with gaps, a length prefix larger than
 * the file, every truncation of a valid file, non-JSON, deep nesting, byte
 * flips) rejected with DRIFT_E_INPUT and no crash. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/dtype.h"
#include "formats/safetensors.h"

static char g_tmp[1024];

static const char *tmp_path(const char *name) {
    static char buf[4][1200];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
    return buf[k];
}

static int setup_tmp(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    if (!t || !t[0]) t = "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/safetensors.%ld", t, (long)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown_tmp(void **state) {
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    *len = got;
    return b;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len) assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* A file image: 8-byte length of header, header, then buf_len bytes of data
 * (a counting pattern). */
static unsigned char *image(const char *header, size_t buf_len, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + buf_len;
    unsigned char *b = malloc(*len);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < buf_len; i++) b[8 + h + i] = (unsigned char)(i * 7 + 1);
    return b;
}

/* Opens the image both in memory and from a file; both must give rc. */
static void expect_open(const unsigned char *img, size_t len, unsigned flags, int rc_want, const char *msg_has) {
    drift_safetensors *f = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_safetensors_open_mem(&f, img, len, "mem.safetensors", flags, &err);
    if (rc != rc_want) fprintf(stderr, "open_mem rc %d (want %d): %s: %s\n", rc, rc_want, err.where, err.msg);
    assert_int_equal(rc, rc_want);
    if (rc == DRIFT_OK) {
        assert_non_null(f);
    } else {
        assert_null(f);
        assert_true(err.msg[0] != '\0');
        if (msg_has && !strstr(err.msg, msg_has)) {
            fprintf(stderr, "message lacks '%s': %s: %s\n", msg_has, err.where, err.msg);
            fail();
        }
    }
    drift_safetensors_close(f);

    const char *p = tmp_path("hostile.safetensors");
    spit(p, img, len);
    f = NULL;
    drift_err_clear(&err);
    rc = drift_safetensors_open(&f, p, flags, &err);
    assert_int_equal(rc, rc_want);
    if (rc != DRIFT_OK) assert_true(strstr(err.where, "hostile.safetensors") != NULL);
    drift_safetensors_close(f);
}

static void expect_header(const char *header, size_t buf_len, int rc_want, const char *msg_has) {
    size_t len;
    unsigned char *img = image(header, buf_len, &len);
    expect_open(img, len, 0, rc_want, msg_has);
    free(img);
}

/* ---------------------------------------------------------------------------- */

static void fill(float *x, size_t n, unsigned seed) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 8.0f;
    }
    if (n > 3) {
        x[0] = 0.0f;
        x[1] = -0.0f;
        x[2] = 65504.0f;
        x[3] = 1e-7f;
    }
}

static void test_round_trip(void **state) {
    (void)state;
    enum { N = 3 * 5 * 7 };
    float a[N], b[N], c[N], d[N], s = 3.25f;
    fill(a, N, 1);
    fill(b, N, 2);
    fill(c, N, 3);
    fill(d, N, 4);
    uint16_t braw[4] = {0x3f80, 0xc000, 0x7f80, 0x0001}; /* 1, -2, inf, smallest subnormal */
    int64_t sh3[3] = {3, 5, 7}, sh2[2] = {15, 7}, sh1[1] = {N}, sh0[2] = {0, 4}, shr[1] = {4};
    drift_safetensors_entry e[] = {
        {"blocks.0.norm2.weight", DRIFT_F32, 3, sh3, a, NULL},
        {"blocks.0.ffn.net.0.proj.weight", DRIFT_BF16, 2, sh2, b, NULL},
        {"half", DRIFT_F16, 1, sh1, c, NULL},
        {"double", DRIFT_F64, 1, sh1, d, NULL},
        {"scalar", DRIFT_F32, 0, NULL, &s, NULL},
        {"empty", DRIFT_BF16, 2, sh0, NULL, NULL},
        {"raw_bf16", DRIFT_BF16, 1, shr, NULL, braw},
    };
    const char *mk[] = {"format", "note"}, *mv[] = {"pt", "drift \"test\" \xc3\xa9"};
    const char *p = tmp_path("rt.safetensors");
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_safetensors_write(p, e, 7, mk, mv, 2, &err), DRIFT_OK);

    drift_safetensors *f = NULL;
    assert_int_equal(drift_safetensors_open(&f, p, 0, &err), DRIFT_OK);
    assert_int_equal(drift_safetensors_n_tensors(f), 7);
    assert_int_equal(drift_safetensors_n_skipped(f), 0);
    assert_int_equal(drift_safetensors_n_metadata(f), 2);
    assert_string_equal(drift_safetensors_find_metadata(f, "format"), "pt");
    assert_string_equal(drift_safetensors_find_metadata(f, "note"), mv[1]);
    assert_null(drift_safetensors_find_metadata(f, "absent"));
    for (size_t i = 0; i < 7; i++) {
        drift_safetensors_info info;
        assert_int_equal(drift_safetensors_tensor(f, i, &info, &err), DRIFT_OK);
        assert_string_equal(info.name, e[i].name);
        assert_int_equal(info.dtype, e[i].dtype);
        assert_int_equal(info.ndim, e[i].ndim);
        int64_t numel = 1;
        for (int k = 0; k < info.ndim; k++) {
            assert_int_equal(info.shape[k], e[i].shape[k]);
            numel *= e[i].shape[k];
        }
        assert_int_equal(info.numel, numel);
        assert_int_equal(info.nbytes, (uint64_t)numel * drift_dtype_size(e[i].dtype));
        assert_int_equal(drift_safetensors_find(f, e[i].name), (long)i);

        float out[N + 1];
        out[numel] = 12345.0f; /* guard */
        assert_int_equal(drift_safetensors_read_f32(f, i, out, (size_t)numel, &err), DRIFT_OK);
        assert_true(out[numel] == 12345.0f);
        for (int64_t k = 0; k < numel; k++) {
            float want;
            if (e[i].raw)
                want = drift_bf16_to_f32(((const uint16_t *)e[i].raw)[k]);
            else if (e[i].dtype == DRIFT_F64)
                want = e[i].values[k]; /* fp32 -> fp64 -> fp32 is exact */
            else
                want = drift_round_to(e[i].values[k], e[i].dtype);
            assert_memory_equal(&out[k], &want, 4);
        }
        if (numel > 1) {
            drift_err_clear(&err);
            assert_int_equal(drift_safetensors_read_f32(f, i, out, (size_t)numel - 1, &err), DRIFT_E_USAGE);
            assert_non_null(strstr(err.msg, e[i].name));
        }
    }
    /* raw read of the bf16 tensor gives the RNE bits */
    uint16_t rb[N];
    assert_int_equal(drift_safetensors_read_raw(f, 1, rb, sizeof rb, &err), DRIFT_OK);
    for (int k = 0; k < N; k++) assert_int_equal(rb[k], drift_f32_to_bf16(b[k]));
    assert_int_equal(drift_safetensors_find(f, "nope"), -1);
    drift_safetensors_info info;
    assert_int_equal(drift_safetensors_tensor(f, 7, &info, &err), DRIFT_E_USAGE);
    drift_safetensors_close(f);

    /* the image in memory gives the same */
    size_t len;
    unsigned char *img = slurp(p, &len);
    assert_non_null(img);
    assert_int_equal((8 + (img[0] | img[1] << 8)) % 8, 0); /* header padded to 8 */
    assert_int_equal(drift_safetensors_open_mem(&f, img, len, NULL, 0, &err), DRIFT_OK);
    float out[N];
    assert_int_equal(drift_safetensors_read_f32(f, 0, out, N, &err), DRIFT_OK);
    assert_memory_equal(out, a, sizeof a);
    drift_safetensors_close(f);
    free(img);

    /* no tensors at all */
    assert_int_equal(drift_safetensors_write(p, NULL, 0, NULL, NULL, 0, &err), DRIFT_OK);
    assert_int_equal(drift_safetensors_open(&f, p, 0, &err), DRIFT_OK);
    assert_int_equal(drift_safetensors_n_tensors(f), 0);
    drift_safetensors_close(f);
    drift_safetensors_close(NULL);
}

static void test_writer_rejects(void **state) {
    (void)state;
    float v[2] = {1, 2};
    int64_t sh[1] = {2}, neg[1] = {-1};
    drift_err err;
    const char *p = tmp_path("bad_w.safetensors");
    drift_safetensors_entry dup[] = {{"a", DRIFT_F32, 1, sh, v, NULL}, {"a", DRIFT_F32, 1, sh, v, NULL}};
    assert_int_equal(drift_safetensors_write(p, dup, 2, NULL, NULL, 0, &err), DRIFT_E_USAGE);
    drift_safetensors_entry bad_dt[] = {{"a", DRIFT_DTYPE_INVALID, 1, sh, v, NULL}};
    assert_int_equal(drift_safetensors_write(p, bad_dt, 1, NULL, NULL, 0, &err), DRIFT_E_USAGE);
    drift_safetensors_entry bad_sh[] = {{"a", DRIFT_F32, 1, neg, v, NULL}};
    assert_int_equal(drift_safetensors_write(p, bad_sh, 1, NULL, NULL, 0, &err), DRIFT_E_USAGE);
    drift_safetensors_entry reserved[] = {{"__metadata__", DRIFT_F32, 1, sh, v, NULL}};
    assert_int_equal(drift_safetensors_write(p, reserved, 1, NULL, NULL, 0, &err), DRIFT_E_USAGE);
    drift_safetensors_entry nodata[] = {{"a", DRIFT_F32, 1, sh, NULL, NULL}};
    assert_int_equal(drift_safetensors_write(p, nodata, 1, NULL, NULL, 0, &err), DRIFT_E_USAGE);
    assert_int_equal(access(p, F_OK), -1); /* nothing left behind */
    assert_int_equal(drift_safetensors_write("/nonexistent-dir/x.safetensors", NULL, 0, NULL, NULL, 0, &err),
                     DRIFT_E_IO);
    drift_safetensors *f = NULL;
    assert_int_equal(drift_safetensors_open(&f, "/nonexistent-dir/x.safetensors", 0, &err), DRIFT_E_IO);
    assert_null(f);
    /* a directory and a FIFO are refused, without blocking */
    assert_int_equal(drift_safetensors_open(&f, g_tmp, 0, &err), DRIFT_E_INPUT);
    const char *fifo = tmp_path("fifo.safetensors");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(drift_safetensors_open(&f, fifo, 0, &err), DRIFT_E_INPUT);
    assert_null(f);
    unlink(fifo);
}

/* Files written by numpy, header built by hand in Python (the layout the
 * reference implementation writes: header padded with spaces, tensors in an
 * order different from the data order). */
static const char *k_python =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "out, ref = sys.argv[1], sys.argv[2]\n"
    "rng = np.random.default_rng(7)\n"
    "x32 = (rng.standard_normal((4, 6)) * 3).astype(np.float32)\n"
    "x16 = (rng.standard_normal(10) * 100).astype(np.float16)\n"
    "x64 = rng.standard_normal((2, 3, 2))\n"
    "xb = (rng.standard_normal(9) * 1e3).astype(np.float32)\n"
    "u = xb.view(np.uint32).astype(np.uint64)\n"
    "bits = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # RNE, no NaN here\n"
    "ids = np.arange(5, dtype=np.int64)\n"
    "parts = [('z.bf16', 'BF16', [9], bits.tobytes()), ('a.f32', 'F32', [4, 6], x32.tobytes()),\n"
    "         ('m.f16', 'F16', [10], x16.tobytes()), ('ids', 'I64', [5], ids.tobytes()),\n"
    "         ('k.f64', 'F64', [2, 3, 2], x64.tobytes()), ('s', 'F32', [], np.float32(2.5).tobytes())]\n"
    "hdr, off, data = {}, 0, b''\n"
    "for name, dt, shape, raw in parts:\n"
    "    hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}\n"
    "    off += len(raw); data += raw\n"
    "hdr = dict(sorted(hdr.items(), key=lambda kv: kv[0]))\n"
    "hdr['__metadata__'] = {'format': 'pt', 'by': 'numpy'}\n"
    "h = json.dumps(hdr).encode()\n"
    "h += b' ' * ((8 - len(h) % 8) % 8)\n"
    "open(out, 'wb').write(struct.pack('<Q', len(h)) + h + data)\n"
    "w = np.concatenate([x32.ravel(), x16.astype(np.float32), x64.astype(np.float32).ravel(),\n"
    "                    (bits.astype(np.uint32) << 16).view(np.float32), np.array([2.5], np.float32)])\n"
    "open(ref, 'wb').write(w.astype('<f4').tobytes())\n";

static void test_python_files(void **state) {
    (void)state;
    const char *py = getenv("PYTHON3");
    if (!py || !py[0]) py = "/usr/bin/python3";
    const char *script = tmp_path("mk.py"), *st = tmp_path("py.safetensors"), *ref = tmp_path("py.ref");
    spit(script, k_python, strlen(k_python));
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' 2>/dev/null", py);
    if (system(cmd) != 0) {
        fprintf(stderr, "SKIP part: %s has no numpy\n", py);
        skip();
    }
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", py, script, st, ref);
    assert_int_equal(system(cmd), 0);
    size_t rlen;
    float *want = (float *)slurp(ref, &rlen);
    assert_non_null(want);
    assert_int_equal(rlen, (24 + 10 + 12 + 9 + 1) * 4);

    drift_safetensors *f = NULL;
    drift_err err;
    drift_err_clear(&err);
    /* I64 is a spec dtype drift does not widen: rejected by default ... */
    assert_int_equal(drift_safetensors_open(&f, st, 0, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "'ids'"));
    assert_non_null(strstr(err.msg, "dtype"));
    /* ... skipped on request */
    assert_int_equal(drift_safetensors_open(&f, st, DRIFT_SAFETENSORS_SKIP_UNSUPPORTED, &err), DRIFT_OK);
    assert_int_equal(drift_safetensors_n_tensors(f), 5);
    assert_int_equal(drift_safetensors_n_skipped(f), 1);
    assert_int_equal(drift_safetensors_find(f, "ids"), -1);
    assert_string_equal(drift_safetensors_find_metadata(f, "by"), "numpy");
    const char *order[] = {"a.f32", "m.f16", "k.f64", "z.bf16", "s"};
    const int64_t numel[] = {24, 10, 12, 9, 1};
    size_t at = 0;
    for (int i = 0; i < 5; i++) {
        long idx = drift_safetensors_find(f, order[i]);
        assert_true(idx >= 0);
        drift_safetensors_info info;
        assert_int_equal(drift_safetensors_tensor(f, (size_t)idx, &info, &err), DRIFT_OK);
        assert_int_equal(info.numel, numel[i]);
        float got[24];
        assert_int_equal(drift_safetensors_read_f32(f, (size_t)idx, got, 24, &err), DRIFT_OK);
        assert_memory_equal(got, want + at, (size_t)numel[i] * 4);
        at += (size_t)numel[i];
    }
    drift_safetensors_close(f);
    free(want);
}

static void test_hostile_headers(void **state) {
    (void)state;
    /* sanity: the helper accepts a valid image */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_OK, NULL);
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ", 8, DRIFT_OK, NULL);

    /* overflowing shapes */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,0]}}", 0,
                  DRIFT_E_INPUT, "shape");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
                  DRIFT_E_INPUT, "overflow");
    expect_header("{\"a\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}", 0,
                  DRIFT_E_INPUT, "data_offsets");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
                  DRIFT_E_INPUT, "shape");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "shape");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "shape");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT,
                  "dimensions");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "shape");
    /* size mismatch */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "'a'");
    /* offsets out of range, reversed, malformed */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}", 16, DRIFT_E_INPUT, "beyond");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, DRIFT_E_INPUT, "begin");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[18446744073709551608,18446744073709551616]}}",
                  8, DRIFT_E_INPUT, "data_offsets");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 9, DRIFT_E_INPUT,
                  "data_offsets");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, DRIFT_E_INPUT, "data_offsets");
    /* overlapping, gap, trailing bytes */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, DRIFT_E_INPUT, "overlap");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                  8, DRIFT_E_INPUT, "overlap");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                  20, DRIFT_E_INPUT, "unused");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, DRIFT_E_INPUT, "after");
    expect_header("{}", 4, DRIFT_E_INPUT, "no tensors");
    expect_header("{}", 0, DRIFT_OK, NULL);
    /* dtype */
    expect_header("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "dtype");
    expect_header("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "dtype");
    expect_header("{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "dtype");
    {
        size_t len;
        unsigned char *img = image("{\"q\":{\"dtype\":\"Q7\",\"shape\":[3],\"data_offsets\":[0,5]},"
                                   "\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[13,21]},"
                                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[5,13]}}",
                                   21, &len);
        expect_open(img, len, DRIFT_SAFETENSORS_SKIP_UNSUPPORTED, DRIFT_OK, NULL);
        expect_open(img, len, 0, DRIFT_E_INPUT, "dtype");
        free(img);
        /* a skipped spec dtype still has its size checked */
        img = image("{\"i\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, &len);
        expect_open(img, len, DRIFT_SAFETENSORS_SKIP_UNSUPPORTED, DRIFT_E_INPUT, "'i'");
        free(img);
    }
    /* fields */
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, DRIFT_E_INPUT, "data_offsets");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, DRIFT_E_INPUT,
                  "unknown field");
    expect_header("{\"a\":[1,2]}", 0, DRIFT_E_INPUT, "'a'");
    expect_header("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "empty");
    expect_header("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, "NUL");
    expect_header("{\"__metadata__\":{\"k\":1}}", 0, DRIFT_E_INPUT, "__metadata__");
    expect_header("{\"__metadata__\":[]}", 0, DRIFT_E_INPUT, "__metadata__");
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                  16, DRIFT_E_INPUT, NULL);
    /* non-JSON */
    expect_header("hello world", 0, DRIFT_E_INPUT, NULL);
    expect_header("[1,2,3]", 0, DRIFT_E_INPUT, NULL);
    expect_header("{", 0, DRIFT_E_INPUT, NULL);
    expect_header("{\"a\": }", 0, DRIFT_E_INPUT, NULL);
    expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT, NULL);
    expect_header("{} /* */", 0, DRIFT_E_INPUT, NULL);
    expect_header("{\"\xff\":1}", 0, DRIFT_E_INPUT, NULL);
    expect_header("  ", 0, DRIFT_E_INPUT, NULL);
    /* nesting depth */
    {
        size_t depth = 200000;
        char *h = malloc(depth * 2 + 16);
        strcpy(h, "{\"a\":");
        size_t k = strlen(h);
        for (size_t i = 0; i < depth; i++) h[k++] = '[';
        for (size_t i = 0; i < depth; i++) h[k++] = ']';
        h[k++] = '}';
        h[k] = '\0';
        expect_header(h, 0, DRIFT_E_INPUT, "deeper");
        expect_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, DRIFT_E_INPUT,
                      "deeper");
        /* brackets inside strings do not count */
        expect_header("{\"a[[[[{{{{\\\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DRIFT_OK,
                      NULL);
        free(h);
    }
    /* a huge but shallow array: many values */
    {
        size_t n = 3000000;
        char *h = malloc(n * 2 + 32);
        strcpy(h, "{\"a\":[");
        size_t k = strlen(h);
        for (size_t i = 0; i < n; i++) {
            h[k++] = '0';
            h[k++] = ',';
        }
        h[k - 1] = ']';
        h[k++] = '}';
        h[k] = '\0';
        expect_header(h, 0, DRIFT_E_INPUT, NULL);
        free(h);
    }
}

static void test_length_prefix(void **state) {
    (void)state;
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t len;
    unsigned char *img = image(hdr, 8, &len);
    uint64_t bad[] = {len - 7, len, (uint64_t)1 << 40, UINT64_MAX, (uint64_t)INT64_MAX + 1, 0, 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char *c = malloc(len);
        memcpy(c, img, len);
        for (int b = 0; b < 8; b++) c[b] = (unsigned char)(bad[i] >> (8 * b));
        expect_open(c, len, 0, DRIFT_E_INPUT, NULL);
        free(c);
    }
    /* shorter than the prefix */
    for (size_t n = 0; n < 8; n++) expect_open(img, n, 0, DRIFT_E_INPUT, "8-byte");
    drift_safetensors *f = NULL;
    drift_err err;
    assert_int_equal(drift_safetensors_open_mem(&f, NULL, 0, NULL, 0, &err), DRIFT_E_INPUT);
    /* a header over the limit (prefix says so; the file is not that big: the
     * file-size check fires first, then the limit on a sparse file) */
    const char *p = tmp_path("huge.safetensors");
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    uint64_t big = DRIFT_SAFETENSORS_HEADER_MAX + 1;
    unsigned char pre[8];
    for (int b = 0; b < 8; b++) pre[b] = (unsigned char)(big >> (8 * b));
    fwrite(pre, 1, 8, fp);
    fclose(fp);
    assert_int_equal(truncate(p, (off_t)(big + 8)), 0);
    assert_int_equal(drift_safetensors_open(&f, p, 0, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "limit"));
    unlink(p);
    free(img);
}

/* Every truncation of a valid file is rejected; every single-byte change
 * either still opens (and reads) or is DRIFT_E_INPUT. */
static void test_truncations_and_flips(void **state) {
    (void)state;
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t sh[2] = {2, 3}, sh1[1] = {2};
    drift_safetensors_entry e[] = {{"w", DRIFT_F32, 2, sh, v, NULL}, {"b", DRIFT_BF16, 1, sh1, v, NULL}};
    const char *mk[] = {"format"}, *mv[] = {"pt"};
    const char *p = tmp_path("small.safetensors");
    drift_err err;
    assert_int_equal(drift_safetensors_write(p, e, 2, mk, mv, 1, &err), DRIFT_OK);
    size_t len;
    unsigned char *img = slurp(p, &len);
    assert_non_null(img);
    for (size_t n = 0; n < len; n++) {
        drift_safetensors *f = NULL;
        assert_int_equal(drift_safetensors_open_mem(&f, img, n, "cut", 0, &err), DRIFT_E_INPUT);
        assert_null(f);
    }
    /* truncated on disk */
    spit(p, img, len - 1);
    drift_safetensors *f = NULL;
    assert_int_equal(drift_safetensors_open(&f, p, 0, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.where, "small.safetensors"));

    const unsigned char vals[] = {0x00, 0xff, '"', '{', '[', '9', ' ', 0x80};
    int ok = 0, rej = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t k = 0; k < sizeof vals; k++) {
            unsigned char *c = malloc(len);
            memcpy(c, img, len);
            c[i] = vals[k];
            f = NULL;
            drift_err_clear(&err);
            int rc = drift_safetensors_open_mem(&f, c, len, "flip", DRIFT_SAFETENSORS_SKIP_UNSUPPORTED, &err);
            if (rc == DRIFT_OK) {
                ok++;
                for (size_t t = 0; t < drift_safetensors_n_tensors(f); t++) {
                    drift_safetensors_info info;
                    assert_int_equal(drift_safetensors_tensor(f, t, &info, &err), DRIFT_OK);
                    float *dst = malloc((size_t)info.numel * sizeof *dst + 1);
                    assert_int_equal(drift_safetensors_read_f32(f, t, dst, (size_t)info.numel, &err), DRIFT_OK);
                    free(dst);
                }
            } else {
                assert_int_equal(rc, DRIFT_E_INPUT);
                rej++;
            }
            drift_safetensors_close(f);
            free(c);
        }
    }
    assert_true(ok > 0);
    assert_true(rej > 0);
    free(img);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_rejects),
        cmocka_unit_test(test_python_files),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_length_prefix),
        cmocka_unit_test(test_truncations_and_flips),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
