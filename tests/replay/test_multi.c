/* Multi-device replay building blocks on the host: FSDP chunking, the local
 * comm group's exact reductions and gathers, --devices parsing, and the
 * split of drift_sitecmp_add into step_acc + add_acc (bit for bit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>

#include "kernels/backend.h"
#include "replay/dist/comm.h"
#include "replay/dist/fsdp.h"
#include "replay/drive/multi.h"
#include "replay/analysis/sitecmp.h"

static void chunk(int64_t d0, int rank, int world, int64_t c, int64_t first, int64_t rows) {
    int64_t a, b, r;
    drift_fsdp_chunk(d0, rank, world, &a, &b, &r);
    assert_int_equal(a, c);
    assert_int_equal(b, first);
    assert_int_equal(r, rows);
}

/* torch.chunk: ceil(d0 / W) rows per chunk, the last ones short or empty. */
static void test_fsdp_chunk(void **state) {
    (void)state;
    chunk(5, 0, 2, 3, 0, 3);
    chunk(5, 1, 2, 3, 3, 2);
    chunk(1, 0, 2, 1, 0, 1);
    chunk(1, 1, 2, 1, 1, 0);   /* (1, 6, dim) tables: rank 1 holds only padding */
    chunk(6, 3, 4, 2, 6, 0);   /* torch.chunk(6, 4) gives 3 chunks */
    chunk(6, 2, 4, 2, 4, 2);
    chunk(1536, 1, 2, 768, 768, 768);
}

/* ---- local group ------------------------------------------------------------- */

#define W 3
#define N 6

typedef struct tjob {
    drift_comm *c;
    double f[W * N];
    int64_t i[W * N];
    double m[W * N];
    int rc;
} tjob;

/* Slot r of each buffer belongs to rank r; elsewhere the identities. */
static const double VALS[N] = {1.5, -0.0, 0.0, 1e-310, INFINITY, 3.0};

static void *reduce_main(void *arg) {
    tjob *j = arg;
    int r = j->c->rank;
    for (int k = 0; k < W * N; k++) {
        j->f[k] = -0.0;
        j->i[k] = 0;
        j->m[k] = -INFINITY;
    }
    for (int k = 0; k < N; k++) {
        j->f[r * N + k] = VALS[k] * (r + 1);
        j->i[r * N + k] = -(int64_t)(r + 1) * k;
        j->m[r * N + k] = (double)(r * 10 + k);
    }
    drift_err e;
    j->rc = j->c->allreduce_f64(j->c, j->f, W * N, DRIFT_COMM_SUM, &e);
    if (!j->rc) j->rc = j->c->allreduce_i64(j->c, j->i, W * N, DRIFT_COMM_SUM, &e);
    if (!j->rc) j->rc = j->c->allreduce_f64(j->c, j->m, W * N, DRIFT_COMM_MAX, &e);
    return NULL;
}

static void test_local_reductions_are_exact_gathers(void **state) {
    (void)state;
    drift_comm *c[W];
    drift_err e;
    assert_int_equal(drift_comm_local_group(W, c, &e), DRIFT_OK);
    tjob jobs[W];
    pthread_t th[W];
    for (int r = 0; r < W; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].c = c[r];
        assert_int_equal(pthread_create(&th[r], NULL, reduce_main, &jobs[r]), 0);
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++) {
        assert_int_equal(jobs[r].rc, DRIFT_OK);
        for (int s = 0; s < W; s++)
            for (int k = 0; k < N; k++) {
                double want = VALS[k] * (s + 1);
                /* bit for bit, -0.0 included: -0.0 is the exact identity of SUM */
                assert_memory_equal(&jobs[r].f[s * N + k], &want, sizeof want);
                assert_int_equal(jobs[r].i[s * N + k], -(int64_t)(s + 1) * k);
                assert_true(jobs[r].m[s * N + k] == (double)(s * 10 + k));
            }
    }
    for (int r = 0; r < W; r++) drift_comm_free(c[r]);
}

typedef struct gjob {
    drift_comm *c;
    drift_backend *be;
    float got[W * 4];
    int rc;
} gjob;

static void *gather_main(void *arg) {
    gjob *j = arg;
    drift_err e;
    drift_tensor s, r;
    memset(&s, 0, sizeof s);
    memset(&r, 0, sizeof r);
    s.be = r.be = j->be;
    s.dtype = r.dtype = DRIFT_BF16;
    s.ndim = r.ndim = 1;
    s.shape[0] = 4;
    r.shape[0] = 4 * W;
    float v[4];
    for (int k = 0; k < 4; k++) v[k] = (float)(j->c->rank * 4 + k) + 0.5f;
    j->rc = drift_backend_alloc(j->be, &s, &e);
    if (!j->rc) j->rc = drift_backend_alloc(j->be, &r, &e);
    if (!j->rc) j->rc = drift_backend_upload_f32(j->be, &s, v, &e);
    if (!j->rc) j->rc = j->c->allgather(j->c, &s, &r, &e);
    if (!j->rc) j->rc = drift_backend_download_f32(j->be, &r, j->got, &e);
    drift_backend_release(j->be, &s);
    drift_backend_release(j->be, &r);
    return NULL;
}

static void test_local_allgather(void **state) {
    (void)state;
    drift_comm *c[W];
    drift_err e;
    assert_int_equal(drift_comm_local_group(W, c, &e), DRIFT_OK);
    gjob jobs[W];
    pthread_t th[W];
    for (int r = 0; r < W; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].c = c[r];
        assert_int_equal(drift_backend_create("cpu", &jobs[r].be, &e), DRIFT_OK);
        assert_int_equal(pthread_create(&th[r], NULL, gather_main, &jobs[r]), 0);
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < W; r++) {
        assert_int_equal(jobs[r].rc, DRIFT_OK);
        for (int k = 0; k < W * 4; k++) assert_true(jobs[r].got[k] == (float)k + 0.5f);
        drift_backend_free(jobs[r].be);
        drift_comm_free(c[r]);
    }
}

/* ---- --devices ------------------------------------------------------------------ */

static void test_parse_devices(void **state) {
    (void)state;
    char **d = NULL;
    int n = 0;
    drift_err e;
    assert_int_equal(drift_replay_parse_devices("cuda:0,cuda:1", &d, &n, &e), DRIFT_OK);
    assert_int_equal(n, 2);
    assert_string_equal(d[0], "cuda:0");
    assert_string_equal(d[1], "cuda:1");
    drift_replay_devices_free(d, n);
    assert_int_equal(drift_replay_parse_devices("cpu", &d, &n, &e), DRIFT_OK);
    assert_int_equal(n, 1);
    drift_replay_devices_free(d, n);
    assert_int_equal(drift_replay_parse_devices("cuda:0,,cuda:1", &d, &n, &e), DRIFT_E_USAGE);
    assert_non_null(strstr(e.msg, "empty item"));
    assert_int_equal(drift_replay_parse_devices("cuda:0,", &d, &n, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_replay_parse_devices("", &d, &n, &e), DRIFT_E_USAGE);
}

/* ---- sitecmp split ------------------------------------------------------------------ */

static void test_sitecmp_split_is_identical(void **state) {
    (void)state;
    float t[64], r[64];
    for (int i = 0; i < 64; i++) {
        r[i] = sinf((float)i) * 3.0f;
        t[i] = r[i] + (i % 7 == 3 ? 1e-3f * (float)i : 0.0f);
    }
    t[10] = NAN;
    drift_sitecmp a, b;
    drift_sitecmp_init(&a, 4.5);
    drift_sitecmp_init(&b, 4.5);
    drift_err e;
    for (int step = 0; step < 3; step++) {
        drift_sitecmp_begin_step(&a);
        drift_sitecmp_begin_step(&b);
        for (int s = 0; s < 2; s++) {
            const char *name = s ? "blocks.0:out" : "input:latents:post_cast";
            const float *tt = s ? t + step : r + step; /* site 0 equal, site 1 differs */
            drift_trace_metric ra, rb;
            assert_int_equal(drift_sitecmp_add(&a, name, DRIFT_BF16, tt, r + step, 60, 2, step, &ra, &e), DRIFT_OK);
            drift_site_acc one;
            assert_int_equal(drift_sitecmp_step_acc(DRIFT_BF16, tt, r + step, 60, 2, &one, &e), DRIFT_OK);
            assert_int_equal(drift_sitecmp_add_acc(&b, name, DRIFT_BF16, &one, step, &rb, &e), DRIFT_OK);
            assert_memory_equal(&ra, &rb, sizeof ra);
        }
    }
    assert_int_equal(a.n, b.n);
    for (size_t i = 0; i < a.n; i++) {
        assert_string_equal(a.e[i].site, b.e[i].site);
        assert_memory_equal(&a.e[i].acc, &b.e[i].acc, sizeof a.e[i].acc);
        assert_int_equal(a.e[i].first_divergent, b.e[i].first_divergent);
        assert_int_equal(a.e[i].steps_equal, b.e[i].steps_equal);
    }
    drift_sitecmp_free(&a);
    drift_sitecmp_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fsdp_chunk),
        cmocka_unit_test(test_local_reductions_are_exact_gathers),
        cmocka_unit_test(test_local_allgather),
        cmocka_unit_test(test_parse_devices),
        cmocka_unit_test(test_sitecmp_split_is_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
