/* The executor's aliases and cast folding on the CUDA backend (issue 6):
 *
 *  - tiny-dit and a small wan2.2, plans wan2_2 (bf16 + norm2 fp32), all-fp32
 *    and fp16: with aliasing and folding on (each alone, and both) the output
 *    and every recorded site are bitwise equal to the run with both off (the
 *    executor's behaviour before issue 6), with and without sites observed,
 *    with and without a device cache (switches changed between cached runs);
 *    counters prove views, narrows, skipped and folded casts really happen;
 *    a tracking wrapper proves no alias is released and nothing leaks;
 *  - the cuda alias function: aligned offsets alias, misaligned ones are
 *    declined (DRIFT_E_UNSUPPORTED), out-of-bounds and dtype mismatches are
 *    errors;
 *  - uploads: fp32 host values into fp32/bf16/fp16 tensors below and above
 *    the device-rounding threshold and across several staging chunks give
 *    exactly drift_round_to's bits (ties, subnormals, overflow, NaN, inf).
 *
 * Pass: "test_cuda_exec_fuse: N passed, 0 failed", exit 0. No GPU: SKIP, 77. */
#include "tests/gpu/gpu_check.h"

#include "formats/plan.h"
#include "kernels/backend_impl.h" /* white-box: wraps a backend's function table */
#include "replay/exec/exec.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"
#include "tests/site_recording.h"

#define WAN_SMALL                                                                                                 \
    "wan2.2:layers=3,dim=96,heads=4,ffn_dim=160,frames=2,height=8,width=8,text_len=12,text_dim=48,in_channels=4," \
    "out_channels=4,freq_dim=32"

/* ---- a tracking wrapper: every allocation known, aliases never released ---- */

typedef struct tracked {
    drift_backend be;
    const drift_backend *inner;
    void **ptrs;
    int np, cap;
    long bad_release;
} tracked;

static int tr_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    tracked *tr = (tracked *)be;
    int rc = tr->inner->alloc(be, t, err);
    if (rc) return rc;
    if (tr->np == tr->cap) {
        tr->cap = tr->cap ? tr->cap * 2 : 256;
        tr->ptrs = realloc(tr->ptrs, (size_t)tr->cap * sizeof *tr->ptrs);
        if (!tr->ptrs) exit(2);
    }
    tr->ptrs[tr->np++] = t->data;
    return DRIFT_OK;
}

static void tr_release(const drift_backend *be, drift_tensor *t) {
    tracked *tr = (tracked *)be;
    if (!t || !t->data) return;
    for (int i = 0; i < tr->np; i++)
        if (tr->ptrs[i] == t->data) {
            tr->ptrs[i] = tr->ptrs[--tr->np];
            tr->inner->release(be, t);
            return;
        }
    tr->bad_release++;
    t->data = NULL;
}

static void tr_init(tracked *tr, const drift_backend *inner) {
    memset(tr, 0, sizeof *tr);
    tr->be = *inner;
    tr->inner = inner;
    tr->be.alloc = tr_alloc;
    tr->be.release = tr_release;
}

/* ---- recordings ------------------------------------------------------------- */

/* rec_site, recording, record_cb, recording_free: tests/site_recording.h */

static int64_t bits_differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += drift_f32_bits(a[i]) != drift_f32_bits(b[i]);
    return d;
}

static void same_recording(const recording *a, const recording *b, const char *what) {
    GC_CHECK(a->n == b->n && a->n > 5, "%s: %d vs %d sites", what, a->n, b->n);
    for (int i = 0; i < a->n && i < b->n; i++) {
        const rec_site *x = &a->s[i], *y = &b->s[i];
        int meta = !strcmp(x->name, y->name) && x->dtype == y->dtype && x->numel == y->numel;
        GC_CHECK(meta, "%s: site %d: %s %s vs %s %s", what, i, x->name, drift_dtype_name(x->dtype), y->name,
                 drift_dtype_name(y->dtype));
        if (meta) {
            int64_t d = bits_differ(x->v, y->v, x->numel);
            GC_CHECK(d == 0, "%s: site %s: %lld of %lld elements differ bitwise", what, x->name, (long long)d,
                     (long long)x->numel);
        }
    }
}

static void same_result(const drift_exec_result *a, const drift_exec_result *b, const char *what) {
    int meta = a->dtype == b->dtype && a->numel == b->numel && a->numel > 0 && a->f32 && b->f32;
    GC_CHECK(meta, "%s: output %s[%lld] vs %s[%lld]", what, drift_dtype_name(a->dtype), (long long)a->numel,
             drift_dtype_name(b->dtype), (long long)b->numel);
    if (!meta) return;
    int64_t d = bits_differ(a->f32, b->f32, a->numel), nan = 0;
    for (int64_t i = 0; i < a->numel; i++) nan += isnan(a->f32[i]) != 0;
    GC_CHECK(d == 0, "%s: %lld of %lld output elements differ bitwise", what, (long long)d, (long long)a->numel);
    GC_CHECK(nan == 0, "%s: %lld NaN in the output", what, (long long)nan);
}

/* ---- models ------------------------------------------------------------------- */

enum { PLAN_WAN22 = 0, PLAN_FP32, PLAN_FP16, PLAN_COUNT };
static const char *const plan_names[PLAN_COUNT] = {"wan2_2", "fp32", "fp16"};

static int make_plan(drift_plan *p, int k, drift_err *err) {
    drift_plan_init(p);
    if (k == PLAN_WAN22) {
        char path[1024];
        const char *dir = getenv("DRIFT_TESTDATA"), *src = getenv("DRIFT_SRC");
        if (dir)
            snprintf(path, sizeof path, "%s/plans/wan2_2.json", dir);
        else
            snprintf(path, sizeof path, "%s/tests/data/plans/wan2_2.json", src ? src : ".");
        return drift_plan_load_file(p, path, err);
    }
    const char *dt = k == PLAN_FP32 ? "fp32" : "fp16";
    int rc = drift_plan_apply_flag(p, "--diffusion-forward-dtype", dt, err);
    if (!rc) rc = drift_plan_apply_flag(p, "--sglang-dit-precision", dt, err);
    return rc;
}

typedef struct run_cfg {
    int alias, fuse, sites;
    drift_exec_cache *cache;
} run_cfg;

static int run_once(drift_forward *f, drift_model *m, const drift_hostset *bufs, const drift_hostset *inputs,
                    const drift_backend *be, run_cfg rc_, recording *rec, drift_exec_result *res, drift_exec_stats *st) {
    drift_err err;
    drift_err_clear(&err);
    memset(res, 0, sizeof *res);
    drift_exec_inputs in = {.params = m->params, .buffers = bufs, .inputs = inputs,
                            .on_site = rc_.sites ? record_cb : NULL, .user = rec, .cache = rc_.cache};
    drift_exec_options o = {.alias = rc_.alias, .fuse_casts = rc_.fuse, .stats = st};
    int rc = drift_exec_run_ex(f->assigned, be, &in, &o, res, &err);
    GC_CHECK(rc == 0, "run (alias %d, fuse %d, sites %d, cache %d): %s", rc_.alias, rc_.fuse, rc_.sites,
             rc_.cache != NULL, gc_errstr(&err));
    return rc;
}

static void one_model(const char *spec, int plan_kind, const drift_backend *cuda) {
    gc_case_set("%s / %s", spec, plan_names[plan_kind]);
    drift_err err;
    drift_err_clear(&err);
    drift_model *m = NULL;
    drift_hostset *inputs = NULL;
    drift_forward *f = NULL;
    const drift_hostset *bufs = NULL;
    drift_plan plan;
    int ok = !drift_model_create(spec, &m, &err) && !drift_model_seed_params(m, 7, &err) &&
             !drift_params_init_inputs(&m->cfg, 3, &inputs, &err) && !make_plan(&plan, plan_kind, &err) &&
             !drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err) &&
             !drift_model_buffers(m, f->rope, &bufs, &err);
    GC_CHECK(ok, "setup: %s", gc_errstr(&err));
    if (ok) {
        tracked tr;
        tr_init(&tr, cuda);
        const drift_backend *be = &tr.be;
        int layers = m->cfg.layers;
        recording base_rec = {0};
        drift_exec_result base, base_ns;
        drift_exec_stats st_base, st;
        run_once(f, m, bufs, inputs, be, (run_cfg){0, 0, 1, NULL}, &base_rec, &base, &st_base);
        run_once(f, m, bufs, inputs, be, (run_cfg){0, 0, 0, NULL}, NULL, &base_ns, &st);
        same_result(&base, &base_ns, "off: sites vs no sites");
        static const int sw[3][2] = {{1, 1}, {1, 0}, {0, 1}};
        for (int s = 0; s < 3; s++) {
            for (int sites = 0; sites < 2; sites++) {
                char what[96];
                snprintf(what, sizeof what, "alias %d fuse %d sites %d vs off", sw[s][0], sw[s][1], sites);
                recording rec = {0};
                drift_exec_result r;
                if (run_once(f, m, bufs, inputs, be, (run_cfg){sw[s][0], sw[s][1], sites, NULL}, sites ? &rec : NULL,
                             &r, &st) == 0) {
                    same_result(&base, &r, what);
                    if (sites) same_recording(&base_rec, &rec, what);
                    int64_t all_b = st_base.kernels + st_base.identity_casts;
                    int64_t all_s = st.kernels + st.identity_casts + st.views_aliased + st.narrows_aliased +
                                    st.casts_skipped + st.casts_folded;
                    if (sites) GC_CHECK(all_b == all_s, "%s: node accounting %lld vs %lld", what, (long long)all_b, (long long)all_s);
                    if (sw[s][0]) {
                        GC_CHECK(st.views_aliased >= 3 * layers, "%s: only %lld views aliased", what, (long long)st.views_aliased);
                        GC_CHECK(st.narrows_aliased >= 6 * layers, "%s: only %lld narrows aliased", what,
                                 (long long)st.narrows_aliased);
                    } else {
                        GC_CHECK(st.views_aliased + st.narrows_aliased == 0, "%s: aliases while off", what);
                    }
                    if (sw[s][1] && plan_kind != PLAN_FP32) {
                        GC_CHECK(st.casts_skipped >= 10 * layers, "%s: only %lld casts skipped", what, (long long)st.casts_skipped);
                        GC_CHECK(st.casts_folded >= 4 * layers, "%s: only %lld casts folded", what, (long long)st.casts_folded);
                    } else {
                        GC_CHECK(st.casts_skipped + st.casts_folded == 0, "%s: casts folded while off / fp32", what);
                    }
                    if (s == 0 && !sites)
                        printf("%-40s kernels %lld -> %lld (views %lld, narrows %lld, casts skipped %lld, folded %lld)\n",
                               gc_case, (long long)st_base.kernels, (long long)st.kernels, (long long)st.views_aliased,
                               (long long)st.narrows_aliased, (long long)st.casts_skipped, (long long)st.casts_folded);
                }
                drift_exec_result_free(&r);
                recording_free(&rec);
            }
        }
        GC_CHECK(tr.np == 0, "%d device tensors leaked", tr.np);
        /* with a device cache, switches changing between runs */
        drift_exec_cache *cache = NULL;
        GC_CHECK(!drift_exec_cache_create(be, &cache, &err), "cache: %s", gc_errstr(&err));
        static const int pat[5][3] = {{1, 1, 0}, {1, 1, 1}, {0, 0, 1}, {1, 1, 0}, {0, 1, 1}};
        for (int r = 0; r < 5 && cache; r++) {
            char what[96];
            snprintf(what, sizeof what, "cached run %d (alias %d fuse %d sites %d)", r, pat[r][0], pat[r][1], pat[r][2]);
            recording rec = {0};
            drift_exec_result res;
            if (run_once(f, m, bufs, inputs, be, (run_cfg){pat[r][0], pat[r][1], pat[r][2], cache},
                         pat[r][2] ? &rec : NULL, &res, &st) == 0) {
                same_result(&base, &res, what);
                if (pat[r][2]) same_recording(&base_rec, &rec, what);
            }
            drift_exec_result_free(&res);
            recording_free(&rec);
        }
        GC_CHECK(drift_exec_cache_count(cache) > 0, "the cache kept nothing");
        drift_exec_cache_free(cache);
        GC_CHECK(tr.np == 0, "%d device tensors leaked (after the cache)", tr.np);
        GC_CHECK(tr.bad_release == 0, "%ld releases of tensors not allocated (aliases?)", tr.bad_release);
        free(tr.ptrs);
        recording_free(&base_rec);
        drift_exec_result_free(&base);
        drift_exec_result_free(&base_ns);
        drift_plan_free(&plan);
    }
    drift_forward_free(f);
    drift_hostset_free(inputs);
    drift_model_free(m);
}

/* ---- the alias function -------------------------------------------------------- */

static void alias_fn(const drift_backend *cuda) {
    gc_case_set("cuda alias");
    drift_err err;
    drift_err_clear(&err);
    GC_CHECK(cuda->alias != NULL, "the cuda backend has no alias function");
    if (!cuda->alias) return;
    drift_tensor base;
    memset(&base, 0, sizeof base);
    base.dtype = DRIFT_BF16;
    base.ndim = 1;
    base.shape[0] = 64;
    if (drift_backend_alloc(cuda, &base, &err)) {
        GC_CHECK(0, "alloc: %s", gc_errstr(&err));
        return;
    }
    float v[64], back[16];
    for (int i = 0; i < 64; i++) v[i] = (float)i - 20.0f;
    GC_CHECK(!drift_backend_upload_f32(cuda, &base, v, &err), "upload: %s", gc_errstr(&err));
    drift_tensor a;
    memset(&a, 0, sizeof a);
    a.dtype = DRIFT_BF16;
    a.ndim = 2;
    a.shape[0] = 2;
    a.shape[1] = 8;
    int rc = drift_backend_alias(cuda, &base, 8, &a, &err); /* 16 bytes in */
    GC_CHECK(rc == 0 && (char *)a.data == (char *)base.data + 16 && a.numel == 16 && a.be == cuda,
             "aligned alias: rc %d", rc);
    if (rc == 0 && !drift_backend_download_f32(cuda, &a, back, &err))
        for (int i = 0; i < 16; i++) GC_CHECK(back[i] == v[8 + i], "alias element %d: %g vs %g", i, back[i], v[8 + i]);
    drift_tensor b = a;
    b.data = NULL;
    drift_err_clear(&err);
    GC_CHECK(drift_backend_alias(cuda, &base, 3, &b, &err) == DRIFT_E_UNSUPPORTED, "a 6-byte offset must be declined");
    drift_err_clear(&err);
    GC_CHECK(drift_backend_alias(cuda, &base, 56, &b, &err) == DRIFT_E_INPUT, "16 elements at 56 of 64 must be refused");
    b.dtype = DRIFT_F32;
    drift_err_clear(&err);
    GC_CHECK(drift_backend_alias(cuda, &base, 0, &b, &err) == DRIFT_E_INPUT, "a dtype change must be refused");
    drift_backend_release(cuda, &base);
}

/* ---- uploads --------------------------------------------------------------------- */

static void upload_case(const drift_backend *cuda, drift_dtype dt, int64_t n) {
    gc_case_set("upload fp32 -> %s, %lld elements", drift_dtype_name(dt), (long long)n);
    drift_err err;
    drift_err_clear(&err);
    float *src = malloc((size_t)n * sizeof *src), *back = malloc((size_t)n * sizeof *back);
    if (!src || !back) exit(2);
    gc_seed((uint64_t)n * 3 + (uint64_t)dt);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)gc_u64();
        switch (i % 8) {
        case 0: src[i] = drift_bits_f32(r); break;                              /* any bit pattern: NaN, inf, subnormal */
        case 1: src[i] = drift_bits_f32((r & 0xffff0000u) | 0x8000u); break;     /* bf16 ties */
        case 2: src[i] = drift_bits_f32((r & 0xffffe000u) | 0x1000u); break;     /* fp16 ties */
        case 3: src[i] = (float)(gc_normal() * 1e-6); break;                     /* fp16 subnormals */
        case 4: src[i] = (float)(gc_normal() * 7e4); break;                      /* fp16 overflow */
        default: src[i] = (float)gc_normal(); break;
        }
    }
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 1;
    t.shape[0] = n;
    if (drift_backend_alloc(cuda, &t, &err)) {
        GC_CHECK(0, "alloc: %s", gc_errstr(&err));
    } else {
        int ok = !drift_backend_upload_f32(cuda, &t, src, &err) && !drift_backend_download_f32(cuda, &t, back, &err);
        GC_CHECK(ok, "transfer: %s", gc_errstr(&err));
        if (ok) {
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = drift_round_to(src[i], dt);
                if (isnan(want) ? !isnan(back[i]) : drift_f32_bits(want) != drift_f32_bits(back[i])) {
                    if (bad < 5)
                        fprintf(stderr, "  [%s] at %lld: %08x -> got %08x, want %08x\n", gc_case, (long long)i,
                                drift_f32_bits(src[i]), drift_f32_bits(back[i]), drift_f32_bits(want));
                    bad++;
                }
            }
            GC_CHECK(bad == 0, "%lld of %lld elements not rounded as drift_round_to", (long long)bad, (long long)n);
        }
        drift_backend_release(cuda, &t);
    }
    free(src);
    free(back);
}

int main(void) {
    gc_require_gpu("test_cuda_exec_fuse");
    gc_env E;
    gc_env_open(&E);
    if (E.cuda) {
        alias_fn(E.cuda);
        static const drift_dtype dts[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F16};
        /* below and above the device-rounding threshold (65536), and several 1..16 MiB staging chunks */
        static const int64_t ns[5] = {1000, 65535, 65536, 1000003, 9000011};
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 5; i++) upload_case(E.cuda, dts[d], ns[i]);
        const char *specs[2] = {"tiny-dit", WAN_SMALL};
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < PLAN_COUNT; k++) one_model(specs[s], k, E.cuda);
    }
    gc_env_close(&E);
    return gc_finish("test_cuda_exec_fuse");
}
