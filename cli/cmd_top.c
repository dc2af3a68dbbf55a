/* drift top: the live dashboard of a frozen-weight debug run, or its table
 * and series as JSON/CSV (--batch). The work lives in tui/: model (reading,
 * aggregation), layout (pure geometry), view (curses), batch (output). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/trace_args.h"

#include "replay/analysis/compare_traces.h"

#ifdef DRIFT_HAVE_TUI
#include "cli/top_select.h"
#include "tui/batch.h"
#include "tui/model.h"
#include "tui/view.h"
#endif

static const char *const HELP =
    "usage: drift top TRACE [--against TRACE2] [--ref TRACE] [--follow] [--interval MS] [options]\n"
    "       drift top TRACE --batch [--format json|csv] [--steps A:B] [options]\n"
    "\n"
    "Shows, layer by layer and step by step, how far the two sides of a\n"
    "frozen-weight debug run are apart: with --against, computed live from the\n"
    "two traces (the trainer's and the rollout's, each written by its own\n"
    "process); without, the trace's /metrics (per-site comparison metrics a\n"
    "producer wrote) and per-step scalars (log_prob_mean_abs_diff,\n"
    "ratio_abs_minus_1, approx_kl).\n"
    "\n"
    "  --against TRACE2     compare TRACE (candidate) with TRACE2 (reference) site\n"
    "                       by site for every step committed in both, as drift\n"
    "                       compare does (same engine, same numbers); with\n"
    "                       --follow new steps appear as both sides commit them\n"
    "  --sitemap FILE       with --against: pair differently named sites\n"
    "  --allow-mismatch     with --against: compare different families/shapes\n"
    "  --ref TRACE          a known-good run (a trace with /metrics, e.g. a\n"
    "                       replay result): show its value and the ratio to it\n"
    "                       per layer and colour by the ratio (<= 2x ok, <= 10x\n"
    "                       warn, more bad) instead of absolute thresholds; exit\n"
    "                       2 if it holds no /metrics (use --against for a\n"
    "                       rollout trace)\n"
    "  --follow             tail a trace while it is written (HDF5 SWMR); waits up\n"
    "                       to 30 s for the file to appear and its writer to\n"
    "                       enter SWMR mode\n"
    "  --interval MS        refresh period with --follow (default 1000)\n"
    "  --steps A:B          keep steps A..B, both included (A:, :B, or one step N);\n"
    "                       out of the trace's range: exit 2\n"
    "  --agg step|mean|max  initial aggregation over steps (default step: the latest)\n"
    "  --step N             with --agg step: show step N instead of the latest\n"
    "  --sort order|name|mean|max|rel|cos   initial sort (default order)\n"
    "  --desc / --asc       sort direction\n"
    "  --filter PATTERN     glob (* ? [...]; * also matches dots) or substring\n"
    "  --cfg                divide mean/max |diff| by the guidance scale s\n"
    "  --blocks             one row per block (blocks.N.*): its first divergent\n"
    "                       layer, else its largest mean |diff| (key b)\n"
    "  --variant N          metrics variant to show (default 0)\n"
    "  --ascii              ASCII glyphs even in a UTF-8 locale\n"
    "  --no-mouse           leave the mouse to the terminal\n"
    "  --batch              print the table and series instead of drawing\n"
    "  --format json|csv    batch format (default json); --json = --batch --format json\n"
    "\n"
    "Keys: arrows/jk move, PgUp/PgDn page, Enter drill into a layer's per-step\n"
    "history, s/S sort column, 1-6 sort by order/name/mean/max/rel/cos, r reverse,\n"
    "/ filter (starts empty), a aggregation (step/mean/max), [ ] previous/next\n"
    "step, c CFG normalisation, p chart on/off, H heatmap (layers x steps; m\n"
    "metric), d jump to the first divergent layer, n to the next one (not\n"
    "bitwise equal; wraps), b one row per block, C\n"
    "intercept census, ? help, q quit. Names sort naturally (blocks.2 before\n"
    "blocks.10); the history column uses one log scale for every row.\n"
    "Header: writer state (recording / finished / failed / stopped without\n"
    "closing, from the trace's /status and its writer's lock; with --against\n"
    "both writers'), steps per second; badge LIVE, IDLE, STOPPED or CLOSED.\n"
    "Charts: log_prob |diff| with |ratio-1|, and the selected layer's history.\n"
    "\n"
    "Batch JSON: run attributes, plan and warnings, the kept steps, the table\n"
    "(one row per layer: shown value, reference value, classes, flags) with each\n"
    "layer's per-step history as recorded, and the per-step scalars. Batch CSV:\n"
    "one table with a kind column (layer, history, step). Numbers have 17\n"
    "significant digits: they read back as the trace's exact values.\n"
    "\n"
    "example: drift top run.h5 --against run.rollout.h5 --follow\n"
    "exit: 0 ok, 2 bad usage, unreadable or mismatched traces, or no terminal\n";

#ifndef DRIFT_HAVE_TUI
int drift_cmd_top(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
    }
    fprintf(stderr, "drift top: this build has no dashboard (configured with -DDRIFT_TUI=OFF)\n");
    return 2;
}
#else

static int parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *e = NULL;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || !e || *e || e == s || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* --against: the comparison engine as the model's source of cells. */
typedef struct against_src {
    drift_tcmp *c;
    size_t layers;               /* pairs already handed to the data set */
} against_src;

static drift_trace_reader *against_reader(void *ctx) { return drift_tcmp_reader(((against_src *)ctx)->c, 0); }
static drift_trace_reader *against_reader_b(void *ctx) { return drift_tcmp_reader(((against_src *)ctx)->c, 1); }

static int against_poll(void *ctx, drift_top_data *d, int refresh, int64_t *n_new, drift_err *err) {
    against_src *a = ctx;
    int rc = refresh ? drift_tcmp_refresh(a->c, err) : DRIFT_OK;
    if (n_new) *n_new = 0;
    for (; !rc && a->layers < drift_tcmp_n_pairs(a->c); a->layers++)
        rc = drift_top_data_add_layer(d, drift_tcmp_pair_name(a->c, a->layers), err);
    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(drift_tcmp_reader(a->c, 0), &ns);
    while (!rc) {
        int got = 0;
        const drift_tcmp_step *s = NULL;
        if ((rc = drift_tcmp_next(a->c, &got, &s, err)) || !got) break;
        double t = 0;
        for (size_t i = ns; i-- > 0;)
            if (st[i].step == s->step) { t = st[i].time; break; }
        if ((rc = drift_top_data_add_step(d, s->step, t, err))) break;
        if ((rc = drift_top_data_add_metrics(d, s->rows, s->n_rows, err))) break;
        if (s->has_logprob && (rc = drift_top_data_add_step_metrics(d, &s->lp, 1, err))) break;
        if (n_new) (*n_new)++;
    }
    return rc;
}

static void sleep_100ms(void) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* With --follow, the file may not exist yet, or exist before its writer
 * enters SWMR mode (readers cannot open it until then): retry for 30 s. */
static int open_model(drift_top_model **m, drift_top_open_opts *o, against_src *as, drift_tcmp_opts *to,
                      drift_err *err) {
    int said = 0;
    for (int i = 0;; i++) {
        int rc = DRIFT_OK;
        if (to) {
            rc = drift_tcmp_open(&as->c, to, err);
            if (rc == DRIFT_OK) {
                as->layers = 0;
                rc = drift_top_model_open(m, o, err);
                if (rc != DRIFT_OK) {
                    drift_tcmp_close(as->c);
                    as->c = NULL;
                }
            }
        } else {
            rc = drift_top_model_open(m, o, err);
        }
        /* a mismatch will not go away by waiting */
        if (rc == DRIFT_OK || !o->follow || i >= 300 || (to && rc == DRIFT_E_INPUT && strstr(err->msg, "differ")))
            return rc;
        if (!said) {
            struct stat st;
            int missing = stat(o->path, &st) != 0 || (to && stat(to->path_b, &st) != 0);
            fprintf(stderr, "drift top: waiting up to 30 s for %s%s%s to %s\n", o->path, to ? " and " : "",
                    to ? to->path_b : "", missing ? "appear" : "become readable (writer not in SWMR mode yet)");
            said = 1;
        }
        sleep_100ms();
        drift_err_clear(err);
    }
}

int drift_cmd_top(int argc, char **argv) {
    const char *path = NULL, *ref = NULL, *steps = NULL, *fmt = "json", *agg = NULL, *sort = NULL;
    const char *filter = NULL, *interval = NULL, *variant = NULL, *step = NULL, *against = NULL, *map_path = NULL;
    int follow = 0, batch = 0, cfg = 0, ascii = 0, mouse = 1, dir = -1, allow = 0, blocks = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
#define OPT(name, var)                                                                 \
    if ((r = drift_cli_opt(argc, argv, &i, name, &val)) != 0) {                        \
        if (r < 0) return drift_cli_usage_error("top", "%s needs a value", name);      \
        var = val;                                                                     \
        continue;                                                                      \
    }
        OPT("--ref", ref)
        OPT("--against", against)
        OPT("--sitemap", map_path)
        OPT("--steps", steps)
        OPT("--format", fmt)
        OPT("--agg", agg)
        OPT("--sort", sort)
        OPT("--filter", filter)
        OPT("--interval", interval)
        OPT("--variant", variant)
        OPT("--step", step)
#undef OPT
        if (strcmp(a, "--follow") == 0 || strcmp(a, "-f") == 0) follow = 1;
        else if (strcmp(a, "--batch") == 0) batch = 1;
        else if (strcmp(a, "--json") == 0) {
            batch = 1;
            fmt = "json";
        } else if (strcmp(a, "--cfg") == 0) cfg = 1;
        else if (strcmp(a, "--ascii") == 0) ascii = 1;
        else if (strcmp(a, "--no-mouse") == 0) mouse = 0;
        else if (strcmp(a, "--allow-mismatch") == 0) allow = 1;
        else if (strcmp(a, "--blocks") == 0) blocks = 1;
        else if (strcmp(a, "--desc") == 0) dir = 1;
        else if (strcmp(a, "--asc") == 0) dir = 0;
        else if (a[0] == '-' && a[1]) return drift_cli_unknown_option_in_help("top", a, HELP);
        else if (!path) path = a;
        else return drift_cli_usage_error("top", "one trace expected, got a second one: %s", a);
    }
    if (!path) return drift_cli_usage_error("top", "missing TRACE");

    drift_err err;
    drift_err_clear(&err);
    drift_top_open_opts oo;
    memset(&oo, 0, sizeof oo);
    oo.path = path;
    oo.ref_path = ref;
    oo.follow = follow && !batch;
    oo.step_lo = INT64_MIN;
    oo.step_hi = INT64_MAX;
    if (steps && drift_top_parse_steps(steps, &oo.step_lo, &oo.step_hi, &err) != DRIFT_OK)
        return drift_cli_report("top", &err);
    int64_t first_step, last_step; /* a finished trace's range is known: outside it is exit 2 (a live one grows) */
    if (steps && !oo.follow && drift_cli_resolve_steps("top", steps, path, &first_step, &last_step)) return 2;
    long long ll;
    if (variant) {
        if (parse_int(variant, 0, INT32_MAX, &ll)) return drift_cli_usage_error("top", "--variant: expected an integer >= 0, got \"%s\"", variant);
        oo.variant = (int32_t)ll;
    }
    int interval_ms = 1000;
    if (interval) {
        if (parse_int(interval, 50, 3600 * 1000, &ll))
            return drift_cli_usage_error("top", "--interval: expected milliseconds in 50..3600000, got \"%s\"", interval);
        interval_ms = (int)ll;
    }
    drift_top_format format = DRIFT_TOP_FORMAT_JSON;
    if (strcmp(fmt, "csv") == 0) format = DRIFT_TOP_FORMAT_CSV;
    else if (strcmp(fmt, "json") != 0) {
        static const char *const FORMATS[] = {"json", "csv", NULL};
        return drift_cli_bad_choice("top", "--format", "json or csv", fmt, FORMATS);
    }

    drift_top_query q;
    drift_top_query_default(&q);
    if (agg) {
        int a = drift_top_agg_parse(agg);
        static const char *const AGGS[] = {"step", "mean", "max", NULL};
        if (a < 0) return drift_cli_bad_choice("top", "--agg", "step, mean or max", agg, AGGS);
        q.agg = (drift_top_agg)a;
    }
    if (sort) {
        int s = drift_top_sort_parse(sort);
        static const char *const SORTS[] = {"order", "name", "mean", "max", "rel", "cos", NULL};
        if (s < 0) return drift_cli_bad_choice("top", "--sort", "order, name, mean, max, rel or cos", sort, SORTS);
        q.sort = (drift_top_sort)s;
        q.descending = s >= DRIFT_TOP_SORT_MEAN && s != DRIFT_TOP_SORT_COS;
    }
    if (dir >= 0) q.descending = dir;
    if (step) {
        if (parse_int(step, 0, INT64_MAX - 1, &ll)) return drift_cli_usage_error("top", "--step: expected a step number, got \"%s\"", step);
        q.step = (int64_t)ll;
    }
    q.filter = filter;
    q.cfg_normalise = cfg;
    q.collapse_blocks = blocks;

    if (!batch && !isatty(STDOUT_FILENO))
        return drift_cli_usage_error("top", "stdout is not a terminal: use --batch [--format json|csv]");

    if ((map_path || allow) && !against) return drift_cli_usage_error("top", "--sitemap and --allow-mismatch need --against");
    drift_sitemap *map = NULL;
    if (map_path && drift_sitemap_load(&map, map_path, &err) != DRIFT_OK) return drift_cli_report("top", &err);
    drift_tcmp_opts to;
    drift_tcmp_opts_init(&to);
    against_src as = {NULL, 0};
    drift_top_source src = {&as, against_reader, against_poll, against, against_reader_b};
    if (against) {
        to.path_a = path;
        to.path_b = against;
        to.follow = oo.follow;
        to.sitemap = map;
        to.allow_mismatch = allow;
        to.step_first = oo.step_lo == INT64_MIN ? -1 : oo.step_lo;
        to.step_last = oo.step_hi == INT64_MAX ? -1 : oo.step_hi - 1;
        oo.source = &src;
    }
    drift_top_model *m = NULL;
    if (open_model(&m, &oo, &as, against ? &to : NULL, &err) != DRIFT_OK) {
        drift_sitemap_free(map);
        return drift_cli_report("top", &err);
    }
    for (size_t i = 0; against && i < drift_tcmp_n_warnings(as.c); i++) {
        char safe[8192]; /* names and families read from the traces */
        fprintf(stderr, "drift top: warning: %s\n", drift_cli_printable(drift_tcmp_warning(as.c, i), safe, sizeof safe));
    }
    if (ref && !drift_top_model_header(m)->ref_has_metrics) {
        drift_top_model_close(m);
        drift_tcmp_close(as.c);
        drift_sitemap_free(map);
        return drift_cli_usage_error("top", "--ref %s: the trace holds no /metrics rows, so there is nothing to compare "
                                     "with; to compare two sides' traces use --against %s", ref, ref);
    }
    drift_top_model_query_init(m, &q);
    if (step && drift_top_data_find_step(drift_top_model_data(m), q.step) < 0) {
        drift_top_model_close(m);
        drift_tcmp_close(as.c);
        drift_sitemap_free(map);
        return drift_cli_usage_error("top", "--step %s: no such committed step in %s", step, path);
    }
    int rc;
    if (!oo.follow && (rc = drift_cli_top_check_selection(drift_top_model_data(m), path, filter, variant, &err))) {
        /* the selection matches nothing: reported below (a growing trace may still bring it) */
    } else if (batch) {
        rc = drift_top_batch_write(m, &q, format, stdout, &err);
    } else {
        drift_top_view_opts vo;
        memset(&vo, 0, sizeof vo);
        vo.interval_ms = interval_ms;
        vo.follow = follow;
        vo.mouse = mouse;
        vo.ascii = ascii;
        vo.query = q;
        rc = drift_top_view_run(m, &vo, &err);
    }
    drift_top_model_close(m);
    drift_tcmp_close(as.c);
    drift_sitemap_free(map);
    if (rc != DRIFT_OK) return drift_cli_report("top", &err);
    return 0;
}
#endif
