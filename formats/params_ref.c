/* Parameters by reference: the manifest and its JSON (params_ref.h). */
#include "formats/params_ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/hash64.h"
#include "formats/json.h"

void drift_params_ref_init(drift_params_ref *ref) { memset(ref, 0, sizeof *ref); }

void drift_params_ref_free(drift_params_ref *ref) {
    if (!ref) return;
    for (size_t i = 0; i < ref->n; i++) {
        drift_free(ref->t[i].name);
        drift_free(ref->t[i].file);
    }
    drift_free(ref->t);
    drift_free(ref->weights_root);
    drift_free(ref->index);
    memset(ref, 0, sizeof *ref);
}

const char *drift_params_ref_dtype_name(drift_dtype dt) {
    switch (dt) {
    case DRIFT_F32: return "F32";
    case DRIFT_BF16: return "BF16";
    case DRIFT_F16: return "F16";
    case DRIFT_F64: return "F64";
    default: return NULL;
    }
}

drift_dtype drift_params_ref_dtype_parse(const char *s) {
    if (!s) return DRIFT_DTYPE_INVALID;
    if (strcmp(s, "F32") == 0) return DRIFT_F32;
    if (strcmp(s, "BF16") == 0) return DRIFT_BF16;
    if (strcmp(s, "F16") == 0) return DRIFT_F16;
    if (strcmp(s, "F64") == 0) return DRIFT_F64;
    return DRIFT_DTYPE_INVALID;
}

const char *drift_params_ref_file_problem(const char *file) {
    if (!file || !*file) return "expected a non-empty file name";
    size_t n = strlen(file);
    if (n >= DRIFT_PARAMS_REF_PATH_MAX) return "file name too long";
    if (file[0] == '/') return "expected a path relative to the weights root, not an absolute one";
    if (strchr(file, '\\')) return "a backslash is not allowed";
    for (const char *p = file; *p; p++)
        if ((unsigned char)*p < 0x20) return "control characters are not allowed";
    for (const char *p = file; *p;) { /* no ".." component */
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return "a '..' component leaves the weights root";
        if (len == 0) return "an empty path component";
        p += len + (e ? 1 : 0);
    }
    return NULL;
}

long drift_params_ref_find(const drift_params_ref *ref, const char *name) {
    for (size_t i = 0; i < ref->n; i++)
        if (strcmp(ref->t[i].name, name) == 0) return (long)i;
    return -1;
}

int drift_params_ref_add(drift_params_ref *ref, const char *name, const char *file, drift_dtype dtype, int ndim,
                         const int64_t *shape, uint64_t hash, drift_err *err) {
    const char *fp = drift_params_ref_file_problem(file);
    if (!name || !*name || strlen(name) >= DRIFT_MAX_FQN)
        return drift_err_set(err, DRIFT_E_USAGE, "params_ref", "tensor name: expected 1..%d bytes", DRIFT_MAX_FQN - 1);
    if (fp) return drift_err_set(err, DRIFT_E_USAGE, name, "tensor '%s': file '%s': %s", name, file ? file : "", fp);
    if (!drift_params_ref_dtype_name(dtype))
        return drift_err_set(err, DRIFT_E_USAGE, name, "tensor '%s': dtype must be F32, BF16, F16 or F64", name);
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim && !shape))
        return drift_err_set(err, DRIFT_E_USAGE, name, "tensor '%s': ndim must be in 0..%d", name, DRIFT_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && numel > ((int64_t)1 << 48) / shape[d]))
            return drift_err_set(err, DRIFT_E_USAGE, name, "tensor '%s': dims must be >= 0 with at most 2^48 elements", name);
        numel *= shape[d];
    }
    if (ref->n == ref->cap) {
        size_t nc = ref->cap ? ref->cap * 2 : 64;
        drift_params_ref_tensor *nt = drift_reallocarray(ref->t, nc, sizeof *nt);
        if (!nt) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        ref->t = nt;
        ref->cap = nc;
    }
    drift_params_ref_tensor *t = &ref->t[ref->n];
    memset(t, 0, sizeof *t);
    t->name = drift_strdup(name);
    t->file = drift_strdup(file);
    if (!t->name || !t->file) {
        drift_free(t->name);
        drift_free(t->file);
        return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->numel = numel;
    t->hash = hash;
    ref->n++;
    return DRIFT_OK;
}

int drift_params_ref_to_json(const drift_params_ref *ref, char **json, size_t *len, drift_err *err) {
    *json = NULL;
    *len = 0;
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "format", DRIFT_PARAMS_REF_FORMAT);
    drift_json_buf_field_int(&b, "version", DRIFT_PARAMS_REF_VERSION);
    drift_json_buf_field_string(&b, "hash", DRIFT_HASH64_NAME);
    if (ref->weights_root) drift_json_buf_field_string(&b, "weights_root", ref->weights_root);
    else drift_json_buf_field_null(&b, "weights_root");
    if (ref->index) drift_json_buf_field_string(&b, "index", ref->index);
    else drift_json_buf_field_null(&b, "index");
    drift_json_buf_add_key(&b, "tensors");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < ref->n; i++) {
        const drift_params_ref_tensor *t = &ref->t[i];
        char hex[17];
        drift_hash64_hex(t->hash, hex);
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", t->name);
        drift_json_buf_field_string(&b, "file", t->file);
        drift_json_buf_field_string(&b, "dtype", drift_params_ref_dtype_name(t->dtype));
        drift_json_buf_add_key(&b, "shape");
        drift_json_buf_begin_array(&b);
        for (int d = 0; d < t->ndim; d++) drift_json_buf_add_int(&b, t->shape[d]);
        drift_json_buf_end_array(&b);
        drift_json_buf_field_string(&b, "hash", hex);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    int st = drift_json_buf_status(&b);
    char *s = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    if (st || !s) {
        drift_free(s);
        return drift_err_set(err, DRIFT_E_NOMEM, "params_ref", "out of memory writing the parameter reference");
    }
    *json = s;
    *len = strlen(s);
    return DRIFT_OK;
}

/* A member of obj of type ty, or an error naming it. */
static const drift_json_value *need(const drift_json_value *obj, const char *key, drift_json_type ty, int nullable,
                                    const char *src, const char *ctx, drift_err *err, int *rc) {
    const drift_json_value *v = drift_json_object_get(obj, key);
    char d[64];
    if (v && (v->type == ty || (nullable && v->type == DRIFT_JSON_NULL))) return v;
    *rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'%s': expected %s%s, got %s", ctx, key, drift_json_type_name(ty),
                        nullable ? " or null" : "", v ? drift_json_describe(v, d, sizeof d) : "nothing");
    return NULL;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const drift_params_ref_tensor *const *)a)->name, (*(const drift_params_ref_tensor *const *)b)->name);
}

/* Duplicate names, found by sorting (a hostile file may list many). */
static int check_unique(const drift_params_ref *ref, const char *src, drift_err *err) {
    if (ref->n < 2) return DRIFT_OK;
    const drift_params_ref_tensor **v = drift_malloc(ref->n * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, src, "out of memory");
    for (size_t i = 0; i < ref->n; i++) v[i] = &ref->t[i];
    qsort(v, ref->n, sizeof *v, cmp_name);
    int rc = DRIFT_OK;
    for (size_t i = 1; i < ref->n && !rc; i++)
        if (strcmp(v[i - 1]->name, v[i]->name) == 0)
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "tensors: '%s' is listed twice", v[i]->name);
    drift_free(v);
    return rc;
}

int drift_params_ref_parse(drift_params_ref *ref, const char *json, size_t len, const char *source, drift_err *err) {
    const char *src = source ? source : "params_ref";
    drift_json_value *root = NULL;
    int rc = drift_json_parse(json, len, src, &root, err);
    if (rc) return rc;
    drift_params_ref out;
    drift_params_ref_init(&out);
    const drift_json_value *v;
    if (root->type != DRIFT_JSON_OBJECT) {
        rc = drift_err_set(err, DRIFT_E_INPUT, src, "expected a JSON object");
        goto done;
    }
    if (!(v = need(root, "format", DRIFT_JSON_STRING, 0, src, "", err, &rc))) goto done;
    if (strcmp(v->str, DRIFT_PARAMS_REF_FORMAT) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, src, "'format': expected \"%s\"", DRIFT_PARAMS_REF_FORMAT);
        goto done;
    }
    if (!(v = need(root, "version", DRIFT_JSON_NUMBER, 0, src, "", err, &rc))) goto done;
    if (!v->is_int || v->integer != DRIFT_PARAMS_REF_VERSION) {
        rc = drift_err_set(err, DRIFT_E_INPUT, src, "'version': expected %d", DRIFT_PARAMS_REF_VERSION);
        goto done;
    }
    if (!(v = need(root, "hash", DRIFT_JSON_STRING, 0, src, "", err, &rc))) goto done;
    if (strcmp(v->str, DRIFT_HASH64_NAME) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, src, "'hash': expected \"%s\" (the only hash drift knows), got \"%s\"",
                           DRIFT_HASH64_NAME, v->str);
        goto done;
    }
    if (!(v = need(root, "weights_root", DRIFT_JSON_STRING, 1, src, "", err, &rc))) goto done;
    if (v->type == DRIFT_JSON_STRING) {
        if (v->str_len == 0 || v->str_len >= DRIFT_PARAMS_REF_PATH_MAX || strlen(v->str) != v->str_len) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "'weights_root': expected a path of 1..%d bytes",
                               DRIFT_PARAMS_REF_PATH_MAX - 1);
            goto done;
        }
        if (!(out.weights_root = drift_strdup(v->str))) { rc = drift_err_set(err, DRIFT_E_NOMEM, src, "out of memory"); goto done; }
    }
    if (!(v = need(root, "index", DRIFT_JSON_STRING, 1, src, "", err, &rc))) goto done;
    if (v->type == DRIFT_JSON_STRING) {
        const char *p = strlen(v->str) == v->str_len ? drift_params_ref_file_problem(v->str) : "a NUL byte";
        if (p) { rc = drift_err_set(err, DRIFT_E_INPUT, src, "'index': %s", p); goto done; }
        if (!(out.index = drift_strdup(v->str))) { rc = drift_err_set(err, DRIFT_E_NOMEM, src, "out of memory"); goto done; }
    }
    const drift_json_value *ts = need(root, "tensors", DRIFT_JSON_ARRAY, 0, src, "", err, &rc);
    if (!ts) goto done;
    for (size_t i = 0; i < ts->n_items; i++) {
        const drift_json_value *e = &ts->items[i];
        char ctx[64];
        snprintf(ctx, sizeof ctx, "tensors[%zu]: ", i);
        if (e->type != DRIFT_JSON_OBJECT) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "%sexpected an object", ctx);
            goto done;
        }
        const drift_json_value *nm = need(e, "name", DRIFT_JSON_STRING, 0, src, ctx, err, &rc), *fl = NULL, *dt = NULL,
                               *sh = NULL, *hs = NULL;
        if (!nm || !(fl = need(e, "file", DRIFT_JSON_STRING, 0, src, ctx, err, &rc)) ||
            !(dt = need(e, "dtype", DRIFT_JSON_STRING, 0, src, ctx, err, &rc)) ||
            !(sh = need(e, "shape", DRIFT_JSON_ARRAY, 0, src, ctx, err, &rc)) ||
            !(hs = need(e, "hash", DRIFT_JSON_STRING, 0, src, ctx, err, &rc)))
            goto done;
        if (nm->str_len == 0 || nm->str_len >= DRIFT_MAX_FQN || strlen(nm->str) != nm->str_len) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'name': expected 1..%d bytes without NUL", ctx, DRIFT_MAX_FQN - 1);
            goto done;
        }
        const char *fp = strlen(fl->str) == fl->str_len ? drift_params_ref_file_problem(fl->str) : "a NUL byte";
        if (fp) { rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'file' of '%s': %s", ctx, nm->str, fp); goto done; }
        drift_dtype dtype = drift_params_ref_dtype_parse(dt->str);
        if (dtype == DRIFT_DTYPE_INVALID) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'dtype' of '%s': expected F32, BF16, F16 or F64, got \"%s\"", ctx,
                               nm->str, dt->str);
            goto done;
        }
        int64_t shape[DRIFT_MAX_DIMS];
        if (sh->n_items > DRIFT_MAX_DIMS) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'shape' of '%s': at most %d dims", ctx, nm->str, DRIFT_MAX_DIMS);
            goto done;
        }
        for (size_t d = 0; d < sh->n_items; d++) {
            const drift_json_value *x = &sh->items[d];
            if (x->type != DRIFT_JSON_NUMBER || !x->is_int || x->integer < 0 || x->integer > ((int64_t)1 << 40)) {
                rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'shape' of '%s': expected integers in 0..2^40", ctx, nm->str);
                goto done;
            }
            shape[d] = x->integer;
        }
        uint64_t h;
        if (drift_hash64_parse(hs->str, &h)) {
            rc = drift_err_set(err, DRIFT_E_INPUT, src, "%s'hash' of '%s': expected 16 hex digits", ctx, nm->str);
            goto done;
        }
        if ((rc = drift_params_ref_add(&out, nm->str, fl->str, dtype, (int)sh->n_items, shape, h, err))) {
            if (rc == DRIFT_E_USAGE) {
                rc = DRIFT_E_INPUT;
                if (err) err->code = rc;
            }
            goto done;
        }
    }
    if ((rc = check_unique(&out, src, err))) goto done;
    *ref = out;
    drift_params_ref_init(&out);
done:
    drift_params_ref_free(&out);
    drift_json_free(root);
    return rc;
}
