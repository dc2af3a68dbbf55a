/* Parity per op-registry row: the engine (aten_parity.h). */
#include "tests/parity/aten_parity.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "formats/json.h"
#include "formats/plan.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_lower_internal.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"
#include "tests/parity/parity_util.h"

typedef struct apcase {
    char *text;
    size_t len;
    drift_json_value *doc;
    const drift_json_value *par;
    const char *name;
} apcase;

struct aten_parity_set {
    apcase *c;
    int n;
};

static void set_free_cases(aten_parity_set *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->c[i].text);
        drift_json_free(s->c[i].doc);
    }
    free(s->c);
}

void aten_parity_free(aten_parity_set *s) {
    if (!s) return;
    set_free_cases(s);
    free(s);
}

int aten_parity_count(const aten_parity_set *s) { return s ? s->n : 0; }

int aten_parity_load(const char *path, aten_parity_set **out, drift_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return drift_err_set(err, DRIFT_E_IO, path, "cannot open the parity cases");
    aten_parity_set *s = calloc(1, sizeof *s);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int cap_c = 0, lineno = 0, rc = DRIFT_OK;
    while ((got = getline(&line, &cap, f)) > 0) {
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (s->n == cap_c) {
            cap_c = cap_c ? 2 * cap_c : 256;
            s->c = realloc(s->c, (size_t)cap_c * sizeof *s->c);
        }
        apcase *c = &s->c[s->n];
        memset(c, 0, sizeof *c);
        char src[64];
        snprintf(src, sizeof src, "line %d", lineno);
        if ((rc = drift_json_parse(line, (size_t)got, src, &c->doc, err))) break;
        c->par = drift_json_object_get(c->doc, "parity");
        const drift_json_value *nm = c->par ? drift_json_object_get(c->par, "name") : NULL;
        if (!nm || nm->type != DRIFT_JSON_STRING) {
            drift_json_free(c->doc);
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "line %d: 'parity.name': expected a string", lineno);
            break;
        }
        c->name = nm->str;
        c->text = malloc((size_t)got + 1);
        memcpy(c->text, line, (size_t)got + 1);
        c->len = (size_t)got;
        s->n++;
    }
    free(line);
    fclose(f);
    if (rc) {
        aten_parity_free(s);
        return rc;
    }
    *out = s;
    return DRIFT_OK;
}

/* ---- coverage ------------------------------------------------------------------ */

static int case_calls(const apcase *c, const char *base) {
    const drift_json_value *nodes = drift_json_object_get(c->doc, "nodes");
    for (size_t i = 0; nodes && i < nodes->n_items; i++) {
        const drift_json_value *op = drift_json_object_get(&nodes->items[i], "op");
        const drift_json_value *t = drift_json_object_get(&nodes->items[i], "target");
        if (!op || op->type != DRIFT_JSON_STRING || strcmp(op->str, "call_function") || !t || t->type != DRIFT_JSON_STRING)
            continue;
        const aten_op_row *r = aten_registry_find(t->str);
        if (r && !strcmp(r->base, base)) return 1;
    }
    return 0;
}

int aten_parity_missing_rows(const aten_parity_set *s, const char *const *names, int n, char *buf, size_t cap) {
    int nrows = 0, missing = 0;
    const aten_op_row *rows = aten_registry_rows(&nrows);
    if (!names) n = nrows;
    size_t k = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *base = names ? names[i] : rows[i].base;
        int hit = 0;
        for (int j = 0; j < s->n && !hit; j++) hit = case_calls(&s->c[j], base);
        if (hit) continue;
        missing++;
        if (k < cap) k += (size_t)snprintf(buf + k, cap - k, "%s%s", k ? " " : "", base);
    }
    return missing;
}

/* ---- inputs ---------------------------------------------------------------------- */

static double num_of(const drift_json_value *o, const char *key, double dflt) {
    const drift_json_value *v = o ? drift_json_object_get(o, key) : NULL;
    return v && v->type == DRIFT_JSON_NUMBER ? v->number : dflt;
}

static int shape_of(const drift_json_value *val, int *nd, int64_t *sh, int64_t *numel) {
    const drift_json_value *s = val ? drift_json_object_get(val, "shape") : NULL;
    if (!s || s->type != DRIFT_JSON_ARRAY || s->n_items > DRIFT_MAX_DIMS) return -1;
    *nd = (int)s->n_items;
    *numel = 1;
    for (int i = 0; i < *nd; i++) {
        sh[i] = s->items[i].is_int ? s->items[i].integer : -1;
        *numel *= sh[i];
    }
    return *numel >= 0 ? 0 : -1;
}

static const char *dtype_of(const drift_json_value *val) {
    const drift_json_value *d = val ? drift_json_object_get(val, "dtype") : NULL;
    return d && d->type == DRIFT_JSON_STRING ? d->str : "float32";
}

static const drift_json_value *node_named(const drift_json_value *doc, const char *name) {
    const drift_json_value *nodes = drift_json_object_get(doc, "nodes");
    for (size_t i = 0; nodes && i < nodes->n_items; i++) {
        const drift_json_value *nm = drift_json_object_get(&nodes->items[i], "name");
        if (nm && nm->type == DRIFT_JSON_STRING && !strcmp(nm->str, name)) return &nodes->items[i];
    }
    return NULL;
}

/* Fills v[0..n) as generator g says, rounded to dtype dt (integers exact). */
static int gen_values(const drift_json_value *g, const char *dt, float *v, int64_t n, char *why, size_t cap) {
    const drift_json_value *gv = drift_json_object_get(g, "gen");
    const char *gen = gv && gv->type == DRIFT_JSON_STRING ? gv->str : "normal";
    const double lo = num_of(g, "lo", -1.0), hi = num_of(g, "hi", 1.0), scale = num_of(g, "scale", 1.0);
    if (!strcmp(gen, "normal")) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)parity_rng_normal();
    } else if (!strcmp(gen, "unif")) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * parity_rng_unif());
    } else if (!strcmp(gen, "int")) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * (lo + floor((hi - lo) * parity_rng_unif())));
    } else if (!strcmp(gen, "bool")) {
        const double p = num_of(g, "p", 0.5);
        for (int64_t i = 0; i < n; i++) v[i] = parity_rng_unif() < p ? 1.0f : 0.0f;
    } else if (!strcmp(gen, "perm")) {
        for (int64_t i = 0; i < n; i++) v[i] = (float)i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(parity_rng_u64() % (uint64_t)(i + 1));
            float t = v[i];
            v[i] = v[j], v[j] = t;
        }
        for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] * scale);
    } else if (!strcmp(gen, "special")) {
        for (int64_t i = 0; i < n; i++) {
            v[i] = (float)parity_rng_normal();
            if (i % 7 == 3) v[i] = NAN;
            else if (i % 11 == 5) v[i] = INFINITY;
            else if (i % 13 == 6) v[i] = -INFINITY;
        }
    } else if (!strcmp(gen, "values")) {
        const drift_json_value *a = drift_json_object_get(g, "values");
        if (!a || a->type != DRIFT_JSON_ARRAY || (int64_t)a->n_items != n) {
            snprintf(why, cap, "'values': expected %lld numbers", (long long)n);
            return -1;
        }
        for (int64_t i = 0; i < n; i++) v[i] = (float)a->items[i].number;
    } else {
        snprintf(why, cap, "unknown generator '%s'", gen);
        return -1;
    }
    drift_dtype d = drift_dtype_parse_any(dt);
    if (d == DRIFT_BF16 || d == DRIFT_F16) drift_dtype_round_n(v, (size_t)n, d);
    if (!strcmp(dt, "bool"))
        for (int64_t i = 0; i < n; i++) v[i] = v[i] != 0.0f;
    return 0;
}

/* ---- one case ------------------------------------------------------------------ */

typedef struct runout {
    drift_exec_result r;
    int ok;
    char why[2048];
} runout;

enum { PLAN_F32 = 0, PLAN_BF16 = 1, PLAN_ORACLE = 2 };
static const char *const k_plan_name[] = {"fp32", "bf16", "oracle"};

static void run_one(const drift_graph *sem, int plan_kind, drift_backend *be, drift_hostset *bufs, runout *o) {
    drift_err e;
    drift_err_clear(&e);
    memset(o, 0, sizeof *o);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = plan_kind == PLAN_BF16 ? DRIFT_BF16 : DRIFT_F32;
    drift_assign_opts ao;
    drift_assign_opts_init(&ao);
    if (plan_kind == PLAN_ORACLE) ao.side = DRIFT_SIDE_ORACLE;
    drift_graph *as = NULL;
    drift_hostset *ps = NULL, *is = NULL;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&is, &e);
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &ao, &as, &e)) {
        snprintf(o->why, sizeof o->why, "assign: %s", e.msg);
    } else {
        drift_exec_inputs in = {.params = ps, .buffers = bufs, .inputs = is};
        if (drift_exec_run(as, be, &in, &o->r, &e)) snprintf(o->why, sizeof o->why, "%s: %s", e.where, e.msg);
        else o->ok = 1;
    }
    drift_graph_free(as);
    drift_hostset_free(ps);
    drift_hostset_free(is);
    drift_plan_free(&plan);
}

static double val_at(const drift_exec_result *r, int64_t i) { return r->f64 ? r->f64[i] : (double)r->f32[i]; }

static int same_value(double a, double b, drift_dtype dt) {
    if (a != a || b != b) return a != a && b != b;
    if (a == 0 && b == 0) return drift_dtype_is_int(dt) || signbit(a) == signbit(b); /* an integer's zero has no sign */
    return a == b;
}

static void dump_num(FILE *f, double v) {
    if (v != v) fputs("\"nan\"", f);
    else if (isinf(v)) fputs(v > 0 ? "\"inf\"" : "\"-inf\"", f);
    else if (v == 0 && signbit(v)) fputs("-0.0", f); /* "-0" would read back as Python's integer 0 */
    else fprintf(f, "%.17g", v);
}

typedef struct cctx {
    const apcase *c;
    const aten_parity_opts *o;
    aten_parity_stats *st;
    int failed;
} cctx;

static void failf(cctx *x, const char *plan, const char *spec, const char *fmt, const char *msg) {
    printf("FAIL aten_parity %s [%s] %s: ", x->c->name, plan, spec);
    printf(fmt, msg);
    printf("\n");
    x->failed = 1;
}

/* Compares backend run b against the reference run ref (exact) or the oracle (NMSE). */
static void check_run(cctx *x, int plan, const char *spec, int device, const runout *b, const runout *ref,
                      const runout *orc, int exact, double nmse_bound, int out_nd, const int64_t *out_sh,
                      drift_dtype out_dt) {
    const char *pn = k_plan_name[plan];
    x->st->runs++;
    if (!b->ok) {
        failf(x, pn, spec, "%s", b->why);
        return;
    }
    char why[256];
    int64_t numel = 1;
    for (int i = 0; i < out_nd; i++) numel *= out_sh[i];
    int shape_ok = b->r.numel == numel && (b->r.ndim == out_nd || (out_nd == 0 && b->r.ndim <= 1));
    for (int i = 0; shape_ok && i < out_nd && b->r.ndim == out_nd; i++) shape_ok = b->r.shape[i] == out_sh[i];
    if (!shape_ok) {
        snprintf(why, sizeof why, "shape: %d dims, %lld elements; the captured val has %d dims, %lld", b->r.ndim,
                 (long long)b->r.numel, out_nd, (long long)numel);
        failf(x, pn, spec, "%s", why);
        return;
    }
    if (plan == PLAN_F32 && out_dt != DRIFT_DTYPE_INVALID && b->r.dtype != out_dt) { /* the fp32 plan is the capture's */
        snprintf(why, sizeof why, "dtype %s; the captured val has %s", drift_dtype_name(b->r.dtype), drift_dtype_name(out_dt));
        failf(x, pn, spec, "%s", why);
        return;
    }
    if (exact) {
        if (!ref->ok || b == ref) return; /* reported for ref; ref is the reference */
        if (b->r.dtype != ref->r.dtype) {
            snprintf(why, sizeof why, "dtype %s, ref %s", drift_dtype_name(b->r.dtype), drift_dtype_name(ref->r.dtype));
            failf(x, pn, spec, "%s", why);
            return;
        }
        for (int64_t i = 0; i < numel; i++) {
            /* the ref backend never rounds: its value rounded once to the output dtype */
            double want = val_at(&ref->r, i);
            if (!drift_dtype_wide(b->r.dtype)) want = drift_round_to((float)want, b->r.dtype);
            if (!same_value(val_at(&b->r, i), want, b->r.dtype)) {
                snprintf(why, sizeof why, "not bitwise with ref: element %lld is %.9g, ref %.9g", (long long)i,
                         val_at(&b->r, i), want);
                failf(x, pn, spec, "%s", why);
                return;
            }
        }
        return;
    }
    if (!orc->ok) return;
    const double bound = nmse_bound > 0 ? nmse_bound
                         : plan == PLAN_BF16 ? 1e-4
                                             : parity_nmse_default(b->r.dtype, device);
    int64_t npar = 0;
    const double e = parity_nmse(b->r.f32, orc->r.f64, numel, 0, &npar);
    if (npar || !(e <= bound)) {
        snprintf(why, sizeof why, "NMSE %.3g against the fp64 oracle (bound %.3g), %lld non-finite mismatches", e, bound,
                 (long long)npar);
        failf(x, pn, spec, "%s", why);
    }
}

static void run_case(const apcase *c, const aten_parity_backend *bes, int n, const aten_parity_opts *o,
                     aten_parity_stats *st, drift_backend *ref, drift_backend *cpu) {
    cctx x = {c, o, st, 0};
    st->cases++;
    const drift_json_value *ex = drift_json_object_get(c->par, "exact");
    const int exact = ex && ex->type == DRIFT_JSON_BOOL && ex->boolean;
    const double nmse = num_of(c->par, "nmse", 0.0);
    const drift_json_value *ac = drift_json_object_get(c->par, "autocast");
    const int bf16 = ac && ac->type == DRIFT_JSON_STRING && !strcmp(ac->str, "bfloat16");
    const drift_json_value *sd = drift_json_object_get(c->par, "seed");
    parity_rng_seed((uint64_t)(sd && sd->is_int ? sd->integer : 1) * 0x9E3779B97F4A7C15ull);

    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(c->text, c->len, c->name, &g, &e) || drift_aten_graph_lower(g, &sem, &e)) {
        failf(&x, "import", "-", "%s", e.msg);
        printf("     (%s)\n", e.where);
        drift_aten_graph_free(g);
        st->failed++;
        return;
    }
    /* the output's captured shape */
    const drift_json_value *outs = drift_json_object_get(c->doc, "outputs");
    const drift_json_value *on = outs && outs->n_items ? drift_json_object_get(&outs->items[0], "node") : NULL;
    const drift_json_value *onode = on && on->type == DRIFT_JSON_STRING ? node_named(c->doc, on->str) : NULL;
    int out_nd = 0;
    int64_t out_sh[DRIFT_MAX_DIMS], out_n = 0;
    if (!onode || shape_of(drift_json_object_get(onode, "val"), &out_nd, out_sh, &out_n)) {
        failf(&x, "import", "-", "%s", "the output node has no val.shape");
        goto done;
    }
    const drift_dtype out_dt = drift_dtype_parse_any(dtype_of(drift_json_object_get(onode, "val")));
    /* inputs: every placeholder a buffer of its name (fp32 values, rounded to its dtype) */
    drift_hostset *bufs = NULL;
    drift_hostset_create(&bufs, &e);
    const drift_json_value *pin = drift_json_object_get(c->par, "inputs");
    for (size_t i = 0; pin && i < pin->n_members; i++) {
        const drift_json_member *m = &pin->members[i];
        const drift_json_value *node = node_named(c->doc, m->key);
        int nd = 0;
        int64_t sh[DRIFT_MAX_DIMS], numel = 0;
        if (!node || shape_of(drift_json_object_get(node, "val"), &nd, sh, &numel)) {
            failf(&x, "inputs", m->key, "%s", "no placeholder with a val.shape");
            continue;
        }
        float *v = malloc((size_t)(numel ? numel : 1) * sizeof *v);
        char why[128];
        const char *dt = dtype_of(drift_json_object_get(node, "val"));
        if (gen_values(&m->value, dt, v, numel, why, sizeof why)) failf(&x, "inputs", m->key, "%s", why);
        if (drift_hostset_add(bufs, m->key, DRIFT_F32, nd, sh, v, NULL, NULL, &e)) failf(&x, "inputs", m->key, "%s", e.msg);
        free(v);
    }
    if (!x.failed) {
        runout orc, rref[2], *rb = calloc((size_t)n + 1, sizeof *rb);
        run_one(sem, PLAN_ORACLE, ref, bufs, &orc);
        if (!exact && !orc.ok) failf(&x, "oracle", "ref", "%s", orc.why);
        for (int p = PLAN_F32; p <= (bf16 ? PLAN_BF16 : PLAN_F32); p++) {
            run_one(sem, p, ref, bufs, &rref[p]);
            check_run(&x, p, "ref", 0, &rref[p], &rref[p], &orc, exact, nmse, out_nd, out_sh, out_dt);
            run_one(sem, p, cpu, bufs, &rb[n]);
            check_run(&x, p, "cpu", 0, &rb[n], &rref[p], &orc, exact, nmse, out_nd, out_sh, out_dt);
            drift_exec_result_free(&rb[n].r);
            for (int b = 0; b < n; b++) {
                run_one(sem, p, bes[b].be, bufs, &rb[b]);
                check_run(&x, p, bes[b].spec, bes[b].device, &rb[b], &rref[p], &orc, exact, nmse, out_nd, out_sh, out_dt);
                if (o && o->dump && o->dump_spec && !strcmp(o->dump_spec, bes[b].spec) && rb[b].ok) {
                    fprintf(o->dump, "{\"name\":\"%s\",\"plan\":\"%s\",\"dtype\":\"%s\",\"inputs\":{", c->name,
                            k_plan_name[p], drift_dtype_name(rb[b].r.dtype));
                    for (size_t i = 0; pin && i < pin->n_members; i++) {
                        const drift_host_tensor *t = drift_hostset_find(bufs, pin->members[i].key);
                        fprintf(o->dump, "%s\"%s\":[", i ? "," : "", pin->members[i].key);
                        for (int64_t j = 0; t && j < t->numel; j++) {
                            if (j) fputc(',', o->dump);
                            dump_num(o->dump, t->f32[j]);
                        }
                        fputc(']', o->dump);
                    }
                    fprintf(o->dump, "},\"out\":[");
                    for (int64_t j = 0; j < rb[b].r.numel; j++) {
                        if (j) fputc(',', o->dump);
                        dump_num(o->dump, val_at(&rb[b].r, j));
                    }
                    fprintf(o->dump, "]}\n");
                }
                drift_exec_result_free(&rb[b].r);
            }
            drift_exec_result_free(&rref[p].r);
        }
        drift_exec_result_free(&orc.r);
        free(rb);
    }
    drift_hostset_free(bufs);
done:
    if (x.failed) st->failed++;
    else if (o && o->verbose) printf("ok   aten_parity %s\n", c->name);
    drift_graph_free(sem);
    drift_aten_graph_free(g);
}

aten_parity_stats aten_parity_run(const aten_parity_set *s, const aten_parity_backend *bes, int n,
                                  const aten_parity_opts *o) {
    aten_parity_stats st = {0, 0, 0};
    drift_err e;
    drift_err_clear(&e);
    drift_backend *ref = NULL, *cpu = NULL;
    if (drift_backend_create("ref", &ref, &e) || drift_backend_create("cpu", &cpu, &e)) {
        printf("FAIL aten_parity: cannot create the ref/cpu backends: %s\n", e.msg);
        st.failed = 1;
        drift_backend_free(ref);
        return st;
    }
    for (int i = 0; i < s->n; i++) {
        if (o && o->only && strncmp(s->c[i].name, o->only, strlen(o->only))) continue;
        run_case(&s->c[i], bes, n, o, &st, ref, cpu);
    }
    drift_backend_free(ref);
    drift_backend_free(cpu);
    return st;
}
