/* The cpu backend gives the same bits whatever the thread count and the
 * processor's BLAS kernel (issue 32): the recorded fixtures
 * (tests/data/graphs/recorded) replay on the cpu with a digest (FNV-1a 64 of
 * the bits) of every recorded site's value, every step, that is the same
 *  - on 1, 2 and 3 threads (cpu:threads=N), in this process;
 *  - in a child process of this test under OPENBLAS_CORETYPE = Prescott,
 *    Sandybridge, Haswell and Zen (OpenBLAS picks its kernel at load, so a
 *    fresh process per core type), on 3, 2, 3 and 2 threads (one pass each,
 *    to keep the runtime small; tests/integration/cpu_bits_portable.sh runs
 *    the whole core type x thread count matrix through the CLI). A core
 *    type this CPU cannot run (the child dies of a signal) is reported and
 *    skipped.
 * With OpenBLAS's sgemm as the cpu GEMM this failed on an AMD EPYC (Haswell
 * and Zen kernels vs Prescott, and 1 vs 2 threads).
 *
 *   test_cpu_bits_portable --digests N  print "model step site digest" lines
 *                                       on N threads (the child's job) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/plan.h"
#include "formats/trace.h"
#include "kernels/backend.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"
#include "tests/trace_records.h"

static const char *const MODELS[] = {"wan", "ltx2", "flux", "sd3", "qwen"};
#define N_MODELS 5
static const char *const IN_SITE[3] = {"input:latents:pre_cast", "input:cond:pre_cast", "input:timestep:pre_cast"};
static const char *const IN_NAME[3] = {"latents", "cond", "timestep"};

static const char *testdata(void) {
    const char *d = getenv("DRIFT_TESTDATA");
    return d ? d : "tests/data";
}

/* One text buffer of "model step site digest\n" lines. */
typedef struct digests {
    char *s;
    size_t n, cap;
    const char *model;
    int64_t step;
    const drift_backend *be;
} digests;

static void put(digests *d, const char *line) {
    const size_t l = strlen(line);
    if (d->n + l + 1 > d->cap) {
        d->cap = (d->n + l + 1) * 2;
        d->s = realloc(d->s, d->cap);
        assert_non_null(d->s);
    }
    memcpy(d->s + d->n, line, l + 1);
    d->n += l;
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int on_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    digests *d = user;
    const int wide = t->dtype == DRIFT_F64;
    const size_t bytes = (size_t)(t->numel > 0 ? t->numel : 1) * (wide ? sizeof(double) : sizeof(float));
    void *buf = malloc(bytes);
    if (!buf) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
    int rc = t->numel == 0 ? 0
             : wide        ? drift_backend_download_f64(d->be, t, buf, err)
                           : drift_backend_download_f32(d->be, t, buf, err);
    if (!rc) {
        char line[512];
        snprintf(line, sizeof line, "%s %lld %s %016llx\n", d->model, (long long)d->step, site,
                 (unsigned long long)fnv(buf, t->numel > 0 ? bytes : 0));
        put(d, line);
    }
    free(buf);
    return rc;
}

/* Every site and the output of every step of MODEL.h5 replayed on be_spec, appended to d. */
static void replay(const char *model, const char *be_spec, digests *d) {
    char path[1024];
    snprintf(path, sizeof path, "%s/graphs/recorded/%s.h5", testdata(), model);
    FILE *f = fopen(path, "rb");
    if (!f) return; /* a fixture not committed: the same (absent) in every run */
    fclose(f);
    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    if (drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e)) fail_msg("%s: %s", path, e.msg);
    const drift_trace_meta *meta = drift_trace_reader_meta(r);
    drift_model *m = NULL;
    if (drift_capture_model_for_trace(r, meta->family, &m, &e) || drift_model_load_trace(m, r, &e))
        fail_msg("%s: %s: %s", path, e.where, e.msg);
    drift_plan plan;
    drift_plan_init(&plan);
    if (drift_plan_parse_json(&plan, meta->plan_json, strlen(meta->plan_json), path, &e)) fail_msg("plan: %s", e.msg);
    const drift_dtype handed[3] = {DRIFT_F32, DRIFT_F32, DRIFT_F32};
    drift_forward *fw = NULL;
    if (drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, handed, &fw, &e)) fail_msg("prepare: %s", e.msg);
    drift_backend *be = NULL;
    assert_int_equal(drift_backend_create(be_spec, &be, &e), DRIFT_OK);
    size_t n_steps = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &n_steps);
    d->model = model;
    d->be = be;
    for (size_t k = 0; k < n_steps; k++) {
        drift_hostset *in = NULL;
        assert_int_equal(drift_hostset_create(&in, &e), DRIFT_OK);
        for (int i = 0; i < 3; i++) {
            drift_trace_site_info info;
            float *v = test_read_at(r, IN_SITE[i], st[k].step, &info);
            if (!v) fail_msg("%s: step %lld has no %s", model, (long long)st[k].step, IN_SITE[i]);
            assert_int_equal(drift_hostset_add(in, IN_NAME[i], info.dtype, info.ndim, info.shape, v, NULL, NULL, &e),
                             DRIFT_OK);
            free(v);
        }
        if (drift_capture_step_inputs(m, r, st[k].step, in, &e)) fail_msg("step inputs: %s", e.msg);
        d->step = st[k].step;
        drift_exec_result out;
        memset(&out, 0, sizeof out);
        if (drift_forward_run(fw, m, be, in, on_site, d, &out, &e)) fail_msg("%s: %s: %s", model, e.where, e.msg);
        char line[128];
        snprintf(line, sizeof line, "%s %lld output %016llx\n", model, (long long)st[k].step,
                 (unsigned long long)fnv(out.f32, (size_t)out.numel * sizeof(float)));
        put(d, line);
        drift_exec_result_free(&out);
        drift_hostset_free(in);
    }
    drift_backend_free(be);
    drift_forward_free(fw);
    drift_plan_free(&plan);
    drift_model_free(m);
    drift_trace_reader_close(r);
}

/* All fixtures on cpu:threads=t. Caller frees the text. */
static char *all_digests(int t) {
    digests d = {0};
    put(&d, "");
    char spec[32];
    snprintf(spec, sizeof spec, "cpu:threads=%d", t);
    for (int i = 0; i < N_MODELS; i++) replay(MODELS[i], spec, &d);
    return d.s;
}

/* Digests of this process on 1 thread (computed once). */
static char *g_base;

static const char *base(void) {
    if (!g_base) g_base = all_digests(1);
    return g_base;
}

/* The first differing line of a vs b, for the message. */
static void assert_same_digests(const char *a, const char *b, const char *what) {
    if (strcmp(a, b) == 0) return;
    size_t i = 0, line = 0;
    while (a[i] && a[i] == b[i]) {
        if (a[i] == '\n') line = i + 1;
        i++;
    }
    fail_msg("%s: the bits differ first at \"%.100s\" vs \"%.100s\"", what, a + line, b + line);
}

static void test_threads(void **st) {
    (void)st;
    const char *b = base();
    size_t sites = 0;
    for (const char *p = b; *p; p++) sites += *p == '\n';
    print_message("  %zu site values (every recorded site, every step, %d fixtures)\n", sites, N_MODELS);
    assert_true(sites > 50);
    for (int t = 2; t <= 3; t++) {
        char *o = all_digests(t), what[64];
        snprintf(what, sizeof what, "1 thread vs %d threads", t);
        assert_same_digests(b, o, what);
        free(o);
    }
}

static char g_self[4096];

static void test_openblas_coretypes(void **st) {
    (void)st;
    static const char *const CORES[] = {"Prescott", "Sandybridge", "Haswell", "Zen"};
    const char *b = base();
    for (int c = 0; c < 4; c++) {
        const int t = 3 - c % 2;
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=%s '%s' --digests %d", CORES[c], g_self, t);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        digests d = {0};
        put(&d, "");
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf - 1, p)) > 0) {
            buf[n] = 0;
            put(&d, buf);
        }
        const int status = pclose(p);
        if (status != -1 && WIFSIGNALED(status)) {
            print_message("  %s: this CPU cannot run OpenBLAS's %s kernel (signal %d), skipped\n", CORES[c], CORES[c],
                          WTERMSIG(status));
            free(d.s);
            continue;
        }
        if (status != 0) fail_msg("%s: the child exited with status %d", CORES[c], status);
        char what[96];
        snprintf(what, sizeof what, "1 thread here vs OPENBLAS_CORETYPE=%s on %d threads", CORES[c], t);
        assert_same_digests(b, d.s, what);
        print_message("  OPENBLAS_CORETYPE=%s on %d threads: the same bits\n", CORES[c], t);
        free(d.s);
    }
}

int main(int argc, char **argv) {
    const ssize_t sl = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    g_self[sl > 0 ? sl : 0] = 0;
    if (argc > 2 && strcmp(argv[1], "--digests") == 0) {
        char *s = all_digests(atoi(argv[2]));
        fputs(s, stdout);
        free(s);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_openblas_coretypes),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_base);
    return rc;
}
