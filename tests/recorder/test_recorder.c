/* Tests of the recorder: host captures read back through the trace reader
 * (values and stats exact), sampling, the staging policies (drop_step and
 * block, with the writer thread stalled deterministically by holding its
 * HDF5 lock), unknown sites after the SWMR start, a real disk-full (a 2 MiB
 * tmpfs in a private mount namespace, and RLIMIT_FSIZE), a SIGKILLed
 * recording process, a hung writer at close, and forked children. */
#define _GNU_SOURCE /* unshare, CLONE_NEWNS */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "formats/trace.h"
#include "recorder/recorder.h"
#include "recorder/recorder_internal.h"

/* ----------------------------------------------------------------------- */
/* Helpers                                                                   */
/* ----------------------------------------------------------------------- */
static char tmpdir[1024];

static int setup(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    if (!t || !t[0]) t = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/recorder.%ld", t, (long)getpid());
    mkdir(t, 0755);
    mkdir(tmpdir, 0755);
    return 0;
}

static const char *tpath(const char *name) {
    static char buf[8][1400];
    static int k;
    k = (k + 1) & 7;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static double ms_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) * 1e-6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

#define CHECK_OK(call)                                                                                     \
    do {                                                                                                   \
        drift_err e_;                                                                                      \
        drift_err_clear(&e_);                                                                              \
        int rc_ = (call);                                                                                  \
        (void)e_;                                                                                          \
        if (rc_ != DRIFT_OK) fail_msg("%s: rc %d: %s", #call, rc_, drift_recorder_last_error());           \
    } while (0)

typedef struct site_def {
    const char *name;
    drift_dtype dt;
    int ndim;
    int64_t shape[3];
} site_def;

static int64_t def_numel(const site_def *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

static size_t def_bytes(const site_def *d) { return (size_t)def_numel(d) * drift_dtype_size(d->dt); }

/* Element i of the record (site k, step, microbatch, call): deterministic,
 * with zeros, subnormals, big values, and a NaN and infinities in records
 * longer than 8 elements. */
static float gen(int k, int64_t step, int mb, int call, size_t i, size_t n) {
    if (n > 8 && i == n - 1) return NAN;
    if (n > 8 && i == n - 2) return INFINITY;
    if (n > 8 && i == n - 3) return -INFINITY;
    uint32_t h = (uint32_t)(k * 7919 + step * 104729 + mb * 1299709 + call * 15485863) ^ (uint32_t)(i * 2654435761u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    switch (h % 11) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return 1e-40f;
    case 3: return 65504.0f;
    default: return ((float)(h % 20001) - 10000.0f) * 1e-3f * (float)(1 + (h >> 20) % 7);
    }
}

static void fill(const site_def *d, int k, int64_t step, int mb, int call, void *buf) {
    size_t n = (size_t)def_numel(d);
    for (size_t i = 0; i < n; i++) {
        float v = gen(k, step, mb, call, i, n);
        if (d->dt == DRIFT_BF16) ((uint16_t *)buf)[i] = drift_f32_to_bf16(v);
        else if (d->dt == DRIFT_F16) ((uint16_t *)buf)[i] = drift_f32_to_f16(v);
        else ((float *)buf)[i] = v;
    }
}

static int record(drift_recorder *r, const site_def *d, int k, int64_t step, int mb, int call) {
    unsigned char *buf = malloc(def_bytes(d));
    assert_non_null(buf);
    fill(d, k, step, mb, call, buf);
    int rc = drift_recorder_record_host(r, d->name, d->dt, d->ndim, d->shape, buf, mb, (int32_t)(step % 4), call, NULL);
    /* the recorder copied it: scribble over the caller's buffer */
    memset(buf, 0xA5, def_bytes(d));
    free(buf);
    return rc;
}

static drift_recorder *open_rec(const char *path, const char *opts) {
    drift_recorder *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_open(&r, path, 0, 1, 4, "run-7", "tiny-dit:layers=2", 4.5, "{\"name\":\"p\"}", opts, &err);
    if (rc) fail_msg("open %s: %s", path, err.msg);
    return r;
}

typedef int (*stored_fn)(int k, int64_t step, int mb, int call);

/* Verifies every committed record of the given sites: its index comes from
 * a generated key (denoise = step % 4), its stats equal the stats of the
 * regenerated data, its stored flag equals want_stored, and a stored tensor
 * equals the data bit for bit. Returns the number of records checked. */
static int64_t verify_records(drift_trace_reader *rd, const site_def *defs, int nd, stored_fn want_stored) {
    int64_t total = 0;
    for (int k = 0; k < nd; k++) {
        const site_def *d = &defs[k];
        long si = drift_trace_reader_find_site(rd, d->name);
        if (si < 0) fail_msg("site %s missing", d->name);
        drift_trace_site_info info;
        drift_err err;
        drift_err_clear(&err);
        if (drift_trace_reader_site(rd, (size_t)si, &info, &err)) fail_msg("site %s: %s", d->name, err.msg);
        assert_int_equal(info.dtype, d->dt);
        assert_int_equal(info.ndim, d->ndim);
        for (int i = 0; i < d->ndim; i++) assert_int_equal(info.shape[i], d->shape[i]);
        int64_t n = info.n_records;
        if (n == 0) continue;
        drift_trace_index *ix = calloc((size_t)n, sizeof *ix);
        drift_trace_stats *st = calloc((size_t)n, sizeof *st);
        size_t bytes = def_bytes(d);
        unsigned char *want = malloc(bytes), *got = malloc(bytes);
        assert_true(ix && st && want && got);
        if (drift_trace_read_index(rd, (size_t)si, 0, n, ix, &err)) fail_msg("index %s: %s", d->name, err.msg);
        if (drift_trace_read_stats(rd, (size_t)si, 0, n, st, &err)) fail_msg("stats %s: %s", d->name, err.msg);
        for (int64_t r = 0; r < n; r++) {
            int mb = ix[r].microbatch, call = ix[r].call_index;
            int64_t step = ix[r].step;
            if (ix[r].denoise_index != (int32_t)(step % 4))
                fail_msg("%s rec %lld: denoise %d", d->name, (long long)r, ix[r].denoise_index);
            fill(d, k, step, mb, call, want);
            drift_trace_stats ws;
            drift_trace_stats_compute(want, d->dt, (size_t)def_numel(d), &ws);
            if (memcmp(&ws, &st[r], sizeof ws) != 0)
                fail_msg("%s step %lld mb %d call %d: stats differ (min %g/%g mean %.17g/%.17g nan %lld/%lld)",
                         d->name, (long long)step, mb, call, st[r].min, ws.min, st[r].mean, ws.mean,
                         (long long)st[r].nan_count, (long long)ws.nan_count);
            int ws_ = want_stored ? want_stored(k, step, mb, call) : 1;
            if (ix[r].stored != ws_)
                fail_msg("%s step %lld mb %d call %d: stored %d, expected %d", d->name, (long long)step, mb, call,
                         ix[r].stored, ws_);
            if (ix[r].stored) {
                if (drift_trace_read_record_raw(rd, (size_t)si, r, got, bytes, &err))
                    fail_msg("%s rec %lld: %s", d->name, (long long)r, err.msg);
                if (memcmp(want, got, bytes) != 0)
                    fail_msg("%s step %lld mb %d call %d: data differ", d->name, (long long)step, mb, call);
            } else if (info.has_data) {
                assert_int_equal(drift_trace_read_record_raw(rd, (size_t)si, r, got, bytes, NULL), DRIFT_E_INPUT);
            }
        }
        total += n;
        free(ix);
        free(st);
        free(want);
        free(got);
    }
    return total;
}

static drift_trace_reader *open_reader(const char *path) {
    drift_trace_reader *rd = NULL;
    drift_err err;
    drift_err_clear(&err);
    if (drift_trace_reader_open(&rd, path, DRIFT_TRACE_OPEN_NORMAL, &err)) fail_msg("reader %s: %s", path, err.msg);
    return rd;
}

static int has_note(drift_trace_reader *rd, int64_t step, const char *needle) {
    drift_trace_note *notes = NULL;
    size_t n = 0;
    if (drift_trace_read_notes(rd, INT64_MIN, &notes, &n, NULL)) return 0;
    int found = 0;
    for (size_t i = 0; i < n; i++)
        if (notes[i].step == step && strstr(notes[i].text, needle)) found = 1;
    free(notes);
    return found;
}

/* Holds the recorder's HDF5 lock from a helper thread: the writer thread
 * stops at its next write, so staging fills deterministically. */
typedef struct stall {
    pthread_t th;
    drift_recorder *r;
    pthread_mutex_t m;
    pthread_cond_t c;
    int locked, release, delay_ms;
} stall;

static void *stall_main(void *a) {
    stall *s = a;
    pthread_mutex_t *h5 = &s->r->h5mu;
    pthread_mutex_lock(h5);
    pthread_mutex_lock(&s->m);
    s->locked = 1;
    pthread_cond_broadcast(&s->c);
    while (!s->release) pthread_cond_wait(&s->c, &s->m);
    int d = s->delay_ms;
    pthread_mutex_unlock(&s->m);
    if (d) sleep_ms(d);
    pthread_mutex_unlock(h5);
    return NULL;
}

static void stall_begin(stall *s, drift_recorder *r) {
    memset(s, 0, sizeof *s);
    s->r = r;
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->c, NULL);
    assert_int_equal(pthread_create(&s->th, NULL, stall_main, s), 0);
    pthread_mutex_lock(&s->m);
    while (!s->locked) pthread_cond_wait(&s->c, &s->m);
    pthread_mutex_unlock(&s->m);
}

/* Lets the writer go delay_ms from now (returns at once). */
static void stall_end(stall *s, int delay_ms) {
    pthread_mutex_lock(&s->m);
    s->release = 1;
    s->delay_ms = delay_ms;
    pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m);
}

static void stall_join(stall *s) {
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->m);
    pthread_cond_destroy(&s->c);
}

/* ----------------------------------------------------------------------- */
/* Staging ring                                                              */
/* ----------------------------------------------------------------------- */
static void test_staging_ring(void **state) {
    (void)state;
    rec_staging s;
    drift_err err;
    assert_int_equal(drift_rec_staging_init(&s, 100, 4, &err), DRIFT_E_USAGE);
    /* entry limit: record entries up to max_records, control entries beyond */
    assert_int_equal(drift_rec_staging_init(&s, 4096, 2, &err), DRIFT_OK);
    assert_non_null(drift_rec_staging_reserve(&s, 0, 0, NULL));
    assert_non_null(drift_rec_staging_reserve(&s, 0, 0, NULL));
    assert_null(drift_rec_staging_reserve(&s, 0, 0, NULL));
    assert_non_null(drift_rec_staging_reserve(&s, 0, 1, NULL));
    drift_rec_staging_pop(&s);
    drift_rec_staging_pop(&s);
    assert_non_null(drift_rec_staging_reserve(&s, 0, 0, NULL));
    drift_rec_staging_free(&s);

    assert_int_equal(drift_rec_staging_init(&s, 4096, 16, &err), DRIFT_OK);
    assert_int_equal(s.cap, 4096);
    void *p[8];
    rec_entry *e[8];
    /* three records of 1000 bytes, charged 1024 each, at 0, 1024, 2048 */
    for (int i = 0; i < 3; i++) {
        e[i] = drift_rec_staging_reserve(&s, 1000, 0, &p[i]);
        assert_non_null(e[i]);
        assert_ptr_equal(p[i], s.base + 1024 * i);
        assert_int_equal(e[i]->charge, 1024);
        memset(p[i], i + 1, 1000);
    }
    assert_int_equal(s.used, 3072);
    drift_rec_staging_pop(&s); /* e0 */
    drift_rec_staging_pop(&s); /* e1: [0, 2048) free */
    assert_int_equal(s.used, 1024);
    e[3] = drift_rec_staging_reserve(&s, 1024, 0, &p[3]); /* fits at the end: [3072, 4096) */
    assert_non_null(e[3]);
    assert_ptr_equal(p[3], s.base + 3072);
    e[4] = drift_rec_staging_reserve(&s, 2048, 0, &p[4]); /* nothing after 4096: wraps to 0 */
    assert_non_null(e[4]);
    assert_ptr_equal(p[4], s.base);
    assert_int_equal(e[4]->charge, 2048);
    assert_int_equal(s.used, 4096);
    assert_null(drift_rec_staging_reserve(&s, 1, 1, NULL)); /* bytes full, even for control */
    assert_non_null(drift_rec_staging_reserve(&s, 0, 1, NULL)); /* no bytes: fine */
    assert_true(drift_rec_staging_too_big(&s, 4097));
    assert_false(drift_rec_staging_too_big(&s, 4096));
    /* FIFO frees: e2, e3 -> e4 [0, 2048) and the control entry live */
    drift_rec_staging_pop(&s);
    drift_rec_staging_pop(&s);
    assert_int_equal(s.used, 2048);
    assert_ptr_equal(drift_rec_staging_head(&s), e[4]);
    e[5] = drift_rec_staging_reserve(&s, 2000, 0, &p[5]);
    assert_non_null(e[5]);
    assert_ptr_equal(p[5], s.base + 2048);
    while (drift_rec_staging_head(&s)) drift_rec_staging_pop(&s);
    assert_int_equal(s.used, 0);
    assert_null(drift_rec_staging_head(&s));
    assert_int_equal(s.high, 4096);
    /* a wrap charges the unused tail, which comes back when it is freed */
    e[0] = drift_rec_staging_reserve(&s, 3000, 0, &p[0]); /* [0, 3008) */
    e[1] = drift_rec_staging_reserve(&s, 512, 0, &p[1]);  /* [3008, 3520) */
    assert_ptr_equal(p[1], s.base + 3008);
    drift_rec_staging_pop(&s);                            /* [0, 3008) free */
    e[2] = drift_rec_staging_reserve(&s, 1000, 0, &p[2]); /* 576 left at the end: wraps */
    assert_non_null(e[2]);
    assert_ptr_equal(p[2], s.base);
    assert_int_equal(e[2]->charge, (4096 - 3520) + 1024);
    assert_int_equal(s.used, 512 + 576 + 1024);
    e[3] = drift_rec_staging_reserve(&s, 2000, 0, &p[3]); /* [1024, 3008) is free: 1984 < 2048 */
    assert_null(e[3]);
    e[3] = drift_rec_staging_reserve(&s, 1984, 0, &p[3]);
    assert_non_null(e[3]);
    assert_ptr_equal(p[3], s.base + 1024);
    assert_int_equal(s.used, 4096);
    while (drift_rec_staging_head(&s)) drift_rec_staging_pop(&s);
    assert_int_equal(s.used, 0);
    /* aux payloads are freed with their entry (ASan checks) */
    rec_entry *c = drift_rec_staging_reserve(&s, 0, 1, NULL);
    c->aux = malloc(100);
    drift_rec_staging_free(&s);
}

/* ----------------------------------------------------------------------- */
/* Round trip                                                                */
/* ----------------------------------------------------------------------- */
static const site_def RT_SITES[] = {
    {"blocks.0.ffn:out", DRIFT_BF16, 2, {3, 5, 0}},
    {"input:latents:post_cast", DRIFT_F16, 1, {15, 0, 0}},
    {"output:noise_pred", DRIFT_F32, 3, {2, 2, 3}},
    {"logprob:old", DRIFT_F32, 0, {0, 0, 0}},
};

static void test_roundtrip_host(void **state) {
    (void)state;
    const char *path = tpath("roundtrip.h5");
    drift_recorder *r = open_rec(path, "producer=recorder-test 0.1");
    /* two sites up front, two lazily in the warm-up step */
    int id = -1;
    for (int k = 0; k < 2; k++) {
        CHECK_OK(drift_recorder_declare_site(r, RT_SITES[k].name, RT_SITES[k].dt, RT_SITES[k].ndim, RT_SITES[k].shape,
                                             &id, NULL));
        assert_int_equal(id, k);
    }
    /* re-declaring the same is a no-op; a different shape is not */
    CHECK_OK(drift_recorder_declare_site(r, RT_SITES[0].name, RT_SITES[0].dt, 2, RT_SITES[0].shape, &id, NULL));
    assert_int_equal(id, 0);
    int64_t other[2] = {3, 6};
    assert_int_equal(drift_recorder_declare_site(r, RT_SITES[0].name, DRIFT_BF16, 2, other, NULL, NULL), DRIFT_E_USAGE);
    assert_non_null(strstr(drift_recorder_last_error(), "declared bf16 [3,5]"));
    float pv[4] = {1.5f, -2.0f, 0.25f, 3.0f};
    int64_t ps = 4;
    CHECK_OK(drift_recorder_add_param(r, "proj_out.bias", 1, &ps, NULL, NULL, pv, NULL));
    CHECK_OK(drift_recorder_set_param_dtype(r, "proj_out.bias", DRIFT_BF16, NULL));
    double rope[4] = {1, 0.5, 0.25, 0.125};
    CHECK_OK(drift_recorder_add_buffer(r, "rope.freqs", DRIFT_F64, 1, &ps, rope, NULL));
    static const char graph[] = "{\"nodes\":[]}";
    CHECK_OK(drift_recorder_set_graph(r, graph, sizeof graph - 1, NULL));
    assert_int_equal(drift_recorder_record_host(r, RT_SITES[0].name, DRIFT_BF16, 2, RT_SITES[0].shape, pv, 0, 0, 0, NULL),
                     DRIFT_E_USAGE); /* no open step */

    for (int64_t step = 0; step < 3; step++) {
        CHECK_OK(drift_recorder_begin_step(r, step * 2, NULL)); /* steps 0, 2, 4 */
        for (int mb = 0; mb < 2; mb++)
            for (int k = 0; k < 4; k++) {
                CHECK_OK(record(r, &RT_SITES[k], k, step * 2, mb, 0));
                if (k == 0) CHECK_OK(record(r, &RT_SITES[k], k, step * 2, mb, 1)); /* called twice */
            }
        drift_trace_metric m;
        memset(&m, 0, sizeof m);
        m.denoise_index = -1;
        m.numel = 12;
        m.mean_abs_diff = 0.125 * (double)(step + 1);
        m.max_ulp_diff = 7;
        CHECK_OK(drift_recorder_add_metric(r, "output:noise_pred", &m, NULL));
        drift_trace_step_metrics sm = {0, 0, -1, 8, 1e-4, 2e-4, 3e-9};
        CHECK_OK(drift_recorder_add_step_metrics(r, &sm, NULL));
        CHECK_OK(drift_recorder_note(r, 0, "hello from the test", NULL));
        CHECK_OK(drift_recorder_end_step(r, NULL));
        if (step == 0) {
            /* the first step ended: the trace started, params are closed */
            CHECK_OK(drift_recorder_flush(r, 10000, NULL));
            assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STARTED), 1);
            assert_int_equal(drift_recorder_add_param(r, "late", 1, &ps, NULL, NULL, pv, NULL), DRIFT_E_USAGE);
            assert_non_null(strstr(drift_recorder_last_error(), "before the trace starts"));
        }
    }
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_RECORDS), 30);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STORED), 30);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_WRITTEN_RECORDS), 30);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_COMMITTED_STEPS), 3);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_LAST_COMMITTED), 4);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED), 0);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_N_SITES), 4);
    assert_int_equal(drift_recorder_enabled(r), 1);
    assert_string_equal(drift_recorder_error(r), "");
    CHECK_OK(drift_recorder_close(r, NULL));

    drift_trace_reader *rd = open_reader(path);
    assert_int_equal(drift_trace_reader_unclean(rd), 0);
    const drift_trace_meta *meta = drift_trace_reader_meta(rd);
    assert_int_equal(meta->side, DRIFT_TRACE_SIDE_TRAINER);
    assert_int_equal(meta->rank, 1);
    assert_int_equal(meta->world_size, 4);
    assert_string_equal(meta->run_id, "run-7");
    assert_string_equal(meta->family, "tiny-dit:layers=2");
    assert_string_equal(meta->plan_json, "{\"name\":\"p\"}");
    assert_string_equal(meta->producer, "recorder-test 0.1");
    assert_true(meta->guidance_scale == 4.5);
    assert_int_equal(drift_trace_reader_n_sites(rd), 4);
    for (int k = 0; k < 4; k++) assert_int_equal(drift_trace_reader_find_site(rd, RT_SITES[k].name), k);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 3);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(steps[i].step, (int64_t)i * 2);
        assert_int_equal(steps[i].n_records, 10);
        assert_int_equal(steps[i].flags, 0);
    }
    assert_int_equal(verify_records(rd, RT_SITES, 4, NULL), 30);
    /* params, buffers, graph */
    long pi = drift_trace_reader_find_param(rd, "proj_out.bias");
    assert_true(pi >= 0);
    float got[4];
    CHECK_OK(drift_trace_read_param(rd, (size_t)pi, got, 4, NULL));
    assert_memory_equal(got, pv, sizeof pv);
    assert_int_equal(drift_trace_reader_find_param_dtype(rd, "proj_out.bias"), DRIFT_BF16);
    assert_true(drift_trace_reader_find_buffer(rd, "rope.freqs") >= 0);
    char *gj = NULL;
    size_t gl = 0;
    CHECK_OK(drift_trace_read_graph(rd, &gj, &gl, NULL));
    assert_string_equal(gj, graph);
    free(gj);
    /* metrics and notes carry the step they were queued in */
    drift_trace_metric *mr = NULL;
    size_t nm = 0;
    CHECK_OK(drift_trace_read_metrics(rd, INT64_MIN, &mr, &nm, NULL));
    assert_int_equal(nm, 3);
    for (size_t i = 0; i < nm; i++) {
        assert_int_equal(mr[i].step, (int64_t)i * 2);
        assert_true(mr[i].mean_abs_diff == 0.125 * (double)(i + 1));
        assert_string_equal(drift_trace_reader_metric_site(rd, (size_t)mr[i].site), "output:noise_pred");
    }
    free(mr);
    drift_trace_step_metrics *smr = NULL;
    CHECK_OK(drift_trace_read_step_metrics(rd, INT64_MIN, &smr, &nm, NULL));
    assert_int_equal(nm, 3);
    assert_int_equal(smr[2].step, 4);
    free(smr);
    assert_true(has_note(rd, 2, "hello from the test"));
    drift_trace_reader_close(rd);
}

/* ----------------------------------------------------------------------- */
/* Sampling                                                                  */
/* ----------------------------------------------------------------------- */
static const site_def SM_SITES[] = {
    {"a.x:out", DRIFT_F32, 1, {16, 0, 0}},
    {"a.skip:out", DRIFT_BF16, 1, {16, 0, 0}},
    {"b.y:out", DRIFT_F16, 2, {2, 8, 0}},
};

static int sm_stored(int k, int64_t step, int mb, int call) {
    (void)mb;
    (void)call;
    return k == 0 && (step == 0 || (step >= 2 && step <= 3) || step % 5 == 0);
}

static void test_sampling(void **state) {
    (void)state;
    const char *path = tpath("sampling.h5");
    drift_recorder *r = open_rec(path, "store_steps=0,2:3,every:5;store_sites=a.*,!a.skip:*");
    for (int64_t step = 0; step < 7; step++) {
        CHECK_OK(drift_recorder_begin_step(r, step, NULL));
        assert_int_equal(drift_recorder_wants_tensor(r, "a.x:out"), sm_stored(0, step, 0, 0));
        assert_int_equal(drift_recorder_wants_tensor(r, "a.skip:out"), 0);
        for (int k = 0; k < 3; k++) CHECK_OK(record(r, &SM_SITES[k], k, step, 0, 0));
        CHECK_OK(drift_recorder_end_step(r, NULL));
    }
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_RECORDS), 21);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STORED), 4); /* a.x:out at steps 0, 2, 3, 5 */
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_SAMPLED_OUT), 17);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_WRITTEN_RECORDS), 21);
    CHECK_OK(drift_recorder_close(r, NULL));

    drift_trace_reader *rd = open_reader(path);
    /* every record has its stats row, stored or not */
    assert_int_equal(verify_records(rd, SM_SITES, 3, sm_stored), 21);
    drift_trace_site_info info;
    CHECK_OK(drift_trace_reader_site(rd, (size_t)drift_trace_reader_find_site(rd, "a.x:out"), &info, NULL));
    assert_int_equal(info.has_data, 1);
    CHECK_OK(drift_trace_reader_site(rd, (size_t)drift_trace_reader_find_site(rd, "a.skip:out"), &info, NULL));
    assert_int_equal(info.has_data, 0); /* never stored: declared stats-only */
    assert_int_equal(info.n_records, 7);
    CHECK_OK(drift_trace_reader_site(rd, (size_t)drift_trace_reader_find_site(rd, "b.y:out"), &info, NULL));
    assert_int_equal(info.has_data, 0);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 7);
    for (size_t i = 0; i < ns; i++) assert_int_equal(steps[i].flags, 0); /* sampling is not dropping */
    drift_trace_reader_close(rd);
}

/* ----------------------------------------------------------------------- */
/* Staging full                                                              */
/* ----------------------------------------------------------------------- */
static const site_def BIG[] = {{"big:out", DRIFT_F32, 1, {4096, 0, 0}}}; /* 16 KiB */

static int drop_stored(int k, int64_t step, int mb, int call) {
    (void)k;
    (void)call;
    return !(step == 1 && mb >= 4); /* step 1: the 5th and 6th tensors dropped */
}

static void test_drop_step(void **state) {
    (void)state;
    const char *path = tpath("drop.h5");
    drift_recorder *r = open_rec(path, "staging_bytes=65536;policy=drop_step");
    CHECK_OK(drift_recorder_declare_site(r, BIG[0].name, DRIFT_F32, 1, BIG[0].shape, NULL, NULL));
    CHECK_OK(drift_recorder_start(r, NULL));
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    CHECK_OK(record(r, &BIG[0], 0, 0, 0, 0));
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));

    stall s;
    stall_begin(&s, r);
    CHECK_OK(drift_recorder_begin_step(r, 1, NULL));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int mb = 0; mb < 6; mb++) CHECK_OK(record(r, &BIG[0], 0, 1, mb, 0)); /* 4 fit in 64 KiB */
    double ms = ms_since(&t0);
    if (ms > 1000) fail_msg("drop_step waited %.0f ms", ms);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED), 2);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STAGING_USED), 65536);
    assert_int_equal(drift_recorder_wants_tensor(r, BIG[0].name), 0); /* the rest of the step drops */
    CHECK_OK(drift_recorder_end_step(r, NULL));
    stall_end(&s, 0);
    stall_join(&s);
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    /* the next step is whole again */
    CHECK_OK(drift_recorder_begin_step(r, 2, NULL));
    for (int mb = 0; mb < 3; mb++) CHECK_OK(record(r, &BIG[0], 0, 2, mb, 0));
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED_STEPS), 1);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_LOST), 0);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_WRITTEN_RECORDS), 10);
    CHECK_OK(drift_recorder_close(r, NULL));

    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 3);
    assert_int_equal(steps[0].flags, 0);
    assert_int_equal(steps[1].flags, DRIFT_TRACE_STEP_DROPPED);
    assert_int_equal(steps[1].n_records, 6); /* stats rows of the dropped ones too */
    assert_int_equal(steps[2].flags, 0);
    assert_true(has_note(rd, 1, "2 tensors (32768 bytes) not stored, staging full"));
    assert_true(has_note(rd, 1, "policy drop_step"));
    assert_int_equal(verify_records(rd, BIG, 1, drop_stored), 10);
    drift_trace_reader_close(rd);
}

static int block_stored(int k, int64_t step, int mb, int call) {
    (void)k;
    (void)call;
    return !(step == 1 && mb >= 4);
}

static void test_block_policy(void **state) {
    (void)state;
    const char *path = tpath("block.h5");
    drift_recorder *r = open_rec(path, "staging_bytes=65536;policy=block;block_timeout_ms=300");
    CHECK_OK(drift_recorder_declare_site(r, BIG[0].name, DRIFT_F32, 1, BIG[0].shape, NULL, NULL));
    CHECK_OK(drift_recorder_start(r, NULL));
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    CHECK_OK(record(r, &BIG[0], 0, 0, 0, 0));
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));

    /* 1. writer stuck: the 5th tensor waits ~300 ms, then drops; the 6th drops at once */
    stall s;
    stall_begin(&s, r);
    CHECK_OK(drift_recorder_begin_step(r, 1, NULL));
    for (int mb = 0; mb < 4; mb++) CHECK_OK(record(r, &BIG[0], 0, 1, mb, 0));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(record(r, &BIG[0], 0, 1, 4, 0));
    double ms5 = ms_since(&t0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(record(r, &BIG[0], 0, 1, 5, 0));
    double ms6 = ms_since(&t0);
    if (ms5 < 250 || ms5 > 5000) fail_msg("5th tensor waited %.0f ms, expected about 300", ms5);
    if (ms6 > 150) fail_msg("6th tensor waited %.0f ms, expected no wait after a timeout in the step", ms6);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_BLOCK_TIMEOUTS), 1);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED), 2);
    CHECK_OK(drift_recorder_end_step(r, NULL));
    stall_end(&s, 0);
    stall_join(&s);
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));

    /* 2. writer slow: the 5th tensor waits until the writer frees space, then is stored */
    stall_begin(&s, r);
    CHECK_OK(drift_recorder_begin_step(r, 2, NULL));
    for (int mb = 0; mb < 4; mb++) CHECK_OK(record(r, &BIG[0], 0, 2, mb, 0));
    stall_end(&s, 100);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(record(r, &BIG[0], 0, 2, 4, 0));
    double ms = ms_since(&t0);
    stall_join(&s);
    if (ms < 50) fail_msg("5th tensor waited only %.0f ms with the writer stalled for 100 ms", ms);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_BLOCK_TIMEOUTS), 1);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED), 2);
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_true(drift_recorder_counter(r, DRIFT_RECORDER_BLOCKED_NS) >= 300000000LL);
    CHECK_OK(drift_recorder_close(r, NULL));

    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 3);
    assert_int_equal(steps[1].flags, DRIFT_TRACE_STEP_DROPPED);
    assert_int_equal(steps[2].flags, 0);
    assert_true(has_note(rd, 1, "policy block"));
    assert_int_equal(verify_records(rd, BIG, 1, block_stored), 1 + 6 + 5);
    drift_trace_reader_close(rd);
}

/* The warm-up step is held in staging until the start: what does not fit
 * drops at once, even with policy=block (nothing could free space). */
static int warm_stored(int k, int64_t step, int mb, int call) {
    (void)k;
    (void)call;
    return !(step == 0 && mb >= 4);
}

static void test_warmup_overflow(void **state) {
    (void)state;
    const char *path = tpath("warmup.h5");
    drift_recorder *r = open_rec(path, "staging_bytes=65536;policy=block;block_timeout_ms=5000");
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int mb = 0; mb < 6; mb++) CHECK_OK(record(r, &BIG[0], 0, 0, mb, 0));
    double ms = ms_since(&t0);
    if (ms > 2000) fail_msg("warm-up overflow waited %.0f ms", ms);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STARTED), 0);
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_close(r, NULL));
    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 1);
    assert_int_equal(steps[0].flags, DRIFT_TRACE_STEP_DROPPED);
    assert_int_equal(verify_records(rd, BIG, 1, warm_stored), 6);
    drift_trace_reader_close(rd);
}

/* ----------------------------------------------------------------------- */
/* Misuse: unknown site after the start, mismatches, step order            */
/* ----------------------------------------------------------------------- */
static void test_misuse(void **state) {
    (void)state;
    const char *path = tpath("misuse.h5");
    drift_recorder *r = open_rec(path, NULL);
    const site_def *d = &RT_SITES[2];
    CHECK_OK(drift_recorder_begin_step(r, 3, NULL));
    CHECK_OK(record(r, d, 0, 3, 0, 0));
    assert_int_equal(drift_recorder_begin_step(r, 4, NULL), DRIFT_E_USAGE); /* still open */
    CHECK_OK(drift_recorder_end_step(r, NULL));
    assert_int_equal(drift_recorder_end_step(r, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_begin_step(r, 3, NULL), DRIFT_E_USAGE); /* not increasing */
    assert_non_null(strstr(drift_recorder_last_error(), "expected a step > 3"));
    assert_int_equal(drift_recorder_begin_step(r, -1, NULL), DRIFT_E_USAGE);
    CHECK_OK(drift_recorder_begin_step(r, 10, NULL));
    /* a site first seen after the start */
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(record(r, &RT_SITES[0], 0, 10, 0, 0), DRIFT_E_USAGE);
    assert_non_null(strstr(drift_recorder_last_error(), "first recorded after the trace started"));
    /* a known site with another shape or dtype */
    int64_t sh[3] = {2, 2, 4};
    float buf[16] = {0};
    assert_int_equal(drift_recorder_record_host(r, d->name, DRIFT_F32, 3, sh, buf, 0, 0, 0, &err), DRIFT_E_USAGE);
    assert_non_null(strstr(err.msg, "record is fp32 [2,2,4], but the site was declared fp32 [2,2,3]"));
    assert_int_equal(drift_recorder_record_host(r, d->name, DRIFT_BF16, 3, d->shape, buf, 0, 0, 0, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_record_host(r, d->name, DRIFT_F64, 3, d->shape, buf, 0, 0, 0, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_record_host(r, d->name, DRIFT_F32, 3, d->shape, NULL, 0, 0, 0, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_record_host(r, "bad\nname", DRIFT_F32, 3, d->shape, buf, 0, 0, 0, NULL),
                     DRIFT_E_USAGE);
    int64_t zero[1] = {0};
    assert_int_equal(drift_recorder_record_host(r, d->name, DRIFT_F32, 1, zero, buf, 0, 0, 0, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_declare_site(r, "late:site", DRIFT_F32, 1, sh, NULL, NULL), DRIFT_E_USAGE);
    CHECK_OK(record(r, d, 0, 10, 0, 0));
    assert_int_equal(drift_recorder_note(r, 7, "x", NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_add_metric(r, "", &(drift_trace_metric){0}, NULL), DRIFT_E_USAGE);
#ifndef DRIFT_HAVE_CUDA
    assert_int_equal(drift_recorder_prepare_device(r, NULL), DRIFT_E_UNSUPPORTED);
    assert_int_equal(drift_recorder_record_device(r, d->name, DRIFT_F32, 3, d->shape, buf, NULL, 0, 0, 0, &err),
                     DRIFT_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA build"));
#endif
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_REJECTED) >= 10, 1);
    assert_int_equal(drift_recorder_enabled(r), 1); /* usage errors never turn it off */
    CHECK_OK(drift_recorder_close(r, NULL));

    drift_trace_reader *rd = open_reader(path);
    assert_int_equal(drift_trace_reader_n_sites(rd), 1);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 2);
    assert_int_equal(steps[1].step, 10);
    assert_int_equal(steps[1].flags, 0);
    assert_true(has_note(rd, 10, "records rejected (first: blocks.0.ffn:out: site first recorded after"));
    assert_int_equal(verify_records(rd, &RT_SITES[2], 1, NULL), 2);
    drift_trace_reader_close(rd);
    /* NULL handles */
    assert_int_equal(drift_recorder_close(NULL, NULL), DRIFT_OK);
    assert_int_equal(drift_recorder_begin_step(NULL, 0, NULL), DRIFT_E_USAGE);
    assert_int_equal(drift_recorder_counter(NULL, 0), -1);
    assert_int_equal(drift_recorder_enabled(NULL), 0);
    drift_recorder *r2 = NULL;
    assert_int_equal(drift_recorder_open(&r2, tpath("no/such/dir/x.h5"), 0, 0, 1, NULL, NULL, 1.0, NULL, NULL, &err),
                     DRIFT_E_IO);
    assert_null(r2);
    assert_int_equal(drift_recorder_open(&r2, tpath("x.h5"), 0, 2, 2, NULL, NULL, 1.0, NULL, NULL, &err),
                     DRIFT_E_USAGE);
}

/* ----------------------------------------------------------------------- */
/* Disk full                                                                 */
/* ----------------------------------------------------------------------- */
static atomic_int cb_calls;
static char cb_msg[1024];

static void on_error(void *user, int code, const char *msg) {
    (void)user;
    (void)code;
    atomic_fetch_add(&cb_calls, 1);
    snprintf(cb_msg, sizeof cb_msg, "%s", msg);
}

static const site_def DF[] = {{"df:out", DRIFT_F32, 1, {16384, 0, 0}}}; /* 64 KiB per record */

static int copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    if (!a || !b) {
        if (a) fclose(a);
        if (b) fclose(b);
        return -1;
    }
    char buf[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0)
        if (fwrite(buf, 1, n, b) != n) rc = -1;
    fclose(a);
    if (fclose(b) != 0) rc = -1;
    return rc;
}

#define CHILD_FAIL(code, ...)                                                                              \
    do {                                                                                                   \
        fprintf(stderr, "diskfull child: " __VA_ARGS__);                                                   \
        fprintf(stderr, "\n");                                                                             \
        _exit(code);                                                                                       \
    } while (0)

/* In a child: records 64 KiB records until the small file system fills up.
 * method 0: a 2 MiB tmpfs mounted in a private mount namespace; 1:
 * RLIMIT_FSIZE of 2 MiB (EFBIG). Exit 77 if the method is unavailable. */
static void diskfull_child(int method, const char *dir, const char *copy_to, int wfd) {
    if (method == 0) {
        if (unshare(CLONE_NEWNS) != 0) CHILD_FAIL(77, "unshare(CLONE_NEWNS): %s", strerror(errno));
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            CHILD_FAIL(77, "make / private: %s", strerror(errno));
        if (mount("tmpfs", dir, "tmpfs", 0, "size=2m") != 0) CHILD_FAIL(77, "mount tmpfs: %s", strerror(errno));
    } else {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {2u << 20, 2u << 20};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) CHILD_FAIL(77, "setrlimit: %s", strerror(errno));
    }
    char path[1300];
    snprintf(path, sizeof path, "%s/trace.h5", dir);
    drift_recorder *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    if (drift_recorder_open(&r, path, 1, 0, 1, "df", "tiny-dit", 1.0, NULL, "staging_mb=4", &err))
        CHILD_FAIL(2, "open: %s", err.msg);
    drift_recorder_set_error_callback(r, on_error, NULL);
    if (drift_recorder_declare_site(r, DF[0].name, DF[0].dt, 1, DF[0].shape, NULL, &err))
        CHILD_FAIL(2, "declare: %s", err.msg);
    float *buf = malloc(def_bytes(&DF[0]));
    int64_t step = 0, off_at = -1;
    for (; step < 400; step++) {
        int rc = drift_recorder_begin_step(r, step, &err);
        for (int mb = 0; mb < 2 && !rc; mb++) {
            fill(&DF[0], 0, step, mb, 0, buf);
            rc = drift_recorder_record_host(r, DF[0].name, DF[0].dt, 1, DF[0].shape, buf, mb, (int32_t)(step % 4), 0,
                                            &err);
        }
        if (!rc) rc = drift_recorder_note(r, 0, "filler note", &err);
        if (!rc) rc = drift_recorder_end_step(r, &err);
        if (!rc) rc = drift_recorder_flush(r, 20000, &err);
        if (rc) CHILD_FAIL(3, "step %lld: rc %d (%s), expected DRIFT_OK always", (long long)step, rc, err.msg);
        if (off_at < 0 && !drift_recorder_enabled(r)) off_at = step;
        if (off_at >= 0 && step >= off_at + 3) break; /* the job goes on a few steps */
    }
    if (off_at < 0) CHILD_FAIL(4, "the recorder never turned off after %lld steps (%lld bytes)", (long long)step,
                               (long long)drift_recorder_counter(r, DRIFT_RECORDER_WRITTEN_BYTES));
    int64_t last = drift_recorder_counter(r, DRIFT_RECORDER_LAST_COMMITTED);
    if (last < 1) CHILD_FAIL(5, "only %lld steps committed before the failure", (long long)last + 1);
    if (!strstr(drift_recorder_error(r), "recording turned off")) CHILD_FAIL(6, "error: %s", drift_recorder_error(r));
    int rc = drift_recorder_close(r, &err);
    free(buf);
    if (rc) CHILD_FAIL(7, "close: rc %d %s", rc, err.msg);
    if (atomic_load(&cb_calls) != 1) CHILD_FAIL(8, "error callback called %d times", atomic_load(&cb_calls));
    if (!strstr(cb_msg, "recording turned off")) CHILD_FAIL(9, "callback message: %s", cb_msg);
    if (copy_file(path, copy_to) != 0) CHILD_FAIL(10, "copy %s -> %s failed", path, copy_to);
    fprintf(stderr, "diskfull child (%s): turned off at step %lld, last committed %lld: %s\n",
            method ? "RLIMIT_FSIZE" : "tmpfs 2m", (long long)off_at, (long long)last, cb_msg);
    if (write(wfd, &last, sizeof last) != (ssize_t)sizeof last) CHILD_FAIL(11, "pipe");
    _exit(0);
}

static int df_stored(int k, int64_t step, int mb, int call) {
    (void)k;
    (void)step;
    (void)mb;
    (void)call;
    return 1;
}

static void check_committed_trace(const char *path, int64_t last, int64_t recs_per_step) {
    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    if ((int64_t)ns < last + 1) fail_msg("%s: %zu steps readable, expected >= %lld", path, ns, (long long)last + 1);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(steps[i].step, (int64_t)i);
        assert_int_equal(steps[i].n_records, recs_per_step);
    }
    assert_int_equal(verify_records(rd, DF, 1, df_stored), (int64_t)ns * recs_per_step);
    drift_trace_reader_close(rd);
}

/* End-of-file address stored in a v2/v3 HDF5 superblock (8-byte offsets):
 * signature 8, version 1, sizes 2, flags 1, base 8, extension 8, EOF 8. */

/* The failure is recorded in the trace itself: /status, overwritten in
 * place, is the one thing a writer can still write on a full disk. */
static void expect_failed_status(drift_trace_reader *rd, int method) {
    const char *st = drift_trace_reader_status(rd);
    fprintf(stderr, "diskfull method %d: trace status: %s\n", method, st ? st : "(none)");
    if (!st || strncmp(st, "failed at step ", 15) != 0 || !strstr(st, "recording turned off"))
        fail_msg("the trace does not record the failure: status \"%s\"", st ? st : "(none)");
}

static void run_diskfull(int method) {
    char dir[1200], copy[1200];
    snprintf(dir, sizeof dir, "%s/diskfull%d", tmpdir, method);
    snprintf(copy, sizeof copy, "%s/diskfull%d.copy.h5", tmpdir, method);
    mkdir(dir, 0755);
    remove(copy);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        diskfull_child(method, dir, copy, fds[1]);
    }
    close(fds[1]);
    int64_t last = -1;
    ssize_t got = read(fds[0], &last, sizeof last);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        fprintf(stderr, "SKIP: disk-full method %d unavailable here\n", method);
        return;
    }
    if (WEXITSTATUS(status) != 0) fail_msg("disk-full child (method %d) exited %d", method, WEXITSTATUS(status));
    assert_int_equal(got, (ssize_t)sizeof last);
    drift_err err;
    drift_err_clear(&err);
    drift_trace_reader *rd = NULL;
    if (drift_trace_reader_open(&rd, copy, DRIFT_TRACE_OPEN_NORMAL, &err) == DRIFT_OK) {
        /* readable up to the last committed step, as is (SWMR fallback if unclean) */
        expect_failed_status(rd, method);
        drift_trace_reader_close(rd);
        check_committed_trace(copy, last, 2);
    } else {
        /* EFBIG: HDF5 closed the file (status flags clear) but could not
         * extend it to its stored end of file. drift_trace_repair first;
         * if that leaves it short, extend it as `h5clear --increment=0`
         * does (the file's committed content is all below the limit). */
        fprintf(stderr, "diskfull method %d: as-is open failed (%s); repairing\n", method, err.msg);
        assert_int_equal(method, 1);
        assert_non_null(strstr(err.msg, "cut short"));
        drift_err_clear(&err);
        int64_t trimmed = 0;
        if (drift_trace_repair(copy, &trimmed, &err)) fail_msg("repair: %s", err.msg);
        /* drift_trace_repair extends a file left short of its stored end. */
        if (drift_trace_reader_open(&rd, copy, DRIFT_TRACE_OPEN_NORMAL, &err) != DRIFT_OK)
            fail_msg("drift_trace_repair left the EFBIG file unreadable: %s", err.msg);
        expect_failed_status(rd, method);
        drift_trace_reader_close(rd);
        check_committed_trace(copy, last, 2);
    }
    /* after repair, an ordinary reader sees a clean file with the same steps */
    int64_t trimmed = 0;
    drift_err_clear(&err);
    if (drift_trace_repair(copy, &trimmed, &err)) fail_msg("repair: %s", err.msg);
    rd = open_reader(copy);
    assert_int_equal(drift_trace_reader_unclean(rd), 0);
    drift_trace_reader_close(rd);
    check_committed_trace(copy, last, 2);
}

static void test_diskfull_tmpfs(void **state) {
    (void)state;
    run_diskfull(0);
}

static void test_diskfull_rlimit(void **state) {
    (void)state;
    run_diskfull(1);
}

/* ----------------------------------------------------------------------- */
/* SIGKILL mid-run                                                           */
/* ----------------------------------------------------------------------- */
static const site_def KS[] = {
    {"blocks.0:out", DRIFT_BF16, 2, {8, 16, 0}},
    {"output:noise_pred", DRIFT_F32, 1, {33, 0, 0}},
};

static void kill_child(const char *path, int wfd) {
    drift_recorder *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    if (drift_recorder_open(&r, path, 0, 0, 1, "kill", "tiny-dit", 1.0, NULL, NULL, &err)) _exit(2);
    for (int k = 0; k < 2; k++)
        if (drift_recorder_declare_site(r, KS[k].name, KS[k].dt, KS[k].ndim, KS[k].shape, NULL, &err)) _exit(3);
    for (int64_t step = 0;; step++) {
        if (drift_recorder_begin_step(r, step, &err)) _exit(4);
        for (int mb = 0; mb < 2; mb++)
            for (int k = 0; k < 2; k++)
                if (record(r, &KS[k], k, step, mb, 0)) _exit(5);
        if (drift_recorder_end_step(r, &err)) _exit(6);
        if (step < 6) {
            /* report committed steps; later ones race with the kill */
            if (drift_recorder_flush(r, 20000, &err)) _exit(7);
            int64_t c = drift_recorder_counter(r, DRIFT_RECORDER_LAST_COMMITTED);
            if (write(wfd, &c, sizeof c) != (ssize_t)sizeof c) _exit(8);
        }
    }
}

static void test_sigkill(void **state) {
    (void)state;
    const char *path = tpath("killed.h5");
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        kill_child(path, fds[1]);
        _exit(0);
    }
    close(fds[1]);
    int64_t last = -1, c;
    while (last < 5 && read(fds[0], &c, sizeof c) == (ssize_t)sizeof c) last = c;
    sleep_ms(30); /* mid-run: the child keeps appending uncommitted steps */
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(last, 5);

    drift_trace_reader *rd = open_reader(path);
    assert_int_equal(drift_trace_reader_unclean(rd), 1);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_true(ns >= 6);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(steps[i].step, (int64_t)i);
        assert_int_equal(steps[i].n_records, 4);
    }
    assert_int_equal(verify_records(rd, KS, 2, NULL), (int64_t)ns * 4);
    drift_trace_reader_close(rd);

    int64_t trimmed = -1;
    drift_err err;
    drift_err_clear(&err);
    if (drift_trace_repair(path, &trimmed, &err)) fail_msg("repair: %s", err.msg);
    rd = open_reader(path);
    assert_int_equal(drift_trace_reader_unclean(rd), 0);
    size_t ns2 = 0;
    drift_trace_reader_steps(rd, &ns2);
    assert_int_equal(ns2, ns);
    assert_int_equal(verify_records(rd, KS, 2, NULL), (int64_t)ns * 4);
    drift_trace_reader_close(rd);
}

/* ----------------------------------------------------------------------- */
/* A hung writer at close; forked children                                   */
/* ----------------------------------------------------------------------- */
static int fd_open_on(const char *path) {
    char real[4096];
    if (!realpath(path, real)) return 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while ((de = readdir(d))) {
        char l[512], t[4096];
        snprintf(l, sizeof l, "/proc/self/fd/%s", de->d_name);
        ssize_t n = readlink(l, t, sizeof t - 1);
        if (n > 0) {
            t[n] = '\0';
            if (strcmp(t, real) == 0) found = 1;
        }
    }
    closedir(d);
    return found;
}

static void test_close_hung_writer(void **state) {
    (void)state;
    const char *path = tpath("hung.h5");
    drift_recorder *r = open_rec(path, "close_timeout_ms=200");
    CHECK_OK(drift_recorder_declare_site(r, BIG[0].name, DRIFT_F32, 1, BIG[0].shape, NULL, NULL));
    CHECK_OK(drift_recorder_start(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    stall s;
    stall_begin(&s, r);
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    CHECK_OK(record(r, &BIG[0], 0, 0, 0, 0));
    CHECK_OK(drift_recorder_end_step(r, NULL));
    assert_int_equal(drift_recorder_flush(r, 100, NULL), DRIFT_E_IO); /* bounded */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_recorder_close(r, &err), DRIFT_E_IO);
    double ms = ms_since(&t0);
    if (ms < 150 || ms > 5000) fail_msg("close took %.0f ms, expected about 200", ms);
    assert_non_null(strstr(err.msg, "made no progress for 200 ms"));
    /* r now belongs to the writer thread: let it finish, it closes and frees */
    stall_end(&s, 0);
    stall_join(&s);
    for (int i = 0; i < 500 && fd_open_on(path); i++) sleep_ms(10);
    assert_false(fd_open_on(path));
    sleep_ms(50); /* the free right after the close */
    drift_trace_reader *rd = open_reader(path);
    assert_int_equal(drift_trace_reader_unclean(rd), 0);
    size_t ns = 0;
    drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 1);
    assert_int_equal(verify_records(rd, BIG, 1, NULL), 1);
    drift_trace_reader_close(rd);
}

static void test_forked_child_noop(void **state) {
    (void)state;
    const char *path = tpath("forked.h5");
    drift_recorder *r = open_rec(path, NULL);
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    CHECK_OK(record(r, &BIG[0], 0, 0, 0, 0));
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a DataLoader worker: every call is a no-op */
        int bad = 0;
        bad |= record(r, &BIG[0], 0, 0, 1, 0) != DRIFT_OK;
        bad |= drift_recorder_end_step(r, NULL) != DRIFT_OK;
        bad |= drift_recorder_begin_step(r, 1, NULL) != DRIFT_OK;
        bad |= drift_recorder_close(r, NULL) != DRIFT_OK;
        _exit(bad);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(record(r, &BIG[0], 0, 0, 2, 0));
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_close(r, NULL));
    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 1);
    assert_int_equal(steps[0].n_records, 2); /* the parent's two, not the child's */
    assert_int_equal(verify_records(rd, BIG, 1, NULL), 2);
    drift_trace_reader_close(rd);
}

/* Several producer threads on one recorder. */
typedef struct mt_arg {
    drift_recorder *r;
    int t;
} mt_arg;

static const site_def MT[] = {{"mt:out", DRIFT_F32, 1, {256, 0, 0}}};

static void *mt_main(void *a) {
    mt_arg *m = a;
    for (int i = 0; i < 50; i++)
        if (record(m->r, &MT[0], 0, 0, m->t, i) != DRIFT_OK) return (void *)1;
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    const char *path = tpath("threads.h5");
    drift_recorder *r = open_rec(path, "staging_bytes=16384;policy=block;block_timeout_ms=5000");
    CHECK_OK(drift_recorder_declare_site(r, MT[0].name, DRIFT_F32, 1, MT[0].shape, NULL, NULL));
    CHECK_OK(drift_recorder_start(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    CHECK_OK(drift_recorder_begin_step(r, 0, NULL));
    pthread_t th[4];
    mt_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t].r = r;
        args[t].t = t;
        assert_int_equal(pthread_create(&th[t], NULL, mt_main, &args[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        void *ret = NULL;
        pthread_join(th[t], &ret);
        assert_null(ret);
    }
    CHECK_OK(drift_recorder_end_step(r, NULL));
    CHECK_OK(drift_recorder_flush(r, 10000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_DROPPED), 0); /* 5 s is plenty */
    CHECK_OK(drift_recorder_close(r, NULL));
    drift_trace_reader *rd = open_reader(path);
    assert_int_equal(verify_records(rd, MT, 1, NULL), 200);
    drift_trace_reader_close(rd);
}


/* ----------------------------------------------------------------------- */
/* Device captures (CUDA builds; skipped without a device)                   */
/* ----------------------------------------------------------------------- */
#ifdef DRIFT_HAVE_CUDA
#include <cuda_runtime.h>

static const site_def DV[] = {
    {"dev.bf16:out", DRIFT_BF16, 2, {3, 5, 0}},
    {"dev.f32:out", DRIFT_F32, 1, {100000, 0, 0}},
    {"dev.f16:out", DRIFT_F16, 1, {1000, 0, 0}},
};

static int dv_stored(int k, int64_t step, int mb, int call) {
    (void)k;
    (void)mb;
    (void)call;
    return step != 1;
}

static void CUDART_CB delay_fn(void *arg) { sleep_ms((int)(intptr_t)arg); }

/* Built with -DDRIFT_TEST_DEVICE_OPTS='"...;device_wait=0"' this test must
 * fail: it checks that the test can see an unordered copy. */
#ifndef DRIFT_TEST_DEVICE_OPTS
#define DRIFT_TEST_DEVICE_OPTS "staging_mb=16;store_steps=0,2"
#endif

#define CU(call)                                                                                           \
    do {                                                                                                   \
        cudaError_t e_ = (call);                                                                           \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                          \
    } while (0)

static void test_device_captures(void **state) {
    (void)state;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        fprintf(stderr, "SKIP: test_device_captures: no CUDA device\n");
        return;
    }
    CU(cudaSetDevice(0));
    const char *path = tpath("device.h5");
    drift_recorder *r = open_rec(path, DRIFT_TEST_DEVICE_OPTS);
    struct timespec tp;
    clock_gettime(CLOCK_MONOTONIC, &tp);
    CHECK_OK(drift_recorder_prepare_device(r, NULL));
    fprintf(stderr, "prepare_device (pins 16 MiB of staging): %.1f ms\n", ms_since(&tp));
    cudaStream_t st;
    CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    void *dev[3], *host[3];
    for (int k = 0; k < 3; k++) {
        CU(cudaMalloc(&dev[k], def_bytes(&DV[k])));
        CU(cudaMallocHost(&host[k], def_bytes(&DV[k])));
    }
    double call_us = 0;
    int n_calls = 0;
    for (int64_t step = 0; step < 3; step++) {
        CHECK_OK(drift_recorder_begin_step(r, step, NULL));
        for (int mb = 0; mb < 2; mb++)
            for (int k = 0; k < 3; k++) {
                size_t b = def_bytes(&DV[k]);
                fill(&DV[k], k, step, mb, 0, host[k]);
                CU(cudaMemset(dev[k], 0x7f, b)); /* garbage until the stream writes the data */
                /* The stream is held 30 ms before the data arrives: the copy must wait. */
                CU(cudaLaunchHostFunc(st, delay_fn, (void *)(intptr_t)30));
                CU(cudaMemcpyAsync(dev[k], host[k], b, cudaMemcpyHostToDevice, st));
                struct timespec t0;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                int rc = drift_recorder_record_device(r, DV[k].name, DV[k].dt, DV[k].ndim, DV[k].shape, dev[k], st, mb,
                                                      (int32_t)(step % 4), 0, NULL);
                double us = ms_since(&t0) * 1e3;
                /* the host never waits for the stream (held 30 ms here) */
                if (us > 20000)
                    fail_msg("record_device call %d took %.0f us: it waited for the stream", n_calls, us);
                call_us += us;
                n_calls++;
                if (rc) fail_msg("record_device: %s", drift_recorder_last_error());
                /* Overwritten right after: device_wait orders this after the copy. */
                CU(cudaMemsetAsync(dev[k], 0xff, b, st));
                CU(cudaStreamSynchronize(st)); /* host buffers are refilled next */
            }
        CHECK_OK(drift_recorder_end_step(r, NULL));
    }
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    fprintf(stderr, "device captures: %d calls, %.1f us per record_device call on the host\n",
            n_calls, call_us / n_calls);
    CHECK_OK(drift_recorder_flush(r, 20000, NULL));
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STORED), 12);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_SAMPLED_OUT), 6);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_WRITTEN_RECORDS), 18);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_LOST), 0);
    CHECK_OK(drift_recorder_close(r, NULL));

    /* stored steps: data and host-computed stats exact */
    drift_trace_reader *rd = open_reader(path);
    size_t ns = 0;
    drift_trace_reader_steps(rd, &ns);
    assert_int_equal(ns, 3);
    for (int k = 0; k < 3; k++) {
        long si = drift_trace_reader_find_site(rd, DV[k].name);
        drift_trace_index ix[6];
        drift_trace_stats stt[6];
        CHECK_OK(drift_trace_read_index(rd, (size_t)si, 0, 6, ix, NULL));
        CHECK_OK(drift_trace_read_stats(rd, (size_t)si, 0, 6, stt, NULL));
        for (int i = 0; i < 6; i++) {
            fill(&DV[k], k, ix[i].step, ix[i].microbatch, 0, host[k]);
            drift_trace_stats w;
            drift_trace_stats_compute(host[k], DV[k].dt, (size_t)def_numel(&DV[k]), &w);
            assert_int_equal(ix[i].stored, dv_stored(k, ix[i].step, 0, 0));
            if (ix[i].stored) {
                assert_memory_equal(&w, &stt[i], sizeof w);
                size_t b = def_bytes(&DV[k]);
                unsigned char *got = malloc(b);
                CHECK_OK(drift_trace_read_record_raw(rd, (size_t)si, i, got, b, NULL));
                if (memcmp(got, host[k], b) != 0)
                    fail_msg("%s step %lld mb %d: device data differ", DV[k].name, (long long)ix[i].step,
                             ix[i].microbatch);
                free(got);
                continue;
            }
            /* sampled out: stats from the device kernel; min/max/counts exact,
             * sums in another order */
            assert_true(w.min == stt[i].min && w.max == stt[i].max);
            assert_int_equal(w.nan_count, stt[i].nan_count);
            assert_int_equal(w.inf_count, stt[i].inf_count);
            if (!(fabs(w.mean - stt[i].mean) <= 1e-9 * (fabs(w.mean_abs) + 1e-300)) ||
                !(fabs(w.mean_abs - stt[i].mean_abs) <= 1e-12 * w.mean_abs) ||
                !(fabs(w.l2 - stt[i].l2) <= 1e-12 * w.l2))
                fail_msg("%s step 1: device stats mean %.17g/%.17g mean_abs %.17g/%.17g l2 %.17g/%.17g", DV[k].name,
                         stt[i].mean, w.mean, stt[i].mean_abs, w.mean_abs, stt[i].l2, w.l2);
        }
    }
    drift_trace_reader_close(rd);
    for (int k = 0; k < 3; k++) {
        cudaFree(dev[k]);
        cudaFreeHost(host[k]);
    }
    cudaStreamDestroy(st);
}
#else
static void test_device_captures(void **state) {
    (void)state;
    fprintf(stderr, "SKIP: test_device_captures: CPU build\n");
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staging_ring),
        cmocka_unit_test(test_roundtrip_host),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_drop_step),
        cmocka_unit_test(test_block_policy),
        cmocka_unit_test(test_warmup_overflow),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_diskfull_tmpfs),
        cmocka_unit_test(test_diskfull_rlimit),
        cmocka_unit_test(test_sigkill),
        cmocka_unit_test(test_close_hung_writer),
        cmocka_unit_test(test_forked_child_noop),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_device_captures),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
