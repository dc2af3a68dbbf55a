/* drift's own NVTX v3 injection (not CUPTI's): InitializeInjectionNvtx2 is
 * called by every NVTX instance of the process (each library built with the
 * header-only nvtx3 has its own) on its first NVTX call when
 * NVTX_INJECTION64_PATH names this library. We fill that instance's CORE
 * callback table with handlers that keep a per-thread range stack; GEMM and
 * collective records carry the stack as a path ("forward/blocks.1/attn1").
 *
 * Handled: nvtxRangePushA/W/Ex, nvtxRangePop, nvtxRangeStartA/W/Ex,
 * nvtxRangeEnd, nvtxMarkA/W/Ex (counted only). Domain (CORE2) ranges, which
 * NCCL and other libraries use for their own instrumentation, are not
 * handled and do not appear in paths.
 *
 * Start/end ranges are not nested per thread; a thread whose push/pop stack
 * is empty is attributed to the latest start/end range it started that is
 * still open (bounded table, ICPT_MAX_OPEN). */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>

#include "recorder/intercept/intercept.h"

#define ICPT_NVTX_DEPTH 64     /* names kept per thread; deeper pushes are counted */
#define ICPT_NVTX_NAME 64      /* bytes per name (with NUL) */
#define ICPT_MAX_OPEN 64       /* open start/end ranges tracked */

typedef struct tl_stack {
    int depth;                               /* may exceed ICPT_NVTX_DEPTH */
    char names[ICPT_NVTX_DEPTH][ICPT_NVTX_NAME];
} tl_stack;

static _Thread_local tl_stack tl;

typedef struct open_range {
    uint64_t id;                             /* 0 = free slot */
    pthread_t thread;
    char name[ICPT_NVTX_NAME];
} open_range;

static struct {
    pthread_mutex_t mu;
    open_range open[ICPT_MAX_OPEN];
    atomic_ullong next_id;
    atomic_llong ranges;
    atomic_int injected;
} nv = {.mu = PTHREAD_MUTEX_INITIALIZER, .next_id = 1};

int64_t icpt_nvtx_ranges(void) { return (int64_t)atomic_load(&nv.ranges); }
int icpt_nvtx_injected(void) { return atomic_load(&nv.injected); }

/* ---- message text --------------------------------------------------------- */
static void from_wide(char *dst, const wchar_t *w) {
    size_t i = 0;
    if (w)
        for (; i + 1 < ICPT_NVTX_NAME && w[i]; i++) dst[i] = (w[i] > 0 && w[i] < 128) ? (char)w[i] : '?';
    dst[i] = '\0';
}

static void from_attr(char *dst, const nvtxEventAttributes_t *a) {
    if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof a->message) {
        icpt_copy(dst, ICPT_NVTX_NAME, "?");
        return;
    }
    switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: icpt_copy(dst, ICPT_NVTX_NAME, a->message.ascii ? a->message.ascii : ""); break;
    case NVTX_MESSAGE_TYPE_UNICODE: from_wide(dst, a->message.unicode); break;
    case NVTX_MESSAGE_TYPE_REGISTERED: icpt_copy(dst, ICPT_NVTX_NAME, "<registered>"); break;
    default: icpt_copy(dst, ICPT_NVTX_NAME, ""); break;
    }
}

/* ---- push / pop -------------------------------------------------------------- */
static int push_name(const char *name_or_null, const wchar_t *w, const nvtxEventAttributes_t *a) {
    atomic_fetch_add_explicit(&nv.ranges, 1, memory_order_relaxed);
    int level = tl.depth;
    if (tl.depth < ICPT_NVTX_DEPTH) {
        char *dst = tl.names[tl.depth];
        if (a) from_attr(dst, a);
        else if (w) from_wide(dst, w);
        else icpt_copy(dst, ICPT_NVTX_NAME, name_or_null ? name_or_null : "");
        /* '/' separates path components: keep names unambiguous */
        for (char *p = dst; *p; p++)
            if (*p == '/' || (unsigned char)*p < 32) *p = '_';
    }
    tl.depth++;
    return level;
}

static int NVTX_API h_push_a(const char *m) { return push_name(m, NULL, NULL); }
static int NVTX_API h_push_w(const wchar_t *m) { return push_name(NULL, m, NULL); }
static int NVTX_API h_push_ex(const nvtxEventAttributes_t *a) { return push_name(NULL, NULL, a); }
static int NVTX_API h_pop(void) {
    if (tl.depth <= 0) return -1;
    return --tl.depth;
}

/* ---- start / end ---------------------------------------------------------- */
static nvtxRangeId_t start_range(const char *m, const wchar_t *w, const nvtxEventAttributes_t *a) {
    atomic_fetch_add_explicit(&nv.ranges, 1, memory_order_relaxed);
    uint64_t id = atomic_fetch_add(&nv.next_id, 1);
    char name[ICPT_NVTX_NAME];
    if (a) from_attr(name, a);
    else if (w) from_wide(name, w);
    else icpt_copy(name, sizeof name, m ? m : "");
    for (char *p = name; *p; p++)
        if (*p == '/' || (unsigned char)*p < 32) *p = '_';
    pthread_mutex_lock(&nv.mu);
    for (int i = 0; i < ICPT_MAX_OPEN; i++)
        if (nv.open[i].id == 0) {
            nv.open[i].id = id;
            nv.open[i].thread = pthread_self();
            memcpy(nv.open[i].name, name, sizeof name);
            break;
        }
    pthread_mutex_unlock(&nv.mu);
    return (nvtxRangeId_t)id;
}

static nvtxRangeId_t NVTX_API h_start_a(const char *m) { return start_range(m, NULL, NULL); }
static nvtxRangeId_t NVTX_API h_start_w(const wchar_t *m) { return start_range(NULL, m, NULL); }
static nvtxRangeId_t NVTX_API h_start_ex(const nvtxEventAttributes_t *a) { return start_range(NULL, NULL, a); }
static void NVTX_API h_end(nvtxRangeId_t id) {
    if (id == 0) return;
    pthread_mutex_lock(&nv.mu);
    for (int i = 0; i < ICPT_MAX_OPEN; i++)
        if (nv.open[i].id == id) nv.open[i].id = 0;
    pthread_mutex_unlock(&nv.mu);
}

static void NVTX_API h_mark_a(const char *m) { (void)m; }
static void NVTX_API h_mark_w(const wchar_t *m) { (void)m; }
static void NVTX_API h_mark_ex(const nvtxEventAttributes_t *a) { (void)a; }

/* ---- the path ------------------------------------------------------------------ */
void icpt_range_path(char out[DRIFT_CENSUS_RANGE_MAX]) {
    out[0] = '\0';
    int d = tl.depth < ICPT_NVTX_DEPTH ? tl.depth : ICPT_NVTX_DEPTH;
    if (d == 0) {
        /* no push/pop range: the newest open start/end range of this thread */
        uint64_t best = 0;
        pthread_t self = pthread_self();
        pthread_mutex_lock(&nv.mu);
        for (int i = 0; i < ICPT_MAX_OPEN; i++)
            if (nv.open[i].id > best && pthread_equal(nv.open[i].thread, self)) {
                best = nv.open[i].id;
                icpt_copy(out, DRIFT_CENSUS_RANGE_MAX, nv.open[i].name);
            }
        pthread_mutex_unlock(&nv.mu);
        return;
    }
    /* innermost first: find how many trailing components fit */
    size_t total = 0;
    int first = d;
    const size_t room = DRIFT_CENSUS_RANGE_MAX - 1 - 4; /* keep space for ".../" */
    while (first > 0) {
        size_t len = strlen(tl.names[first - 1]) + (first < d ? 1 : 0);
        if (total + len > room) break;
        total += len;
        first--;
    }
    size_t o = 0;
    if (first > 0 || tl.depth > ICPT_NVTX_DEPTH) {
        memcpy(out, ".../", 4);
        o = 4;
    }
    for (int i = first; i < d; i++) {
        size_t len = strlen(tl.names[i]);
        if (i > first) out[o++] = '/';
        memcpy(out + o, tl.names[i], len);
        o += len;
    }
    out[o] = '\0';
}

/* ---- the injection entry point ------------------------------------------------ */
static void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn) {
    if (id <= size && table[id]) *table[id] = fn;
}

/* Exported (see libdrift_intercept.map). Returns 1 on success, 0 if this
 * NVTX instance offers no CORE table (NVTX then stays a no-op). */
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table);
int NVTX_API InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    static atomic_int rep;
    if (!get_table) return 0;
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable) {
        icpt_report_once(&rep, "NVTX injection: no callback export table; ranges are not attributed");
        return 0;
    }
    const NvtxExportTableVersionInfo *vi = (const NvtxExportTableVersionInfo *)get_table(NVTX_ETID_VERSIONINFO);
    if (vi && vi->struct_size >= sizeof *vi && vi->SetInjectionNvtxVersion) vi->SetInjectionNvtxVersion(NVTX_VERSION);
    NvtxFunctionTable t = NULL;
    unsigned size = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &size) || !t) {
        icpt_report_once(&rep, "NVTX injection: no CORE function table; ranges are not attributed");
        return 0;
    }
    set_slot(t, size, NVTX_CBID_CORE_MarkEx, (NvtxFunctionPointer)h_mark_ex);
    set_slot(t, size, NVTX_CBID_CORE_MarkA, (NvtxFunctionPointer)h_mark_a);
    set_slot(t, size, NVTX_CBID_CORE_MarkW, (NvtxFunctionPointer)h_mark_w);
    set_slot(t, size, NVTX_CBID_CORE_RangeStartEx, (NvtxFunctionPointer)h_start_ex);
    set_slot(t, size, NVTX_CBID_CORE_RangeStartA, (NvtxFunctionPointer)h_start_a);
    set_slot(t, size, NVTX_CBID_CORE_RangeStartW, (NvtxFunctionPointer)h_start_w);
    set_slot(t, size, NVTX_CBID_CORE_RangeEnd, (NvtxFunctionPointer)h_end);
    set_slot(t, size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)h_push_ex);
    set_slot(t, size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)h_push_a);
    set_slot(t, size, NVTX_CBID_CORE_RangePushW, (NvtxFunctionPointer)h_push_w);
    set_slot(t, size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)h_pop);
    atomic_store(&nv.injected, 1);
    return 1;
}
