/* Test helper (header only): one stored record of a trace's site. */
#ifndef DRIFT_TESTS_TRACE_RECORDS_H
#define DRIFT_TESTS_TRACE_RECORDS_H

#include <stdint.h>
#include <stdlib.h>

#include "formats/trace.h"

/* The record of site at step, widened to fp32 (caller frees), its site's
 * description in *info; NULL if the site, the step's stored record or
 * memory is missing, or the read fails. */
static inline float *test_read_at(drift_trace_reader *r, const char *site, int64_t step, drift_trace_site_info *info) {
    drift_err e;
    drift_err_clear(&e);
    long id = drift_trace_reader_find_site(r, site);
    if (id < 0 || drift_trace_reader_site(r, (size_t)id, info, &e)) return NULL;
    drift_trace_index *rows = calloc((size_t)info->n_records + 1, sizeof *rows);
    int64_t rec = -1;
    if (rows && !drift_trace_read_index(r, (size_t)id, 0, info->n_records, rows, &e))
        for (int64_t i = 0; i < info->n_records && rec < 0; i++)
            if (rows[i].stored && rows[i].step == step) rec = i;
    free(rows);
    if (rec < 0) return NULL;
    float *v = malloc((size_t)info->numel * sizeof *v);
    if (v && drift_trace_read_record_f32(r, (size_t)id, rec, v, (size_t)info->numel, &e)) {
        free(v);
        return NULL;
    }
    return v;
}

#endif
