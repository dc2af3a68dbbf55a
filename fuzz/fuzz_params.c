/* libFuzzer harness: the named_parameters() text dump parser
 * (drift_param_table_parse_text). On success every row is looked up by name
 * and its wrap-local name computed. */
#include <stddef.h>
#include <stdint.h>

#include "formats/params.h"
#include "fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_param_table_parse_text(&t, (const char *)data, size, "fuzz.txt", &err);
    fuzz_report("params", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
    if (rc != DRIFT_OK) {
        FUZZ_CHECK(err.msg[0] != '\0', "failure without a message (rc %d)", rc);
    } else {
        for (size_t i = 0; i < t.n; i++) {
            FUZZ_CHECK(drift_param_table_find(&t, t.params[i].fqn) == (long)i, "find(%s) != %zu", t.params[i].fqn, i);
            FUZZ_CHECK(t.params[i].wrap >= -1 && t.params[i].wrap < (int)t.n_wraps, "wrap index %d",
                       t.params[i].wrap);
            const char *local = drift_param_table_local_name(&t, i);
            FUZZ_CHECK(local != NULL && strlen(local) <= strlen(t.params[i].fqn), "local name");
            int64_t numel = 1;
            for (int d = 0; d < t.params[i].ndim; d++) numel *= t.params[i].shape[d];
            FUZZ_CHECK(numel == t.params[i].numel, "numel %lld != product %lld", (long long)t.params[i].numel,
                       (long long)numel);
        }
    }
    drift_param_table_free(&t);
    return 0;
}
