/* libFuzzer harness: model specs "FAMILY[:K=V,...]" (drift_family_parse).
 * On success the canonical spec (drift_family_format) must parse to the same
 * configuration, and the parameter table must build. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz/fuzz_common.h"
#include "replay/models/family.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *spec = fuzz_cstr(data, size);
    drift_family_config cfg;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_family_parse(spec, &cfg, &err);
    fuzz_report("family", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
    if (rc == DRIFT_OK) {
        char canon[1024], canon2[1024];
        drift_family_format(&cfg, canon, sizeof canon);
        drift_family_config again;
        rc = drift_family_parse(canon, &again, &err);
        FUZZ_CHECK(rc == DRIFT_OK, "canonical spec '%s' does not parse: %s", canon, err.msg);
        drift_family_format(&again, canon2, sizeof canon2);
        FUZZ_CHECK(strcmp(canon, canon2) == 0, "canonical spec not stable: '%s' vs '%s'", canon, canon2);
        FUZZ_CHECK(drift_family_tokens(&cfg) > 0, "tokens <= 0 for '%s'", canon);
        /* The table costs O(layers^2) (duplicate-name checks by linear scan);
         * past 8 layers it dominates the fuzzing time (libFuzzer hooks every
         * strcmp), so only the parser is exercised there. */
        if (cfg.layers <= 8) {
            drift_param_table t;
            drift_param_table_init(&t);
            rc = drift_family_param_table(&cfg, &t, &err);
            FUZZ_CHECK(fuzz_status_ok(rc), "param table rc %d for '%s': %s", rc, canon, err.msg);
            if (rc == DRIFT_OK) FUZZ_CHECK(t.n > 0 && (int)t.n_wraps == cfg.layers, "table of '%s'", canon);
            drift_param_table_free(&t);
        }
    } else {
        FUZZ_CHECK(err.msg[0] != '\0', "failure without a message (rc %d)", rc);
    }
    free(spec);
    return 0;
}
