/* Writes the seed corpus of fuzz_trace: small traces made by the real writer.
 *
 *   gen_trace_seeds DIR
 *
 * clean.h5     two sites (fp32 tensors; bf16 stats-only), params, param
 *              dtypes, a buffer, a graph, metrics, notes, three steps, closed
 * killed.h5    the same writer SIGKILLed after committing step 1 and
 *              appending (uncommitted) records of step 2
 * empty.h5     started and closed with no steps
 * Built and run by fuzz/seeds.sh (plain cc, no sanitizer). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/census.h"
#include "formats/trace.h"
#include "formats/trace_index.h"

#define CHECK(x)                                                                            \
    do {                                                                                    \
        int rc_ = (x);                                                                      \
        if (rc_ != DRIFT_OK) {                                                              \
            fprintf(stderr, "%s:%d: %s: rc %d: %s: %s\n", __FILE__, __LINE__, #x, rc_, err.where, \
                    err.msg);                                                               \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static drift_trace_writer *begin(const char *path, int with_extras) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "seed";
    m.rank = 0;
    m.world_size = 1;
    m.family = "tiny-dit:layers=1";
    m.guidance_scale = 1.0;
    m.plan_json = "{\"name\":\"seed\",\"param_dtype_patterns\":[[\"*.norm2.*\",\"fp32\"]]}";
    drift_trace_writer *w = NULL;
    CHECK(drift_trace_writer_create(&w, path, &m, &err));
    drift_trace_site_decl a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.name = "blocks.0.ffn:out";
    a.dtype = DRIFT_F32;
    a.ndim = 1;
    a.shape[0] = 4;
    a.store_tensors = 1;
    b.name = "output:noise_pred";
    b.dtype = DRIFT_BF16;
    b.ndim = 2;
    b.shape[0] = 2;
    b.shape[1] = 3;
    b.store_tensors = 0;
    int id;
    CHECK(drift_trace_writer_declare_site(w, &a, &id, &err));
    CHECK(drift_trace_writer_declare_site(w, &b, &id, &err));
    if (with_extras) {
        float pw[6] = {1, 2, 3, 4, 5, 6};
        int64_t shp[2] = {2, 3}, off[2] = {2, 0}, full[2] = {4, 3};
        CHECK(drift_trace_writer_add_param(w, "blocks.0.norm2.weight", 1, shp + 1, NULL, NULL, pw, &err));
        CHECK(drift_trace_writer_add_param(w, "proj_out.weight", 2, shp, off, full, pw, &err));
        CHECK(drift_trace_writer_set_param_dtype(w, "blocks.0.norm2.weight", DRIFT_F32, &err));
        CHECK(drift_trace_writer_set_param_dtype(w, "proj_out.weight", DRIFT_BF16, &err));
        double rope[4] = {1, 0.5, 0.25, 0.125};
        int64_t rs[2] = {2, 2};
        CHECK(drift_trace_writer_add_buffer(w, "rope", DRIFT_F64, 2, rs, rope, &err));
        const char *g = "{\"format\":\"drift-graph\",\"version\":1,\"values\":[]}";
        CHECK(drift_trace_writer_set_graph(w, g, strlen(g), &err));
    }
    CHECK(drift_trace_writer_start(w, &err));
    return w;
}

static void step(drift_trace_writer *w, int64_t s, int commit) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_index ix;
    memset(&ix, 0, sizeof ix);
    ix.step = s;
    ix.denoise_index = -1;
    float x[4] = {0.5f * (float)s, -1.0f, 2.0f, 0.0f};
    CHECK(drift_trace_writer_append(w, 0, &ix, x, 1, &err));
    uint16_t y[6] = {0x3f80, 0xbf80, 0x7fc0, 0x7f80, 0x0000, 0x4000};
    CHECK(drift_trace_writer_append(w, 1, &ix, y, 0, &err));
    if (!commit) return;
    drift_trace_metric m;
    memset(&m, 0, sizeof m);
    m.step = s;
    m.denoise_index = -1;
    m.numel = 6;
    m.mean_abs_diff = 1e-3;
    m.max_abs_diff = 1e-2;
    m.worst_index = 3;
    CHECK(drift_trace_writer_add_metric(w, "output:noise_pred", &m, &err));
    drift_trace_step_metrics sm;
    memset(&sm, 0, sizeof sm);
    sm.step = s;
    sm.denoise_index = -1;
    sm.n_pairs = 2;
    CHECK(drift_trace_writer_add_step_metrics(w, &sm, &err));
    CHECK(drift_trace_writer_note(w, s, 1, "seed note", &err));
    CHECK(drift_trace_writer_commit_step(w, s, 0, &err));
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen_trace_seeds DIR\n");
        return 2;
    }
    char p[4096];
    drift_err err;
    drift_err_clear(&err);

    snprintf(p, sizeof p, "%s/clean.h5", argv[1]);
    drift_trace_writer *w = begin(p, 1);
    for (int64_t s = 0; s < 3; s++) step(w, s, 1);
    CHECK(drift_trace_writer_close(w, &err));

    /* a drift merge index over clean.h5 (its source resolves only beside it) */
    char src[4200];
    snprintf(src, sizeof src, "%s/clean.h5", argv[1]);
    snprintf(p, sizeof p, "%s/index.h5", argv[1]);
    const char *ins[1] = {src};
    drift_trace_merge_opts mo = {ins, 1, p, 0, 0};
    CHECK(drift_trace_merge(&mo, &err));

    /* a census trace as libdrift_intercept.so writes it */
    {
        drift_census_gemm g;
        drift_census_coll x;
        memset(&g, 0, sizeof g);
        memset(&x, 0, sizeof x);
        snprintf(g.range, sizeof g.range, "forward/blocks.0/attn1/to_q");
        snprintf(g.api, sizeof g.api, "cublasLtMatmul");
        snprintf(g.a_type, sizeof g.a_type, "bf16");
        snprintf(g.b_type, sizeof g.b_type, "bf16");
        snprintf(g.c_type, sizeof g.c_type, "bf16");
        snprintf(g.d_type, sizeof g.d_type, "bf16");
        snprintf(g.compute_type, sizeof g.compute_type, "fp32");
        snprintf(g.scale_type, sizeof g.scale_type, "fp32");
        snprintf(g.epilogue, sizeof g.epilogue, "bias");
        g.transa[0] = 'T';
        g.transb[0] = 'N';
        g.m = 256, g.n = 256, g.k = 256, g.batch = 1, g.calls = 4, g.bytes = 4 * 3 * 256 * 256 * 2, g.last_seq = 3;
        snprintf(x.range, sizeof x.range, "forward/blocks.0/norm2");
        snprintf(x.op, sizeof x.op, "allgather");
        snprintf(x.dtype, sizeof x.dtype, "fp32");
        x.count = 256, x.root = -1, x.comm = 0, x.comm_rank = 0, x.comm_nranks = 2, x.calls = 4, x.bytes = 8192;
        x.last_seq = 3;
        drift_census c;
        memset(&c, 0, sizeof c);
        c.info.rank = 0, c.info.world_size = 2, c.info.local_rank = 0, c.info.pid = 1, c.info.gemm_calls = 4;
        c.info.coll_calls = 4, c.info.nvtx_injected = 1, c.info.nvtx_ranges = 9;
        snprintf(c.info.notes, sizeof c.info.notes, "seed");
        c.gemm = &g, c.n_gemm = 1, c.coll = &x, c.n_coll = 1;
        drift_trace_meta m;
        memset(&m, 0, sizeof m);
        m.side = DRIFT_TRACE_SIDE_TRAINER;
        m.run_id = "seed";
        m.world_size = 2;
        m.family = "";
        m.guidance_scale = 1.0;
        m.plan_json = "{}";
        m.producer = "drift-intercept seed";
        snprintf(p, sizeof p, "%s/census.h5", argv[1]);
        CHECK(drift_census_write_trace(p, &m, &c, &err));
    }

    snprintf(p, sizeof p, "%s/empty.h5", argv[1]);
    w = begin(p, 0);
    CHECK(drift_trace_writer_close(w, &err));

    snprintf(p, sizeof p, "%s/killed.h5", argv[1]);
    pid_t pid = fork();
    if (pid == 0) {
        w = begin(p, 1);
        step(w, 0, 1);
        step(w, 1, 1);
        step(w, 2, 0);
        raise(SIGKILL);
        _exit(3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        fprintf(stderr, "killed.h5: the writer did not die by SIGKILL\n");
        return 1;
    }
    return 0;
}
