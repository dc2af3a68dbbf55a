/* drift ls: what a trace holds (root attributes, steps, sites, params,
 * buffers, graph, metrics), as text or one JSON document. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/libraries_out.h"
#include "cli/commands.h"
#include "formats/alloc.h"
#include "formats/census.h" /* intercept census */
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_summary.h"
#include "formats/json.h"
#include "formats/trace.h"
#include "formats/trace_index.h" /* drift merge index */

static const char *const FORMAT_CHOICES[] = {"text", "csv", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--format", NULL, "F", "text (default), or csv: the sites table alone (one rank of an index)", FORMAT_CHOICES, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {"--allow-outside", NULL, NULL, "an index may read rank files outside its own folder", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "ls",
    "TRACE [--format text|csv] [--json] [--allow-outside]",
    "Lists what a drift trace (HDF5, schema v1) holds: its root attributes (side,\n"
    "run id, rank/world size, model family, guidance scale, plan, producer,\n"
    "creation time), the committed steps, every site with dtype, per-record shape\n"
    "and committed record count, the parameters (fp32 masters, shards with offset\n"
    "and full shape, and the dtype each had in the forward), buffers, the graph\n"
    "and the metrics tables. Only committed steps count. A trace whose writer is\n"
    "still running or was killed is read through SWMR (see drift check --repair).\n"
    "A census written by libdrift_intercept.so (docs/intercept.md) is listed as\n"
    "two tables: GEMMs (range, api, dtypes, compute type, shape, calls) and\n"
    "collectives (range, op, dtype, count, calls); JSON key \"census\" (null if none).\n"
    "\n"
    "A drift merge index is listed rank by rank: INDEX lists every rank it holds\n"
    "(JSON: {\"format\": \"drift-index\", ..., \"ranks\": [one listing per rank]}),\n"
    "INDEX#rank=N only rank N's view (as every other command reads it).\n",
    OPTS,
    "TRACE",
    1,
    1,
    NULL,
    "0 listed, 2 bad usage or unreadable trace",
    "ls run.h5 --json"};

/* Text from the file, safe for the terminal (control characters escaped). */
#define P(s, buf) drift_cli_printable((s), (buf), sizeof(buf))

static const char *compress_name(drift_trace_compress c) {
    return c == DRIFT_TRACE_COMPRESS_DEFLATE ? "deflate" : c == DRIFT_TRACE_COMPRESS_BLOSC ? "blosc" : "none";
}

static void shape_str(char *buf, size_t sz, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, sz - o, "[");
    for (int d = 0; d < ndim && o < sz; d++) o += (size_t)snprintf(buf + o, sz - o, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (o < sz) snprintf(buf + o, sz - o, "]");
}

static void json_shape(drift_json_buf *b, const char *key, int ndim, const int64_t *shape) {
    drift_json_buf_add_key(b, key);
    drift_json_buf_begin_array(b);
    for (int d = 0; d < ndim; d++) drift_json_buf_add_int(b, shape[d]);
    drift_json_buf_end_array(b);
}

typedef struct ls_counts {
    int64_t metric_rows, step_metric_rows, notes;
    size_t graph_bytes;
    const char *graph;          /* the /graph JSON (borrowed), NULL if none */
    const drift_census *census; /* intercept census, NULL if none (borrowed) */
    const drift_trace_step_graph *sg; /* the graph of each committed step (borrowed) */
    size_t n_sg;
} ls_counts;

/* Steps that do not use /graph (docs/format.md 9.1): their own graph, or none. */
static int own_graphs(const ls_counts *c, int64_t *n_graphs) {
    int n = 0;
    *n_graphs = 0;
    for (size_t i = 0; i < c->n_sg; i++) {
        n += c->sg[i].graph != 0;
        if (c->sg[i].graph > *n_graphs) *n_graphs = c->sg[i].graph;
    }
    return n;
}

static int list_json(drift_trace_reader *r, const ls_counts *c, drift_err *err) {
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "path", drift_trace_reader_path(r));
    drift_json_buf_field_string(&b, "format", DRIFT_TRACE_FORMAT_NAME);
    drift_json_buf_field_int(&b, "format_version", m->format_version);
    drift_json_buf_field_string(&b, "side", drift_trace_side_name(m->side));
    drift_json_buf_field_string(&b, "run_id", m->run_id);
    drift_json_buf_field_int(&b, "rank", m->rank);
    drift_json_buf_field_int(&b, "world_size", m->world_size);
    drift_json_buf_field_string(&b, "family", m->family);
    drift_json_buf_field_number(&b, "guidance_scale", m->guidance_scale);
    /* the plan as JSON when it parses, else as the string it is */
    drift_json_value *plan = NULL;
    drift_err perr;
    drift_err_clear(&perr);
    drift_json_buf_add_key(&b, "plan");
    if (m->plan_json[0] && drift_json_parse(m->plan_json, strlen(m->plan_json), "plan", &plan, &perr) == DRIFT_OK)
        drift_json_buf_add_raw(&b, m->plan_json);
    else if (m->plan_json[0])
        drift_json_buf_add_string(&b, m->plan_json);
    else
        drift_json_buf_add_null(&b);
    drift_json_free(plan);
    drift_json_buf_field_string(&b, "producer", m->producer);
    drift_json_buf_field_string(&b, "created", m->created);
    drift_json_buf_field_bool(&b, "unclean", drift_trace_reader_unclean(r));
    drift_json_buf_field_string(&b, "ended", drift_trace_reader_ended(r));
    if (drift_trace_reader_status(r)) drift_json_buf_field_string(&b, "status", drift_trace_reader_status(r));
    else drift_json_buf_field_null(&b, "status");
    drift_libraries libs;
    int has_libs = 0;
    int lrc = drift_trace_read_libraries(r, &libs, &has_libs, err);
    if (lrc) {
        drift_json_buf_free(&b);
        return lrc;
    }
    drift_json_buf_add_key(&b, "libraries");
    drift_cli_json_libraries(&b, has_libs ? &libs : NULL);
    drift_json_buf_field_bool(&b, "from_torch", drift_libraries_from_torch(m->producer, has_libs ? &libs : NULL));

    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &ns);
    drift_json_buf_add_key(&b, "steps");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_int(&b, "committed", (int64_t)ns);
    if (ns) {
        drift_json_buf_field_int(&b, "first", st[0].step);
        drift_json_buf_field_int(&b, "last", st[ns - 1].step);
    } else {
        drift_json_buf_field_null(&b, "first");
        drift_json_buf_field_null(&b, "last");
    }
    drift_json_buf_end_object(&b);

    int rc = DRIFT_OK;
    drift_json_buf_add_key(&b, "sites");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < drift_trace_reader_n_sites(r) && !rc; i++) {
        drift_trace_site_info si;
        if ((rc = drift_trace_reader_site(r, i, &si, err))) break;
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", si.name);
        drift_json_buf_field_int(&b, "id", si.id);
        drift_json_buf_field_string(&b, "dtype", drift_dtype_name(si.dtype));
        json_shape(&b, "shape", si.ndim, si.shape);
        drift_json_buf_field_int(&b, "records", si.n_records);
        drift_json_buf_field_bool(&b, "tensors", si.has_data);
        drift_json_buf_field_string(&b, "compression", compress_name(si.compress));
        if (si.damaged) drift_json_buf_field_string(&b, "damaged", si.damaged); /* unreadable site */
        else drift_json_buf_field_null(&b, "damaged");
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);

    drift_json_buf_add_key(&b, "params");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < drift_trace_reader_n_params(r); i++) {
        drift_trace_param_info p;
        drift_trace_reader_param(r, i, &p);
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "fqn", p.fqn);
        json_shape(&b, "shape", p.ndim, p.shape);
        json_shape(&b, "offset", p.ndim, p.offset);
        json_shape(&b, "full_shape", p.ndim, p.full_shape);
        drift_dtype fd = drift_trace_reader_find_param_dtype(r, p.fqn);
        if (fd == DRIFT_DTYPE_INVALID) drift_json_buf_field_null(&b, "forward_dtype");
        else drift_json_buf_field_string(&b, "forward_dtype", drift_dtype_name(fd));
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "param_dtypes");
    drift_json_buf_begin_object(&b);
    for (size_t i = 0; i < drift_trace_reader_n_param_dtypes(r); i++) {
        const char *fqn = NULL;
        drift_dtype dt = DRIFT_DTYPE_INVALID;
        drift_trace_reader_param_dtype(r, i, &fqn, &dt);
        drift_json_buf_field_string(&b, fqn, drift_dtype_name(dt));
    }
    drift_json_buf_end_object(&b);

    drift_json_buf_add_key(&b, "buffers");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < drift_trace_reader_n_buffers(r); i++) {
        drift_trace_buffer_info bi;
        drift_trace_reader_buffer(r, i, &bi);
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", bi.name);
        drift_json_buf_field_string(&b, "dtype", drift_dtype_name(bi.dtype));
        json_shape(&b, "shape", bi.ndim, bi.shape);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_field_int(&b, "graph_bytes", (int64_t)c->graph_bytes);
    drift_json_buf_add_key(&b, "captured_graph"); /* a torch.export graph (replay/capture), else null */
    if (c->graph && drift_aten_graph_sniff(c->graph, c->graph_bytes)) {
        drift_err ge; /* a graph that does not parse is listed as null (drift check names the problem) */
        drift_err_clear(&ge);
        if (drift_capture_summary_json(&b, c->graph, c->graph_bytes, "/graph", drift_trace_reader_meta(r)->plan_json, r, &ge))
            drift_json_buf_add_null(&b);
    } else {
        drift_json_buf_add_null(&b);
    }
    drift_json_buf_add_key(&b, "step_graphs"); /* steps that do not use /graph: graph k of /graph_steps, -1 none */
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < c->n_sg; i++) {
        if (!c->sg[i].graph) continue;
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_int(&b, "step", c->sg[i].step);
        drift_json_buf_field_int(&b, "graph", c->sg[i].graph);
        if (c->sg[i].graph < 0) drift_json_buf_field_string(&b, "reason", c->sg[i].reason);
        else drift_json_buf_field_int(&b, "bytes", c->sg[i].length);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "metrics");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_int(&b, "rows", c->metric_rows);
    drift_json_buf_field_int(&b, "sites", (int64_t)drift_trace_reader_n_metric_sites(r));
    drift_json_buf_field_int(&b, "step_rows", c->step_metric_rows);
    drift_json_buf_end_object(&b);
    drift_json_buf_field_int(&b, "notes", c->notes);
    drift_json_buf_add_key(&b, "census"); /* intercept census */
    drift_census_json(&b, c->census);
    drift_json_buf_end_object(&b);
    char *doc = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    if (rc) {
        free(doc);
        return rc;
    }
    if (!doc) return drift_err_set(err, DRIFT_E_NOMEM, NULL, "cannot build the JSON document");
    fputs(doc, stdout);
    fputc('\n', stdout);
    free(doc);
    return DRIFT_OK;
}

static int list_text(drift_trace_reader *r, const ls_counts *c, drift_err *err) {
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    char e1[1024], e2[1024], e3[4096], e4[256];
    printf("trace     %s\n", drift_trace_reader_path(r));
    const char *ended = drift_trace_reader_ended(r);
    printf("format    %s v%d, %s\n", DRIFT_TRACE_FORMAT_NAME, m->format_version,
           !strcmp(ended, "writing")  ? "being written (read through SWMR: committed steps only)"
           : !strcmp(ended, "killed") ? "NOT closed cleanly: writer killed (read through SWMR: committed steps only)"
           : !strcmp(ended, "failed") ? "closed after a failure (status below)"
           : !strcmp(ended, "repaired") ? "closed cleanly by `drift check --repair` after its writer stopped without closing (status below)"
           : !strcmp(ended, "closed") ? "closed cleanly"
                                      : "closed, writer state unknown (no /status)");
    printf("side      %s   run %s   rank %d of %d\n", drift_trace_side_name(m->side), P(m->run_id, e1), (int)m->rank,
           (int)m->world_size);
    printf("family    %s   guidance scale %g\n", m->family[0] ? P(m->family, e3) : "-", m->guidance_scale);
    printf("producer  %s   created %s\n", P(m->producer, e2), P(m->created, e4));
    if (m->plan_json[0]) {
        char *pl = drift_malloc(strlen(m->plan_json) * 4 + 8); /* every byte may become \xNN */
        printf("plan      %s\n", pl ? drift_cli_printable(m->plan_json, pl, strlen(m->plan_json) * 4 + 8) : "?");
        drift_free(pl);
    } else {
        printf("plan      -\n");
    }
    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &ns);
    if (ns) printf("steps     %zu committed (step %lld .. %lld)\n", ns, (long long)st[0].step, (long long)st[ns - 1].step);
    else printf("steps     0 committed\n");
    const char *status = drift_trace_reader_status(r); /* the writer's own last word (NULL: older trace) */
    /* a killed writer's last word is "recording": say what became of it (the lock is free) */
    if (status && !strcmp(ended, "killed") && !strcmp(status, "recording"))
        printf("status    stopped without closing (its writer was killed while recording)\n");
    else if (status && !strcmp(ended, "writing"))
        printf("status    %s (its writer holds the lock: still writing)\n", P(status, e3));
    else if (status)
        printf("status    %s\n", P(status, e3));
    drift_libraries libs;
    int has_libs = 0, lrc = drift_trace_read_libraries(r, &libs, &has_libs, err);
    if (lrc) return lrc;
    if (has_libs) drift_cli_text_libraries(stdout, "", "libraries ", &libs);
    else printf("libraries - (no GPU and library identity recorded)\n");

    size_t n = drift_trace_reader_n_sites(r);
    printf("\nsites (%zu)\n", n);
    if (n) printf("  %-40s %-5s %-16s %8s  %s\n", "NAME", "DTYPE", "SHAPE", "RECORDS", "STORED");
    for (size_t i = 0; i < n; i++) {
        drift_trace_site_info si;
        int rc = drift_trace_reader_site(r, i, &si, err);
        if (rc) return rc;
        char shp[128];
        shape_str(shp, sizeof shp, si.ndim, si.shape);
        if (si.damaged) { /* listed, but its records cannot be read (drift check reports it) */
            printf("  %-40s %-5s %-16s %8s  DAMAGED: %s\n", P(si.name, e1), drift_dtype_name(si.dtype), shp, "-",
                   P(si.damaged, e3));
            continue;
        }
        printf("  %-40s %-5s %-16s %8lld  %s%s%s\n", P(si.name, e1), drift_dtype_name(si.dtype), shp, (long long)si.n_records,
               si.has_data ? "tensors" : "stats only", si.compress ? ", " : "", si.compress ? compress_name(si.compress) : "");
    }
    n = drift_trace_reader_n_params(r);
    printf("\nparams (%zu)\n", n);
    for (size_t i = 0; i < n; i++) {
        drift_trace_param_info p;
        drift_trace_reader_param(r, i, &p);
        char shp[128], off[128], full[128];
        shape_str(shp, sizeof shp, p.ndim, p.shape);
        drift_dtype fd = drift_trace_reader_find_param_dtype(r, p.fqn);
        printf("  %-48s fp32 %-16s", P(p.fqn, e1), shp);
        if (p.is_shard) {
            shape_str(off, sizeof off, p.ndim, p.offset);
            shape_str(full, sizeof full, p.ndim, p.full_shape);
            printf(" shard at %s of %s", off, full);
        }
        printf("  forward %s\n", fd == DRIFT_DTYPE_INVALID ? "-" : drift_dtype_name(fd));
    }
    size_t npd = drift_trace_reader_n_param_dtypes(r);
    for (size_t i = 0; i < npd; i++) {
        const char *fqn = NULL;
        drift_dtype dt = DRIFT_DTYPE_INVALID;
        drift_trace_reader_param_dtype(r, i, &fqn, &dt);
        if (drift_trace_reader_find_param(r, fqn) < 0)
            printf("  %-48s (no values)            forward %s\n", P(fqn, e1), drift_dtype_name(dt));
    }
    n = drift_trace_reader_n_buffers(r);
    printf("\nbuffers (%zu)\n", n);
    for (size_t i = 0; i < n; i++) {
        drift_trace_buffer_info bi;
        drift_trace_reader_buffer(r, i, &bi);
        char shp[128];
        shape_str(shp, sizeof shp, bi.ndim, bi.shape);
        printf("  %-48s %-4s %s\n", P(bi.name, e1), drift_dtype_name(bi.dtype), shp);
    }
    printf("\ngraph     %s", c->graph_bytes ? "" : "none\n");
    if (c->graph_bytes) printf("%zu bytes of JSON\n", c->graph_bytes);
    if (c->graph && drift_aten_graph_sniff(c->graph, c->graph_bytes)) { /* a captured torch.export graph */
        drift_err ge;
        drift_err_clear(&ge);
        if (drift_capture_summary_print(stdout, c->graph, c->graph_bytes, "/graph", m->plan_json, r, &ge))
            printf("  captured graph does not parse: %s\n", ge.msg);
    }
    int64_t ng = 0;
    if (own_graphs(c, &ng)) { /* per-step graphs (docs/format.md 9.1) */
        printf("          steps with a graph of their own (/graph_steps, %lld graphs):", (long long)ng);
        for (size_t i = 0, k = 0; i < c->n_sg; i++) {
            if (!c->sg[i].graph) continue;
            if (k++ == 12) { printf(" ..."); break; }
            if (c->sg[i].graph > 0) printf(" %lld:%lld", (long long)c->sg[i].step, (long long)c->sg[i].graph);
            else printf(" %lld:none", (long long)c->sg[i].step);
        }
        printf("\n");
        for (size_t i = 0; i < c->n_sg; i++)
            if (c->sg[i].graph < 0)
                printf("          step %lld has no graph: %s\n", (long long)c->sg[i].step, P(c->sg[i].reason, e1));
    }
    printf("metrics   %lld rows over %zu sites, %lld per-step rows\n", (long long)c->metric_rows,
           drift_trace_reader_n_metric_sites(r), (long long)c->step_metric_rows);
    printf("notes     %lld\n", (long long)c->notes);
    if (c->census) { /* intercept census */
        printf("\n");
        drift_census_print(stdout, c->census);
    }
    return DRIFT_OK;
}

/* ---- drift merge index: every rank, each listed as its own trace ---------- */
static void json_str_out(const char *s) {
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_add_string(&b, s);
    char *q = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    fputs(q ? q : "null", stdout);
    free(q);
}

/* One CSV field, quoted (site names may hold ',' or '"' in a stranger's file). */
static void csv_str(const char *v) {
    char safe[3 * 4096];
    putchar('"');
    for (const char *p = drift_cli_printable(v, safe, sizeof safe); *p; p++) { /* controls as \xNN */
        if (*p == '"') putchar('"');
        putchar(*p);
    }
    putchar('"');
}

/* --format csv: the sites table, one row per site in the trace's order. */
static int list_csv(drift_trace_reader *r, drift_err *err) {
    printf("site,dtype,shape,records,stored,compress,damaged\n");
    size_t n = drift_trace_reader_n_sites(r);
    for (size_t i = 0; i < n; i++) {
        drift_trace_site_info si;
        int rc = drift_trace_reader_site(r, i, &si, err);
        if (rc) return rc;
        char shp[128];
        shape_str(shp, sizeof shp, si.ndim, si.shape);
        csv_str(si.name);
        printf(",%s,", drift_dtype_name(si.dtype));
        csv_str(shp);
        if (si.damaged) printf(",,,,");
        else printf(",%lld,%s,%s,", (long long)si.n_records, si.has_data ? "tensors" : "stats only",
                    si.compress ? compress_name(si.compress) : "none");
        if (si.damaged) csv_str(si.damaged);
        putchar('\n');
    }
    return DRIFT_OK;
}

static int ls_index(const char *path, int json) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_index_info ix;
    if (drift_trace_index_info_read(path, &ix, &err)) return drift_cli_report("ls", &err);
    int rc = 0;
    char **views = calloc(ix.n_ranks ? ix.n_ranks : 1, sizeof *views);
    if (!views) {
        drift_trace_index_info_free(&ix);
        fprintf(stderr, "drift ls: out of memory\n");
        return 2;
    }
    for (size_t i = 0; i < ix.n_ranks && !rc; i++) {
        size_t l = strlen(path) + 32;
        drift_trace_reader *r = NULL;
        if (!(views[i] = malloc(l))) {
            fprintf(stderr, "drift ls: out of memory\n");
            rc = 2;
            break;
        }
        snprintf(views[i], l, "%s%s%d", path, DRIFT_TRACE_INDEX_RANK_SUFFIX, (int)ix.ranks[i]);
        /* every view opens (its rank file is there and unchanged) before anything is printed */
        if (drift_trace_reader_open(&r, views[i], DRIFT_TRACE_OPEN_NORMAL, &err)) rc = drift_cli_report("ls", &err);
        drift_trace_reader_close(r);
    }
    if (!rc && json) {
        printf("{\n  \"path\": ");
        json_str_out(path);
        printf(",\n  \"format\": \"%s\",\n  \"index_version\": %d,\n  \"format_version\": %d,\n  \"run_id\": ",
               DRIFT_TRACE_INDEX_FORMAT_NAME, DRIFT_TRACE_INDEX_VERSION, ix.format_version);
        json_str_out(ix.run_id);
        printf(",\n  \"side\": ");
        json_str_out(ix.side);
        printf(",\n  \"world_size\": %d,\n  \"created\": ", (int)ix.world_size);
        json_str_out(ix.created);
        printf(",\n  \"snapshot\": true,\n  \"missing_ranks\": [");
        for (size_t i = 0; i < ix.n_missing; i++) printf("%s%d", i ? ", " : "", (int)ix.missing[i]);
        printf("],\n  \"sources\": {");
        for (size_t i = 0; i < ix.n_ranks; i++) {
            printf("%s\"%d\": ", i ? ", " : "", (int)ix.ranks[i]);
            json_str_out(ix.sources[i]);
        }
        printf("},\n  \"ranks\": [\n");
    } else if (!rc) {
        printf("index     %s\n", path);
        printf("format    %s v%d over %s v%d rank traces (a snapshot: re-run drift merge to refresh)\n",
               DRIFT_TRACE_INDEX_FORMAT_NAME, DRIFT_TRACE_INDEX_VERSION, DRIFT_TRACE_FORMAT_NAME, ix.format_version);
        char x1[1024], x2[256], x3[256];
        printf("run       %s   side %s   world size %d   merged %s\n", P(ix.run_id, x1), P(ix.side, x2),
               (int)ix.world_size, P(ix.created, x3));
        printf("ranks     %zu present", ix.n_ranks);
        if (ix.n_missing) {
            printf(", %zu missing:", ix.n_missing);
            for (size_t i = 0; i < ix.n_missing && i < 64; i++) printf(" %d", (int)ix.missing[i]);
            if (ix.n_missing > 64) printf(" ...");
        }
        printf("\n");
        for (size_t i = 0; i < ix.n_ranks; i++) printf("  rank %-5d %s\n", (int)ix.ranks[i], P(ix.resolved[i], x1));
    }
    for (size_t i = 0; i < ix.n_ranks && !rc; i++) {
        if (!json) printf("\n== rank %d: %s ==\n", (int)ix.ranks[i], views[i]);
        else if (i) printf(",\n");
        fflush(stdout);
        char *av[3] = {"ls", views[i], "--json"};
        rc = drift_cmd_ls(json ? 3 : 2, av);
        fflush(stdout);
    }
    if (!rc && json) printf("]\n}\n");
    for (size_t i = 0; i < ix.n_ranks; i++) free(views[i]);
    free(views);
    drift_trace_index_info_free(&ix);
    return rc;
}
/* ---- end drift merge index -------------------------------------------------- */

int drift_cmd_ls(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    const char *path = a.pos[0];
    int json = drift_cli_args_count(&a, "--json") > 0;
    const char *format = drift_cli_args_get(&a, "--format");
    int csv = format && strcmp(format, "csv") == 0;
    if (drift_cli_args_count(&a, "--allow-outside") > 0) drift_trace_index_allow_outside(1);
    if (json && csv) {
        drift_cli_args_free(&a);
        return drift_cli_usage_error_field("ls", "--format", "--format csv and --json: give one");
    }
    drift_cli_args_free(&a);
    if (drift_cli_check_input("ls", "TRACE", path)) return 2;
    if (csv) { /* one table: the sites of the trace (an index: its lowest rank, or INDEX#rank=N) */
        drift_err err;
        drift_err_clear(&err);
        drift_trace_reader *r = NULL;
        int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err);
        if (!rc) rc = list_csv(r, &err);
        drift_trace_reader_close(r);
        return rc ? drift_cli_report("ls", &err) : 0;
    }
    if (drift_trace_index_is(path)) return ls_index(path, json); /* drift merge index */
    drift_err err;
    drift_err_clear(&err);
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err);
    if (rc) return drift_cli_report("ls", &err);
    ls_counts c;
    memset(&c, 0, sizeof c);
    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &ns);
    if (ns) {
        c.metric_rows = st[ns - 1].metrics_rows;
        c.step_metric_rows = st[ns - 1].step_metrics_rows;
        c.notes = st[ns - 1].notes_rows;
    }
    char *g = NULL;
    rc = drift_trace_read_graph(r, &g, &c.graph_bytes, &err);
    c.graph = g;
    drift_census *census = NULL; /* intercept census */
    if (!rc) rc = drift_census_read(r, &census, &err);
    c.census = census;
    drift_trace_step_graph *sg = NULL;
    if (!rc) rc = drift_trace_read_step_graphs(r, &sg, &c.n_sg, &err);
    c.sg = sg;
    if (!rc) rc = json ? list_json(r, &c, &err) : list_text(r, &c, &err);
    free(sg);
    drift_census_free(census);
    free(g);
    drift_trace_reader_close(r);
    if (rc) return drift_cli_report("ls", &err);
    return 0;
}
