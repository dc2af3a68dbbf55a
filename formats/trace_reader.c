/* Trace reader: open (plain or SWMR), root attributes, committed steps,
 * sites and their records, follow-mode refresh. Every size read from the
 * file is validated before use (docs/format.md, "Reader rules"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "formats/trace_index.h" /* drift merge: INDEX / INDEX#rank=N open a rank view */
#include "formats/alloc.h"
#include "formats/trace_internal.h"

static void hclose(hid_t *h, herr_t (*fn)(hid_t)) {
    if (*h >= 0) fn(*h);
    *h = H5I_INVALID_HID;
}

static const char *site_obj(const tr_site *s, char *buf, size_t sz) {
    char esc[3 * DRIFT_TRACE_NAME_MAX];
    if (tr_escape_name(s->name ? s->name : "?", esc, sizeof esc) != 0) snprintf(esc, sizeof esc, "?");
    snprintf(buf, sz, "/sites/%s", esc);
    return buf;
}

/* ---------------------------------------------------------------------- */
/* An SWMR reader retries a metadata read whose checksum fails (the writer
 * may be mid-write), sleeping 1, 2, 4... ns between attempts. HDF5's default
 * of 100 attempts never ends on a file that is really corrupt: bound it. */
#ifndef TR_SWMR_ATTEMPTS_FOLLOW /* fuzz/build.sh lowers it: retries only cost time there */
#define TR_SWMR_ATTEMPTS_FOLLOW 22 /* about 4 ms of retries: outlasts any in-flight write */
#endif
#define TR_SWMR_ATTEMPTS_STATIC 12 /* the writer is gone: a bad checksum is final */

static hid_t open_swmr(const char *path, unsigned attempts) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0) return H5I_INVALID_HID;
    hid_t f = H5I_INVALID_HID;
    if (H5Pset_metadata_read_attempts(fapl, attempts) >= 0)
        f = H5Fopen(path, H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
    H5Pclose(fapl);
    return f;
}

int tr_reader_open_file(drift_trace_reader *r, drift_err *err) {
    char first[400] = "";
    int rc = tr_guard_superblock(r->path, err);
    if (rc) return rc;
    if (r->follow) {
        r->file = open_swmr(r->path, TR_SWMR_ATTEMPTS_FOLLOW);
        if (r->file >= 0) {
            r->swmr = 1;
            return DRIFT_OK;
        }
        tr_h5_msg(first, sizeof first);
    }
    r->file = H5Fopen(r->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (r->file >= 0) return DRIFT_OK;
    if (!first[0]) tr_h5_msg(first, sizeof first);
    if (!r->follow) {
        /* Still open by an SWMR writer, or its writer was killed: the
         * committed steps are readable through SWMR. */
        r->file = open_swmr(r->path, TR_SWMR_ATTEMPTS_STATIC);
        if (r->file >= 0) {
            r->swmr = 1;
            r->unclean = 1;
            return DRIFT_OK;
        }
    }
    if (access(r->path, R_OK) != 0)
        return drift_err_set(err, DRIFT_E_IO, r->path, "cannot open the trace: no such file or not readable");
    int64_t size = 0, eof = 0;
    if (tr_short_file(r->path, &size, &eof))
        return drift_err_set(err, DRIFT_E_INPUT, r->path,
                             "the file is cut short: %lld bytes, its superblock records %lld (copied or downloaded "
                             "in part, or its writer stopped while extending it, e.g. on a full disk); `drift check "
                             "--repair` restores every committed step it still holds (into a copy)",
                             (long long)size, (long long)eof);
    htri_t is5 = H5Fis_hdf5(r->path);
    if (is5 <= 0)
        return drift_err_set(err, DRIFT_E_INPUT, r->path, "not an HDF5 file (expected a drift trace, HDF5 schema v1)");
    return drift_err_set(err, DRIFT_E_INPUT, r->path, "cannot open the HDF5 file: %s",
                         first[0] ? first : "unknown HDF5 error");
}

static int load_meta(drift_trace_reader *r, drift_err *err) {
    const char *f = r->path;
    char *fmt = NULL, *side = NULL;
    int64_t ver = 0, rank = 0, ws = 0;
    double gs = 0;
    int rc = tr_read_attr_str(r->file, "format", 64, &fmt, f, "/", err);
    if (rc) {
        drift_err_prefix(err, "not a drift trace");
        return rc;
    }
    if (strcmp(fmt, DRIFT_TRACE_FORMAT_NAME) != 0) {
        char w[512];
        snprintf(w, sizeof w, "%s:/", f);
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "not a drift trace: root attribute \"format\" is \"%s\", expected \"%s\"",
                           fmt, DRIFT_TRACE_FORMAT_NAME);
        goto done;
    }
    if ((rc = tr_read_attr_i64(r->file, "format_version", &ver, f, "/", err))) goto done;
    if (ver != DRIFT_TRACE_FORMAT_VERSION) {
        char w[512];
        snprintf(w, sizeof w, "%s:/", f);
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"format_version\" is %lld, this build reads version %d",
                           (long long)ver, DRIFT_TRACE_FORMAT_VERSION);
        goto done;
    }
    r->meta.format_version = (int)ver;
    if ((rc = tr_read_attr_str(r->file, "side", 64, &side, f, "/", err))) goto done;
    int sd = drift_trace_side_parse(side);
    if (sd < 0) {
        char w[512];
        snprintf(w, sizeof w, "%s:/", f);
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"side\" is \"%s\", expected trainer, rollout or replay",
                           side);
        goto done;
    }
    r->meta.side = (drift_trace_side)sd;
    if ((rc = tr_read_attr_i64(r->file, "rank", &rank, f, "/", err))) goto done;
    if ((rc = tr_read_attr_i64(r->file, "world_size", &ws, f, "/", err))) goto done;
    if (ws < 1 || ws > 1000000 || rank < 0 || rank >= ws) {
        char w[512];
        snprintf(w, sizeof w, "%s:/", f);
        rc = drift_err_set(err, DRIFT_E_INPUT, w,
                           "attributes \"rank\" %lld / \"world_size\" %lld: expected 0 <= rank < world_size <= 1000000",
                           (long long)rank, (long long)ws);
        goto done;
    }
    r->meta.rank = (int32_t)rank;
    r->meta.world_size = (int32_t)ws;
    if ((rc = tr_read_attr_f64(r->file, "guidance_scale", &gs, f, "/", err))) goto done;
    if (!isfinite(gs)) {
        char w[512];
        snprintf(w, sizeof w, "%s:/", f);
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"guidance_scale\": expected a finite number");
        goto done;
    }
    r->meta.guidance_scale = gs;
    static const char *const names[5] = {"run_id", "family", "plan", "producer", "created"};
    for (int i = 0; i < 5; i++)
        if ((rc = tr_read_attr_str(r->file, names[i], i == 2 ? DRIFT_TRACE_ATTR_MAX : 4096, &r->meta_strs[i], f, "/",
                                   err)))
            goto done;
    r->meta.run_id = r->meta_strs[0];
    r->meta.family = r->meta_strs[1];
    r->meta.plan_json = r->meta_strs[2];
    r->meta.producer = r->meta_strs[3];
    r->meta.created = r->meta_strs[4];
done:
    free(fmt);
    free(side);
    return rc;
}

/* /status (drift_trace_writer_set_status; absent in older traces): a scalar
 * fixed-length string of at most DRIFT_TRACE_STATUS_MAX bytes. Anything else,
 * or a read failure, leaves the status NULL (it is informative only). */
static int read_status(drift_trace_reader *r, drift_err *err) {
    int ok = tr_guard_path(r->file, "status", r->path, TR_STATUS, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1) return DRIFT_OK;
    hid_t d = H5I_INVALID_HID;
    int rc = tr_open_dataset(r->file, "status", 0, r->path, TR_STATUS, &d, err);
    if (rc) return rc;
    if (r->swmr) H5Drefresh(d); /* a follower re-reads it: the writer overwrites it in place ("closed" at the end) */
    hid_t ft = H5Dget_type(d), sp = H5Dget_space(d), mt = H5I_INVALID_HID;
    char *buf = NULL;
    size_t n = ft >= 0 ? H5Tget_size(ft) : 0;
    if (ft >= 0 && sp >= 0 && H5Tget_class(ft) == H5T_STRING && H5Tis_variable_str(ft) == 0 && n >= 1 &&
        n <= DRIFT_TRACE_STATUS_MAX && H5Sget_simple_extent_type(sp) == H5S_SCALAR) {
        if (!(buf = drift_calloc(1, n + 1))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, r->path, "out of memory");
        } else if ((mt = H5Tcopy(H5T_C_S1)) >= 0 && H5Tset_size(mt, n) >= 0 &&
                   H5Tset_strpad(mt, H5T_STR_NULLPAD) >= 0 && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0) {
            buf[n] = '\0';
            r->meta_strs[5] = buf;
            buf = NULL;
        }
    }
    drift_free(buf);
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    H5Dclose(d);
    return rc;
}

/* ---------------------------------------------------------------------- */
static drift_trace_compress compress_of(hid_t ds) {
    hid_t dcpl = H5Dget_create_plist(ds);
    drift_trace_compress c = DRIFT_TRACE_COMPRESS_NONE;
    if (dcpl < 0) return c;
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf && i < 16; i++) {
        unsigned flags = 0, cd[8];
        size_t ncd = 8;
        char nm[64];
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof nm, nm, NULL);
        if (id == H5Z_FILTER_DEFLATE) c = DRIFT_TRACE_COMPRESS_DEFLATE;
        if (id == 32001) c = DRIFT_TRACE_COMPRESS_BLOSC;
    }
    H5Pclose(dcpl);
    return c;
}

static int load_site(drift_trace_reader *r, hid_t g, const char *link, tr_site *tmp, drift_err *err) {
    const char *f = r->path;
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], w[3 * DRIFT_TRACE_NAME_MAX + 600], *dt = NULL;
    snprintf(obj, sizeof obj, "/sites/%s", link);
    snprintf(w, sizeof w, "%s:%s", f, obj);
    int rc = DRIFT_OK;
    int64_t id = -1;
    if ((rc = tr_open_group(g, link, f, obj, &tmp->grp, err))) return rc;
    if ((rc = tr_read_attr_str(tmp->grp, "name", DRIFT_TRACE_NAME_MAX, &tmp->name, f, obj, err))) return rc;
    char esc[3 * DRIFT_TRACE_NAME_MAX];
    const char *prob = tr_name_problem(tmp->name);
    if (prob) return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"name\": expected %s", prob);
    if (tr_escape_name(tmp->name, esc, sizeof esc) != 0 || strcmp(esc, link) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w,
                             "attribute \"name\" is \"%s\", expected the group name with %%2F/%%25 unescaped", tmp->name);
    if ((rc = tr_read_attr_i64(tmp->grp, "site_id", &id, f, obj, err))) return rc;
    if (id < 0 || (size_t)id >= r->n_sites)
        return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"site_id\" is %lld, expected 0..%zu", (long long)id,
                             r->n_sites - 1);
    tmp->id = (int)id;
    if ((rc = tr_read_attr_str(tmp->grp, "dtype", 16, &dt, f, obj, err))) return rc;
    tmp->dtype = drift_dtype_parse(dt);
    if (tmp->dtype != DRIFT_F32 && tmp->dtype != DRIFT_BF16 && tmp->dtype != DRIFT_F16) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"dtype\" is \"%s\", expected fp32, bf16 or fp16", dt);
        free(dt);
        return rc;
    }
    free(dt);
    if ((rc = tr_read_attr_i64v(tmp->grp, "shape", tmp->shape, DRIFT_MAX_DIMS, &tmp->ndim, f, obj, err))) return rc;
    int64_t bytes = 0;
    if (tr_numel(tmp->ndim, tmp->shape, &tmp->numel) != 0 ||
        tr_mul_checked(tmp->numel, (int64_t)drift_dtype_size(tmp->dtype), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w,
                             "attribute \"shape\": expected dimensions in 1..2^40 and a record of at most %llu bytes",
                             (unsigned long long)DRIFT_TRACE_READ_MAX);
    char sub[sizeof obj + 16];
    snprintf(sub, sizeof sub, "%s/index", obj);
    int ok_index = tr_guard_path(tmp->grp, "index", f, sub, err);
    if (ok_index == DRIFT_E_INPUT) return ok_index;
    if (ok_index != 1) return drift_err_set(err, DRIFT_E_INPUT, w, "missing dataset \"index\" (expected the record index table)");
    if ((rc = tr_open_dataset(tmp->grp, "index", r->view, f, sub, &tmp->index, err))) return rc;
    if ((rc = tr_check_table(tmp->index, TR_T_INDEX, &tmp->n_index, f, sub, err))) return rc;
    snprintf(sub, sizeof sub, "%s/stats", obj);
    int ok_stats = tr_guard_path(tmp->grp, "stats", f, sub, err);
    if (ok_stats == DRIFT_E_INPUT) return ok_stats;
    if (ok_stats != 1) return drift_err_set(err, DRIFT_E_INPUT, w, "missing dataset \"stats\" (expected the record stats table)");
    if ((rc = tr_open_dataset(tmp->grp, "stats", r->view, f, sub, &tmp->stats, err))) return rc;
    if ((rc = tr_check_table(tmp->stats, TR_T_STATS, &tmp->n_stats, f, sub, err))) return rc;
    snprintf(sub, sizeof sub, "%s/data", obj);
    int has = tr_guard_path(tmp->grp, "data", f, sub, err);
    if (has == DRIFT_E_INPUT) return has;
    if (has == 1) {
        if ((rc = tr_open_dataset(tmp->grp, "data", r->view, f, sub, &tmp->data, err))) return rc;
        hid_t t = H5Dget_type(tmp->data);
        char desc[256] = "an unreadable type";
        drift_dtype got = t >= 0 ? tr_dtype_of_type(t, desc, sizeof desc) : DRIFT_DTYPE_INVALID;
        if (t >= 0) H5Tclose(t);
        if (got != tmp->dtype) {
            snprintf(w, sizeof w, "%s:%s", f, sub);
            return drift_err_set(err, DRIFT_E_INPUT, w, "expected %s elements (the site's dtype), found %s",
                                 drift_dtype_name(tmp->dtype), got != DRIFT_DTYPE_INVALID ? drift_dtype_name(got) : desc);
        }
        int rank = 0;
        int64_t dims[DRIFT_MAX_DIMS + 1];
        if ((rc = tr_dataset_dims(tmp->data, DRIFT_MAX_DIMS + 1, &rank, dims, f, sub, err))) return rc;
        int same = rank == tmp->ndim + 1;
        for (int d = 0; same && d < tmp->ndim; d++) same = dims[d + 1] == tmp->shape[d];
        if (!same) {
            snprintf(w, sizeof w, "%s:%s", f, sub);
            return drift_err_set(err, DRIFT_E_INPUT, w,
                                 "expected dimensions [records, <shape attribute>] with %d record dimensions, found rank %d "
                                 "or other sizes",
                                 tmp->ndim, rank);
        }
        tmp->n_data = dims[0];
        tmp->compress = compress_of(tmp->data);
    }
    tmp->committed = 0;
    tmp->committed_for = -1;
    return DRIFT_OK;
}

static void free_site(tr_site *s) {
    hclose(&s->data, H5Dclose);
    hclose(&s->index, H5Dclose);
    hclose(&s->stats, H5Dclose);
    hclose(&s->grp, H5Gclose);
    free(s->name);
    s->name = NULL;
    free(s->damaged);
    s->damaged = NULL;
}

/* --- damaged sites (docs/RELIABILITY.md, finding 1) ------------------------
 * A site whose group or datasets cannot be loaded (an object header torn by a
 * kill, a bad attribute) does not cost the whole trace: it is kept as a
 * damaged site, named after its link, with the reason; its records are
 * unreadable and every other site reads as usual. */

/* The site name of a link: %2F and %25 unescaped, when that round-trips;
 * otherwise the link name itself. */
static void damaged_name(const char *link, char *out, size_t sz) {
    size_t o = 0;
    for (const char *p = link; *p && o + 1 < sz; p++) {
        if (p[0] == '%' && p[1] == '2' && (p[2] == 'F' || p[2] == '5')) {
            out[o++] = p[2] == 'F' ? '/' : '%';
            p += 2;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    char esc[3 * DRIFT_TRACE_NAME_MAX];
    if (tr_name_problem(out) || tr_escape_name(out, esc, sizeof esc) != 0 || strcmp(esc, link) != 0)
        snprintf(out, sz, "%s", link);
}

/* Turns tmp, whose loading failed with *why, into a damaged site: HDF5
 * handles closed, the name taken from the link, dtype and shape kept only if
 * they were valid, the reason kept (owned by tmp). */
static int mark_damaged(tr_site *tmp, const char *link, const drift_err *why, drift_err *err) {
    char name[3 * DRIFT_TRACE_NAME_MAX];
    damaged_name(link, name, sizeof name);
    hclose(&tmp->data, H5Dclose);
    hclose(&tmp->index, H5Dclose);
    hclose(&tmp->stats, H5Dclose);
    hclose(&tmp->grp, H5Gclose);
    free(tmp->name);
    tmp->name = drift_strdup(name);
    size_t len = strlen(why->where) + strlen(why->msg) + 3;
    tmp->damaged = drift_malloc(len);
    if (!tmp->name || !tmp->damaged) return drift_err_set(err, DRIFT_E_NOMEM, why->where, "out of memory");
    snprintf(tmp->damaged, len, "%s: %s", why->where, why->msg);
    int64_t numel = 0, bytes = 0;
    int keep = (tmp->dtype == DRIFT_F32 || tmp->dtype == DRIFT_BF16 || tmp->dtype == DRIFT_F16) && tmp->ndim >= 0 &&
               tmp->ndim <= DRIFT_MAX_DIMS && tr_numel(tmp->ndim, tmp->shape, &numel) == 0 &&
               tr_mul_checked(numel, (int64_t)drift_dtype_size(tmp->dtype), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) == 0;
    if (!keep) {
        tmp->dtype = DRIFT_F32;
        tmp->ndim = 0;
        memset(tmp->shape, 0, sizeof tmp->shape);
        numel = 1;
    }
    tmp->numel = numel;
    tmp->compress = DRIFT_TRACE_COMPRESS_NONE;
    tmp->n_index = tmp->n_stats = tmp->n_data = 0;
    tmp->committed = 0;
    tmp->committed_for = -1;
    return DRIFT_OK;
}

typedef struct sites_it {
    drift_trace_reader *r;
    hid_t g;
    tr_site *dmg;
    size_t n_dmg, seen;
    drift_err *err;
    int rc;
} sites_it;

static herr_t site_cb(hid_t g, const char *link, const H5L_info_t *li, void *data) {
    sites_it *it = data;
    drift_trace_reader *r = it->r;
    char w[600];
    snprintf(w, sizeof w, "%s:/sites", r->path);
    if (it->seen >= r->n_sites) {
        it->rc = drift_err_set(it->err, DRIFT_E_INPUT, w, "more links than the group declares (%zu)", r->n_sites);
        return -1;
    }
    it->seen++;
    size_t len = strlen(link);
    if (len < 1 || len >= 3 * DRIFT_TRACE_NAME_MAX) {
        it->rc = drift_err_set(it->err, DRIFT_E_INPUT, w, "link %zu: expected a name of 1..%d bytes", it->seen - 1,
                               3 * DRIFT_TRACE_NAME_MAX - 1);
        return -1;
    }
    char obj[3 * DRIFT_TRACE_NAME_MAX + 16];
    snprintf(obj, sizeof obj, "/sites/%s", link);
    if ((it->rc = tr_guard_link_info(g, link, li, r->path, obj, it->err))) return -1;
    tr_site tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.grp = tmp.data = tmp.index = tmp.stats = -1;
    drift_err why; /* a site's own failure makes it a damaged site, not a failed open */
    drift_err_clear(&why);
    int rc = load_site(r, g, link, &tmp, &why);
    if (!rc && r->sites[tmp.id].name)
        rc = drift_err_set(&why, DRIFT_E_INPUT, w, "sites \"%s\" and \"%s\" share site_id %d", r->sites[tmp.id].name,
                           tmp.name, tmp.id);
    if (rc == DRIFT_E_INPUT && !tr_guard_refused(&why)) {
        rc = mark_damaged(&tmp, link, &why, it->err);
        if (!rc) {
            it->dmg[it->n_dmg++] = tmp;
            return 0;
        }
    } else if (rc && it->err) {
        *it->err = why;
    }
    if (rc) {
        free_site(&tmp);
        it->rc = rc;
        return -1;
    }
    r->sites[tmp.id] = tmp;
    return 0;
}

static int load_sites(drift_trace_reader *r, drift_err *err) {
    const char *f = r->path;
    char w[600];
    snprintf(w, sizeof w, "%s:/sites", f);
    int ok = tr_guard_path(r->file, "sites", f, TR_SITES, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1) return drift_err_set(err, DRIFT_E_INPUT, w, "missing group (expected the sites group)");
    hid_t g = H5I_INVALID_HID;
    int rc = tr_open_group(r->file, TR_SITES, f, TR_SITES, &g, err);
    if (rc) return rc;
    H5G_info_t info;
    tr_site *dmg = NULL; /* owned: damaged sites not yet placed */
    size_t n_dmg = 0;
    if (H5Gget_info(g, &info) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, f, TR_SITES, "unreadable group");
        goto done;
    }
    if (info.nlinks > DRIFT_TRACE_MAX_SITES) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "%llu sites, expected at most %d", (unsigned long long)info.nlinks,
                           DRIFT_TRACE_MAX_SITES);
        goto done;
    }
    r->n_sites = (size_t)info.nlinks;
    if (r->n_sites == 0) goto done;
    r->sites = drift_calloc(r->n_sites, sizeof *r->sites);
    if (!r->sites) {
        r->n_sites = 0;
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < r->n_sites; i++) r->sites[i].grp = r->sites[i].data = r->sites[i].index = r->sites[i].stats = -1;
    /* damaged sites wait here until every loadable site has its slot (by site_id) */
    dmg = drift_calloc(r->n_sites, sizeof *dmg);
    if (!dmg) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    /* Links listed once, by iteration (by index, each lookup rebuilt the
     * group's name table: quadratic in the number of sites). */
    sites_it it = {r, g, dmg, 0, 0, err, DRIFT_OK};
    if (tr_iterate_links(g, site_cb, &it) < 0 && !it.rc)
        it.rc = tr_h5_fail(err, DRIFT_E_INPUT, f, TR_SITES, "unreadable link table");
    n_dmg = it.n_dmg;
    if ((rc = it.rc)) goto done;
    if (it.seen != r->n_sites) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "%zu links listed, the group declares %zu", it.seen, r->n_sites);
        goto done;
    }
    /* the damaged sites take the ids left free, in link order */
    for (size_t i = 0, slot = 0; i < n_dmg; i++, slot++) {
        while (r->sites[slot].name) slot++;
        dmg[i].id = (int)slot;
        r->sites[slot] = dmg[i];
        dmg[i].name = dmg[i].damaged = NULL;
    }
    n_dmg = 0;
done:
    for (size_t i = 0; i < n_dmg; i++) free_site(&dmg[i]);
    free(dmg);
    H5Gclose(g);
    return rc;
}

/* ---------------------------------------------------------------------- */
static hid_t open_table(drift_trace_reader *r, const char *path, enum tr_table t, int64_t *rows, drift_err *err,
                        int *rc) {
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, path);
    int ok = tr_guard_path(r->file, path, r->path, path, err);
    if (ok == DRIFT_E_INPUT) {
        *rc = ok;
        return -1;
    }
    if (ok != 1) {
        *rc = drift_err_set(err, DRIFT_E_INPUT, w, "missing dataset (expected the %s table)", tr_table_label(t));
        return -1;
    }
    hid_t ds = H5I_INVALID_HID;
    if ((*rc = tr_open_dataset(r->file, path, r->view, r->path, path, &ds, err))) return -1;
    *rc = tr_check_table(ds, t, rows, r->path, path, err);
    if (*rc) {
        H5Dclose(ds);
        return -1;
    }
    return ds;
}

int64_t tr_last_step(const drift_trace_reader *r) { return r->n_steps ? r->stp[r->n_steps - 1].step : -1; }

/* Reads the commit rows past those known. A row of step -1 (never written)
 * ends the committed prefix; any other inconsistency is an error. */
static int load_steps(drift_trace_reader *r, int64_t *added, drift_err *err) {
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, TR_STEPS);
    *added = 0;
    int64_t ext = 0;
    int rc = tr_check_table(r->steps, TR_T_STEPS, &ext, r->path, TR_STEPS, err);
    if (rc) return rc;
    r->steps_extent = ext;
    int64_t have = (int64_t)r->n_steps;
    if (ext <= have) return DRIFT_OK;
    int64_t want = ext - have;
    int64_t bytes = 0;
    if ((rc = tr_guard_rows(ext, sizeof(drift_trace_step), r->file_bytes, r->path, TR_STEPS, err))) return rc;
    if (tr_mul_checked(want, (int64_t)sizeof(drift_trace_step), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "%lld steps exceed the read limit", (long long)want);
    if ((size_t)ext > r->cap_steps) {
        drift_trace_step *ns = drift_realloc(r->stp, (size_t)ext * sizeof *ns);
        if (!ns) return drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        r->stp = ns;
        r->cap_steps = (size_t)ext;
    }
    drift_trace_step *rows = r->stp + have;
    if ((rc = tr_read_rows(r->steps, TR_T_STEPS, have, want, rows, r->path, TR_STEPS, err))) return rc;
    drift_trace_step prev = have ? r->stp[have - 1] : (drift_trace_step){-1, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < want; i++) {
        const drift_trace_step *s = &rows[i];
        if (s->step == -1) break; /* allocated, never written: the uncommitted tail */
        if (s->step <= prev.step || s->n_records < 0 || s->metrics_rows < prev.metrics_rows ||
            s->step_metrics_rows < prev.step_metrics_rows || s->notes_rows < prev.notes_rows || s->metrics_rows > TR_ROWS_MAX ||
            s->step_metrics_rows > TR_ROWS_MAX || s->notes_rows > TR_ROWS_MAX || s->n_records > TR_ROWS_MAX)
            return drift_err_set(err, DRIFT_E_INPUT, w,
                                 "row %lld (step %lld): expected a step above %lld and non-decreasing row counters",
                                 (long long)(have + i), (long long)s->step, (long long)prev.step);
        prev = *s;
        r->n_steps++;
        (*added)++;
    }
    if (*added) { /* the last commit row and the metric rows it commits lie in the file */
        const drift_trace_step *l = &r->stp[r->n_steps - 1];
        if ((rc = tr_reader_row_in_file(r, r->steps, (int64_t)r->n_steps - 1, TR_STEPS, err))) return rc;
        if (l->metrics_rows > 0 && (rc = tr_reader_row_in_file(r, r->mrows, l->metrics_rows - 1, TR_METRIC_ROWS, err)))
            return rc;
    }
    return DRIFT_OK;
}

static int load_names(drift_trace_reader *r, drift_err *err) {
    int64_t ext = 0;
    int rc = tr_check_table(r->mnames, TR_T_NAMES, &ext, r->path, TR_METRIC_NAMES, err);
    if (rc) return rc;
    int64_t have = (int64_t)r->n_mnames;
    if (ext <= have) return DRIFT_OK;
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, TR_METRIC_NAMES);
    int64_t want = ext - have, bytes = 0;
    if ((rc = tr_guard_rows(ext, sizeof(tr_name_row), r->file_bytes, r->path, TR_METRIC_NAMES, err))) return rc;
    if (ext > DRIFT_TRACE_MAX_SITES * 100 ||
        tr_mul_checked(want, (int64_t)sizeof(tr_name_row), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "%lld names, expected at most %d", (long long)ext,
                             DRIFT_TRACE_MAX_SITES * 100);
    tr_name_row *rows = drift_malloc((size_t)want * sizeof *rows);
    char **nv = drift_realloc(r->mnames_v, (size_t)ext * sizeof *nv);
    if (!rows || !nv) {
        free(rows);
        if (nv) r->mnames_v = nv;
        return drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
    }
    r->mnames_v = nv;
    rc = tr_read_rows(r->mnames, TR_T_NAMES, have, want, rows, r->path, TR_METRIC_NAMES, err);
    for (int64_t i = 0; !rc && i < want; i++) {
        rows[i].name[DRIFT_TRACE_NAME_MAX - 1] = '\0';
        if (!rows[i].name[0]) break; /* not yet written (SWMR tail) */
        r->mnames_v[r->n_mnames] = drift_strdup(rows[i].name);
        if (!r->mnames_v[r->n_mnames]) rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        else r->n_mnames++;
    }
    free(rows);
    return rc;
}

static int open_tables(drift_trace_reader *r, drift_err *err) {
    int rc = DRIFT_OK;
    int64_t rows = 0;
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, TR_METRICS);
    int ok = tr_guard_path(r->file, "metrics", r->path, TR_METRICS, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1) return drift_err_set(err, DRIFT_E_INPUT, w, "missing group (expected the metrics group)");
    if ((r->steps = open_table(r, TR_STEPS, TR_T_STEPS, &rows, err, &rc)) < 0) return rc;
    if ((r->mrows = open_table(r, TR_METRIC_ROWS, TR_T_METRICS, &rows, err, &rc)) < 0) return rc;
    if ((r->msteps = open_table(r, TR_METRIC_STEPS, TR_T_STEP_METRICS, &rows, err, &rc)) < 0) return rc;
    if ((r->mnames = open_table(r, TR_METRIC_NAMES, TR_T_NAMES, &rows, err, &rc)) < 0) return rc;
    if ((r->notes = open_table(r, TR_NOTES, TR_T_NOTES, &rows, err, &rc)) < 0) return rc;
    return DRIFT_OK;
}

/* ---------------------------------------------------------------------- */
typedef struct root_it {
    drift_trace_reader *r;
    drift_err *err;
    int rc;
    size_t n;
} root_it;

static herr_t root_cb(hid_t g, const char *link, const H5L_info_t *li, void *data) {
    root_it *it = data;
    char obj[300];
    if (++it->n > 64) return 1; /* the schema has a dozen: the rest is checked where it is opened */
    snprintf(obj, sizeof obj, "/%.290s", link);
    return (it->rc = tr_guard_link_info(g, link, li, it->r->path, obj, it->err)) ? -1 : 0;
}

/* The open policy at the root, whatever the command reads later: every
 * top-level link is a hard link, and /graph (read on demand) obeys the
 * dataset policy now, so that no command opens a file another would refuse. */
static int check_root(drift_trace_reader *r, drift_err *err) {
    root_it it = {r, err, DRIFT_OK, 0};
    if (tr_iterate_links(r->file, root_cb, &it) < 0 && !it.rc)
        it.rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, "/", "unreadable root group");
    if (it.rc) return it.rc;
    int ok = tr_guard_path(r->file, TR_GRAPH, r->path, TR_GRAPH, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok == 1) {
        hid_t ds = H5I_INVALID_HID;
        int rc = tr_open_dataset(r->file, TR_GRAPH, r->view, r->path, TR_GRAPH, &ds, err);
        if (rc) return rc;
        H5Dclose(ds);
    }
    return DRIFT_OK;
}

static void stat_file(drift_trace_reader *r) {
    struct stat st;
    r->file_bytes = !r->view && stat(r->path, &st) == 0 ? (int64_t)st.st_size : 0;
}

int drift_trace_reader_open(drift_trace_reader **out, const char *path, drift_trace_open_mode mode, drift_err *err) {
    tr_guard_init();
    if (!out || !path) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "reader_open: NULL argument");
    *out = NULL;
    drift_trace_reader *r = drift_calloc(1, sizeof *r);
    if (!r) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    r->file = r->steps = r->mrows = r->msteps = r->mnames = r->notes = H5I_INVALID_HID;
    r->follow = mode == DRIFT_TRACE_OPEN_FOLLOW;
    r->path = drift_strdup(path);
    int rc;
    int64_t added = 0;
    if (!r->path) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto fail;
    }
    if ((rc = tr_index_reader_open_file(r, err))) goto fail; /* plain trace, or a merge index view */
    stat_file(r);
    if ((rc = check_root(r, err))) goto fail;
    if ((rc = load_meta(r, err))) goto fail;
    if ((rc = read_status(r, err))) goto fail;
    if ((rc = load_sites(r, err))) goto fail;
    if ((rc = open_tables(r, err))) goto fail;
    if ((rc = load_steps(r, &added, err))) goto fail;
    if ((rc = load_names(r, err))) goto fail;
    if ((rc = tr_reader_load_extra(r, err))) goto fail;
    *out = r;
    return DRIFT_OK;
fail:
    drift_trace_reader_close(r);
    return rc;
}

void drift_trace_reader_close(drift_trace_reader *r) {
    if (!r) return;
    tr_h5_quiet();
    for (size_t i = 0; i < r->n_sites; i++) free_site(&r->sites[i]);
    free(r->sites);
    hclose(&r->steps, H5Dclose);
    hclose(&r->mrows, H5Dclose);
    hclose(&r->msteps, H5Dclose);
    hclose(&r->mnames, H5Dclose);
    hclose(&r->notes, H5Dclose);
    tr_reader_free_extra(r);
    for (size_t i = 0; i < r->n_mnames; i++) free(r->mnames_v[i]);
    free(r->mnames_v);
    free(r->stp);
    for (int i = 0; i < 7; i++) free(r->meta_strs[i]);
    if (r->file >= 0) H5Fclose(r->file);
    free(r->path);
    free(r);
}

const drift_trace_meta *drift_trace_reader_meta(const drift_trace_reader *r) { return r ? &r->meta : NULL; }
int drift_trace_reader_unclean(const drift_trace_reader *r) { return r ? r->unclean : 0; }
const char *drift_trace_reader_status(const drift_trace_reader *r) { return r ? r->meta_strs[5] : NULL; }
const char *drift_trace_reader_path(const drift_trace_reader *r) { return r ? r->path : NULL; }

const char *drift_trace_reader_ended(const drift_trace_reader *r) {
    if (!r) return "unknown";
    const char *st = r->meta_strs[5];
    /* a follower opens every file through SWMR (unclean stays 0): until /status says how the writer
     * ended, the lock tells a live writer from a killed one */
    int open_writer = r->unclean || (r->follow && st && strcmp(st, "recording") == 0);
    if (open_writer) return !r->view && tr_lock_busy(r->path, NULL) ? "writing" : "killed";
    if (!st) return "unknown";
    if (strncmp(st, "failed", 6) == 0) return "failed";
    if (strncmp(st, "repaired", 8) == 0) return "repaired"; /* killed, then `drift check --repair` */
    if (strcmp(st, "closed") == 0) return "closed";
    /* a custom final status (the recorder's): closed, with its own words */
    return strcmp(st, "recording") == 0 ? "killed" : "closed";
}

const drift_trace_step *drift_trace_reader_steps(const drift_trace_reader *r, size_t *n) {
    if (n) *n = r ? r->n_steps : 0;
    return r ? r->stp : NULL;
}

int drift_trace_reader_refresh(drift_trace_reader *r, int64_t *new_steps, drift_err *err) {
    tr_h5_quiet();
    if (new_steps) *new_steps = 0;
    if (!r) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "refresh: NULL reader");
    if (!r->swmr) return DRIFT_OK;
    stat_file(r);
    if (H5Drefresh(r->steps) < 0) return tr_h5_fail(err, DRIFT_E_IO, r->path, TR_STEPS, "cannot refresh");
    int64_t added = 0;
    int rc = load_steps(r, &added, err);
    if (rc) return rc;
    /* the writer's state may have changed (closed, failed): keep the old text if the new one cannot be read */
    char *old_status = r->meta_strs[5];
    r->meta_strs[5] = NULL;
    if ((rc = read_status(r, err))) {
        r->meta_strs[5] = old_status;
        return rc;
    }
    if (r->meta_strs[5]) drift_free(old_status);
    else r->meta_strs[5] = old_status;
    if (added > 0) {
        if (H5Drefresh(r->mnames) < 0) return tr_h5_fail(err, DRIFT_E_IO, r->path, TR_METRIC_NAMES, "cannot refresh");
        if ((rc = load_names(r, err))) return rc;
    }
    if (new_steps) *new_steps = added;
    return DRIFT_OK;
}

/* ---------------------------------------------------------------------- */
static int read_step_at(drift_trace_reader *r, tr_site *s, int64_t row, int64_t *step, drift_err *err) {
    drift_trace_index ix;
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], sub[sizeof obj + 8];
    snprintf(sub, sizeof sub, "%s/index", site_obj(s, obj, sizeof obj));
    int rc = tr_read_rows(s->index, TR_T_INDEX, row, 1, &ix, r->path, sub, err);
    if (!rc) *step = ix.step;
    return rc;
}

/* Committed row `row` of ds (obj) must lie in the file: a file cut short
 * after its writer was killed still opens through SWMR, and HDF5 reads the
 * missing bytes as zeros (wrong answers with exit 0). A merge view (no file
 * size) is checked through its rank files. */
int tr_reader_row_in_file(drift_trace_reader *r, hid_t ds, int64_t row, const char *obj, drift_err *err) {
    if (r->file_bytes <= 0 || row < 0 || ds < 0) return DRIFT_OK;
    int64_t end = -1;
    int k = tr_row_end(ds, row, &end);
    /* only a chunk known to end past the file is proof: an SWMR reader's chunk index
     * can lag (never written, or unreadable: the read itself then fails or is retried) */
    if (k != 0 || end <= r->file_bytes) return DRIFT_OK;
    struct stat st; /* a live writer may have extended the file since it was opened */
    if (stat(r->path, &st) == 0 && (int64_t)st.st_size > r->file_bytes) {
        r->file_bytes = (int64_t)st.st_size;
        if (end <= r->file_bytes) return DRIFT_OK;
    }
    char w[3 * DRIFT_TRACE_NAME_MAX + 700];
    snprintf(w, sizeof w, "%s:%s", r->path, obj);
    char where[160];
    snprintf(where, sizeof where, "ends at byte %lld", (long long)end);
    return drift_err_set(err, DRIFT_E_INPUT, w,
                         TR_CUT_BELOW_COMMITS " committed row %lld %s, but the file has %lld bytes (copied or "
                         "downloaded in part, or truncated after its writer stopped): its committed steps are not all "
                         "in it, so nothing is read from it; copy the whole file again",
                         (long long)row, where, (long long)r->file_bytes);
}

/* Committed records of s: the longest prefix of index rows whose step is
 * committed (steps never decrease along the index; never-written rows read
 * as step -1). Binary search from the previous count. */
static int count_committed(drift_trace_reader *r, tr_site *s, drift_err *err) {
    int64_t last = tr_last_step(r);
    int64_t lo = s->committed_for >= 0 ? s->committed : 0, hi = s->n_index;
    if (lo > hi) lo = 0;
    if (last < 0) {
        s->committed = 0;
        return DRIFT_OK;
    }
    /* invariant: rows < lo are committed; rows >= hi are not */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, step = -1;
        int rc = read_step_at(r, s, mid, &step, err);
        if (rc) return rc;
        if (step >= 0 && step <= last) lo = mid + 1;
        else hi = mid;
    }
    s->committed = lo;
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], w[sizeof obj + 600];
    snprintf(w, sizeof w, "%s:%s", r->path, site_obj(s, obj, sizeof obj));
    if (s->n_stats < lo)
        return drift_err_set(err, DRIFT_E_INPUT, w, "index has %lld committed records but stats has %lld rows",
                             (long long)lo, (long long)s->n_stats);
    if (s->data >= 0 && s->n_data < lo)
        return drift_err_set(err, DRIFT_E_INPUT, w, "index has %lld committed records but data has %lld",
                             (long long)lo, (long long)s->n_data);
    if (lo > 0) {
        char sub[sizeof obj + 8];
        int rc;
        site_obj(s, obj, sizeof obj);
        snprintf(sub, sizeof sub, "%s/index", obj);
        if ((rc = tr_reader_row_in_file(r, s->index, lo - 1, sub, err))) return rc;
        snprintf(sub, sizeof sub, "%s/stats", obj);
        if ((rc = tr_reader_row_in_file(r, s->stats, lo - 1, sub, err))) return rc;
        snprintf(sub, sizeof sub, "%s/data", obj);
        if (s->data >= 0 && (rc = tr_reader_row_in_file(r, s->data, lo - 1, sub, err))) return rc;
    }
    return DRIFT_OK;
}

static int refresh_extent(drift_trace_reader *r, tr_site *s, hid_t ds, const char *sub, int maxrank, int64_t *n,
                          drift_err *err) {
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], full[sizeof obj + 16];
    snprintf(full, sizeof full, "%s/%s", site_obj(s, obj, sizeof obj), sub);
    if (H5Drefresh(ds) < 0) return tr_h5_fail(err, DRIFT_E_IO, r->path, full, "cannot refresh");
    int rank = 0;
    int64_t dims[DRIFT_MAX_DIMS + 1];
    int rc = tr_dataset_dims(ds, maxrank, &rank, dims, r->path, full, err);
    if (!rc) *n = dims[0];
    return rc;
}

int tr_site_sync(drift_trace_reader *r, size_t i, drift_err *err) {
    if (!r || i >= r->n_sites) return drift_err_set(err, DRIFT_E_USAGE, r ? r->path : NULL, "site %zu out of range", i);
    tr_site *s = &r->sites[i];
    if (s->damaged) {
        char obj[3 * DRIFT_TRACE_NAME_MAX + 32], w[sizeof obj + 600];
        snprintf(w, sizeof w, "%s:%s", r->path, site_obj(s, obj, sizeof obj));
        return drift_err_set(err, DRIFT_E_INPUT, w,
                             "site \"%s\" is damaged, its records cannot be read (%s); every other site can (`drift check` "
                             "lists the damage)",
                             s->name, s->damaged);
    }
    if (s->committed_for == (int64_t)r->n_steps) return DRIFT_OK;
    int rc;
    if (r->swmr) {
        if ((rc = refresh_extent(r, s, s->index, "index", 1, &s->n_index, err))) return rc;
        if ((rc = refresh_extent(r, s, s->stats, "stats", 1, &s->n_stats, err))) return rc;
        if (s->data >= 0 && (rc = refresh_extent(r, s, s->data, "data", DRIFT_MAX_DIMS + 1, &s->n_data, err))) return rc;
    }
    if ((rc = count_committed(r, s, err))) {
        s->committed_for = -1;
        return rc;
    }
    s->committed_for = (int64_t)r->n_steps;
    return DRIFT_OK;
}

size_t drift_trace_reader_n_sites(const drift_trace_reader *r) { return r ? r->n_sites : 0; }

int drift_trace_reader_site(drift_trace_reader *r, size_t i, drift_trace_site_info *out, drift_err *err) {
    tr_h5_quiet();
    int rc = r && i < r->n_sites && r->sites[i].damaged ? DRIFT_OK : tr_site_sync(r, i, err);
    if (rc) return rc;
    const tr_site *s = &r->sites[i];
    memset(out, 0, sizeof *out);
    out->name = s->name;
    out->id = s->id;
    out->dtype = s->dtype;
    out->ndim = s->ndim;
    memcpy(out->shape, s->shape, sizeof s->shape);
    out->numel = s->numel;
    out->has_data = s->data >= 0;
    out->compress = s->compress;
    out->n_records = s->committed;
    out->damaged = s->damaged;
    return DRIFT_OK;
}

long drift_trace_reader_find_site(const drift_trace_reader *r, const char *name) {
    if (!r || !name) return -1;
    for (size_t i = 0; i < r->n_sites; i++)
        if (strcmp(r->sites[i].name, name) == 0) return (long)i;
    return -1;
}

static int check_rows(drift_trace_reader *r, size_t site, int64_t first, int64_t count, drift_err *err) {
    int rc = tr_site_sync(r, site, err);
    if (rc) return rc;
    const tr_site *s = &r->sites[site];
    if (first < 0 || count < 0 || first > s->committed || count > s->committed - first)
        return drift_err_set(err, DRIFT_E_USAGE, r->path, "site \"%s\": records %lld..%lld requested, %lld committed",
                             s->name, (long long)first, (long long)(first + count), (long long)s->committed);
    return DRIFT_OK;
}

int drift_trace_read_index(drift_trace_reader *r, size_t site, int64_t first, int64_t count, drift_trace_index *dst,
                           drift_err *err) {
    tr_h5_quiet();
    int rc = check_rows(r, site, first, count, err);
    if (rc) return rc;
    tr_site *s = &r->sites[site];
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], sub[sizeof obj + 8];
    snprintf(sub, sizeof sub, "%s/index", site_obj(s, obj, sizeof obj));
    rc = tr_read_rows(s->index, TR_T_INDEX, first, count, dst, r->path, sub, err);
    for (int64_t i = 0; !rc && i < count; i++) dst[i].stored = dst[i].stored && s->data >= 0 ? 1 : 0;
    return rc;
}

int drift_trace_read_stats(drift_trace_reader *r, size_t site, int64_t first, int64_t count, drift_trace_stats *dst,
                           drift_err *err) {
    tr_h5_quiet();
    int rc = check_rows(r, site, first, count, err);
    if (rc) return rc;
    tr_site *s = &r->sites[site];
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], sub[sizeof obj + 8];
    snprintf(sub, sizeof sub, "%s/stats", site_obj(s, obj, sizeof obj));
    return tr_read_rows(s->stats, TR_T_STATS, first, count, dst, r->path, sub, err);
}

int drift_trace_find_record(drift_trace_reader *r, size_t site, const drift_trace_index *key, int64_t *record,
                            drift_err *err) {
    tr_h5_quiet();
    *record = -1;
    int rc = tr_site_sync(r, site, err);
    if (rc) return rc;
    int64_t n = r->sites[site].committed;
    enum { BLK = 4096 };
    drift_trace_index *buf = drift_malloc(BLK * sizeof *buf);
    if (!buf) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "out of memory");
    for (int64_t first = 0; first < n && *record < 0; first += BLK) {
        int64_t cnt = n - first < BLK ? n - first : BLK;
        if ((rc = drift_trace_read_index(r, site, first, cnt, buf, err))) break;
        for (int64_t i = 0; i < cnt; i++) {
            if (buf[i].step == key->step && buf[i].microbatch == key->microbatch &&
                buf[i].denoise_index == key->denoise_index && buf[i].call_index == key->call_index) {
                *record = first + i;
                break;
            }
            if (buf[i].step > key->step) { /* steps never decrease along the index */
                first = n;
                break;
            }
        }
    }
    free(buf);
    return rc;
}

int drift_trace_read_record_raw(drift_trace_reader *r, size_t site, int64_t rec, void *dst, size_t dst_bytes,
                                drift_err *err) {
    tr_h5_quiet();
    int rc = check_rows(r, site, rec, 1, err);
    if (rc) return rc;
    tr_site *s = &r->sites[site];
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], w[sizeof obj + 600];
    snprintf(w, sizeof w, "%s:%s", r->path, site_obj(s, obj, sizeof obj));
    if (s->data < 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "site stores statistics only (no tensors)");
    drift_trace_index ix;
    if ((rc = drift_trace_read_index(r, site, rec, 1, &ix, err))) return rc;
    if (!ix.stored)
        return drift_err_set(err, DRIFT_E_INPUT, w, "record %lld (step %lld) was sampled out: only its stats are stored",
                             (long long)rec, (long long)ix.step);
    size_t need = (size_t)s->numel * drift_dtype_size(s->dtype);
    if (!dst || dst_bytes < need)
        return drift_err_set(err, DRIFT_E_USAGE, w, "record buffer of %zu bytes, the record needs %zu", dst_bytes, need);
    hsize_t st[DRIFT_MAX_DIMS + 1] = {0}, cn[DRIFT_MAX_DIMS + 1];
    st[0] = (hsize_t)rec;
    cn[0] = 1;
    for (int d = 0; d < s->ndim; d++) cn[d + 1] = (hsize_t)s->shape[d];
    hid_t t = H5Dget_type(s->data), fs = H5Dget_space(s->data), ms = H5Screate_simple(s->ndim + 1, cn, NULL);
    if (t < 0 || fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cn, NULL) < 0 ||
        H5Dread(s->data, t, ms, fs, H5P_DEFAULT, dst) < 0) {
        char sub[sizeof obj + 8];
        snprintf(sub, sizeof sub, "%s/data", obj);
        rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, sub, "cannot read the record");
    }
    if (t >= 0) H5Tclose(t);
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    return rc;
}

int drift_trace_read_record_f32(drift_trace_reader *r, size_t site, int64_t rec, float *dst, size_t dst_len,
                                drift_err *err) {
    tr_h5_quiet();
    int rc = tr_site_sync(r, site, err);
    if (rc) return rc;
    tr_site *s = &r->sites[site];
    size_t n = (size_t)s->numel;
    if (!dst || dst_len < n)
        return drift_err_set(err, DRIFT_E_USAGE, r->path, "site \"%s\": buffer of %zu floats, the record has %zu", s->name,
                             dst_len, n);
    if (s->dtype == DRIFT_F32) return drift_trace_read_record_raw(r, site, rec, dst, dst_len * sizeof(float), err);
    /* 16-bit: read raw bits into the upper half of dst, widen front to back
     * (element i's bits sit at byte 2n + 2i >= 4i: never overwritten early). */
    uint16_t *raw = (uint16_t *)(void *)dst + n;
    rc = drift_trace_read_record_raw(r, site, rec, raw, n * 2, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = raw[i];
        dst[i] = s->dtype == DRIFT_BF16 ? drift_bf16_to_f32(h) : drift_f16_to_f32(h);
    }
    return DRIFT_OK;
}
