/* formats/hash64, formats/params_ref, formats/checkpoint: the drift-sum64
 * hash is independent of how the words are split over threads and catches
 * every one-byte change; the reference JSON round-trips and hostile ones are
 * rejected naming the field; a sharded checkpoint written here describes and
 * loads back bit for bit on any thread count, and a changed byte, a missing
 * shard or a header that disagrees is DRIFT_E_INPUT naming tensor and file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/checkpoint.h"
#include "formats/dtype.h"
#include "formats/hash64.h"
#include "formats/params_ref.h"

static char g_tmp[1024];

static int setup_tmp(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    if (!t || !t[0]) t = "/tmp";
    snprintf(g_tmp, sizeof g_tmp, "%s/checkpoint.%ld", t, (long)getpid());
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_tmp, g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* ---- hash ------------------------------------------------------------------ */
static void test_hash_split_and_threads(void **state) {
    (void)state;
    const size_t big = ((size_t)9 << 20) + 5; /* past the per-thread minimum, odd tail */
    unsigned char *d = malloc(big);
    assert_non_null(d);
    uint64_t s = 1;
    for (size_t i = 0; i < big; i++) d[i] = (unsigned char)lcg(&s);
    const size_t lens[] = {0, 1, 7, 8, 9, 15, 16, 1000, 4099, big};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        size_t n = lens[k];
        uint64_t h1 = drift_hash64(d, n, 1);
        assert_true(h1 == drift_hash64(d, n, 2));
        assert_true(h1 == drift_hash64(d, n, 7));
        /* any word-aligned split, summed, gives the same hash */
        for (size_t cut = 0; cut <= n; cut += 8 * (n / 64 + 1)) {
            uint64_t sum = drift_hash64_partial(d, cut, 0) + drift_hash64_partial(d + cut, n - cut, cut / 8);
            assert_true(h1 == drift_hash64_finish(sum, n));
        }
    }
    /* every byte position of a small buffer, and a few of the big one, changes it */
    uint64_t h = drift_hash64(d, 100, 1);
    for (size_t i = 0; i < 100; i++) {
        d[i] ^= 0x10;
        assert_true(drift_hash64(d, 100, 1) != h);
        d[i] ^= 0x10;
    }
    uint64_t hb = drift_hash64(d, big, 3);
    for (size_t i = 0; i < big; i += big / 7) {
        d[i] ^= 1;
        assert_true(drift_hash64(d, big, 3) != hb);
        d[i] ^= 1;
    }
    /* the length is part of it: trailing zero bytes change the hash */
    unsigned char z[16] = {1};
    assert_true(drift_hash64(z, 8, 1) != drift_hash64(z, 16, 1));
    /* swapping two words changes it */
    unsigned char w[16];
    for (int i = 0; i < 16; i++) w[i] = (unsigned char)i;
    uint64_t hw = drift_hash64(w, 16, 1);
    unsigned char t[8];
    memcpy(t, w, 8);
    memmove(w, w + 8, 8);
    memcpy(w + 8, t, 8);
    assert_true(drift_hash64(w, 16, 1) != hw);
    char hex[17];
    uint64_t back = 0;
    drift_hash64_hex(h, hex);
    assert_int_equal(strlen(hex), 16);
    assert_int_equal(drift_hash64_parse(hex, &back), 0);
    assert_true(back == h);
    assert_int_equal(drift_hash64_parse("12345", &back), -1);
    assert_int_equal(drift_hash64_parse("0123456789abcdeg", &back), -1);
    free(d);
}

/* ---- params_ref JSON ----------------------------------------------------------- */
static void test_ref_json_roundtrip(void **state) {
    (void)state;
    drift_params_ref r, b;
    drift_params_ref_init(&r);
    drift_params_ref_init(&b);
    drift_err e;
    int64_t s1[2] = {3, 4}, s2[1] = {7};
    r.weights_root = strdup("/data/ck");
    r.index = strdup("diffusion_pytorch_model.safetensors.index.json");
    assert_int_equal(drift_params_ref_add(&r, "a.weight", "sub/x-00001.safetensors", DRIFT_BF16, 2, s1, 0xfedcba9876543210ull, &e), 0);
    assert_int_equal(drift_params_ref_add(&r, "a.bias", "x-00002.safetensors", DRIFT_F32, 1, s2, 42, &e), 0);
    assert_int_equal(drift_params_ref_add(&r, "scalar", "x-00002.safetensors", DRIFT_F16, 0, NULL, 1, &e), 0);
    assert_int_equal(drift_params_ref_add(&r, "bad", "../x.safetensors", DRIFT_F32, 1, s2, 1, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_params_ref_add(&r, "bad", "/abs.safetensors", DRIFT_F32, 1, s2, 1, &e), DRIFT_E_USAGE);
    char *js = NULL;
    size_t len = 0;
    assert_int_equal(drift_params_ref_to_json(&r, &js, &len, &e), 0);
    assert_int_equal(drift_params_ref_parse(&b, js, len, "t", &e), 0);
    assert_int_equal(b.n, 3);
    assert_string_equal(b.weights_root, "/data/ck");
    assert_string_equal(b.index, r.index);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(b.t[i].name, r.t[i].name);
        assert_string_equal(b.t[i].file, r.t[i].file);
        assert_int_equal(b.t[i].dtype, r.t[i].dtype);
        assert_int_equal(b.t[i].ndim, r.t[i].ndim);
        assert_int_equal(b.t[i].numel, r.t[i].numel);
        assert_true(b.t[i].hash == r.t[i].hash);
    }
    assert_int_equal(b.t[0].shape[1], 4);
    free(js);
    drift_params_ref_free(&r);
    drift_params_ref_free(&b);
}

static void expect_bad(const char *json, const char *needle) {
    drift_params_ref r;
    drift_params_ref_init(&r);
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_params_ref_parse(&r, json, strlen(json), "bad.json", &e);
    if (rc != DRIFT_E_INPUT || !strstr(e.msg, needle)) {
        print_error("json %s: rc %d, message '%s', expected one naming '%s'\n", json, rc, e.msg, needle);
        fail();
    }
    assert_int_equal(r.n, 0);
}

#define HEAD "{\"format\":\"drift-params-ref\",\"version\":1,\"hash\":\"drift-sum64\",\"weights_root\":\"/w\",\"index\":null,"
#define T1 "{\"name\":\"a\",\"file\":\"f.safetensors\",\"dtype\":\"F32\",\"shape\":[2],\"hash\":\"0000000000000001\"}"
static void test_ref_json_hostile(void **state) {
    (void)state;
    expect_bad("[]", "object");
    expect_bad("{\"format\":\"x\"}", "format");
    expect_bad("{\"format\":\"drift-params-ref\",\"version\":2}", "version");
    expect_bad("{\"format\":\"drift-params-ref\",\"version\":1,\"hash\":\"md5\"}", "hash");
    expect_bad(HEAD "\"tensors\":{}}", "tensors");
    expect_bad(HEAD "\"tensors\":[1]}", "tensors[0]");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\"}]}", "file");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"../f\",\"dtype\":\"F32\",\"shape\":[2],\"hash\":\"0000000000000001\"}]}", "..");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"/etc/f\",\"dtype\":\"F32\",\"shape\":[2],\"hash\":\"0000000000000001\"}]}", "absolute");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"f\",\"dtype\":\"I8\",\"shape\":[2],\"hash\":\"0000000000000001\"}]}", "dtype");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"f\",\"dtype\":\"F32\",\"shape\":[-2],\"hash\":\"0000000000000001\"}]}", "shape");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"f\",\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"hash\":\"0000000000000001\"}]}", "dims");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"a\",\"file\":\"f\",\"dtype\":\"F32\",\"shape\":[2],\"hash\":\"xyz\"}]}", "hash");
    expect_bad(HEAD "\"tensors\":[" T1 "," T1 "]}", "twice");
    expect_bad(HEAD "\"tensors\":[{\"name\":\"\",\"file\":\"f\",\"dtype\":\"F32\",\"shape\":[2],\"hash\":\"0000000000000001\"}]}", "name");
    /* a valid one parses */
    drift_params_ref r;
    drift_params_ref_init(&r);
    drift_err e;
    const char *ok = HEAD "\"tensors\":[" T1 "]}";
    assert_int_equal(drift_params_ref_parse(&r, ok, strlen(ok), "ok", &e), 0);
    assert_int_equal(r.n, 1);
    drift_params_ref_free(&r);
}

/* ---- checkpoint --------------------------------------------------------------- */
#define NT 6
static const char *const NAMES[NT] = {"emb.weight", "emb.bias", "blocks.0.w", "blocks.0.norm.weight", "blocks.1.w", "out.bias"};
static const int64_t SHAPES[NT][2] = {{32, 16}, {32, 1}, {64, 32}, {32, 1}, {64, 32}, {5, 1}};
static const int NDIM[NT] = {2, 1, 2, 1, 2, 1};

static int64_t numel_of(int i) { return NDIM[i] == 2 ? SHAPES[i][0] * SHAPES[i][1] : SHAPES[i][0]; }

static int fill(size_t i, float *dst, void *user, drift_err *err) {
    (void)user;
    (void)err;
    for (int64_t k = 0; k < numel_of((int)i); k++) dst[k] = (float)((double)(k % 97) * 0.013 - 0.5 + (double)i);
    return DRIFT_OK;
}

static void write_ck(const char *dir, drift_params_ref *ref, int threads) {
    drift_ckpt_spec specs[NT];
    for (int i = 0; i < NT; i++)
        specs[i] = (drift_ckpt_spec){NAMES[i], i == 3 ? DRIFT_F32 : DRIFT_BF16, NDIM[i], SHAPES[i]};
    drift_err e;
    drift_err_clear(&e);
    drift_params_ref_init(ref);
    int rc = drift_ckpt_write(dir, specs, NT, 4096, fill, NULL, threads, ref, &e);
    if (rc) print_error("write: %s: %s\n", e.where, e.msg);
    assert_int_equal(rc, 0);
}

static void load_all(const drift_params_ref *ref, const char *root, int threads, float **dst, int expect_rc,
                     const char *needle1, const char *needle2) {
    size_t which[NT];
    for (int i = 0; i < NT; i++) which[i] = (size_t)drift_params_ref_find(ref, NAMES[i]);
    drift_err e;
    drift_err_clear(&e);
    drift_ckpt_stats st;
    int rc = drift_ckpt_load(ref, root, which, dst, NT, threads, &st, &e);
    if (rc != expect_rc || (needle1 && !strstr(e.msg, needle1)) || (needle2 && !strstr(e.msg, needle2))) {
        print_error("load: rc %d (expected %d): %s (expected '%s' and '%s')\n", rc, expect_rc, e.msg,
                    needle1 ? needle1 : "", needle2 ? needle2 : "");
        fail();
    }
    if (!rc) {
        assert_int_equal(st.tensors, NT);
        assert_true(st.files >= 2);
    }
}

static void test_checkpoint_roundtrip(void **state) {
    (void)state;
    char dir[1200], dir1[1200];
    snprintf(dir, sizeof dir, "%s/ck", g_tmp);
    snprintf(dir1, sizeof dir1, "%s/ck1", g_tmp);
    drift_params_ref ref, ref1, desc;
    write_ck(dir, &ref, 4);
    write_ck(dir1, &ref1, 1);
    assert_int_equal(ref.n, NT);
    assert_non_null(ref.index);
    /* sharded: more than one file; the same hashes whatever the thread count */
    assert_string_not_equal(ref.t[0].file, ref.t[NT - 1].file);
    for (int i = 0; i < NT; i++) assert_true(ref.t[i].hash == ref1.t[i].hash);
    /* describing the written checkpoint gives the same reference */
    drift_params_ref_init(&desc);
    drift_err e;
    drift_err_clear(&e);
    float *dd[NT];
    int64_t nn[NT];
    for (int i = 0; i < NT; i++) {
        dd[i] = calloc((size_t)numel_of(i), sizeof(float));
        nn[i] = numel_of(i);
    }
    int rc = drift_ckpt_describe(dir, NAMES, nn, dd, NT, 3, &desc, NULL, &e);
    if (rc) print_error("describe: %s\n", e.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(desc.n, NT);
    for (int i = 0; i < NT; i++) {
        long k = drift_params_ref_find(&desc, NAMES[i]);
        assert_true(k >= 0);
        assert_true(desc.t[k].hash == ref.t[i].hash);
        assert_string_equal(desc.t[k].file, ref.t[i].file);
    }
    /* loading: the fill values rounded to the stored dtype, bit for bit, on 1 and 5 threads */
    float *dst[NT], *dst5[NT];
    for (int i = 0; i < NT; i++) {
        dst[i] = calloc((size_t)numel_of(i), sizeof(float));
        dst5[i] = calloc((size_t)numel_of(i), sizeof(float));
    }
    load_all(&ref, NULL, 1, dst, 0, NULL, NULL);
    load_all(&ref, dir1, 5, dst5, 0, NULL, NULL);
    for (int i = 0; i < NT; i++) {
        float *want = calloc((size_t)numel_of(i), sizeof(float));
        fill((size_t)i, want, NULL, NULL);
        drift_dtype_round_n(want, (size_t)numel_of(i), i == 3 ? DRIFT_F32 : DRIFT_BF16);
        assert_memory_equal(dst[i], want, (size_t)numel_of(i) * sizeof(float));
        assert_memory_equal(dst5[i], want, (size_t)numel_of(i) * sizeof(float));
        assert_memory_equal(dd[i], want, (size_t)numel_of(i) * sizeof(float));
        free(want);
    }
    /* a wanted tensor the checkpoint lacks, or of another size, is named */
    const char *missing[1] = {"nope.weight"};
    int64_t one[1] = {1};
    drift_params_ref_free(&desc);
    assert_int_equal(drift_ckpt_describe(dir, missing, one, dd, 1, 1, &desc, NULL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "nope.weight"));
    assert_int_equal(drift_ckpt_describe(dir, NAMES, one, dd, 1, 1, &desc, NULL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "elements"));

    /* one byte changed in one shard: the hash check names tensor and file */
    char path[1400];
    const drift_params_ref_tensor *victim = &ref.t[drift_params_ref_find(&ref, "blocks.1.w")];
    snprintf(path, sizeof path, "%s/%s", dir, victim->file);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END); /* inside the last tensor of that shard */
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    char last_name[256] = "";
    for (size_t i = 0; i < ref.n; i++)
        if (strcmp(ref.t[i].file, victim->file) == 0) snprintf(last_name, sizeof last_name, "%s", ref.t[i].name);
    load_all(&ref, NULL, 2, dst, DRIFT_E_INPUT, last_name, victim->file);
    /* a missing shard names the tensor and the file */
    snprintf(path, sizeof path, "%s/%s", dir1, ref1.t[0].file);
    assert_int_equal(unlink(path), 0);
    load_all(&ref1, dir1, 2, dst, DRIFT_E_INPUT, ref1.t[0].name, ref1.t[0].file);
    /* a reference whose dtype disagrees with the shard header */
    ref.t[0].dtype = DRIFT_F16;
    snprintf(dir, sizeof dir, "%s/ck", g_tmp);
    load_all(&ref, NULL, 1, dst, DRIFT_E_INPUT, ref.t[0].name, "F16");
    for (int i = 0; i < NT; i++) {
        free(dst[i]);
        free(dst5[i]);
        free(dd[i]);
    }
    drift_params_ref_free(&ref);
    drift_params_ref_free(&ref1);
    drift_params_ref_free(&desc);
}

/* The background load: the same values as drift_ckpt_load on 1, 3 and 8 threads, tensors waited for in
 * any order; a cancel stops it cleanly; a changed byte makes a wait fail and the finish name tensor and
 * file; a missing shard is refused at the start. */
static void test_checkpoint_stream(void **state) {
    (void)state;
    char dir[1200], path[1400];
    snprintf(dir, sizeof dir, "%s/cks", g_tmp);
    drift_params_ref ref;
    write_ck(dir, &ref, 2);
    size_t which[NT];
    float *want[NT], *got[NT];
    for (int i = 0; i < NT; i++) {
        which[i] = (size_t)drift_params_ref_find(&ref, NAMES[i]);
        want[i] = calloc((size_t)numel_of(i), sizeof(float));
        got[i] = calloc((size_t)numel_of(i), sizeof(float));
    }
    load_all(&ref, NULL, 1, want, 0, NULL, NULL);
    drift_err e;
    drift_err_clear(&e);
    const int threads[] = {1, 3, 8};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < NT; i++) memset(got[i], 0xff, (size_t)numel_of(i) * sizeof(float));
        drift_ckpt_stream *s = NULL;
        assert_int_equal(drift_ckpt_stream_start(&ref, NULL, which, got, NT, threads[t], &s, &e), 0);
        for (int k = NT - 1; k >= 0; k--) { /* the last first: waits past tensors not yet read */
            assert_int_equal(drift_ckpt_stream_wait(s, (size_t)k, &e), 0);
            assert_memory_equal(got[k], want[k], (size_t)numel_of(k) * sizeof(float));
        }
        drift_ckpt_stats st;
        assert_int_equal(drift_ckpt_stream_finish(s, 0, &st, &e), 0);
        assert_int_equal(st.tensors, NT);
        assert_int_equal(st.threads, threads[t] < NT ? threads[t] : NT);
        assert_true(st.files >= 2);
    }
    /* cancelled after the first tensor: no error, nothing left running (ASan, TSan) */
    drift_ckpt_stream *s = NULL;
    assert_int_equal(drift_ckpt_stream_start(&ref, NULL, which, got, NT, 2, &s, &e), 0);
    assert_int_equal(drift_ckpt_stream_wait(s, 0, &e), 0);
    assert_int_equal(drift_ckpt_stream_finish(s, 1, NULL, &e), 0);
    assert_int_equal(drift_ckpt_stream_finish(NULL, 1, NULL, &e), 0);
    /* one byte of blocks.1.w changed: its wait fails, the finish names it and its file */
    const drift_params_ref_tensor *victim = &ref.t[which[4]];
    snprintf(path, sizeof path, "%s/%s", dir, victim->file);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    char last_name[256] = "";
    for (size_t i = 0; i < ref.n; i++)
        if (strcmp(ref.t[i].file, victim->file) == 0) snprintf(last_name, sizeof last_name, "%s", ref.t[i].name);
    fseek(f, -3, SEEK_END);
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    size_t bad = (size_t)drift_params_ref_find(&ref, last_name);
    size_t kbad = NT;
    for (int k = 0; k < NT; k++)
        if (which[k] == bad) kbad = (size_t)k;
    assert_true(kbad < NT);
    for (int t = 1; t <= 4; t += 3) {
        assert_int_equal(drift_ckpt_stream_start(&ref, NULL, which, got, NT, t, &s, &e), 0);
        assert_int_equal(drift_ckpt_stream_wait(s, kbad, &e), DRIFT_E_INPUT);
        drift_err_clear(&e);
        assert_int_equal(drift_ckpt_stream_finish(s, 0, NULL, &e), DRIFT_E_INPUT);
        if (!strstr(e.msg, last_name) || !strstr(e.msg, victim->file) || !strstr(e.msg, "content hash"))
            fail_msg("%d threads: '%s' does not name '%s' and %s", t, e.msg, last_name, victim->file);
    }
    /* a missing shard: refused before any thread starts, naming a tensor of it and the file */
    assert_int_equal(unlink(path), 0);
    s = (drift_ckpt_stream *)&e; /* overwritten with NULL on failure */
    assert_int_equal(drift_ckpt_stream_start(&ref, NULL, which, got, NT, 2, &s, &e), DRIFT_E_INPUT);
    assert_null(s);
    assert_non_null(strstr(e.msg, victim->file));
    assert_non_null(strstr(e.msg, "tensor '"));
    for (int i = 0; i < NT; i++) {
        free(want[i]);
        free(got[i]);
    }
    drift_params_ref_free(&ref);
}

/* More shards than the file table's first allocation (16): every tensor in a shard of its own, loaded
 * in the foreground and in the background (a table that moved while jobs pointed into it was a
 * use-after-free: ASan). */
#define NMANY 40
static int fill_many(size_t i, float *dst, void *user, drift_err *err) {
    (void)user;
    (void)err;
    for (int k = 0; k < 100; k++) dst[k] = (float)i + 0.25f * (float)k;
    return DRIFT_OK;
}

static void test_checkpoint_many_shards(void **state) {
    (void)state;
    char dir[1200], names[NMANY][32];
    snprintf(dir, sizeof dir, "%s/ckm", g_tmp);
    static const int64_t shape[1] = {100};
    drift_ckpt_spec specs[NMANY];
    for (int i = 0; i < NMANY; i++) {
        snprintf(names[i], sizeof names[i], "t.%d", i);
        specs[i] = (drift_ckpt_spec){names[i], DRIFT_F32, 1, shape};
    }
    drift_params_ref ref;
    drift_params_ref_init(&ref);
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_ckpt_write(dir, specs, NMANY, 1, fill_many, NULL, 2, &ref, &e), 0);
    size_t which[NMANY];
    float *dst[NMANY], *dst2[NMANY];
    for (int i = 0; i < NMANY; i++) {
        which[i] = (size_t)drift_params_ref_find(&ref, names[i]);
        dst[i] = calloc(100, sizeof(float));
        dst2[i] = calloc(100, sizeof(float));
    }
    drift_ckpt_stats st;
    int rc = drift_ckpt_load(&ref, NULL, which, dst, NMANY, 3, &st, &e);
    if (rc) fail_msg("load: %s", e.msg);
    assert_int_equal(st.files, NMANY);
    drift_ckpt_stream *s = NULL;
    assert_int_equal(drift_ckpt_stream_start(&ref, NULL, which, dst2, NMANY, 3, &s, &e), 0);
    assert_int_equal(drift_ckpt_stream_finish(s, 0, &st, &e), 0);
    assert_int_equal(st.files, NMANY);
    for (int i = 0; i < NMANY; i++) {
        float want[100];
        fill_many((size_t)i, want, NULL, NULL);
        assert_memory_equal(dst[i], want, sizeof want);
        assert_memory_equal(dst2[i], want, sizeof want);
        free(dst[i]);
        free(dst2[i]);
    }
    drift_params_ref_free(&ref);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_checkpoint_hostile_index(void **state) {
    (void)state;
    char dir[1200], path[1400];
    snprintf(dir, sizeof dir, "%s/ckh", g_tmp);
    drift_params_ref ref;
    write_ck(dir, &ref, 2);
    drift_err e;
    drift_params_ref d;
    drift_params_ref_init(&d);
    snprintf(path, sizeof path, "%s/%s", dir, ref.index);
    write_text(path, "{\"weight_map\": {\"emb.weight\": \"../../etc/passwd\"}}");
    assert_int_equal(drift_ckpt_describe(dir, NULL, NULL, NULL, 0, 1, &d, NULL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, ".."));
    char text[600];
    snprintf(text, sizeof text, "{\"weight_map\": {\"not.there\": \"%s\"}}", ref.t[0].file);
    write_text(path, text);
    int rc = drift_ckpt_describe(dir, NULL, NULL, NULL, 0, 1, &d, NULL, &e);
    assert_int_equal(rc, DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "not.there"));
    write_text(path, "{\"weight_map\": [1, 2]}");
    assert_int_equal(drift_ckpt_describe(dir, NULL, NULL, NULL, 0, 1, &d, NULL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "weight_map"));
    write_text(path, "{\"weight_map\": {\"emb.weight\": \"missing.safetensors\"}}");
    assert_int_equal(drift_ckpt_describe(dir, NULL, NULL, NULL, 0, 1, &d, NULL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "missing.safetensors"));
    /* an empty directory */
    snprintf(path, sizeof path, "%s/empty", g_tmp);
    char cmd[1500];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(drift_ckpt_describe(path, NULL, NULL, NULL, 0, 1, &d, NULL, &e), DRIFT_E_INPUT);
    assert_int_equal(d.n, 0);
    drift_params_ref_free(&ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_split_and_threads),
        cmocka_unit_test(test_ref_json_roundtrip),
        cmocka_unit_test(test_ref_json_hostile),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_checkpoint_stream),
        cmocka_unit_test(test_checkpoint_many_shards),
        cmocka_unit_test(test_checkpoint_hostile_index),
    };
    return cmocka_run_group_tests(tests, setup_tmp, NULL);
}
