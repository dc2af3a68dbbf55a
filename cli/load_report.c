/* drift replay's setup line (load_report.h). */
#include "cli/load_report.h"

#include <stdio.h>
#include <stdlib.h>

#include "replay/exec/memplan.h" /* drift_memplan_bytes */

void drift_cli_print_load(const char *cmd, const drift_replay_report *rep) {
    const char *pe = getenv("DRIFT_REPLAY_PROFILE");
    int prof = pe && pe[0] == '1';
    const drift_load_report *l = &rep->load;
    if (!l->by_reference && !prof) return;
    fprintf(stderr, "drift %s: setup %.3f s: ", cmd, rep->setup_seconds);
    if (l->by_reference && l->overlapped) {
        /* the whole pipeline's rate: the tensors were cast and uploaded while the rest were read */
        double gb = (double)l->bytes / 1e9, ps = l->pipeline_seconds;
        fprintf(stderr, "read+cast+upload %zu tensors, %.4g GB by reference from %zu file%s in %.3f s (%.2f GB/s overlapped, "
                "%d reader thread%s, hashes checked; the reads ended after %.3f s)",
                l->tensors, gb, l->files, l->files == 1 ? "" : "s", ps, ps > 0 ? gb / ps : 0.0, l->threads,
                l->threads == 1 ? "" : "s", l->seconds);
        if (l->baseline_seconds > 0)
            fprintf(stderr, "; a plain sequential read of the same files: %.4g GB in %.3f s, %.2f GB/s",
                    (double)l->baseline_bytes / 1e9, l->baseline_seconds,
                    (double)l->baseline_bytes / 1e9 / l->baseline_seconds);
        fprintf(stderr, "; ");
    } else if (l->overlapped) { /* by value: one HDF5 reader thread */
        double gb = (double)l->bytes / 1e9, ps = l->pipeline_seconds;
        fprintf(stderr, "read+cast+upload %zu tensors, %.4g GB (fp32) from the trace's /params in %.3f s (%.2f GB/s "
                "overlapped, 1 reader thread; the reads ended after %.3f s); ", l->tensors, gb, ps, ps > 0 ? gb / ps : 0.0,
                l->seconds);
    } else if (l->by_reference) {
        double gb = (double)l->bytes / 1e9;
        fprintf(stderr, "read %zu tensors, %.4g GB by reference from %zu file%s in %.3f s (%.2f GB/s, %d thread%s, hashes checked",
                l->tensors, gb, l->files, l->files == 1 ? "" : "s", l->seconds, l->seconds > 0 ? gb / l->seconds : 0.0,
                l->threads, l->threads == 1 ? "" : "s");
        if (l->baseline_seconds > 0)
            fprintf(stderr, "; a plain sequential read of the same files: %.4g GB in %.3f s, %.2f GB/s",
                    (double)l->baseline_bytes / 1e9, l->baseline_seconds,
                    (double)l->baseline_bytes / 1e9 / l->baseline_seconds);
        fprintf(stderr, "); ");
    } else {
        fprintf(stderr, "parameters from the trace's /params; ");
    }
    if (!l->overlapped) fprintf(stderr, "cast+upload %.3f s; ", rep->warm_seconds);
    fprintf(stderr, "forward %lld step%s in %.3f s", (long long)rep->n_steps, rep->n_steps == 1 ? "" : "s",
            rep->steps_seconds);
    char a[32], b[32];
    if (rep->mem_planned && rep->mem_on_gpu)
        fprintf(stderr, "; GPU memory planned %s", drift_memplan_bytes(rep->mem_gpu_planned, a, sizeof a));
    if (rep->gpu_peak_used >= 0) fprintf(stderr, ", peak in use %s", drift_memplan_bytes(rep->gpu_peak_used, b, sizeof b));
    if (rep->mem_planned && rep->mem_host_planned > 0)
        fprintf(stderr, "; host memory planned %s", drift_memplan_bytes(rep->mem_host_planned, a, sizeof a));
    fputc('\n', stderr);
}
