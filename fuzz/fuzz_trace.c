/* libFuzzer harness: an arbitrary byte string opened as a trace file
 * (formats/trace.h). The bytes are written to a private temporary file (on
 * /dev/shm when there is one); the reader opens it, lists and reads
 * everything it exposes (meta, steps, sites with every committed record's
 * index, stats and tensor, metrics, notes, params, param dtypes, buffers,
 * graph); then, in follow mode, again; drift_trace_check examines it and
 * drift_trace_repair runs on it, after which it is opened and read once more.
 * Every call must return a documented status.
 *
 * Speed (each HDF5 open costs about a millisecond here, most of it libhdf5's
 * per-file cache setup under ASan): the tail after the first open (follow
 * open, check, repair, second open) runs in full on every input the reader
 * opened, and on a deterministic 1 in TRACE_FULL_EVERY of the others (chosen
 * by a hash of the input, so that an input always takes the same path and
 * libFuzzer's coverage feedback stays stable). An input the reader rejects is
 * mostly one whose bytes break an HDF5 checksum; on it the tail would run the
 * same failing open four more times. Where the first open succeeded cleanly,
 * repair must leave the file byte for byte unchanged (a clean file is not
 * touched), and is checked for that instead of opening it a third time.
 *
 * Leaks: fuzz/run.sh runs this harness with -detect_leaks=0 (LeakSanitizer
 * still checks the whole process when it exits). libhdf5 1.10 leaks a few
 * cache entries on about one input in four (a corrupted file it fails to
 * open; suppressed below); libFuzzer re-runs every input whose mallocs and
 * frees do not balance and scans the heap, which halved the speed, and gives
 * the per-input check up by itself after 1000 such inputs anyway. */
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <hdf5.h>

#include "formats/census.h"
#include "formats/trace.h"
#include "formats/trace_index.h"
#include "fuzz/fuzz_common.h"

#ifndef DRIFT_FUZZ_IN_TEST
/* libhdf5 (1.10) itself leaks a few cache entries when it fails to open a
 * corrupted file; those are not drift's. Leaks of drift's own HDF5 handles
 * are caught by the open-object count check below instead. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }
#endif

/* Reads larger than this are skipped by the harness (not by the reader):
 * the reader's own limit is DRIFT_TRACE_READ_MAX, too much per input. */
#define TRACE_FUZZ_READ_CAP ((size_t)4 << 20)

static char trace_g_path[512];

static const char *trace_tmp_path(void) {
    if (!trace_g_path[0]) {
        const char *dir = getenv("FUZZ_TMPDIR");
        if (!dir || !dir[0]) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(trace_g_path, sizeof trace_g_path, "%s/drift-fuzz-trace.%ld.h5", dir, (long)getpid());
    }
    return trace_g_path;
}

#define TRACE_OK(rc, what)                                                                          \
    FUZZ_CHECK(fuzz_status_ok(rc) && ((rc) == DRIFT_OK || err.msg[0]), "%s: rc %d: %s: %s", what, rc, \
               err.where, err.msg)

static void trace_read_everything(drift_trace_reader *r) {
    drift_err err;
    drift_err_clear(&err);
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    FUZZ_CHECK(m && m->run_id && m->family && m->plan_json && m->producer && m->created, "meta strings");
    (void)drift_trace_reader_unclean(r);
    FUZZ_CHECK(drift_trace_reader_path(r) != NULL, "path");
    size_t n_steps = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(r, &n_steps);
    for (size_t i = 1; i < n_steps; i++)
        FUZZ_CHECK(steps[i].step > steps[i - 1].step, "steps not increasing at %zu", i);

    size_t ns = drift_trace_reader_n_sites(r);
    for (size_t s = 0; s < ns; s++) {
        drift_trace_site_info si;
        drift_err_clear(&err);
        int rc = drift_trace_reader_site(r, s, &si, &err);
        TRACE_OK(rc, "site");
        if (rc != DRIFT_OK) continue;
        FUZZ_CHECK(si.name && drift_trace_reader_find_site(r, si.name) == (long)s, "find_site(%s)", si.name);
        FUZZ_CHECK(si.n_records >= 0 && si.numel >= 0, "negative counts");
        if (si.damaged) {
            /* listed, but unreadable: a clear input error naming the site */
            drift_trace_index one;
            FUZZ_CHECK(si.n_records == 0 && !si.has_data, "damaged site \"%s\" with records", si.name);
            drift_err_clear(&err);
            rc = drift_trace_read_index(r, s, 0, 1, &one, &err);
            FUZZ_CHECK(rc == DRIFT_E_INPUT && strstr(err.msg, "damaged"), "reading damaged site \"%s\": rc %d: %s",
                       si.name, rc, err.msg);
            continue;
        }
        int64_t nrec = si.n_records < 64 ? si.n_records : 64;
        if (nrec > 0) {
            drift_trace_index *ix = calloc((size_t)nrec, sizeof *ix);
            drift_trace_stats *st = calloc((size_t)nrec, sizeof *st);
            rc = drift_trace_read_index(r, s, 0, nrec, ix, &err);
            TRACE_OK(rc, "read_index");
            rc = drift_trace_read_stats(r, s, 0, nrec, st, &err);
            TRACE_OK(rc, "read_stats");
            int64_t rec = -1;
            rc = drift_trace_find_record(r, s, &ix[0], &rec, &err);
            TRACE_OK(rc, "find_record");
            size_t bytes = (size_t)si.numel * 4;
            if (si.has_data && si.numel > 0 && bytes <= TRACE_FUZZ_READ_CAP) {
                float *dst = malloc(bytes);
                for (int64_t k = 0; k < nrec && k < 8; k++) {
                    rc = drift_trace_read_record_f32(r, s, k, dst, (size_t)si.numel, &err);
                    TRACE_OK(rc, "read_record_f32");
                    rc = drift_trace_read_record_raw(r, s, k, dst, bytes, &err);
                    TRACE_OK(rc, "read_record_raw");
                }
                free(dst);
            }
            free(ix);
            free(st);
        }
        /* out of range must be an error, not a crash */
        drift_trace_index one;
        int rc2 = drift_trace_read_index(r, s, si.n_records, 1, &one, &err);
        FUZZ_CHECK(rc2 != DRIFT_OK, "read_index past the committed rows succeeded");
    }
    drift_trace_site_info bogus;
    FUZZ_CHECK(drift_trace_reader_site(r, ns, &bogus, &err) != DRIFT_OK, "site index n accepted");

    drift_trace_metric *mr = NULL;
    size_t n = 0;
    int rc = drift_trace_read_metrics(r, INT64_MIN, &mr, &n, &err);
    TRACE_OK(rc, "read_metrics");
    free(mr);
    drift_trace_step_metrics *sm = NULL;
    rc = drift_trace_read_step_metrics(r, INT64_MIN, &sm, &n, &err);
    TRACE_OK(rc, "read_step_metrics");
    free(sm);
    for (size_t i = 0; i < drift_trace_reader_n_metric_sites(r); i++)
        FUZZ_CHECK(drift_trace_reader_metric_site(r, i) != NULL, "metric site %zu", i);
    drift_trace_note *notes = NULL;
    rc = drift_trace_read_notes(r, INT64_MIN, &notes, &n, &err);
    TRACE_OK(rc, "read_notes");
    free(notes);

    for (size_t i = 0; i < drift_trace_reader_n_params(r); i++) {
        drift_trace_param_info pi;
        rc = drift_trace_reader_param(r, i, &pi);
        if (rc != DRIFT_OK) continue;
        FUZZ_CHECK(pi.fqn && drift_trace_reader_find_param(r, pi.fqn) == (long)i, "find_param");
        if (pi.numel > 0 && (size_t)pi.numel * 4 <= TRACE_FUZZ_READ_CAP) {
            float *dst = malloc((size_t)pi.numel * 4);
            rc = drift_trace_read_param(r, i, dst, (size_t)pi.numel, &err);
            TRACE_OK(rc, "read_param");
            free(dst);
        }
    }
    for (size_t i = 0; i < drift_trace_reader_n_param_dtypes(r); i++) {
        const char *fqn = NULL;
        drift_dtype dt;
        if (drift_trace_reader_param_dtype(r, i, &fqn, &dt) == DRIFT_OK)
            FUZZ_CHECK(fqn != NULL, "param dtype fqn");
    }
    for (size_t i = 0; i < drift_trace_reader_n_buffers(r); i++) {
        drift_trace_buffer_info bi;
        if (drift_trace_reader_buffer(r, i, &bi) != DRIFT_OK) continue;
        size_t bytes = (size_t)bi.numel * drift_dtype_size(bi.dtype);
        if (bi.numel > 0 && bytes > 0 && bytes <= TRACE_FUZZ_READ_CAP) {
            void *dst = malloc(bytes);
            rc = drift_trace_read_buffer(r, i, dst, bytes, &err);
            TRACE_OK(rc, "read_buffer");
            free(dst);
        }
    }
    char *graph = NULL;
    size_t glen = 0;
    rc = drift_trace_read_graph(r, &graph, &glen, &err);
    TRACE_OK(rc, "read_graph");
    free(graph);
    drift_trace_step_graph *sg = NULL; /* per-step graphs: notes parsed, bytes bounded by /graph_steps */
    size_t nsg = 0;
    rc = drift_trace_read_step_graphs(r, &sg, &nsg, &err);
    TRACE_OK(rc, "read_step_graphs");
    for (size_t i = 0; rc == DRIFT_OK && i < nsg && i < 4; i++) {
        if (sg[i].graph < 1 || (uint64_t)sg[i].length > TRACE_FUZZ_READ_CAP) continue;
        rc = drift_trace_read_step_graph(r, &sg[i], &graph, &glen, &err);
        TRACE_OK(rc, "read_step_graph");
        free(graph);
    }
    free(sg);
    drift_libraries libs;
    int has_libs = 0;
    rc = drift_trace_read_libraries(r, &libs, &has_libs, &err);
    TRACE_OK(rc, "read_libraries");
    if (rc == DRIFT_OK && has_libs) { /* the texts a report prints stay bounded and NUL-terminated */
        char line[4096];
        drift_libraries_describe(&libs, line, sizeof line);
        FUZZ_CHECK(strlen(line) < sizeof line, "describe overran");
    }
    int64_t fresh = 0;
    rc = drift_trace_reader_refresh(r, &fresh, &err);
    TRACE_OK(rc, "refresh");
}

/* After every close, no HDF5 identifier may be left open. */
static void trace_no_open_ids(const char *after) {
    ssize_t n = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
    FUZZ_CHECK(n == 0, "%zd HDF5 object(s) still open after %s", n, after);
}

/* Opens path in mode and reads everything. Returns the open's status; sets
 * *unclean (may be NULL) when it was opened through the SWMR fallback. */
static int trace_open_and_read(const char *path, drift_trace_open_mode mode, int *unclean) {
    drift_trace_reader *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_trace_reader_open(&r, path, mode, &err);
    fuzz_report("trace", rc, &err);
    TRACE_OK(rc, "open");
    if (rc == DRIFT_OK) {
        FUZZ_CHECK(r != NULL, "no reader");
        if (unclean) *unclean = drift_trace_reader_unclean(r);
        trace_read_everything(r);
        /* the intercept census tables (formats/census.c), when present */
        drift_census *c = NULL;
        drift_err cerr;
        drift_err_clear(&cerr);
        int crc = drift_census_read(r, &c, &cerr);
        fuzz_report("census", crc, &cerr);
        FUZZ_CHECK(fuzz_status_ok(crc) && (crc == DRIFT_OK || cerr.msg[0]), "census read: rc %d: %s: %s", crc,
                   cerr.where, cerr.msg);
        FUZZ_CHECK(crc == DRIFT_OK || c == NULL, "a failed census read returned a census");
        if (c) FUZZ_CHECK(c->n_gemm <= DRIFT_CENSUS_MAX_ROWS && c->n_coll <= DRIFT_CENSUS_MAX_ROWS, "census rows");
        drift_census_free(c);
    }
    drift_trace_reader_close(r);
    trace_no_open_ids(mode == DRIFT_TRACE_OPEN_FOLLOW ? "closing a follow-mode reader" : "closing a reader");
    return rc;
}

/* 1 in TRACE_FULL_EVERY of the inputs the reader rejects still runs the
 * whole tail (check and repair have code for files that do not open). */
#define TRACE_FULL_EVERY 8

static uint32_t trace_hash(const uint8_t *data, size_t size) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 16777619u;
    return h;
}

/* 1 if the file at path holds exactly data[0..size). */
static int trace_file_equals(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int same = 1;
    unsigned char buf[8192];
    size_t off = 0, got;
    while (same && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (got > size - off || memcmp(buf, data + off, got) != 0) same = 0;
        off += got;
    }
    fclose(f);
    return same && off == size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
#ifdef __linux__
    /* An SWMR open retries a failing checksum up to 12 (follow mode 22)
     * times, sleeping 1, 2, 4... ns in between; with the default 50 us timer
     * slack each of those sleeps took ~60 us: most of the wall time of an
     * input the reader rejects. Same attempts, precise sleeps. */
    static int slack_set;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
        slack_set = 1;
    }
#endif
    /* libhdf5 keeps freed blocks on free lists of at most 64 KiB each, so its
     * ~1 MiB per-file metadata cache was freed and allocated anew (mmap, page
     * faults, zeroing) on every open: a third of the time went to the kernel.
     * Larger lists let the next open reuse it. */
    static int lists_set;
    if (!lists_set) {
        H5set_free_list_limits(64 << 20, 16 << 20, 64 << 20, 16 << 20, 64 << 20, 16 << 20);
        lists_set = 1;
    }
    const char *path = trace_tmp_path();
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    /* the drift merge index probe and listing (formats/trace_index.c) */
    drift_trace_index_info ii;
    memset(&ii, 0, sizeof ii);
    drift_err ierr;
    drift_err_clear(&ierr);
    if (drift_trace_index_is(path)) {
        int irc = drift_trace_index_info_read(path, &ii, &ierr);
        fuzz_report("index", irc, &ierr);
        FUZZ_CHECK(fuzz_status_ok(irc) && (irc == DRIFT_OK || ierr.msg[0]), "index info: rc %d: %s: %s", irc,
                   ierr.where, ierr.msg);
        drift_trace_index_info_free(&ii);
    }
    trace_no_open_ids("the index probe");

    int unclean = 0;
    int opened = trace_open_and_read(path, DRIFT_TRACE_OPEN_NORMAL, &unclean) == DRIFT_OK;
    int full = trace_hash(data, size) % TRACE_FULL_EVERY == 0;
    if (!opened && !full) goto done;

    trace_open_and_read(path, DRIFT_TRACE_OPEN_FOLLOW, NULL);

    drift_trace_check_report rep;
    memset(&rep, 0, sizeof rep);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_trace_check(path, &rep, &err);
    TRACE_OK(rc, "check");
    FUZZ_CHECK(!opened || rc == DRIFT_OK, "the reader opened the file but drift_trace_check failed: %s: %s", err.where,
               err.msg);
    for (size_t i = 0; i < rep.n_problems; i++) FUZZ_CHECK(rep.problems[i] != NULL, "problem %zu", i);
    drift_trace_check_report_free(&rep);
    trace_no_open_ids("drift_trace_check");

    int64_t trimmed = 0;
    rc = drift_trace_repair(path, &trimmed, &err);
    TRACE_OK(rc, "repair");
    trace_no_open_ids("drift_trace_repair");
    if (opened && !unclean) {
        /* a file that opened cleanly is left as it was */
        FUZZ_CHECK(rc == DRIFT_OK && trimmed == 0, "repair of a clean file: rc %d, %lld rows trimmed: %s", rc,
                   (long long)trimmed, err.msg);
        FUZZ_CHECK(trace_file_equals(path, data, size), "repair changed a file that opened cleanly");
    } else if (rc == DRIFT_OK) {
        trace_open_and_read(path, DRIFT_TRACE_OPEN_NORMAL, NULL);
    }
done:
    unlink(path);
    return 0;
}
