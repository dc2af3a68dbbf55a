/* Recordings of torch.compile'd models (issue 36, docs/recorder.md
 * "Compiled models"): the verdict beside the library verdict, and the
 * compile floor (the recorder's "compile-floor v1" note: the same step's
 * output eager vs compiled) that replay reports divergence in units of. */
#ifndef DRIFT_CLI_COMPILED_OUT_H
#define DRIFT_CLI_COMPILED_OUT_H

#include <stdio.h>

#include "formats/json.h"
#include "formats/libraries.h"
#include "replay/analysis/report.h"

/* The note's prefix and its fields (docs/format.md section 6). */
#define DRIFT_COMPILE_FLOOR_NOTE "compile-floor v1 "

typedef struct drift_compile_floor {
    int known;
    double mean_abs_diff; /* output's mean |eager - compiled| */
    double mean_abs;      /* output's mean |eager| (0 unknown) */
    long long step;
    char site[128];
} drift_compile_floor;

/* Parses one note's text: 1 with *out filled for a well-formed
 * "compile-floor v1 site=S step=N mean_abs_diff=X [mean_abs=Y]", 0 for
 * another note, -1 for a compile-floor note that does not parse. */
int drift_compile_floor_parse(const char *text, drift_compile_floor *out);

/* The last compile-floor note of trace (out->known 0 when none). */
void drift_compile_floor_read(const char *trace, drift_compile_floor *out);

/* The first divergent site of the report's first step that has one, or NULL. */
const char *drift_cli_first_divergent(const drift_replay_report *rep);

/* Text: "<indent>compiled: <message>" when rec ran compiled code; then,
 * when the floor is known, the floor and, with the report's output metrics,
 * the replay's divergence in units of it. rep may be NULL. */
void drift_cli_compiled_text(FILE *f, const char *indent, const drift_libraries *rec, const drift_replay_report *rep,
                             const drift_compile_floor *fl);

/* JSON: key "compiled": null, or {"message", "first_site", "inductor_mode",
 * "modules", "compile_floor": null | {"site", "step", "mean_abs_diff",
 * "mean_abs", "units"}} ("units": this output's mean |diff| / the floor). */
void drift_cli_compiled_json(drift_json_buf *b, const drift_libraries *rec, const drift_replay_report *rep,
                             const drift_compile_floor *fl);

#endif
