/* The two-trace comparison engine (replay/analysis/compare_traces.h) and site maps
 * (replay/analysis/sitemap.h) on traces written here with known values: renames by
 * glob, a fused qkv site against to_q/to_k/to_v concatenated along the last
 * axis, stats-only records, pairing by (step, micro-batch, denoise, call),
 * first divergence per step, log-prob per step, refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>

#include <cmocka.h>

#include "replay/analysis/compare_traces.h"
#include "replay/analysis/sitemap.h"

static const char *tmpdir(void) {
    const char *t = getenv("DRIFT_TMP");
    return t && *t ? t : "/tmp";
}

/* ---- site maps ---------------------------------------------------------- */

static void test_glob_capture(void **state) {
    (void)state;
    size_t caps[4][2];
    assert_int_equal(drift_sitemap_glob_capture("a.*.c:*", "a.b.x.c:out", caps, 4), 2);
    assert_int_equal(caps[0][0], 2);
    assert_int_equal(caps[0][1], 3); /* "b.x": * also matches dots */
    assert_int_equal(caps[1][1], 3); /* "out" */
    assert_int_equal(drift_sitemap_glob_capture("a.*", "b.c", caps, 4), -1);
    assert_int_equal(drift_sitemap_glob_capture("exact", "exact", caps, 4), 0);
    assert_int_equal(drift_sitemap_glob_capture("exact", "exactly", caps, 4), -1);
}

/* The backtracking matcher the linear one replaced (leftmost-shortest
 * captures), as the reference; exponential, so small inputs only. */
static int ref_rec(const char *p, const char *s, const char *s0, size_t caps[][2], int k) {
    for (;;) {
        if (*p == '*') {
            for (const char *t = s;; t++) {
                caps[k][0] = (size_t)(s - s0);
                caps[k][1] = (size_t)(t - s);
                if (ref_rec(p + 1, t, s0, caps, k + 1)) return 1;
                if (!*t) return 0;
            }
        }
        if (!*p) return !*s;
        if (*p != *s) return 0;
        p++;
        s++;
    }
}

/* issue 34 item 14: the same answers and captures as the reference on 200,000
 * random small cases; linear time on the inputs that took minutes */
static void test_glob_linear(void **state) {
    (void)state;
    uint64_t x = 88172645463325252ull;
    for (int t = 0; t < 200000; t++) {
        char pat[12], name[14];
        size_t pl, nl;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        pl = x % 10; nl = (x >> 8) % 13;
        for (size_t i = 0; i < pl; i++) pat[i] = "ab*"[(x >> (16 + 2 * i)) % 3];
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        for (size_t i = 0; i < nl; i++) name[i] = "ab"[(x >> i) & 1];
        pat[pl] = name[nl] = '\0';
        size_t a[16][2], b[16][2];
        int stars = 0;
        for (size_t i = 0; i < pl; i++) stars += pat[i] == '*';
        int want = ref_rec(pat, name, name, b, 0) ? stars : -1;
        int got = drift_sitemap_glob_capture(pat, name, a, 16);
        if (got != want) fail_msg("'%s' vs '%s': %d, expected %d", pat, name, got, want);
        for (int k = 0; k < got; k++)
            if (a[k][0] != b[k][0] || a[k][1] != b[k][1])
                fail_msg("'%s' vs '%s': capture %d (%zu,%zu), expected (%zu,%zu)", pat, name, k, a[k][0], a[k][1], b[k][0],
                         b[k][1]);
    }
    /* 64 stars "*a*a...*a*b" against 10^5 'a's; engine.*.*.*.*:out against a 480-dot name */
    static char name[100001], pat[200];
    memset(name, 'a', 100000);
    size_t o = 0;
    for (int i = 0; i < 63; i++) { pat[o++] = '*'; pat[o++] = 'a'; }
    pat[o++] = '*'; pat[o++] = 'b'; pat[o] = '\0';
    size_t caps[64][2];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(drift_sitemap_glob_capture(pat, name, caps, 64), -1);
    char dots[2000];
    o = (size_t)snprintf(dots, sizeof dots, "engine.");
    for (int i = 0; i < 480; i++) dots[o++] = '.';
    snprintf(dots + o, sizeof dots - o, "x");
    assert_int_equal(drift_sitemap_glob_capture("engine.*.*.*.*:out", dots, caps, 64), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("glob: 64 stars vs 10^5 bytes and 4 stars vs a 480-dot name: %.3f s\n", s);
    assert_true(s < 2.0);
}

static const char *MAP =
    "{\"rename\": [[\"engine.blocks.*\", \"blocks.*\"], [\"noise\", \"output:noise_pred\"]],\n"
    " \"concat\": [{\"site\": \"blocks.*.qkv:out\", \"parts\": [\"blocks.*.to_q:out\", \"blocks.*.to_k:out\","
    " \"blocks.*.to_v:out\"], \"axis\": -1}]}";

static void test_sitemap_parse(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    drift_sitemap *m = NULL;
    assert_int_equal(drift_sitemap_parse(&m, MAP, strlen(MAP), "map.json", &e), DRIFT_OK);
    char buf[DRIFT_SITEMAP_NAME_MAX];
    assert_int_equal(drift_sitemap_rename(m, "engine.blocks.3.ffn:out", buf, sizeof buf), 1);
    assert_string_equal(buf, "blocks.3.ffn:out");
    assert_int_equal(drift_sitemap_rename(m, "noise", buf, sizeof buf), 1);
    assert_string_equal(buf, "output:noise_pred");
    assert_int_equal(drift_sitemap_rename(m, "other", buf, sizeof buf), 0);
    assert_string_equal(buf, "other");
    char parts[DRIFT_SITEMAP_MAX_PARTS][DRIFT_SITEMAP_NAME_MAX];
    int axis = 0;
    assert_int_equal(drift_sitemap_concat_of(m, "blocks.7.qkv:out", parts, &axis), 3);
    assert_string_equal(parts[2], "blocks.7.to_v:out");
    assert_int_equal(axis, -1);
    char site[DRIFT_SITEMAP_NAME_MAX];
    assert_int_equal(drift_sitemap_concat_by_first_part(m, "blocks.7.to_q:out", site, parts, &axis), 3);
    assert_string_equal(site, "blocks.7.qkv:out");
    assert_int_equal(drift_sitemap_concat_by_first_part(m, "blocks.7.to_k:out", site, parts, &axis), 0);
    drift_sitemap_free(m);
    /* errors name the source, the field and the expectation */
    const char *bad[] = {"[1]", "{\"renames\": []}", "{\"rename\": [[\"a\"]]}", "{\"concat\": [{\"site\": \"x\", \"parts\": [\"a\"]}]}",
                         "{\"concat\": [{\"site\": \"x\", \"parts\": [\"a\", \"b\"], \"axis\": 1.5}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drift_err_clear(&e);
        assert_int_equal(drift_sitemap_parse(&m, bad[i], strlen(bad[i]), "map.json", &e), DRIFT_E_INPUT);
        assert_null(m);
        assert_non_null(strstr(e.where, "map.json"));
    }
}

/* ---- traces ------------------------------------------------------------- */

typedef struct site_def {
    const char *name;
    int64_t last;   /* last dim; records are [2, last] fp32 */
    int store;
} site_def;

/* Writes path with the sites; values of site k at step s, element i:
 * base(k_name, s, i) + bump where bump applies to the sites listed. */
static float value(const char *name, int64_t step, int64_t i) {
    /* the same function of the canonical name on both sides */
    unsigned h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return (float)((h % 97) + step) * 0.25f + (float)i * 0.5f;
}

static void write(const char *path, const char *family, int n_steps, const site_def *sites, size_t n_sites,
                  const char *const *canon, const char *bump_site, int64_t bump_from_step, int microbatches) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.side = DRIFT_TRACE_SIDE_TRAINER;
    meta.run_id = "tcmp";
    meta.world_size = 1;
    meta.family = family;
    meta.guidance_scale = 1.0;
    meta.plan_json = "{\"name\":\"p\"}";
    drift_trace_writer *w = NULL;
    if (drift_trace_writer_create(&w, path, &meta, &e)) fail_msg("create %s: %s", path, e.msg);
    int ids[16];
    for (size_t k = 0; k < n_sites; k++) {
        drift_trace_site_decl d;
        memset(&d, 0, sizeof d);
        d.name = sites[k].name;
        d.dtype = DRIFT_F32;
        d.ndim = 2;
        d.shape[0] = 2;
        d.shape[1] = sites[k].last;
        d.store_tensors = sites[k].store;
        assert_int_equal(drift_trace_writer_declare_site(w, &d, &ids[k], &e), DRIFT_OK);
    }
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    float buf[2 * 64];
    /* micro-batches written in reverse on the second side: pairing is by key, not position */
    for (int64_t s = 0; s < n_steps; s++) {
        for (size_t k = 0; k < n_sites; k++)
            for (int mbi = 0; mbi < microbatches; mbi++) {
                int mb = bump_from_step < 0 ? microbatches - 1 - mbi : mbi;
                for (int64_t i = 0; i < 2 * sites[k].last; i++) {
                    /* the canonical element index: a concatenation's parts
                     * hold slices of the fused site's rows */
                    const char *cn = canon[k];
                    int64_t row = i / sites[k].last, col = i % sites[k].last;
                    int64_t off = 0, full = sites[k].last;
                    if (strstr(sites[k].name, "to_k")) off = 4;
                    if (strstr(sites[k].name, "to_v")) off = 8;
                    if (strstr(sites[k].name, "to_")) full = 12;
                    buf[i] = value(cn, s, row * full + off + col) + (float)mb;
                    if (bump_site && strcmp(sites[k].name, bump_site) == 0 && s >= (bump_from_step < 0 ? 0 : bump_from_step) && i == 1)
                        buf[i] += 0.125f;
                }
                drift_trace_index idx = {.step = s, .microbatch = mb, .denoise_index = -1, .call_index = 0};
                assert_int_equal(drift_trace_writer_append(w, ids[k], &idx, buf, 1, &e), DRIFT_OK);
            }
        assert_int_equal(drift_trace_writer_commit_step(w, s, 0, &e), DRIFT_OK);
    }
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
}

static void test_engine_sitemap_concat(void **state) {
    (void)state;
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/tcmp_a.h5", tmpdir());
    snprintf(pb, sizeof pb, "%s/tcmp_b.h5", tmpdir());
    /* A (trainer): separate q, k, v, a norm with stats only, the output */
    const site_def sa[] = {{"blocks.0.to_q:out", 4, 1}, {"blocks.0.to_k:out", 4, 1}, {"blocks.0.to_v:out", 4, 1},
                           {"blocks.0.norm:out", 3, 0}, {"output:noise_pred", 3, 1}, {"only_a:out", 3, 1}};
    const char *ca[] = {"blocks.0.qkv:out", "blocks.0.qkv:out", "blocks.0.qkv:out", "blocks.0.norm:out",
                        "output:noise_pred", "only_a:out"};
    /* B (engine): a fused qkv under another prefix, the norm stored, the output renamed */
    const site_def sb[] = {{"engine.blocks.0.qkv:out", 12, 1}, {"engine.blocks.0.norm:out", 3, 1}, {"noise", 3, 1}};
    const char *cb[] = {"blocks.0.qkv:out", "blocks.0.norm:out", "output:noise_pred"};
    write(pa, "tiny-dit", 3, sa, 6, ca, "output:noise_pred", 1, 2);
    write(pb, "tiny-dit", 3, sb, 3, cb, NULL, -1, 2);
    drift_err e;
    drift_err_clear(&e);
    drift_sitemap *m = NULL;
    assert_int_equal(drift_sitemap_parse(&m, MAP, strlen(MAP), "map", &e), DRIFT_OK);
    drift_tcmp_opts o;
    drift_tcmp_opts_init(&o);
    o.path_a = pa;
    o.path_b = pb;
    /* without the map nothing pairs */
    drift_tcmp *c = NULL;
    assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_OK);
    assert_int_equal(drift_tcmp_n_pairs(c), 0);
    drift_tcmp_close(c);
    o.sitemap = m;
    assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_OK);
    assert_int_equal(drift_tcmp_n_pairs(c), 3);
    assert_string_equal(drift_tcmp_pair_name(c, 0), "blocks.0.qkv:out"); /* at to_q's position, A's order */
    assert_string_equal(drift_tcmp_pair_name(c, 1), "blocks.0.norm:out");
    assert_string_equal(drift_tcmp_pair_name(c, 2), "output:noise_pred");
    assert_int_equal(drift_tcmp_unpaired(c, 0), 1); /* only_a */
    assert_int_equal(drift_tcmp_steps_available(c), 3);
    for (int64_t s = 0; s < 3; s++) {
        int got = 0;
        const drift_tcmp_step *st = NULL;
        assert_int_equal(drift_tcmp_next(c, &got, &st, &e), DRIFT_OK);
        assert_int_equal(got, 1);
        assert_int_equal(st->step, s);
        assert_int_equal(st->n_rows, 3);
        /* the concatenation equals the fused site bit for bit (both micro-batches, paired by key) */
        assert_true(st->rows[0].flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL);
        assert_int_equal(st->rows[0].numel, 48); /* 2 micro-batches x [2, 12] */
        /* stats-only on A: compared by the statistics rows, equal */
        assert_true(st->rows[1].flags & DRIFT_TCMP_FLAG_STATS);
        assert_true(st->rows[1].flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL);
        /* the output differs from step 1 on by 0.125 at one element of each micro-batch */
        if (s == 0) {
            assert_true(st->rows[2].flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL);
            assert_int_equal(st->first_divergent, -1);
        } else {
            assert_false(st->rows[2].flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL);
            assert_true(st->rows[2].flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT);
            assert_int_equal(st->first_divergent, 2);
            assert_true(st->rows[2].max_abs_diff == 0.125);
            assert_true(fabs(st->rows[2].mean_abs_diff - 0.125 * 2 / 12) < 1e-15);
        }
    }
    int got = 1;
    assert_int_equal(drift_tcmp_next(c, &got, NULL, &e), DRIFT_OK);
    assert_int_equal(got, 0);
    drift_tcmp_close(c);
    drift_sitemap_free(m);
}

static void test_engine_refusals(void **state) {
    (void)state;
    char pa[512], pb[512], pc[512];
    snprintf(pa, sizeof pa, "%s/tcmp_r_a.h5", tmpdir());
    snprintf(pb, sizeof pb, "%s/tcmp_r_b.h5", tmpdir());
    snprintf(pc, sizeof pc, "%s/tcmp_r_c.h5", tmpdir());
    const site_def s1[] = {{"x:out", 3, 1}}, s2[] = {{"x:out", 4, 1}};
    const char *cn[] = {"x:out"};
    write(pa, "tiny-dit", 4, s1, 1, cn, NULL, 0, 1);
    write(pb, "wan2.2:layers=4", 4, s1, 1, cn, NULL, 0, 1);
    write(pc, "tiny-dit", 2, s2, 1, cn, NULL, 0, 1);
    drift_err e;
    drift_tcmp_opts o;
    drift_tcmp_opts_init(&o);
    o.path_a = pa;
    drift_tcmp *c = NULL;
    const char *b[] = {pb, pc};
    const char *why[] = {"model family differs", "shapes differ"};
    for (int k = 0; k < 2; k++) {
        drift_err_clear(&e);
        o.path_b = b[k];
        o.allow_mismatch = 0;
        assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_E_INPUT);
        assert_null(c);
        assert_non_null(strstr(e.msg, why[k]));
        o.allow_mismatch = 1;
        assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_OK);
        assert_true(drift_tcmp_n_warnings(c) >= 1);
        drift_tcmp_close(c);
    }
    /* steps differ (4 vs 2, same shapes): refused; allowed, only the common steps */
    write(pc, "tiny-dit", 2, s1, 1, cn, NULL, 0, 1);
    o.path_b = pc;
    o.allow_mismatch = 0;
    drift_err_clear(&e);
    assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "committed steps differ"));
    o.allow_mismatch = 1;
    assert_int_equal(drift_tcmp_open(&c, &o, &e), DRIFT_OK);
    assert_int_equal(drift_tcmp_steps_available(c), 2);
    drift_tcmp_close(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glob_capture),
        cmocka_unit_test(test_glob_linear),
        cmocka_unit_test(test_sitemap_parse),
        cmocka_unit_test(test_engine_sitemap_concat),
        cmocka_unit_test(test_engine_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
