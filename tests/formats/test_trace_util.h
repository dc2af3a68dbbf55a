/* Shared helpers of the formats/trace tests (header-only, static): scratch
 * paths, a sample trace with bf16/fp16/fp32 sites whose values cover the
 * edge cases, and a generator that says what record r of a site holds. */
#ifndef DRIFT_TESTS_TRACE_UTIL_H
#define DRIFT_TESTS_TRACE_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/dtype.h"
#include "formats/trace.h"

static char tt_tmpdir[1024] __attribute__((unused));

static inline int tt_setup_tmp(const char *tag) {
    const char *t = getenv("DRIFT_TMP");
    if (!t || !t[0]) t = "/tmp";
    snprintf(tt_tmpdir, sizeof tt_tmpdir, "%s/%s.%ld", t, tag, (long)getpid());
    mkdir(t, 0755);
    return mkdir(tt_tmpdir, 0755) == 0 || access(tt_tmpdir, W_OK) == 0 ? 0 : -1;
}

static inline const char *tt_path(const char *name) {
    static char buf[8][1400];
    static int k;
    k = (k + 1) & 7;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tt_tmpdir, name);
    return buf[k];
}

/* fp32 values that exercise bf16/fp16 storage: signs, zeros, subnormals of
 * both formats, the largest finite values, infinities, NaN and RNE ties. */
static const float tt_special[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.1f, -3.14159265f, 1e-40f /* fp32 subnormal, bf16 subnormal */,
    -9.18354962e-41f /* bf16 min subnormal */, 5.96046448e-08f /* fp16 min subnormal */,
    6.09755516e-05f /* fp16 subnormal */, 65504.0f /* fp16 max */, 3.38953139e+38f /* bf16 max */,
    1.00390625f /* bf16 tie 1 + 2^-8: to even (1.0) */, 1.01171875f /* bf16 tie: to even (1.015625) */,
    1.00048828125f /* fp16 tie 1 + 2^-11 */, -2.5f, 1e30f, -1e-30f, 123456.789f, 7.0f};
#define TT_N_SPECIAL (sizeof tt_special / sizeof tt_special[0])

/* Element i of record rec of a site (deterministic, seeded by the site). */
static inline float tt_value(int site, int64_t rec, size_t i) {
    size_t k = (size_t)(site * 7 + rec * 3) + i;
    if (k % 5 == 0) return tt_special[(k / 5) % TT_N_SPECIAL];
    uint32_t h = (uint32_t)(k * 2654435761u) ^ (uint32_t)(site * 40503 + rec * 977);
    return ((float)(h % 20001) - 10000.0f) * 1e-3f * (float)(1 + (h >> 20) % 7);
}

/* Raw record (site dtype) for site/rec into buf; n elements. */
static inline void tt_fill(int site, int64_t rec, drift_dtype dt, void *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = tt_value(site, rec, i);
        if (dt == DRIFT_BF16) ((uint16_t *)buf)[i] = drift_f32_to_bf16(v);
        else if (dt == DRIFT_F16) ((uint16_t *)buf)[i] = drift_f32_to_f16(v);
        else ((float *)buf)[i] = v;
    }
    /* a NaN and infinities in every record longer than 8 elements */
    if (n > 8) {
        if (dt == DRIFT_F32) {
            ((float *)buf)[n - 1] = NAN;
            ((float *)buf)[n - 2] = INFINITY;
            ((float *)buf)[n - 3] = -INFINITY;
        } else {
            ((uint16_t *)buf)[n - 1] = dt == DRIFT_BF16 ? 0x7fc0 : 0x7e00;
            ((uint16_t *)buf)[n - 2] = dt == DRIFT_BF16 ? 0x7f80 : 0x7c00;
            ((uint16_t *)buf)[n - 3] = dt == DRIFT_BF16 ? 0xff80 : 0xfc00;
        }
    }
}

typedef struct tt_site_def {
    const char *name;
    drift_dtype dtype;
    int ndim;
    int64_t shape[3];
    int store;
    drift_trace_compress compress;
} tt_site_def;

/* The sample layout: the sites of the tests. */
static const tt_site_def tt_sites[] = {
    {"blocks.0.ffn:out", DRIFT_BF16, 2, {3, 5, 0}, 1, DRIFT_TRACE_COMPRESS_NONE},
    {"input:latents:post_cast", DRIFT_F16, 1, {15, 0, 0}, 1, DRIFT_TRACE_COMPRESS_NONE},
    {"output:noise_pred", DRIFT_F32, 3, {2, 2, 3}, 1, DRIFT_TRACE_COMPRESS_DEFLATE},
    {"logprob:old", DRIFT_F32, 0, {0, 0, 0}, 1, DRIFT_TRACE_COMPRESS_NONE},
    {"blocks.1/attn%x:out", DRIFT_BF16, 1, {40, 0, 0}, 1, DRIFT_TRACE_COMPRESS_NONE},
    {"blocks.2.norm2:out", DRIFT_BF16, 1, {10, 0, 0}, 0, DRIFT_TRACE_COMPRESS_NONE},
};
#define TT_N_SITES ((int)(sizeof tt_sites / sizeof tt_sites[0]))
#define TT_RECS_PER_STEP 2 /* per site per step: microbatch 0 and 1 */

static inline int64_t tt_numel(const tt_site_def *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    return n;
}

/* Record rec of a site is sampled out (stats only) when this holds. */
static inline int tt_sampled_out(int site, int64_t rec) { return site == 1 && rec % 3 == 2; }

static inline drift_trace_meta tt_meta(void) {
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "run-42";
    m.rank = 1;
    m.world_size = 4;
    m.family = "tiny-dit:layers=2";
    m.guidance_scale = 4.5;
    m.plan_json = "{\"name\":\"wan2_2\",\"param_dtype_patterns\":[[\"*.norm2.*\",\"fp32\"]]}";
    return m;
}

/* Creates the writer with the sample sites, declared and started. */
static inline int tt_open_writer(const char *path, drift_trace_writer **w, int with_extras, drift_err *err) {
    drift_trace_meta m = tt_meta();
    int rc = drift_trace_writer_create(w, path, &m, err);
    if (rc) return rc;
    for (int i = 0; i < TT_N_SITES; i++) {
        drift_trace_site_decl d;
        memset(&d, 0, sizeof d);
        d.name = tt_sites[i].name;
        d.dtype = tt_sites[i].dtype;
        d.ndim = tt_sites[i].ndim;
        for (int k = 0; k < d.ndim; k++) d.shape[k] = tt_sites[i].shape[k];
        d.store_tensors = tt_sites[i].store;
        d.compress = tt_sites[i].compress;
        int id = -1;
        if ((rc = drift_trace_writer_declare_site(*w, &d, &id, err))) return rc;
        if (id != i) return DRIFT_E_INTERNAL;
    }
    if (with_extras) {
        float wv[12];
        for (int i = 0; i < 12; i++) wv[i] = (float)i * 0.25f - 1.0f;
        int64_t shp[2] = {3, 4}, off[2] = {3, 0}, full[2] = {12, 4};
        if ((rc = drift_trace_writer_add_param(*w, "blocks.0.norm2.weight", 2, shp, off, full, wv, err))) return rc;
        int64_t s1 = 12;
        if ((rc = drift_trace_writer_add_param(*w, "proj_out.bias", 1, &s1, NULL, NULL, wv, err))) return rc;
        if ((rc = drift_trace_writer_set_param_dtype(*w, "blocks.0.norm2.weight", DRIFT_F32, err))) return rc;
        if ((rc = drift_trace_writer_set_param_dtype(*w, "proj_out.bias", DRIFT_BF16, err))) return rc;
        double rope[8];
        for (int i = 0; i < 8; i++) rope[i] = cos((double)i / 3.0);
        int64_t rs[2] = {4, 2};
        if ((rc = drift_trace_writer_add_buffer(*w, "rope.freqs", DRIFT_F64, 2, rs, rope, err))) return rc;
        static const char graph[] = "{\"nodes\":[{\"op\":\"linear\",\"name\":\"proj_out\"}]}";
        if ((rc = drift_trace_writer_set_graph(*w, graph, sizeof graph - 1, err))) return rc;
    }
    return drift_trace_writer_start(*w, err);
}

/* Appends step `step`'s records (TT_RECS_PER_STEP per site) and metrics.
 * rec_base is the per-site record count before this step. */
static inline int tt_write_step(drift_trace_writer *w, int64_t step, int with_metrics, drift_err *err) {
    char buf[256];
    for (int mb = 0; mb < TT_RECS_PER_STEP; mb++)
        for (int i = 0; i < TT_N_SITES; i++) {
            int64_t rec = step * TT_RECS_PER_STEP + mb;
            tt_fill(i, rec, tt_sites[i].dtype, buf, (size_t)tt_numel(&tt_sites[i]));
            drift_trace_index ix = {step, mb, (int32_t)(step % 4), 0, 0};
            int rc = drift_trace_writer_append(w, i, &ix, buf, !tt_sampled_out(i, rec), err);
            if (rc) return rc;
        }
    if (with_metrics) {
        for (int i = 0; i < TT_N_SITES; i++) {
            drift_trace_metric m;
            memset(&m, 0, sizeof m);
            m.step = step;
            m.denoise_index = -1;
            m.numel = tt_numel(&tt_sites[i]);
            m.mean_abs_diff = 1e-3 * (double)(step + 1) * (i + 1);
            m.max_abs_diff = 2e-2 * (double)(i + 1);
            m.rel_max = 0.5;
            m.cosine = 0.999;
            m.rmse = 1e-3;
            m.rmse_oracle = NAN;
            m.worst_index = i;
            m.max_ulp_diff = (uint64_t)(3 + i);
            m.flags = i == 2 ? DRIFT_TRACE_METRIC_FIRST_DIVERGENT : 0;
            int rc = drift_trace_writer_add_metric(w, tt_sites[i].name, &m, err);
            if (rc) return rc;
        }
        drift_trace_metric extra;
        memset(&extra, 0, sizeof extra);
        extra.step = step;
        extra.denoise_index = 1;
        extra.mean_abs_diff = 0.25;
        int rc = drift_trace_writer_add_metric(w, "replay:only_node", &extra, err);
        if (rc) return rc;
        drift_trace_step_metrics sm = {step, 0, -1, 8, 1e-4 * (double)(step + 1), 2e-4, 3e-9};
        if ((rc = drift_trace_writer_add_step_metrics(w, &sm, err))) return rc;
        snprintf(buf, sizeof buf, "step %lld done", (long long)step);
        if ((rc = drift_trace_writer_note(w, step, 0, buf, err))) return rc;
    }
    return DRIFT_OK;
}

/* Writes a whole sample trace with n_steps committed steps. */
static inline int tt_write_trace(const char *path, int n_steps, drift_err *err) {
    drift_trace_writer *w = NULL;
    int rc = tt_open_writer(path, &w, 1, err);
    for (int64_t s = 0; !rc && s < n_steps; s++) {
        rc = tt_write_step(w, s, 1, err);
        if (!rc) rc = drift_trace_writer_commit_step(w, s, 0, err);
    }
    int rc2 = drift_trace_writer_close(w, rc ? NULL : err);
    return rc ? rc : rc2;
}

/* Compares record rec of site i read through r with what was written. */
static inline int tt_record_matches(drift_trace_reader *r, int i, int64_t rec, char *why, size_t whysz) {
    const tt_site_def *s = &tt_sites[i];
    size_t n = (size_t)tt_numel(s);
    unsigned char want[4 * 64], got[4 * 64];
    float f[64];
    drift_err e;
    drift_err_clear(&e);
    tt_fill(i, rec, s->dtype, want, n);
    if (drift_trace_read_record_raw(r, (size_t)i, rec, got, sizeof got, &e)) {
        snprintf(why, whysz, "raw read: %.200s: %.300s", e.where, e.msg);
        return 0;
    }
    if (memcmp(want, got, n * drift_dtype_size(s->dtype)) != 0) {
        snprintf(why, whysz, "site %s record %lld: raw bits differ", s->name, (long long)rec);
        return 0;
    }
    if (drift_trace_read_record_f32(r, (size_t)i, rec, f, 64, &e)) {
        snprintf(why, whysz, "f32 read: %.200s: %.300s", e.where, e.msg);
        return 0;
    }
    float wf[64];
    drift_dtype_to_f32_n(want, s->dtype, wf, n);
    if (memcmp(wf, f, n * 4) != 0) {
        snprintf(why, whysz, "site %s record %lld: widened values differ", s->name, (long long)rec);
        return 0;
    }
    return 1;
}

#endif
