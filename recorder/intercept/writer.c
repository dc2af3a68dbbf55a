/* libdrift_intercept_writer.so: turns the interposer's census snapshot into
 * a drift trace with formats/census.c (HDF5). Loaded only at flush. */
#include <stdio.h>

#include "formats/census.h"
#include "recorder/intercept/writer_api.h"

int drift_intercept_write_census(const char *path, const drift_census *c, const char *run_id, char *err,
                                 size_t errsz) {
    if (err && errsz) err[0] = '\0';
    if (!path || !c) {
        if (err && errsz) snprintf(err, errsz, "NULL argument");
        return -1;
    }
    drift_trace_meta meta = {0};
    meta.format_version = DRIFT_TRACE_FORMAT_VERSION;
    meta.side = DRIFT_TRACE_SIDE_TRAINER;
    meta.run_id = run_id ? run_id : "";
    /* the trace needs 0 <= rank < world_size; without torchrun's variables
     * the census attributes keep -1 and the trace says rank 0 of 1 */
    meta.world_size = c->info.world_size >= 1 ? c->info.world_size : 1;
    meta.rank = c->info.rank >= 0 && c->info.rank < meta.world_size ? c->info.rank : 0;
    meta.family = "";
    meta.guidance_scale = 1.0;
    meta.plan_json = "";
    meta.producer = "drift-intercept " DRIFT_VERSION;
    drift_err e;
    drift_err_clear(&e);
    if (drift_census_write_trace(path, &meta, c, &e) != DRIFT_OK) {
        if (err && errsz) drift_err_format(&e, err, errsz);
        return -1;
    }
    return 0;
}
