/* libFuzzer harness: captured graphs (drift-aten-graph JSON, replay/capture).
 * Parse; on success lower to drift IR; on success assign dtypes for the
 * oracle and for a bf16 trainer plan. Every failure must be a clean status
 * with a message; nothing may crash, leak or allocate without bound. */
#include <stddef.h>
#include <string.h>
#include <stdint.h>

#include "fuzz/fuzz_common.h"
#include "formats/plan.h"
#include "replay/ir/assign.h"
#include "formats/alloc.h"
#include "replay/capture/aten_graph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    drift_aten_graph *g = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_aten_graph_parse((const char *)data, size, "fuzz.json", &g, &err);
    fuzz_report("aten_graph", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "parse rc %d: %s: %s", rc, err.where, err.msg);
    if (rc != DRIFT_OK) {
        FUZZ_CHECK(g == NULL && err.msg[0], "parse failure without a message or with a graph (rc %d)", rc);
        return 0;
    }
    for (int i = 0; i < drift_aten_graph_op_count(g); i++) FUZZ_CHECK(drift_aten_graph_op(g, i, NULL) != NULL, "op %d", i);
    drift_graph *sem = NULL;
    drift_err_clear(&err);
    char *notes = NULL; /* sites left unmapped (module_outputs) */
    drift_aten_lower_opts lo = {&notes, NULL, NULL, 0, 0, 0, NULL, NULL, NULL, NULL, NULL};
    rc = drift_aten_graph_lower_ex(g, &lo, &sem, &err);
    FUZZ_CHECK(fuzz_status_ok(rc), "lower rc %d: %s: %s", rc, err.where, err.msg);
    FUZZ_CHECK(rc == DRIFT_OK ? sem != NULL : (sem == NULL && err.msg[0]), "lower result inconsistent (rc %d)", rc);
    FUZZ_CHECK(rc == DRIFT_OK || notes == NULL, "notes left after a failed lowering");
    drift_free(notes);
    if (rc == DRIFT_OK) {
        drift_assign_opts o;
        drift_assign_opts_init(&o);
        o.side = DRIFT_SIDE_ORACLE;
        drift_graph *as = NULL;
        rc = drift_assign_dtypes(sem, NULL, NULL, NULL, &o, &as, &err);
        FUZZ_CHECK(fuzz_status_ok(rc), "assign (oracle) rc %d: %s", rc, err.msg);
        drift_graph_free(as);
        as = NULL;
        drift_plan plan;
        drift_plan_init(&plan);
        o.side = DRIFT_SIDE_TRAINER;
        rc = drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &err);
        FUZZ_CHECK(fuzz_status_ok(rc), "assign (bf16) rc %d: %s", rc, err.msg);
        drift_graph_free(as);
        drift_plan_free(&plan);
    }
    if (rc == DRIFT_OK) { /* the same document re-batched from 1 to 3 (drift invariance): an error or a graph */
        drift_graph *rb = NULL;
        int dims[DRIFT_ATEN_MAX_NODES < 4096 ? DRIFT_ATEN_MAX_NODES : 4096];
        if (drift_aten_graph_node_count(g) < (int)(sizeof dims / sizeof dims[0])) {
            memset(dims, 0, sizeof dims);
            drift_aten_lower_opts ro = {NULL, NULL, NULL, 0, 1, 3, dims, NULL, NULL, NULL, NULL};
            drift_err_clear(&err);
            int r2 = drift_aten_graph_lower_ex(g, &ro, &rb, &err);
            FUZZ_CHECK(fuzz_status_ok(r2), "rebatch rc %d: %s: %s", r2, err.where, err.msg);
            FUZZ_CHECK(r2 == DRIFT_OK ? rb != NULL : (rb == NULL && err.msg[0]), "rebatch result inconsistent (rc %d)", r2);
            drift_graph_free(rb);
            /* the probe that decides which shape arguments spell the batch, from a recorded batch of 2 */
            unsigned char lead[sizeof dims / sizeof dims[0]];
            drift_err_clear(&err);
            r2 = drift_aten_rebatch_probe(g, NULL, 2, dims, lead, &err);
            FUZZ_CHECK(fuzz_status_ok(r2), "probe rc %d: %s: %s", r2, err.where, err.msg);
            FUZZ_CHECK(r2 == DRIFT_OK || err.msg[0], "probe failed without a message (rc %d)", r2);
        }
    }
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    return 0;
}
