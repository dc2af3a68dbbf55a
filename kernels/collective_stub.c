/* kernels/collective.h in a build without NCCL: every call says so. */
#include "kernels/collective.h"

#if !defined(DRIFT_HAVE_NCCL)
static int no_nccl(drift_err *err) {
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "nccl", "this build of drift has no NCCL (configure with -DDRIFT_NCCL=ON)");
}

int drift_nccl_available(void) { return 0; }

int drift_nccl_unique_id(unsigned char id[DRIFT_NCCL_ID_BYTES], drift_err *err) {
    (void)id;
    return no_nccl(err);
}

int drift_nccl_comm_init_all(int n, const drift_backend *const *be, drift_nccl_comm **out, drift_err *err) {
    for (int i = 0; out && i < n; i++) out[i] = NULL;
    (void)be;
    return no_nccl(err);
}

int drift_nccl_comm_init_rank(const drift_backend *be, int nranks, int rank, const unsigned char id[DRIFT_NCCL_ID_BYTES],
                              drift_nccl_comm **out, drift_err *err) {
    (void)be, (void)nranks, (void)rank, (void)id;
    if (out) *out = NULL;
    return no_nccl(err);
}

int drift_nccl_allreduce_host(drift_nccl_comm *c, void *host, size_t n, int type, int is_max, drift_err *err) {
    (void)c, (void)host, (void)n, (void)type, (void)is_max;
    return no_nccl(err);
}

int drift_nccl_allgather_tensor(drift_nccl_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err) {
    (void)c, (void)send, (void)recv;
    return no_nccl(err);
}

void drift_nccl_comm_free(drift_nccl_comm *c) { (void)c; }
#endif
