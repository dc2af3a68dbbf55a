/* libFuzzer harness: plan flags as given on the command line
 * (drift_plan_is_flag / drift_plan_apply_flag: --param-dtype PATTERN=DTYPE,
 * --input-dtype KEY=VALUE, ...). The input is a sequence of
 * NAME '\n' VALUE '\n' pairs; NAME without "--" gets it prepended. The
 * resulting plan must serialise and parse back. */
#include <stddef.h>
#include <stdint.h>

#include "formats/plan.h"
#include "fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_cstr(data, size);
    drift_plan p;
    drift_plan_init(&p);
    drift_err err;
    char *save = s, *line[2];
    int k = 0, ok = 1;
    for (char *c = s;; c++) {
        if (*c == '\n' || *c == '\0') {
            int end = *c == '\0';
            *c = '\0';
            line[k++] = save;
            save = c + 1;
            if (k == 2) {
                char name[300];
                snprintf(name, sizeof name, "%s%s", strncmp(line[0], "--", 2) == 0 ? "" : "--", line[0]);
                if (drift_plan_is_flag(name)) {
                    drift_err_clear(&err);
                    int rc = drift_plan_apply_flag(&p, name, line[1], &err);
                    fuzz_report("flag", rc, &err);
                    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
                    if (rc != DRIFT_OK) FUZZ_CHECK(err.msg[0] != '\0', "failure without a message");
                    if (rc != DRIFT_OK) ok = 0;
                }
                k = 0;
            }
            if (end) break;
        }
    }
    if (ok) {
        char *j = drift_plan_to_json(&p);
        FUZZ_CHECK(j != NULL, "drift_plan_to_json failed");
        drift_plan q;
        drift_plan_init(&q);
        int rc = drift_plan_parse_json(&q, j, strlen(j), "flags.json", &err);
        FUZZ_CHECK(rc == DRIFT_OK, "plan built from flags does not parse back (%s: %s):\n%.400s", err.where,
                   err.msg, j);
        /* and it is the same plan: nothing was altered on the way */
        FUZZ_CHECK(strcmp(p.name, q.name) == 0, "name changed by serialisation: \"%s\" -> \"%s\"", p.name, q.name);
        FUZZ_CHECK(p.n_patterns == q.n_patterns, "%zu patterns became %zu", p.n_patterns, q.n_patterns);
        for (size_t i = 0; i < p.n_patterns; i++)
            FUZZ_CHECK(strcmp(p.patterns[i].glob, q.patterns[i].glob) == 0 && p.patterns[i].dtype == q.patterns[i].dtype,
                       "pattern %zu changed by serialisation: \"%s\" -> \"%s\"", i, p.patterns[i].glob,
                       q.patterns[i].glob);
        drift_plan_free(&q);
        free(j);
    }
    drift_plan_free(&p);
    free(s);
    return 0;
}
