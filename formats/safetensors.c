/* .safetensors reader (strict, for untrusted files) and writer; see safetensors.h. */
#include "formats/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/alloc.h"
#include "formats/outpath.h"
#include "formats/json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "formats/safetensors.c assumes a little-endian host (safetensors data is little-endian)"
#endif

#define HEADER_LIMIT                                                                                    \
    (DRIFT_SAFETENSORS_HEADER_MAX < (uint64_t)DRIFT_JSON_MAX_INPUT ? DRIFT_SAFETENSORS_HEADER_MAX      \
                                                                     : (uint64_t)DRIFT_JSON_MAX_INPUT)
#define HEADER_DEPTH 3                    /* root object > tensor object > shape array */
#define BOUNCE_BYTES ((size_t)1 << 18)    /* conversion buffer for non-fp32 reads and writes */

/* ---- dtypes ---------------------------------------------------------------- */
typedef struct st_dtype {
    const char *name;
    unsigned size;                        /* bytes per element */
    drift_dtype dtype;                    /* DRIFT_DTYPE_INVALID: not readable by drift */
} st_dtype;

static const st_dtype k_dtypes[] = {
    {"F32", 4, DRIFT_F32},
    {"BF16", 2, DRIFT_BF16},
    {"F16", 2, DRIFT_F16},
    {"F64", 8, DRIFT_F64},
    {"BOOL", 1, DRIFT_DTYPE_INVALID},
    {"U8", 1, DRIFT_DTYPE_INVALID},
    {"I8", 1, DRIFT_DTYPE_INVALID},
    {"F8_E4M3", 1, DRIFT_DTYPE_INVALID},
    {"F8_E5M2", 1, DRIFT_DTYPE_INVALID},
    {"I16", 2, DRIFT_DTYPE_INVALID},
    {"U16", 2, DRIFT_DTYPE_INVALID},
    {"I32", 4, DRIFT_DTYPE_INVALID},
    {"U32", 4, DRIFT_DTYPE_INVALID},
    {"I64", 8, DRIFT_DTYPE_INVALID},
    {"U64", 8, DRIFT_DTYPE_INVALID},
};

static const st_dtype *find_dtype(const char *s) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(k_dtypes[i].name, s) == 0) return &k_dtypes[i];
    return NULL;
}

static const st_dtype *dtype_entry(drift_dtype dt) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (k_dtypes[i].dtype == dt && dt != DRIFT_DTYPE_INVALID) return &k_dtypes[i];
    return NULL;
}

/* ---- handle ------------------------------------------------------------------ */
typedef struct st_tensor {
    char *name;                           /* owned */
    const st_dtype *dt;                   /* NULL: a dtype string unknown to the spec */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;                  /* relative to the data buffer */
    int skipped;
    int line, col;                        /* position of the key in the header */
} st_tensor;

typedef struct st_meta {
    char *key, *value;                    /* owned */
} st_meta;

struct drift_safetensors {
    char *path;                           /* owned */
    int fd;                               /* -1 for an in-memory image */
    const unsigned char *mem;             /* borrowed image, or NULL */
    uint64_t size;                        /* file size */
    uint64_t data_start;                  /* 8 + N */
    st_tensor *t;                         /* every entry (skipped ones too), header order */
    size_t n_t;
    size_t *listed;                       /* indices into t of the listed tensors, header order */
    size_t n_listed;
    size_t *by_name;                      /* the same indices sorted by name */
    st_meta *meta;
    size_t n_meta;
    unsigned char *bounce;                /* BOUNCE_BYTES, allocated on first need */
};

/* Sets an DRIFT_E_INPUT error at a header position (line <= 0: the file). */
static int bad(drift_err *err, const drift_safetensors *f, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(drift_err *err, const drift_safetensors *f, int line, int col, const char *fmt, ...) {
    char where[512];
    if (line > 0)
        snprintf(where, sizeof where, "%s:%d:%d", f->path, line, col);
    else
        snprintf(where, sizeof where, "%s", f->path);
    va_list ap;
    va_start(ap, fmt);
    drift_err_vset(err, DRIFT_E_INPUT, where, fmt, ap);
    va_end(ap);
    return DRIFT_E_INPUT;
}

static int nomem(drift_err *err, const drift_safetensors *f) {
    return drift_err_set(err, DRIFT_E_NOMEM, f ? f->path : "safetensors", "out of memory");
}

void drift_safetensors_close(drift_safetensors *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (size_t i = 0; i < f->n_t; i++) drift_free(f->t[i].name);
    drift_free(f->t);
    drift_free(f->listed);
    drift_free(f->by_name);
    for (size_t i = 0; i < f->n_meta; i++) {
        drift_free(f->meta[i].key);
        drift_free(f->meta[i].value);
    }
    drift_free(f->meta);
    drift_free(f->bounce);
    drift_free(f->path);
    drift_free(f);
}

/* Reads n bytes at absolute offset off (already checked to lie in the file). */
static int read_at(drift_safetensors *f, uint64_t off, void *dst, size_t n, drift_err *err) {
    if (n == 0) return DRIFT_OK;
    if (f->mem) {
        memcpy(dst, f->mem + off, n);
        return DRIFT_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        ssize_t got = pread(f->fd, p, n, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return drift_err_set(err, DRIFT_E_IO, f->path, "read of %zu bytes at offset %" PRIu64 " failed: %s", n,
                                 off, strerror(errno));
        }
        if (got == 0)
            return bad(err, f, 0, 0,
                       "file ended at offset %" PRIu64 " while %zu more bytes were expected (truncated while open?)",
                       off, n);
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return DRIFT_OK;
}

/* ---- header validation --------------------------------------------------------- */

/* Bounds nesting depth and value count before the DOM is built, so that a
 * hostile header is a DRIFT_E_INPUT with a clear message rather than the
 * JSON reader's resource limit. Strings are skipped (escapes honoured). */
static int prescan(const drift_safetensors *f, const unsigned char *h, size_t n, drift_err *err) {
    size_t i = 0;
    while (i < n && (h[i] == ' ' || h[i] == '\t' || h[i] == '\r' || h[i] == '\n')) i++;
    if (i == n || h[i] != '{')
        return bad(err, f, 0, 0, "JSON header (%zu bytes after the 8-byte length) must be a JSON object starting "
                                 "with '{', got %s", n, i == n ? "only whitespace" : "another character");
    int depth = 0, in_str = 0, line = 1, col = 0;
    uint64_t tokens = 1;
    for (; i < n; i++) {
        unsigned char c = h[i];
        if (c == '\n') {
            line++;
            col = 0;
        } else if ((c & 0xc0) != 0x80) {
            col++;
        }
        if (in_str) {
            if (c == '\\') {
                i++; /* the escaped character is never a quote that ends the string */
                col++;
            } else if (c == '"') {
                in_str = 0;
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > HEADER_DEPTH)
                return bad(err, f, line, col,
                           "JSON header nests deeper than %d levels (a safetensors header is "
                           "{name: {\"shape\": [...]}}); expected at most %d",
                           HEADER_DEPTH, HEADER_DEPTH);
            tokens++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',') {
            tokens++;
        }
    }
    if (tokens > DRIFT_JSON_MAX_VALUES / 2)
        return bad(err, f, 0, 0, "JSON header has about %" PRIu64 " values, more than the limit of %zu", tokens,
                   (size_t)DRIFT_JSON_MAX_VALUES / 2);
    return DRIFT_OK;
}

static int has_nul(const drift_json_value *v) { return strlen(v->str) != v->str_len; }

static int parse_tensor(drift_safetensors *f, const drift_json_member *m, unsigned flags, st_tensor *t,
                        drift_err *err) {
    const char *nm = m->key;
    char got[96];
    t->line = m->line;
    t->col = m->col;
    if (m->key_len == 0) return bad(err, f, m->line, m->col, "tensor name is empty; expected a non-empty name");
    if (strlen(m->key) != m->key_len)
        return bad(err, f, m->line, m->col, "tensor name contains a NUL character (\\u0000)");
    if (m->key_len >= DRIFT_SAFETENSORS_NAME_MAX)
        return bad(err, f, m->line, m->col, "tensor name is %zu bytes; expected at most %d", m->key_len,
                   DRIFT_SAFETENSORS_NAME_MAX - 1);
    const drift_json_value *v = &m->value;
    if (v->type != DRIFT_JSON_OBJECT)
        return bad(err, f, v->line, v->col,
                   "tensor '%.200s': expected an object {\"dtype\", \"shape\", \"data_offsets\"}, got %s", nm,
                   drift_json_describe(v, got, sizeof got));
    const drift_json_value *dtype = NULL, *shape = NULL, *offs = NULL;
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_member *fm = &v->members[i];
        if (strcmp(fm->key, "dtype") == 0 && fm->key_len == 5)
            dtype = &fm->value;
        else if (strcmp(fm->key, "shape") == 0 && fm->key_len == 5)
            shape = &fm->value;
        else if (strcmp(fm->key, "data_offsets") == 0 && fm->key_len == 12)
            offs = &fm->value;
        else
            return bad(err, f, fm->line, fm->col,
                       "tensor '%.200s': unknown field '%.100s'; expected only dtype, shape and data_offsets", nm,
                       fm->key);
    }
    if (!dtype || !shape || !offs)
        return bad(err, f, v->line, v->col, "tensor '%.200s': missing field '%s'", nm,
                   !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    /* dtype */
    if (dtype->type != DRIFT_JSON_STRING)
        return bad(err, f, dtype->line, dtype->col, "tensor '%.200s': field 'dtype': expected a string, got %s", nm,
                   drift_json_describe(dtype, got, sizeof got));
    t->dt = has_nul(dtype) ? NULL : find_dtype(dtype->str);
    if (!t->dt || t->dt->dtype == DRIFT_DTYPE_INVALID) {
        if (!(flags & DRIFT_SAFETENSORS_SKIP_UNSUPPORTED))
            return bad(err, f, dtype->line, dtype->col,
                       "tensor '%.200s': field 'dtype': %s %s; expected F32, BF16, F16 or F64 "
                       "(or open with DRIFT_SAFETENSORS_SKIP_UNSUPPORTED to skip it)",
                       nm, t->dt ? "unsupported dtype" : "unknown dtype",
                       drift_json_describe(dtype, got, sizeof got));
        t->skipped = 1;
    }

    /* shape */
    if (shape->type != DRIFT_JSON_ARRAY)
        return bad(err, f, shape->line, shape->col,
                   "tensor '%.200s': field 'shape': expected an array of non-negative integers, got %s", nm,
                   drift_json_describe(shape, got, sizeof got));
    if (shape->n_items > DRIFT_MAX_DIMS)
        return bad(err, f, shape->line, shape->col, "tensor '%.200s': field 'shape': %zu dimensions; expected at most %d",
                   nm, shape->n_items, DRIFT_MAX_DIMS);
    t->ndim = (int)shape->n_items;
    uint64_t numel = 1;
    for (size_t d = 0; d < shape->n_items; d++) {
        const drift_json_value *e = &shape->items[d];
        if (e->type != DRIFT_JSON_NUMBER || !e->is_int || e->integer < 0)
            return bad(err, f, e->line, e->col,
                       "tensor '%.200s': field 'shape'[%zu]: expected a non-negative integer, got %s", nm, d,
                       drift_json_describe(e, got, sizeof got));
        t->shape[d] = e->integer;
        if (__builtin_mul_overflow(numel, (uint64_t)e->integer, &numel) || numel > (uint64_t)INT64_MAX)
            return bad(err, f, shape->line, shape->col,
                       "tensor '%.200s': field 'shape': the product of the dimensions overflows 63 bits", nm);
    }
    t->numel = (int64_t)numel;

    /* data_offsets */
    if (offs->type != DRIFT_JSON_ARRAY || offs->n_items != 2)
        return bad(err, f, offs->line, offs->col,
                   "tensor '%.200s': field 'data_offsets': expected [begin, end] (two non-negative integers), got %s",
                   nm, drift_json_describe(offs, got, sizeof got));
    for (int k = 0; k < 2; k++) {
        const drift_json_value *e = &offs->items[k];
        if (e->type != DRIFT_JSON_NUMBER || !e->is_int || e->integer < 0)
            return bad(err, f, e->line, e->col,
                       "tensor '%.200s': field 'data_offsets'[%d]: expected a non-negative integer, got %s", nm, k,
                       drift_json_describe(e, got, sizeof got));
    }
    t->begin = (uint64_t)offs->items[0].integer;
    t->end = (uint64_t)offs->items[1].integer;
    uint64_t bufsize = f->size - f->data_start;
    if (t->begin > t->end)
        return bad(err, f, offs->line, offs->col,
                   "tensor '%.200s': field 'data_offsets': begin %" PRIu64 " > end %" PRIu64 "; expected begin <= end",
                   nm, t->begin, t->end);
    if (t->end > bufsize)
        return bad(err, f, offs->line, offs->col,
                   "tensor '%.200s': field 'data_offsets': end %" PRIu64 " is beyond the %" PRIu64
                   "-byte data buffer (file of %" PRIu64 " bytes truncated?)",
                   nm, t->end, bufsize, f->size);
    if (t->dt) {
        uint64_t want = 0;
        int ovf = __builtin_mul_overflow(numel, (uint64_t)t->dt->size, &want);
        if (ovf || want != t->end - t->begin)
            return bad(err, f, offs->line, offs->col,
                       "tensor '%.200s': field 'data_offsets': [%" PRIu64 ", %" PRIu64 ") holds %" PRIu64
                       " bytes; expected %" PRIu64 " elements of %s (%u bytes each)%s",
                       nm, t->begin, t->end, t->end - t->begin, numel, t->dt->name, t->dt->size,
                       ovf ? ", a size that overflows 64 bits" : "");
    }
    return DRIFT_OK;
}

static int parse_metadata(drift_safetensors *f, const drift_json_value *v, drift_err *err) {
    char got[96];
    if (v->type != DRIFT_JSON_OBJECT)
        return bad(err, f, v->line, v->col, "field '__metadata__': expected an object of strings, got %s",
                   drift_json_describe(v, got, sizeof got));
    if (v->n_members == 0) return DRIFT_OK;
    f->meta = drift_calloc(v->n_members, sizeof *f->meta);
    if (!f->meta) return nomem(err, f);
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_member *m = &v->members[i];
        if (strlen(m->key) != m->key_len)
            return bad(err, f, m->line, m->col, "field '__metadata__': a key contains a NUL character (\\u0000)");
        if (m->value.type != DRIFT_JSON_STRING)
            return bad(err, f, m->value.line, m->value.col,
                       "field '__metadata__'.'%.100s': expected a string, got %s", m->key,
                       drift_json_describe(&m->value, got, sizeof got));
        if (has_nul(&m->value))
            return bad(err, f, m->value.line, m->value.col,
                       "field '__metadata__'.'%.100s': the string contains a NUL character (\\u0000)", m->key);
        f->meta[f->n_meta].key = drift_strdup(m->key);
        f->meta[f->n_meta].value = drift_strdup(m->value.str);
        f->n_meta++;
        if (!f->meta[f->n_meta - 1].key || !f->meta[f->n_meta - 1].value) return nomem(err, f);
    }
    return DRIFT_OK;
}

/* qsort context-free comparators over index arrays: the table is global to
 * one call via a thread-local pointer. */
static _Thread_local const st_tensor *g_sort_t;

static int cmp_offsets(const void *a, const void *b) {
    const st_tensor *x = &g_sort_t[*(const size_t *)a], *y = &g_sort_t[*(const size_t *)b];
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(g_sort_t[*(const size_t *)a].name, g_sort_t[*(const size_t *)b].name);
}

/* Sorted by begin, the ranges must tile [0, bufsize) exactly. */
static int check_layout(drift_safetensors *f, drift_err *err) {
    uint64_t bufsize = f->size - f->data_start;
    if (f->n_t == 0) {
        if (bufsize != 0)
            return bad(err, f, 0, 0, "no tensors, but %" PRIu64 " bytes follow the header; expected none", bufsize);
        return DRIFT_OK;
    }
    size_t *ord = drift_calloc(f->n_t, sizeof *ord);
    if (!ord) return nomem(err, f);
    for (size_t i = 0; i < f->n_t; i++) ord[i] = i;
    g_sort_t = f->t;
    qsort(ord, f->n_t, sizeof *ord, cmp_offsets);
    int rc = DRIFT_OK;
    uint64_t expect = 0;
    const st_tensor *prev = NULL;
    for (size_t k = 0; k < f->n_t && rc == DRIFT_OK; k++) {
        const st_tensor *t = &f->t[ord[k]];
        if (t->begin < expect)
            rc = bad(err, f, t->line, t->col,
                     "tensor '%.200s': data_offsets [%" PRIu64 ", %" PRIu64 ") overlap tensor '%.200s' [%" PRIu64
                     ", %" PRIu64 "); expected disjoint ranges",
                     t->name, t->begin, t->end, prev->name, prev->begin, prev->end);
        else if (t->begin > expect)
            rc = bad(err, f, t->line, t->col,
                     "tensor '%.200s': data_offsets begin at %" PRIu64 ", leaving bytes [%" PRIu64 ", %" PRIu64
                     ") of the data buffer unused; expected the tensors to cover the buffer without gaps",
                     t->name, t->begin, expect, t->begin);
        expect = t->end;
        prev = t;
    }
    if (rc == DRIFT_OK && expect != bufsize)
        rc = bad(err, f, 0, 0,
                 "%" PRIu64 " bytes after the last tensor's data (which ends at %" PRIu64 " of a %" PRIu64
                 "-byte buffer); expected none",
                 bufsize - expect, expect, bufsize);
    drift_free(ord);
    return rc;
}

static int parse_header(drift_safetensors *f, unsigned flags, drift_err *err) {
    if (f->size < 8)
        return bad(err, f, 0, 0, "file is %" PRIu64 " bytes; expected at least the 8-byte header length", f->size);
    unsigned char pre[8];
    int rc = read_at(f, 0, pre, 8, err);
    if (rc != DRIFT_OK) return rc;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | pre[i];
    if (n > f->size - 8)
        return bad(err, f, 0, 0,
                   "header length %" PRIu64 " exceeds the %" PRIu64 " bytes that follow it (file of %" PRIu64
                   " bytes truncated, or not a safetensors file)",
                   n, f->size - 8, f->size);
    if (n > HEADER_LIMIT)
        return bad(err, f, 0, 0, "header length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", n,
                   (uint64_t)HEADER_LIMIT);
    if (n < 2) return bad(err, f, 0, 0, "header length %" PRIu64 " is too small for a JSON object", n);
    f->data_start = 8 + n;

    unsigned char *h = drift_malloc((size_t)n);
    if (!h) return nomem(err, f);
    drift_json_value *root = NULL;
    rc = read_at(f, 8, h, (size_t)n, err);
    if (rc == DRIFT_OK) rc = prescan(f, h, (size_t)n, err);
    if (rc == DRIFT_OK) {
        rc = drift_json_parse((const char *)h, (size_t)n, f->path, &root, err);
        if (rc == DRIFT_E_INPUT) drift_err_prefix(err, "safetensors JSON header");
    }
    drift_free(h);
    if (rc != DRIFT_OK) return rc;
    if (root->type != DRIFT_JSON_OBJECT) {
        char got[96];
        rc = bad(err, f, root->line, root->col, "JSON header: expected an object, got %s",
                 drift_json_describe(root, got, sizeof got));
        goto done;
    }
    if (root->n_members > DRIFT_SAFETENSORS_MAX_TENSORS + 1) {
        rc = bad(err, f, root->line, root->col, "JSON header lists %zu tensors; expected at most %d", root->n_members,
                 DRIFT_SAFETENSORS_MAX_TENSORS);
        goto done;
    }
    if (root->n_members > 0) {
        f->t = drift_calloc(root->n_members, sizeof *f->t);
        if (!f->t) {
            rc = nomem(err, f);
            goto done;
        }
    }
    for (size_t i = 0; i < root->n_members; i++) {
        const drift_json_member *m = &root->members[i];
        if (m->key_len == 12 && strcmp(m->key, "__metadata__") == 0) {
            rc = parse_metadata(f, &m->value, err);
            if (rc != DRIFT_OK) goto done;
            continue;
        }
        st_tensor *t = &f->t[f->n_t];
        rc = parse_tensor(f, m, flags, t, err);
        if (rc != DRIFT_OK) goto done;
        t->name = drift_strdup(m->key);
        if (!t->name) {
            rc = nomem(err, f);
            goto done;
        }
        f->n_t++;
        if (!t->skipped) f->n_listed++;
    }
    rc = check_layout(f, err);
    if (rc != DRIFT_OK) goto done;
    if (f->n_listed > 0) {
        f->listed = drift_calloc(f->n_listed, sizeof *f->listed);
        f->by_name = drift_calloc(f->n_listed, sizeof *f->by_name);
        if (!f->listed || !f->by_name) {
            rc = nomem(err, f);
            goto done;
        }
        size_t k = 0;
        for (size_t i = 0; i < f->n_t; i++)
            if (!f->t[i].skipped) f->listed[k++] = i;
        memcpy(f->by_name, f->listed, f->n_listed * sizeof *f->by_name);
        g_sort_t = f->t;
        qsort(f->by_name, f->n_listed, sizeof *f->by_name, cmp_names);
    }
done:
    drift_json_free(root);
    return rc;
}

static int open_common(drift_safetensors **out, drift_safetensors *f, unsigned flags, drift_err *err) {
    int rc = parse_header(f, flags, err);
    if (rc != DRIFT_OK) {
        drift_safetensors_close(f);
        return rc;
    }
    *out = f;
    return DRIFT_OK;
}

static drift_safetensors *new_handle(const char *name) {
    drift_safetensors *f = drift_calloc(1, sizeof *f);
    if (!f) return NULL;
    f->fd = -1;
    f->path = drift_strdup(name);
    if (!f->path) {
        drift_free(f);
        return NULL;
    }
    return f;
}

int drift_safetensors_open(drift_safetensors **out, const char *path, unsigned flags, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "safetensors", "drift_safetensors_open: out is NULL");
    *out = NULL;
    if (!path) return drift_err_set(err, DRIFT_E_USAGE, "safetensors", "no path given");
    drift_safetensors *f = new_handle(path);
    if (!f) return nomem(err, NULL);
    /* O_NONBLOCK: a FIFO given as the path must not block the open; it has
     * no effect on the regular files accepted below. */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) {
        int e = errno;
        drift_safetensors_close(f);
        return drift_err_set(err, DRIFT_E_IO, path, "cannot open: %s", strerror(e));
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        int e = errno;
        drift_safetensors_close(f);
        return drift_err_set(err, DRIFT_E_IO, path, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        drift_safetensors_close(f);
        return drift_err_set(err, DRIFT_E_INPUT, path, "not a regular file; expected a .safetensors file");
    }
    f->size = (uint64_t)st.st_size;
    return open_common(out, f, flags, err);
}

int drift_safetensors_open_mem(drift_safetensors **out, const void *data, size_t len, const char *source_name,
                               unsigned flags, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "safetensors", "drift_safetensors_open_mem: out is NULL");
    *out = NULL;
    drift_safetensors *f = new_handle(source_name ? source_name : "<memory>");
    if (!f) return nomem(err, NULL);
    static const unsigned char empty[1] = {0};
    f->mem = data ? data : empty;
    f->size = data ? (uint64_t)len : 0;
    return open_common(out, f, flags, err);
}

const char *drift_safetensors_path(const drift_safetensors *f) { return f ? f->path : NULL; }
size_t drift_safetensors_n_tensors(const drift_safetensors *f) { return f ? f->n_listed : 0; }
size_t drift_safetensors_n_skipped(const drift_safetensors *f) { return f ? f->n_t - f->n_listed : 0; }

int drift_safetensors_tensor(const drift_safetensors *f, size_t i, drift_safetensors_info *out, drift_err *err) {
    if (!f || !out || i >= f->n_listed)
        return drift_err_set(err, DRIFT_E_USAGE, f ? f->path : "safetensors", "tensor index %zu out of range (%zu tensors)",
                             i, f ? f->n_listed : 0);
    const st_tensor *t = &f->t[f->listed[i]];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = t->dt->dtype;
    out->dtype_name = t->dt->name;
    out->ndim = t->ndim;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->numel = t->numel;
    out->offset = f->data_start + t->begin;
    out->nbytes = t->end - t->begin;
    return DRIFT_OK;
}

long drift_safetensors_find(const drift_safetensors *f, const char *name) {
    if (!f || !name) return -1;
    size_t lo = 0, hi = f->n_listed;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) {
            /* map back to the header-order index */
            size_t ti = f->by_name[mid];
            size_t a = 0, b = f->n_listed;
            while (a < b) { /* listed is increasing in ti */
                size_t m2 = a + (b - a) / 2;
                if (f->listed[m2] < ti)
                    a = m2 + 1;
                else
                    b = m2;
            }
            return (long)a;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int drift_safetensors_read_raw(drift_safetensors *f, size_t i, void *dst, size_t dst_bytes, drift_err *err) {
    if (!f || i >= f->n_listed)
        return drift_err_set(err, DRIFT_E_USAGE, f ? f->path : "safetensors", "tensor index %zu out of range (%zu tensors)",
                             i, f ? f->n_listed : 0);
    const st_tensor *t = &f->t[f->listed[i]];
    uint64_t nb = t->end - t->begin;
    if ((uint64_t)dst_bytes < nb || (!dst && nb))
        return drift_err_set(err, DRIFT_E_USAGE, f->path,
                             "tensor '%.200s': destination holds %zu bytes; expected at least %" PRIu64, t->name,
                             dst_bytes, nb);
    return read_at(f, f->data_start + t->begin, dst, (size_t)nb, err);
}

int drift_safetensors_read_f32(drift_safetensors *f, size_t i, float *dst, size_t dst_len, drift_err *err) {
    if (!f || i >= f->n_listed)
        return drift_err_set(err, DRIFT_E_USAGE, f ? f->path : "safetensors", "tensor index %zu out of range (%zu tensors)",
                             i, f ? f->n_listed : 0);
    const st_tensor *t = &f->t[f->listed[i]];
    if ((uint64_t)dst_len < (uint64_t)t->numel || (!dst && t->numel))
        return drift_err_set(err, DRIFT_E_USAGE, f->path,
                             "tensor '%.200s': destination holds %zu floats; expected at least %" PRId64, t->name,
                             dst_len, t->numel);
    uint64_t off = f->data_start + t->begin;
    size_t numel = (size_t)t->numel, es = t->dt->size;
    if (t->dt->dtype == DRIFT_F32) return read_at(f, off, dst, numel * 4, err);
    if (!f->bounce) {
        f->bounce = drift_malloc(BOUNCE_BYTES);
        if (!f->bounce) return nomem(err, f);
    }
    size_t per = BOUNCE_BYTES / es;
    for (size_t done = 0; done < numel;) {
        size_t k = numel - done < per ? numel - done : per;
        int rc = read_at(f, off + (uint64_t)done * es, f->bounce, k * es, err);
        if (rc != DRIFT_OK) return rc;
        drift_dtype_to_f32_n(f->bounce, t->dt->dtype, dst + done, k);
        done += k;
    }
    return DRIFT_OK;
}

size_t drift_safetensors_n_metadata(const drift_safetensors *f) { return f ? f->n_meta : 0; }

int drift_safetensors_metadata(const drift_safetensors *f, size_t i, const char **key, const char **value) {
    if (!f || i >= f->n_meta) return DRIFT_E_USAGE;
    if (key) *key = f->meta[i].key;
    if (value) *value = f->meta[i].value;
    return DRIFT_OK;
}

const char *drift_safetensors_find_metadata(const drift_safetensors *f, const char *key) {
    if (!f || !key) return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0) return f->meta[i].value;
    return NULL;
}

/* ---- writer ------------------------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int check_entry(const drift_safetensors_entry *e, size_t i, const drift_safetensors_entry *all,
                       uint64_t *nbytes, drift_err *err) {
    char where[64];
    snprintf(where, sizeof where, "safetensors entry %zu", i);
    if (!e->name || !e->name[0])
        return drift_err_set(err, DRIFT_E_USAGE, where, "field 'name': expected a non-empty name");
    if (strlen(e->name) >= DRIFT_SAFETENSORS_NAME_MAX || strcmp(e->name, "__metadata__") == 0)
        return drift_err_set(err, DRIFT_E_USAGE, where, "field 'name': '%.100s' is too long or reserved", e->name);
    for (size_t j = 0; j < i; j++)
        if (strcmp(all[j].name, e->name) == 0)
            return drift_err_set(err, DRIFT_E_USAGE, where, "field 'name': '%.200s' repeats entry %zu", e->name, j);
    const st_dtype *dt = dtype_entry(e->dtype);
    if (!dt)
        return drift_err_set(err, DRIFT_E_USAGE, where, "tensor '%.200s': field 'dtype': expected fp32, bf16, fp16 or fp64",
                             e->name);
    if (e->ndim < 0 || e->ndim > DRIFT_MAX_DIMS || (e->ndim > 0 && !e->shape))
        return drift_err_set(err, DRIFT_E_USAGE, where, "tensor '%.200s': field 'ndim': expected 0..%d with a shape",
                             e->name, DRIFT_MAX_DIMS);
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        if (e->shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel) ||
            numel > (uint64_t)1 << 48)
            return drift_err_set(err, DRIFT_E_USAGE, where,
                                 "tensor '%.200s': field 'shape': expected non-negative dimensions with fewer than 2^48 "
                                 "elements",
                                 e->name);
    }
    if (numel > 0 && !e->values == !e->raw)
        return drift_err_set(err, DRIFT_E_USAGE, where, "tensor '%.200s': expected exactly one of values and raw",
                             e->name);
    *nbytes = numel * dt->size;
    return DRIFT_OK;
}

int drift_safetensors_write(const char *path, const drift_safetensors_entry *entries, size_t n,
                            const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
                            drift_err *err) {
    if (!path) return drift_err_set(err, DRIFT_E_USAGE, "safetensors", "no path given");
    if (n > 0 && !entries) return drift_err_set(err, DRIFT_E_USAGE, path, "entries is NULL");
    if (n_meta > 0 && (!meta_keys || !meta_values))
        return drift_err_set(err, DRIFT_E_USAGE, path, "metadata arrays are NULL");
    int rc = DRIFT_OK, fd = -1, created = 0;
    drift_outpath op = {NULL, NULL, -1};
    char *hdr = NULL;
    unsigned char *bounce = NULL;
    drift_json_buf b;
    drift_json_buf_init(&b);

    uint64_t off = 0;
    drift_json_buf_begin_object(&b);
    if (n_meta > 0) {
        drift_json_buf_add_key(&b, "__metadata__");
        drift_json_buf_begin_object(&b);
        for (size_t i = 0; i < n_meta; i++) {
            if (!meta_keys[i] || !meta_values[i]) {
                rc = drift_err_set(err, DRIFT_E_USAGE, path, "metadata pair %zu has a NULL key or value", i);
                goto done;
            }
            for (size_t j = 0; j < i; j++)
                if (strcmp(meta_keys[j], meta_keys[i]) == 0) {
                    rc = drift_err_set(err, DRIFT_E_USAGE, path, "metadata key '%.100s' given twice", meta_keys[i]);
                    goto done;
                }
            drift_json_buf_field_string(&b, meta_keys[i], meta_values[i]);
        }
        drift_json_buf_end_object(&b);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = 0;
        rc = check_entry(&entries[i], i, entries, &nb, err);
        if (rc != DRIFT_OK) goto done;
        drift_json_buf_add_key(&b, entries[i].name);
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "dtype", dtype_entry(entries[i].dtype)->name);
        drift_json_buf_add_key(&b, "shape");
        drift_json_buf_begin_array(&b);
        for (int d = 0; d < entries[i].ndim; d++) drift_json_buf_add_int(&b, entries[i].shape[d]);
        drift_json_buf_end_array(&b);
        drift_json_buf_add_key(&b, "data_offsets");
        drift_json_buf_begin_array(&b);
        drift_json_buf_add_uint(&b, off);
        drift_json_buf_add_uint(&b, off + nb);
        drift_json_buf_end_array(&b);
        drift_json_buf_end_object(&b);
        off += nb;
    }
    drift_json_buf_end_object(&b);
    int st = drift_json_buf_status(&b);
    hdr = drift_json_buf_take(&b);
    if (!hdr) {
        rc = drift_err_set(err, st == DRIFT_E_NOMEM || st == DRIFT_OK ? DRIFT_E_NOMEM : DRIFT_E_INTERNAL, path,
                           "building the JSON header failed");
        goto done;
    }
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;

    bounce = drift_malloc(BOUNCE_BYTES);
    if (!bounce) {
        rc = nomem(err, NULL);
        goto done;
    }
    /* formats/outpath.h: a regular file only, an O_EXCL|O_NOFOLLOW temporary renamed on success */
    if ((rc = drift_outpath_check(path, 1, err)) || (rc = drift_outpath_open(&op, path, err))) goto done;
    fd = op.fd;
    created = 1;
    unsigned char pre[8];
    for (int i = 0; i < 8; i++) pre[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int wfail = write_all(fd, pre, 8) || write_all(fd, hdr, hlen);
    if (!wfail && padded > hlen) wfail = write_all(fd, "       ", padded - hlen);
    for (size_t i = 0; i < n && !wfail; i++) {
        const drift_safetensors_entry *e = &entries[i];
        const st_dtype *dt = dtype_entry(e->dtype);
        size_t numel = 1;
        for (int d = 0; d < e->ndim; d++) numel *= (size_t)e->shape[d];
        if (numel == 0) continue;
        if (e->raw) {
            wfail = write_all(fd, e->raw, numel * dt->size);
        } else if (e->dtype == DRIFT_F32) {
            wfail = write_all(fd, e->values, numel * 4);
        } else {
            size_t per = BOUNCE_BYTES / dt->size;
            for (size_t done = 0; done < numel && !wfail; done += per) {
                size_t k = numel - done < per ? numel - done : per;
                drift_dtype_from_f32_n(e->values + done, bounce, e->dtype, k);
                wfail = write_all(fd, bounce, k * dt->size);
            }
        }
    }
    if (wfail) {
        rc = drift_err_set(err, DRIFT_E_IO, path, "write failed: %s", strerror(errno));
        goto done;
    }
    fd = -1;
    created = 0;
    rc = drift_outpath_commit(&op, 1, err);
done:
    if (created) drift_outpath_abort(&op);
    drift_json_buf_free(&b);
    free(hdr); /* from drift_json_buf_take (malloc) */
    drift_free(bounce);
    return rc;
}
