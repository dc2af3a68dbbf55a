/* Dtype plans (plan.h, DESIGN.md s1 and s5): init/copy/free, JSON parsing
 * with positions, flag overlays, serialisation, and compilation of
 * param_dtype_patterns into per-wrap maps. drift_fnmatch is in fnmatch.c. */
#include "formats/plan.h"

#include "formats/fnmatch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

#include "formats/json.h"

#define GLOB_MAX 1024

static const char *const k_plan_keys =
    "name, fsdp_master_dtype, fsdp_reduce_dtype, diffusion_forward_dtype, sglang_dit_precision, "
    "input_dtype_policy, param_dtype_patterns, buffer_provenance";
static const char *const k_input_names[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = drift_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void drift_plan_init(drift_plan *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    snprintf(p->source, sizeof p->source, "flags");
    p->fsdp_master_dtype = DRIFT_F32;
    p->fsdp_reduce_dtype = DRIFT_F32;
    p->diffusion_forward_dtype = DRIFT_BF16;
    p->sglang_dit_precision = DRIFT_BF16;
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        p->inputs[i].kind = DRIFT_INPUT_PASSTHROUGH;
        p->inputs[i].dtype = DRIFT_DTYPE_INVALID;
    }
    p->patterns = NULL;
    p->n_patterns = 0;
    p->rope_provenance = DRIFT_BUF_CPU_FP64;
}

void drift_plan_free(drift_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_patterns; i++) free(p->patterns[i].glob);
    free(p->patterns);
    drift_plan_init(p);
}

/* Appends a pattern (glob copied). */
static int plan_push_pattern(drift_plan *p, const char *glob, drift_dtype dt, const char *origin) {
    /* capacity doubles at powers of two (the array always holds the next power of two
       >= n_patterns): 10^5 patterns from a stranger's plan cost O(n), not O(n^2) copies */
    const size_t n = p->n_patterns;
    if ((n & (n - 1)) == 0) {
        drift_param_pattern *np = drift_realloc(p->patterns, (n ? 2 * n : 1) * sizeof *np);
        if (!np) return DRIFT_E_NOMEM;
        p->patterns = np;
    }
    drift_param_pattern *pp = &p->patterns[p->n_patterns];
    memset(pp, 0, sizeof *pp);
    pp->glob = dup_str(glob);
    if (!pp->glob) return DRIFT_E_NOMEM;
    pp->dtype = dt;
    snprintf(pp->origin, sizeof pp->origin, "%s", origin);
    p->n_patterns++;
    return DRIFT_OK;
}

int drift_plan_copy(drift_plan *dst, const drift_plan *src, drift_err *err) {
    if (!dst || !src) return drift_err_set(err, DRIFT_E_INTERNAL, "plan", "drift_plan_copy: NULL argument");
    drift_plan tmp = *src;
    tmp.patterns = NULL;
    tmp.n_patterns = 0;
    for (size_t i = 0; i < src->n_patterns; i++) {
        if (plan_push_pattern(&tmp, src->patterns[i].glob, src->patterns[i].dtype, src->patterns[i].origin) !=
            DRIFT_OK) {
            drift_plan_free(&tmp);
            drift_plan_init(dst);
            return drift_err_set(err, DRIFT_E_NOMEM, "plan", "out of memory copying the plan");
        }
    }
    *dst = tmp;
    return DRIFT_OK;
}

/* ---- dtype and value names -------------------------------------------- */

/* bf16, fp16 or fp32 (exact spelling); DRIFT_DTYPE_INVALID otherwise. */
static drift_dtype plan_dtype(const char *s) {
    if (strcmp(s, "bf16") == 0) return DRIFT_BF16;
    if (strcmp(s, "fp16") == 0) return DRIFT_F16;
    if (strcmp(s, "fp32") == 0) return DRIFT_F32;
    return DRIFT_DTYPE_INVALID;
}

/* " (write \"fp32\")" when s is another spelling of an allowed dtype. */
static void dtype_hint(const char *s, char *buf, size_t n) {
    drift_dtype d = drift_dtype_parse(s);
    if (d == DRIFT_F32 || d == DRIFT_BF16 || d == DRIFT_F16)
        snprintf(buf, n, " (write \"%s\")", drift_dtype_name(d));
    else if (d == DRIFT_F64)
        snprintf(buf, n, " (fp64 is the replay oracle, not a plan dtype)");
    else
        buf[0] = '\0';
}

static const char *prov_name(drift_buffer_prov b) {
    switch (b) {
    case DRIFT_BUF_CPU_FP64: return "cpu";
    case DRIFT_BUF_DEVICE_FP32: return "device";
    case DRIFT_BUF_RECORDED: return "recorded";
    }
    return "invalid";
}

static int prov_parse(const char *s, drift_buffer_prov *out) {
    if (strcmp(s, "cpu") == 0) *out = DRIFT_BUF_CPU_FP64;
    else if (strcmp(s, "device") == 0) *out = DRIFT_BUF_DEVICE_FP32;
    else if (strcmp(s, "recorded") == 0) *out = DRIFT_BUF_RECORDED;
    else return -1;
    return 0;
}

/* ---- JSON parsing ------------------------------------------------------- */

typedef struct pctx {
    const char *src;
    drift_err *err;
} pctx;

static void where_of(const pctx *c, int line, int col, char *buf, size_t n) {
    snprintf(buf, n, "%s:%d:%d", c->src, line, col);
}

/* DRIFT_E_INPUT at v's position: "<path>: <message>". */
static int perr(const pctx *c, const drift_json_value *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int perr(const pctx *c, const drift_json_value *v, const char *path, const char *fmt, ...) {
    char where[512], msg[900];
    where_of(c, v ? v->line : 1, v ? v->col : 1, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return drift_err_set(c->err, DRIFT_E_INPUT, where, "%s: %s", path, msg);
}

/* A string value without NUL bytes, or an error "expected <what>". */
static int want_string(const pctx *c, const drift_json_value *v, const char *path, const char *what) {
    char got[96];
    if (v->type != DRIFT_JSON_STRING)
        return perr(c, v, path, "expected %s, got %s", what, drift_json_describe(v, got, sizeof got));
    if (strlen(v->str) != v->str_len) return perr(c, v, path, "expected %s, got a string containing \\u0000", what);
    return DRIFT_OK;
}

static int parse_dtype_field(const pctx *c, const drift_json_value *v, const char *path, drift_dtype *out) {
    int rc = want_string(c, v, path, "a dtype string (one of bf16, fp16, fp32)");
    if (rc != DRIFT_OK) return rc;
    drift_dtype d = plan_dtype(v->str);
    if (d == DRIFT_DTYPE_INVALID) {
        char got[96], hint[96];
        dtype_hint(v->str, hint, sizeof hint);
        return perr(c, v, path, "expected one of bf16, fp16, fp32, got %s%s",
                    drift_json_describe(v, got, sizeof got), hint);
    }
    *out = d;
    return DRIFT_OK;
}

static int parse_input_policy(const pctx *c, const drift_json_value *v, drift_plan *p) {
    char got[96];
    if (v->type != DRIFT_JSON_OBJECT)
        return perr(c, v, "input_dtype_policy", "expected an object with keys latents, cond, timestep, got %s",
                    drift_json_describe(v, got, sizeof got));
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_member *m = &v->members[i];
        int k = -1;
        for (int j = 0; j < DRIFT_INPUT_COUNT; j++)
            if (strcmp(m->key, k_input_names[j]) == 0) k = j;
        char path[160];
        if (k < 0) {
            char where[512];
            where_of(c, m->line, m->col, where, sizeof where);
            return drift_err_set(c->err, DRIFT_E_INPUT, where,
                                 "input_dtype_policy: unknown key \"%.60s\"; expected one of latents, cond, timestep",
                                 m->key);
        }
        snprintf(path, sizeof path, "input_dtype_policy.%s", k_input_names[k]);
        const drift_json_value *e = &m->value;
        static const char expect[] = "expected null, \"default\", \"fp32\", \"bf16\" or \"fp16\"";
        if (e->type == DRIFT_JSON_NULL) {
            p->inputs[k].kind = DRIFT_INPUT_PASSTHROUGH;
            p->inputs[k].dtype = DRIFT_DTYPE_INVALID;
            continue;
        }
        if (e->type != DRIFT_JSON_STRING || strlen(e->str) != e->str_len)
            return perr(c, e, path, "%s, got %s", expect, drift_json_describe(e, got, sizeof got));
        if (strcmp(e->str, "default") == 0) {
            p->inputs[k].kind = DRIFT_INPUT_DEFAULT;
            p->inputs[k].dtype = DRIFT_DTYPE_INVALID;
            continue;
        }
        drift_dtype d = plan_dtype(e->str);
        if (d == DRIFT_DTYPE_INVALID) {
            char hint[96];
            dtype_hint(e->str, hint, sizeof hint);
            if (!hint[0] && (strcmp(e->str, "null") == 0 || strcmp(e->str, "passthrough") == 0))
                snprintf(hint, sizeof hint, " (pass-through is JSON null, without quotes)");
            return perr(c, e, path, "%s, got %s%s", expect, drift_json_describe(e, got, sizeof got), hint);
        }
        p->inputs[k].kind = DRIFT_INPUT_EXPLICIT;
        p->inputs[k].dtype = d;
    }
    return DRIFT_OK;
}

static int parse_glob(const pctx *c, const drift_json_value *v, const char *path) {
    int rc = want_string(c, v, path, "a glob string");
    if (rc != DRIFT_OK) return rc;
    if (v->str_len == 0) return perr(c, v, path, "expected a non-empty glob, got \"\"");
    if (v->str_len > GLOB_MAX) return perr(c, v, path, "glob is %zu bytes, over the limit of %d", v->str_len, GLOB_MAX);
    return DRIFT_OK;
}

static int add_parsed_pattern(const pctx *c, drift_plan *p, const drift_json_value *glob, drift_dtype d) {
    char origin[512];
    where_of(c, glob->line, glob->col, origin, sizeof origin);
    if (plan_push_pattern(p, glob->str, d, origin) != DRIFT_OK)
        return drift_err_set(c->err, DRIFT_E_NOMEM, origin, "out of memory");
    return DRIFT_OK;
}

static int parse_patterns(const pctx *c, const drift_json_value *v, drift_plan *p) {
    char got[96], path[160];
    int rc;
    if (v->type == DRIFT_JSON_ARRAY) {
        for (size_t i = 0; i < v->n_items; i++) {
            const drift_json_value *e = &v->items[i];
            snprintf(path, sizeof path, "param_dtype_patterns[%zu]", i);
            if (e->type != DRIFT_JSON_ARRAY)
                return perr(c, e, path, "expected a [glob, dtype] pair, got %s",
                            drift_json_describe(e, got, sizeof got));
            if (e->n_items != 2)
                return perr(c, e, path, "expected a [glob, dtype] pair (2 elements), got %zu element%s", e->n_items,
                            e->n_items == 1 ? "" : "s");
            snprintf(path, sizeof path, "param_dtype_patterns[%zu][0]", i);
            if ((rc = parse_glob(c, &e->items[0], path)) != DRIFT_OK) return rc;
            snprintf(path, sizeof path, "param_dtype_patterns[%zu][1]", i);
            drift_dtype d;
            if ((rc = parse_dtype_field(c, &e->items[1], path, &d)) != DRIFT_OK) return rc;
            if ((rc = add_parsed_pattern(c, p, &e->items[0], d)) != DRIFT_OK) return rc;
        }
        return DRIFT_OK;
    }
    if (v->type == DRIFT_JSON_OBJECT) {
        /* {"glob": "dtype", ...} in written order; the glob's position is its key's */
        for (size_t i = 0; i < v->n_members; i++) {
            const drift_json_member *m = &v->members[i];
            drift_json_value key;
            memset(&key, 0, sizeof key);
            key.type = DRIFT_JSON_STRING;
            key.line = m->line;
            key.col = m->col;
            key.str = m->key;
            key.str_len = m->key_len;
            snprintf(path, sizeof path, "param_dtype_patterns[\"%.100s\"]", m->key);
            if ((rc = parse_glob(c, &key, "param_dtype_patterns (key)")) != DRIFT_OK) return rc;
            drift_dtype d;
            if ((rc = parse_dtype_field(c, &m->value, path, &d)) != DRIFT_OK) return rc;
            if ((rc = add_parsed_pattern(c, p, &key, d)) != DRIFT_OK) return rc;
        }
        return DRIFT_OK;
    }
    return perr(c, v, "param_dtype_patterns",
                "expected an array of [glob, dtype] pairs (or an object {glob: dtype}), got %s",
                drift_json_describe(v, got, sizeof got));
}

static int parse_provenance(const pctx *c, const drift_json_value *v, drift_plan *p) {
    char got[96];
    if (v->type != DRIFT_JSON_OBJECT)
        return perr(c, v, "buffer_provenance", "expected an object like {\"rope\": \"cpu\"}, got %s",
                    drift_json_describe(v, got, sizeof got));
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_member *m = &v->members[i];
        if (strcmp(m->key, "rope") != 0) {
            char where[512];
            where_of(c, m->line, m->col, where, sizeof where);
            return drift_err_set(c->err, DRIFT_E_INPUT, where,
                                 "buffer_provenance: unknown key \"%.60s\"; expected rope", m->key);
        }
        const drift_json_value *e = &m->value;
        if (e->type != DRIFT_JSON_STRING || prov_parse(e->str, &p->rope_provenance) != 0 ||
            strlen(e->str) != e->str_len)
            return perr(c, e, "buffer_provenance.rope", "expected one of \"cpu\", \"device\", \"recorded\", got %s",
                        drift_json_describe(e, got, sizeof got));
    }
    return DRIFT_OK;
}

/* Fills p (initialised by the caller) from a parsed document. */
static int plan_from_dom(const pctx *c, const drift_json_value *root, drift_plan *p) {
    char got[96];
    int rc;
    if (root->type != DRIFT_JSON_OBJECT)
        return perr(c, root, "plan", "expected a JSON object {\"name\": ..., \"param_dtype_patterns\": ...}, got %s",
                    drift_json_describe(root, got, sizeof got));
    for (size_t i = 0; i < root->n_members; i++) {
        const drift_json_member *m = &root->members[i];
        const drift_json_value *v = &m->value;
        const char *k = m->key;
        if (strcmp(k, "name") == 0) {
            if ((rc = want_string(c, v, "name", "a string")) != DRIFT_OK) return rc;
            if (v->str_len >= sizeof p->name)
                return perr(c, v, "name", "expected at most %zu bytes, got %zu", sizeof p->name - 1, v->str_len);
            memcpy(p->name, v->str, v->str_len + 1);
        } else if (strcmp(k, "fsdp_master_dtype") == 0) {
            if ((rc = parse_dtype_field(c, v, k, &p->fsdp_master_dtype)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "fsdp_reduce_dtype") == 0) {
            if ((rc = parse_dtype_field(c, v, k, &p->fsdp_reduce_dtype)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "diffusion_forward_dtype") == 0) {
            if ((rc = parse_dtype_field(c, v, k, &p->diffusion_forward_dtype)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "sglang_dit_precision") == 0) {
            if ((rc = parse_dtype_field(c, v, k, &p->sglang_dit_precision)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "input_dtype_policy") == 0) {
            if ((rc = parse_input_policy(c, v, p)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "param_dtype_patterns") == 0) {
            if ((rc = parse_patterns(c, v, p)) != DRIFT_OK) return rc;
        } else if (strcmp(k, "buffer_provenance") == 0) {
            if ((rc = parse_provenance(c, v, p)) != DRIFT_OK) return rc;
        } else {
            char where[512];
            where_of(c, m->line, m->col, where, sizeof where);
            return drift_err_set(c->err, DRIFT_E_INPUT, where, "unknown key \"%.60s\"; expected one of %s", k,
                                 k_plan_keys);
        }
    }
    return DRIFT_OK;
}

/* Shared tail of parse_json/load_file: root (owned, freed here) -> p. */
static int plan_finish(drift_plan *p, drift_json_value *root, const char *src, drift_err *err) {
    pctx c = {src, err};
    drift_plan tmp;
    drift_plan_init(&tmp);
    snprintf(tmp.source, sizeof tmp.source, "%s", src);
    int rc = plan_from_dom(&c, root, &tmp);
    drift_json_free(root);
    if (rc != DRIFT_OK) {
        drift_plan_free(&tmp);
        return rc;
    }
    *p = tmp;
    return DRIFT_OK;
}

int drift_plan_parse_json(drift_plan *p, const char *text, size_t len, const char *source_name, drift_err *err) {
    if (!p) return drift_err_set(err, DRIFT_E_INTERNAL, "plan", "drift_plan_parse_json: NULL plan");
    drift_plan_init(p);
    const char *src = source_name ? source_name : "<plan>";
    drift_json_value *root = NULL;
    int rc = drift_json_parse(text, len, src, &root, err);
    if (rc != DRIFT_OK) return rc;
    return plan_finish(p, root, src, err);
}

int drift_plan_load_file(drift_plan *p, const char *path, drift_err *err) {
    if (!p) return drift_err_set(err, DRIFT_E_INTERNAL, "plan", "drift_plan_load_file: NULL plan");
    drift_plan_init(p);
    if (!path) return drift_err_set(err, DRIFT_E_INTERNAL, "plan", "drift_plan_load_file: NULL path");
    drift_json_value *root = NULL;
    int rc = drift_json_parse_file(path, &root, err);
    if (rc != DRIFT_OK) return rc;
    return plan_finish(p, root, path, err);
}

/* ---- flags -------------------------------------------------------------- */

static const char *const k_flags[] = {
    "--fsdp-master-dtype", "--fsdp-reduce-dtype", "--diffusion-forward-dtype", "--sglang-dit-precision",
    "--param-dtype",       "--input-dtype",       "--rope-provenance",         "--plan-name",
};

int drift_plan_is_flag(const char *name) {
    if (!name) return 0;
    for (size_t i = 0; i < sizeof k_flags / sizeof k_flags[0]; i++)
        if (strcmp(name, k_flags[i]) == 0) return 1;
    return 0;
}

static int flag_dtype(const char *flag, const char *value, drift_dtype *out, drift_err *err) {
    drift_dtype d = plan_dtype(value);
    if (d == DRIFT_DTYPE_INVALID) {
        char hint[96];
        dtype_hint(value, hint, sizeof hint);
        return drift_err_set(err, DRIFT_E_USAGE, flag, "expected one of bf16, fp16, fp32, got \"%.100s\"%s", value,
                             hint);
    }
    *out = d;
    return DRIFT_OK;
}

int drift_plan_apply_flag(drift_plan *p, const char *name, const char *value, drift_err *err) {
    if (!p || !name) return drift_err_set(err, DRIFT_E_INTERNAL, "plan", "drift_plan_apply_flag: NULL argument");
    if (!drift_plan_is_flag(name))
        return drift_err_set(err, DRIFT_E_USAGE, name, "not a plan flag; expected one of --fsdp-master-dtype, "
                             "--fsdp-reduce-dtype, --diffusion-forward-dtype, --sglang-dit-precision, "
                             "--param-dtype, --input-dtype, --rope-provenance, --plan-name");
    if (!value) return drift_err_set(err, DRIFT_E_USAGE, name, "needs a value");
    if (strcmp(name, "--fsdp-master-dtype") == 0) return flag_dtype(name, value, &p->fsdp_master_dtype, err);
    if (strcmp(name, "--fsdp-reduce-dtype") == 0) return flag_dtype(name, value, &p->fsdp_reduce_dtype, err);
    if (strcmp(name, "--diffusion-forward-dtype") == 0)
        return flag_dtype(name, value, &p->diffusion_forward_dtype, err);
    if (strcmp(name, "--sglang-dit-precision") == 0) return flag_dtype(name, value, &p->sglang_dit_precision, err);
    if (strcmp(name, "--plan-name") == 0) {
        if (!value[0]) return drift_err_set(err, DRIFT_E_USAGE, name, "expected a non-empty name");
        /* A plan is JSON: its strings are UTF-8 (and would not survive a round trip otherwise). */
        if (!drift_json_utf8_valid(value, strlen(value)))
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected a name in valid UTF-8");
        if (strlen(value) >= sizeof p->name)
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected at most %zu bytes, got %zu", sizeof p->name - 1,
                                 strlen(value));
        snprintf(p->name, sizeof p->name, "%s", value);
        return DRIFT_OK;
    }
    if (strcmp(name, "--rope-provenance") == 0) {
        if (prov_parse(value, &p->rope_provenance) != 0)
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected one of cpu, device, recorded, got \"%.100s\"",
                                 value);
        return DRIFT_OK;
    }
    if (strcmp(name, "--param-dtype") == 0) {
        const char *eq = strrchr(value, '=');
        if (!eq)
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected PATTERN=DTYPE (e.g. '*.norm2.*=fp32'), got \"%.100s\"",
                                 value);
        size_t gl = (size_t)(eq - value);
        if (gl == 0)
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected PATTERN=DTYPE with a non-empty PATTERN, got \"%.100s\"",
                                 value);
        if (gl > GLOB_MAX)
            return drift_err_set(err, DRIFT_E_USAGE, name, "PATTERN is %zu bytes, over the limit of %d", gl, GLOB_MAX);
        if (!drift_json_utf8_valid(value, gl))
            return drift_err_set(err, DRIFT_E_USAGE, name, "expected PATTERN in valid UTF-8");
        drift_dtype d = plan_dtype(eq + 1);
        if (d == DRIFT_DTYPE_INVALID) {
            char hint[96];
            dtype_hint(eq + 1, hint, sizeof hint);
            return drift_err_set(err, DRIFT_E_USAGE, name, "%.100s: expected DTYPE one of bf16, fp16, fp32, got \"%.100s\"%s",
                                 value, eq + 1, hint);
        }
        char *glob = drift_malloc(gl + 1);
        if (!glob) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        memcpy(glob, value, gl);
        glob[gl] = '\0';
        int rc = plan_push_pattern(p, glob, d, name);
        free(glob);
        if (rc != DRIFT_OK) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        return DRIFT_OK;
    }
    /* --input-dtype KEY=VALUE */
    const char *eq = strchr(value, '=');
    int k = -1;
    if (eq) {
        for (int j = 0; j < DRIFT_INPUT_COUNT; j++)
            if (strlen(k_input_names[j]) == (size_t)(eq - value) &&
                strncmp(value, k_input_names[j], (size_t)(eq - value)) == 0)
                k = j;
    }
    if (k < 0)
        return drift_err_set(err, DRIFT_E_USAGE, name,
                             "expected KEY=VALUE with KEY one of latents, cond, timestep, got \"%.100s\"", value);
    const char *v = eq + 1;
    if (strcmp(v, "default") == 0) {
        p->inputs[k].kind = DRIFT_INPUT_DEFAULT;
        p->inputs[k].dtype = DRIFT_DTYPE_INVALID;
    } else if (strcmp(v, "null") == 0 || strcmp(v, "passthrough") == 0) {
        p->inputs[k].kind = DRIFT_INPUT_PASSTHROUGH;
        p->inputs[k].dtype = DRIFT_DTYPE_INVALID;
    } else {
        drift_dtype d = plan_dtype(v);
        if (d == DRIFT_DTYPE_INVALID) {
            char hint[96];
            dtype_hint(v, hint, sizeof hint);
            return drift_err_set(err, DRIFT_E_USAGE, name,
                                 "%s: expected default, null (pass-through) or one of bf16, fp16, fp32, got \"%.100s\"%s",
                                 k_input_names[k], v, hint);
        }
        p->inputs[k].kind = DRIFT_INPUT_EXPLICIT;
        p->inputs[k].dtype = d;
    }
    return DRIFT_OK;
}

/* ---- serialisation ------------------------------------------------------ */

char *drift_plan_to_json(const drift_plan *p) {
    if (!p) return NULL;
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "name", p->name);
    drift_json_buf_field_string(&b, "fsdp_master_dtype", drift_dtype_name(p->fsdp_master_dtype));
    drift_json_buf_field_string(&b, "fsdp_reduce_dtype", drift_dtype_name(p->fsdp_reduce_dtype));
    drift_json_buf_field_string(&b, "diffusion_forward_dtype", drift_dtype_name(p->diffusion_forward_dtype));
    drift_json_buf_field_string(&b, "sglang_dit_precision", drift_dtype_name(p->sglang_dit_precision));
    drift_json_buf_add_key(&b, "input_dtype_policy");
    drift_json_buf_begin_object(&b);
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        drift_json_buf_add_key(&b, k_input_names[i]);
        switch (p->inputs[i].kind) {
        case DRIFT_INPUT_DEFAULT: drift_json_buf_add_string(&b, "default"); break;
        case DRIFT_INPUT_EXPLICIT: drift_json_buf_add_string(&b, drift_dtype_name(p->inputs[i].dtype)); break;
        default: drift_json_buf_add_null(&b); break;
        }
    }
    drift_json_buf_end_object(&b);
    drift_json_buf_add_key(&b, "param_dtype_patterns");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < p->n_patterns; i++) {
        drift_json_buf_begin_array(&b);
        drift_json_buf_add_string(&b, p->patterns[i].glob);
        drift_json_buf_add_string(&b, drift_dtype_name(p->patterns[i].dtype));
        drift_json_buf_end_array(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "buffer_provenance");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "rope", prov_name(p->rope_provenance));
    drift_json_buf_end_object(&b);
    drift_json_buf_end_object(&b);
    return drift_json_buf_take(&b);
}

/* ---- compile_param_dtype_maps ------------------------------------------- */

static void wrap_map_free(drift_wrap_map *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->entries[i].local_fqn);
    free(m->entries);
    free(m->wrap);
    memset(m, 0, sizeof *m);
}

void drift_compiled_plan_free(drift_compiled_plan *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_wraps; i++) wrap_map_free(&c->wraps[i]);
    free(c->wraps);
    wrap_map_free(&c->root);
    free(c->param_dtype);
    for (size_t i = 0; i < c->n_warnings; i++) free(c->warnings[i]);
    free(c->warnings);
    memset(c, 0, sizeof *c);
}

static int add_warning(drift_compiled_plan *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add_warning(drift_compiled_plan *c, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char **w = drift_realloc(c->warnings, (c->n_warnings + 1) * sizeof *w);
    if (!w) return DRIFT_E_NOMEM;
    c->warnings = w;
    c->warnings[c->n_warnings] = dup_str(msg);
    if (!c->warnings[c->n_warnings]) return DRIFT_E_NOMEM;
    c->n_warnings++;
    return DRIFT_OK;
}

static int is_plan_dtype(drift_dtype d) { return d == DRIFT_F32 || d == DRIFT_BF16 || d == DRIFT_F16; }

/* Error for a pattern that matches nothing, with a hint when a likely
 * intended variant would have matched. */
static int no_match_error(const drift_param_pattern *pat, const drift_param_table *t, drift_err *err) {
    char hint[700] = "";
    const char *g = pat->glob;
    if (t->n > 0 && strncmp(g, "*.", 2) == 0) {
        for (size_t i = 0; i < t->n; i++) {
            if (drift_fnmatch(g + 2, t->params[i].fqn)) {
                snprintf(hint, sizeof hint,
                         "; fnmatch's \"*.\" needs a literal dot before the rest, so a top-level name cannot "
                         "match (\"%.200s\" would match \"%.200s\")",
                         g + 2, t->params[i].fqn);
                break;
            }
        }
    }
    if (!hint[0] && t->n > 0 && g[0] != '*' && strlen(g) < GLOB_MAX) {
        char star[GLOB_MAX + 3];
        snprintf(star, sizeof star, "*.%s", g);
        for (size_t i = 0; i < t->n; i++) {
            if (drift_fnmatch(star, t->params[i].fqn)) {
                snprintf(hint, sizeof hint,
                         "; patterns match whole root FQNs (\"%.200s\" would match \"%.200s\")", star,
                         t->params[i].fqn);
                break;
            }
        }
    }
    if (!hint[0] && strchr(g, '\\'))
        snprintf(hint, sizeof hint, "; fnmatch has no backslash escapes (use [*] or [?] for a literal * or ?)");
    return drift_err_set(err, DRIFT_E_INPUT, pat->origin,
                         "param_dtype_patterns: pattern \"%.300s\" (-> %s) matches no parameter of the model "
                         "(%zu parameters%s%.200s%s)%s",
                         g, drift_dtype_name(pat->dtype), t->n, t->n ? ", e.g. \"" : "",
                         t->n ? t->params[0].fqn : "", t->n ? "\"" : "", hint);
}

static const char *dtype_desc(const drift_compiled_plan *c, const int *assign, size_t i, const drift_plan *plan,
                              char *buf, size_t n) {
    if (assign[i] < 0)
        snprintf(buf, n, "%s, no override", drift_dtype_name(c->param_dtype[i]));
    else if (c->param_dtype[i] == plan->diffusion_forward_dtype)
        snprintf(buf, n, "%s, no override: pattern \"%.100s\" at %.100s assigns the forward dtype",
                 drift_dtype_name(c->param_dtype[i]), plan->patterns[assign[i]].glob,
                 plan->patterns[assign[i]].origin);
    else
        snprintf(buf, n, "%s from pattern \"%.100s\" at %.100s", drift_dtype_name(c->param_dtype[i]),
                 plan->patterns[assign[i]].glob, plan->patterns[assign[i]].origin);
    return buf;
}

int drift_plan_compile(const drift_plan *plan, const drift_param_table *table, drift_compiled_plan *out,
                       drift_err *err) {
    if (!plan || !table || !out)
        return drift_err_set(err, DRIFT_E_INTERNAL, "plan compile", "drift_plan_compile: NULL argument");
    memset(out, 0, sizeof *out);
    int rc = DRIFT_OK;
    int *assign = NULL;
    drift_compiled_plan c;
    memset(&c, 0, sizeof c);
    const drift_dtype fwd = plan->diffusion_forward_dtype;
    const size_t n = table->n;

    if (!is_plan_dtype(fwd)) {
        rc = drift_err_set(err, DRIFT_E_INPUT, plan->source,
                           "diffusion_forward_dtype: expected one of bf16, fp16, fp32, got %s", drift_dtype_name(fwd));
        goto fail;
    }
    if (plan->n_patterns > DRIFT_PLAN_MAX_PATTERNS) {
        rc = drift_err_set(err, DRIFT_E_INPUT, plan->source,
                           "param_dtype_patterns: %zu patterns, expected at most %d", plan->n_patterns,
                           DRIFT_PLAN_MAX_PATTERNS);
        goto fail;
    }
    uint64_t work = 0;
    for (size_t k = 0; k < plan->n_patterns; k++) {
        const drift_param_pattern *pat = &plan->patterns[k];
        size_t wild = 0, len = pat->glob ? strlen(pat->glob) : 0;
        for (size_t i = 0; i < len; i++) wild += pat->glob[i] == '*' || pat->glob[i] == '?' || pat->glob[i] == '[';
        if (wild > DRIFT_PLAN_MAX_WILDCARDS) {
            rc = drift_err_set(err, DRIFT_E_INPUT, pat->origin,
                               "param_dtype_patterns: pattern \"%.60s...\" has %zu wildcard characters, expected at "
                               "most %d",
                               pat->glob, wild, DRIFT_PLAN_MAX_WILDCARDS);
            goto fail;
        }
        work += (uint64_t)(len + 1) * (uint64_t)(table->n ? table->n : 1);
        if (work > DRIFT_PLAN_MATCH_BUDGET) {
            rc = drift_err_set(err, DRIFT_E_INPUT, pat->origin,
                               "param_dtype_patterns: %zu patterns against %zu parameters exceed the matching limit "
                               "(glob bytes x parameters <= %llu) at pattern %zu",
                               plan->n_patterns, table->n, (unsigned long long)DRIFT_PLAN_MATCH_BUDGET, k);
            goto fail;
        }
        if (!pat->glob || !pat->glob[0]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, pat->origin, "param_dtype_patterns: empty pattern");
            goto fail;
        }
        if (!is_plan_dtype(pat->dtype)) {
            rc = drift_err_set(err, DRIFT_E_INPUT, pat->origin,
                               "param_dtype_patterns: pattern \"%.300s\": expected one of bf16, fp16, fp32, got %s",
                               pat->glob, drift_dtype_name(pat->dtype));
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) {
        int w = table->params[i].wrap;
        if (w < -1 || (w >= 0 && (size_t)w >= table->n_wraps)) {
            rc = drift_err_set(err, DRIFT_E_INTERNAL, table->params[i].fqn,
                               "parameter table row %zu has wrap index %d (table has %zu wraps)", i, w,
                               table->n_wraps);
            goto fail;
        }
    }

    /* pass 1: expand in declaration order; later patterns override earlier */
    assign = drift_malloc((n ? n : 1) * sizeof *assign);
    c.param_dtype = drift_malloc((n ? n : 1) * sizeof *c.param_dtype);
    if (!assign || !c.param_dtype) goto nomem;
    c.n_params = n;
    for (size_t i = 0; i < n; i++) assign[i] = -1;
    for (size_t k = 0; k < plan->n_patterns; k++) {
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) {
            if (drift_fnmatch(plan->patterns[k].glob, table->params[i].fqn)) {
                assign[i] = (int)k;
                hits++;
            }
        }
        if (hits == 0) {
            rc = no_match_error(&plan->patterns[k], table, err);
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++)
        c.param_dtype[i] = assign[i] >= 0 ? plan->patterns[assign[i]].dtype : fwd;

    /* pass 2: claim by wrap, re-key to the wrap-local FQN; reject a local FQN
     * shared by two parameters of one wrap that need different dtypes */
    for (size_t i = 0; i < n; i++) {
        const char *li = drift_param_table_local_name(table, i);
        for (size_t j = i + 1; j < n; j++) {
            if (table->params[j].wrap != table->params[i].wrap) continue;
            if (strcmp(li, drift_param_table_local_name(table, j)) != 0) continue;
            if (c.param_dtype[i] == c.param_dtype[j]) continue;
            int w = table->params[i].wrap;
            char di[400], dj[400];
            size_t at = assign[j] >= 0 ? (size_t)assign[j] : (size_t)assign[i];
            rc = drift_err_set(err, DRIFT_E_INPUT, plan->patterns[at].origin,
                               "param_dtype_patterns: parameters \"%.200s\" (%s) and \"%.200s\" (%s) share the "
                               "wrap-local FQN \"%.200s\" in wrap \"%.200s\" but need different dtypes",
                               table->params[i].fqn, dtype_desc(&c, assign, i, plan, di, sizeof di),
                               table->params[j].fqn, dtype_desc(&c, assign, j, plan, dj, sizeof dj), li,
                               w >= 0 ? table->wraps[w] : "(root)");
            goto fail;
        }
    }
    if (table->n_wraps > 0) {
        c.wraps = drift_calloc(table->n_wraps, sizeof *c.wraps);
        if (!c.wraps) goto nomem;
    }
    c.n_wraps = table->n_wraps;
    for (size_t w = 0; w < table->n_wraps; w++)
        if (!(c.wraps[w].wrap = dup_str(table->wraps[w]))) goto nomem;
    if (!(c.root.wrap = dup_str(""))) goto nomem;
    for (size_t i = 0; i < n; i++) {
        if (c.param_dtype[i] == fwd) continue; /* equal to the group default: compiles to nothing */
        int w = table->params[i].wrap;
        drift_wrap_map *m = w >= 0 ? &c.wraps[w] : &c.root;
        drift_param_override *e = drift_realloc(m->entries, (m->n + 1) * sizeof *e);
        if (!e) goto nomem;
        m->entries = e;
        drift_param_override *o = &e[m->n];
        o->local_fqn = dup_str(drift_param_table_local_name(table, i));
        if (!o->local_fqn) goto nomem;
        o->param_index = i;
        o->dtype = c.param_dtype[i];
        o->pattern_index = (size_t)assign[i];
        m->n++;
        c.override_count++;
        c.override_numel += table->params[i].numel;
    }

    if (plan->diffusion_forward_dtype != plan->sglang_dit_precision &&
        add_warning(&c, "diffusion_forward_dtype %s != sglang_dit_precision %s: the trainer's and the rollout's "
                        "forwards round differently, so the PPO ratio drifts off 1.0 from rounding alone",
                    drift_dtype_name(plan->diffusion_forward_dtype),
                    drift_dtype_name(plan->sglang_dit_precision)) != DRIFT_OK)
        goto nomem;
    if (plan->fsdp_reduce_dtype == DRIFT_BF16 &&
        add_warning(&c, "fsdp_reduce_dtype is bf16: gradients are reduce-scattered in bf16 and lose precision in "
                        "the sum (the default is fp32)") != DRIFT_OK)
        goto nomem;

    free(assign);
    *out = c;
    return DRIFT_OK;
nomem:
    rc = drift_err_set(err, DRIFT_E_NOMEM, "plan compile", "out of memory");
fail:
    free(assign);
    drift_compiled_plan_free(&c);
    return rc;
}
