/* The cross-check of issue 15: diffusers' WanTransformer3DModel captured
 * with torch.export (tests/data/graphs/wan.json) and drift's hand-written
 * wan2.2 family at the same configuration, with the same parameters, inputs
 * and plan, replayed on the cpu backend: every site the two share (block
 * outputs, norms, attentions, FFNs, embedders, the output) is compared bit
 * for bit, under the wan2_2 plan (bf16 autocast, norm2 in fp32), the same
 * without the island, and an fp32 forward. Every shared site must be bitwise
 * equal (27 of them: inputs, patch embedding, embedders, every block's norms,
 * attentions, FFN and output, the output norm and projection). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/plan.h"
#include "formats/safetensors.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"

#define WAN_FIXTURE_SPEC                                                                                   \
    "wan2.2:layers=2,dim=24,heads=2,ffn_dim=32,in_channels=4,out_channels=4,text_dim=16,text_len=12," \
    "freq_dim=256,patch=1x2x2,frames=2,height=16,width=16,batch=1,eps=1e-6,rope_theta=10000"

static const char *testdata(void) {
    const char *d = getenv("DRIFT_TESTDATA");
    return d ? d : "tests/data";
}

static int keep(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    return drift_site_cache_put(user, site, t, err);
}

static drift_hostset *inputs_of(const char *st_path) {
    drift_err e;
    drift_safetensors *f = NULL;
    if (drift_safetensors_open(&f, st_path, 0, &e)) fail_msg("%s: %s", st_path, e.msg);
    drift_hostset *in = NULL;
    drift_hostset_create(&in, &e);
    const char *names[3][2] = {{"input:hidden_states", "latents"}, {"input:encoder_hidden_states", "cond"},
                               {"input:timestep", "timestep"}};
    for (int k = 0; k < 3; k++) {
        long i = drift_safetensors_find(f, names[k][0]);
        assert_true(i >= 0);
        drift_safetensors_info inf;
        drift_safetensors_tensor(f, (size_t)i, &inf, &e);
        float *v = malloc((size_t)inf.numel * sizeof *v);
        assert_int_equal(drift_safetensors_read_f32(f, (size_t)i, v, (size_t)inf.numel, &e), DRIFT_OK);
        assert_int_equal(drift_hostset_add(in, names[k][1], DRIFT_F32, inf.ndim, inf.shape, v, NULL, NULL, &e), DRIFT_OK);
        free(v);
    }
    drift_safetensors_close(f);
    return in;
}

/* Runs m under plan on cpu, keeping every site. */
static drift_site_cache *run(drift_model *m, const drift_plan *plan, const drift_hostset *in) {
    drift_err e;
    drift_err_clear(&e);
    drift_forward *f = NULL;
    if (drift_forward_prepare(m, plan, DRIFT_SIDE_TRAINER, NULL, &f, &e)) fail_msg("prepare %s: %s", m->spec, e.msg);
    drift_backend *be = NULL;
    assert_int_equal(drift_backend_create("cpu", &be, &e), DRIFT_OK);
    drift_site_cache *c = NULL;
    drift_site_cache_create(&c, &e);
    if (drift_forward_run(f, m, be, in, keep, c, NULL, &e)) fail_msg("run %s: %s: %s", m->spec, e.where, e.msg);
    drift_backend_free(be);
    drift_forward_free(f);
    return c;
}

/* Compares the shared sites; returns how many differ; *shared counts them. */
static int compare(const drift_model *fam, drift_site_cache *a, drift_site_cache *b, const char *label, int *shared,
                   const char *const *must_equal) {
    int n = drift_graph_sites(fam->sem, NULL, 0), differ = 0;
    int *ids = malloc((size_t)n * sizeof *ids);
    drift_graph_sites(fam->sem, ids, n);
    *shared = 0;
    for (int i = 0; i < n; i++) {
        const char *s = drift_graph_value(fam->sem, ids[i])->site;
        int64_t na = 0, nb = 0;
        drift_dtype da, db;
        const float *va = drift_site_cache_get(a, s, &na, &da), *vb = drift_site_cache_get(b, s, &nb, &db);
        if (!va || !vb) continue;
        (*shared)++;
        if (na != nb) {
            print_message("  %-6s %-44s element counts differ (%lld vs %lld)\n", label, s, (long long)na, (long long)nb);
            differ++;
            continue;
        }
        int64_t nd = 0;
        double mx = 0;
        for (int64_t k = 0; k < na; k++)
            if (memcmp(&va[k], &vb[k], sizeof(float))) {
                nd++;
                double d = fabs((double)va[k] - vb[k]);
                if (d > mx) mx = d;
            }
        int must = 0;
        for (int k = 0; must_equal && must_equal[k]; k++) must |= !strcmp(must_equal[k], s);
        print_message("  %-6s %-44s %s %s: %lld of %lld elements differ (max |d| %.3g)%s\n", label, s,
                      drift_dtype_name(da), drift_dtype_name(db), (long long)nd, (long long)na, mx,
                      must ? "  [must be bitwise]" : "");
        if (nd) differ++;
        if ((must || !must_equal) && nd) fail_msg("%s: %s differs between the captured graph and the family", label, s);
    }
    free(ids);
    return differ;
}

static void test_captured_wan_vs_family(void **s) {
    (void)s;
    char gpath[1024], wpath[1024];
    snprintf(gpath, sizeof gpath, "%s/graphs/wan.json", testdata());
    snprintf(wpath, sizeof wpath, "%s/graphs/wan.safetensors", testdata());
    drift_err e;
    drift_err_clear(&e);
    drift_model *cap = NULL, *fam = NULL;
    if (drift_capture_model_from_file(gpath, &cap, &e)) fail_msg("%s", e.msg);
    if (drift_model_create(WAN_FIXTURE_SPEC, &fam, &e)) fail_msg("%s", e.msg);
    if (drift_model_load_safetensors(cap, wpath, NULL, &e)) fail_msg("captured weights: %s", e.msg);
    if (drift_model_load_safetensors(fam, wpath, NULL, &e)) fail_msg("family weights: %s", e.msg);
    assert_int_equal(cap->table.n, fam->table.n); /* the same parameters, by FQN */
    for (size_t i = 0; i < fam->table.n; i++)
        assert_true(drift_param_table_find(&cap->table, fam->table.params[i].fqn) >= 0);
    drift_hostset *in = inputs_of(wpath);
    static const char *const plans[3] = {"wan2_2.json", "wan2_2_no_norm2.json", "wan2_2.json"};
    for (int pass = 0; pass < 3; pass++) {
        char ppath[1024];
        snprintf(ppath, sizeof ppath, "%s/plans/%s", testdata(), plans[pass]);
        drift_plan plan;
        drift_plan_init(&plan);
        assert_int_equal(drift_plan_load_file(&plan, ppath, &e), DRIFT_OK);
        if (pass == 2) plan.diffusion_forward_dtype = DRIFT_F32; /* no autocast */
        const char *label = pass == 0 ? "wan2_2" : pass == 1 ? "no_n2" : "fp32";
        drift_site_cache *a = run(cap, &plan, in), *b = run(fam, &plan, in);
        int shared = 0;
        int differ = compare(fam, a, b, label, &shared, NULL);
        print_message("  %s: %d shared sites, %d bitwise equal\n", label, shared, shared - differ);
        assert_int_equal(shared, 27);
        assert_int_equal(differ, 0);
        drift_site_cache_free(a);
        drift_site_cache_free(b);
        drift_plan_free(&plan);
    }
    drift_hostset_free(in);
    drift_model_free(cap);
    drift_model_free(fam);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_captured_wan_vs_family)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
