/* NCCL collectives of the multi-GPU replay (replay/dist/comm.h over
 * kernels/collective.h) on two GPUs of one process, one thread each:
 *  - fp64 SUM with -0.0 in every other rank's slot is an exact gather (every
 *    bit, -0.0, subnormals and inf included); MAX with -inf; int64 SUM;
 *  - ncclAllGather of bf16 and fp32 tensors;
 *  - the FSDP gather (replay/dist/fsdp.h) of a model's parameters gives the same
 *    bits as casting the whole masters on one device.
 * Skips (77) with fewer than 2 GPUs or without NCCL. */
#include <math.h>
#include <pthread.h>

#include "tests/gpu/gpu_check.h"
#include "replay/dist/comm.h"
#include "replay/exec/forward.h"
#include "replay/dist/fsdp.h"

#define NR 2
#define N 8

static const double VALS[N] = {1.5, -0.0, 0.0, 1e-310, INFINITY, -3.25, 7e300, 1.0 / 3.0};

typedef struct job {
    drift_comm *c;
    drift_backend *be;
    double f[NR * N], m[NR * N];
    int64_t i[NR * N];
    float g16[NR * 5], g32[NR * 3];
    drift_model *model;
    const drift_forward *fwd;
    drift_exec_cache *cache;
    drift_fsdp_stats st;
    int rc;
    drift_err err;
} job;

static int gather(job *j, drift_dtype dt, int n, float *got) {
    drift_tensor s, r;
    memset(&s, 0, sizeof s);
    memset(&r, 0, sizeof r);
    s.be = r.be = j->be;
    s.dtype = r.dtype = dt;
    s.ndim = r.ndim = 1;
    s.shape[0] = n;
    r.shape[0] = n * NR;
    float v[8];
    for (int k = 0; k < n; k++) v[k] = (float)(j->c->rank * 8 + k) + 0.25f;
    int rc = drift_backend_alloc(j->be, &s, &j->err);
    if (!rc) rc = drift_backend_alloc(j->be, &r, &j->err);
    if (!rc) rc = drift_backend_upload_f32(j->be, &s, v, &j->err);
    if (!rc) rc = j->c->allgather(j->c, &s, &r, &j->err);
    if (!rc) rc = drift_backend_download_f32(j->be, &r, got, &j->err);
    drift_backend_release(j->be, &s);
    drift_backend_release(j->be, &r);
    return rc;
}

static void *main_fn(void *arg) {
    job *j = arg;
    int r = j->c->rank;
    for (int k = 0; k < NR * N; k++) {
        j->f[k] = -0.0;
        j->m[k] = -INFINITY;
        j->i[k] = 0;
    }
    for (int k = 0; k < N; k++) {
        j->f[r * N + k] = VALS[k] * (r + 1);
        j->m[r * N + k] = (double)(r * 10 + k);
        j->i[r * N + k] = -(int64_t)(r + 1) * k;
    }
    j->rc = j->c->allreduce_f64(j->c, j->f, NR * N, DRIFT_COMM_SUM, &j->err);
    if (!j->rc) j->rc = j->c->allreduce_f64(j->c, j->m, NR * N, DRIFT_COMM_MAX, &j->err);
    if (!j->rc) j->rc = j->c->allreduce_i64(j->c, j->i, NR * N, DRIFT_COMM_SUM, &j->err);
    if (!j->rc) j->rc = gather(j, DRIFT_BF16, 5, j->g16);
    if (!j->rc) j->rc = gather(j, DRIFT_F32, 3, j->g32);
    if (!j->rc) j->rc = drift_fsdp_gather(j->model, j->fwd, j->be, j->cache, j->c, &j->st, &j->err);
    return NULL;
}

/* The forward's output on be with cache (NULL: plain upload and cast). */
static int run_forward(drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                       drift_exec_result *res, drift_err *err) {
    drift_hostset *in = NULL;
    int rc = drift_hostset_create(&in, err);
    const drift_value *ov;
    static const char *const names[3] = {"latents", "cond", "timestep"};
    for (int k = 0; !rc && k < 3; k++) {
        int id = drift_graph_find_leaf(f->assigned, DRIFT_VAL_INPUT, names[k]);
        ov = drift_graph_value(f->assigned, id);
        float *v = calloc((size_t)ov->numel, sizeof *v);
        for (int64_t e = 0; v && e < ov->numel; e++) v[e] = k == 2 ? 500.0f : sinf((float)e * 0.37f + (float)k);
        rc = v ? drift_hostset_add(in, names[k], DRIFT_F32, ov->ndim, ov->shape, v, NULL, NULL, err) : DRIFT_E_NOMEM;
        free(v);
    }
    if (!rc) rc = drift_forward_run_cached(f, m, be, in, cache, NULL, NULL, res, err);
    drift_hostset_free(in);
    return rc;
}

int main(void) {
    gc_require_gpu("test_multi_nccl");
    if (drift_cuda_device_count() < NR || !drift_comm_have_nccl()) {
        printf("SKIP: needs %d GPUs and a build with NCCL (%d GPUs, NCCL %s)\n", NR, drift_cuda_device_count(),
               drift_comm_have_nccl() ? "yes" : "no");
        return 77;
    }
    drift_err err;
    drift_model *m = NULL;
    drift_forward *f = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    int rc = drift_model_create("tiny-dit", &m, &err);
    if (!rc) rc = drift_model_seed_params(m, 7, &err);
    if (!rc) rc = drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err);
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_F32, DRIFT_F32};
    if (!rc) rc = drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, handed, &f, &err);
    const drift_hostset *bufs;
    if (!rc) rc = drift_model_buffers(m, f->rope, &bufs, &err);
    GC_CHECK(rc == DRIFT_OK, "model setup: %s", err.msg);
    if (rc) return gc_finish("test_multi_nccl");

    job jobs[NR];
    drift_comm *comms[NR];
    const drift_backend *bes[NR];
    memset(jobs, 0, sizeof jobs);
    for (int r = 0; r < NR; r++) {
        char name[16];
        snprintf(name, sizeof name, "cuda:%d", r);
        rc = drift_backend_create(name, &jobs[r].be, &err);
        GC_CHECK(rc == DRIFT_OK, "backend %s: %s", name, err.msg);
        if (rc) return gc_finish("test_multi_nccl");
        bes[r] = jobs[r].be;
        drift_exec_cache_create(jobs[r].be, &jobs[r].cache, &err);
        jobs[r].model = m;
        jobs[r].fwd = f;
    }
    rc = drift_comm_nccl_group(NR, bes, comms, &err);
    GC_CHECK(rc == DRIFT_OK, "nccl group: %s", err.msg);
    if (rc) return gc_finish("test_multi_nccl");
    pthread_t th[NR];
    for (int r = 0; r < NR; r++) {
        jobs[r].c = comms[r];
        pthread_create(&th[r], NULL, main_fn, &jobs[r]);
    }
    for (int r = 0; r < NR; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < NR; r++) {
        job *j = &jobs[r];
        gc_case_set("rank %d", r);
        GC_CHECK(j->rc == DRIFT_OK, "collectives: %s", j->err.msg);
        if (j->rc) continue;
        for (int s = 0; s < NR; s++)
            for (int k = 0; k < N; k++) {
                double want = VALS[k] * (s + 1);
                GC_CHECK(memcmp(&j->f[s * N + k], &want, sizeof want) == 0, "SUM slot %d[%d]: %a, want %a", s, k,
                         j->f[s * N + k], want);
                GC_CHECK(j->m[s * N + k] == (double)(s * 10 + k), "MAX slot %d[%d]", s, k);
                GC_CHECK(j->i[s * N + k] == -(int64_t)(s + 1) * k, "i64 slot %d[%d]", s, k);
            }
        for (int s = 0; s < NR; s++) {
            for (int k = 0; k < 5; k++) GC_CHECK(j->g16[s * 5 + k] == (float)(s * 8 + k) + 0.25f, "bf16 gather %d[%d]", s, k);
            for (int k = 0; k < 3; k++) GC_CHECK(j->g32[s * 3 + k] == (float)(s * 8 + k) + 0.25f, "fp32 gather %d[%d]", s, k);
        }
        GC_CHECK(j->st.params == (int64_t)m->table.n, "fsdp gathered %lld of %zu parameters", (long long)j->st.params,
                 m->table.n);
    }
    /* The forward with the gathered parameters == the forward with whole masters. */
    drift_exec_result a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    gc_case_set("fsdp forward");
    rc = run_forward(m, f, jobs[1].be, jobs[1].cache, &a, &err);
    GC_CHECK(rc == DRIFT_OK, "forward with gathered parameters: %s", err.msg);
    if (!rc) rc = run_forward(m, f, jobs[0].be, NULL, &b, &err);
    GC_CHECK(rc == DRIFT_OK, "forward with masters: %s", err.msg);
    if (!rc) GC_CHECK(a.numel == b.numel && memcmp(a.f32, b.f32, (size_t)a.numel * sizeof *a.f32) == 0,
                      "outputs differ (gathered parameters are not the cast masters)");
    drift_exec_result_free(&a);
    drift_exec_result_free(&b);
    for (int r = 0; r < NR; r++) {
        drift_comm_free(comms[r]);
        drift_exec_cache_free(jobs[r].cache);
        drift_backend_free(jobs[r].be);
    }
    drift_forward_free(f);
    drift_model_free(m);
    drift_plan_free(&plan);
    return gc_finish("test_multi_nccl");
}
