/* drift merge: one index file (HDF5 virtual datasets) over the per-rank
 * traces of a run (formats/trace_index.h, docs/format.md "Index files"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "formats/trace_index.h"

static const char *const HELP =
    "usage: drift merge TRACE... -o INDEX [--allow-missing] [--allow-outside]\n"
    "\n"
    "Writes INDEX, one HDF5 file over the per-rank traces of a run\n"
    "(trace-trainer.rank0.h5, rank1, ...), made of HDF5 virtual datasets that map\n"
    "onto the rank files' datasets: no tensor data is copied. Source paths are\n"
    "stored relative to INDEX's directory, so INDEX and its rank files can move\n"
    "together; the rank files must stay where they are relative to it.\n"
    "\n"
    "INDEX is a SNAPSHOT: every record axis is sized to what each rank file had\n"
    "committed when merge ran. Steps committed later are not in it; re-run drift\n"
    "merge to refresh it. Inputs must be closed (not being written).\n"
    "\n"
    "Every command that reads a trace (ls, top, replay, bisect, compare) reads an\n"
    "index: INDEX opens the view of its lowest rank (rank 0 unless missing),\n"
    "INDEX#rank=N the view of rank N; drift ls INDEX lists every rank. Opening a\n"
    "view fails, naming the file, when a rank file is missing or changed since\n"
    "the merge.\n"
    "\n"
    "Checks: every input is a readable drift trace (exit 2 naming the file if\n"
    "not), all share run id, world size, side and format version, ranks are\n"
    "distinct, and every rank 0..world_size-1 is present.\n"
    "\n"
    "  -o, --out INDEX    the index to write (replaced atomically if it exists)\n"
    "  --allow-missing    accept absent ranks (drift ls INDEX names them)\n"
    "  --allow-outside    accept rank files outside the index's folder (readers of\n"
    "                     the index then need --allow-outside too)\n"
    "\n"
    "exit: 0 written, 2 bad usage or bad input\n";

int drift_cmd_merge(int argc, char **argv) {
    const char *out = NULL;
    int allow_missing = 0;
    const char **inputs = calloc((size_t)(argc > 0 ? argc : 1), sizeof *inputs);
    size_t n = 0;
    if (!inputs) {
        fprintf(stderr, "drift merge: out of memory\n");
        return 2;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            free(inputs);
            return 0;
        }
        if ((m = drift_cli_opt(argc, argv, &i, "-o", &v)) != 0 || (m = drift_cli_opt(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0) {
                rc = drift_cli_usage_error("merge", "-o needs a value");
                goto done;
            }
            out = v;
        } else if (strcmp(argv[i], "--allow-missing") == 0) {
            allow_missing = 1;
        } else if (strcmp(argv[i], "--allow-outside") == 0) {
            drift_trace_index_allow_outside(1);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = drift_cli_usage_error("merge", "unknown option '%s'", argv[i]);
            goto done;
        } else {
            inputs[n++] = argv[i];
        }
    }
    if (!n || !out) {
        rc = drift_cli_usage_error("merge", "at least one TRACE and -o INDEX are required");
        goto done;
    }
    drift_err err;
    drift_err_clear(&err);
    drift_trace_merge_opts o = {.inputs = inputs, .n_inputs = n, .out = out, .allow_missing = allow_missing};
    if (drift_trace_merge(&o, &err) != DRIFT_OK) {
        rc = drift_cli_report("merge", &err);
        goto done;
    }
    fprintf(stderr, "drift merge: wrote %s over %zu rank file(s)\n", out, n);
done:
    free(inputs);
    return rc;
}
