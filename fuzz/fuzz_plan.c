/* libFuzzer harness: dtype plans (formats/plan.h). The input is a plan JSON
 * document. On success: serialise (drift_plan_to_json), parse that back,
 * serialise again (must be byte-identical), copy, and compile against the
 * tiny-dit parameter table (fnmatch + compile_param_dtype_maps). */
#include <stddef.h>
#include <stdint.h>

#include "formats/plan.h"
#include "fuzz/fuzz_common.h"
#include "replay/models/family.h"

static drift_param_table plan_g_table;
static int plan_g_ready;

static void plan_init_table(void) {
    if (plan_g_ready) return;
    drift_family_config cfg;
    drift_err err;
    drift_param_table_init(&plan_g_table);
    if (drift_family_parse("tiny-dit", &cfg, &err) != DRIFT_OK ||
        drift_family_param_table(&cfg, &plan_g_table, &err) != DRIFT_OK) {
        fprintf(stderr, "fuzz_plan: cannot build the tiny-dit table: %s\n", err.msg);
        abort();
    }
    plan_g_ready = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    plan_init_table();
    drift_plan p;
    drift_plan_init(&p);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_parse_json(&p, (const char *)data, size, "fuzz.json", &err);
    fuzz_report("plan", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
    if (rc != DRIFT_OK) {
        FUZZ_CHECK(err.msg[0] != '\0', "failure without a message (rc %d)", rc);
        drift_plan_free(&p);
        return 0;
    }
    char *j1 = drift_plan_to_json(&p);
    FUZZ_CHECK(j1 != NULL, "drift_plan_to_json failed on a parsed plan");
    drift_plan q;
    drift_plan_init(&q);
    rc = drift_plan_parse_json(&q, j1, strlen(j1), "fuzz-rt.json", &err);
    FUZZ_CHECK(rc == DRIFT_OK, "serialised plan does not parse back (%s: %s):\n%.400s", err.where, err.msg, j1);
    char *j2 = drift_plan_to_json(&q);
    FUZZ_CHECK(j2 && strcmp(j1, j2) == 0, "plan round trip not stable:\n%.400s\n%.400s", j1, j2 ? j2 : "(null)");

    drift_plan c;
    memset(&c, 0, sizeof c);
    rc = drift_plan_copy(&c, &p, &err);
    FUZZ_CHECK(rc == DRIFT_OK || rc == DRIFT_E_NOMEM, "copy rc %d", rc);

    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    rc = drift_plan_compile(&p, &plan_g_table, &cp, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "compile rc %d: %s: %s", rc, err.where, err.msg);
    if (rc == DRIFT_OK) FUZZ_CHECK(cp.n_params == plan_g_table.n, "compiled %zu of %zu params", cp.n_params, plan_g_table.n);
    drift_compiled_plan_free(&cp);

    free(j1);
    free(j2);
    drift_plan_free(&q);
    drift_plan_free(&c);
    drift_plan_free(&p);
    return 0;
}
