/* libFuzzer harness: graph IR JSON (drift_graph_from_json, replay/ir/graph.h).
 * On success the graph is serialised, parsed back and serialised again; the
 * two serialisations must be identical. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz/fuzz_common.h"
#include "replay/ir/graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    drift_graph *g = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_graph_from_json((const char *)data, size, "fuzz.json", &g, &err);
    fuzz_report("graph", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "rc %d: %s: %s", rc, err.where, err.msg);
    if (rc != DRIFT_OK) {
        FUZZ_CHECK(g == NULL && err.msg[0], "failure without a message or with a graph (rc %d)", rc);
        return 0;
    }
    char *j1 = drift_graph_to_json(g, 0, &err);
    FUZZ_CHECK(j1 != NULL, "to_json failed on a parsed graph: %s", err.msg);
    drift_graph *h = NULL;
    rc = drift_graph_from_json(j1, strlen(j1), "fuzz-rt.json", &h, &err);
    FUZZ_CHECK(rc == DRIFT_OK, "serialised graph does not parse back (%s: %s):\n%.400s", err.where, err.msg, j1);
    char *j2 = drift_graph_to_json(h, 0, &err);
    FUZZ_CHECK(j2 && strcmp(j1, j2) == 0, "graph round trip not stable:\n%.400s\n%.400s", j1, j2 ? j2 : "(null)");
    free(j1);
    free(j2);
    drift_graph_free(h);
    drift_graph_free(g);
    return 0;
}
