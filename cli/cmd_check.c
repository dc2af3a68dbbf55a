/* drift check: validate a trace; --repair restores a file whose writer was
 * killed so that ordinary HDF5 readers open it, losing nothing committed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "formats/json.h"
#include "formats/trace.h"
#include "formats/trace_index.h"

static const drift_cli_opt_spec OPTS[] = {
    {"--repair", NULL, NULL, "once the writer is gone: make a killed writer's file readable for\n"
                             "ordinary HDF5 readers, keeping every committed step (see below)", NULL, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {"--allow-outside", NULL, NULL, "an index may read rank files outside its own folder", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "check",
    "TRACE [--repair] [--json] [--allow-outside]",
    "Validates a drift trace: HDF5 structure, types and sizes of every group,\n"
    "dataset and attribute (docs/format.md), that every record's step has a\n"
    "commit row in /steps, that each commit row's record count matches the\n"
    "sites, that the metrics and notes rows lie in their commit windows, that\n"
    "stored tensors agree with their stats rows, and that params, buffers and\n"
    "the graph read back. Reports the committed steps and records.\n"
    "\n"
    "A file whose writer was killed (or is still writing) is readable only\n"
    "through SWMR: its committed steps are reported and the unclean state is a\n"
    "problem.\n",
    OPTS,
    "TRACE",
    1,
    1,
    "--repair clears the HDF5 superblock status flags and extends the\n"
    "end-of-allocation to the file's end (what `h5clear -s --increment=0` does),\n"
    "then trims rows past the last commit. Ordinary readers (h5dump, h5py) then\n"
    "open the file and see exactly the committed steps. Never run it while a\n"
    "writer is still appending to the file.\n",
    "0 no problems, 1 problems found, 2 bad usage or unreadable trace",
    "check run.h5 --repair"};

static void print_json(const char *path, const drift_trace_check_report *rep, int repaired, int64_t trimmed) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "path", path);
    drift_json_buf_field_bool(&b, "ok", rep->n_problems == 0);
    drift_json_buf_field_bool(&b, "unclean", rep->unclean);
    drift_json_buf_field_string(&b, "ended", rep->ended ? rep->ended : "unknown");
    drift_json_buf_field_bool(&b, "repaired", repaired);
    drift_json_buf_field_int(&b, "trimmed_rows", trimmed);
    drift_json_buf_field_int(&b, "committed_steps", rep->committed_steps);
    if (rep->last_step >= 0) drift_json_buf_field_int(&b, "last_step", rep->last_step);
    else drift_json_buf_field_null(&b, "last_step");
    drift_json_buf_field_int(&b, "committed_records", rep->committed_records);
    drift_json_buf_field_int(&b, "uncommitted_records", rep->uncommitted_records);
    drift_json_buf_field_int(&b, "sites", (int64_t)rep->n_sites);
    drift_json_buf_field_int(&b, "params", (int64_t)rep->n_params);
    drift_json_buf_field_int(&b, "buffers", (int64_t)rep->n_buffers);
    drift_json_buf_field_int(&b, "metric_rows", (int64_t)rep->n_metric_rows);
    drift_json_buf_add_key(&b, "problems");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < rep->n_problems; i++) drift_json_buf_add_string(&b, rep->problems[i]);
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    char *doc = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    if (doc) printf("%s\n", doc);
    free(doc);
}

static void print_text(const char *path, const drift_trace_check_report *rep, int repaired, int64_t trimmed) {
    printf("trace      %s\n", path);
    if (repaired) printf("repaired   status flags cleared, end of allocation set to the file's end, %lld uncommitted rows trimmed\n",
                         (long long)trimmed);
    const char *ended = rep->ended ? rep->ended : "unknown";
    if (!strcmp(ended, "writing")) printf("state      being written (a writer holds its lock; read through SWMR)\n");
    else if (!strcmp(ended, "killed")) printf("state      NOT closed cleanly: its writer was killed (read through SWMR)\n");
    else if (!strcmp(ended, "cut short")) printf("state      cut short (its writer stopped while extending it)\n");
    else if (!strcmp(ended, "failed")) printf("state      closed after a failure (see problems)\n");
    else if (!strcmp(ended, "repaired")) printf("state      closed cleanly by `drift check --repair` (its writer had stopped without closing; every committed step kept)\n");
    else if (!strcmp(ended, "closed")) printf("state      closed cleanly\n");
    else printf("state      %s\n", rep->unclean ? "NOT closed cleanly (read through SWMR)" : "closed, writer state unknown");
    if (rep->committed_steps)
        printf("steps      %lld committed (last step %lld)\n", (long long)rep->committed_steps, (long long)rep->last_step);
    else
        printf("steps      0 committed\n");
    printf("records    %lld committed", (long long)rep->committed_records);
    if (rep->uncommitted_records)
        printf(", %lld past the last commit (invisible to readers)", (long long)rep->uncommitted_records);
    printf("\ncontents   %zu sites, %zu params, %zu buffers, %zu metric rows\n", rep->n_sites, rep->n_params,
           rep->n_buffers, rep->n_metric_rows);
    if (rep->n_problems) {
        printf("problems   %zu\n", rep->n_problems);
        char safe[4096];
        for (size_t i = 0; i < rep->n_problems; i++) printf("  - %s\n", drift_cli_printable(rep->problems[i], safe, sizeof safe));
    }
    printf("result     %s\n", rep->n_problems ? "PROBLEMS FOUND" : "ok");
}

int drift_cmd_check(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    const char *path = a.pos[0];
    int json = drift_cli_args_count(&a, "--json") > 0, repair = drift_cli_args_count(&a, "--repair") > 0;
    if (drift_cli_args_count(&a, "--allow-outside") > 0) drift_trace_index_allow_outside(1);
    drift_cli_args_free(&a);
    if (drift_cli_check_input("check", "TRACE", path)) return 2;
    drift_err err;
    drift_err_clear(&err);
    drift_trace_check_report rep;
    int rc = drift_trace_check(path, &rep, &err);
    if (rc) return drift_cli_report("check", &err);
    int repaired = 0;
    int64_t trimmed = 0;
    if (repair && rep.unclean) {
        int was_short = rep.cut_short; /* not openable before repair: its step count is unknown */
        if (!json && was_short)
            fprintf(stderr, "drift check: %s: before repair: cut short, committed steps unknown; repairing\n", path);
        else if (!json)
            fprintf(stderr, "drift check: %s: before repair: %lld committed steps, not closed cleanly; repairing\n", path,
                    (long long)rep.committed_steps);
        int64_t committed_before = rep.committed_steps;
        drift_trace_check_report_free(&rep);
        rc = drift_trace_repair(path, &trimmed, &err);
        if (rc) return drift_cli_report("check", &err);
        repaired = 1;
        rc = drift_trace_check(path, &rep, &err);
        if (rc) return drift_cli_report("check", &err);
        if (!was_short && rep.committed_steps != committed_before) {
            /* cannot happen: repair keeps every committed step; say so loudly if it does */
            fprintf(stderr, "drift check: %s: %lld committed steps before repair, %lld after\n", path,
                    (long long)committed_before, (long long)rep.committed_steps);
        }
    }
    if (json) print_json(path, &rep, repaired, trimmed);
    else print_text(path, &rep, repaired, trimmed);
    code = rep.n_problems ? 1 : 0;
    drift_trace_check_report_free(&rep);
    return code;
}
