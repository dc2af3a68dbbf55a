/* LD_PRELOAD diagnostic: every CUDA kernel's GPU time in this process
 * (CUPTI activity records), printed at exit as a table per kernel name, the
 * GPU-busy time and the idle gaps between consecutive kernels. It tells a
 * GPU-bound forward (kernels back to back) from a host-bound one (gaps), for
 * drift's benches and torch's alike (issue 16's speed work).
 *
 *   KT_OUT=file (default stderr)  KT_TOP=N rows (default 40)
 *   KT_FROM=K: count only from the K-th kernel on (skips warm-up)
 *   LD_PRELOAD=$PWD/libkernel_times.so ./bench_cuda_forward "" 10 cuda:0:kernels=torch
 *
 * Built by tests/gpu/kernel_times.sh on the GPU machine (needs libcupti).
 * Owns: its record table (freed at exit). Not part of drift's binaries. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { uint64_t start, end; char name[96]; } kt_rec;

static kt_rec *recs;
static size_t nrec, caprec;

static void CUPTIAPI buf_request(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void keep(uint64_t s, uint64_t e, const char *name) {
    if (nrec == caprec) {
        size_t n = caprec ? caprec * 2 : 1 << 16;
        kt_rec *r = realloc(recs, n * sizeof *r);
        if (!r) return; /* a diagnostic: drop the record */
        recs = r, caprec = n;
    }
    recs[nrec].start = s, recs[nrec].end = e;
    snprintf(recs[nrec].name, sizeof recs[nrec].name, "%s", name ? name : "?");
    nrec++;
}

static void CUPTIAPI buf_complete(CUcontext c, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)c, (void)stream, (void)size;
    CUpti_Activity *a = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
            keep(k->start, k->end, k->name);
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
            keep(m->start, m->end, "(memset)");
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
            keep(m->start, m->end, "(memcpy)");
        }
    }
    free(buf);
}

__attribute__((constructor)) static void kt_start(void) {
    cuptiActivityRegisterCallbacks(buf_request, buf_complete);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    /* the CUDA runtime may tear its context down before our destructor runs:
       deliver buffers every 20 ms, and flush again at exit */
    cuptiActivityFlushPeriod(20);
}

static int by_start(const void *a, const void *b) {
    const kt_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}
typedef struct { char name[96]; double ns; long n; } kt_row;
static int by_ns(const void *a, const void *b) {
    const kt_row *x = a, *y = b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

__attribute__((destructor)) static void kt_report(void) {
    cuptiActivityFlushAll(1);
    const char *o = getenv("KT_OUT");
    FILE *f = o ? fopen(o, "w") : stderr;
    if (!f) f = stderr;
    qsort(recs, nrec, sizeof *recs, by_start);
    size_t from = getenv("KT_FROM") ? (size_t)atol(getenv("KT_FROM")) : 0;
    if (from > nrec) from = nrec;
    double busy = 0, gap_small = 0, gap_large = 0, sum = 0;
    uint64_t hi = 0;
    kt_row *rows = calloc(nrec + 1, sizeof *rows);
    size_t nrows = 0;
    for (size_t i = from; i < nrec; i++) {
        const kt_rec *r = &recs[i];
        sum += (double)(r->end - r->start);
        if (i > from && r->start > hi) {
            double g = (double)(r->start - hi);
            if (g < 1e6) gap_small += g; else gap_large += g;
        }
        uint64_t s = r->start > hi ? r->start : hi;
        if (r->end > s) busy += (double)(r->end - s);
        if (r->end > hi) hi = r->end;
        size_t j = 0;
        while (rows && j < nrows && strcmp(rows[j].name, r->name)) j++;
        if (rows && j == nrows) snprintf(rows[nrows++].name, sizeof rows[0].name, "%s", r->name);
        if (rows) rows[j].ns += (double)(r->end - r->start), rows[j].n++;
    }
    fprintf(f, "KT records %zu (counted from %zu): kernel time %.3f ms, GPU busy %.3f ms, gaps < 1 ms %.3f ms, "
               "gaps >= 1 ms %.3f ms\n", nrec, from, sum / 1e6, busy / 1e6, gap_small / 1e6, gap_large / 1e6);
    if (rows) {
        qsort(rows, nrows, sizeof *rows, by_ns);
        int top = getenv("KT_TOP") ? atoi(getenv("KT_TOP")) : 40;
        for (size_t j = 0; j < nrows && (int)j < top; j++)
            fprintf(f, "KT %10.3f ms %7ld x %9.2f us  %s\n", rows[j].ns / 1e6, rows[j].n, rows[j].ns / 1e3 / rows[j].n,
                    rows[j].name);
    }
    free(rows);
    free(recs);
    if (f != stderr) fclose(f);
}
