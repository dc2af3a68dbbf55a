/* The op-parity harness (tests/parity/parity.h) on a GPU: the whole table
 * on ref (the oracle), cpu, and every cuda kernel variant (backend spec
 * options, kernels/cuda/cuda_backend.h): the defaults, 64-bit indexing,
 * norms without shared-memory rows, the unfused and the naive GEMM, small
 * attention scratch budgets (query-row blocks; chunks of 4 heads then a
 * ragged one for the (2,3,17,33,64,64) bf16 case) and the unfused attention
 * path. Each device result must match the cpu bit for bit or within the
 * row's ULPs, and the fp64 oracle within its NMSE bound. Then the fp64
 * table (tests/parity/f64.c) on all of them plus cuda:kernels=torch and
 * ref-cuda: every fp64 op bit for bit against ref. Skips (77)
 * without a GPU. Usage: test_parity [FAMILY-PREFIX] */
#include <stdio.h>

#include "tests/parity/parity.h"

int main(int argc, char **argv) {
    static const char *specs[] = {"ref",
                                  "cpu",
                                  "cuda",
                                  "cuda:i64=1",
                                  "cuda:norm_smem=0",
                                  "cuda:gemm=unfused",
                                  "cuda:gemm=naive",
                                  "cuda:attn_scratch=4096",
                                  "cuda:attn_scratch=35037",
                                  "cuda:attention=unfused"};
    enum { N = (int)(sizeof specs / sizeof specs[0]) };
    parity_backend bes[N];
    int n = 0, rc = 0;
    for (int i = 0; i < N; i++) {
        drift_err err;
        drift_err_clear(&err);
        drift_backend *be = NULL;
        if (drift_backend_create(specs[i], &be, &err)) {
            if (i == 2 && err.code == DRIFT_E_UNSUPPORTED) {
                printf("SKIP: test_parity: no CUDA device (%s)\n", err.msg);
                for (int j = 0; j < n; j++) drift_backend_free(bes[j].be);
                return 77;
            }
            fprintf(stderr, "test_parity: cannot create backend '%s': %s\n", specs[i], err.msg);
            rc = 1;
            continue;
        }
        bes[n].spec = specs[i];
        bes[n].be = be;
        bes[n].device = i >= 2;
        n++;
    }
    parity_stats st = parity_run(bes, n, argc > 1 ? argv[1] : NULL);
    if (argc <= 1) { /* the fp64 table, bitwise against ref: these backends plus the torch profile and ref-cuda */
        static const char *extra[] = {"cuda:kernels=torch", "ref-cuda"};
        parity_backend all[N + 2];
        int m = 0;
        for (int i = 0; i < n; i++) all[m++] = bes[i];
        for (int i = 0; i < 2; i++) {
            drift_err err;
            drift_err_clear(&err);
            drift_backend *be = NULL;
            if (drift_backend_create(extra[i], &be, &err)) {
                fprintf(stderr, "test_parity: cannot create backend '%s': %s\n", extra[i], err.msg);
                rc = 1;
                continue;
            }
            all[m].spec = extra[i];
            all[m].be = be;
            all[m].device = 1;
            m++;
        }
        parity_stats s64 = parity_run_f64(all, m);
        st.cases += s64.cases, st.checks += s64.checks, st.failed += s64.failed;
        for (int i = n; i < m; i++) drift_backend_free(all[i].be);
    }
    for (int i = 0; i < n; i++) drift_backend_free(bes[i].be);
    printf("test_parity: %ld passed, %ld failed (%ld cases on %d backends, %ld skipped as unsupported)\n",
           st.checks - st.failed, st.failed + rc, st.cases, n, st.skipped);
    return rc || st.failed || st.cases == 0 ? 1 : 0;
}
