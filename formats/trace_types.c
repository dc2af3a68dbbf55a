/* Schema v1 types: float types of the storage dtypes, the compound row types
 * of the tables, name escaping, side names and record statistics. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "formats/trace_internal.h"

const char *drift_trace_side_name(drift_trace_side side) {
    switch (side) {
    case DRIFT_TRACE_SIDE_TRAINER: return "trainer";
    case DRIFT_TRACE_SIDE_ROLLOUT: return "rollout";
    case DRIFT_TRACE_SIDE_REPLAY: return "replay";
    }
    return "invalid";
}

int drift_trace_side_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "trainer") == 0) return DRIFT_TRACE_SIDE_TRAINER;
    if (strcmp(s, "rollout") == 0) return DRIFT_TRACE_SIDE_ROLLOUT;
    if (strcmp(s, "replay") == 0) return DRIFT_TRACE_SIDE_REPLAY;
    return -1;
}

/* --- float types ---------------------------------------------------------- */
/* Bit layout of each storage dtype: sign position, exponent position and
 * size, mantissa position and size, exponent bias, total bits. */
typedef struct tr_float_layout {
    drift_dtype dt;
    size_t spos, epos, esize, mpos, msize, ebias, bits;
} tr_float_layout;

static const tr_float_layout k_layouts[] = {
    {DRIFT_F32, 31, 23, 8, 0, 23, 127, 32},
    {DRIFT_F64, 63, 52, 11, 0, 52, 1023, 64},
    {DRIFT_BF16, 15, 7, 8, 0, 7, 127, 16},
    {DRIFT_F16, 15, 10, 5, 0, 10, 15, 16},
};

hid_t tr_float_type(drift_dtype dt) {
    if (dt == DRIFT_F32) return H5Tcopy(H5T_IEEE_F32LE);
    if (dt == DRIFT_F64) return H5Tcopy(H5T_IEEE_F64LE);
    for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++) {
        const tr_float_layout *L = &k_layouts[i];
        if (L->dt != dt) continue;
        /* DESIGN.md s6: start from IEEE fp32 and narrow it. Fields first, so
         * that they fit the smaller precision. */
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        if (t < 0) return H5I_INVALID_HID;
        if (H5Tset_fields(t, L->spos, L->epos, L->esize, L->mpos, L->msize) < 0 || H5Tset_offset(t, 0) < 0 ||
            H5Tset_precision(t, L->bits) < 0 || H5Tset_size(t, L->bits / 8) < 0 || H5Tset_ebias(t, L->ebias) < 0) {
            H5Tclose(t);
            return H5I_INVALID_HID;
        }
        return t;
    }
    return H5I_INVALID_HID;
}

drift_dtype tr_dtype_of_type(hid_t type, char *desc, size_t descsz) {
    if (desc && descsz) desc[0] = '\0';
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_FLOAT) {
        const char *cn = cls == H5T_INTEGER ? "integer" : cls == H5T_STRING ? "string" : cls == H5T_COMPOUND ? "compound"
                       : cls == H5T_ENUM ? "enum" : cls == H5T_ARRAY ? "array" : "non-float";
        if (desc) snprintf(desc, descsz, "a %s type of %zu bytes", cn, H5Tget_size(type));
        return DRIFT_DTYPE_INVALID;
    }
    size_t size = H5Tget_size(type), spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    size_t prec = H5Tget_precision(type), ebias = H5Tget_ebias(type);
    int off = H5Tget_offset(type);
    H5T_order_t order = H5Tget_order(type);
    H5T_norm_t norm = H5Tget_norm(type);
    if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) {
        if (desc) snprintf(desc, descsz, "a float type whose fields cannot be read");
        return DRIFT_DTYPE_INVALID;
    }
    for (size_t i = 0; i < sizeof k_layouts / sizeof k_layouts[0]; i++) {
        const tr_float_layout *L = &k_layouts[i];
        if (size == L->bits / 8 && prec == L->bits && off == 0 && order == H5T_ORDER_LE && norm == H5T_NORM_IMPLIED &&
            spos == L->spos && epos == L->epos && esize == L->esize && mpos == L->mpos && msize == L->msize &&
            ebias == L->ebias)
            return L->dt;
    }
    if (desc)
        snprintf(desc, descsz,
                 "a float of size %zu, precision %zu, offset %d, %s, fields (sign %zu, exp %zu/%zu, mant %zu/%zu), "
                 "bias %zu",
                 size, prec, off, order == H5T_ORDER_LE ? "little-endian" : "not little-endian", spos, epos, esize,
                 mpos, msize, ebias);
    return DRIFT_DTYPE_INVALID;
}

/* --- compound row types ----------------------------------------------------- */
typedef struct tr_member {
    const char *name;
    size_t off;
    char kind; /* l i64, i i32, u u32, b u8, q u64, d f64, s fixed string */
    size_t strsz;
} tr_member;

#define M(st, f, k) {#f, offsetof(st, f), k, 0}
#define MS(st, f) {#f, offsetof(st, f), 's', sizeof(((st *)0)->f)}

static const tr_member k_index[] = {M(drift_trace_index, step, 'l'), M(drift_trace_index, microbatch, 'i'),
                                    M(drift_trace_index, denoise_index, 'i'), M(drift_trace_index, call_index, 'i'),
                                    M(drift_trace_index, stored, 'b')};
static const tr_member k_stats[] = {M(drift_trace_stats, min, 'd'),      M(drift_trace_stats, max, 'd'),
                                    M(drift_trace_stats, mean, 'd'),     M(drift_trace_stats, mean_abs, 'd'),
                                    M(drift_trace_stats, l2, 'd'),       M(drift_trace_stats, nan_count, 'l'),
                                    M(drift_trace_stats, inf_count, 'l')};
static const tr_member k_steps[] = {M(drift_trace_step, step, 'l'),          M(drift_trace_step, n_records, 'l'),
                                    M(drift_trace_step, metrics_rows, 'l'),  M(drift_trace_step, step_metrics_rows, 'l'),
                                    M(drift_trace_step, notes_rows, 'l'),    M(drift_trace_step, time, 'd'),
                                    M(drift_trace_step, flags, 'u')};
static const tr_member k_metrics[] = {
    M(drift_trace_metric, step, 'l'),          M(drift_trace_metric, site, 'i'),
    M(drift_trace_metric, variant, 'i'),       M(drift_trace_metric, denoise_index, 'i'),
    M(drift_trace_metric, flags, 'u'),         M(drift_trace_metric, numel, 'l'),
    M(drift_trace_metric, mean_abs_diff, 'd'), M(drift_trace_metric, max_abs_diff, 'd'),
    M(drift_trace_metric, rel_max, 'd'),       M(drift_trace_metric, cosine, 'd'),
    M(drift_trace_metric, rmse, 'd'),          M(drift_trace_metric, rmse_oracle, 'd'),
    M(drift_trace_metric, nan_count, 'l'),     M(drift_trace_metric, inf_count, 'l'),
    M(drift_trace_metric, ref_nan_count, 'l'), M(drift_trace_metric, ref_inf_count, 'l'),
    M(drift_trace_metric, worst_index, 'l'),   M(drift_trace_metric, max_ulp_diff, 'q')};
static const tr_member k_step_metrics[] = {
    M(drift_trace_step_metrics, step, 'l'),
    M(drift_trace_step_metrics, variant, 'i'),
    M(drift_trace_step_metrics, denoise_index, 'i'),
    M(drift_trace_step_metrics, n_pairs, 'l'),
    M(drift_trace_step_metrics, log_prob_mean_abs_diff, 'd'),
    M(drift_trace_step_metrics, ratio_abs_minus_1, 'd'),
    M(drift_trace_step_metrics, approx_kl, 'd')};
static const tr_member k_notes[] = {M(drift_trace_note, step, 'l'), M(drift_trace_note, time, 'd'),
                                    M(drift_trace_note, level, 'i'), MS(drift_trace_note, text)};
static const tr_member k_pdt[] = {MS(tr_param_dtype_row, fqn), MS(tr_param_dtype_row, dtype)};
static const tr_member k_names[] = {MS(tr_name_row, name)};

typedef struct tr_table_desc {
    const tr_member *m;
    size_t n, memsize;
    const char *label;
} tr_table_desc;

#define T(arr, st, label) {arr, sizeof arr / sizeof arr[0], sizeof(st), label}
static const tr_table_desc k_tables[TR_T_COUNT] = {
    T(k_index, drift_trace_index, "record index"),
    T(k_stats, drift_trace_stats, "record stats"),
    T(k_steps, drift_trace_step, "steps"),
    T(k_metrics, drift_trace_metric, "metrics"),
    T(k_step_metrics, drift_trace_step_metrics, "step metrics"),
    T(k_notes, drift_trace_note, "notes"),
    T(k_pdt, tr_param_dtype_row, "param dtypes"),
    T(k_names, tr_name_row, "site names"),
};

static hid_t member_type(const tr_member *m, int file) {
    switch (m->kind) {
    case 'l': return H5Tcopy(file ? H5T_STD_I64LE : H5T_NATIVE_INT64);
    case 'i': return H5Tcopy(file ? H5T_STD_I32LE : H5T_NATIVE_INT32);
    case 'u': return H5Tcopy(file ? H5T_STD_U32LE : H5T_NATIVE_UINT32);
    case 'b': return H5Tcopy(file ? H5T_STD_U8LE : H5T_NATIVE_UINT8);
    case 'q': return H5Tcopy(file ? H5T_STD_U64LE : H5T_NATIVE_UINT64);
    case 'd': return H5Tcopy(file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE);
    case 's': {
        hid_t t = H5Tcopy(H5T_C_S1);
        if (t < 0) return t;
        if (H5Tset_size(t, m->strsz) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
            H5Tclose(t);
            return H5I_INVALID_HID;
        }
        return t;
    }
    }
    return H5I_INVALID_HID;
}

static hid_t build_type(enum tr_table t, int file) {
    if ((int)t < 0 || t >= TR_T_COUNT) return H5I_INVALID_HID;
    const tr_table_desc *d = &k_tables[t];
    size_t size = d->memsize;
    if (file) {
        size = 0;
        for (size_t i = 0; i < d->n; i++) {
            hid_t mt = member_type(&d->m[i], 1);
            if (mt < 0) return H5I_INVALID_HID;
            size += H5Tget_size(mt);
            H5Tclose(mt);
        }
    }
    hid_t ct = H5Tcreate(H5T_COMPOUND, size);
    if (ct < 0) return ct;
    size_t off = 0;
    for (size_t i = 0; i < d->n; i++) {
        hid_t mt = member_type(&d->m[i], file);
        if (mt < 0 || H5Tinsert(ct, d->m[i].name, file ? off : d->m[i].off, mt) < 0) {
            if (mt >= 0) H5Tclose(mt);
            H5Tclose(ct);
            return H5I_INVALID_HID;
        }
        off += H5Tget_size(mt);
        H5Tclose(mt);
    }
    return ct;
}

hid_t tr_type_file(enum tr_table t) { return build_type(t, 1); }
hid_t tr_type_mem(enum tr_table t) { return build_type(t, 0); }
size_t tr_type_mem_size(enum tr_table t) { return ((int)t >= 0 && t < TR_T_COUNT) ? k_tables[t].memsize : 0; }
const char *tr_table_label(enum tr_table t) { return ((int)t >= 0 && t < TR_T_COUNT) ? k_tables[t].label : "?"; }

/* Checks that the compound file type ft has every member of table t with a
 * usable class. Writes a description of the first problem into buf. */
int tr_check_members(hid_t ft, enum tr_table t, char *buf, size_t bufsz) {
    const tr_table_desc *d = &k_tables[t];
    if (H5Tget_class(ft) != H5T_COMPOUND) {
        snprintf(buf, bufsz, "a compound type, found another type class");
        return -1;
    }
    size_t fsize = H5Tget_size(ft);
    if (fsize == 0 || fsize > 65536) {
        snprintf(buf, bufsz, "a compound row of at most 65536 bytes, found %zu", fsize);
        return -1;
    }
    for (size_t i = 0; i < d->n; i++) {
        const tr_member *m = &d->m[i];
        int idx = H5Tget_member_index(ft, m->name);
        if (idx < 0) {
            snprintf(buf, bufsz, "a member \"%s\", which is missing", m->name);
            return -1;
        }
        hid_t mt = H5Tget_member_type(ft, (unsigned)idx);
        if (mt < 0) {
            snprintf(buf, bufsz, "a readable member \"%s\"", m->name);
            return -1;
        }
        H5T_class_t c = H5Tget_class(mt);
        size_t ms = H5Tget_size(mt);
        htri_t vl = (c == H5T_STRING) ? H5Tis_variable_str(mt) : 0;
        H5Tclose(mt);
        int ok;
        const char *want;
        switch (m->kind) {
        case 'd': ok = c == H5T_FLOAT && ms >= 4 && ms <= 8; want = "a float of 4 or 8 bytes"; break;
        case 's': ok = c == H5T_STRING && vl == 0 && ms >= 1 && ms <= m->strsz; want = "a fixed-length string"; break;
        default: ok = c == H5T_INTEGER && ms >= 1 && ms <= 8; want = "an integer of at most 8 bytes"; break;
        }
        if (!ok) {
            if (m->kind == 's' && c == H5T_STRING && vl == 0)
                snprintf(buf, bufsz, "member \"%s\" as a fixed-length string of at most %zu bytes, found %zu", m->name,
                         m->strsz, ms);
            else
                snprintf(buf, bufsz, "member \"%s\" as %s", m->name, want);
            return -1;
        }
    }
    return 0;
}

/* --- names ------------------------------------------------------------------- */
int tr_escape_name(const char *name, char *out, size_t outsz) {
    size_t o = 0;
    for (const char *p = name; *p; p++) {
        if (*p == '/' || *p == '%') {
            if (o + 4 > outsz) return -1;
            out[o++] = '%';
            out[o++] = '2';
            out[o++] = *p == '/' ? 'F' : '5';
        } else {
            if (o + 2 > outsz) return -1;
            out[o++] = *p;
        }
    }
    if (o + 1 > outsz) return -1;
    out[o] = '\0';
    return 0;
}

const char *tr_name_problem(const char *name) {
    if (!name || !name[0]) return "a non-empty name";
    size_t n = strlen(name);
    if (n >= DRIFT_TRACE_NAME_MAX) return "a name shorter than 512 bytes";
    if (strcmp(name, ".") == 0) return "a name other than \".\"";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) return "a name without control characters";
    char esc[3 * DRIFT_TRACE_NAME_MAX];
    if (tr_escape_name(name, esc, sizeof esc) != 0) return "a shorter name";
    return NULL;
}

/* --- sizes -------------------------------------------------------------------- */
int tr_mul_checked(int64_t a, int64_t b, int64_t limit, int64_t *out) {
    if (a < 0 || b < 0) return -1;
    if (a != 0 && b > limit / a) return -1;
    if (a * b > limit) return -1;
    *out = a * b;
    return 0;
}

int tr_numel(int ndim, const int64_t *shape, int64_t *numel) {
    int64_t n = 1;
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS) return -1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > TR_DIM_MAX) return -1;
        if (tr_mul_checked(n, shape[d], (int64_t)1 << 48, &n) != 0) return -1;
    }
    *numel = n;
    return 0;
}

/* --- stats --------------------------------------------------------------------- */
void drift_trace_stats_compute(const void *data, drift_dtype dtype, size_t n, drift_trace_stats *out) {
    double mn = NAN, mx = NAN, sum = 0.0, sabs = 0.0, ssq = 0.0;
    int64_t nan = 0, inf = 0, fin = 0;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (dtype == DRIFT_BF16) v = drift_bf16_to_f32(((const uint16_t *)data)[i]);
        else if (dtype == DRIFT_F16) v = drift_f16_to_f32(((const uint16_t *)data)[i]);
        else if (dtype == DRIFT_F64) v = (float)((const double *)data)[i];
        else v = ((const float *)data)[i];
        if (isnan(v)) {
            nan++;
            continue;
        }
        double x = v;
        if (isnan(mn) || x < mn) mn = x;
        if (isnan(mx) || x > mx) mx = x;
        if (isinf(v)) {
            inf++;
            continue;
        }
        fin++;
        sum += x;
        sabs += fabs(x);
        ssq += x * x;
    }
    out->min = mn;
    out->max = mx;
    out->mean = fin ? sum / (double)fin : NAN;
    out->mean_abs = fin ? sabs / (double)fin : NAN;
    out->l2 = fin ? sqrt(ssq) : NAN;
    out->nan_count = nan;
    out->inf_count = inf;
}

int drift_trace_blosc_available(void) {
    tr_h5_quiet();
    if (H5Zfilter_avail(32001) <= 0) return 0;
    unsigned cfg = 0;
    if (H5Zget_filter_info(32001, &cfg) < 0) return 0;
    return (cfg & H5Z_FILTER_CONFIG_ENCODE_ENABLED) ? 1 : 0;
}
