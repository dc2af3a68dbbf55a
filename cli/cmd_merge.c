/* drift merge: one index file (HDF5 virtual datasets) over the per-rank
 * traces of a run (formats/trace_index.h, docs/format.md "Index files"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "formats/trace_index.h"

static const drift_cli_opt_spec OPTS[] = {
    {"--out", "-o", "INDEX", "the index to write", NULL, 0},
    {"--force", NULL, NULL, "replace INDEX if it exists (atomically)", NULL, 0},
    {"--allow-missing", NULL, NULL, "accept absent ranks (drift ls INDEX names them)", NULL, 0},
    {"--allow-mismatch", NULL, NULL, "accept ranks that differ in family, plan or committed steps", NULL, 0},
    {"--allow-outside", NULL, NULL, "accept rank files outside the index's folder (readers of\n"
                                    "the index then need --allow-outside too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "merge",
    "TRACE... -o INDEX [--force] [--allow-missing] [--allow-mismatch] [--allow-outside]",
    "Writes INDEX, one HDF5 file over the per-rank traces of a run\n"
    "(trace-trainer.rank0.h5, rank1, ...), made of HDF5 virtual datasets that map\n"
    "onto the rank files' datasets: no tensor data is copied. Source paths are\n"
    "stored relative to INDEX's directory, so INDEX and its rank files can move\n"
    "together; the rank files must stay where they are relative to it.\n"
    "\n"
    "INDEX is a SNAPSHOT: every record axis is sized to what each rank file had\n"
    "committed when merge ran. Steps committed later are not in it; re-run drift\n"
    "merge --force to refresh it. Inputs must be closed (not being written).\n"
    "\n"
    "Every command that reads a trace (ls, top, replay, bisect, compare) reads an\n"
    "index: INDEX opens the view of its lowest rank (rank 0 unless missing),\n"
    "INDEX#rank=N the view of rank N; drift ls INDEX lists every rank. Opening a\n"
    "view fails, naming the file, when a rank file is missing or changed since\n"
    "the merge.\n"
    "\n"
    "Checks: every input is a readable drift trace (exit 2 naming the file if\n"
    "not), all share run id, world size, side and format version, the model\n"
    "family, the plan and the committed steps (unless --allow-mismatch), ranks\n"
    "are distinct, and every rank 0..world_size-1 is present.\n",
    OPTS,
    "TRACE",
    1,
    -1,
    NULL,
    "0 written, 2 bad usage or bad input",
    "merge trace.rank0.h5 trace.rank1.h5 -o run.h5"};

int drift_cmd_merge(int argc, char **argv) {
    drift_cli_args a;
    int rc = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &rc)) return rc;
    const char *out = drift_cli_args_get(&a, "--out");
    int allow_missing = drift_cli_args_count(&a, "--allow-missing") > 0, force = drift_cli_args_count(&a, "--force") > 0;
    int allow_mismatch = drift_cli_args_count(&a, "--allow-mismatch") > 0;
    if (drift_cli_args_count(&a, "--allow-outside") > 0) drift_trace_index_allow_outside(1);
    if (!out) {
        drift_cli_args_free(&a);
        return drift_cli_usage_error_field("merge", "-o", "missing -o INDEX (required)");
    }
    for (size_t k = 0; k < a.n_pos; k++)
        if ((rc = drift_cli_check_input("merge", "TRACE", a.pos[k]))) goto done;
    if ((rc = drift_cli_check_output("merge", "-o", out, force))) goto done;
    drift_err err;
    drift_err_clear(&err);
    drift_trace_merge_opts o = {.inputs = a.pos, .n_inputs = a.n_pos, .out = out, .allow_missing = allow_missing,
                                .allow_mismatch = allow_mismatch};
    if (drift_trace_merge(&o, &err) != DRIFT_OK) {
        rc = drift_cli_report("merge", &err);
        goto done;
    }
    fprintf(stderr, "drift merge: wrote %s over %zu rank file(s)\n", out, a.n_pos);
done:
    drift_cli_args_free(&a);
    return rc;
}
