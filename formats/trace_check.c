/* drift check / --repair: deep validation of a trace and recovery of a file
 * whose SWMR writer was killed. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include "formats/alloc.h"
#include "formats/params_ref.h"
#include "formats/json.h"
#include "formats/trace_internal.h"

/* Superblock v2/v3 "file consistency flags" (byte 11 after the signature):
 * bit 0 write access, bit 2 SWMR-write access. The signature sits at 0, 512,
 * 1024, 2048... Returns 1 if found (version and flags filled), else 0. */
static int superblock_flags(const char *path, int *version, int *flags) {
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    int found = 0;
    for (long off = 0; off <= (1L << 30) && !found; off = off ? off * 2 : 512) {
        unsigned char b[12];
        if (fseek(fp, off, SEEK_SET) != 0 || fread(b, 1, sizeof b, fp) != sizeof b) break;
        if (memcmp(b, sig, 8) == 0) {
            *version = b[8];
            *flags = b[8] >= 2 ? b[11] : 0;
            found = 1;
        }
    }
    fclose(fp);
    return found;
}

/* The end-of-file address stored in a version 2/3 superblock at offset 0
 * (8-byte offsets), or -1. */
static int64_t superblock_eof(const char *path) {
    unsigned char b[36];
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    size_t n = fread(b, 1, sizeof b, fp);
    fclose(fp);
    if (n != sizeof b || memcmp(b, "\x89HDF\r\n\x1a\n", 8) != 0 || (b[8] != 2 && b[8] != 3) || b[9] != 8) return -1;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[28 + i];
    return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
}

int tr_short_file(const char *path, int64_t *size, int64_t *eof) {
    struct stat st;
    int64_t e = superblock_eof(path);
    if (e < 0 || stat(path, &st) != 0 || (int64_t)st.st_size >= e) return 0;
    *size = (int64_t)st.st_size;
    *eof = e;
    return 1;
}

/* A file whose writer hit EFBIG/ENOSPC while extending it: HDF5 closed it
 * with clean status flags but the file is shorter than its stored end of
 * file, and ordinary opens fail with "truncated file". Everything committed
 * lies below the actual size; extending the file (sparse zeros) to the stored
 * end makes it openable, as `h5clear --increment` does. Bounded: at most
 * 1 GiB of extension, so a hostile superblock cannot make us grow a file
 * without limit. Returns 1 if it extended the file. */
static int extend_short_file(const char *path) {
    struct stat st;
    int64_t eof = superblock_eof(path);
    if (eof < 0 || stat(path, &st) != 0 || (int64_t)st.st_size >= eof) return 0;
    if (eof - (int64_t)st.st_size > ((int64_t)1 << 30)) return 0;
    return truncate(path, (off_t)eof) == 0;
}

/* Set when an allocation of the check failed (a problem could not be
 * recorded, a scan buffer could not be had): drift_trace_check then returns
 * DRIFT_E_NOMEM instead of a report that silently misses something. One
 * check per thread at a time. */
static _Thread_local int check_nomem;

static void problem(drift_trace_check_report *rep, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(drift_trace_check_report *rep, const char *fmt, ...) {
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (rep->n_problems >= 1000) return; /* enough to act on */
    char **np = drift_realloc(rep->problems, (rep->n_problems + 1) * sizeof *np);
    if (!np) {
        check_nomem = 1;
        return;
    }
    rep->problems = np;
    char *s = drift_strdup(rep->n_problems == 999 ? "(further problems not listed)" : buf);
    if (s) rep->problems[rep->n_problems++] = s;
    else check_nomem = 1;
}

/* A failed read as a problem; an allocation failure is not one. */
static void problem_err(drift_trace_check_report *rep, const drift_err *e) {
    if (e->code == DRIFT_E_NOMEM) check_nomem = 1;
    else problem(rep, "%s: %s", e->where, e->msg);
}

void drift_trace_check_report_free(drift_trace_check_report *rep) {
    if (!rep) return;
    for (size_t i = 0; i < rep->n_problems; i++) free(rep->problems[i]);
    free(rep->problems);
    memset(rep, 0, sizeof *rep);
}

static long step_pos(const drift_trace_reader *r, int64_t step) {
    size_t lo = 0, hi = r->n_steps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->stp[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return (lo < r->n_steps && r->stp[lo].step == step) ? (long)lo : -1;
}

static int same_double(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Sums may be accumulated in another order by other writers (numpy's
 * pairwise sums, a GPU reduction): agree to 1e-9 relative. */
static int close_double(double a, double b) {
    if (same_double(a, b)) return 1;
    if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) return 0;
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

/* Index scan of one site: steps committed and ordered, per-step counts,
 * stats plausible, stored tensors consistent with their stats rows. */
static void check_site(drift_trace_reader *r, size_t i, int64_t *per_step, drift_trace_check_report *rep) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_site_info si;
    if (drift_trace_reader_site(r, i, &si, &e)) {
        problem_err(rep, &e);
        return;
    }
    tr_site *s = &r->sites[i];
    if (s->damaged) {
        problem(rep,
                "site \"%s\" is damaged and its records cannot be read (%s); every other site reads (per-step record "
                "counts not compared)",
                s->name, s->damaged);
        return;
    }
    rep->committed_records += s->committed;
    int64_t ext_max = s->n_index;
    if (s->n_stats > ext_max) ext_max = s->n_stats;
    if (s->data >= 0 && s->n_data > ext_max) ext_max = s->n_data;
    rep->uncommitted_records += ext_max - s->committed;
    if (!rep->unclean && (s->n_stats != s->n_index || (s->data >= 0 && s->n_data != s->n_index)))
        problem(rep, "site \"%s\": index, stats and data hold %lld, %lld and %lld rows; a cleanly closed writer keeps them equal",
                s->name, (long long)s->n_index, (long long)s->n_stats, (long long)(s->data >= 0 ? s->n_data : s->n_index));
    enum { BLK = 1024 };
    drift_trace_index *ix = drift_malloc(BLK * sizeof *ix);
    drift_trace_stats *st = drift_malloc(BLK * sizeof *st);
    size_t esz = drift_dtype_size(s->dtype);
    void *rec = s->data >= 0 ? drift_malloc((size_t)s->numel * esz) : NULL;
    if (!ix || !st || (s->data >= 0 && !rec)) {
        check_nomem = 1;
        goto done;
    }
    int64_t prev = -1;
    size_t bad_data = 0;
    for (int64_t first = 0; first < s->committed; first += BLK) {
        int64_t cnt = s->committed - first < BLK ? s->committed - first : BLK;
        if (drift_trace_read_index(r, i, first, cnt, ix, &e) || drift_trace_read_stats(r, i, first, cnt, st, &e)) {
            problem_err(rep, &e);
            goto done;
        }
        for (int64_t k = 0; k < cnt; k++) {
            int64_t row = first + k;
            long pos = step_pos(r, ix[k].step);
            if (ix[k].step < prev)
                problem(rep, "site \"%s\" record %lld: step %lld after step %lld (steps must not decrease)", s->name,
                        (long long)row, (long long)ix[k].step, (long long)prev);
            prev = ix[k].step;
            if (pos < 0)
                problem(rep, "site \"%s\" record %lld: step %lld has no commit row in /steps", s->name, (long long)row,
                        (long long)ix[k].step);
            else
                per_step[pos]++;
            const drift_trace_stats *t = &st[k];
            if (t->nan_count < 0 || t->inf_count < 0 || t->nan_count > s->numel || t->inf_count > s->numel - t->nan_count ||
                (!isnan(t->min) && !isnan(t->max) && t->min > t->max))
                problem(rep, "site \"%s\" record %lld: implausible stats (nan %lld, inf %lld of %lld; min %g max %g)",
                        s->name, (long long)row, (long long)t->nan_count, (long long)t->inf_count, (long long)s->numel,
                        t->min, t->max);
            if (ix[k].stored && rec) {
                if (drift_trace_read_record_raw(r, i, row, rec, (size_t)s->numel * esz, &e)) {
                    problem_err(rep, &e);
                    continue;
                }
                drift_trace_stats re;
                drift_trace_stats_compute(rec, s->dtype, (size_t)s->numel, &re);
                if (!(same_double(re.min, t->min) && same_double(re.max, t->max) && close_double(re.mean, t->mean) &&
                      close_double(re.mean_abs, t->mean_abs) && close_double(re.l2, t->l2) &&
                      re.nan_count == t->nan_count && re.inf_count == t->inf_count) &&
                    bad_data++ < 5)
                    problem(rep,
                            "site \"%s\" record %lld (step %lld): stored tensor does not match its stats row (mean %g vs "
                            "%g): the data is corrupt",
                            s->name, (long long)row, (long long)ix[k].step, re.mean, t->mean);
            }
        }
    }
done:
    free(ix);
    free(st);
    free(rec);
}

/* Committed rows of a table keyed by step: each row's step must lie in the
 * commit window that covers it. */
static void check_windows(drift_trace_reader *r, const char *what, const int64_t *steps_of_rows, size_t n, size_t field,
                          drift_trace_check_report *rep) {
    size_t row = 0;
    int64_t prev_step = -1;
    for (size_t c = 0; c < r->n_steps && row < n; c++) {
        int64_t end = field == 0 ? r->stp[c].metrics_rows : field == 1 ? r->stp[c].step_metrics_rows : r->stp[c].notes_rows;
        for (; (int64_t)row < end && row < n; row++)
            if (steps_of_rows[row] <= prev_step || steps_of_rows[row] > r->stp[c].step) {
                problem(rep, "%s row %zu: step %lld, but the row was committed with step %lld", what, row,
                        (long long)steps_of_rows[row], (long long)r->stp[c].step);
                return;
            }
        prev_step = r->stp[c].step;
    }
}

static void check_tables(drift_trace_reader *r, drift_trace_check_report *rep) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_metric *m = NULL;
    drift_trace_step_metrics *sm = NULL;
    drift_trace_note *nt = NULL;
    size_t n = 0;
    int64_t *steps = NULL;
    if (drift_trace_read_metrics(r, INT64_MIN, &m, &n, &e)) {
        problem_err(rep, &e);
    } else {
        rep->n_metric_rows = n;
        steps = drift_malloc((n ? n : 1) * sizeof *steps);
        if (steps) {
            for (size_t i = 0; i < n; i++) steps[i] = m[i].step;
            check_windows(r, "/metrics/rows", steps, n, 0, rep);
        } else {
            check_nomem = 1;
        }
        free(steps);
        free(m);
    }
    drift_err_clear(&e);
    if (drift_trace_read_step_metrics(r, INT64_MIN, &sm, &n, &e)) {
        problem_err(rep, &e);
    } else {
        steps = drift_malloc((n ? n : 1) * sizeof *steps);
        if (steps) {
            for (size_t i = 0; i < n; i++) steps[i] = sm[i].step;
            check_windows(r, "/metrics/steps", steps, n, 1, rep);
        } else {
            check_nomem = 1;
        }
        free(steps);
        free(sm);
    }
    drift_err_clear(&e);
    if (drift_trace_read_notes(r, INT64_MIN, &nt, &n, &e)) {
        problem_err(rep, &e);
    } else {
        steps = drift_malloc((n ? n : 1) * sizeof *steps);
        if (steps) {
            for (size_t i = 0; i < n; i++) steps[i] = nt[i].step;
            check_windows(r, "/notes", steps, n, 2, rep);
        } else {
            check_nomem = 1;
        }
        free(steps);
        free(nt);
    }
    /* rows of /steps past the committed prefix that look like commits */
    if (r->steps_extent > (int64_t)r->n_steps + 1)
        problem(rep, "/steps: %lld rows past the last valid commit row (expected at most one unwritten row)",
                (long long)(r->steps_extent - (int64_t)r->n_steps));
}

static void check_arrays(drift_trace_reader *r, drift_trace_check_report *rep) {
    drift_err e;
    drift_err_clear(&e);
    for (size_t i = 0; i < r->n_params + r->n_buffers; i++) {
        int is_p = i < r->n_params;
        const tr_param *p = is_p ? &r->params[i] : &r->buffers[i - r->n_params];
        size_t bytes = (size_t)p->numel * drift_dtype_size(p->dtype);
        void *buf = drift_malloc(bytes ? bytes : 1);
        if (!buf) {
            check_nomem = 1;
            continue;
        }
        int rc = is_p ? drift_trace_read_param(r, i, buf, (size_t)p->numel, &e)
                      : drift_trace_read_buffer(r, i - r->n_params, buf, bytes, &e);
        if (rc) problem_err(rep, &e);
        free(buf);
    }
    char *g = NULL;
    size_t glen = 0;
    if (drift_trace_read_graph(r, &g, &glen, &e)) {
        problem_err(rep, &e);
    } else if (g) {
        drift_json_value *doc = NULL;
        drift_err je;
        drift_err_clear(&je);
        int jrc = drift_json_parse(g, glen, "graph", &doc, &je);
        if (jrc == DRIFT_E_NOMEM) check_nomem = 1; /* the graph may well be JSON: not the file's problem */
        else if (jrc) problem(rep, "%s: expected the model graph as JSON: %s", TR_GRAPH, je.msg);
        drift_json_free(doc);
    }
    free(g);
    /* per-step graphs (9.1): every step-graph note parses and each graph reads back as JSON, once */
    drift_trace_step_graph *sg = NULL;
    size_t nsg = 0;
    if (drift_trace_read_step_graphs(r, &sg, &nsg, &e)) problem_err(rep, &e);
    for (size_t i = 0; i < nsg; i++) {
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = sg[j].graph == sg[i].graph;
        if (sg[i].graph < 1 || seen) continue;
        if (drift_trace_read_step_graph(r, &sg[i], &g, &glen, &e)) {
            problem_err(rep, &e);
            continue;
        }
        drift_json_value *doc = NULL;
        drift_err je;
        drift_err_clear(&je);
        int jrc = drift_json_parse(g, glen, "graph", &doc, &je);
        if (jrc == DRIFT_E_NOMEM) check_nomem = 1;
        else if (jrc) problem(rep, "%s: step %lld's graph %lld: expected a model graph as JSON: %s", TR_GRAPH_STEPS,
                              (long long)sg[i].step, (long long)sg[i].graph, je.msg);
        drift_json_free(doc);
        free(g);
    }
    free(sg);
    /* parameters by reference: the JSON must parse (the checkpoint itself is checked by replay) */
    if (drift_trace_read_params_ref(r, &g, &glen, &e)) {
        problem_err(rep, &e);
    } else if (g) {
        drift_params_ref ref;
        drift_params_ref_init(&ref);
        char src[700];
        snprintf(src, sizeof src, "%s:/params_ref", r->path);
        if (drift_params_ref_parse(&ref, g, glen, src, &e)) problem_err(rep, &e);
        drift_params_ref_free(&ref);
        free(g);
    }
}

int drift_trace_check(const char *path, drift_trace_check_report *rep, drift_err *err) {
    tr_h5_quiet();
    if (!path || !rep) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "check: NULL argument");
    memset(rep, 0, sizeof *rep);
    rep->last_step = -1;
    check_nomem = 0;
    int version = 0, flags = 0;
    if (superblock_flags(path, &version, &flags) && (flags & 0x05)) rep->unclean = 1;
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    int64_t size = 0, eof = 0;
    if (rc == DRIFT_E_INPUT && err && strstr(err->msg, TR_CUT_BELOW_COMMITS)) {
        /* killed, then cut: committed data is missing; said as the reader says it */
        rep->unclean = 1;
        rep->cut_short = 1;
        rep->ended = "cut short below its committed steps";
        problem(rep, "%s: %s", err->where, err->msg);
        drift_err_clear(err);
        if (!check_nomem) return DRIFT_OK;
        drift_trace_check_report_free(rep);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    if (rc == DRIFT_E_INPUT && tr_short_file(path, &size, &eof)) {
        /* cut short by a full disk: a problem to report, and `--repair` (which
         * runs when unclean is set) fixes it */
        drift_err_clear(err);
        rep->unclean = 1;
        rep->cut_short = 1;
        rep->ended = "cut short";
        problem(rep,
                "the file is cut short: %lld bytes, its superblock records %lld (its writer stopped while extending it, "
                "e.g. on a full disk); no reader can open it as it is; `drift check --repair` restores every committed "
                "step",
                (long long)size, (long long)eof);
        if (!check_nomem) return DRIFT_OK;
        drift_trace_check_report_free(rep);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    if (rc) return rc;
    rep->swmr = r->swmr;
    if (r->swmr) rep->unclean = 1;
    const char *status = drift_trace_reader_status(r);
    rep->ended = drift_trace_reader_ended(r);
    if (status && strncmp(status, "failed", 6) == 0) /* the producer recorded its own failure */
        problem(rep, "the writer recorded a failure: %s", status);
    if (!status && !r->view)
        problem(rep, "%s: missing (expected the writer's state string: recording, closed or failed: REASON; without "
                "it nobody can tell a closed trace from one whose writer failed)", TR_STATUS);
    if (r->meta.plan_json && r->meta.plan_json[0]) {
        drift_json_value *doc = NULL;
        drift_err je;
        drift_err_clear(&je);
        int jrc = drift_json_parse(r->meta.plan_json, strlen(r->meta.plan_json), "plan", &doc, &je);
        if (jrc == DRIFT_E_NOMEM) check_nomem = 1;
        else if (jrc) problem(rep, "root attribute \"plan\": expected the dtype plan as JSON: %s", je.msg);
        drift_json_free(doc);
    }
    if (rep->unclean)
        problem(rep,
                "the file was not closed cleanly (its writer was killed, or is still writing): ordinary HDF5 readers "
                "cannot open it; drift reads its committed steps through SWMR; `drift check --repair` restores it once "
                "the writer is gone");
    rep->committed_steps = (int64_t)r->n_steps;
    rep->last_step = tr_last_step(r);
    rep->n_sites = r->n_sites;
    rep->n_params = r->n_params;
    rep->n_buffers = r->n_buffers;
    int64_t *per_step = drift_calloc(r->n_steps ? r->n_steps : 1, sizeof *per_step);
    if (!per_step) {
        drift_trace_reader_close(r);
        drift_trace_check_report_free(rep);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    int damaged = 0;
    for (size_t i = 0; i < r->n_sites; i++) {
        check_site(r, i, per_step, rep);
        damaged += r->sites[i].damaged != NULL;
    }
    for (size_t c = 0; c < r->n_steps && !damaged; c++)
        if (per_step[c] != r->stp[c].n_records)
            problem(rep, "step %lld: commit row counts %lld records, the sites hold %lld", (long long)r->stp[c].step,
                    (long long)r->stp[c].n_records, (long long)per_step[c]);
    free(per_step);
    check_tables(r, rep);
    check_arrays(r, rep);
    drift_trace_reader_close(r);
    if (check_nomem) {
        drift_trace_check_report_free(rep);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory while checking");
    }
    return DRIFT_OK;
}

/* --- repair ------------------------------------------------------------------ */
typedef struct keep_counts {
    int64_t *site_rows; /* per site link index: committed records */
    char **site_links;
    size_t n_sites;
    int64_t steps, mrows, msteps, notes, names;
    int64_t first, last; /* the first and last committed step, -1 */
    int recording;       /* /status still says "recording": the writer never said how it ended */
} keep_counts;

static void free_keep(keep_counts *k) {
    for (size_t i = 0; k->site_links && i < k->n_sites; i++) free(k->site_links[i]);
    free(k->site_links);
    free(k->site_rows);
}

static int collect_keep(const char *path, keep_counts *k, drift_err *err) {
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    k->n_sites = r->n_sites;
    k->site_rows = drift_calloc(r->n_sites ? r->n_sites : 1, sizeof *k->site_rows);
    k->site_links = drift_calloc(r->n_sites ? r->n_sites : 1, sizeof *k->site_links);
    if (!k->site_rows || !k->site_links) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < r->n_sites; i++) {
        if (r->sites[i].damaged) { /* left as it is */
            k->site_rows[i] = -1;
            continue;
        }
        if ((rc = tr_site_sync(r, i, err))) goto done;
        char esc[3 * DRIFT_TRACE_NAME_MAX];
        tr_escape_name(r->sites[i].name, esc, sizeof esc);
        k->site_links[i] = drift_strdup(esc);
        if (!k->site_links[i]) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
            goto done;
        }
        k->site_rows[i] = r->sites[i].committed;
    }
    k->steps = (int64_t)r->n_steps;
    k->first = r->n_steps ? r->stp[0].step : -1;
    k->last = tr_last_step(r);
    k->recording = drift_trace_reader_status(r) && strcmp(drift_trace_reader_status(r), "recording") == 0;
    if (r->n_steps) {
        const drift_trace_step *l = &r->stp[r->n_steps - 1];
        k->mrows = l->metrics_rows;
        k->msteps = l->step_metrics_rows;
        k->notes = l->notes_rows;
    }
    k->names = (int64_t)r->n_mnames;
done:
    drift_trace_reader_close(r);
    return rc;
}

static int trim(hid_t ds, int64_t keep, int64_t *trimmed) {
    hid_t sp = H5Dget_space(ds);
    if (sp < 0) return -1;
    hsize_t dims[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    if (rank < 1) return -1;
    if ((int64_t)dims[0] <= keep) return 0;
    *trimmed += (int64_t)dims[0] - keep;
    dims[0] = (hsize_t)keep;
    return H5Dset_extent(ds, dims) < 0 ? -1 : 0;
}

/* 0, -1 (HDF5 failed, or the header check refused the dataset), -2 out of memory. */
static int trim_path(hid_t file, const char *path, int64_t keep, int64_t *trimmed) {
    if (tr_guard_path(file, path, "", path, NULL) != 1) return 0; /* absent, or not a hard link: untouched */
    int g = tr_guard_header(file, path, 0, "", path, NULL); /* never handed to H5Dopen2 when refused */
    if (g) return g == DRIFT_E_NOMEM ? -2 : -1;
    hid_t ds = H5Dopen2(file, path, H5P_DEFAULT);
    if (ds < 0) return -1;
    int rc = trim(ds, keep, trimmed);
    H5Dclose(ds);
    return rc;
}

static int repair_file(const char *path, int64_t *trimmed, drift_err *err);

/* Copies src to a new file dst (mode of src). 0, or -1 with errno set. */
static int copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = NULL;
    if (!in) return -1;
    struct stat st;
    int fd = fstat(fileno(in), &st) == 0 ? open(dst, O_WRONLY | O_CREAT | O_EXCL, st.st_mode & 0777) : -1;
    if (fd < 0 || !(out = fdopen(fd, "wb"))) {
        if (fd >= 0) close(fd);
        fclose(in);
        return -1;
    }
    char buf[1 << 16];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0) bad = fwrite(buf, 1, n, out) != n;
    bad = bad || ferror(in);
    fclose(in);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) bad = 1;
    if (fclose(out) != 0) bad = 1;
    return bad ? -1 : 0;
}

int drift_trace_repair(const char *path, int64_t *trimmed, drift_err *err) {
    tr_guard_init();
    if (trimmed) *trimmed = 0;
    if (!path) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "repair: NULL path");
    struct stat st;
    if (lstat(path, &st) != 0) return drift_err_set(err, DRIFT_E_IO, path, "cannot repair: %s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return drift_err_set(err, DRIFT_E_INPUT, path, "cannot repair: not a regular file (a link or a device); "
                             "repair writes only the file it is given");
    /* A writer holds the lock while it appends: repairing under it would
     * trim rows it is about to commit. Held by us, it also keeps a writer
     * from starting while we repair. */
    int lock = -1, pid = 0;
    if (tr_lock_busy(path, &pid))
        return drift_err_set(err, DRIFT_E_IO, path,
                             "a writer (pid %d) is still writing this trace: repair refuses a file that is open for "
                             "writing (nothing was touched); run it once the writer has exited",
                             pid);
    int rc = tr_lock_take(path, &lock, err);
    if (rc) return rc;
    /* The policy first: a file the reader refuses (external links, ...) is
     * never opened read-write. */
    drift_trace_reader *probe = NULL;
    drift_err pe;
    drift_err_clear(&pe);
    int prc = drift_trace_reader_open(&probe, path, DRIFT_TRACE_OPEN_NORMAL, &pe);
    if (prc == DRIFT_E_NOMEM || (prc != DRIFT_OK && (tr_guard_refused(&pe) || strstr(pe.msg, TR_CUT_BELOW_COMMITS)))) {
        if (err) *err = pe;
        if (prc != DRIFT_E_NOMEM) drift_err_prefix(err, "repair refused (nothing was touched)");
        tr_lock_release(path, lock);
        return prc == DRIFT_E_NOMEM ? prc : DRIFT_E_INPUT;
    }
    drift_trace_reader_close(probe);
    /* Work on a copy beside the file; the original is replaced only by a
     * rename once the copy is repaired and opens cleanly. */
    size_t n = strlen(path) + 48;
    char *tmp = drift_malloc(n);
    if (!tmp) {
        tr_lock_release(path, lock);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    snprintf(tmp, n, "%s.drift-repair.%ld", path, (long)getpid());
    unlink(tmp);
    if (copy_file(path, tmp) != 0) {
        rc = drift_err_set(err, DRIFT_E_IO, path, "cannot make the working copy %s: %s (nothing was touched)", tmp,
                           strerror(errno));
    } else {
        rc = repair_file(tmp, trimmed, err);
        if (!rc && rename(tmp, path) != 0)
            rc = drift_err_set(err, DRIFT_E_IO, path, "cannot rename the repaired copy over it: %s", strerror(errno));
        if (rc) drift_err_prefix(err, "repair of a working copy failed; the original is untouched");
    }
    unlink(tmp);
    drift_free(tmp);
    tr_lock_release(path, lock);
    return rc;
}

/* Overwrites the fixed-length /status string in place (it is never resized). */
static int write_status_text(hid_t f, const char *text) {
    hid_t d = H5Dopen2(f, TR_STATUS, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t t = H5Dget_type(d);
    size_t sz = t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) ? H5Tget_size(t) : 0;
    int rc = -1;
    char *buf = sz > 1 ? drift_calloc(1, sz) : NULL;
    if (buf) {
        snprintf(buf, sz, "%s", text);
        rc = H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
    }
    free(buf);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    return rc;
}

static int repair_file(const char *path, int64_t *trimmed, drift_err *err) {
    tr_h5_quiet();
    int version = 0, flags = 0;
    if (!superblock_flags(path, &version, &flags)) {
        drift_trace_reader *r = NULL;
        int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err); /* names the reason */
        drift_trace_reader_close(r);
        return rc ? rc : drift_err_set(err, DRIFT_E_INPUT, path, "no HDF5 superblock found");
    }
    if (!(flags & 0x05)) {
        /* Closed with clean flags. Usually nothing to do, except a writer
         * that ran out of space while extending the file. */
        drift_trace_reader *r = NULL;
        drift_err probe;
        drift_err_clear(&probe);
        int prc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &probe);
        if (prc == DRIFT_OK) {
            drift_trace_reader_close(r);
            return DRIFT_OK;
        }
        if (prc == DRIFT_E_NOMEM) {
            if (err) *err = probe;
            return prc;
        }
        if (!extend_short_file(path)) return DRIFT_OK; /* not that case: check reports the problem */
        int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
        drift_trace_reader_close(r);
        if (rc) drift_err_prefix(err, "after extending the short file to its stored end");
        return rc;
    }
    keep_counts k;
    memset(&k, 0, sizeof k);
    drift_err first;
    drift_err_clear(&first);
    /* What was committed, read through SWMR before touching anything. */
    int krc = collect_keep(path, &k, &first);
    if (krc == DRIFT_E_NOMEM) { /* nothing touched yet */
        free_keep(&k);
        if (err) *err = first;
        return krc;
    }
    int have_keep = krc == DRIFT_OK;
    int rc = DRIFT_OK;
    int64_t cut = 0;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = H5I_INVALID_HID;
    hbool_t yes = 1;
    /* HDF5 1.10's h5clear route: the library's "clear_status_flags" file-access
     * property (registered in every fapl, set through the public H5Pset), then
     * an RDWR open and close rewrite the superblock with the flags cleared. */
    if (fapl < 0 || H5Pexist(fapl, "clear_status_flags") <= 0 || H5Pset(fapl, "clear_status_flags", &yes) < 0) {
        rc = drift_err_set(err, DRIFT_E_UNSUPPORTED, path,
                           "this HDF5 library has no clear_status_flags property; run `h5clear -s --increment=0 %s`",
                           path);
        goto done;
    }
    f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    /* killed while the file grew: the flushed superblock's end lies past the last byte written
       (space allocated after the last flush, never committed); as for a full disk below, the
       working copy is extended to it and opened again (CI's kill trials under ASan met it once:
       "truncated file: eof = 1117440 ... stored_eof = 1118208") */
    if (f < 0 && extend_short_file(path)) f = H5Fopen(path, H5F_ACC_RDWR, fapl);
    if (f < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot open the file for repair");
        goto done;
    }
    /* EOA := max(EOA, EOF): data the writer put past the last flushed
     * superblock becomes addressable for ordinary readers. */
    if (H5Fincrement_filesize(f, 0) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot set the end of allocation");
        goto done;
    }
    if (have_keep) {
        /* Trim rows past the last commit so that ordinary readers (h5dump)
         * see exactly the committed steps. */
        for (size_t i = 0; i < k.n_sites && !rc; i++) {
            if (k.site_rows[i] < 0) continue; /* damaged site: not touched */
            hid_t g = H5Gopen2(f, TR_SITES, H5P_DEFAULT);
            hid_t sg = g >= 0 ? H5Gopen2(g, k.site_links[i], H5P_DEFAULT) : -1;
            int t = sg < 0 ? -1 : 0;
            if (!t && !(t = trim_path(sg, "index", k.site_rows[i], &cut)) && !(t = trim_path(sg, "stats", k.site_rows[i], &cut)))
                t = trim_path(sg, "data", k.site_rows[i], &cut);
            if (t == -2) rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory trimming site %s", k.site_links[i]);
            else if (t) rc = tr_h5_fail(err, DRIFT_E_IO, path, k.site_links[i], "cannot trim the site's uncommitted records");
            if (sg >= 0) H5Gclose(sg);
            if (g >= 0) H5Gclose(g);
        }
        const char *tables[] = {TR_STEPS, TR_METRIC_ROWS, TR_METRIC_STEPS, TR_NOTES, TR_METRIC_NAMES};
        const int64_t keep[] = {k.steps, k.mrows, k.msteps, k.notes, k.names};
        int t = 0;
        for (size_t j = 0; !rc && !t && j < sizeof tables / sizeof tables[0]; j++) t = trim_path(f, tables[j], keep[j], &cut);
        if (t == -2) rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory trimming the tables");
        else if (t) rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot trim uncommitted table rows");
    }
    if (!rc && have_keep && k.recording) {
        /* the writer's last word was "recording": say what became of the trace, so that readers stop
         * calling it killed (it now opens like a closed one) */
        char text[DRIFT_TRACE_STATUS_MAX];
        if (k.last < 0) snprintf(text, sizeof text, "repaired: its writer stopped without closing before committing a step");
        else
            snprintf(text, sizeof text,
                     "repaired: its writer stopped without closing after step %lld; drift check --repair kept steps "
                     "%lld..%lld and trimmed %lld uncommitted rows",
                     (long long)k.last, (long long)k.first, (long long)k.last, (long long)cut);
        if (write_status_text(f, text) != 0) rc = tr_h5_fail(err, DRIFT_E_IO, path, TR_STATUS, "cannot write the status");
    }
    if (tr_h5_close_file(f) < 0 && !rc) rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot close the repaired file");
    f = H5I_INVALID_HID;
    if (!rc) {
        /* Must now open for an ordinary reader. */
        drift_trace_reader *r = NULL;
        rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
        if (!rc && r->swmr) rc = drift_err_set(err, DRIFT_E_IO, path, "repair did not clear the status flags");
        drift_trace_reader_close(r);
        if (rc) drift_err_prefix(err, "after repair");
    }
    /* !have_keep: the SWMR read failed (e.g. killed before entering SWMR);
     * the file now opens plainly, untrimmed (readers ignore what has no
     * commit row). */
done:
    if (f >= 0) tr_h5_close_file(f);
    if (fapl >= 0) H5Pclose(fapl);
    free_keep(&k);
    if (trimmed) *trimmed = cut;
    return rc;
}
